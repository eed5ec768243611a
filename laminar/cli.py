"""The ``laminar`` command: topics, produce, consume, consumer groups and cluster operations.

Every command talks to the cluster through :class:`laminar_client.Client`,
bootstrapping from ``--bootstrap`` (comma-separated ``host:port`` gRPC addresses;
default: the ``LAMINAR_BOOTSTRAP`` environment variable, else ``127.0.0.1:7100``,
the first node of ``scripts/local_cluster.sh``). Any error prints one line,
``laminar: error: <message>``, to stderr and exits non-zero (1 for a Laminar or
I/O error, 2 for bad usage, 130 when interrupted); never a traceback. When every
bootstrap address refuses the connection (nothing listens there) a command fails
within about a second, saying so and how to start a local cluster (and so when
every TLS handshake fails, saying why: ``--tls-ca``, ``--tls-cert``, ``--tls-key``
or ``LAMINAR_TLS_CA`` etc. give the CA and client certificate); errors that can
pass (a node starting, an election) are retried until ``--timeout``.

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
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any, TextIO

from laminar_client import (
    ACKS,
    Client,
    ClusterMetadata,
    Consumer,
    ConsumerRecord,
    GossipKeyring,
    MemberInfo,
    NodeDisk,
    PartitionOffsets,
    Producer,
    RecordMetadata,
    TlsOptions,
    TopicMetadata,
)
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S
from laminar_client.tls import TLS_ENV
from laminar_client.transport import read_token_file

from laminar.errors import (
    ClusterUnreachableError,
    GroupNotEmptyError,
    InvalidInputError,
    LaminarError,
    RequestTimeoutError,
)
from laminar.membership.keyring import (
    KeyringState,
    format_key,
    generate_key,
    key_fingerprint,
    parse_key,
    save_keyring,
)
from laminar.rolling import expand_command, rolling_restart
from laminar.security.acl import OPERATIONS as ACL_OPERATIONS
from laminar.security.acl import Acl, AclFilter


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
TOKEN_ENV = "LAMINAR_TOKEN"
LOCAL_CLUSTER_HINT = (
    "`scripts/local_cluster.sh start` (it prints the export LAMINAR_BOOTSTRAP=... line "
    "to use), or give running nodes' gRPC addresses in --bootstrap or $LAMINAR_BOOTSTRAP."
)
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
        # No abbreviated global options: "--to" of a subcommand must not read as
        # an ambiguous "--token".
        allow_abbrev=False,
        description="Operate a Laminar cluster: topics, produce, consume, groups, cluster status.",
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
        help=(
            "deadline of each call, retries included (default: 30); a call gives up "
            "within about a second when every bootstrap address refuses the connection"
        ),
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        metavar="TOKEN",
        help=(
            "bearer token sent with every call (default: $LAMINAR_TOKEN); see "
            "`laminar token create`. Without one the command calls as User:ANONYMOUS"
        ),
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the bearer token from this file (its first line) instead of --token",
    )
    _add_tls_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_topic_commands(commands)
    _add_produce_command(commands)
    _add_consume_command(commands)
    _add_cluster_commands(commands)
    _add_group_commands(commands)
    _add_partition_commands(commands)
    _add_acl_commands(commands)
    _add_token_commands(commands)
    register_node = _node_register()
    if register_node is not None:
        register_node(commands)
    return parser


def _add_topic_commands(commands: Any) -> None:
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
        type=_positive_int,
        metavar="N",
        help="partition count (default: the cluster's, 1 unless the nodes set another)",
    )
    create.add_argument(
        "--replication-factor",
        type=_positive_int,
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


def _add_produce_command(commands: Any) -> None:
    produce = commands.add_parser(
        "produce",
        help="write lines from stdin or a file, one record per line",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Write one record per input line (without its line ending) through the\n"
            "batching producer (laminar_client.Producer): records are batched per\n"
            "partition (up to 1 MiB, sent within 5 ms of a batch's first record), several\n"
            "batches are in flight, and with --acks all retries never duplicate a record.\n"
            "\n"
            "Partition: --partition P (default 0). With --key-partitioning each line is\n"
            "KEY<separator>VALUE and goes to laminar_client.key_partition(KEY, partitions)\n"
            "(xxh3-64 of the key modulo the partition count, as every Laminar writer does);\n"
            "a line without the separator has no key and goes where the producer puts\n"
            "keyless records: one partition chosen at random, until about 1 MiB went to it,\n"
            "then another (the sticky partitioner).\n"
            "\n"
            "At the end it prints one line per partition written to: 'produced N records\n"
            "to TOPIC/P at offsets A..B'. Each record must be acknowledged within --timeout.\n"
            "If a record fails (or a line cannot be sent), it stops reading input, waits for\n"
            "the records already sent, prints the summary and one error line, and exits 1.\n"
            f"Ctrl-C stops reading, waits up to {_INTERRUPT_GRACE_S:g} s for the records "
            "already sent, prints\nthe summary and exits 130."
        ),
    )
    produce.add_argument("topic", help="topic name")
    where = produce.add_mutually_exclusive_group()
    where.add_argument(
        "--partition", type=_non_negative_int, metavar="P", help="partition (default 0)"
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
        help=(
            "all: a majority stored it, written once even when retried (default); "
            "leader: the leader stored it; none: answered at once, nothing promised"
        ),
    )
    produce.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help=(
            "deprecated and ignored: the producer batches by bytes (1 MiB) and time "
            "(5 ms), not by record count"
        ),
    )
    _add_progress_options(produce, "produced")
    produce.set_defaults(handler=_produce)


def _add_consume_command(commands: Any) -> None:
    consume = commands.add_parser(
        "consume",
        help="print records of one or more partitions",
        description=(
            "Print the records of one or more partitions of a topic, one per line: the "
            "value (text), or an object with topic, partition, offset, timestamp_ms, key "
            "and value (json). Bytes that are not UTF-8 are shown with replacement "
            "characters. Without --follow it stops at the end each partition had when "
            "the command started (its high watermark); with --follow it waits for new "
            "records until interrupted. Records of several partitions are interleaved, "
            "each partition's in order."
        ),
    )
    consume.add_argument("topic", help="topic name")
    consume.add_argument(
        "--partition",
        type=_partition_list,
        action="append",
        metavar="P[,P...]",
        help="partition(s) to read; repeat or comma-separate for several (default 0)",
    )
    consume.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help=(
            "where to start in each partition: the oldest record, the end, or an offset "
            "between the two (default earliest)"
        ),
    )
    consume.add_argument(
        "--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)"
    )
    consume.add_argument(
        "--max",
        type=_positive_int,
        metavar="N",
        help="stop after N records in all (default: no limit)",
    )
    consume.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the value only (default); json: one object per record",
    )
    _add_progress_options(consume, "consumed")
    consume.set_defaults(handler=_consume)


def _add_progress_options(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            f"show a progress line on stderr, rewritten at most every second ('{verb} "
            f"1,234,567 records (245,000/s)'), and the total at the end; --no-progress: "
            f"never (default: on runs longer than a second, when stderr is a terminal"
            + (" and stdout is not" if verb == "consumed" else "")
            + ")"
        ),
    )


def _add_cluster_commands(commands: Any) -> None:
    cluster = commands.add_parser("cluster", help="cluster status and node operations")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)

    status = actions.add_parser(
        "status",
        help="members (state, weight, zone, free disk) and partition leaders and replicas",
        description=(
            "Members with their state, weight, zone, address and data directory's free "
            "space (DISK 'full' below the node's watermark: it leads nothing and takes "
            "no new replicas); every partition's leader, replicas, voters, in-sync "
            "replicas and whether it is under-replicated; then the replicas healing "
            "from damaged storage (where their damaged files were set aside, under "
            "<data>/quarantine/) and the replicas out of service after a storage "
            "failure, if any; the nodes in maintenance; and the peers a node refuses "
            "for an incompatible protocol version (adjacent versions interoperate)."
        ),
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

    add_maintenance_command(actions)
    _add_keyring_commands(actions)

    rolling = actions.add_parser(
        "rolling-restart",
        help="restart every node in turn, never leaving a partition without a majority",
        description=(
            "For each node in turn: check that every partition it is a voter of has a "
            "leader and every other voter in sync (else stop and say which, before "
            "touching it); put it in maintenance and wait until it leads nothing; run "
            "--command (which must stop and start the node, and return once it "
            "started); wait until it is alive and in sync in every partition it holds; "
            "take it out of maintenance; next. A step that fails or outlasts "
            "--step-timeout stops the run and leaves the node as that step left it "
            "(in maintenance once the command ran: `laminar cluster maintenance exit "
            "NODE` ends it). For a cluster of scripts/local_cluster.sh: "
            "`scripts/local_cluster.sh rolling-restart`."
        ),
    )
    rolling.add_argument(
        "--command",
        required=True,
        help="shell command restarting one node; %%n is its node id, %%a its gRPC "
        "address, %%%% a %% (e.g. 'systemctl restart laminar@%%n')",
    )
    rolling.add_argument(
        "--nodes",
        metavar="ID[,ID...]",
        help="the nodes to restart, in this order (default: every member, by node id)",
    )
    rolling.add_argument(
        "--step-timeout",
        type=_positive_float,
        default=300.0,
        metavar="SECONDS",
        help="longest wait for a hand-over, the command, or a catch-up (default 300)",
    )
    rolling.add_argument(
        "--settle-timeout",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long the check before each node may wait for every other voter to be "
        "in sync before the run stops (default 30)",
    )
    rolling.set_defaults(handler=_cluster_rolling_restart)


def _add_partition_commands(commands: Any) -> None:
    partition = commands.add_parser(
        "partition", help="operator actions on one partition (recover from damaged replicas)"
    )
    actions = partition.add_subparsers(dest="action", metavar="ACTION", required=True)
    recover = actions.add_parser(
        "recover",
        help="let the damaged replicas of a partition that cannot elect a leader vote "
        "again with what they hold (acknowledged records they lack are lost)",
        description=(
            "A replica whose storage was found damaged heals from its peers as a "
            "non-voter. When too many replicas of a partition are damaged for it to "
            "elect a leader (all of them with replication factor 1, a majority "
            "otherwise), it stays offline, listed by `laminar cluster status`, until an "
            "operator accepts the loss with this command, like Kafka's unclean leader "
            "election: every damaged replica of the partition votes again with what it "
            "holds, and records acknowledged earlier that the new leader lacks are lost. "
            "Refused while the partition has a leader. Every node that accepted logs it."
        ),
    )
    recover.add_argument("partition", type=_topic_partition, help="TOPIC/PARTITION")
    recover.add_argument(
        "--accept-data-loss",
        action="store_true",
        required=True,
        help="required: acknowledged records may be lost",
    )
    recover.set_defaults(handler=_partition_recover)


def _topic_partition(text: str) -> tuple[str, int]:
    topic, slash, number = text.rpartition("/")
    if not slash or not topic or not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected TOPIC/PARTITION, got {text!r}")
    return topic, int(number)


def _partition_recover(args: argparse.Namespace) -> int:
    topic, partition = args.partition
    with _client(args) as client:
        recovered = client.recover_partition(topic, partition)
    if not recovered:
        print(
            f"laminar: error: no replica of {topic}/{partition} on an alive node is "
            "healing from damaged storage: nothing was changed",
            file=sys.stderr,
        )
        return EXIT_ERROR
    print(
        f"{topic}/{partition}: data loss accepted on {', '.join(recovered)}; its replicas "
        "vote again",
        file=_out(),
    )
    return 0


def _add_group_commands(commands: Any) -> None:
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
        "--timestamp-ms", type=_non_negative_int, metavar="MS", help="for --to timestamp"
    )
    reset.add_argument("--offset", type=_non_negative_int, metavar="N", help="for --to offset")
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


def _add_tls_options(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group(
        "TLS", "for a cluster whose nodes serve TLS (docs/operations.md, TLS)"
    )
    for flag, name, metavar, what in (
        (
            "--tls-ca",
            "ca_file",
            "FILE",
            "PEM bundle of the CAs that signed the nodes' certificates",
        ),
        ("--tls-cert", "cert_file", "FILE", "PEM client certificate (nodes with client_auth)"),
        ("--tls-key", "key_file", "FILE", "PEM key of --tls-cert"),
        (
            "--tls-server-name",
            "server_name",
            "NAME",
            "name to check the nodes' certificates against instead of each address's host",
        ),
    ):
        variable = TLS_ENV[name]
        tls.add_argument(
            flag,
            dest=f"tls_{name}",
            default=os.environ.get(variable, ""),
            metavar=metavar,
            help=f"{what} (default: ${variable})",
        )


def _tls_options(args: argparse.Namespace) -> TlsOptions | None:
    """The TLS options the flags (or ``LAMINAR_TLS_*``) give; None without a CA."""
    values = [args.tls_ca_file, args.tls_cert_file, args.tls_key_file, args.tls_server_name]
    if not args.tls_ca_file:
        if any(values):
            raise InvalidInputError("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
        return None
    return TlsOptions(*values)


# --------------------------------------------------------------------------- commands


def _client(args: argparse.Namespace) -> Client:
    return Client(
        args.bootstrap, timeout_s=args.timeout, token=_token(args), tls=_tls_options(args)
    )


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token-file``'s first line, else ``--token`` / $LAMINAR_TOKEN."""
    path = getattr(args, "token_file", None)
    if path:
        return read_token_file(path, "--token-file")
    token: str | None = getattr(args, "token", None)
    return token


