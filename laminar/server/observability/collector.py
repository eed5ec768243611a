"""The node's metric families, built from a :class:`~.snapshot.NodeSnapshot`.

Names follow Prometheus' naming guide: the ``laminar_`` prefix, base units in the
name (``_seconds``, ``_bytes``), ``_total`` on counters (``prometheus_client`` adds
it to a counter family's name), and labels only over small sets (RPC names, error
codes, states, reasons) unless per-partition series are asked for. docs/operations.md
("What to watch") has the table of families and the alerts on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from laminar.server.observability.histogram import HistogramCounts
from laminar.server.observability.snapshot import NodeSnapshot

MEMBER_STATES = ("alive", "suspect", "dead", "left")
LINK_STATES = ("connecting", "connected", "backoff")
GROUP_STATES = ("empty", "stable", "reconciling")
GOSSIP_REJECT_REASONS = ("authentication", "malformed", "oversized", "truncated", "version")
"""Always exported (0 until one happens); the keyring's reasons appear once counted."""

_REFUSALS = {
    "produce_calls_max": ("host", "produce_refused"),
    "disk_full": ("host", "produce_refused_no_space"),
    "calls_max": ("service", "calls_refused"),
    "fetch_waiters_max": ("host", "fetch_wait_refused"),
    "queued_inputs_max": ("host", "inputs_dropped"),
}
"""``laminar_requests_refused_total{reason}``: reason -> (counter owner, counter):
a produce refused for a partition's queue of calls (``produce_calls_max``) or a
full disk, a call refused by the node's call limit, a fetch answered at once
because too many wait on its partition, a replica input dropped for a full queue."""

_TRANSPORT_SENT_DROPPED = {
    "full": "dropped_full",
    "unreachable": "dropped_unreachable",
    "oversized": "dropped_oversized",
}
_TRANSPORT_REJECTED = {
    "malformed": "rejected_malformed",
    "cluster": "rejected_cluster",
    "version": "rejected_version",
    "identity": "rejected_identity",
    "handler_error": "handler_errors",
    "connections_max": "refused_connections",
    "tls_handshake": "tls_failures",
}


class NodeCollector:
    """A ``prometheus_client`` collector: each :meth:`collect` takes a fresh
    snapshot through ``take`` and yields the families built from it."""

    def __init__(self, take: Callable[[], NodeSnapshot]) -> None:
        self._take = take

    def collect(self) -> Iterator[Metric]:
        yield from families(self._take())


def families(snapshot: NodeSnapshot) -> list[Metric]:
    """Every metric family of ``snapshot``."""
    return [
        *_node(snapshot),
        *_partitions(snapshot),
        *_requests(snapshot),
        *_storage(snapshot),
        *_peers(snapshot),
        *_groups(snapshot),
        *_partition_series(snapshot),
    ]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _by_label(
    family: GaugeMetricFamily | CounterMetricFamily,
    values: Mapping[str, float],
    always: tuple[str, ...] = (),
) -> GaugeMetricFamily | CounterMetricFamily:
    """One sample per label value: ``always`` first (0 when absent), then the rest."""
    for value in always:
        family.add_metric([value], values.get(value, 0))
    for value in sorted(set(values) - set(always)):
        family.add_metric([value], values[value])
    return family


def _histogram(family: HistogramMetricFamily, labels: list[str], counts: HistogramCounts) -> None:
    family.add_metric(labels, counts.cumulative(), counts.sum)


def _node(snapshot: NodeSnapshot) -> list[Metric]:
    info = GaugeMetricFamily(
        "laminar_build_info",
        "The node's version and peer protocol version (value 1).",
        labels=["version", "protocol"],
    )
    info.add_metric([snapshot.version, str(snapshot.protocol_version)], 1)
    members = GaugeMetricFamily(
        "laminar_members",
        "Cluster members by state, as this node's gossip sees them (itself included).",
        labels=["state"],
    )
    rejected = CounterMetricFamily(
        "laminar_gossip_packets_rejected",
        "Gossip packets dropped on receipt, by reason (authentication, malformed, "
        "version, oversized, truncated; with gossip encryption unknown_key, decrypt, "
        "replay, replay_window, plain).",
        labels=["reason"],
    )
    reasons = {
        name.removeprefix("dropped_"): count
        for name, count in snapshot.gossip_counters.items()
        if name.startswith("dropped_")
    }
    tls: list[Metric] = []
    if snapshot.tls_expiry_s is not None:
        tls.append(
            _gauge(
                "laminar_tls_certificate_expiry_timestamp_seconds",
                "When the node's current [tls] certificate expires (Unix time).",
                snapshot.tls_expiry_s,
            )
        )
    return [
        info,
        _gauge(
            "laminar_ready",
            "1 while the node is ready (joined, metadata applied, no fenced replica): /ready.",
            1 if snapshot.readiness.ready else 0,
        ),
        _by_label(members, snapshot.members, MEMBER_STATES),
        _by_label(rejected, reasons, GOSSIP_REJECT_REASONS),
        _gauge(
            "laminar_metadata_applied_offset",
            "The next offset of the metadata log __cluster/0 this node will apply.",
            snapshot.metadata_applied_offset,
        ),
        *tls,
    ]


