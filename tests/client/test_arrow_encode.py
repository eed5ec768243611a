"""`laminar_client.arrow.arrow_to_batch`: Arrow columns -> record batch bytes.

The columnar encoder must produce what `laminar.records.encode_batch` produces for
the same records (byte for byte), and batches the broker accepts (`check_payload`)
and readers decode back to the same records.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from laminar_client.arrow import (  # noqa: E402
    arrow_to_batch,
    binary_lengths,
    header_blobs,
    timestamps_ms,
)

from laminar.errors import BatchLimitError, InvalidInputError, RecordFormatError  # noqa: E402
from laminar.records import (  # noqa: E402
    BatchLimits,
    Compression,
    Header,
    check_payload,
    decode_batch,
    encode_batch,
    verify_batch,
)

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def records(seed: int, count: int) -> dict[str, list[Any]]:
    rng = random.Random(seed)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[Header]] = []
    stamps: list[int] = []
    for i in range(count):
        keys.append(None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 12)))
        values.append(None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 300)))
        headers.append(
            [(f"h{j}", rng.randbytes(rng.randrange(0, 5))) for j in range(rng.randrange(0, 3))]
        )
        stamps.append(1_700_000_000_000 + i * 7 - rng.randrange(0, 50))
    return {"keys": keys, "values": values, "headers": headers, "stamps": stamps}


def header_array(headers: list[list[Header]]) -> Any:
    return pa.array([[{"key": k, "value": v} for k, v in row] for row in headers], HEADER_TYPE)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_bytes_as_encode_batch(seed: int, compression: Compression) -> None:
    data = records(seed, 500)
    encoded = arrow_to_batch(
        pa.array(data["values"], pa.binary()),
        keys=pa.array(data["keys"], pa.binary()),
        timestamps_ms=np.array(data["stamps"], dtype=np.int64),
        headers=header_array(data["headers"]),
        compression=compression,
        producer_id=77,
        base_sequence=1000,
    )
    expected = encode_batch(
        data["values"],
        keys=data["keys"],
        timestamps_ms=data["stamps"],
        headers=data["headers"],
        compression=compression,
        producer_id=77,
        base_sequence=1000,
    )
    assert encoded == expected
    header = verify_batch(encoded)
    check_payload(encoded, header)  # what the leader runs on receipt
    decoded = decode_batch(encoded)
    assert decoded.values == data["values"]
    assert decoded.keys == data["keys"]
    assert decoded.timestamps_ms == data["stamps"]
    assert [list(h) for h in decoded.headers] == data["headers"]
    assert (header.producer_id, header.base_sequence, header.record_count) == (77, 1000, 500)


@pytest.mark.parametrize("kind", ["string", "large_string", "large_binary"])
def test_string_and_large_types(kind: str) -> None:
    texts = ["é", None, "", "hello", "ünï"]
    arrow_type = getattr(pa, kind)()
    raw = [None if t is None else t.encode() for t in texts]
    encoded = arrow_to_batch(
        pa.array(texts if "string" in kind else raw, arrow_type),
        keys=pa.array(list(reversed(texts)) if "string" in kind else raw[::-1], arrow_type),
        timestamps_ms=5,
    )
    decoded = decode_batch(encoded)
    assert decoded.values == raw
    assert decoded.keys == raw[::-1]
    assert decoded.timestamps_ms == [5] * 5


def test_sliced_arrays_and_null_slots_holding_bytes() -> None:
    values = pa.array([b"zero", b"one", None, b"three", b"four", b"five"]).slice(1, 4)
    keys = pa.array([b"a", b"b", b"c", None, b"e", b"f"]).slice(1, 4)
    # A null whose slot spans bytes (legal in Arrow): they must not leak into the payload.
    offsets = pa.py_buffer(np.array([0, 2, 5, 7], dtype=np.int32))
    validity = pa.py_buffer(np.packbits([True, False, True, False], bitorder="little"))
    spanning = pa.Array.from_buffers(
        pa.binary(), 3, [validity, offsets, pa.py_buffer(b"aaXXXcc")], null_count=1
    )
    encoded = arrow_to_batch(values, keys=keys, timestamps_ms=0)
    decoded = decode_batch(encoded)
    assert decoded.values == [b"one", None, b"three", b"four"]
    assert decoded.keys == [b"b", b"c", None, b"e"]
    assert decode_batch(arrow_to_batch(spanning)).values == [b"aa", None, b"cc"]
    assert binary_lengths(spanning).tolist() == [2, -1, 2]
    assert binary_lengths(values).tolist() == [3, -1, 5, 4]


def test_all_null_keys_and_empty_headers_leave_their_columns_out() -> None:
    values = pa.array([b"x", b"y"])
    with_nothing = arrow_to_batch(
        values,
        keys=pa.array([None, None], pa.binary()),
        headers=pa.array([[], None], HEADER_TYPE),
        timestamps_ms=9,
    )
    assert with_nothing == encode_batch([b"x", b"y"], timestamps_ms=9)
    assert arrow_to_batch(values, keys=pa.nulls(2), timestamps_ms=9) == with_nothing


def test_header_blobs_and_their_checks() -> None:
    blobs = header_blobs(pa.array([[{"key": "a", "value": b"1"}], None, []], HEADER_TYPE))
    assert blobs.type == pa.binary()
    assert [len(b) for b in blobs.to_pylist()] == [7, 0, 0]
    # Pre-packed blobs are taken as they are.
    encoded = arrow_to_batch(pa.array([b"v", b"w", b"x"]), headers=blobs, timestamps_ms=0)
    assert decode_batch(encoded).headers == [(("a", b"1"),), (), ()]
    null_value = pa.array([[{"key": "a", "value": None}]], HEADER_TYPE)
    with pytest.raises(InvalidInputError, match="null"):
        header_blobs(null_value)
    with pytest.raises(InvalidInputError, match="list<struct"):
        header_blobs(pa.array([1, 2]))
    as_text = pa.array(
        [[{"key": "a", "value": "t"}]],
        pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.string())])),
    )
    assert decode_batch(arrow_to_batch(pa.array([b"v"]), headers=as_text)).headers == [
        (("a", b"t"),)
    ]


def test_timestamps_in_every_unit_nulls_take_the_default() -> None:
    ms = [1_700_000_000_123, -1_500, None]
    for unit, scale in (("s", None), ("ms", 1), ("us", 1000), ("ns", 1_000_000)):
        if scale is None:
            array = pa.array([1_700_000_000, -2, None], pa.timestamp("s", tz="UTC"))
            expected = [1_700_000_000_000, -2000, 42]
        else:
            array = pa.array([None if m is None else m * scale for m in ms], pa.timestamp(unit))
            expected = [1_700_000_000_123, -1_500, 42]
        assert timestamps_ms(array, 42).tolist() == expected
    micros = pa.array([1_999, -1], pa.timestamp("us", tz="Etc/UTC"))
    assert timestamps_ms(micros, 0).tolist() == [1, -1]  # floored, as Spark's unix_millis
    assert timestamps_ms(pa.array([3, None], pa.int64()), 7).tolist() == [3, 7]
    with pytest.raises(InvalidInputError, match="timestamp"):
        timestamps_ms(pa.array(["x"]), 0)


def test_limits_and_bad_input() -> None:
    values = pa.array([b"a" * 100] * 10)
    with pytest.raises(BatchLimitError, match="at least one"):
        arrow_to_batch(pa.array([], pa.binary()))
    with pytest.raises(BatchLimitError, match="record_count_max"):
        arrow_to_batch(values, limits=BatchLimits(record_count_max=5))
    with pytest.raises(BatchLimitError, match="batch_bytes_max"):
        arrow_to_batch(values, limits=BatchLimits(batch_bytes_max=500))
    with pytest.raises(InvalidInputError, match="binary or string"):
        arrow_to_batch(pa.array([1, 2]))
    with pytest.raises(RecordFormatError, match="together"):
        arrow_to_batch(values, producer_id=3)
    with pytest.raises(RecordFormatError, match="one entry per record"):
        arrow_to_batch(values, keys=pa.array([b"k"]))
    with pytest.raises(RecordFormatError, match="one entry per record"):
        arrow_to_batch(values, timestamps_ms=np.zeros(3, dtype=np.int64))
