"""The batching producer: its accumulator and settings, and Producer/AsyncProducer
against the in-process fake cluster (tests/client/fake_server.py)."""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from laminar_client import RetryPolicy
from laminar_client._accumulator import Accumulator, ProducerBatch
from laminar_client.partitioner import key_partition
from laminar_client.producer import (
    AsyncProducer,
    Producer,
    ProducerConfig,
    RecordMetadata,
)
from laminar_client.serializers import (
    json_deserializer,
    json_serializer,
    msgpack_deserializer,
    msgpack_serializer,
    str_deserializer,
    str_serializer,
)

from laminar.errors import (
    BatchLimitError,
    BufferFullError,
    ClientClosedError,
    DeliveryTimeoutError,
    InvalidInputError,
    NotLeaderError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import DEFAULT_LIMITS, Compression, Record, decode_records, parse_header
from laminar.replica.producers import ProducerTable
from tests.client.fake_server import FakeCluster

FAST = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=5, attempts_max=50)
OVERHEAD = 16  # producer._RECORD_OVERHEAD_BYTES


def wait_for(predicate: Callable[[], Any], timeout_s: float = 3.0) -> None:
    """Poll `predicate` until it holds; fail after `timeout_s`."""
    deadline_s = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline_s:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.002)


def add_topic(cluster: FakeCluster, name: str, partitions: int = 1) -> None:
    """A topic whose partitions check producer sequences as a node does (the replica's
    ProducerTable, window 5): a retry is answered with its offset, a gap refused."""
    cluster.add_topic(name, partitions=partitions)
    with cluster.lock:
        for part in cluster.topics[name].partitions:
            part.producers = ProducerTable(5, 1000)


def stored(cluster: FakeCluster, topic: str) -> dict[tuple[int, int], Record]:
    """Every record the fake wrote for `topic`, by (partition, offset)."""
    with cluster.lock:
        batches = [(i, list(p.batches)) for i, p in enumerate(cluster.topics[topic].partitions)]
    out: dict[tuple[int, int], Record] = {}
    for index, raws in batches:
        for raw in raws:
            for record in decode_records(raw):
                assert (index, record.offset) not in out
                out[(index, record.offset)] = record
    return out


def stored_values(cluster: FakeCluster, topic: str, partition: int = 0) -> list[bytes | None]:
    records = stored(cluster, topic)
    return [records[key].value for key in sorted(records) if key[0] == partition]


class Harness:
    """The fake cluster, producers made on it, and hangs that are released at the end."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.release = threading.Event()
        self.producers: list[Producer[Any, Any]] = []

    def producer(self, **kwargs: Any) -> Producer[Any, Any]:
        kwargs.setdefault("retry", FAST)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("linger_s", 0.001)
        producer: Producer[Any, Any] = Producer(self.cluster.bootstrap, **kwargs)
        self.producers.append(producer)
        return producer

    def hang(self, node_id: str = "n0", method: str = "Produce", times: int = 100) -> None:
        """The node's next `times` calls hang until the test ends (or `release`)."""
        self.cluster.fail_next(node_id, method, *[self.release] * times)

    def produce_calls(self) -> int:
        return len(self.cluster.calls_to("Produce"))

    def close(self) -> None:
        self.release.set()
        for producer in self.producers:
            producer.close(timeout_s=2.0)


@pytest.fixture
def h(cluster: FakeCluster) -> Iterator[Harness]:
    harness = Harness(cluster)
    try:
        yield harness
    finally:
        harness.close()


# ----------------------------------------------------------------------------- accumulator


class Clock:
    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def make_accumulator(clock: Clock, **settings: Any) -> Accumulator:
    return Accumulator(ProducerConfig(**settings), random.Random(1), clock=clock)


def append(
    acc: Accumulator,
    value: bytes,
    *,
    key: bytes | None = None,
    headers: tuple[tuple[str, bytes], ...] = (),
    partition: int | None = 0,
    partitions: int = 1,
) -> tuple[Any, bool]:
    size = OVERHEAD + len(value) + (len(key) if key else 0)
    size += sum(len(k) + len(v) + 4 for k, v in headers)
    with acc.lock:
        return acc.append_locked("t", partition, partitions, key, value, headers, 0, size)