# --------------------------------------------------------------------------- acl, token


def _add_acl_commands(commands: Any) -> None:
    acl = commands.add_parser(
        "acl",
        help="create, list or delete access control lists",
        description=(
            "ACLs say which principal (User:NAME, from a token or a client certificate; "
            "User:* for everyone) may do which operation on a topic, a consumer group or "
            "the cluster. They are kept in the cluster metadata and apply on every node "
            "once [auth] authorization = true: then what no ACL allows is denied (except "
            "to super_users), a deny wins over any allow, and read, write, alter or "
            "delete on a resource also allow describe. Changing ACLs needs alter on the "
            "cluster; listing them describe. See docs/operations.md, "
            '"Authentication and ACLs".'
        ),
    )
    actions = acl.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create an ACL (allow, or --deny)")
    _acl_arguments(create, required=True)
    create.set_defaults(handler=_acl_create)
    listing = actions.add_parser("list", help="list ACLs (all, or those matching the options)")
    _acl_arguments(listing, required=False)
    listing.set_defaults(handler=_acl_list)
    delete = actions.add_parser(
        "delete", help="delete every ACL matching the options (at least one option)"
    )
    _acl_arguments(delete, required=False)
    delete.set_defaults(handler=_acl_delete)


def _acl_arguments(parser: Any, *, required: bool) -> None:
    which = "" if required else " (filter)"
    parser.add_argument(
        "--principal", required=required, help=f"User:NAME, or User:* for everyone{which}"
    )
    parser.add_argument(
        "--operation",
        required=required,
        choices=ACL_OPERATIONS,
        help=f"the operation{which}",
    )
    resource = parser.add_mutually_exclusive_group(required=required)
    resource.add_argument("--topic", help=f"a topic name (or prefix, with --prefixed){which}")
    resource.add_argument("--group", help=f"a consumer group name (or prefix){which}")
    resource.add_argument("--cluster", action="store_true", help=f"the cluster{which}")
    parser.add_argument(
        "--prefixed", action="store_true", help="the name is a prefix (default: literal)"
    )
    parser.add_argument("--deny", action="store_true", help="a deny ACL (default: allow)")


