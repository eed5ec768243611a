"""The ``prometheus_client`` collectors of a producer and a consumer.

Imported only by :func:`laminar_client.metrics_registry.register_metrics` (this module
imports ``prometheus_client``, an optional extra). A collector reads the client's
``metrics()`` snapshot at each scrape and turns it into metric families named
``laminar_client_producer_*`` / ``laminar_client_consumer_*`` with units in the name
(Prometheus' naming guide: counters end in ``_total``, sizes in ``_bytes``, times in
``_seconds``). Every series has the ``client_id`` label; per-topic series add
``topic``, the consumer's lag ``topic`` and ``partition`` (bounded by what the
consumer is assigned), errors ``error`` (an error class name: a fixed set).
``docs/client.md`` ("Metrics") lists every family.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric

from laminar_client.metrics import (
    ConsumerMetrics,
    LatencyHistogram,
    MetricsSource,
    ProducerMetrics,
)

_PRODUCER = "laminar_client_producer_"
_CONSUMER = "laminar_client_consumer_"


class _Collector:
    """Reads ``source.metrics()`` at each scrape (``prometheus_client``'s custom
    collector protocol: ``collect``)."""

    def __init__(self, source: MetricsSource, client_id: str) -> None:
        self._source = source
        self._client_id = client_id

    def collect(self) -> Iterator[Metric]:
        snapshot = self._source.metrics()
        if isinstance(snapshot, ProducerMetrics):
            yield from _producer_families(snapshot, self._client_id)
        else:
            yield from _consumer_families(snapshot, self._client_id)


def collector_for(source: MetricsSource, client_id: str) -> _Collector:
    return _Collector(source, client_id)


def _counter(name: str, documentation: str, client_id: str, value: float) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=["client_id"])
    family.add_metric([client_id], value)
    return family


def _gauge(name: str, documentation: str, client_id: str, value: float) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=["client_id"])
    family.add_metric([client_id], value)
    return family


def _by_error(name: str, documentation: str, client_id: str, counts: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=["client_id", "error"])
    for error, count in sorted(counts.items()):
        family.add_metric([client_id, error], count)
    return family


def _producer_families(m: ProducerMetrics, client_id: str) -> Iterable[Metric]:
    labels = ["client_id", "topic"]
    records = CounterMetricFamily(
        _PRODUCER + "records_sent", "Records acknowledged (acks=none: sent).", labels=labels
    )
    sent_bytes = CounterMetricFamily(
        _PRODUCER + "sent_bytes", "Encoded bytes of the batches acknowledged.", labels=labels
    )
    batches = CounterMetricFamily(
        _PRODUCER + "batches_sent", "Batches acknowledged.", labels=labels
    )
    for topic, sent in sorted(m.topics.items()):
        records.add_metric([client_id, topic], sent.records)
        sent_bytes.add_metric([client_id, topic], sent.bytes)
        batches.add_metric([client_id, topic], sent.batches)
    yield from (records, sent_bytes, batches)
    yield _counter(
        _PRODUCER + "attempts", "Produce attempts, one per batch sent.", client_id, m.attempts
    )
    yield _counter(
        _PRODUCER + "retries", "Failed attempts whose batch is sent again.", client_id, m.retries
    )
    yield _by_error(
        _PRODUCER + "attempt_errors",
        "Failed produce attempts (one per batch) by error class.",
        client_id,
        m.attempt_errors,
    )
    yield _by_error(
        _PRODUCER + "records_failed",
        "Records whose delivery failed, by error class.",
        client_id,
        m.records_failed,
    )
    yield _counter(
        _PRODUCER + "restamps",
        "Unresolved batches given a new producer id (proved unwritten).",
        client_id,
        m.restamps,
    )
    yield _counter(
        _PRODUCER + "partition_count_changes",
        "Topics written to seen with more partitions (keyed records remap).",
        client_id,
        m.partition_count_changes,
    )
    yield _gauge(
        _PRODUCER + "in_flight_batches",
        "Batches in an attempt (awaiting its answer, or its backoff).",
        client_id,
        m.batches_in_flight,
    )
    yield _gauge(
        _PRODUCER + "buffer_used_bytes",
        "Bytes of records taken and not yet acknowledged or failed.",
        client_id,
        m.buffer_bytes,
    )
    yield _gauge(
        _PRODUCER + "buffer_max_bytes",
        "The buffer's limit (buffer_bytes_max), where send blocks.",
        client_id,
        m.buffer_bytes_max,
    )


def _histogram(name: str, documentation: str, client_id: str, h: LatencyHistogram) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=["client_id"])
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound_s, count in zip(h.bounds_s, h.counts, strict=False):
        cumulative += count
        buckets.append((repr(float(bound_s)), cumulative))  # 0.001, 1.0: as Go writes them
    buckets.append(("+Inf", h.count))
    family.add_metric([client_id], buckets, h.sum_s)
    return family


def _consumer_families(m: ConsumerMetrics, client_id: str) -> Iterable[Metric]:
    yield _counter(_CONSUMER + "fetches", "Fetch requests sent.", client_id, m.fetches)
    yield _histogram(
        _CONSUMER + "fetch_latency_seconds",
        "Latency of the fetches that answered (a caught-up fetch long-polls).",
        client_id,
        m.fetch_latency,
    )
    yield _by_error(
        _CONSUMER + "fetch_errors", "Failed fetches by error class.", client_id, m.fetch_errors
    )
    yield _counter(
        _CONSUMER + "fetched_bytes",
        "Bytes of record batches the fetches brought.",
        client_id,
        m.bytes_fetched,
    )
    yield _counter(
        _CONSUMER + "records_consumed",
        "Records handed to the application.",
        client_id,
        m.records_consumed,
    )
    yield _counter(
        _CONSUMER + "consumed_bytes",
        "Bytes of the fetch answers the application took.",
        client_id,
        m.bytes_consumed,
    )
    lag = GaugeMetricFamily(
        _CONSUMER + "lag_records",
        "High watermark (as the last fetch saw it) minus the position, per assigned partition.",
        labels=["client_id", "topic", "partition"],
    )
    for (topic, partition), records in sorted(m.lag_records.items()):
        lag.add_metric([client_id, topic, str(partition)], records)
    yield lag
    yield _gauge(
        _CONSUMER + "prefetched_bytes",
        "Bytes fetched and not yet taken by the application.",
        client_id,
        m.prefetched_bytes,
    )
    yield _gauge(
        _CONSUMER + "prefetch_max_bytes",
        "The prefetch limit (prefetch_bytes_max).",
        client_id,
        m.prefetch_bytes_max,
    )
    yield _counter(
        _CONSUMER + "replica_switches",
        "Times a partition's fetches moved to another replica.",
        client_id,
        m.replica_switches,
    )
    yield _counter(
        _CONSUMER + "corrupt_batches",
        "Batches a replica served corrupt (read again elsewhere).",
        client_id,
        m.corrupt_batches,
    )