def test_linger_holds_a_batch_until_created_plus_linger() -> None:
    clock = Clock(100.0)
    acc = make_accumulator(clock, linger_s=0.05)
    _, wake = append(acc, b"a")
    assert wake  # a batch was started: the core must learn its due time
    assert acc.take(100.0) == ([], 100.05)
    clock.now_s = 100.03
    _, wake = append(acc, b"b")  # joins the open batch: due time unchanged
    assert not wake
    assert acc.take(100.049) == ([], 100.05)  # the next due time: linger bounds the wait
    taken, next_s = acc.take(100.05)
    assert [b.values for b in taken] == [[b"a", b"b"]] and next_s is None
    assert acc.take(200.0) == ([], None)


def test_take_reports_the_earliest_due_batch_and_everything_flushes() -> None:
    clock = Clock(10.0)
    acc = make_accumulator(clock, linger_s=0.1)
    append(acc, b"a", partition=0, partitions=3)
    clock.now_s = 10.02
    append(acc, b"b", partition=1, partitions=3)
    taken, next_s = acc.take(10.05)
    assert taken == [] and next_s == pytest.approx(10.1)
    taken, next_s = acc.take(10.1)
    assert [b.partition for b in taken] == [0] and next_s == pytest.approx(10.12)
    taken, next_s = acc.take(10.1, everything=True)
    assert [b.partition for b in taken] == [1] and next_s is None


def test_zero_linger_takes_a_batch_at_once() -> None:
    clock = Clock(5.0)
    acc = make_accumulator(clock, linger_s=0.0)
    append(acc, b"a")
    taken, _ = acc.take(5.0)
    assert len(taken) == 1


@pytest.mark.parametrize("seed", range(5))
def test_batches_are_sealed_just_before_batch_bytes_max(seed: int) -> None:
    rng = random.Random(seed)
    acc = make_accumulator(Clock(), batch_bytes_max=1024, linger_s=1.0)
    sizes = [rng.choice([1, 50, 200, 500, 1000 - OVERHEAD]) for _ in range(300)]
    for size in sizes:
        append(acc, b"x" * size)
    taken, _ = acc.take(0.0, everything=True)
    assert sum(b.record_count for b in taken) == len(sizes)
    records = iter(sizes)
    for batch in taken:
        record_sizes = [next(records) + OVERHEAD for _ in range(batch.record_count)]
        assert batch.bytes == sum(record_sizes) <= 1024
    # Each batch but the last was sealed only because the next record did not fit.
    for batch, following in itertools.pairwise(taken):
        next_record = len(following.values[0]) + OVERHEAD  # type: ignore[arg-type]
        assert batch.bytes + next_record > 1024


def test_fixed_size_records_fill_batches_to_within_one_record() -> None:
    acc = make_accumulator(Clock(), batch_bytes_max=4096, linger_s=1.0)
    record = 100 + OVERHEAD
    for _ in range(1000):
        append(acc, b"v" * 100)
    taken, _ = acc.take(0.0, everything=True)
    for batch in taken[:-1]:
        assert 4096 - record < batch.bytes <= 4096
    assert sum(b.bytes for b in taken) == acc.buffered == 1000 * record


def test_a_record_larger_than_a_batch_goes_alone() -> None:
    acc = make_accumulator(Clock(), batch_bytes_max=1024, linger_s=1.0)
    append(acc, b"a")
    append(acc, b"b" * 2000)
    append(acc, b"c")
    taken, _ = acc.take(0.0, everything=True)
    assert [len(b.values) for b in taken] == [1, 1, 1]
    assert taken[1].bytes == 2000 + OVERHEAD


