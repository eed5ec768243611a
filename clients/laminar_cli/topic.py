"""``laminar topic create|list|describe|alter|add-partitions|delete``."""

from __future__ import annotations

import argparse
import math
from fractions import Fraction
from typing import Any

from laminar_client import TopicMetadata, moved_key_fraction
from laminar_client.metadata import AlteredTopic

from laminar.errors import InvalidInputError
from laminar.topic_settings import ALTERABLE_SETTINGS, CLEANUP_POLICIES, TOPIC_SETTINGS
from laminar_cli.common import connect, non_negative_int, out, positive_int, table

_ARROW = "\u2192"

# (option, setting, argparse type, metavar, help) of every setting create and alter take
# besides --partitions; "-1" in a help text is the value that means "no limit".
_SETTING_OPTIONS: tuple[tuple[str, str, Any, str, str], ...] = (
    (
        "--retention-bytes",
        "retention_bytes",
        int,
        "B",
        "keep at most this many bytes per partition; -1: unlimited (the default)",
    ),
    (
        "--retention-ms",
        "retention_ms",
        int,
        "MS",
        "keep records this many milliseconds; -1: unlimited (the default)",
    ),
    (
        "--cleanup-policy",
        "cleanup_policy",
        str,
        "POLICY",
        "delete (by retention, the default), compact (keyed compaction: keep the newest "
        "record of each key; retention ignored) or compact,delete (both)",
    ),
    (
        "--delete-retention-ms",
        "delete_retention_ms",
        non_negative_int,
        "MS",
        "compacted topics: how long a tombstone (a keyed record without a value) stays "
        "readable after compaction first covered it (default 86400000, a day)",
    ),
    (
        "--min-compaction-lag-ms",
        "min_compaction_lag_ms",
        non_negative_int,
        "MS",
        "compacted topics: records younger than this are never compacted (default 0)",
    ),
    (
        "--max-compaction-lag-ms",
        "max_compaction_lag_ms",
        int,
        "MS",
        "compacted topics: a record not compacted after this long makes compaction run "
        "whatever the dirty ratio; -1: no such bound (the default)",
    ),
    (
        "--min-cleanable-dirty-ratio",
        "min_cleanable_dirty_ratio",
        float,
        "RATIO",
        "compacted topics: compaction runs once this share of the log is not yet "
        "compacted, in (0, 1] (default 0.5)",
    ),
)


