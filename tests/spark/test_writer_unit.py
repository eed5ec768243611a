"""The writer's pure parts, no Spark session and no cluster: options, routing,
batch cutting, the sequence/skip logic, and whole tasks against a fake broker that
deduplicates as a leader does (``laminar.replica.producers.ProducerTable``)."""

from __future__ import annotations

import datetime
import random
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from laminar_client.partitioner import StickyPartitioner, key_partition
from laminar_spark.producing import (
    BatchCutter,
    OutgoingBatch,
    PartitionStream,
    Router,
    SequenceGapError,
    TaskProducer,
    producer_id_for,
)
from laminar_spark.write_options import WriteOptions, parse_write_options
from laminar_spark.writer import check_schema, rows_to_arrow
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from laminar.errors import InvalidInputError, OutOfOrderSequenceError, UnknownTopicOrPartitionError
from laminar.records import Compression, decode_batch, encode_batch, verify_batch
from laminar.replica.producers import ProducerTable, Verdict

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


# ----------------------------------------------------------------------------- a fake leader


class FakeBroker:
    """Every partition's log and producer table, answering as a leader does: a request
    is all or nothing; a remembered batch is a duplicate; a gap is out of order."""

    def __init__(self, topics: dict[str, int], window: int = 5) -> None:
        self.topics = topics
        self.window = window
        self.tables: dict[tuple[str, int], ProducerTable] = {}
        self.logs: dict[tuple[str, int], list[tuple[Any, Any]]] = defaultdict(list)
        self.requests = 0
        self.fail_at_request: int | None = None  # raise instead of answering this one
        self.gate: threading.Event | None = None  # answers wait for it
        self.after_out_of_order: Callable[[], None] | None = None

    def partition_count(self, topic: str) -> int:
        if topic not in self.topics:
            raise UnknownTopicOrPartitionError(f"no topic {topic!r} to write to")
        return self.topics[topic]

    def produce(self, topic: str, partition: int, batches: Sequence[bytes]) -> None:
        if self.gate is not None:
            assert self.gate.wait(10)
        self.requests += 1
        if self.requests == self.fail_at_request:
            raise ConnectionError("injected failure")
        key = (topic, partition)
        table = self.tables.setdefault(key, ProducerTable(self.window, 100_000))
        fresh = []
        previous_new = False
        for batch in batches:
            header = verify_batch(batch)
            check = table.check(header.producer_id, header.base_sequence, header.record_count)
            if previous_new:
                fresh.append((header, batch))
                continue
            if check.verdict is Verdict.OUT_OF_ORDER:
                if self.after_out_of_order is not None:
                    self.after_out_of_order()
                    self.after_out_of_order = None
                raise OutOfOrderSequenceError(
                    header.producer_id, header.base_sequence, check.expected_sequence
                )
            if check.verdict is Verdict.NEW:
                previous_new = True
                fresh.append((header, batch))
        log = self.logs[key]
        for header, batch in fresh:
            offset = sum(len(b.values) for _, b in log)
            log.append((header, decode_batch(batch)))
            table.record(header.producer_id, header.base_sequence, header.record_count, offset)

    def lose_last_batch(self, topic: str, partition: int) -> None:
        """The last batch was never committed and a new leader truncated it."""
        log = self.logs[(topic, partition)]
        log.pop()
        self.tables[(topic, partition)].truncate(sum(len(b.values) for _, b in log))

    def values(self, topic: str) -> list[bytes | None]:
        out: list[bytes | None] = []
        for (name, _), log in sorted(self.logs.items()):
            if name == topic:
                for _, batch in log:
                    out.extend(batch.values)
        return out

    def records(self, topic: str, partition: int) -> list[tuple[Any, ...]]:
        out = []
        for _, batch in self.logs[(topic, partition)]:
            out.extend(
                zip(batch.keys, batch.values, batch.timestamps_ms, batch.headers, strict=True)
            )
        return out


def options(**overrides: Any) -> WriteOptions:
    base: dict[str, Any] = {"servers": "x:1", "topic": "t", "batch_records_max": 10}
    base.update(overrides)
    return WriteOptions(**base)


def chunk(start: int, stop: int, *, keyed: bool = True, size: int = 20) -> Any:
    ids = range(start, stop)
    return pa.record_batch(
        {
            "key": pa.array([f"k{i % 13}".encode() if keyed else None for i in ids], pa.binary()),
            "value": pa.array([f"v{i}".encode().ljust(size, b".") for i in ids]),
        }
    )