def _acl_resource(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.topic is not None:
        return "topic", args.topic
    if args.group is not None:
        return "group", args.group
    if args.cluster:
        return "cluster", "cluster"
    return None, None


def _acl_create(args: argparse.Namespace) -> int:
    resource_type, name = _acl_resource(args)
    assert resource_type is not None and name is not None  # required by the parser
    acl = Acl(
        args.principal,
        args.operation,
        resource_type,
        name,
        "prefixed" if args.prefixed else "literal",
        "deny" if args.deny else "allow",
    )
    with _client(args) as client:
        client.create_acls([acl])
    print(f"created: {acl.describe()}", file=_out())
    return 0


def _acl_filter(args: argparse.Namespace) -> AclFilter:
    resource_type, name = _acl_resource(args)
    return AclFilter(
        principal=args.principal,
        operation=args.operation,
        resource_type=resource_type,
        resource_name=name,
        pattern="prefixed" if args.prefixed else None,
        permission="deny" if args.deny else None,
    )


def _acl_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        acls = client.list_acls(_acl_filter(args))
    out = _out()
    for acl in acls:
        print(acl.describe(), file=out)
    if not acls:
        print("no ACLs", file=out)
    return 0


def _acl_delete(args: argparse.Namespace) -> int:
    acl_filter = _acl_filter(args)
    if acl_filter == AclFilter():
        raise InvalidInputError("give at least one option: deleting every ACL takes a filter")
    with _client(args) as client:
        deleted = client.delete_acls([acl_filter])
    out = _out()
    for acl in deleted:
        print(f"deleted: {acl.describe()}", file=out)
    if not deleted:
        print("no ACL matched: nothing deleted", file=out)
    return 0


def _add_token_commands(commands: Any) -> None:
    token = commands.add_parser("token", help="make bearer tokens for the nodes' token file")
    actions = token.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="make a token for NAME: add its hash to the token file, print the token once",
        description=(
            "Makes a random token for the principal User:NAME (or NAME itself if it has "
            "a type, Type:name), appends its entry (a salted scrypt hash, no secret) to "
            "FILE, created with mode 0600 if missing, and prints the token: it is shown "
            "only now. Copy FILE to every node's [auth] token_file (nodes read it again "
            "when it changes); give the token to the client (--token, $LAMINAR_TOKEN, "
            "Client(token=...)). Works offline: no node is called."
        ),
    )
    create.add_argument("name", help="the principal's name (User:NAME)")
    create.add_argument("--file", required=True, help="the token file (TOML)")
    create.set_defaults(handler=_token_create)