def _partitions(snapshot: NodeSnapshot) -> list[Metric]:
    host = snapshot.host_counters
    return [
        _gauge("laminar_replicas", "Partition replicas open on this node.", snapshot.replicas),
        _gauge(
            "laminar_partitions_led",
            "Partitions this node leads.",
            snapshot.partitions_led,
        ),
        _gauge(
            "laminar_partitions_under_replicated",
            "Partitions this node leads with fewer live in-sync replicas than their "
            "replication factor (as DescribeCluster's under_replicated).",
            snapshot.under_replicated,
        ),
        _gauge(
            "laminar_partitions_leaderless",
            "Replicas on this node whose group has no usable leader (none known, or "
            "its node dead or silent past the election timeout): an election is due "
            "or under way.",
            snapshot.leaderless,
        ),
        _gauge(
            "laminar_partitions_fenced",
            "Replicas out of service after a storage failure (cluster status: fenced).",
            snapshot.fenced,
        ),
        _gauge(
            "laminar_partitions_damaged",
            "Replicas healing from damaged storage (cluster status: damaged).",
            snapshot.damaged,
        ),
        _counter(
            "laminar_elections",
            "Elections started by replicas on this node (a replica became candidate).",
            host.get("elections", 0),
        ),
        _counter(
            "laminar_leaderships_gained",
            "Times a replica on this node became its partition's leader.",
            host.get("leaderships_gained", 0),
        ),
        _counter(
            "laminar_leader_changes",
            "Times a replica on this node learnt of a new leader of its partition.",
            host.get("leader_changes", 0),
        ),
    ]


def _requests(snapshot: NodeSnapshot) -> list[Metric]:
    requests = snapshot.requests
    latency = HistogramMetricFamily(
        "laminar_request_duration_seconds",
        "gRPC calls handled by this node, by method and outcome (OK or the error code "
        "sent), and how long each took (a fetch includes its long-poll).",
        labels=["rpc", "code"],
    )
    errors = CounterMetricFamily(
        "laminar_request_errors",
        "gRPC calls answered with an error, by method and error code.",
        labels=["rpc", "code"],
    )
    for (rpc, code), counts in sorted(requests.latency.items()):
        _histogram(latency, [rpc, code], counts)
        if code != "OK":
            errors.add_metric([rpc, code], counts.count)
    refused = CounterMetricFamily(
        "laminar_requests_refused",
        "Requests refused or cut short by a limit, by the limit (docs/operations.md).",
        labels=["reason"],
    )
    owners = {"host": snapshot.host_counters, "service": snapshot.service_counters}
    for reason, (owner, name) in _REFUSALS.items():
        refused.add_metric([reason], owners[owner].get(name, 0))
    return [
        latency,
        errors,
        refused,
        _gauge(
            "laminar_requests_in_progress",
            "gRPC calls being handled now.",
            snapshot.calls_in_progress,
        ),
        _counter(
            "laminar_produced_records",
            "Records appended by produce calls this node led (duplicates not counted).",
            requests.produced_records,
        ),
        _counter(
            "laminar_produced_bytes",
            "Bytes of the batches appended by produce calls this node led.",
            requests.produced_bytes,
        ),
        _counter(
            "laminar_fetched_records",
            "Records served by fetch calls (from the offset asked for on).",
            requests.fetched_records,
        ),
        _counter(
            "laminar_fetched_bytes",
            "Bytes of batches served by fetch calls.",
            requests.fetched_bytes,
        ),
    ]


