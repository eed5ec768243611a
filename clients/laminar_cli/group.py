"""``laminar group list|describe|reset-offsets|delete``: consumer groups."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from laminar_client import Client, PartitionOffsets

from laminar.errors import GroupNotEmptyError, InvalidInputError, LaminarError
from laminar_cli.common import (
    EXIT_ERROR,
    connect,
    non_negative_int,
    one_line,
    out,
    partition_count,
    table,
    warn,
)


def register(commands: Any) -> None:
    group = commands.add_parser(
        "group", help="list, describe, reset the offsets of, or delete consumer groups"
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    formats = ("text", "json")

    listing = actions.add_parser("list", help="every group: state, members, coordinator node")
    listing.add_argument(
        "--format", choices=formats, default="text", help="output format (default: text)"
    )
    listing.set_defaults(handler=_group_list)

    describe = actions.add_parser(
        "describe",
        help="a group's state, coordinator, members and total lag and, per partition, "
        "committed offset, log range, lag, owner, its instance id and host, and "
        "assignment epoch (exit status 1 when no such group exists)",
    )
    describe.add_argument("group", help="group name")
    describe.add_argument(
        "--format", choices=formats, default="text", help="output format (default: text)"
    )
    describe.set_defaults(handler=_group_describe)

    reset = actions.add_parser(
        "reset-offsets",
        help="set the committed offsets of a group without members (refused while it has some)",
    )
    reset.add_argument("group", help="group name")
    reset.add_argument(
        "--to",
        required=True,
        choices=("earliest", "latest", "timestamp", "offset"),
        help="earliest: log start; latest: high watermark; timestamp: first record at or "
        "after --timestamp-ms (else the high watermark); offset: --offset, clamped to the log",
    )
    reset.add_argument(
        "--timestamp-ms", type=non_negative_int, metavar="MS", help="for --to timestamp"
    )
    reset.add_argument("--offset", type=non_negative_int, metavar="N", help="for --to offset")
    reset.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC",
        help="reset only this topic (repeatable; default: every topic of the group)",
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="print the new offsets without applying them"
    )
    reset.set_defaults(handler=_group_reset_offsets)

    delete = actions.add_parser(
        "delete", help="delete a group and its commits (refused while it has members)"
    )
    delete.add_argument("group", help="group name")
    delete.set_defaults(handler=_group_delete)


def _group_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        groups = client.list_groups()
    if args.format == "json":
        rows = [
            {
                "group": g.group,
                "state": g.state,
                "members": g.member_count,
                "coordinator": g.coordinator,
            }
            for g in groups
        ]
        print(json.dumps(rows), file=out())
        return 0
    table(
        ["GROUP", "STATE", "MEMBERS", "COORDINATOR"],
        [[g.group, g.state, str(g.member_count), g.coordinator] for g in groups],
    )
    return 0


def _group_describe(args: argparse.Namespace) -> int:
    with connect(args) as client:
        described = client.describe_group(args.group)
        if described.state == "dead":
            print(
                f"laminar: error: group {args.group!r} does not exist "
                "(`laminar group list` shows the groups)",
                file=sys.stderr,
            )
            return EXIT_ERROR
        ranges = _log_ranges(client, sorted({p.topic for p in described.partitions}))
    members = {m.member_id: m for m in described.members}
    rows: list[dict[str, Any]] = []
    for p in described.partitions:
        offsets = ranges.get((p.topic, p.partition))
        high = offsets.high_watermark if offsets is not None else None
        start = offsets.log_start_offset if offsets is not None else None
        base = p.committed_offset if p.committed_offset is not None else start
        rows.append(
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed_offset,
                "log_start": start,
                "high_watermark": high,
                "lag": None if high is None or base is None else max(0, high - base),
                "owner": p.owner,
                "instance_id": members[p.owner].instance_id if p.owner in members else None,
                "host": members[p.owner].host if p.owner in members else None,
                "assignment_epoch": p.assignment_epoch,
            }
        )
    total_lag = sum(row["lag"] or 0 for row in rows)
    summary = {
        "group": described.group,
        "state": described.state,
        "coordinator": described.coordinator,
        "group_epoch": described.group_epoch,
        "members": len(described.members),
        "total_lag": total_lag,
    }
    if args.format == "json":
        print(json.dumps({**summary, "partitions": rows}), file=out())
        return 0
    print(" ".join(f"{key}={value}" for key, value in summary.items()), file=out())
    header = ["TOPIC", "PARTITION", "COMMITTED", "LOG_START", "HIGH_WATERMARK", "LAG"]
    header += ["OWNER", "INSTANCE", "HOST", "EPOCH"]
    table(header, [[_cell(value) for value in row.values()] for row in rows])
    return 0


def _log_ranges(client: Client, topics: Sequence[str]) -> dict[tuple[str, int], PartitionOffsets]:
    """Log start and high watermark of every partition of ``topics`` (a topic that is
    gone is left out: its rows show ``-``)."""
    found: dict[tuple[str, int], PartitionOffsets] = {}
    for topic in topics:
        try:
            count = partition_count(client, topic)
            for partition, offsets in client.list_offsets(topic, range(count), leader=True).items():
                found[(topic, partition)] = offsets
        except LaminarError as error:
            warn(f"{topic}: {one_line(error)}")
    return found


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _group_reset_offsets(args: argparse.Namespace) -> int:
    if args.to == "timestamp" and args.timestamp_ms is None:
        raise InvalidInputError("--to timestamp needs --timestamp-ms")
    if args.to == "offset" and args.offset is None:
        raise InvalidInputError("--to offset needs --offset")
    with connect(args) as client:
        described = client.describe_group(args.group)
        if described.members and not args.dry_run:
            raise GroupNotEmptyError(args.group, len(described.members))
        topics = args.topic or sorted({*described.topics, *(p.topic for p in described.partitions)})
        if not topics:
            raise InvalidInputError(f"group {args.group} has no topics: name one with --topic")
        plan: dict[tuple[str, int], int] = {}
        for topic in topics:
            count = partition_count(client, topic)
            listed = client.list_offsets(
                topic, range(count), timestamp_ms=args.timestamp_ms, leader=True
            )
            for partition, offsets in listed.items():
                plan[(topic, partition)] = _reset_target(args, offsets)
        if not args.dry_run:
            client.reset_offsets(args.group, plan)
    verb = "would reset" if args.dry_run else "reset"
    print(f"{verb} {len(plan)} partition(s) of group {args.group}", file=out())
    table(
        ["TOPIC", "PARTITION", "NEW_OFFSET"],
        [
            [topic, str(partition), str(offset)]
            for (topic, partition), offset in sorted(plan.items())
        ],
    )
    return 0


def _reset_target(args: argparse.Namespace, offsets: PartitionOffsets) -> int:
    if args.to == "earliest":
        return offsets.log_start_offset
    if args.to == "latest":
        return offsets.high_watermark
    if args.to == "timestamp":
        found = offsets.offset_for_timestamp
        return offsets.high_watermark if found is None else found
    return int(min(max(args.offset, offsets.log_start_offset), offsets.high_watermark))


def _group_delete(args: argparse.Namespace) -> int:
    with connect(args) as client:
        client.delete_group(args.group)
    print(f"deleted group {args.group}", file=out())
    return 0
