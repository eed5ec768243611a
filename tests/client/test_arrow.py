"""`ConsumerBatch.to_arrow()` and `laminar_client.arrow.columns_to_arrow`.

Batches are built with `encode_batch` and stamped with `with_leader_fields`; every
cell of the Arrow batch is compared with what `decode_batch` gives for the same
bytes. One test reads through a `Consumer` from the fake cluster.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Sequence
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from laminar_client import Consumer, ConsumerBatch, RetryPolicy  # noqa: E402
from laminar_client.arrow import (  # noqa: E402
    arrow_schema,
    columns_to_arrow,
    concat_record_batches,
    slices_to_arrow,
)

from laminar.errors import InvalidInputError  # noqa: E402
from laminar.records import (  # noqa: E402
    Compression,
    Header,
    column_view,
    decode_batch,
    encode_batch,
    with_leader_fields,
)
from tests.client.fake_server import FakeCluster  # noqa: E402

TOPIC = "events"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def stamped(
    values: Sequence[bytes | None],
    base_offset: int = 0,
    **kwargs: Any,
) -> bytes:
    return with_leader_fields(encode_batch(values, **kwargs), base_offset, 3)


def to_arrow(batch: bytes | memoryview, start: int = 0, stop: int | None = None, **kw: Any) -> Any:
    return columns_to_arrow(column_view(batch), TOPIC, 7, start, stop, **kw)


def expected_rows(
    batch: bytes | memoryview, start: int = 0, stop: int | None = None, *, headers: bool = False
) -> list[dict[str, Any]]:
    """The rows ``decode_batch`` gives, as ``RecordBatch.to_pylist()`` shows them."""
    rows = []
    for record in decode_batch(batch).records()[start:stop]:
        row = {
            "key": record.key,
            "value": record.value,
            "topic": TOPIC,
            "partition": 7,
            "offset": record.offset,
            "timestamp": EPOCH + datetime.timedelta(milliseconds=record.timestamp_ms),
            "timestampType": 0,
        }
        if headers:
            row["headers"] = [{"key": k, "value": v} for k, v in record.headers] or None
        rows.append(row)
    return rows


def test_schema_is_the_spark_kafka_one() -> None:
    batch = to_arrow(stamped([b"v"]))
    schema = batch.schema
    assert schema.names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert [field.type for field in schema] == [
        pa.binary(),
        pa.binary(),
        pa.string(),
        pa.int32(),
        pa.int64(),
        pa.timestamp("us", tz="UTC"),
        pa.int32(),
    ]
    assert schema.field("key").nullable and schema.field("value").nullable
    assert not schema.field("timestampType").nullable
    assert schema == arrow_schema()
    assert isinstance(batch, pa.RecordBatch)

    with_headers = to_arrow(stamped([b"v"]), headers=True).schema
    assert with_headers.names[-1] == "headers"
    assert with_headers.field("headers").type == pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )
    assert with_headers.field("headers").nullable  # null: a record without headers
    assert with_headers == arrow_schema(headers=True)


def test_every_cell_matches_decode_batch() -> None:
    values = [b"v0", None, b"", b"v3", b"\x00\xff" * 50]
    keys = [b"k0", None, b"", b"k3", b"k4"]
    stamps = [1_700_000_000_123, 0, -1_000, 1_700_000_000_456, 253_402_300_799_999]
    raw = stamped(values, 1_000, keys=keys, timestamps_ms=stamps)
    batch = to_arrow(raw)
    assert batch.num_rows == 5
    assert batch.to_pylist() == expected_rows(raw)
    assert batch.column("offset").to_pylist() == [1_000, 1_001, 1_002, 1_003, 1_004]
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [s * 1000 for s in stamps]


def test_nulls_stay_null_and_empty_stays_empty() -> None:
    raw = stamped([None, b"", b"x", None], keys=[b"", None, None, b"k"])
    batch = to_arrow(raw)
    values, keys = batch.column("value"), batch.column("key")
    assert values.null_count == 2 and keys.null_count == 2
    assert values.is_null().to_pylist() == [True, False, False, True]
    assert keys.is_null().to_pylist() == [False, True, True, False]
    assert values.to_pylist() == [None, b"", b"x", None]
    assert keys.to_pylist() == [b"", None, None, b"k"]
    for name in ("topic", "partition", "offset", "timestamp", "timestampType"):
        assert batch.column(name).null_count == 0


def test_a_timestamp_arrow_cannot_hold_is_refused_not_wrapped() -> None:
    raw = stamped([b"a", b"b"], timestamps_ms=[2**62, -(2**62)])
    assert decode_batch(raw).timestamps_ms == [2**62, -(2**62)]
    with pytest.raises((InvalidInputError, OverflowError, pa.ArrowInvalid)):
        to_arrow(raw)  # today: timestamps 0 and 0, silently


def test_keys_column_is_all_null_without_keys() -> None:
    for keys in (None, [None, None, None]):
        batch = to_arrow(stamped([b"a", b"b", b""], keys=keys))
        assert batch.column("key").type == pa.binary()
        assert batch.column("key").null_count == 3
        assert batch.column("key").to_pylist() == [None, None, None]
        assert batch.column("value").to_pylist() == [b"a", b"b", b""]


def test_many_records_with_nulls_everywhere() -> None:
    rng = random.Random(11)
    count = 1_037  # not a multiple of 8: the validity bitmap's last byte is partial

    def item() -> bytes | None:
        return None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 40))

    values = [item() for _ in range(count)]
    keys = [item() for _ in range(count)]
    stamps = [rng.randrange(0, 2**41) for _ in range(count)]
    raw = stamped(values, 123_456, keys=keys, timestamps_ms=stamps)
    batch = to_arrow(raw)
    batch.validate(full=True)
    assert batch.to_pylist() == expected_rows(raw)


@pytest.mark.parametrize(("start", "stop"), [(0, 5), (0, 1), (1, 3), (4, 5), (2, 2), (0, None)])
def test_slices(start: int, stop: int | None) -> None:
    raw = stamped(
        [b"a", None, b"", b"dd", b"e"],
        40,
        keys=[None, b"k1", b"k2", None, b"k4"],
        timestamps_ms=[1, 2, 3, 4, 5],
        headers=[[("h", b"0")], [], [("a", b""), ("b", b"x")], [], [("z", b"4")]],
    )
    batch = to_arrow(raw, start, stop, headers=True)
    assert batch.num_rows == (5 if stop is None else stop) - start
    assert batch.to_pylist() == expected_rows(raw, start, stop, headers=True)
    batch.validate(full=True)


def test_a_slice_outside_the_batch_is_refused() -> None:
    view = column_view(stamped([b"a", b"b"]))
    for start, stop in [(-1, 1), (0, 3), (2, 1)]:
        with pytest.raises(InvalidInputError):
            columns_to_arrow(view, TOPIC, 0, start, stop)


def test_zstd_compressed_batch() -> None:
    values = [b"value-%d" % i * 20 if i % 7 else None for i in range(200)]
    keys = [b"key-%d" % (i % 5) for i in range(200)]
    raw = stamped(
        values, 9, keys=keys, timestamps_ms=list(range(200)), compression=Compression.ZSTD
    )
    assert len(raw) < sum(len(v or b"") for v in values)  # it is compressed
    batch = to_arrow(raw, headers=True)
    assert batch.to_pylist() == expected_rows(raw, headers=True)


def test_headers_column() -> None:
    headers: list[list[Header]] = [
        [("trace", b"\x01\x02"), ("empty", b"")],
        [],
        [("unicode-é", b"x")],
    ]
    raw = stamped([b"a", b"b", None], headers=headers, compression=Compression.ZSTD)
    batch = to_arrow(raw, headers=True)
    assert batch.column("headers").to_pylist() == [
        [{"key": "trace", "value": b"\x01\x02"}, {"key": "empty", "value": b""}],
        None,  # no headers: null, as Spark's Kafka source gives
        [{"key": "unicode-é", "value": b"x"}],
    ]
    assert batch.column("headers").null_count == 1
    assert batch.to_pylist() == expected_rows(raw, headers=True)
    # Without headers in the batch (no header column at all) every row is null too.
    plain = to_arrow(stamped([b"a", b"b"]), headers=True).column("headers")
    assert plain.to_pylist() == [None, None] and plain.null_count == 2
    plain.validate(full=True)
    assert "headers" not in to_arrow(raw).schema.names


def test_consumer_batch_to_arrow_over_a_fetch_buffer() -> None:
    """A `ConsumerBatch` views one batch inside a larger fetch answer (the consumer's
    case): its columns, and its start/stop, come out right."""
    first = stamped([b"x"] * 3, 0, keys=[b"k"] * 3)
    second = stamped(
        [b"a", None, b"", b"d"],
        3,
        keys=[None, b"k4", None, b""],
        timestamps_ms=[10, 20, 30, 40],
        compression=Compression.ZSTD,
    )
    answer = memoryview(first + second + first)
    view = answer[len(first) : len(first) + len(second)]
    whole = ConsumerBatch(None, TOPIC, 7, view, 3, 0, 4)  # type: ignore[arg-type]
    assert (whole.first_offset, whole.next_offset, len(whole)) == (3, 7, 4)
    assert whole.to_arrow().to_pylist() == expected_rows(second)
    part = ConsumerBatch(None, TOPIC, 7, view, 3, 1, 3)  # type: ignore[arg-type]
    arrow = part.to_arrow(headers=True)
    assert arrow.to_pylist() == expected_rows(second, 1, 3, headers=True)
    assert arrow.column("offset").to_pylist() == [4, 5]


def test_consumer_batches_to_arrow_from_the_cluster(cluster: FakeCluster) -> None:
    cluster.add_topic(TOPIC, partitions=1)
    stored = [
        stamped([b"a", None, b"c"], 0, keys=[b"k0", b"k1", None], timestamps_ms=[1, 2, 3]),
        stamped([b"d", b""], 3, timestamps_ms=[4, 5], headers=[[("h", b"v")], []]),
    ]
    with cluster.lock:
        part = cluster.partition(TOPIC, 0)
        part.batches += stored
        part.end_offset = 5
    retry = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=5)
    with Consumer(cluster.bootstrap, fetch_wait_s=0.05, retry=retry) as consumer:
        consumer.assign({(TOPIC, 0): 1})
        batches = []
        for batch in consumer.batches(max_records=10, timeout_s=2.0):
            batches.append(batch)
            if batch.next_offset == 5:
                break
    tables = [batch.to_arrow(headers=True) for batch in batches]
    rows = [row for table in tables for row in table.to_pylist()]
    expected = [
        {**row, "topic": TOPIC, "partition": 0}
        for row in expected_rows(stored[0], 1, headers=True)
        + expected_rows(stored[1], headers=True)
    ]
    assert rows == expected
    records = [record for batch in batches for record in batch.records()]
    assert [
        (r["key"], r["value"], r["offset"], r["timestamp"].timestamp() * 1000) for r in rows
    ] == [(r.key, r.value, r.offset, r.timestamp_ms) for r in records]


@pytest.mark.parametrize("seed", range(20))
def test_slices_to_arrow_equals_joined_columns_to_arrow(seed: int) -> None:
    """Several batches (with and without keys, nulls, tombstones, compression) cut
    at random ends, built at once: the same rows as one batch each, joined."""
    rng = random.Random(seed)

    def item() -> bytes | None:
        return None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 30))

    slices = []
    offset = rng.randrange(0, 1000)
    for _ in range(rng.randrange(1, 6)):
        count = rng.randrange(1, 40)
        keyed = rng.random() < 0.6
        raw = stamped(
            [item() for _ in range(count)],
            offset,
            keys=[item() for _ in range(count)] if keyed else None,
            timestamps_ms=[rng.randrange(0, 2**41) for _ in range(count)],
            compression=rng.choice([Compression.NONE, Compression.ZSTD]),
        )
        offset += count
        start = rng.randrange(0, count + 1)
        stop = rng.randrange(start, count + 1)
        slices.append((column_view(raw), start, stop))
    built = slices_to_arrow(slices, TOPIC, 7)
    built.validate(full=True)
    joined = concat_record_batches(
        [columns_to_arrow(view, TOPIC, 7, start, stop) for view, start, stop in slices]
    )
    assert built.schema == arrow_schema()
    assert built.to_pylist() == joined.to_pylist()


def test_slices_to_arrow_with_headers_and_bad_input() -> None:
    raw = stamped([b"a", b"b"], 5, headers=[[("h", b"1")], []])
    built = slices_to_arrow([(column_view(raw), 1, 2)], TOPIC, 7, headers=True)
    assert built.to_pylist() == expected_rows(raw, 1, 2, headers=True)
    with pytest.raises(InvalidInputError, match="outside the batch"):
        slices_to_arrow([(column_view(raw), 1, 3)], TOPIC, 7)
    with pytest.raises(InvalidInputError, match="at least one"):
        slices_to_arrow([], TOPIC, 7)
