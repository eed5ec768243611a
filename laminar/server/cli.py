"""``laminar node start``: run a broker node in the foreground; ``laminar node config``:
print every setting (``--defaults``) or check a config file (``--check``).

Registered into the ``laminar`` command by :func:`register`. SIGTERM or SIGINT stops
the node gracefully (leaderships handed over, ``left`` gossiped); a second signal
exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib.util
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from laminar.errors import ConfigError, LaminarError
from laminar.server.config import DEFAULT_PRESET, PRESETS, build_config, load_toml
from laminar.server.config_file import DATA_DIR_EXAMPLE, check_file, defaults_toml
from laminar.server.logs import LOG_FORMATS
from laminar.server.logs import configure as configure_logging
from laminar.tuning import raise_open_files_limit, tune_allocator, tune_grpc, tune_numpy

_T = TypeVar("_T")
_LOG = logging.getLogger(__name__)

SERVER_MODULES = ("grpc_health", "grpc_reflection", "prometheus_client", "pythonjsonlogger")
"""What a node imports beyond the client's dependencies: the ``laminar[server]`` extra
(uvloop, also in the extra, is optional: without it the node runs on asyncio's own
loop)."""


def register(subparsers: Any, client_commands: Callable[[Any], None]) -> None:
    """Add ``node``, with ``start`` and ``config``, to the ``laminar`` command's
    subparsers; first ``client_commands`` adds its own under ``node`` (``laminar.cli``
    gives ``node maintenance``, a client command: the server imports no client code)."""
    node = subparsers.add_parser("node", help="run a broker node, or put one in maintenance")
    node_commands = node.add_subparsers(dest="node_command", required=True)
    client_commands(node_commands)
    start = node_commands.add_parser(
        "start",
        help="start a node in the foreground",
        description="Start a broker node. Options override the --config file, which "
        "overrides the preset.",
    )
    start.add_argument("--data-dir", help="directory for the node id and partition data")
    for name, what, default in (
        ("gossip", "gossip address, UDP+TCP", "127.0.0.1:7000"),
        ("grpc", "gRPC API address, for clients and admin tools", "127.0.0.1:7100"),
        ("peer", "replication address, TCP, for other nodes", "127.0.0.1:7200"),
    ):
        start.add_argument(
            f"--{name}",
            metavar="HOST:PORT",
            help=f"{what}, to listen on (default {default}; 0.0.0.0 or [::] listens "
            f"on every interface and then needs --advertise-{name})",
        )
        start.add_argument(
            f"--advertise-{name}",
            metavar="HOST:PORT",
            help=f"the {name} address others are told, a host name or an address "
            "(behind NAT, in a container, or with a wildcard listen address; "
            f"default: the --{name} address)",
        )
    start.add_argument(
        "--seeds",
        metavar="HOST:PORT[,...]",
        help="gossip addresses of nodes to join through (host names are resolved when "
        "used; IPv6 as [addr]:port)",
    )
    start.add_argument(
        "--bootstrap",
        action="store_true",
        default=None,
        help="start a new cluster (only the first node of a cluster)",
    )
    start.add_argument("--weight", type=float, help="placement weight, >= 0; 0 drains (default 1)")
    start.add_argument("--zone", help="failure-domain label (default empty)")
    start.add_argument("--node-id", help="node id at first start (default: generated)")
    start.add_argument("--cluster-key", help="shared gossip key (default 'laminar')")
    start.add_argument(
        "--preset",
        choices=PRESETS,
        help="timing and grace preset (default lan: a data-centre network, replicas of a "
        "dead node move after 5 minutes; local: nodes on one machine, fast failover and "
        "10 s graces, for tests, demos and scripts/local_cluster.sh)",
    )
    start.add_argument(
        "--no-fsync",
        dest="fsync",
        action="store_false",
        default=None,
        help="do not fsync before acknowledging (fast, unsafe on power loss)",
    )
    start.add_argument(
        "--disk-free-bytes-min",
        type=int,
        metavar="BYTES",
        help="full-disk watermark in bytes: below this much free space in the data "
        "directory's filesystem the node leads nothing and takes no new replicas, until "
        "space comes back (default 268435456, 256 MiB; 0: off; [host] disk_free_bytes_min)",
    )
    start.add_argument(
        "--disk-free-percent-min",
        type=float,
        metavar="PERCENT",
        help="the same watermark as a percentage of the filesystem's size; the larger of "
        "the two applies (default 1; 0: off; [host] disk_free_percent_min)",
    )
    start.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (/metrics), /healthz, /ready and the status page "
        "(/, /status.json) over HTTP on this address (default: off; [metrics] address "
        "and partition_series)",
    )
    start.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file of settings (`laminar node config --defaults` prints every one, "
        "documented; `laminar node config --check FILE` validates a file)",
    )
    start.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    start.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text: one line 'time LEVEL logger: message' each (default); json: one JSON "
        "object per line with time, level, logger, message, node_id and, where they "
        "apply, topic, partition, term and peer (log_format in the config file)",
    )
    start.set_defaults(handler=_start)
    config = node_commands.add_parser(
        "config",
        help="print every node setting with its default, or check a config file",
        description="Print a complete, commented TOML file of every node setting with "
        "its value in a preset (--defaults), or check a file as `laminar node start "
        "--config FILE` would read it (--check: exit 0 and the settings that differ from "
        "the file's preset, or one line naming the table, the key, the value and what is "
        "allowed, and exit 1).",
    )
    action = config.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--defaults", action="store_true", help="print every setting with its default"
    )
    action.add_argument("--check", metavar="FILE", help="validate a TOML config file")
    config.add_argument(
        "--preset",
        choices=PRESETS,
        default=DEFAULT_PRESET,
        help=f"with --defaults: the preset whose values to print (default {DEFAULT_PRESET})",
    )
    config.add_argument(
        "--data-dir",
        default=DATA_DIR_EXAMPLE,
        help=f"with --defaults: the data_dir to write (default {DATA_DIR_EXAMPLE})",
    )
    config.set_defaults(handler=_config)


def _config(args: argparse.Namespace) -> int:
    if args.defaults:
        sys.stdout.write(defaults_toml(args.preset, args.data_dir))
        return 0
    try:
        config, differences = check_file(args.check)
    except LaminarError as error:
        print(f"laminar node config: {args.check}: {error}", file=sys.stderr)
        return 1
    count = len(differences)
    print(
        f"{args.check}: valid, preset {config.preset}; {count} setting"
        f"{'' if count == 1 else 's'} differ{'s' if count == 1 else ''} from it"
    )
    for line in differences:
        print(f"  {line}")
    return 0


def run_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """Run ``main`` on uvloop (a faster event loop) where it is installed, as a node does."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.run(main)
    return uvloop.run(main)


