"""``laminar topic create|list|describe|delete``."""

from __future__ import annotations

import argparse
from typing import Any

from laminar_client import TopicMetadata

from laminar.errors import InvalidInputError
from laminar_cli.common import connect, out, positive_int, table


def register(commands: Any) -> None:
    topic = commands.add_parser("topic", help="create, list, describe or delete topics")
    actions = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create",
        help="create a topic",
        description=(
            "Create a topic. A setting left out takes the cluster's default, and "
            "'topic describe' marks it so: --partitions the nodes' [service] "
            "default_partitions (1), --replication-factor their "
            "default_replication_factor (3) capped at the live nodes with weight > 0, "
            "retention unlimited."
        ),
    )
    create.add_argument("name", help="topic name")
    create.add_argument(
        "--partitions",
        type=positive_int,
        metavar="N",
        help="partition count (default: the cluster's, 1 unless the nodes set another)",
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="R",
        help=(
            "replicas per partition (default: the cluster's, 3 unless the nodes set "
            "another, capped at the live nodes with weight > 0)"
        ),
    )
    create.add_argument(
        "--retention-bytes",
        type=int,
        metavar="B",
        help="keep at most this many bytes per partition; -1: unlimited (default)",
    )
    create.add_argument(
        "--retention-ms",
        type=int,
        metavar="MS",
        help="keep records this many milliseconds; -1: unlimited (default)",
    )
    create.set_defaults(handler=_topic_create)

    listing = actions.add_parser("list", help="list topics")
    listing.set_defaults(handler=_topic_list)

    describe = actions.add_parser("describe", help="show a topic's settings and partitions")
    describe.add_argument("name", help="topic name")
    describe.set_defaults(handler=_topic_describe)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name", help="topic name")
    delete.set_defaults(handler=_topic_delete)


def _topic_create(args: argparse.Namespace) -> int:
    with connect(args) as client:
        for option, value in (("bytes", args.retention_bytes), ("ms", args.retention_ms)):
            if value is not None and (value < -1 or value == 0):
                raise InvalidInputError(f"--retention-{option} must be > 0 or -1, got {value}")
        # -1 is unlimited, the cluster's default: left unset, as it is when not given.
        retention_bytes = args.retention_bytes if args.retention_bytes != -1 else None
        retention_ms = args.retention_ms if args.retention_ms != -1 else None
        topic = client.create_topic(
            args.name,
            args.partitions,
            args.replication_factor,
            retention_bytes=retention_bytes,
            retention_s=None if retention_ms is None else retention_ms / 1000,
        )
    config = topic.config
    print(
        f"created topic {topic.name}: "
        f"{_setting(topic, 'partitions', str(config.partitions))} "
        f"{_setting(topic, 'replication_factor', str(config.replication_factor))}",
        file=out(),
    )
    return 0


def _topic_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        topics = client.list_topics()
    rows = [[t.name, str(t.config.partitions), str(t.config.replication_factor)] for t in topics]
    table(["TOPIC", "PARTITIONS", "RF"], rows)
    return 0


def _topic_describe(args: argparse.Namespace) -> int:
    with connect(args) as client:
        metadata = client.metadata(refresh=True)
    topic = metadata.topic(args.name)
    config = topic.config
    print(
        f"topic {topic.name}: "
        f"{_setting(topic, 'partitions', str(config.partitions))} "
        f"{_setting(topic, 'replication_factor', str(config.replication_factor))} "
        f"{_setting(topic, 'retention_bytes', _limit(config.retention_bytes))} "
        f"{_setting(topic, 'retention_ms', _limit(config.retention_ms))}",
        file=out(),
    )
    rows = [
        [
            str(p.partition),
            p.leader or "-",
            ",".join(p.replicas),
            ",".join(p.voters) or "-",
            str(p.high_watermark) if p.high_watermark >= 0 else "-",
        ]
        for p in topic.partitions
    ]
    table(["PARTITION", "LEADER", "REPLICAS", "VOTERS", "HIGH_WATERMARK"], rows)
    return 0


def _topic_delete(args: argparse.Namespace) -> int:
    with connect(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name}", file=out())
    return 0


def _setting(topic: TopicMetadata, name: str, value: str) -> str:
    """``name=value``, marked ``(default)`` when the cluster's default set it."""
    return f"{name}={value}" + (" (default)" if name in topic.defaults else "")


def _limit(value: int) -> str:
    return "unlimited" if value < 0 else str(value)