def run_task(
    broker: FakeBroker,
    chunks: Sequence[Any],
    producer_id: int = 42,
    write_options: WriteOptions | None = None,
    **kwargs: Any,
) -> list[Any]:
    with TaskProducer(broker, write_options or options(), producer_id, 1000, **kwargs) as task:
        for batch in chunks:
            task.write(batch)
        return task.finish()


# ----------------------------------------------------------------------------- options


def test_options_defaults_and_errors() -> None:
    parsed = parse_write_options({"SERVERS": "a:1", "Topic": " t "}, streaming=False)
    assert parsed == WriteOptions(servers="a:1", topic="t")
    assert parse_write_options(
        {"servers": "a:1", "checkpointLocation": "/c", "compression": " ZSTD", "acks": "all"},
        streaming=True,
    ) == WriteOptions(servers="a:1", compression=Compression.ZSTD)
    assert (
        parse_write_options({"servers": "a:1", "compression": "none"}, streaming=True).compression
        is Compression.NONE
    )
    bad = [
        ({"servers": "a:1", "checkpointLocation": "/c"}, "unknown option 'checkpointLocation'"),
        ({"servers": "a:1", "subscribe": "t"}, "allowed: servers, topic"),
        ({"topic": "t"}, "'servers' is required"),
        ({"servers": "a:1", "topic": " "}, "'topic' must be a topic name"),
        ({"servers": "a:1", "acks": "1"}, "'acks' must be 'all'"),
        ({"servers": "a:1", "compression": "lz4"}, "'compression' must be one of none, zstd"),
        ({"servers": "a:1", "batchRecordsMax": "0"}, r"batchRecordsMax' must be .* \[1, 1000000\]"),
        ({"servers": "a:1", "batchBytesMax": "1e6"}, "batchBytesMax"),
        ({"servers": "a:1", "batchBytesMax": str(64 << 20)}, "batchBytesMax"),
    ]
    for given, message in bad:
        with pytest.raises(InvalidInputError, match=message):
            parse_write_options(given, streaming=False)


def test_producer_ids_are_stable_positive_and_distinct() -> None:
    first = producer_id_for("write", "abc", 0)
    assert first == producer_id_for("write", "abc", 0)
    assert 0 <= first < 2**63
    ids = {producer_id_for("write", "abc", p) for p in range(1000)}
    ids |= {producer_id_for("stream", "q", b, 0) for b in range(1000)}
    assert len(ids) == 2000
    assert producer_id_for("a", "b1") != producer_id_for("a", "b", 1)  # parts are separated


# ----------------------------------------------------------------------------- routing


def test_keyless_records_follow_the_sticky_rule_record_by_record() -> None:
    rng = random.Random(5)
    sizes = np.array([rng.randrange(16, 400) for _ in range(3000)], dtype=np.int64)
    router = Router(switch_bytes=2000, seed=99)
    routed: list[int] = []
    position = 0
    while position < len(sizes):  # in chunks of any size, as Spark hands them
        step = rng.randrange(1, 300)
        part = sizes[position : position + step]
        routed += router.route("t", 7, None, None, part).tolist()
        position += step
    reference = StickyPartitioner(2000, random.Random(99))
    assert routed == [reference.partition("t", 7, int(size)) for size in sizes]
    assert len(set(routed)) > 1


def test_keys_and_explicit_partitions() -> None:
    keys = pa.array([b"a", None, b"bb", "é".encode(), None], pa.binary())
    explicit = np.array([-1, 2, 0, -1, -1], dtype=np.int64)
    sizes = np.full(5, 20, dtype=np.int64)
    routed = Router(1000, seed=1).route("t", 3, keys, explicit, sizes)
    assert routed[0] == key_partition(b"a", 3)
    assert routed[1] == 2 and routed[2] == 0
    assert routed[3] == key_partition("é".encode(), 3)
    assert 0 <= routed[4] < 3
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 is not in topic 't'"):
        Router(1000, seed=1).route("t", 3, None, np.array([3]), sizes[:1])


# ----------------------------------------------------------------------------- batching


def greedy_cuts(sizes: Sequence[int], records_max: int, bytes_max: int) -> list[int]:
    """Reference: record by record."""
    cuts: list[int] = []
    count = size_sum = 0
    for size in sizes:
        if count and (count >= records_max or size_sum + size > bytes_max):
            cuts.append(count)
            count = size_sum = 0
        count += 1
        size_sum += size
    if count:
        cuts.append(count)
    return cuts