def missing_server_modules() -> list[str]:
    """The :data:`SERVER_MODULES` not installed (a ``laminar[client]`` install)."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def _start(args: argparse.Namespace) -> int:
    missing = missing_server_modules()
    if missing:
        print(
            f"laminar node: a node needs the server's dependencies, not installed here "
            f"({', '.join(missing)}): pip install 'laminar[server]'",
            file=sys.stderr,
        )
        return 2
    try:
        file_values = load_toml(args.config) if args.config else {}
        config = build_config(
            {
                "data_dir": args.data_dir,
                "gossip": args.gossip,
                "grpc": args.grpc,
                "peer": args.peer,
                "advertise_gossip": args.advertise_gossip,
                "advertise_grpc": args.advertise_grpc,
                "advertise_peer": args.advertise_peer,
                "seeds": args.seeds,
                "bootstrap": args.bootstrap,
                "weight": args.weight,
                "zone": args.zone,
                "node_id": args.node_id,
                "cluster_key": args.cluster_key,
                "preset": args.preset,
                "log_format": args.log_format,
                "fsync": args.fsync,
                "disk_free_bytes_min": args.disk_free_bytes_min,
                "disk_free_percent_min": args.disk_free_percent_min,
                "metrics": args.metrics,
            },
            file_values,
        )
        test_version = os.environ.get("LAMINAR_TEST_PROTOCOL_VERSION")
        if test_version:  # a test hook: a node of another version (laminar.server.transport)
            if not test_version.isdigit():
                raise ConfigError(
                    f"LAMINAR_TEST_PROTOCOL_VERSION must be a number: {test_version!r}"
                )
            config = dataclasses.replace(config, protocol_version=int(test_version))
        log_filter = configure_logging(
            config.log_format, args.log_level, sys.stderr, node_id=config.node_id
        )
        tune_allocator()
        tune_grpc()
        tune_numpy()
        open_files, warning = raise_open_files_limit()

        def on_identity(node_id: str) -> None:
            log_filter.node_id = node_id  # logged from here on with the node's id
            if warning is not None:
                _LOG.warning("%s", warning)
            else:
                _LOG.info("open files limit %d", open_files)

        return run_loop(_run(config, on_identity))
    except LaminarError as error:
        print(f"laminar node: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"laminar node: {error}", file=sys.stderr)
        return 2


async def _run(config: Any, on_identity: Callable[[str], None]) -> int:
    from laminar.server.node import Node

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            sys.exit(1)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    node = await Node.open(config, on_identity=on_identity)  # stops what it started if it fails
    # Everything built so far (modules, gRPC, open logs) lives as long as the node:
    # keep it out of the cyclic collector's generations, so that collections (which
    # pause the loop) only walk what was allocated since.
    gc.freeze()
    print(f"node {node.node_id} ready on {config.advertised_grpc}", flush=True)
    await stop.wait()
    await node.stop(graceful=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m laminar.server start ...`` without the umbrella command."""
    parser = argparse.ArgumentParser(prog="laminar")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register(subparsers, lambda node_commands: None)  # no client commands here
    args = parser.parse_args(argv)
    return int(args.handler(args))