def test_keys_and_headers_columns_are_filled_lazily() -> None:
    acc = make_accumulator(Clock(), linger_s=1.0)
    append(acc, b"v0")
    append(acc, b"v1")
    append(acc, b"v2", key=b"k")
    append(acc, b"v3", headers=(("h", b"1"),))
    append(acc, b"x", partition=1, partitions=2)  # another batch: neither column
    taken, _ = acc.take(0.0, everything=True)
    first, other = taken
    assert first.keys == [None, None, b"k", None]
    assert first.headers == [(), (), (), (("h", b"1"),)]
    assert other.keys is None and other.headers is None
    first.stamp(5, 0)
    assert first.encoded is not None
    records = decode_records(first.encoded)
    assert [r.key for r in records] == [None, None, b"k", None]
    assert [r.headers for r in records] == [(), (), (), (("h", b"1"),)]
    header = parse_header(first.encoded)
    assert (header.producer_id, header.base_sequence) == (5, 0)
    first.stamp(9, 4)  # a restamp rewrites the producer fields only
    restamped = parse_header(first.encoded)
    assert (restamped.producer_id, restamped.base_sequence) == (9, 4)
    assert decode_records(first.encoded) == records


def test_buffered_bytes_return_when_a_batch_is_done() -> None:
    acc = make_accumulator(Clock(), linger_s=1.0)
    future, _ = append(acc, b"a" * 10)
    assert acc.buffered == 10 + OVERHEAD
    taken, _ = acc.take(0.0, everything=True)
    (batch,) = taken
    assert isinstance(batch, ProducerBatch)
    batch.succeed(41)
    assert acc.buffered == 0 and not acc.unfinished
    assert future.done() and future.result(0).offset == 41


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "settings",
    [
        {"acks": "leader"},  # idempotent needs acks="all"
        {"acks": "none"},
        {"acks": "most", "idempotent": False},
        {"max_in_flight": 6},
        {"max_in_flight": 0},
        {"linger_s": -0.001},
        {"linger_s": 60.001},
        {"batch_bytes_max": 1023},
        {"batch_bytes_max": DEFAULT_LIMITS.batch_bytes_max + 1},
        {"batch_bytes_max": 4096, "buffer_bytes_max": 4095},
        {"compression": "zstd"},
        {"delivery_timeout_s": 0},
        {"attempt_timeout_s": 0},
        {"max_block_s": -0.1},
        {"delivery_timeout_s": 3.0, "attempt_timeout_s": 3.0, "linger_s": 0.001},
    ],
)
def test_impossible_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        ProducerConfig(**settings)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"acks": "leader", "idempotent": False},
        {"acks": "none", "idempotent": False},
        {"max_in_flight": 1},
        {"max_in_flight": 5, "linger_s": 0.0, "compression": Compression.ZSTD},
        {"batch_bytes_max": 1024, "buffer_bytes_max": 1024, "max_block_s": 0},
        {"delivery_timeout_s": 3.5, "attempt_timeout_s": 3.0, "linger_s": 0.5},
    ],
)
def test_possible_settings_are_accepted(settings: dict[str, Any]) -> None:
    ProducerConfig(**settings)


def test_the_producer_refuses_impossible_settings_before_connecting() -> None:
    with pytest.raises(InvalidInputError):
        Producer("127.0.0.1:1", max_in_flight=6)


# ----------------------------------------------------------------------------- send errors


def test_send_refuses_bad_input_itself(h: Harness) -> None:
    add_topic(h.cluster, "t", 3)
    producer = h.producer(buffer_bytes_max=2048, batch_bytes_max=1024)
    with pytest.raises(InvalidInputError, match="value must be bytes"):
        producer.send("t", "text")
    with pytest.raises(InvalidInputError, match="value must be bytes"):
        producer.send("t", bytearray(b"x"))
    with pytest.raises(InvalidInputError, match="key must be bytes"):
        producer.send("t", b"v", key="k")
    for headers in ([("h", "text")], [(1, b"v")], [("h", b"v", b"w")], ["hv"]):
        with pytest.raises(InvalidInputError, match="headers"):
            producer.send("t", b"v", headers=headers)
    with pytest.raises(BatchLimitError):
        producer.send("t", b"x" * 2048)
    for partition in (3, -1):
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("t", b"v", partition=partition)
    assert producer.buffered_bytes == 0
    # The largest record that fits is taken (alone in its batch).
    producer.send("t", b"x" * (2048 - OVERHEAD), partition=0).result(5)
    assert producer.buffered_bytes == 0
    assert h.produce_calls() == 1


def test_send_to_an_unknown_topic_fails_after_max_block(h: Harness) -> None:
    producer = h.producer(max_block_s=0.2)
    start_s = time.monotonic()
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("missing", b"v")
    assert time.monotonic() - start_s < 1.5
    assert producer.buffered_bytes == 0