@pytest.mark.parametrize("seed", range(5))
def test_cuts_depend_on_the_records_not_on_the_chunks(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([20, 50, 300, 5000]) for _ in range(2000)]
    records_max, bytes_max = rng.choice([(7, 10_000), (1000, 3000), (50, 100_000)])
    values = pa.array([str(i).encode() for i in range(len(sizes))])
    cutter = BatchCutter(records_max, bytes_max)
    cuts: list[int] = []
    firsts: list[bytes] = []
    position = 0
    while position < len(sizes):
        step = rng.randrange(1, 400)
        piece = pa.record_batch({"value": values.slice(position, step)})
        sealed = cutter.add(piece, np.array(sizes[position : position + step], dtype=np.int64))
        cuts += [batch.num_rows for batch in sealed]
        firsts += [batch.column(0)[0].as_py() for batch in sealed]
        position += step
    if cutter.pending:
        last = cutter.seal()
        cuts.append(last.num_rows)
        firsts.append(last.column(0)[0].as_py())
    assert cuts == greedy_cuts(sizes, records_max, bytes_max)
    assert firsts == [str(i).encode() for i in np.cumsum([0, *cuts[:-1]])]


# ----------------------------------------------------------------------------- sequencing


def outgoing(base: int, count: int, producer_id: int = 9) -> OutgoingBatch:
    values = [f"r{base + i:05d}".encode() for i in range(count)]
    data = encode_batch(values, producer_id=producer_id, base_sequence=base)
    return OutgoingBatch(base, count, data)


def test_out_of_order_skips_what_the_leader_holds_and_cuts_a_tail() -> None:
    stream = PartitionStream("t", 0)
    for base in range(0, 50, 10):
        stream.add(outgoing(base, 10))
    request = stream.next_request(bytes_max=1 << 20, batches_max=2)
    assert [b.base_sequence for b in request] == [0, 10]
    stream.out_of_order(request, expected=25, producer_id=9)
    assert stream.skipped == 25
    assert stream.unconfirmed is not None and stream.unconfirmed.base_sequence == 10
    head = stream.queue[0]
    assert (head.base_sequence, head.record_count) == (25, 5)
    decoded = decode_batch(head.data)
    assert decoded.values == [f"r{i:05d}".encode() for i in range(25, 30)]
    assert (decoded.header.producer_id, decoded.header.base_sequence) == (9, 25)
    stream.acknowledged(stream.next_request(1 << 20, 1))
    assert stream.unconfirmed is None  # acknowledged after them: committed
    assert stream.records == 30
    with pytest.raises(SequenceGapError, match="expects sequence 12"):
        stream.out_of_order(stream.next_request(1 << 20, 1), expected=12, producer_id=9)


def test_a_request_is_bounded_by_bytes_and_batches() -> None:
    stream = PartitionStream("t", 0)
    for base in range(0, 100, 10):
        stream.add(outgoing(base, 10))
    size = len(stream.queue[0].data)
    assert len(stream.next_request(bytes_max=size * 3, batches_max=100)) == 3
    assert len(stream.next_request(bytes_max=1, batches_max=100)) == 1  # at least one
    assert len(stream.next_request(bytes_max=1 << 20, batches_max=4)) == 4


# ----------------------------------------------------------------------------- whole tasks


def test_a_task_writes_every_record_grouped_per_partition() -> None:
    broker = FakeBroker({"t": 3})
    chunks = [chunk(0, 250), chunk(250, 600, keyed=False), chunk(600, 1000)]
    reports = run_task(broker, chunks)
    assert sorted(broker.values("t")) == sorted(
        f"v{i}".encode().ljust(20, b".") for i in range(1000)
    )
    assert sum(r.records for r in reports) == 1000 and not any(r.skipped for r in reports)
    for partition in range(3):
        for key, *_ in broker.records("t", partition):
            if key is not None:
                assert key_partition(key, 3) == partition
        for header, batch in broker.logs[("t", partition)]:
            assert len(batch.values) <= 10
            assert header.producer_id == 42