def _token_create(args: argparse.Namespace) -> int:
    try:
        tokens = importlib.import_module("laminar.security.tokens")
    except ImportError:
        raise InvalidInputError(
            "making tokens needs the server extra (pip install 'laminar[server]')"
        ) from None
    token: str = tokens.add_token(args.file, args.name)
    print(token, file=_out())
    return 0


def _out() -> TextIO:
    return sys.stdout


def _topic_create(args: argparse.Namespace) -> int:
    with _client(args) as client:
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
        f"topic {topic.name}: "
        f"{_setting(topic, 'partitions', str(config.partitions))} "
        f"{_setting(topic, 'replication_factor', str(config.replication_factor))} "
        f"{_setting(topic, 'retention_bytes', _limit(config.retention_bytes))} "
        f"{_setting(topic, 'retention_ms', _limit(config.retention_ms))}",
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


_INTERRUPT_GRACE_S = 2.0
"""After Ctrl-C, how long ``produce`` waits for the records already sent."""
_ATTEMPT_TIMEOUT_S = 3.0
_CONSUMER_IDLE_S = 0.2
"""How often ``consume`` without ``--follow`` looks whether it reached the end while
no record arrives (the end may be control records, which are never handed out)."""


def _produce(args: argparse.Namespace) -> int:
    if args.batch_size is not None:
        _warn("--batch-size is deprecated and ignored: the producer batches by bytes and time")
    separator = os.fsencode(args.key_separator) if args.key_partitioning else None
    if separator == b"":
        raise InvalidInputError("--key-separator must not be empty")
    if args.partition is not None:
        partition: int | None = args.partition
    else:
        partition = None if args.key_partitioning else 0
    tally = _Delivered()
    interrupted = False
    attempt_s = min(_ATTEMPT_TIMEOUT_S, args.timeout)
    with (
        _client(args) as client,
        _open_input(args.file) as lines,
        _Progress("produced", tally.count, _progress_wanted(args, stdout_busy=False)),
    ):
        partitions = _partition_count(client, args.topic)
        if partition is not None and partition >= partitions:
            raise InvalidInputError(
                f"topic {args.topic!r} has partitions 0..{partitions - 1}, not {partition}"
            )
        producer: Producer[bytes, bytes] = Producer(
            client,
            acks=args.acks,
            idempotent=args.acks == "all",
            attempt_timeout_s=attempt_s,
            delivery_timeout_s=max(args.timeout, attempt_s + 0.1),
            max_block_s=args.timeout,
        )
        grace_s: float | None = None
        try:
            for number, line in enumerate(lines, start=1):
                if tally.stop:
                    break  # stop at the first failure; what was sent is still waited for
                key, value = _split_line(line, separator)
                try:
                    producer.send(
                        args.topic, value, key=key, partition=partition, callback=tally.callback
                    )
                except LaminarError as error:
                    tally.refuse(number, error)
                    break
            producer.flush()
        except KeyboardInterrupt:
            interrupted = True
            grace_s = _INTERRUPT_GRACE_S
        finally:
            producer.close(grace_s)  # every callback has run once it returns
    tally.report(args.topic)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_ERROR if tally.stop else 0


def _partition_count(client: Client, topic: str) -> int:
    """The topic's partition count; :class:`UnknownTopicOrPartitionError` once it
    stayed unknown for ``UNKNOWN_TOPIC_WAIT_S`` (a topic created a moment ago may not
    have reached every node yet)."""
    deadline_s = time.monotonic() + UNKNOWN_TOPIC_WAIT_S
    metadata = client.metadata()
    while topic not in metadata.topics and time.monotonic() < deadline_s:
        time.sleep(0.1)
        metadata = client.metadata(refresh=True)
    return metadata.topic(topic).config.partitions