def register(commands: Any) -> None:
    topic = commands.add_parser(
        "topic", help="create, list, describe, alter, add partitions to or delete topics"
    )
    actions = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create",
        help="create a topic",
        description=(
            "Create a topic. A setting left out takes the cluster's default, and "
            "'topic describe' marks it (cluster default): --partitions the nodes' "
            "[service] default_partitions (1), --replication-factor their "
            "default_replication_factor (3) capped at the live nodes with weight > 0, "
            "retention unlimited, cleanup policy delete."
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
    _add_setting_options(create)
    create.set_defaults(handler=_topic_create)

    listing = actions.add_parser("list", help="list topics")
    listing.set_defaults(handler=_topic_list)

    describe = actions.add_parser(
        "describe",
        help="show a topic's settings and partitions",
        description=(
            "Show every setting of a topic with where it came from: (topic) when it was "
            "given at creation or by 'topic alter', (cluster default) when the cluster's "
            "default was taken at creation or by 'topic alter --reset'; then each "
            "partition's leader, replicas (the target placement) and voters (who "
            "replicates now: while a replication-factor change moves replicas, the two "
            "differ)."
        ),
    )
    describe.add_argument("name", help="topic name")
    describe.set_defaults(handler=_topic_describe)

    alter = actions.add_parser(
        "alter",
        help="change a topic's settings (retention, replication factor, cleanup policy)",
        description=(
            "Change settings of a topic on every node, without a restart; prints each "
            "changed setting as old -> new. The nodes check every value and refuse the "
            "whole change naming the field. Retention applies at the nodes' next "
            "retention check (within 5 s); a new replication factor moves replicas one "
            "at a time ('topic describe' shows voters against replicas meanwhile). "
            "The partition count is raised by 'topic add-partitions'."
        ),
    )
    alter.add_argument("name", help="topic name")
    alter.add_argument(
        "--replication-factor",
        type=positive_int,
        metavar="R",
        help="replicas per partition, at most the live nodes with weight > 0 (and 7)",
    )
    _add_setting_options(alter)
    alter.add_argument(
        "--reset",
        nargs="+",
        type=_setting_name,
        default=[],
        metavar="FIELD",
        help=(
            "settings that go back to the cluster's default, by name: "
            + ", ".join(ALTERABLE_SETTINGS)
            + " (dashes or underscores)"
        ),
    )
    alter.add_argument(
        "--dry-run",
        action="store_true",
        help="only check the change and show what it would be",
    )
    alter.set_defaults(handler=_topic_alter)

    add = actions.add_parser(
        "add-partitions",
        help="raise a topic's partition count (keyed records then map elsewhere)",
        description=(
            "Raise a topic's partition count to --to (never lowered); the new partitions "
            "are placed and founded like a new topic's. Keyed records map to "
            "hash(key) mod partitions, so from then on a share of the keys go to "
            "another partition, as in Kafka (the command prints the exact share): "
            "per-key order holds within each partition, not across the change. "
            "Producers see the new count within their metadata_max_age_s (60 s) or at "
            "their first error, group consumers one heartbeat after their coordinator "
            "applies it, Spark streams at their next trigger."
        ),
    )
    add.add_argument("name", help="topic name")
    add.add_argument(
        "--to",
        type=positive_int,
        required=True,
        metavar="N",
        help="the new partition count, more than the current one (at most 10000)",
    )
    add.add_argument(
        "--dry-run", action="store_true", help="only check, and show what would change"
    )
    add.set_defaults(handler=_topic_add_partitions)

    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name", help="topic name")
    delete.set_defaults(handler=_topic_delete)


def _add_setting_options(parser: argparse.ArgumentParser) -> None:
    for option, _setting, kind, metavar, text in _SETTING_OPTIONS:
        if option == "--cleanup-policy":
            parser.add_argument(option, choices=CLEANUP_POLICIES, metavar=metavar, help=text)
        else:
            parser.add_argument(option, type=kind, metavar=metavar, help=text)


def _setting_name(text: str) -> str:
    name = text.replace("-", "_")
    if name not in ALTERABLE_SETTINGS:
        raise argparse.ArgumentTypeError(
            f"not a resettable setting: {text!r} (one of {', '.join(ALTERABLE_SETTINGS)})"
        )
    return name


def _given_settings(args: argparse.Namespace) -> dict[str, int | float | str]:
    """The settings given on the command line (besides partitions), checked."""
    settings: dict[str, int | float | str] = {}
    for option, setting, _kind, _metavar, _text in _SETTING_OPTIONS:
        value = getattr(args, setting)
        if value is None:
            continue
        if setting in ("retention_bytes", "retention_ms") and (value < -1 or value == 0):
            raise InvalidInputError(f"{option} must be > 0 or -1, got {value}")
        if setting == "max_compaction_lag_ms" and value < -1:
            raise InvalidInputError(f"{option} must be >= 0 or -1, got {value}")
        if setting == "min_cleanable_dirty_ratio" and not 0 < value <= 1:
            raise InvalidInputError(f"{option} must be in (0, 1], got {value}")
        settings[setting] = value
    return settings


def _topic_create(args: argparse.Namespace) -> int:
    settings = _given_settings(args)
    # -1 is unlimited, the cluster's default: left unset, as it is when not given.
    for setting in ("retention_bytes", "retention_ms"):
        if settings.get(setting) == -1:
            del settings[setting]
    with connect(args) as client:
        topic = client.create_topic(
            args.name, args.partitions, args.replication_factor, settings=settings
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
    stream = out()
    print(f"topic {topic.name}:", file=stream)
    for name in TOPIC_SETTINGS:
        print(f"  {_setting(topic, name, _value(name, getattr(topic.config, name)))}", file=stream)
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
    moving = [p for p in topic.partitions if p.voters and set(p.voters) != set(p.replicas)]
    if moving:
        print(
            f"{len(moving)} of {len(topic.partitions)} partitions are moving replicas "
            "(VOTERS towards REPLICAS, one node at a time)",
            file=stream,
        )
    return 0


def _topic_alter(args: argparse.Namespace) -> int:
    settings = _given_settings(args)
    if args.replication_factor is not None:
        settings["replication_factor"] = args.replication_factor
    if not settings and not args.reset:
        raise InvalidInputError(
            "nothing to change: give a setting (--retention-ms, ...) or --reset FIELD"
        )
    with connect(args) as client:
        altered = client.alter_topic(
            args.name, set=settings, reset=args.reset, validate_only=args.dry_run
        )
    _print_alteration(altered, args.dry_run)
    return 0


def _print_alteration(altered: AlteredTopic, dry_run: bool) -> None:
    stream = out()
    name = altered.topic.name
    changes = altered.changes()
    if not changes:
        print(f"topic {name}: nothing changes (the settings already are so)", file=stream)
        return
    print(f"{'would alter' if dry_run else 'altered'} topic {name}:", file=stream)
    before, after = altered.previous, altered.topic
    for setting, old, new in changes:
        print(
            f"  {setting}: {_value(setting, old)} ({before.source(setting)}) {_ARROW} "
            f"{_value(setting, new)} ({after.source(setting)})",
            file=stream,
        )
    if any(setting == "replication_factor" for setting, _, _ in changes) and not dry_run:
        print(
            "replicas move one node at a time; 'laminar topic describe "
            f"{name}' shows the voters against the target replicas",
            file=stream,
        )


def _topic_add_partitions(args: argparse.Namespace) -> int:
    with connect(args) as client:
        added = client.create_partitions(args.name, args.to, validate_only=args.dry_run)
    stream = out()
    old, new = added.previous, args.to
    verb = "would grow" if args.dry_run else "grew"
    print(f"topic {added.topic.name} {verb} {old} {_ARROW} {new} partitions", file=stream)
    rows = [[str(p.partition), ",".join(p.replicas) or "-"] for p in added.added]
    if rows:
        table(["PARTITION", "REPLICAS"], rows)
    print(_key_move_warning(old, new), file=stream)
    return 0


def _key_move_warning(old: int, new: int) -> str:
    """What adding partitions does to keyed records, with the exact moved share."""
    moved = moved_key_fraction(old, new)
    return (
        f"warning: keyed records now map by modulo {new}: {_percent(moved)} of keys move "
        f"to another partition (exactly {moved.numerator}/{moved.denominator}: the "
        f"residues r < lcm({old},{new})={math.lcm(old, new)} with r mod {old} != r mod "
        f"{new}). Per-key order holds within each partition, not across the change; "
        "consumers that need a key's records in one partition must let the old "
        "partitions drain first."
    )


def _percent(share: Fraction) -> str:
    percent = share * 100
    if percent.denominator == 1:
        return f"{percent.numerator}%"
    return f"{float(percent):.1f}%"


def _topic_delete(args: argparse.Namespace) -> int:
    with connect(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name}", file=out())
    return 0


def _setting(topic: TopicMetadata, name: str, value: str) -> str:
    """``name=value (source)``: ``(topic)`` or ``(cluster default)``."""
    return f"{name}={value} ({topic.source(name)})"


def _value(name: str, value: object) -> str:
    if name in ("retention_bytes", "retention_ms"):
        return "unlimited" if isinstance(value, int) and value < 0 else str(value)
    if name == "max_compaction_lag_ms" and value == -1:
        return "none"
    return str(value)