@pytest.mark.parametrize("window", [5, 2])
@pytest.mark.parametrize("fail_at", [1, 3, 17, 60])
def test_a_retried_task_writes_each_record_once(fail_at: int, window: int) -> None:
    broker = FakeBroker({"t": 3}, window=window)
    chunks = [chunk(0, 300), chunk(300, 700, keyed=False), chunk(700, 900)]
    broker.fail_at_request = fail_at
    with pytest.raises(ConnectionError):
        run_task(broker, chunks, send_threads=2, request_batches_max=1)
    broker.fail_at_request = None
    reports = run_task(broker, chunks, send_threads=3)  # another attempt, other timing
    run_task(broker, chunks)  # and a speculative copy that ran late
    values = broker.values("t")
    assert sorted(values) == sorted(f"v{i}".encode().ljust(20, b".") for i in range(900))
    assert sum(r.records for r in reports) == 900


def test_an_attempt_that_ended_early_is_completed_from_where_it_stopped() -> None:
    """An attempt whose input stopped short (Spark can end a failed task's input)
    sealed a partial last batch: the retry's batch over it is cut."""
    broker = FakeBroker({"t": 1})
    run_task(broker, [chunk(0, 95)])  # last batch: sequences 90..95
    reports = run_task(broker, [chunk(0, 200)])
    assert broker.values("t") == [f"v{i}".encode().ljust(20, b".") for i in range(200)]
    # How many are skipped (not sent again) depends on how far the encoding got
    # when the first out-of-order answer came; the rest are answered DUPLICATE.
    assert 0 < reports[0].skipped <= 95 and reports[0].records == 200


def test_skipped_records_are_confirmed_at_the_end() -> None:
    broker = FakeBroker({"t": 1})
    run_task(broker, [chunk(0, 100)])
    requests = broker.requests
    broker.gate = threading.Event()
    with TaskProducer(broker, options(), 42, 1000, request_batches_max=1) as task:
        task.write(chunk(0, 100))  # ten whole batches, queued
        broker.gate.set()
        reports = task.finish()
    assert reports[0].skipped == 100
    # The first request was refused out of order (everything queued skipped), then
    # the last batch was sent again, answered as a duplicate.
    assert broker.requests == requests + 2
    assert len(broker.values("t")) == 100


def test_a_lost_write_is_written_again_or_fails_the_task() -> None:
    broker = FakeBroker({"t": 1})
    run_task(broker, [chunk(0, 100)])
    broker.lose_last_batch("t", 0)  # 90..100 was never committed
    run_task(broker, [chunk(0, 100)])  # the retry writes it
    assert broker.values("t") == [f"v{i}".encode().ljust(20, b".") for i in range(100)]
    # Records skipped on the leader's word, then lost (truncated by a new leader):
    # the confirmation at the end finds the gap and fails the task.
    broker.gate = threading.Event()
    broker.after_out_of_order = lambda: [broker.lose_last_batch("t", 0) for _ in range(2)]
    with TaskProducer(broker, options(), 42, 1000) as task:
        task.write(chunk(0, 100))
        broker.gate.set()
        with pytest.raises(SequenceGapError, match="were not committed"):
            task.finish()


def test_other_input_on_a_retry_is_not_deduplicated_but_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = FakeBroker({"t": 1})
    run_task(broker, [chunk(0, 100)])
    with caplog.at_level("WARNING", logger="laminar_spark"):
        run_task(broker, [chunk(0, 50)])
    assert "input differs between attempts" in caplog.text
    assert len(broker.values("t")) == 100


def test_topics_from_a_column_timestamps_headers() -> None:
    broker = FakeBroker({"a": 2, "b": 1})
    batch = pa.record_batch(
        {
            "topic": pa.array(["a", "b", "a", "b"]),
            "value": pa.array(["x", None, "z", "w"]),
            "headers": pa.array([[{"key": "h", "value": b"1"}], None, [], []], HEADERS),
            "timestamp": pa.array([5_000, None, 7_999, 1], pa.timestamp("us", tz="UTC")),
            "partition": pa.array([1, None, 1, 0], pa.int32()),
        }
    )
    run_task(broker, [batch], write_options=options(topic=None))
    assert broker.records("a", 1) == [(None, b"x", 5, (("h", b"1"),)), (None, b"z", 7, ())]
    assert broker.records("b", 0) == [(None, None, 1000, ()), (None, b"w", 0, ())]
    # The option overrides the column (another write: another producer).
    run_task(broker, [batch.drop_columns(["partition"])], 43, options(topic="b"))
    assert len(broker.records("b", 0)) == 6