class _Delivered:
    """What ``produce`` learned: per partition, the records acknowledged and their
    first and last offsets (from the delivery callbacks, which run on the producer's
    thread); the records that failed and the first error; the line ``send`` refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[int, list[int]] = {}  # partition -> [count, first, last]
        self.acknowledged = 0
        self.failed = 0
        self._first_error = ""
        self._refused = ""

    def count(self) -> int:
        return self.acknowledged

    @property
    def stop(self) -> bool:
        """Whether to stop reading input (a record failed, or a line was refused)."""
        return self.failed > 0 or bool(self._refused)

    def callback(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self.failed += 1
                if not self._first_error:
                    where = f"{metadata.topic}/{metadata.partition}"
                    self._first_error = f"{where}: {_one_line(error)}"
                return
            self.acknowledged += 1
            offset = metadata.offset
            entry = self._partitions.get(metadata.partition)
            if entry is None:
                self._partitions[metadata.partition] = [1, offset, offset]
            else:
                entry[0] += 1
                if offset >= 0:
                    entry[1] = offset if entry[1] < 0 else min(entry[1], offset)
                    entry[2] = max(entry[2], offset)

    def refuse(self, number: int, error: LaminarError) -> None:
        """``send`` refused line ``number`` (it raised: no future, no callback)."""
        self._refused = f"line {number}: {_one_line(error)}"

    def report(self, topic: str) -> None:
        """The per-partition summary on stdout; one error line on stderr if anything
        failed. Call it once the producer is closed (every callback has run then)."""
        out = _out()
        with self._lock:
            partitions = sorted(self._partitions.items())
            failed, first_error = self.failed, self._first_error
        if not partitions:
            print("produced 0 records", file=out)
        for partition, (count, first, last) in partitions:
            where = f" at offsets {first}..{last}" if first >= 0 else " (offsets not reported)"
            print(f"produced {count} records to {topic}/{partition}{where}", file=out)
        out.flush()
        errors = [self._refused] if self._refused else []
        if failed:
            records = "1 record" if failed == 1 else f"{failed} records"
            errors.append(f"{records} not written: {first_error}")
        if errors:
            print(f"laminar: error: {'; '.join(errors)}", file=sys.stderr)


def _consume(args: argparse.Namespace) -> int:
    out = _out()
    topic = args.topic
    numbers = list(dict.fromkeys(n for group in args.partition or [[0]] for n in group))
    printed = 0
    with (
        _client(args) as client,
        _Progress("consumed", lambda: printed, _progress_wanted(args, stdout_busy=True)),
    ):
        # From the leaders: a follower's high watermark may trail by a heartbeat (a
        # node just restarted), and every record acknowledged before now is printed.
        listed = client.list_offsets(topic, numbers, leader=True)
        starts = {n: _start_offset(topic, n, listed[n], args.start) for n in numbers}
        # Without --follow: each partition's end as it was at the start.
        ends = {n: listed[n].high_watermark for n in numbers}
        if not args.follow:
            starts = {n: s for n, s in starts.items() if s < ends[n]}
        if not starts:
            return 0
        text = args.format == "text"  # else json
        consumer: Consumer[bytes, bytes] = Consumer(
            client, attempt_timeout_s=min(_ATTEMPT_TIMEOUT_S, args.timeout)
        )
        with consumer:
            consumer.assign({(topic, n): offset for n, offset in starts.items()})
            if args.follow:
                for record in consumer:
                    out.write(_format_record(record, text))
                    out.write("\n")
                    out.flush()
                    printed += 1
                    if printed == args.max:
                        break
                return 0
            reading = set(starts)
            idle_since = time.monotonic()
            while reading:
                for record in consumer.records(timeout_s=_CONSUMER_IDLE_S):
                    number = record.partition
                    if number not in reading:
                        continue
                    if record.offset >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                        continue
                    out.write(_format_record(record, text))
                    out.write("\n")
                    printed += 1
                    if printed == args.max:
                        return 0
                    if record.offset + 1 >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                        if not reading:
                            return 0
                    idle_since = time.monotonic()
                # Idle: partitions may have reached their end on records never handed
                # out (control batches); give up when nothing moves for --timeout.
                for number in list(reading):
                    if consumer.position((topic, number)) >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                if reading and time.monotonic() - idle_since > args.timeout:
                    behind = ", ".join(
                        f"{topic}/{n} at {consumer.position((topic, n))} of {ends[n]}"
                        for n in sorted(reading)
                    )
                    raise RequestTimeoutError(f"no records for {args.timeout:g} s ({behind})")
    return 0


def _done_with(
    consumer: Consumer[bytes, bytes], topic: str, number: int, reading: set[int]
) -> None:
    """A partition reached its end: stop fetching it."""
    reading.discard(number)
    consumer.pause((topic, number))


def _group_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
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
        print(json.dumps(rows), file=_out())
        return 0
    _table(
        ["GROUP", "STATE", "MEMBERS", "COORDINATOR"],
        [[g.group, g.state, str(g.member_count), g.coordinator] for g in groups],
    )
    return 0


def _group_describe(args: argparse.Namespace) -> int:
    with _client(args) as client:
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
        print(json.dumps({**summary, "partitions": rows}), file=_out())
        return 0
    print(" ".join(f"{key}={value}" for key, value in summary.items()), file=_out())
    header = ["TOPIC", "PARTITION", "COMMITTED", "LOG_START", "HIGH_WATERMARK", "LAG"]
    header += ["OWNER", "INSTANCE", "HOST", "EPOCH"]
    _table(header, [[_cell(value) for value in row.values()] for row in rows])
    return 0


def _log_ranges(client: Client, topics: Sequence[str]) -> dict[tuple[str, int], PartitionOffsets]:
    """Log start and high watermark of every partition of ``topics`` (a topic that is
    gone is left out: its rows show ``-``)."""
    found: dict[tuple[str, int], PartitionOffsets] = {}
    for topic in topics:
        try:
            count = _partition_count(client, topic)
            for partition, offsets in client.list_offsets(topic, range(count), leader=True).items():
                found[(topic, partition)] = offsets
        except LaminarError as error:
            _warn(f"{topic}: {_one_line(error)}")
    return found


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _group_reset_offsets(args: argparse.Namespace) -> int:
    if args.to == "timestamp" and args.timestamp_ms is None:
        raise InvalidInputError("--to timestamp needs --timestamp-ms")
    if args.to == "offset" and args.offset is None:
        raise InvalidInputError("--to offset needs --offset")
    with _client(args) as client:
        described = client.describe_group(args.group)
        if described.members and not args.dry_run:
            raise GroupNotEmptyError(args.group, len(described.members))
        topics = args.topic or sorted({*described.topics, *(p.topic for p in described.partitions)})
        if not topics:
            raise InvalidInputError(f"group {args.group} has no topics: name one with --topic")
        plan: dict[tuple[str, int], int] = {}
        for topic in topics:
            count = _partition_count(client, topic)
            listed = client.list_offsets(
                topic, range(count), timestamp_ms=args.timestamp_ms, leader=True
            )
            for partition, offsets in listed.items():
                plan[(topic, partition)] = _reset_target(args, offsets)
        if not args.dry_run:
            client.reset_offsets(args.group, plan)
    verb = "would reset" if args.dry_run else "reset"
    print(f"{verb} {len(plan)} partition(s) of group {args.group}", file=_out())
    _table(
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
    with _client(args) as client:
        client.delete_group(args.group)
    print(f"deleted group {args.group}", file=_out())
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        description = client.describe_cluster()
    print(f"cluster {description.cluster_id} (answered by {description.node_id})", file=_out())
    disks = {disk.node_id: disk for disk in description.disks}
    _table(
        ["NODE", "STATE", "WEIGHT", "ZONE", "GRPC_ADDRESS", "DISK_FREE", "DISK"],
        [
            [
                m.node_id,
                m.state,
                f"{m.weight:g}",
                m.zone or "-",
                m.grpc_address or "-",
                *_disk_cells(disks.get(m.node_id)),
            ]
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
    if description.maintenance:
        print(
            f"\nin maintenance: {', '.join(description.maintenance)} (leads nothing; its "
            "replicas stay while it is down, up to maintenance_grace_ms; "
            "`laminar cluster maintenance exit NODE` ends it)",
            file=_out(),
        )
    if description.incompatible_peers:
        print("\npeers refused for an incompatible protocol version:", file=_out())
        _table(
            ["NODE", "PEER", "ADDRESS", "PEER_VERSION", "FOR_S", "REASON"],
            [
                [
                    i.node_id,
                    i.peer_id or "-",
                    i.address or "-",
                    str(i.protocol_version),
                    f"{i.refused_for_ms / 1000:.0f}",
                    i.reason,
                ]
                for i in description.incompatible_peers
            ],
        )
    if description.damaged:
        print("\nreplicas healing from damaged storage (damaged files set aside):", file=_out())
        _table(
            ["NODE", "TOPIC", "PARTITION", "FOR_S", "REASON", "QUARANTINE"],
            [
                [
                    d.node_id,
                    d.topic,
                    str(d.partition),
                    f"{d.damaged_for_ms / 1000:.0f}",
                    d.reason,
                    d.quarantine or "-",
                ]
                for d in description.damaged
            ],
        )
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


def _disk_cells(disk: NodeDisk | None) -> list[str]:
    """The DISK_FREE and DISK cells of a member: free space of its data directory
    (of the filesystem's size) and its state, "full" below its watermark."""
    if disk is None or not disk.total_bytes:
        return ["-", "-"]
    free = f"{_bytes(disk.free_bytes)} of {_bytes(disk.total_bytes)}"
    state = f"full (below {_bytes(disk.watermark_bytes)})" if disk.full else "ok"
    return [free, state]


def _bytes(count: int) -> str:
    """A byte count for people: ``512 B``, ``40.0 MiB``, ``1.5 TiB``."""
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def add_maintenance_command(actions: Any) -> None:
    """``maintenance enter|exit NODE`` under ``actions`` (``laminar cluster`` and,
    as the issue and operators name it, ``laminar node``)."""
    maintenance = actions.add_parser(
        "maintenance",
        help="put a node in maintenance before a long stop, or take it out",
        description=(
            "enter: the node hands its leaderships to in-sync replicas and leads "
            "nothing, and while it is down its replicas stay (they are not re-placed "
            "and re-copied) for up to the nodes' maintenance_grace_ms (4 hours by "
            "default) instead of replica_move_grace_ms; when it returns it catches up "
            "from where it was. The state is in the cluster metadata: it holds while "
            "the node is down, and is shown by `cluster status`. exit: the node may "
            "lead again (it gets its preferred leaderships back) and a stop is treated "
            "as any failure again. Only exit clears it. Drain (weight 0) is for a node "
            "that goes away for good: its replicas move. `laminar node maintenance` "
            "and `laminar cluster maintenance` are the same command."
        ),
    )
    maintenance.add_argument("change", choices=("enter", "exit"), help="enter or exit")
    maintenance.add_argument("node", help="node id or gRPC address (the node may be down)")
    maintenance.set_defaults(handler=_cluster_maintenance)


def _cluster_maintenance(args: argparse.Namespace) -> int:
    enter = args.change == "enter"
    with _client(args) as client:
        node_id = _node_id(client.metadata(refresh=True), args.node)
        in_maintenance = client.set_maintenance(node_id, enter)
    state = "in maintenance" if node_id in in_maintenance else "out of maintenance"
    print(
        f"node {node_id}: {state} (in maintenance: {', '.join(in_maintenance) or 'none'})",
        file=_out(),
    )
    return 0


def _cluster_rolling_restart(args: argparse.Namespace) -> int:
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None
    out = _out()

    with _client(args) as client:
        addresses = {m.node_id: m.grpc_address for m in client.describe_cluster().members}

        def restart(node_id: str) -> None:
            command = expand_command(args.command, node_id, addresses.get(node_id, ""))
            print(f"{node_id}: running {command}", file=out, flush=True)
            done = subprocess.run(command, shell=True, timeout=args.step_timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"`{command}` exited with status {done.returncode}")

        restarted = rolling_restart(
            client,
            restart,
            nodes=nodes,
            step_timeout_s=args.step_timeout,
            settle_timeout_s=args.settle_timeout,
            report=lambda line: print(line, file=out, flush=True),
        )
    for step in restarted:
        print(
            f"{step.node_id}: handed over in {step.handover_s:.1f} s, restarted in "
            f"{step.restart_s:.1f} s, caught up in {step.catch_up_s:.1f} s",
            file=out,
        )
    print(f"restarted {len(restarted)} nodes", file=out)
    return 0


def _node_id(metadata: ClusterMetadata, node: str) -> str:
    """A node id given by node id or by gRPC address; an id no member has is kept
    (a node reaped from gossip may still be in maintenance)."""
    if node in metadata.members:
        return node
    member = next((m for m in metadata.members.values() if m.grpc_address == node), None)
    return member.node_id if member is not None else node


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


# --------------------------------------------------------------------------- keyring

_KEYRING_DESCRIPTION = (
    "Gossip encryption keys (AES-256-GCM), Serf style: install, use, list and remove "
    "go to every live member and print one line per node; a node that fails is named "
    "and the command exits 1 (run it again: every change is idempotent). Rotation: "
    "install NEW; use NEW; remove OLD (each step on every node before the next). "
    "Switching a running cluster from plain to encrypted gossip: install KEY (a node "
    "started without a keyring file has both switches off, so nothing changes yet), "
    "then verify --outgoing on, then verify --incoming on. Each node saves its keyring "
    "([gossip_encryption] keyring_file, default <data_dir>/keyring.json) before it "
    "applies a change. Keys are secrets: keep them out of shell history and logs. "
    "See docs/operations.md, 'Gossip encryption'."
)


def _add_keyring_commands(actions: Any) -> None:
    keyring = actions.add_parser(
        "keyring",
        help="gossip encryption keys: generate, list, install, use, remove; verify switches",
        description=_KEYRING_DESCRIPTION,
    )
    commands = keyring.add_subparsers(dest="keyring_action", metavar="ACTION", required=True)
    generate = commands.add_parser(
        "generate",
        help="print a new random key (base64, 32 bytes)",
        description=(
            "Print a new random 32-byte key, base64. With --keyring-file, also write a "
            "new keyring file holding it as the primary key (copy it to each node's "
            "keyring_file before their first start to start encrypted); an existing "
            "file is never overwritten."
        ),
    )
    generate.add_argument("--keyring-file", metavar="PATH", help="write a new keyring file")
    generate.set_defaults(handler=_keyring_generate)
    listing = commands.add_parser(
        "list",
        help="each member's keys and switches, then each key with how many members hold it",
    )
    listing.set_defaults(handler=_keyring_list)
    for name, text in (
        ("install", "add a key on every live member (received with, not yet sent with)"),
        ("use", "make an installed key the primary (sent with) on every live member"),
        ("remove", "remove a key from every live member (not the primary)"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("key", help="the key, base64 (from keyring generate)")
        command.set_defaults(handler=_keyring_change, keyring_change=name)
    verify = commands.add_parser(
        "verify",
        help="set encrypt_verify_incoming / encrypt_verify_outgoing on every live member",
        description=(
            "--outgoing off: send plain gossip; on: seal it with the primary key. "
            "--incoming off: accept plain gossip too; on: refuse it. Both are off on a "
            "node started without a keyring file and on in a file that generate "
            "--keyring-file writes. Switching a running cluster to encryption: outgoing "
            "on everywhere before incoming on anywhere."
        ),
    )
    verify.add_argument("--incoming", choices=("on", "off"), help="refuse plain gossip")
    verify.add_argument("--outgoing", choices=("on", "off"), help="seal sent gossip")
    verify.set_defaults(handler=_keyring_change, keyring_change="set-verify")


def _keyring_generate(args: argparse.Namespace) -> int:
    text = generate_key()
    path = args.keyring_file
    if path is not None:
        if os.path.exists(path):
            raise InvalidInputError(f"{path} exists: not overwriting a keyring file")
        save_keyring(path, KeyringState((parse_key(text),)))
    print(text, file=_out())
    return 0


def _keyring_list(args: argparse.Namespace) -> int:
    answers, failed = _keyring_on_members(
        args, lambda client, address: client.gossip_keyring(address)
    )
    holders: dict[bytes, list[str]] = {}
    primaries: dict[bytes, list[str]] = {}
    for answer in answers:
        for key in answer.keys:
            holders.setdefault(key, []).append(answer.node_id)
        if answer.primary is not None:
            primaries.setdefault(answer.primary, []).append(answer.node_id)
    total = len(answers) + failed
    rows = [
        [format_key(key), f"{len(nodes)}/{total}", f"{len(primaries.get(key, []))}/{total}"]
        for key, nodes in sorted(holders.items(), key=lambda item: -len(item[1]))
    ]
    if rows:
        _table(["KEY", "HELD BY", "PRIMARY ON"], rows)
    return EXIT_ERROR if failed else 0


def _keyring_change(args: argparse.Namespace) -> int:
    action = args.keyring_change
    if action == "set-verify":
        if args.incoming is None and args.outgoing is None:
            raise InvalidInputError("give --incoming on|off and/or --outgoing on|off")
        incoming = None if args.incoming is None else args.incoming == "on"
        outgoing = None if args.outgoing is None else args.outgoing == "on"
        key = b""
    else:
        incoming = outgoing = None
        key = parse_key(args.key)

    def change(client: Client, address: str) -> GossipKeyring:
        return client.gossip_keyring(
            address,
            action,
            key=key,
            encrypt_verify_incoming=incoming,
            encrypt_verify_outgoing=outgoing,
        )

    _, failed = _keyring_on_members(args, change)
    return EXIT_ERROR if failed else 0


def _keyring_on_members(
    args: argparse.Namespace, call: Callable[[Client, str], GossipKeyring]
) -> tuple[list[GossipKeyring], int]:
    """``call`` on every live member, one line each; the answers and the failures."""
    out = _out()
    answers: list[GossipKeyring] = []
    failed = 0
    with _client(args) as client:
        members = sorted(client.metadata(refresh=True).members.values(), key=lambda m: m.node_id)
        for member in members:
            if not member.live:
                continue
            try:
                if not member.grpc_address:
                    raise InvalidInputError("no known gRPC address")
                answer = call(client, member.grpc_address)
            except LaminarError as error:
                failed += 1
                print(f"{member.node_id}: failed: {_one_line(error)}", file=out, flush=True)
                continue
            answers.append(answer)
            print(f"{member.node_id}: {_keyring_line(answer)}", file=out, flush=True)
    if failed:
        _warn(f"{failed} node(s) failed: run the command again once they are reachable")
    return answers, failed


def _keyring_line(answer: GossipKeyring) -> str:
    primary = answer.primary
    return (
        f"{len(answer.keys)} key(s), primary "
        f"{'none' if primary is None else key_fingerprint(primary)}, "
        f"verify incoming {'on' if answer.encrypt_verify_incoming else 'off'}, "
        f"outgoing {'on' if answer.encrypt_verify_outgoing else 'off'}"
    )


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


def _start_offset(topic: str, partition: int, offsets: PartitionOffsets, start: str) -> int:
    """Where ``--from`` starts reading a partition with these offsets."""
    if start in ("earliest", "latest"):
        return offsets.log_start_offset if start == "earliest" else offsets.high_watermark
    try:
        offset = int(start)
    except ValueError:
        raise InvalidInputError(
            f"--from must be earliest, latest or an offset, got {start!r}"
        ) from None
    if offset < 0:
        raise InvalidInputError(f"--from offset must be >= 0, got {offset}")
    if not offsets.log_start_offset <= offset <= offsets.high_watermark:
        raise InvalidInputError(
            f"--from {offset} is outside {topic}/{partition}, which holds offsets "
            f"{offsets.log_start_offset}..{offsets.high_watermark - 1}"
        )
    return offset


def _format_record(record: ConsumerRecord[bytes, bytes], text: bool) -> str:
    if text:
        return _text(record.value) or ""
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "key": _text(record.key),
            "value": _text(record.value),
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    line = line.rstrip(b"\r\n")
    if separator is not None and separator in line:
        key, value = line.split(separator, 1)
        return key, value
    return None, line


class _open_input:  # noqa: N801 - used like open()
    """stdin, or the named file, as a context manager of lines as bytes (records hold
    bytes: input that is not UTF-8 goes through unchanged)."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._file: IO[bytes] | None = None

    def __enter__(self) -> Iterable[bytes]:
        if self._path is None or self._path == "-":
            buffer: IO[bytes] | None = getattr(sys.stdin, "buffer", None)
            if buffer is not None:
                return buffer
            return (line.encode() for line in sys.stdin)  # a text-only stdin (tests)
        self._file = open(self._path, "rb")
        return self._file

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()


def _setting(topic: TopicMetadata, name: str, value: str) -> str:
    """``name=value``, marked ``(default)`` when the cluster's default set it."""
    return f"{name}={value}" + (" (default)" if name in topic.defaults else "")


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


def _one_line(error: BaseException) -> str:
    """An error as one line: its message's first line, or its type's name."""
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


def _warn(message: str) -> None:
    print(f"laminar: warning: {message}", file=sys.stderr)


_PROGRESS_INTERVAL_S = 1.0


def _progress_wanted(args: argparse.Namespace, *, stdout_busy: bool) -> bool | None:
    """True: show progress and the total; None: show it if the run lasts; False: never.

    ``--progress``/``--no-progress`` decide; else progress is shown on a terminal
    stderr, unless records go to stdout on the same terminal (``stdout_busy``), where
    the rewritten line would tangle with them.
    """
    if args.progress is not None:
        return bool(args.progress)
    if not _isatty(sys.stderr) or (stdout_busy and _isatty(sys.stdout)):
        return False
    return None


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Progress:
    """A progress line on stderr: ``<verb> 1,234,567 records (245,000/s)``.

    A thread rewrites it in place (``\\r``) every ``_PROGRESS_INTERVAL_S`` with the
    count ``count()`` returns and the rate since the previous line. On exit, the
    total and the mean rate end the line with a newline: always when ``wanted`` is
    True, only if a line was shown when it is None (short runs stay quiet); never
    when it is False.
    """

    def __init__(self, verb: str, count: Callable[[], int], wanted: bool | None) -> None:
        self._verb = verb
        self._count = count
        self._wanted = wanted
        self._stream = sys.stderr
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = 0  # length of the line on screen; 0: none yet
        self._started_s = time.monotonic()

    def __enter__(self) -> _Progress:
        self._started_s = time.monotonic()
        if self._wanted is not False:
            self._thread = threading.Thread(target=self._run, name="laminar-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        last_s, last_count = self._started_s, 0
        while not self._stop.wait(_PROGRESS_INTERVAL_S):
            now_s, count = time.monotonic(), self._count()
            rate = (count - last_count) / max(now_s - last_s, 1e-9)
            self._show(f"{self._verb} {count:,} records ({rate:,.0f}/s)", end="")
            last_s, last_count = now_s, count

    def _show(self, line: str, *, end: str) -> None:
        with self._lock:
            if self._stop.is_set() and end == "":
                return  # finished meanwhile
            padding = " " * max(0, self._shown - len(line))
            try:
                self._stream.write(f"\r{line}{padding}{end}")
                self._stream.flush()
            except (OSError, ValueError):
                return
            self._shown = len(line) if end == "" else 0

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is None:
            return
        with self._lock:
            self._stop.set()
            shown = self._shown > 0
        self._thread.join()
        if self._wanted or shown:
            elapsed_s = time.monotonic() - self._started_s
            count = self._count()
            rate = count / max(elapsed_s, 1e-9)
            self._show(
                f"{self._verb} {count:,} records in {elapsed_s:.1f} s ({rate:,.0f}/s)", end="\n"
            )


def _partition_list(text: str) -> list[int]:
    """``P[,P...]``: partition numbers (>= 0)."""
    try:
        return [_non_negative_int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a partition number or list: {text!r}") from None


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
        if isinstance(error, ClusterUnreachableError):
            message += f" Start a local cluster with {LOCAL_CLUSTER_HINT}"
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
