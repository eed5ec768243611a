"""Client metrics: ``Producer.metrics()`` / ``Consumer.metrics()`` (sync and async)
against the in-process fake cluster, their export to a ``prometheus_client``
registry, and the latency histogram."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from laminar_client import ClientClosedError, InvalidInputError, TopicPartition
from laminar_client.metrics import LatencyHistogram, LatencyRecorder, TopicSent
from prometheus_client import CollectorRegistry, generate_latest

from laminar.errors import UnavailableError
from tests.client.fake_server import FakeCluster
from tests.client.test_consumer import (
    TOPIC,
    TP0,
    TP1,
    Facade,
    append_values,
    consumer,  # noqa: F401  (the fixture)
    offsets,
    wait_until,
)
from tests.client.test_producer import (
    OVERHEAD,
    Harness,
    add_topic,
    h,  # noqa: F401  (the fixture, used through `facade`)
    wait_for,
)
from tests.client.test_producer_suite import Facade as ProducerFacade
from tests.client.test_producer_suite import facade  # noqa: F401  (the fixture)

VALUE = b"v" * 100  # 116 bytes in the buffer: 8 fill a 1024-byte batch


def stored_bytes(cluster: FakeCluster, topic: str) -> int:
    """The bytes of every batch the fake stored for ``topic`` (as the leader got them)."""
    with cluster.lock:
        return sum(len(raw) for part in cluster.topics[topic].partitions for raw in part.batches)


# ----------------------------------------------------------------------------- producer


def test_producer_metrics_count_acknowledged_records_batches_and_their_mean_size(
    facade: ProducerFacade,  # noqa: F811
) -> None:
    add_topic(facade.cluster, "t")
    # A long linger: batches are sealed only full (8 records) or by the flush; one
    # batch at a time, so that no answer crosses another (an out-of-order sequence
    # would be retried).
    producer = facade.producer(batch_bytes_max=1024, linger_s=5.0, max_in_flight=1)
    for _ in range(44):
        producer.send("t", VALUE)
    producer.flush(timeout_s=5)
    wait_for(lambda: producer.producer.metrics().buffer_bytes == 0)
    metrics = producer.producer.metrics()
    sent_bytes = stored_bytes(facade.cluster, "t")
    assert metrics.topics == {"t": TopicSent(records=44, bytes=sent_bytes, batches=6)}
    assert (metrics.records_sent, metrics.bytes_sent, metrics.batches_sent) == (44, sent_bytes, 6)
    assert metrics.batch_records_mean == 44 / 6  # five full batches and the flushed rest
    assert metrics.batch_bytes_mean == sent_bytes / 6
    assert metrics.attempt_errors == {} and metrics.records_failed == {}
    assert (metrics.attempts, metrics.retries, metrics.restamps) == (6, 0, 0)
    assert metrics.batches_in_flight == 0
    assert metrics.buffer_bytes_max == producer.config.buffer_bytes_max


def test_a_failed_attempt_is_counted_by_error_and_as_a_retry(
    facade: ProducerFacade,  # noqa: F811
) -> None:
    add_topic(facade.cluster, "t")
    facade.cluster.fail_next("n0", "Produce", UnavailableError("no quorum"))
    producer = facade.producer()
    assert producer.send_and_wait("t", b"x").offset == 0
    metrics = producer.producer.metrics()
    assert metrics.attempt_errors == {"UnavailableError": 1}
    assert (metrics.attempts, metrics.retries) == (2, 1)
    assert (metrics.records_sent, metrics.batches_sent) == (1, 1)
    assert metrics.records_failed == {}


def test_a_refused_batch_counts_its_records_as_failed_by_error(
    facade: ProducerFacade,  # noqa: F811
) -> None:
    add_topic(facade.cluster, "t")
    facade.cluster.fail_next("n0", "Produce", InvalidInputError("refused"))
    producer = facade.producer(linger_s=5.0)
    handles = [producer.send("t", b"%d" % i) for i in range(3)]  # one batch
    producer.flush(timeout_s=5)
    assert all(isinstance(handle.exception(1.0), InvalidInputError) for handle in handles)
    metrics = producer.producer.metrics()
    assert metrics.records_failed == {"InvalidInputError": 3}
    assert metrics.attempt_errors == {"InvalidInputError": 1}
    assert (metrics.attempts, metrics.retries) == (1, 0)
    assert (metrics.records_sent, metrics.batches_sent, metrics.topics) == (0, 0, {})


def test_in_flight_and_buffer_gauges_follow_an_attempt_the_leader_holds(
    facade: ProducerFacade,  # noqa: F811
) -> None:
    add_topic(facade.cluster, "t")
    facade.h.hang()  # n0 holds every Produce until the release
    producer = facade.producer(linger_s=0.0, attempt_timeout_s=5.0, delivery_timeout_s=10.0)
    producer.send("t", b"a" * 400)
    wait_for(lambda: producer.producer.metrics().batches_in_flight == 1)
    assert producer.producer.metrics().buffer_bytes == 400 + OVERHEAD
    facade.h.release.set()
    producer.flush(timeout_s=5)
    wait_for(lambda: producer.producer.metrics().buffer_bytes == 0)
    metrics = producer.producer.metrics()
    assert (metrics.batches_in_flight, metrics.records_sent) == (0, 1)


def test_the_registry_exports_the_producer_until_it_closes(h: Harness) -> None:  # noqa: F811
    add_topic(h.cluster, "t")
    h.cluster.fail_next("n0", "Produce", UnavailableError("no quorum"))
    registry = CollectorRegistry()
    producer = h.producer(linger_s=5.0)  # one batch, sent by the flush
    producer.register_metrics(registry, client_id="billing-1")
    for index in range(5):
        producer.send("t", b"%d" % index)
    producer.flush(timeout_s=5)
    wait_for(lambda: producer.buffered_bytes == 0)

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"client_id": "billing-1", **labels})

    assert sample("laminar_client_producer_records_sent_total", topic="t") == 5
    assert sample("laminar_client_producer_batches_sent_total", topic="t") == 1
    assert sample("laminar_client_producer_sent_bytes_total", topic="t") == stored_bytes(
        h.cluster, "t"
    )
    assert sample("laminar_client_producer_attempt_errors_total", error="UnavailableError") == 1
    assert sample("laminar_client_producer_retries_total") == 1
    assert sample("laminar_client_producer_attempts_total") == 2
    assert sample("laminar_client_producer_in_flight_batches") == 0
    assert sample("laminar_client_producer_buffer_used_bytes") == 0
    assert sample("laminar_client_producer_buffer_max_bytes") == producer.config.buffer_bytes_max
    text = generate_latest(registry).decode()
    for family in ("restamps_total", "records_failed_total"):
        assert f"# TYPE laminar_client_producer_{family} counter" in text

    with pytest.raises(InvalidInputError, match="registered"):
        producer.register_metrics(registry, client_id="billing-2")  # once per registry
    producer.close()
    assert generate_latest(registry) == b""  # unregistered on close
    with pytest.raises(ClientClosedError):
        producer.register_metrics(CollectorRegistry(), client_id="billing-1")


@pytest.mark.parametrize("client_id", ["", "has space", "x" * 129, 'quo"te'])
def test_a_client_id_that_is_no_label_value_is_refused(h: Harness, client_id: str) -> None:  # noqa: F811
    add_topic(h.cluster, "t")
    registry = CollectorRegistry()
    with pytest.raises(InvalidInputError, match="client_id"):
        h.producer().register_metrics(registry, client_id=client_id)
    assert generate_latest(registry) == b""


def test_register_metrics_without_prometheus_client_says_what_to_install(
    h: Harness,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_topic(h.cluster, "t")
    for name in [n for n in sys.modules if n.split(".")[0] == "prometheus_client"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it fails
    monkeypatch.delitem(sys.modules, "laminar_client._prometheus", raising=False)
    with pytest.raises(InvalidInputError, match=r"laminar\[metrics\]"):
        h.producer().register_metrics(CollectorRegistry(), client_id="app")


# ----------------------------------------------------------------------------- consumer


def test_consumer_metrics_count_records_bytes_and_lag_down_to_zero(
    cluster: FakeCluster,
    consumer: Callable[..., Facade],  # noqa: F811
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 6)
    append_values(cluster, TP0, 4, start=6)
    append_values(cluster, TP1, 5)
    reader = consumer()
    registry = CollectorRegistry()
    reader.consumer.register_metrics(registry, client_id="reader-1")
    reader.assign({TP0: 0, TP1: 0})
    wait_until(
        lambda: reader.consumer.metrics().lag_records == {TP0: 10, TP1: 5},
        what="both partitions fetched, nothing handed out",
    )
    stream = reader.stream()
    try:
        got = stream.take(3)
        metrics = reader.consumer.metrics()  # while the iteration is suspended
        assert metrics.records_consumed == 3
        tp = TopicPartition(got[0].topic, got[0].partition)
        assert metrics.lag_records[tp] == (10 if tp == TP0 else 5) - 3
    finally:
        stream.close()
    rest = reader.read(12)
    assert len(offsets(got + rest, TP0)) == 10 and len(offsets(got + rest, TP1)) == 5
    metrics = reader.consumer.metrics()
    assert metrics.lag_records == {TP0: 0, TP1: 0}
    assert metrics.records_consumed == 15
    assert metrics.bytes_fetched == metrics.bytes_consumed == stored_bytes(cluster, TOPIC)
    assert metrics.fetch_latency.count >= 2  # each partition's fetch answered
    assert metrics.fetches >= metrics.fetch_latency.count
    assert metrics.fetch_errors == {}
    wait_until(lambda: reader.consumer.metrics().prefetched_bytes == 0, what="the inbox empty")

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"client_id": "reader-1", **labels})

    for partition in ("0", "1"):
        lag = sample("laminar_client_consumer_lag_records", topic=TOPIC, partition=partition)
        assert lag == 0
    assert sample("laminar_client_consumer_records_consumed_total") == 15
    assert sample("laminar_client_consumer_fetched_bytes_total") == metrics.bytes_fetched
    count = sample("laminar_client_consumer_fetch_latency_seconds_count")
    assert count is not None and count >= 2
    assert sample("laminar_client_consumer_fetch_latency_seconds_bucket", le="+Inf") == count
    reader.close()
    assert generate_latest(registry) == b""


def test_batches_count_the_records_they_hand_out(
    cluster: FakeCluster,
    consumer: Callable[..., Facade],  # noqa: F811
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 7)
    reader = consumer()
    reader.assign({TP0: 2})
    assert sum(len(batch) for batch in reader.batches(5, max_records=2)) == 5
    assert reader.consumer.metrics().records_consumed == 5


def test_fetch_errors_are_counted_by_error(
    cluster: FakeCluster,
    consumer: Callable[..., Facade],  # noqa: F811
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    for node in ("n0", "n1", "n2"):  # each replica fails its first fetch once
        cluster.fail_next(node, "Fetch", UnavailableError("busy"))
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(5), TP0) == [0, 1, 2, 3, 4]
    metrics = reader.consumer.metrics()
    assert metrics.fetch_errors == {"UnavailableError": 3}
    assert reader.consumer.counters["fetch_errors"] == 3


# ----------------------------------------------------------------------------- histogram


def test_latencies_fall_in_the_bucket_whose_bound_they_do_not_pass() -> None:
    recorder = LatencyRecorder((0.01, 0.1, 1.0))
    for latency_s in (0.005, 0.01, 0.05, 0.1, 0.5, 3.0):
        recorder.observe(latency_s)
    histogram = recorder.snapshot()
    assert histogram.counts == (2, 2, 1, 1)
    assert histogram.count == 6
    assert histogram.sum_s == pytest.approx(3.665)


def test_quantiles_interpolate_within_their_bucket() -> None:
    histogram = LatencyHistogram(bounds_s=(0.01, 0.1, 1.0), counts=(50, 40, 10, 0), sum_s=5.0)
    assert histogram.quantile_s(0.5) == pytest.approx(0.01)
    assert histogram.quantile_s(0.7) == pytest.approx(0.01 + 0.09 * 20 / 40)
    assert histogram.quantile_s(0.99) == pytest.approx(0.1 + 0.9 * 9 / 10)
    assert histogram.mean_s == pytest.approx(0.05)
    above = LatencyHistogram(bounds_s=(0.01,), counts=(0, 4), sum_s=1.0)
    assert above.quantile_s(0.5) == 0.01  # above every bound: the last bound
    assert LatencyHistogram((0.01,), (0, 0), 0.0).quantile_s(0.99) == 0.0
    with pytest.raises(InvalidInputError):
        histogram.quantile_s(1.5)


@pytest.mark.parametrize("bounds", [(), (0.1, 0.1), (0.2, 0.1), (0.0, 1.0), (1.0, float("inf"))])
def test_impossible_histogram_bounds_are_refused(bounds: tuple[float, ...]) -> None:
    with pytest.raises(InvalidInputError):
        LatencyRecorder(bounds)