def test_bad_rows_fail_with_clear_errors() -> None:
    broker = FakeBroker({"t": 2})
    no_topic = options(topic=None)
    cases = [
        (pa.record_batch({"key": pa.array([b"k"])}), options(), "needs a 'value' column"),
        (pa.record_batch({"value": pa.array([1])}), options(), "'value' must be binary or string"),
        (pa.record_batch({"value": pa.array([b"v"])}), no_topic, "option 'topic' or a 'topic'"),
        (
            pa.record_batch({"value": pa.array([b"v"]), "topic": pa.array([None], pa.string())}),
            no_topic,
            "'topic' is null",
        ),
        (
            pa.record_batch({"value": pa.array([b"v"]), "topic": pa.array(["nope"])}),
            no_topic,
            "no topic 'nope'",
        ),
        (
            pa.record_batch({"value": pa.array([b"v"]), "partition": pa.array([-3], pa.int32())}),
            options(),
            "partition is -3",
        ),
        (
            pa.record_batch({"value": pa.array([b"v"]), "partition": pa.array([2], pa.int32())}),
            options(),
            "partition 2 is not in topic 't'",
        ),
    ]
    for batch, write_options, message in cases:
        with pytest.raises((InvalidInputError, UnknownTopicOrPartitionError), match=message):
            run_task(broker, [batch], write_options=write_options)
    assert broker.requests == 0


def test_the_buffer_bounds_what_a_task_holds() -> None:
    broker = FakeBroker({"t": 4})
    seen: list[int] = []
    produce = broker.produce

    def watched(topic: str, partition: int, batches: Sequence[bytes]) -> None:
        seen.append(sum(len(b) for b in batches))
        produce(topic, partition, batches)

    broker.produce = watched  # type: ignore[method-assign]
    run_task(broker, [chunk(0, 2000, size=500)], buffer_bytes_max=8000, request_bytes_max=4000)
    assert len(broker.values("t")) == 2000
    assert max(seen) <= 8000


# ----------------------------------------------------------------------------- spark side


def test_check_schema_names_the_column_and_what_it_allows() -> None:
    def schema(**columns: Any) -> Any:
        return StructType([StructField(name, kind) for name, kind in columns.items()])

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    good = schema(
        key=StringType(),
        value=BinaryType(),
        headers=ArrayType(header),
        topic=StringType(),
        partition=IntegerType(),
        timestamp=TimestampType(),
        anything=LongType(),
    )
    check_schema(good, options(topic=None))
    bad = [
        (schema(key=BinaryType()), options(), "needs a 'value' column"),
        (schema(value=LongType()), options(), "'value' must be binary or string, got bigint"),
        (schema(value=BinaryType(), key=LongType()), options(), "'key' must be binary or string"),
        (schema(value=BinaryType(), topic=LongType()), options(), "'topic' must be string"),
        (schema(value=BinaryType(), partition=StringType()), options(), "'partition' must be int"),
        (schema(value=BinaryType(), timestamp=LongType()), options(), "'timestamp' must be"),
        (schema(value=BinaryType()), options(topic=None), "option 'topic' or a 'topic' column"),
        (
            schema(value=BinaryType(), headers=ArrayType(StringType())),
            options(),
            "'headers' must be array<struct<key:string,value:binary>>, got array<string>",
        ),
    ]
    for given, write_options, message in bad:
        with pytest.raises(InvalidInputError, match=message):
            check_schema(given, write_options)


def test_rows_become_arrow_for_the_row_path() -> None:
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
            StructField("partition", IntegerType()),
            StructField("timestamp", TimestampType()),
            StructField("other", IntegerType()),
        ]
    )
    stamp = datetime.datetime(2024, 1, 1, 0, 0, 0, 1500)  # naive local, as Rows hold them
    rows = [
        Row(
            key="a",
            value=b"v",
            headers=[Row(key="h", value=b"1")],
            partition=1,
            timestamp=stamp,
            other=1,
        ),
        Row(key=None, value=None, headers=None, partition=None, timestamp=None, other=2),
    ]
    batches = list(rows_to_arrow(rows, schema))
    assert len(batches) == 1
    broker = FakeBroker({"t": 2})
    run_task(broker, batches)
    expected_ms = int(stamp.timestamp()) * 1000 + 1
    assert broker.records("t", 1)[0] == (b"a", b"v", expected_ms, (("h", b"1"),))
    assert sorted(broker.values("t"), key=str) == [None, b"v"]