def test_a_tombstone_without_value_is_sent(h: Harness) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer()
    metadata = producer.send_and_wait("t", None, key=b"gone")
    record = stored(h.cluster, "t")[(0, metadata.offset)]
    assert (record.key, record.value) == (b"gone", None)


# ----------------------------------------------------------------------------- serializers


@pytest.mark.parametrize(
    ("serializer", "deserializer", "values"),
    [
        (str_serializer, str_deserializer, ["héllo", "", "日本"]),
        (json_serializer, json_deserializer, [{"a": [1, 2.5, None]}, "é", 3, [True]]),
        (msgpack_serializer, msgpack_deserializer, [{"b": b"\x00\xff", "s": "x"}, [1, -2], None]),
    ],
    ids=["str", "json", "msgpack"],
)
def test_serialized_records_round_trip_through_the_cluster(
    h: Harness, serializer: Any, deserializer: Any, values: list[Any]
) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer(key_serializer=str_serializer, value_serializer=serializer)
    futures = [producer.send("t", value, key=f"k{i}") for i, value in enumerate(values)]
    producer.flush(timeout_s=5)
    records = stored(h.cluster, "t")
    for i, (future, value) in enumerate(zip(futures, values, strict=True)):
        record = records[(0, future.result(0).offset)]
        assert str_deserializer(record.key) == f"k{i}"  # type: ignore[arg-type]
        if value is None:  # no value (a tombstone): not serialized
            assert record.value is None
        else:
            assert deserializer(record.value) == value


def test_a_value_the_serializer_refuses_fails_in_send(h: Harness) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer(value_serializer=json_serializer)
    with pytest.raises(InvalidInputError):
        producer.send("t", {1, 2})
    producer = h.producer(value_serializer=msgpack_serializer)
    with pytest.raises(InvalidInputError):
        producer.send("t", object())
    assert msgpack.unpackb(msgpack_serializer(b"x")) == b"x"  # bin stays bytes


# ----------------------------------------------------------------------------- delivery


