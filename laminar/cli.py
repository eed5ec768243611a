"""The ``laminar`` command: topics, produce, consume and cluster operations.

Every command talks to the cluster through :class:`laminar_client.Client`,
bootstrapping from ``--bootstrap`` (comma-separated ``host:port`` gRPC addresses;
default: the ``LAMINAR_BOOTSTRAP`` environment variable, else ``127.0.0.1:7100``,
the first node of ``scripts/local_cluster.sh``). Any error prints one line,
``laminar: error: <message>``, to stderr and exits non-zero (1 for a Laminar or
I/O error, 2 for bad usage, 130 when interrupted); never a traceback.

``laminar node ...`` comes from :func:`laminar.server.cli.register`, when the
server package is installed. Contract for that function: it adds parsers to the
given subparsers object and sets, on each leaf parser, the default ``handler``: a
callable taking the parsed :class:`argparse.Namespace` and returning the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TextIO

import xxhash
from laminar_client import ACKS, Client, ClusterMetadata, MemberInfo

from laminar.errors import InvalidInputError, LaminarError
from laminar.records import Record, encode_batch


def _node_register() -> Callable[[Any], None] | None:
    """``laminar.server.cli.register``, or None before the server package exists.

    Imported by name so that this module type-checks and runs on its own.
    """
    try:
        module = importlib.import_module("laminar.server.cli")
    except ImportError:
        return None
    register: Callable[[Any], None] = module.register
    return register


DEFAULT_BOOTSTRAP = "127.0.0.1:7100"
BOOTSTRAP_ENV = "LAMINAR_BOOTSTRAP"
DEFAULT_BATCH_SIZE = 1_000
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (plus the hint to ask for ``--help``), exit 2."""

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation)."""
    parser = _Parser(
        prog="laminar",
        description="Operate a Laminar cluster: topics, produce, consume, cluster status.",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        metavar="ADDR[,ADDR]",
        help=(
            "gRPC address(es) of any node(s), comma-separated "
            f"(default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="deadline of each call, retries included (default: 30)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_topic_commands(commands)
    _add_produce_command(commands)
    _add_consume_command(commands)
    _add_cluster_commands(commands)
    register_node = _node_register()
    if register_node is not None:
        register_node(commands)
    return parser


def _add_topic_commands(commands: Any) -> None:
    topic = commands.add_parser("topic", help="create, list, describe or delete topics")
    actions = topic.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", help="topic name")
    create.add_argument(
        "--partitions", type=_positive_int, required=True, metavar="N", help="partition count"
    )
    create.add_argument(
        "--replication-factor",
        type=_positive_int,
        required=True,
        metavar="R",
        help="replicas per partition",
    )
    create.add_argument(
        "--retention-bytes",
        type=int,
        default=-1,
        metavar="B",
        help="keep at most this many bytes per partition (default: -1, unlimited)",
    )
    create.add_argument(
        "--retention-ms",
        type=int,
        default=-1,
        metavar="MS",
        help="keep records this many milliseconds (default: -1, unlimited)",
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


def _add_produce_command(commands: Any) -> None:
    produce = commands.add_parser(
        "produce",
        help="write lines from stdin or a file, one record per line",
        description=(
            "Write one record per input line (without its line ending). With "
            "--key-partitioning each line is KEY<separator>VALUE and the partition is "
            "xxh3-64(KEY) modulo the partition count; lines without a separator have no "
            "key and go to partition 0."
        ),
    )
    produce.add_argument("topic", help="topic name")
    where = produce.add_mutually_exclusive_group()
    where.add_argument(
        "--partition", type=_non_negative_int, default=0, metavar="P", help="partition (default 0)"
    )
    where.add_argument(
        "--key-partitioning",
        action="store_true",
        help="read KEY<separator>VALUE lines and choose the partition from the key",
    )
    produce.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="separator between key and value with --key-partitioning (default: tab)",
    )
    produce.add_argument(
        "--file", metavar="F", help="read lines from this file instead of stdin ('-' = stdin)"
    )
    produce.add_argument(
        "--acks",
        choices=sorted(ACKS),
        default="all",
        help="all: a majority stored it (default); leader: the leader stored it; none: no wait",
    )
    produce.add_argument(
        "--batch-size",
        type=_positive_int,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"records per batch (default {DEFAULT_BATCH_SIZE})",
    )
    produce.set_defaults(handler=_produce)


def _add_consume_command(commands: Any) -> None:
    consume = commands.add_parser(
        "consume",
        help="print records of one partition",
        description=(
            "Print the records of one partition, one per line: the value (text), or an "
            "object with topic, partition, offset, timestamp_ms, key and value (json). "
            "Bytes that are not UTF-8 are shown with replacement characters."
        ),
    )
    consume.add_argument("topic", help="topic name")
    consume.add_argument(
        "--partition", type=_non_negative_int, default=0, metavar="P", help="partition (default 0)"
    )
    consume.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help="where to start: the oldest record, the end, or an offset (default earliest)",
    )
    consume.add_argument(
        "--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)"
    )
    consume.add_argument(
        "--max", type=_positive_int, metavar="N", help="stop after N records (default: no limit)"
    )
    consume.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the value only (default); json: one object per record",
    )
    consume.set_defaults(handler=_consume)


def _add_cluster_commands(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="cluster status and node operations")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)

    status = actions.add_parser(
        "status", help="members (state, weight, zone) and partition leaders and replicas"
    )
    status.set_defaults(handler=_cluster_status)

    drain = actions.add_parser("drain", help="set a node's weight to 0 so its replicas move away")
    drain.add_argument("node", help="node id or gRPC address")
    drain.set_defaults(handler=_cluster_drain)

    weight = actions.add_parser("set-weight", help="set a node's relative capacity")
    weight.add_argument("node", help="node id or gRPC address")
    weight.add_argument("weight", type=_non_negative_float, help="weight (>= 0; 0 drains)")
    weight.set_defaults(handler=_cluster_set_weight)

    zone = actions.add_parser("set-zone", help="set a node's failure-domain label")
    zone.add_argument("node", help="node id or gRPC address")
    zone.add_argument("zone", help="zone label")
    zone.set_defaults(handler=_cluster_set_zone)


# --------------------------------------------------------------------------- commands


def _client(args: argparse.Namespace) -> Client:
    return Client(args.bootstrap, timeout_s=args.timeout)


def _out() -> TextIO:
    return sys.stdout


def _topic_create(args: argparse.Namespace) -> int:
    with _client(args) as client:
        topic = client.create_topic(
            args.name,
            args.partitions,
            args.replication_factor,
            retention_bytes=args.retention_bytes,
            retention_ms=args.retention_ms,
        )
    config = topic.config
    print(
        f"created topic {topic.name}: partitions={config.partitions} "
        f"replication_factor={config.replication_factor}",
        file=_out(),
    )
    return 0


def _topic_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        topics = client.list_topics()
    rows = [[t.name, str(t.config.partitions), str(t.config.replication_factor)] for t in topics]
    _table(["TOPIC", "PARTITIONS", "RF"], rows)
    return 0


def _topic_describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
        metadata = client.metadata(refresh=True)
    topic = metadata.topic(args.name)
    config = topic.config
    print(
        f"topic {topic.name}: partitions={config.partitions} "
        f"replication_factor={config.replication_factor} "
        f"retention_bytes={_limit(config.retention_bytes)} "
        f"retention_ms={_limit(config.retention_ms)}",
        file=_out(),
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
    _table(["PARTITION", "LEADER", "REPLICAS", "VOTERS", "HIGH_WATERMARK"], rows)
    return 0


def _topic_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        client.delete_topic(args.name)
    print(f"deleted topic {args.name}", file=_out())
    return 0


_BATCH_BYTES_TARGET = 1024 * 1024


def _produce(args: argparse.Namespace) -> int:
    with _client(args) as client, _open_input(args.file) as lines:
        partitions = 1
        if args.key_partitioning:
            partitions = client.metadata().topic(args.topic).config.partitions
        pending: dict[int, tuple[list[bytes | None], list[bytes | None]]] = {}
        written: dict[int, tuple[int, int, int]] = {}  # partition -> (count, first, last)
        sizes: dict[int, int] = {}  # partition -> bytes pending

        def flush(partition: int) -> None:
            keys, values = pending.pop(partition)
            batch = encode_batch(values, keys=keys, timestamps_ms=_now_ms())
            offsets = client.produce(args.topic, partition, [batch], acks=args.acks)
            base = offsets[0] if offsets else -1
            count, first, _ = written.get(partition, (0, base, base))
            written[partition] = (count + len(values), first, base + len(values) - 1)

        for line in lines:
            key, value = _split_line(line, args.key_separator if args.key_partitioning else None)
            if not args.key_partitioning:
                partition = args.partition
            elif key is None:
                partition = 0
            else:
                partition = xxhash.xxh3_64_intdigest(key) % partitions
            keys, values = pending.setdefault(partition, ([], []))
            keys.append(key)
            values.append(value)
            sizes[partition] = sizes.get(partition, 0) + len(line)
            # Flush by count, and by bytes so that a batch stays far below the
            # server's batch limit whatever the line lengths.
            if len(values) >= args.batch_size or sizes[partition] >= _BATCH_BYTES_TARGET:
                sizes.pop(partition)
                flush(partition)
        for partition in sorted(pending):
            flush(partition)
    out = _out()
    if not written:
        print("produced 0 records", file=out)
    for partition, (count, first, last) in sorted(written.items()):
        where = f" at offsets {first}..{last}" if first >= 0 else " (offsets not reported)"
        print(f"produced {count} records to {args.topic}/{partition}{where}", file=out)
    return 0


def _consume(args: argparse.Namespace) -> int:
    out = _out()
    with _client(args) as client:
        start = _start_offset(client, args.topic, args.partition, args.start)
        records: Iterator[Record] = client.records(
            args.topic, args.partition, start, follow=args.follow
        )
        for printed, record in enumerate(records, start=1):
            out.write(_format_record(record, args))
            out.write("\n")
            if args.follow:
                out.flush()
            if args.max is not None and printed >= args.max:
                break
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        description = client.describe_cluster()
    print(f"cluster {description.cluster_id} (answered by {description.node_id})", file=_out())
    _table(
        ["NODE", "STATE", "WEIGHT", "ZONE", "GRPC_ADDRESS"],
        [
            [m.node_id, m.state, f"{m.weight:g}", m.zone or "-", m.grpc_address or "-"]
            for m in description.members
        ],
    )
    print(file=_out())
    _table(
        ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "VOTERS", "IN_SYNC", "UNDER_REPLICATED"],
        [
            [
                p.topic,
                str(p.partition),
                p.leader or "-",
                ",".join(p.replicas),
                ",".join(p.voters) or "-",
                ",".join(p.in_sync) or "-",
                "yes" if p.under_replicated else "no",
            ]
            for p in description.partitions
        ],
    )
    under = sum(p.under_replicated for p in description.partitions)
    print(f"\n{under} of {len(description.partitions)} partitions under-replicated", file=_out())
    if description.fenced:
        print("\nreplicas out of service after a storage failure:", file=_out())
        _table(
            ["NODE", "TOPIC", "PARTITION", "FOR_S", "REASON"],
            [
                [f.node_id, f.topic, str(f.partition), f"{f.fenced_for_ms / 1000:.0f}", f.reason]
                for f in description.fenced
            ],
        )
    return 0


def _cluster_drain(args: argparse.Namespace) -> int:
    return _update_node(args, weight=0.0, zone=None)


def _cluster_set_weight(args: argparse.Namespace) -> int:
    return _update_node(args, weight=args.weight, zone=None)


def _cluster_set_zone(args: argparse.Namespace) -> int:
    return _update_node(args, weight=None, zone=args.zone)


def _update_node(args: argparse.Namespace, *, weight: float | None, zone: str | None) -> int:
    with _client(args) as client:
        address = _node_address(client.metadata(refresh=True), args.node)
        member = client.update_node(address, weight=weight, zone=zone)
    print(
        f"node {member.node_id}: weight={member.weight:g} zone={member.zone or '-'} "
        f"state={member.state}",
        file=_out(),
    )
    return 0


# --------------------------------------------------------------------------- helpers


def _node_address(metadata: ClusterMetadata, node: str) -> str:
    """The gRPC address of a member given by node id or by address."""
    member: MemberInfo | None = metadata.members.get(node)
    if member is None:
        member = next((m for m in metadata.members.values() if m.grpc_address == node), None)
    if member is None:
        known = ", ".join(sorted(metadata.members)) or "none"
        raise InvalidInputError(f"unknown node {node!r} (members: {known})")
    if not member.grpc_address:
        raise InvalidInputError(f"node {member.node_id} has no known gRPC address")
    return member.grpc_address


def _start_offset(client: Client, topic: str, partition: int, start: str) -> int:
    if start in ("earliest", "latest"):
        marks = client.watermarks(topic, partition)
        return marks.log_start_offset if start == "earliest" else marks.high_watermark
    try:
        offset = int(start)
    except ValueError:
        raise InvalidInputError(
            f"--from must be earliest, latest or an offset, got {start!r}"
        ) from None
    if offset < 0:
        raise InvalidInputError(f"--from offset must be >= 0, got {offset}")
    return offset


def _format_record(record: Record, args: argparse.Namespace) -> str:
    if args.format == "text":
        return _text(record.value) or ""
    return json.dumps(
        {
            "topic": args.topic,
            "partition": args.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "key": _text(record.key),
            "value": _text(record.value),
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _split_line(line: str, separator: str | None) -> tuple[bytes | None, bytes]:
    line = line.rstrip("\r\n")
    if separator is not None and separator in line:
        key, value = line.split(separator, 1)
        return key.encode(), value.encode()
    return None, line.encode()


class _open_input:  # noqa: N801 - used like open()
    """stdin, or the named file, as a context manager of text lines."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._file: IO[str] | None = None

    def __enter__(self) -> IO[str]:
        if self._path is None or self._path == "-":
            return sys.stdin
        self._file = open(self._path, encoding="utf-8")
        return self._file

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _limit(value: int) -> str:
    return "unlimited" if value < 0 else str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    out = _out()
    for row in [header, *rows]:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


# --------------------------------------------------------------------------- entry


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``laminar`` command; the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `laminar consume ... | head`): not an error.
        _silence_stdout()
        return 0
    except (LaminarError, OSError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"laminar: error: {message}", file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
