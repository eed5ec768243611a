"""One consistent snapshot of a node's state, taken on its event loop for a scrape.

Everything a replica host, the service, the transport and the group coordinators
count lives on the node's event loop; :func:`take_snapshot` reads it there in one
go (no ``await`` between the reads, so every figure is of the same instant) and
returns frozen values that the HTTP thread turns into metric families
(:mod:`laminar.server.observability.collector`) without touching the node. Its cost
is a pass over the node's replicas (a few milliseconds for thousands); per-partition
series are gathered only when asked for (``partition_series``).

:func:`readiness` is the rule of ``/ready``: the node joined (it is started and not
stopping), applied the metadata log up to the cluster's offset as it knows it (its
own replica's high watermark, or the one the node it long-polls answered), and has
no fenced replica.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laminar import __version__
from laminar.replica.types import Role
from laminar.segment.log import SegmentLog
from laminar.server.disk import DiskStatus
from laminar.server.groups import group_status
from laminar.server.metadata import METADATA_KEY
from laminar.server.observability.histogram import HistogramCounts, RequestCounts
from laminar.server.service import alive_nodes, replication_factor
from laminar.server.transport import TransportCounters

if TYPE_CHECKING:
    from laminar.server.node import Node


@dataclass(frozen=True, slots=True)
class Readiness:
    """The answer of ``/ready``: ready or not, and why not in one line."""

    ready: bool
    reason: str


@dataclass(frozen=True, slots=True)
class PartitionSeries:
    """A replica's offsets (``partition_series`` other than ``none``)."""

    topic: str
    partition: int
    leader: bool
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """A committed offset of a group this node coordinates; the lag against the
    high watermark of this node's replica of the partition (None: not held here,
    or not led here with ``partition_series = leaders``)."""

    group: str
    topic: str
    partition: int
    committed_offset: int
    lag_records: int | None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """What one scrape exports (see :mod:`laminar.server.observability.collector`)."""

    node_id: str
    version: str
    protocol_version: int
    replicas: int
    partitions_led: int
    under_replicated: int
    leaderless: int
    fenced: int
    damaged: int
    members: dict[str, int]
    """Members by state (``alive``, ``suspect``, ``dead``, ``left``), this node included."""
    host_counters: dict[str, int]
    service_counters: dict[str, int]
    calls_in_progress: int
    requests: RequestCounts
    fsync: HistogramCounts
    transport: TransportCounters
    links: dict[str, int]
    """Peer links by state (``connecting``, ``connected``, ``backoff``)."""
    gossip_counters: dict[str, int]
    data_dir: str
    log_bytes: int
    disk: DiskStatus
    groups: dict[str, int]
    """Groups this node coordinates, by state (``empty``, ``stable``, ``reconciling``)."""
    committed_offsets: int
    """Committed offsets held by the groups this node coordinates."""
    metadata_applied_offset: int
    tls_expiry_s: float | None
    """When the node's TLS certificate expires (Unix seconds); None without TLS."""
    readiness: Readiness
    partition_series: tuple[PartitionSeries, ...] = ()
    group_offsets: tuple[GroupOffset, ...] = ()


def readiness(node: Node) -> Readiness:
    """The rule of ``/ready`` (module docstring); runs on the node's event loop."""
    if node.stopping:
        return Readiness(False, "stopping")
    if not node.ready.is_set():
        return Readiness(False, "starting")
    applied = node.metadata.applied_offset
    target = node.metadata_offset_seen()
    if target is None:
        return Readiness(False, "metadata: no node has answered yet")
    if applied < target:
        return Readiness(False, f"metadata applied to offset {applied} of {target}")
    fenced = node.host.fenced()
    if fenced:
        first = fenced[0]
        return Readiness(
            False, f"{len(fenced)} fenced replica(s), e.g. {first.key[0]}/{first.key[1]}"
        )
    return Readiness(True, "ready")


async def take_snapshot(node: Node, partition_series: str) -> NodeSnapshot:
    """The node's state for one scrape; call it on the node's event loop."""
    gossip = await node.membership.counters()  # the one await: before the reads below
    host = node.host
    now_ms = host.now_ms()
    members = node.members()
    alive = alive_nodes(node.node_id, members)
    led = under_replicated = leaderless = log_bytes = 0
    series: list[PartitionSeries] = []
    heads: dict[tuple[str, int], int] = {}
    want_series = partition_series != "none"
    for key in host.replica_keys():
        replica = host.get(key)
        if replica is None:
            continue
        core = replica.core
        log = replica.log
        if isinstance(log, SegmentLog):
            log_bytes += log.size_bytes
        leads = core.role is Role.LEADER
        if leads:
            led += 1
            in_sync = sum(1 for voter in core.in_sync_voters(now_ms) if voter in alive)
            if in_sync < replication_factor(node, key):
                under_replicated += 1
        elif not host.leader_usable(key):
            leaderless += 1
        if want_series and (leads or partition_series == "all") and key != METADATA_KEY:
            heads[key] = core.high_watermark
            series.append(
                PartitionSeries(key[0], key[1], leads, core.high_watermark, core.start_offset)
            )
    groups: Counter[str] = Counter()
    committed = 0
    offsets: list[GroupOffset] = []
    for group in node.groups.led_groups():
        groups[group_status(group)] += 1
        committed += len(group.commits)
        if want_series:
            for (topic, partition), position in sorted(group.commits.items()):
                head = heads.get((topic, partition))
                lag = None if head is None else max(0, head - position.next_offset)
                offsets.append(
                    GroupOffset(group.group_id, topic, partition, position.next_offset, lag)
                )
    return NodeSnapshot(
        node_id=node.node_id,
        version=__version__,
        protocol_version=node.protocol_version,
        replicas=len(host.replica_keys()),
        partitions_led=led,
        under_replicated=under_replicated,
        leaderless=leaderless,
        fenced=len(host.fenced()),
        damaged=len(host.damaged()),
        members=dict(Counter(member.state.value for member in members)),
        host_counters=dict(host.counters),
        service_counters=dict(node.service.counters),
        calls_in_progress=node.service.calls,
        requests=node.service.stats.copy(),
        fsync=host.fsync_seconds.copy(),
        transport=node.transport.counters,
        links=dict(Counter(state.value for state in node.transport.link_states().values())),
        gossip_counters=gossip,
        data_dir=node.config.data_dir,
        log_bytes=log_bytes,
        disk=host.disk_status(),
        groups=dict(groups),
        committed_offsets=committed,
        metadata_applied_offset=node.metadata.applied_offset,
        tls_expiry_s=node.tls_expiry_s(),
        readiness=readiness(node),
        partition_series=tuple(series),
        group_offsets=tuple(offsets),
    )
