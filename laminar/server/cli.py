"""``laminar node start``: run a broker node in the foreground.

Registered into the ``laminar`` command by :func:`register`. SIGTERM or SIGINT stops
the node gracefully (leaderships handed over, ``left`` gossiped); a second signal
exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from laminar.errors import LaminarError
from laminar.server.config import PRESETS, build_config, load_toml
from laminar.tuning import raise_open_files_limit, tune_allocator, tune_grpc, tune_numpy

_T = TypeVar("_T")
_LOG = logging.getLogger(__name__)

SERVER_MODULES = ("grpc_health", "grpc_reflection")
"""What a node imports beyond the client's dependencies: the ``laminar[server]`` extra
(uvloop, the extra's third package, is optional: without it the node runs on asyncio's
own loop)."""


def register(subparsers: Any) -> None:
    """Add ``node start`` to the ``laminar`` command's subparsers."""
    node = subparsers.add_parser("node", help="run a broker node")
    node_commands = node.add_subparsers(dest="node_command", required=True)
    start = node_commands.add_parser(
        "start",
        help="start a node in the foreground",
        description="Start a broker node. Options override the --config file, which "
        "overrides the preset.",
    )
    start.add_argument("--data-dir", help="directory for the node id and partition data")
    start.add_argument(
        "--gossip", metavar="HOST:PORT", help="gossip address, UDP+TCP (default 127.0.0.1:7000)"
    )
    start.add_argument(
        "--grpc", metavar="HOST:PORT", help="gRPC API address (default 127.0.0.1:7100)"
    )
    start.add_argument(
        "--peer",
        metavar="HOST:PORT",
        help="replication address, TCP, for other nodes (default 127.0.0.1:7200)",
    )
    start.add_argument(
        "--seeds", metavar="HOST:PORT[,...]", help="gossip addresses of nodes to join through"
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
        help="timing preset (default local: fast, for tests)",
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
    start.add_argument("--config", metavar="FILE", help="TOML file with the same keys")
    start.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    start.set_defaults(handler=_start)


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
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        file_values = load_toml(args.config) if args.config else {}
        config = build_config(
            {
                "data_dir": args.data_dir,
                "gossip": args.gossip,
                "grpc": args.grpc,
                "peer": args.peer,
                "seeds": args.seeds,
                "bootstrap": args.bootstrap,
                "weight": args.weight,
                "zone": args.zone,
                "node_id": args.node_id,
                "cluster_key": args.cluster_key,
                "preset": args.preset,
                "fsync": args.fsync,
                "disk_free_bytes_min": args.disk_free_bytes_min,
                "disk_free_percent_min": args.disk_free_percent_min,
            },
            file_values,
        )
        tune_allocator()
        tune_grpc()
        tune_numpy()
        open_files, warning = raise_open_files_limit()
        if warning is not None:
            _LOG.warning("%s", warning)
        else:
            _LOG.info("open files limit %d", open_files)
        return run_loop(_run(config))
    except LaminarError as error:
        print(f"laminar node: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"laminar node: {error}", file=sys.stderr)
        return 2


async def _run(config: Any) -> int:
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
    node = await Node.open(config)  # stops what it started if it fails
    # Everything built so far (modules, gRPC, open logs) lives as long as the node:
    # keep it out of the cyclic collector's generations, so that collections (which
    # pause the loop) only walk what was allocated since.
    gc.freeze()
    print(f"node {node.node_id} ready on {config.grpc}", flush=True)
    await stop.wait()
    await node.stop(graceful=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m laminar.server start ...`` without the umbrella command."""
    parser = argparse.ArgumentParser(prog="laminar")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register(subparsers)
    args = parser.parse_args(argv)
    return int(args.handler(args))