def _storage(snapshot: NodeSnapshot) -> list[Metric]:
    fsync = HistogramMetricFamily(
        "laminar_fsync_duration_seconds",
        "Fsync rounds (one log synced on the loop, several in parallel, or one "
        "syncfs for many) and how long each took.",
    )
    _histogram(fsync, [], snapshot.fsync)
    host = snapshot.host_counters
    directory = [snapshot.data_dir]
    log_bytes = GaugeMetricFamily(
        "laminar_log_bytes",
        "Bytes held by the replicas' logs, per data directory.",
        labels=["directory"],
    )
    log_bytes.add_metric(directory, snapshot.log_bytes)
    free = GaugeMetricFamily(
        "laminar_disk_free_bytes",
        "Free space of the data directory's filesystem (as last checked).",
        labels=["directory"],
    )
    free.add_metric(directory, snapshot.disk.free_bytes)
    total = GaugeMetricFamily(
        "laminar_disk_size_bytes",
        "Size of the data directory's filesystem.",
        labels=["directory"],
    )
    total.add_metric(directory, snapshot.disk.total_bytes)
    watermark = GaugeMetricFamily(
        "laminar_disk_free_watermark_bytes",
        "Free space below which the node is full (leads nothing, takes no replicas).",
        labels=["directory"],
    )
    watermark.add_metric(directory, snapshot.disk.watermark_bytes)
    full = GaugeMetricFamily(
        "laminar_disk_full",
        "1 while the data directory's filesystem is below its free-space watermark.",
        labels=["directory"],
    )
    full.add_metric(directory, 1 if snapshot.disk.full else 0)
    return [
        fsync,
        _counter("laminar_fsyncs", "Logs fsynced (or synced by a syncfs).", host.get("fsyncs", 0)),
        _counter(
            "laminar_storage_failures",
            "Storage failures that fenced a replica.",
            host.get("storage_failures", 0),
        ),
        _counter(
            "laminar_damage_found",
            "Damaged batches or files found (opening, scrubbing, reported by consumers).",
            host.get("damage_found", 0),
        ),
        log_bytes,
        free,
        total,
        watermark,
        full,
    ]


def _peers(snapshot: NodeSnapshot) -> list[Metric]:
    transport = snapshot.transport
    links = GaugeMetricFamily(
        "laminar_peer_links",
        "Replication links to peers, by state (connected: up).",
        labels=["state"],
    )
    dropped = CounterMetricFamily(
        "laminar_peer_frames_dropped",
        "Replication frames this node dropped instead of sending, by reason (full: "
        "the link's buffer, unreachable: no connection, oversized).",
        labels=["reason"],
    )
    for reason, name in _TRANSPORT_SENT_DROPPED.items():
        dropped.add_metric([reason], getattr(transport, name))
    rejected = CounterMetricFamily(
        "laminar_peer_frames_rejected",
        "Replication frames or connections refused on receipt, by reason.",
        labels=["reason"],
    )
    for reason, name in _TRANSPORT_REJECTED.items():
        rejected.add_metric([reason], getattr(transport, name))
    return [
        _by_label(links, snapshot.links, LINK_STATES),
        _counter("laminar_peer_frames_sent", "Replication frames sent.", transport.sent),
        _counter(
            "laminar_peer_frames_received", "Replication frames received.", transport.received
        ),
        dropped,
        rejected,
    ]


def _groups(snapshot: NodeSnapshot) -> list[Metric]:
    groups = GaugeMetricFamily(
        "laminar_groups",
        "Consumer groups this node coordinates, by state.",
        labels=["state"],
    )
    return [
        _by_label(groups, snapshot.groups, GROUP_STATES),
        _gauge(
            "laminar_group_committed_offsets",
            "Committed offsets held by the groups this node coordinates.",
            snapshot.committed_offsets,
        ),
    ]


def _partition_series(snapshot: NodeSnapshot) -> list[Metric]:
    """The opt-in per-partition series (``partition_series``); none when off."""
    if not snapshot.partition_series and not snapshot.group_offsets:
        return []
    labels = ["topic", "partition"]
    high = GaugeMetricFamily(
        "laminar_partition_high_watermark",
        "The replica's high watermark (next offset to commit).",
        labels=labels,
    )
    start = GaugeMetricFamily(
        "laminar_partition_log_start_offset",
        "The replica's first offset held.",
        labels=labels,
    )
    for item in snapshot.partition_series:
        names = [item.topic, str(item.partition)]
        high.add_metric(names, item.high_watermark)
        start.add_metric(names, item.log_start_offset)
    group_labels = ["group", "topic", "partition"]
    committed = GaugeMetricFamily(
        "laminar_group_committed_offset",
        "A group's committed offset (the next offset to read).",
        labels=group_labels,
    )
    lag = GaugeMetricFamily(
        "laminar_group_lag_records",
        "A group's lag: the partition's high watermark minus its committed offset "
        "(where this node holds the partition).",
        labels=group_labels,
    )
    for offset in snapshot.group_offsets:
        names = [offset.group, offset.topic, str(offset.partition)]
        committed.add_metric(names, offset.committed_offset)
        if offset.lag_records is not None:
            lag.add_metric(names, offset.lag_records)
    return [high, start, committed, lag]
