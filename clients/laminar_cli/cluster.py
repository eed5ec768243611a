"""``laminar cluster status|drain|set-weight|set-zone|maintenance|rolling-restart``
(and ``cluster keyring``, from :mod:`laminar_cli.keyring`)."""

from __future__ import annotations

import argparse
import subprocess
from typing import Any

from laminar_client import ClusterMetadata, MemberInfo, NodeDisk

from laminar.errors import InvalidInputError
from laminar_cli import keyring
from laminar_cli.common import connect, non_negative_float, out, positive_float, table
from laminar_cli.rolling import expand_command, rolling_restart


def register(commands: Any) -> None:
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
    weight.add_argument("weight", type=non_negative_float, help="weight (>= 0; 0 drains)")
    weight.set_defaults(handler=_cluster_set_weight)

    zone = actions.add_parser("set-zone", help="set a node's failure-domain label")
    zone.add_argument("node", help="node id or gRPC address")
    zone.add_argument("zone", help="zone label")
    zone.set_defaults(handler=_cluster_set_zone)

    add_maintenance_command(actions)
    keyring.register(actions)

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
        type=positive_float,
        default=300.0,
        metavar="SECONDS",
        help="longest wait for a hand-over, the command, or a catch-up (default 300)",
    )
    rolling.add_argument(
        "--settle-timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long the check before each node may wait for every other voter to be "
        "in sync before the run stops (default 30)",
    )
    rolling.set_defaults(handler=_cluster_rolling_restart)


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
    maintenance.set_defaults(handler=cluster_maintenance)


def _cluster_status(args: argparse.Namespace) -> int:
    with connect(args) as client:
        description = client.describe_cluster()
    stream = out()
    print(f"cluster {description.cluster_id} (answered by {description.node_id})", file=stream)
    disks = {disk.node_id: disk for disk in description.disks}
    table(
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
    print(file=stream)
    table(
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
    print(f"\n{under} of {len(description.partitions)} partitions under-replicated", file=stream)
    if description.maintenance:
        print(
            f"\nin maintenance: {', '.join(description.maintenance)} (leads nothing; its "
            "replicas stay while it is down, up to maintenance_grace_ms; "
            "`laminar cluster maintenance exit NODE` ends it)",
            file=stream,
        )
    if description.incompatible_peers:
        print("\npeers refused for an incompatible protocol version:", file=stream)
        table(
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
        print("\nreplicas healing from damaged storage (damaged files set aside):", file=stream)
        table(
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
        print("\nreplicas out of service after a storage failure:", file=stream)
        table(
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


def cluster_maintenance(args: argparse.Namespace) -> int:
    """``laminar cluster maintenance`` (and ``laminar node maintenance``)."""
    enter = args.change == "enter"
    with connect(args) as client:
        node_id = _node_id(client.metadata(refresh=True), args.node)
        in_maintenance = client.set_maintenance(node_id, enter)
    state = "in maintenance" if node_id in in_maintenance else "out of maintenance"
    print(
        f"node {node_id}: {state} (in maintenance: {', '.join(in_maintenance) or 'none'})",
        file=out(),
    )
    return 0


def _cluster_rolling_restart(args: argparse.Namespace) -> int:
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else None
    stream = out()

    with connect(args) as client:
        addresses = {m.node_id: m.grpc_address for m in client.describe_cluster().members}

        def restart(node_id: str) -> None:
            command = expand_command(args.command, node_id, addresses.get(node_id, ""))
            print(f"{node_id}: running {command}", file=stream, flush=True)
            done = subprocess.run(command, shell=True, timeout=args.step_timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"`{command}` exited with status {done.returncode}")

        restarted = rolling_restart(
            client,
            restart,
            nodes=nodes,
            step_timeout_s=args.step_timeout,
            settle_timeout_s=args.settle_timeout,
            report=lambda line: print(line, file=stream, flush=True),
        )
    for step in restarted:
        print(
            f"{step.node_id}: handed over in {step.handover_s:.1f} s, restarted in "
            f"{step.restart_s:.1f} s, caught up in {step.catch_up_s:.1f} s",
            file=stream,
        )
    print(f"restarted {len(restarted)} nodes", file=stream)
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
    with connect(args) as client:
        address = _node_address(client.metadata(refresh=True), args.node)
        member = client.update_node(address, weight=weight, zone=zone)
    print(
        f"node {member.node_id}: weight={member.weight:g} zone={member.zone or '-'} "
        f"state={member.state}",
        file=out(),
    )
    return 0


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
