"""Run a membership-only node: ``python -m laminar.membership --node-id a --bind ...``.

The node joins through its seeds, takes part in SWIM failure detection and
gossip, and prints one JSON object per line on stdout, so that scripts and tests
can follow its view of the cluster:

* ``{"event": "started", "node_id": ..., "address": ..., "at_ms": ...}`` once bound;
* ``{"event": "member", "kind": "joined|updated|suspect|alive|dead|left",
  "observer": ..., "node_id": ..., "state": ..., "incarnation": ...,
  "gossip_address": ..., "grpc_address": ..., "weight": ..., "zone": ...,
  "at_ms": ...}`` for every membership change it observes;
* ``{"event": "stopped", "node_id": ..., "left": true}`` after a graceful leave.

SIGTERM or SIGINT makes the node leave gracefully (the cluster marks it ``left``,
not ``dead``) and exit with status 0. Logs go to stderr. Bad arguments exit with
status 2 and a one-line message; a failure to bind exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from laminar.address import parse_address
from laminar.errors import ConfigError
from laminar.membership.codec import validate_identity_fields, validate_metadata
from laminar.membership.config import PRESETS, MembershipConfig
from laminar.membership.core import LocalMember
from laminar.membership.member import MemberEvent, NodeId
from laminar.membership.shell import MembershipNode

CLUSTER_KEY_ENVIRONMENT = "LAMINAR_CLUSTER_KEY"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m laminar.membership",
        description=(
            "Run a membership-only Laminar node (SWIM gossip with Lifeguard). "
            "Prints membership events as JSON lines on stdout; SIGTERM leaves "
            "the cluster gracefully and exits 0."
        ),
    )
    parser.add_argument(
        "--node-id", required=True, help="stable identity of this node (unique in the cluster)"
    )
    parser.add_argument(
        "--bind",
        required=True,
        metavar="HOST:PORT",
        help="UDP gossip and TCP push-pull address; also what other members use to "
        "reach this node, so give a routable address (port 0 picks a free one)",
    )
    parser.add_argument(
        "--grpc-address",
        default="",
        metavar="HOST:PORT",
        help="gRPC address announced to the cluster (default: none)",
    )
    parser.add_argument(
        "--seeds",
        default="",
        metavar="HOST:PORT,...",
        help="comma-separated gossip addresses to join through; empty starts a new "
        "cluster (default: empty)",
    )
    parser.add_argument(
        "--weight", type=float, default=1.0, help="capacity for placement, >= 0 (default: 1.0)"
    )
    parser.add_argument("--zone", default="", help="failure-domain label (default: none)")
    parser.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a metadata entry gossiped with this member (repeatable)",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="lan",
        help="timing preset: lan (defaults of a LAN), local (fast, one machine), "
        "simulation (default: lan)",
    )
    parser.add_argument(
        "--cluster-key",
        default=None,
        help="shared secret authenticating every packet; packets under another key "
        f"are dropped (default: the {CLUSTER_KEY_ENVIRONMENT} environment variable)",
    )
    parser.add_argument(
        "--incarnation",
        type=int,
        default=0,
        help="starting incarnation; a restarted node also refutes any higher one it "
        "hears about itself (default: 0)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="log level of the key=value logs on stderr (default: info)",
    )
    return parser


def parse_arguments(
    argv: Sequence[str] | None,
) -> tuple[MembershipConfig, LocalMember, bytes, tuple[str, ...], int, str]:
    """Validate everything before any socket is opened; parser.error (exit 2) if bad."""
    parser = build_parser()
    args = parser.parse_args(argv)
    cluster_key_text = args.cluster_key
    if cluster_key_text is None:
        cluster_key_text = os.environ.get(CLUSTER_KEY_ENVIRONMENT, "")
    if not cluster_key_text:
        parser.error(f"a cluster key is required: --cluster-key or {CLUSTER_KEY_ENVIRONMENT}")
    seeds = tuple(seed.strip() for seed in args.seeds.split(",") if seed.strip())
    metadata: list[tuple[str, str]] = []
    for item in args.metadata:
        key, separator, value = item.partition("=")
        if not separator or not key:
            parser.error(f"--metadata must be KEY=VALUE, got {item!r}")
        metadata.append((key, value))
    if args.incarnation < 0:
        parser.error("--incarnation must be >= 0")
    config = PRESETS[args.preset]()
    local = LocalMember(
        node_id=NodeId(args.node_id),
        gossip_address=args.bind,
        grpc_address=args.grpc_address,
        weight=args.weight,
        zone=args.zone,
        metadata=tuple(sorted(metadata)),
    )
    try:
        parse_address(args.bind, what="--bind", port_zero=True)
        for seed in seeds:
            parse_address(seed, what="seed")
        if args.grpc_address:
            parse_address(args.grpc_address, what="--grpc-address")
        validate_identity_fields(
            local.node_id, local.gossip_address, local.grpc_address, local.weight, local.zone
        )
        validate_metadata(local.metadata, config.metadata_bytes_max)
    except ConfigError as error:
        parser.error(str(error))
    return config, local, cluster_key_text.encode(), seeds, args.incarnation, args.log_level


class JsonLines:
    """Writes one JSON object per line and flushes, so a reader sees it at once."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, record: dict[str, object]) -> None:
        try:
            self._stream.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # nobody reads any more; the node itself carries on

    def member_event(self, observer: NodeId, event: MemberEvent) -> None:
        member = event.member
        self.write(
            {
                "event": "member",
                "kind": event.kind.value,
                "observer": observer,
                "node_id": member.node_id,
                "state": member.state.value,
                "incarnation": member.incarnation,
                "gossip_address": member.gossip_address,
                "grpc_address": member.grpc_address,
                "weight": member.weight,
                "zone": member.zone,
                "at_ms": event.at_ms,
            }
        )


async def run_node(
    config: MembershipConfig,
    local: LocalMember,
    cluster_key: bytes,
    seeds: Sequence[str],
    incarnation: int,
    output: JsonLines,
) -> None:
    """Run until SIGTERM or SIGINT, then leave gracefully."""
    node = MembershipNode(
        config,
        local,
        cluster_key,
        seeds=seeds,
        incarnation=incarnation,
        on_event=lambda event: output.member_event(local.node_id, event),
    )
    try:
        await node.start()
    except OSError as error:
        raise SystemExit(
            f"error: cannot bind {local.gossip_address}: {error.strerror or error}"
        ) from None
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signal_number, stop_requested.set)
    try:
        output.write(
            {
                "event": "started",
                "node_id": local.node_id,
                "address": node.local.gossip_address,
                "at_ms": int(loop.time() * 1000),
            }
        )
        await stop_requested.wait()
        await node.stop(leave=True)
        output.write({"event": "stopped", "node_id": local.node_id, "left": True})
    finally:
        await node.stop(leave=False)
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signal_number)


def main(argv: Sequence[str] | None = None) -> int:
    config, local, cluster_key, seeds, incarnation, log_level = parse_arguments(argv)
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    output = JsonLines(sys.stdout)
    try:
        asyncio.run(run_node(config, local, cluster_key, seeds, incarnation, output))
    except KeyboardInterrupt:  # a second Ctrl-C while leaving
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
