"""Record batches as Arrow, straight from the payload's columns.

The schema is Spark's Kafka source's: ``key binary, value binary, topic string,
partition int32, offset int64, timestamp timestamp[us, UTC]`` and, when asked,
``headers list<struct<key: string, value: binary>>``. Keys and values are not
copied record by record: the length column becomes Arrow's offsets (a -1 length
becomes a null), and the concatenated bytes become the data buffer. Needs
``pyarrow`` (``pip install 'laminar[arrow]'``).
"""

from __future__ import annotations

import itertools
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from laminar.errors import InvalidInputError
from laminar.records import ColumnView, Header, unpack_headers

__all__ = ["arrow_schema", "columns_to_arrow"]

_MILLIS_MAX = (2**63 - 1) // 1000
"""Largest timestamp in ms whose value in µs fits an int64."""


@cache
def _pyarrow() -> ModuleType:
    try:
        import pyarrow as module
    except ImportError:  # pragma: no cover - depends on the install
        raise InvalidInputError("to_arrow() needs pyarrow: pip install 'laminar[arrow]'") from None
    found: ModuleType = module
    return found


def arrow_schema(*, headers: bool = False) -> Any:
    """The schema of :func:`columns_to_arrow`'s batches."""
    pa = _pyarrow()
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
    if headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header), nullable=False))
    return pa.schema(fields)


def columns_to_arrow(
    view: ColumnView,
    topic: str,
    partition: int,
    start: int = 0,
    stop: int | None = None,
    *,
    headers: bool = False,
) -> Any:
    """Records ``[start, stop)`` of a stamped batch as a ``pyarrow.RecordBatch``."""
    pa = _pyarrow()
    count = view.header.record_count
    stop = count if stop is None else stop
    if not 0 <= start <= stop <= count:
        raise InvalidInputError(f"record range [{start}, {stop}) outside the batch's {count}")
    data = view.data
    value_lengths = np.frombuffer(view.value_lengths, dtype="<i4")
    values = _binary(pa, value_lengths, data, view.values_start, count)
    if view.key_lengths is None:
        keys = pa.nulls(count, pa.binary())
    else:
        keys = _binary(pa, np.frombuffer(view.key_lengths, dtype="<i4"), data, 0, count)
    base = view.header.base_offset
    offsets = pa.array(np.arange(base, base + count, dtype=np.int64))
    millis = np.frombuffer(view.timestamps, dtype="<i8")
    if millis.size and (int(millis.max()) > _MILLIS_MAX or int(millis.min()) < -_MILLIS_MAX):
        raise InvalidInputError(
            "a record timestamp does not fit Arrow's timestamp[us] (|ms| > 9.2e15)"
        )
    micros = millis * 1000
    timestamps = pa.array(micros, type=pa.timestamp("us", tz="UTC"))
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        offsets,
        timestamps,
    ]
    if headers:
        columns.append(_headers(pa, view, count))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(headers=headers))
    return batch if (start, stop) == (0, count) else batch.slice(start, stop - start)


def _binary(pa: ModuleType, lengths: np.ndarray, data: memoryview, start: int, count: int) -> Any:
    """A binary array from a length column (-1 = null) over ``data[start:]``."""
    valid = lengths >= 0
    null_count = count - int(np.count_nonzero(valid))
    sizes = lengths if not null_count else np.where(valid, lengths, 0)
    bounds = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    total = int(bounds[-1])
    if total > 2**31 - 1:  # pragma: no cover - batches are far smaller
        raise InvalidInputError("a batch column larger than 2 GiB")
    validity = None
    if null_count:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [
            validity,
            pa.py_buffer(bounds.astype(np.int32)),
            pa.py_buffer(data[start : start + total]),
        ],
        null_count=null_count,
    )


def _headers(pa: ModuleType, view: ColumnView, count: int) -> Any:
    """The headers column (record headers are msgpack blobs: unpacked one by one)."""
    if view.header_lengths is None:
        rows: list[tuple[Header, ...]] = [()] * count
    else:
        lengths = np.frombuffer(view.header_lengths, dtype="<u4")
        bounds = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        base = view.headers_start
        blobs = view.data
        rows = [
            unpack_headers(blobs[base + int(a) : base + int(b)])
            for a, b in itertools.pairwise(bounds)
        ]
    header_type = pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )
    return pa.array([[{"key": k, "value": v} for k, v in row] for row in rows], type=header_type)