def test_every_future_gives_where_its_record_was_stored(h: Harness) -> None:
    add_topic(h.cluster, "t", 3)
    producer = h.producer(batch_bytes_max=1024, linger_s=0.002)
    calls: list[tuple[int, RecordMetadata | None, BaseException | None]] = []
    lock = threading.Lock()

    def callback(index: int) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def run(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            with lock:
                calls.append((index, metadata, error))

        return run

    count = 300
    futures = []
    for i in range(count):
        futures.append(
            producer.send(
                "t",
                b"value-%d" % i + b"." * (i % 50),
                key=b"key-%d" % (i % 40),
                headers=[("i", b"%d" % i)] if i % 7 == 0 else (),
                timestamp_ms=1_700_000_000_000 + i if i % 2 else None,
                callback=callback(i),
            )
        )
    producer.flush(timeout_s=5)
    assert all(f.done() for f in futures)
    assert producer.buffered_bytes == 0
    records = stored(h.cluster, "t")
    assert len(records) == count  # nothing written twice
    seen = set()
    for i, future in enumerate(futures):
        metadata = future.result(0)
        assert metadata.topic == "t"
        assert metadata.partition == key_partition(b"key-%d" % (i % 40), 3)
        record = records[(metadata.partition, metadata.offset)]
        assert record.key == b"key-%d" % (i % 40)
        assert record.value == b"value-%d" % i + b"." * (i % 50)
        assert record.headers == ((("i", b"%d" % i),) if i % 7 == 0 else ())
        assert record.timestamp_ms == metadata.timestamp_ms
        if i % 2:
            assert metadata.timestamp_ms == 1_700_000_000_000 + i
        seen.add((metadata.partition, metadata.offset))
        assert future.exception(0) is None
    assert len(seen) == count
    # Records of one key keep their send order (one partition, offsets increasing).
    for key in range(40):
        offsets = [futures[i].result(0).offset for i in range(key, count, 40)]
        assert offsets == sorted(offsets)
    # Callbacks run once each, on the producer's thread, with the metadata.
    wait_for(lambda: len(calls) == count)
    assert sorted(index for index, _, _ in calls) == list(range(count))
    for index, metadata, error in calls:
        assert error is None and metadata == futures[index].result(0)
    # A callback added once the record is done runs at once, in the caller's thread.
    late: list[Any] = []
    futures[0].add_callback(lambda m, e: late.append((m, e, threading.current_thread())))
    assert late == [(futures[0].result(0), None, threading.current_thread())]


def test_keyed_records_land_on_their_key_partition(h: Harness) -> None:
    add_topic(h.cluster, "t", 7)
    producer = h.producer()
    keys = [b"user-%d" % i for i in range(200)]
    for key in keys:
        producer.send("t", key, key=key)
    producer.flush(timeout_s=5)
    records = stored(h.cluster, "t")
    assert len(records) == len(keys)
    for (partition, _), record in records.items():
        assert record.key is not None
        assert partition == key_partition(record.key, 7)
        assert record.value == record.key


def test_keyless_records_stick_to_one_partition_per_batch(h: Harness) -> None:
    add_topic(h.cluster, "t", 4)
    producer = h.producer(batch_bytes_max=1024, linger_s=1.0)
    futures = [producer.send("t", b"v" * 84) for _ in range(12)]  # 100 bytes each
    producer.flush(timeout_s=5)
    partitions = [f.result(0).partition for f in futures]
    assert len(set(partitions[:11])) == 1  # 1100 bytes: the 12th switches
    assert partitions[11] != partitions[0]


def test_the_context_manager_delivers_everything_on_exit(h: Harness) -> None:
    add_topic(h.cluster, "t")
    with Producer(h.cluster.bootstrap, retry=FAST, linger_s=0.05) as producer:
        futures = [producer.send("t", b"%d" % i) for i in range(50)]
        assert not all(f.done() for f in futures)  # still lingering
    assert all(f.done() for f in futures)
    assert [f.result(0).offset for f in futures] == list(range(50))
    assert stored_values(h.cluster, "t") == [b"%d" % i for i in range(50)]
    with pytest.raises(ClientClosedError):
        producer.send("t", b"late")


def test_send_and_wait_does_not_wait_for_linger(h: Harness) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer(linger_s=20.0, delivery_timeout_s=30)
    start_s = time.monotonic()
    first = producer.send_and_wait("t", b"a")
    second = producer.send_and_wait("t", b"b", key=b"k", timestamp_ms=123)
    assert time.monotonic() - start_s < 1.5
    assert (first.topic, first.partition, first.offset) == ("t", 0, 0)
    assert (second.offset, second.timestamp_ms) == (1, 123)
    assert stored_values(h.cluster, "t") == [b"a", b"b"]


def test_an_idempotent_producer_stamps_consecutive_sequences_in_order(h: Harness) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer(batch_bytes_max=1024)
    values = [b"%03d" % i + b"." * 200 for i in range(40)]
    for value in values:
        producer.send("t", value)
    producer.flush(timeout_s=5)
    assert stored_values(h.cluster, "t") == values
    with h.cluster.lock:
        headers = [parse_header(raw) for raw in h.cluster.partition("t").batches]
    # Lineages follow one another (a restamp starts a new one at sequence 0), each
    # with consecutive sequences from 0.
    lineages: list[list[tuple[int, int, int]]] = []
    for header in headers:
        assert header.producer_id >= 0
        if not lineages or lineages[-1][0][0] != header.producer_id:
            assert all(header.producer_id != lineage[0][0] for lineage in lineages)
            lineages.append([])
        lineages[-1].append((header.producer_id, header.base_sequence, header.record_count))
    for lineage in lineages:
        expected = 0
        for _, base_sequence, record_count in lineage:
            assert base_sequence == expected
            expected += record_count
    assert len(lineages) == 1 + producer.counters["restamps"]


def test_a_non_idempotent_producer_sends_without_sequences(h: Harness) -> None:
    add_topic(h.cluster, "t")
    producer = h.producer(idempotent=False, acks="leader")
    producer.send("t", b"a")
    producer.send_and_wait("t", b"b")
    with h.cluster.lock:
        headers = [parse_header(raw) for raw in h.cluster.partition("t").batches]
    assert {(x.producer_id, x.base_sequence) for x in headers} == {(-1, -1)}
    assert stored_values(h.cluster, "t") == [b"a", b"b"]


@pytest.mark.parametrize(
    "failure",
    [
        NotLeaderError(None, None),
        UnavailableError("no quorum"),
        ("after", UnavailableError("answer lost after the write")),
    ],
    ids=["not-leader", "unavailable", "written-then-failed"],
)
def test_a_failure_amid_pipelined_batches_keeps_every_record_once_in_order(
    h: Harness, failure: Any
) -> None:
    add_topic(h.cluster, "t")
    # The lineage's first batch is held until every record is queued, so that the
    # following batches go out 5 at a time; the second call fails.
    h.cluster.fail_next("n0", "Produce", h.release, failure)
    producer = h.producer(batch_bytes_max=1024, linger_s=0.0, attempt_timeout_s=2.0)
    values = [b"%03d" % i + b"." * 300 for i in range(60)]
    futures = [producer.send("t", value) for value in values]
    wait_for(lambda: h.produce_calls() >= 1)
    h.release.set()
    producer.flush(timeout_s=5)
    assert [f.result(0).offset for f in futures] == list(range(60))
    assert stored_values(h.cluster, "t") == values
    assert producer.counters["attempts_failed"] >= 1
    assert producer.counters["batches_sent"] >= 60 // 3 + 1


# ----------------------------------------------------------------------------- bounds


def test_a_full_buffer_blocks_send_then_raises_without_taking_the_record(h: Harness) -> None:
    add_topic(h.cluster, "t")
    h.hang()
    producer = h.producer(
        batch_bytes_max=1024,
        buffer_bytes_max=1024,
        max_block_s=0.3,
        linger_s=0.0,
        attempt_timeout_s=5.0,
        delivery_timeout_s=10.0,
    )
    producer.send("t", b"a" * 400)
    producer.send("t", b"b" * 400)
    wait_for(lambda: h.produce_calls() >= 1)  # the first batch hangs at the leader
    before = producer.buffered_bytes
    assert before == 2 * (400 + OVERHEAD)
    start_s = time.monotonic()
    with pytest.raises(BufferFullError):
        producer.send("t", b"c" * 400)
    elapsed_s = time.monotonic() - start_s
    assert 0.3 <= elapsed_s < 0.8
    assert producer.buffered_bytes == before
    h.release.set()
    producer.flush(timeout_s=5)
    assert stored_values(h.cluster, "t") == [b"a" * 400, b"b" * 400]  # c was not taken
    assert producer.buffered_bytes == 0
    producer.send_and_wait("t", b"c" * 400)  # room again


def test_a_failing_leader_fails_records_at_the_delivery_timeout(h: Harness) -> None:
    add_topic(h.cluster, "t")
    h.cluster.fail_next("n0", "Produce", *[UnavailableError("no quorum")] * 5000)
    producer = h.producer(linger_s=0.0, attempt_timeout_s=0.2, delivery_timeout_s=0.5)
    start_s = time.monotonic()
    futures = [producer.send("t", b"x"), producer.send("t", b"y")]
    errors = [future.exception(3.0) for future in futures]
    elapsed_s = time.monotonic() - start_s
    for error in errors:
        assert isinstance(error, DeliveryTimeoutError), error
    assert errors[0].sent  # type: ignore[union-attr]
    assert 0.5 <= elapsed_s < 1.0
    assert h.produce_calls() > 3  # it kept retrying until then
    assert stored(h.cluster, "t") == {}
    assert producer.buffered_bytes == 0
    with pytest.raises(DeliveryTimeoutError):
        futures[0].result(0)


def test_a_retry_backoff_does_not_outlast_the_delivery_timeout(h: Harness) -> None:
    """The module's bound: "delivery_timeout_s bounds the time from send to the
    outcome" — whatever the retry policy's backoff."""
    add_topic(h.cluster, "t")
    h.cluster.fail_next("n0", "Produce", *[UnavailableError("no quorum")] * 100)
    slow = RetryPolicy(backoff_initial_ms=400, backoff_max_ms=400, jitter_ratio=0)
    producer = h.producer(retry=slow, linger_s=0.0, attempt_timeout_s=0.2, delivery_timeout_s=0.5)
    start_s = time.monotonic()
    future = producer.send("t", b"x")
    error = future.exception(3.0)
    elapsed_s = time.monotonic() - start_s
    assert isinstance(error, DeliveryTimeoutError)
    # Attempts at 0 and 0.4 s; the next backoff ends at 0.8 s, past the deadline.
    assert h.produce_calls() <= 2, "an attempt was sent after the delivery deadline"
    assert elapsed_s < 0.5 + 0.15


def test_close_without_flush_fails_pending_records_and_returns_in_time(h: Harness) -> None:
    add_topic(h.cluster, "t")
    h.hang()
    producer = h.producer(linger_s=0.0, attempt_timeout_s=5.0, delivery_timeout_s=10.0)
    in_attempt = producer.send("t", b"a")
    wait_for(lambda: h.produce_calls() >= 1)
    queued = producer.send("t", b"b")  # waits for the lineage's first ack
    callback_errors: list[BaseException | None] = []
    queued.add_callback(lambda metadata, error: callback_errors.append(error))
    start_s = time.monotonic()
    producer.close(timeout_s=0.3)
    elapsed_s = time.monotonic() - start_s
    assert 0.3 <= elapsed_s < 1.3
    for future in (in_attempt, queued):
        assert future.done()
        assert isinstance(future.exception(0), ClientClosedError)
    assert len(callback_errors) == 1 and isinstance(callback_errors[0], ClientClosedError)
    assert producer.buffered_bytes == 0
    with pytest.raises(ClientClosedError):
        producer.send("t", b"c")
    producer.close()  # idempotent


def test_ctrl_c_interrupts_a_blocked_flush(h: Harness) -> None:
    add_topic(h.cluster, "t")
    h.hang()
    producer = h.producer(linger_s=0.0, attempt_timeout_s=5.0, delivery_timeout_s=10.0)
    producer.send("t", b"a")
    wait_for(lambda: h.produce_calls() >= 1)
    handled: list[float] = []

    def on_alarm(signum: int, frame: object) -> None:
        handled.append(time.monotonic())
        raise KeyboardInterrupt

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    armed_s = time.monotonic()
    # pytest-timeout may own ITIMER_REAL: keep what it had armed and restore it.
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            producer.flush()
        caught_s = time.monotonic()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left_s = max(0.001, previous_delay - (time.monotonic() - armed_s))
            signal.setitimer(signal.ITIMER_REAL, left_s, previous_interval)
    assert len(handled) == 1
    assert caught_s - armed_s < 0.1 + 0.25  # the signal, then within 250 ms
    assert caught_s - handled[0] < 0.25
    start_s = time.monotonic()
    producer.close(timeout_s=0.2)
    assert time.monotonic() - start_s < 1.2


_EXIT_SCRIPT = """
import gc, sys
from laminar_client import Producer
from tests.client.fake_server import FakeCluster

cluster = FakeCluster(1)
cluster.add_topic("t", rf=1)
kept = []
for how in sys.argv[1].split(","):
    producer = Producer(cluster.bootstrap, linger_s=60.0)  # nothing leaves by itself
    producer.send("t", b"x" * 10)
    if how == "closed":
        producer.close(timeout_s=0.0)
    elif how == "dropped":
        del producer
        gc.collect()
    else:
        kept.append(producer)
print("exiting", flush=True)
"""


def exit_warnings(*producers: str) -> list[str]:
    """Run producers left ``open``, ``closed`` or ``dropped`` (garbage without a
    close) to interpreter exit in a fresh process; the warnings it logged."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, ",".join(producers)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0 and done.stdout == "exiting\n", done.stderr
    return [line for line in done.stderr.splitlines() if "was not closed" in line]


@pytest.mark.process  # a fresh interpreter, to exit
def test_a_producer_left_open_warns_at_interpreter_exit_and_a_closed_one_does_not() -> None:
    warnings = exit_warnings("open", "closed", "open")
    assert len(warnings) == 2
    assert "1 batches (26 bytes) were never delivered" in warnings[0]
    assert exit_warnings("closed", "dropped") == []


# ----------------------------------------------------------------------------- asyncio


def test_the_async_producer_delivers(cluster: FakeCluster) -> None:
    add_topic(cluster, "t", 2)

    async def main() -> tuple[list[RecordMetadata], RecordMetadata, list[Any]]:
        callbacks: list[Any] = []
        async with AsyncProducer(
            cluster.bootstrap, retry=FAST, rng=random.Random(3), linger_s=0.005
        ) as producer:
            futures = [
                await producer.send("t", b"v%d" % i, key=b"k%d" % (i % 5)) for i in range(100)
            ]
            futures[0].add_callback(lambda m, e: callbacks.append((m, e)))
            await producer.flush(timeout_s=5)
            assert all(f.done() for f in futures)
            results = [await f for f in futures]
            assert [f.result(0) for f in futures] == results
            last = await producer.send_and_wait("t", b"last", key=b"k0")
            lingering = [await producer.send("t", b"exit-%d" % i) for i in range(10)]
        assert all(f.done() for f in lingering)  # `async with` delivered on exit
        assert [(await f).topic for f in lingering] == ["t"] * 10
        with pytest.raises(ClientClosedError):
            await producer.send("t", b"late")
        return results, last, callbacks

    results, last, callbacks = asyncio.run(asyncio.wait_for(main(), 10))
    records = stored(cluster, "t")
    assert len(records) == 111
    for i, metadata in enumerate(results):
        assert metadata.partition == key_partition(b"k%d" % (i % 5), 2)
        assert records[(metadata.partition, metadata.offset)].value == b"v%d" % i
    assert records[(last.partition, last.offset)].value == b"last"
    assert callbacks == [(results[0], None)]


def test_the_async_producer_fails_records_at_the_delivery_timeout(cluster: FakeCluster) -> None:
    add_topic(cluster, "t")
    cluster.fail_next("n0", "Produce", *[UnavailableError("no quorum")] * 5000)

    async def main() -> tuple[BaseException | None, float]:
        settings = {"linger_s": 0.0, "attempt_timeout_s": 0.2, "delivery_timeout_s": 0.4}
        async with AsyncProducer(cluster.bootstrap, retry=FAST, **settings) as producer:
            start_s = time.monotonic()
            future = await producer.send("t", b"x")
            try:
                await future
            except DeliveryTimeoutError as error:
                return error, time.monotonic() - start_s
        return None, 0.0

    error, elapsed_s = asyncio.run(asyncio.wait_for(main(), 10))
    assert isinstance(error, DeliveryTimeoutError) and error.sent
    assert 0.4 <= elapsed_s < 0.9


def test_a_node_without_produce_many_gets_one_partition_per_request(h: Harness) -> None:
    """The fake predates ProduceMany (UNIMPLEMENTED): the producer sends the batches it
    grouped one partition per request from then on, and loses nothing."""
    add_topic(h.cluster, "t", partitions=4)
    producer = h.producer(linger_s=0.05)  # every partition's batch ready in one pass
    futures = [producer.send("t", b"v%d" % i, key=b"k%d" % i) for i in range(40)]
    producer.flush()
    for future in futures:
        future.result(0)
    assert producer.counters["multi_partition_requests"] >= 1
    assert producer._core._many is False
    records = stored(h.cluster, "t")
    assert sorted(r.value for r in records.values() if r.value) == sorted(
        b"v%d" % i for i in range(40)
    )


def test_batches_a_silent_leader_holds_go_to_the_new_leader_soon(h: Harness) -> None:
    """The leader stops answering (paused, cut off) and the other replicas name a
    new one: the producer abandons the attempts after leader_check_s (0.5 s) and
    sends to the new leader, instead of waiting out the 3 s attempt timeout; the
    records are stored once."""
    cluster = h.cluster
    cluster.add_topic("t")
    part = cluster.partition("t", 0)
    producer = h.producer()
    producer.send("t", b"first", partition=0).result(5)
    old = part.leader
    h.hang(old)
    with cluster.lock:
        part.leader = next(n for n in part.replicas if n != old)
    started = time.monotonic()
    futures = [producer.send("t", b"v%d" % n, partition=0) for n in range(20)]
    for future in futures:
        future.result(5)
    assert time.monotonic() - started < 1.5
    assert stored_values(cluster, "t") == [b"first", *(b"v%d" % n for n in range(20))]
