"""Record batches as Arrow, straight from the payload's columns.

The schema is Spark's Kafka source's, in its column order: ``key binary, value
binary, topic string, partition int32, offset int64, timestamp timestamp[us, UTC],
timestampType int32`` and, when asked, ``headers list<struct<key: string, value:
binary>>`` (null for a record without headers, as Kafka's source gives). Record
timestamps are always the producer's (create time: a batch has no timestamp-type
attribute, ``docs/format.md``), so ``timestampType`` is always
:data:`TIMESTAMP_TYPE_CREATE_TIME`. Keys and values are not
copied record by record: the length column becomes Arrow's offsets (a -1 length
becomes a null), and the concatenated bytes become the data buffer. Needs
``pyarrow`` (``pip install 'laminar[arrow]'``).

The other way, :func:`arrow_to_batch` encodes Arrow columns into a record batch
(the Spark writer's path): Arrow's offsets become the length columns and its data
buffers the payload's bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from laminar.errors import BatchLimitError, InvalidInputError, RecordFormatError
from laminar.records import (
    DEFAULT_LIMITS,
    NO_PRODUCER,
    NO_SEQUENCE,
    BatchLimits,
    ColumnView,
    Compression,
    seal_payload,
    unpack_headers,
)

__all__ = [
    "TIMESTAMP_TYPE_CREATE_TIME",
    "arrow_schema",
    "arrow_to_batch",
    "binary_lengths",
    "columns_to_arrow",
    "concat_record_batches",
    "slices_to_arrow",
    "header_blobs",
    "timestamps_ms",
]

TIMESTAMP_TYPE_CREATE_TIME = 0
"""Kafka's ``TimestampType.CREATE_TIME`` id (1 is log-append time): the type of every
Laminar record timestamp, which its producer chose."""
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
        pa.field("timestampType", pa.int32(), nullable=False),
    ]
    if headers:
        fields.append(pa.field("headers", _header_list_type(pa)))
    return pa.schema(fields)


def _header_list_type(pa: ModuleType) -> Any:
    return pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def _timestamp_types(pa: ModuleType, count: int) -> Any:
    """The ``timestampType`` column: create time for every record."""
    return pa.array(np.full(count, TIMESTAMP_TYPE_CREATE_TIME, dtype=np.int32))


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
        _timestamp_types(pa, count),
    ]
    if headers:
        columns.append(_headers(pa, view, count))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(headers=headers))
    return batch if (start, stop) == (0, count) else batch.slice(start, stop - start)


ColumnSlice = tuple[ColumnView, int, int]
"""Records ``[start, stop)`` of one stamped batch's columns."""


def slices_to_arrow(
    slices: Sequence[ColumnSlice], topic: str, partition: int, *, headers: bool = False
) -> Any:
    """The records of ``slices`` (batches of ``topic``-``partition``, in order) as one
    ``pyarrow.RecordBatch``: the same rows as :func:`columns_to_arrow` of each
    slice joined by :func:`concat_record_batches`, built at once.

    Why: a log batch holds a few hundred records, and making an Arrow batch per log
    batch costs tens of µs of Python each, a fifth of a reader's time. Here each
    slice costs a few numpy views; the length columns are joined by numpy and the
    key and value bytes copied once into one buffer each.
    """
    pa = _pyarrow()
    if not slices:
        raise InvalidInputError("slices_to_arrow needs at least one slice")
    if headers:  # rare: the per-batch path, which unpacks header blobs
        return concat_record_batches(
            [columns_to_arrow(v, topic, partition, a, b, headers=True) for v, a, b in slices]
        )
    value_sizes: list[np.ndarray] = []
    key_sizes: list[np.ndarray] = []
    value_data: list[memoryview] = []
    key_data: list[memoryview] = []
    stamps: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    for view, start, stop in slices:
        count = view.header.record_count
        if not 0 <= start <= stop <= count:
            raise InvalidInputError(f"record range [{start}, {stop}) outside the batch's {count}")
        data = view.data
        lengths = np.frombuffer(view.value_lengths, dtype="<i4")
        first, size = _span(lengths, start, stop)
        value_sizes.append(lengths[start:stop])
        value_data.append(data[view.values_start + first : view.values_start + first + size])
        if view.key_lengths is None:
            key_sizes.append(np.full(stop - start, -1, dtype="<i4"))
        else:
            lengths = np.frombuffer(view.key_lengths, dtype="<i4")
            first, size = _span(lengths, start, stop)
            key_sizes.append(lengths[start:stop])
            key_data.append(data[first : first + size])
        stamps.append(np.frombuffer(view.timestamps, dtype="<i8")[start:stop])
        base = view.header.base_offset
        offsets.append(np.arange(base + start, base + stop, dtype=np.int64))
    millis = np.concatenate(stamps)
    count = len(millis)
    if count and (int(millis.max()) > _MILLIS_MAX or int(millis.min()) < -_MILLIS_MAX):
        raise InvalidInputError(
            "a record timestamp does not fit Arrow's timestamp[us] (|ms| > 9.2e15)"
        )
    keys = _joined_binary(pa, np.concatenate(key_sizes), key_data)
    values = _joined_binary(pa, np.concatenate(value_sizes), value_data)
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(np.concatenate(offsets)),
        pa.array(millis * 1000, type=pa.timestamp("us", tz="UTC")),
        _timestamp_types(pa, count),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


def _span(lengths: np.ndarray, start: int, stop: int) -> tuple[int, int]:
    """Where records ``[start, stop)`` of a length column (-1 = null, no bytes)
    begin in its data, and how many bytes they take."""
    sizes = np.maximum(lengths, 0)
    return int(sizes[:start].sum()), int(sizes[start:stop].sum())


def _joined_binary(pa: ModuleType, lengths: np.ndarray, data: list[memoryview]) -> Any:
    """A binary array from a length column (-1 = null) and its items' bytes in
    pieces, copied once into one buffer."""
    count = len(lengths)
    valid = lengths >= 0
    null_count = count - int(np.count_nonzero(valid))
    if null_count == count:
        return pa.nulls(count, pa.binary())
    bounds = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.where(valid, lengths, 0), out=bounds[1:])
    if int(bounds[-1]) > 2**31 - 1:
        raise InvalidInputError("a binary column larger than 2 GiB")
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [validity, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(b"".join(data))],
        null_count=null_count,
    )


def concat_record_batches(batches: list[Any]) -> Any:
    """One ``pyarrow.RecordBatch`` holding ``batches`` (same schema) in order.

    Why: a consumer of Arrow (Spark's Python data source above all) pays a fixed
    cost per batch handed to it, and a record batch of a log holds a few hundred
    records; joining the batches of one fetch copies each value once, which costs
    far less.
    """
    if len(batches) == 1:
        return batches[0]
    pa = _pyarrow()
    concat = getattr(pa, "concat_batches", None)  # pyarrow >= 19
    if concat is not None:
        return concat(batches)
    [joined] = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return joined


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
    """The headers column: null for a record without headers, as Spark's Kafka
    source gives (the format cannot tell an empty header list from none: both are a
    blob of length 0). Header blobs are msgpack: unpacked one by one."""
    if view.header_lengths is None:
        return pa.nulls(count, _header_list_type(pa))
    lengths = np.frombuffer(view.header_lengths, dtype="<u4")
    bounds = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    base = view.headers_start
    blobs = view.data
    rows = [
        unpack_headers(blobs[base + int(a) : base + int(b)]) if b > a else ()
        for a, b in itertools.pairwise(bounds)
    ]
    return pa.array(
        [[{"key": k, "value": v} for k, v in row] if row else None for row in rows],
        type=_header_list_type(pa),
    )


# --------------------------------------------------------------------------- encoding

# Payload flags (the layout is in the docstring of ``laminar/records.py``).
_FLAG_KEYS = 0x01
_FLAG_HEADERS = 0x02


def binary_lengths(array: Any) -> np.ndarray:
    """The byte length of each item of a binary or string Arrow array (-1 = null),
    as int64, read from the offsets buffer (no Python object per item)."""
    pa = _pyarrow()
    lengths, _ = _binary_parts(pa, array, "column")
    return lengths


def header_blobs(headers: Any) -> Any:
    """A ``list<struct<key: string, value: binary>>`` Arrow array as one msgpack blob
    per record (a ``binary`` array; ``b""`` for a null or empty list), the form the
    payload stores and :func:`arrow_to_batch` takes.

    Each record's headers are packed one by one (msgpack has no columnar packer):
    the one per-record Python step of the encoder, taken only when headers are given.
    A null header key or value is refused: the format has no null header.
    """
    pa = _pyarrow()
    import msgpack

    count = len(headers)
    if not pa.types.is_list(headers.type) and not pa.types.is_large_list(headers.type):
        raise InvalidInputError(
            f"headers must be a list<struct<key: string, value: binary>>, not {headers.type}"
        )
    entry_type = headers.type.value_type
    if not pa.types.is_struct(entry_type) or {
        entry_type.field(i).name for i in range(entry_type.num_fields)
    } != {"key", "value"}:
        raise InvalidInputError(
            f"headers must be a list<struct<key: string, value: binary>>, not {headers.type}"
        )
    sizes = _list_sizes(pa, headers)
    if not sizes.any():
        return pa.array([b""] * count, type=pa.binary())
    entries = headers.flatten()  # the entries of the non-null lists in range, in order
    if entries.null_count:
        raise InvalidInputError("a header is null; headers cannot be null")
    children = entries.flatten()  # the struct's fields, its slice offset applied
    keys = children[entry_type.get_field_index("key")]
    values = children[entry_type.get_field_index("value")]
    if keys.null_count or values.null_count:
        raise InvalidInputError("a header, its key or its value is null; headers cannot be null")
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        raise InvalidInputError(f"header keys must be strings, not {keys.type}")
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(pa.large_binary())
    elif not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        raise InvalidInputError(f"header values must be binary, not {values.type}")
    pairs = list(zip(keys.to_pylist(), values.to_pylist(), strict=True))
    packer = msgpack.Packer(use_bin_type=True)
    blobs: list[bytes] = []
    position = 0
    for size in sizes.tolist():
        if size:
            blobs.append(packer.pack(pairs[position : position + size]))
            position += size
        else:
            blobs.append(b"")
    return pa.array(blobs, type=pa.binary())


def timestamps_ms(array: Any, default_ms: int) -> np.ndarray:
    """Milliseconds since the epoch (int64) of an Arrow timestamp array (any unit;
    sub-millisecond parts are floored) or integer array (taken as ms); a null is
    ``default_ms``."""
    pa = _pyarrow()
    kind = array.type
    if pa.types.is_timestamp(kind):
        raw = array.cast(pa.int64())
        scale = {"s": -1000, "ms": 1, "us": 1000, "ns": 1_000_000}[kind.unit]
    elif pa.types.is_integer(kind):
        raw, scale = array.cast(pa.int64()), 1
    else:
        raise InvalidInputError(f"timestamps must be a timestamp or an integer (ms), not {kind}")
    values: np.ndarray = np.asarray(raw.fill_null(0).to_numpy(zero_copy_only=False), np.int64)
    if scale < 0:
        if values.size and int(np.abs(values).max()) > _MILLIS_MAX:  # s -> ms overflow guard
            raise InvalidInputError("a timestamp in seconds is too large to hold in ms")
        millis = values * -scale
    else:
        millis = values // scale if scale != 1 else values
    if raw.null_count:
        valid = raw.is_valid().to_numpy(zero_copy_only=False)
        millis = np.where(valid, millis, np.int64(default_ms))
    return millis


def arrow_to_batch(
    values: Any,
    *,
    keys: Any | None = None,
    timestamps_ms: np.ndarray | int = 0,
    headers: Any | None = None,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER,
    base_sequence: int = NO_SEQUENCE,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> bytes:
    """Encode Arrow columns into one record batch (base offset and term unset): the
    columnar twin of :func:`laminar.records.encode_batch`, whose output it matches.

    ``values`` and ``keys`` are ``binary``, ``string`` or their ``large_`` forms (a
    string is written as its UTF-8 bytes; null = a null value or key);
    ``timestamps_ms`` is an int64 array (:func:`timestamps_ms`) or one int for all;
    ``headers`` is a ``list<struct<key, value>>`` array, or the blobs of
    :func:`header_blobs` (a non-null ``binary`` array). Every column has one entry
    per record.

    The length columns come from the Arrow offsets and the key and value bytes are
    the Arrow data buffers themselves, sliced, so the cost is a few C-level passes
    per column and one copy into the payload, with no Python object per record
    (headers aside, see :func:`header_blobs`).
    """
    pa = _pyarrow()
    count = len(values)
    if count == 0:
        raise BatchLimitError("a batch holds at least one record")
    if count > limits.record_count_max:
        raise BatchLimitError(f"{count} records exceed record_count_max {limits.record_count_max}")
    if (producer_id == NO_PRODUCER) != (base_sequence == NO_SEQUENCE):
        raise RecordFormatError("producer_id and base_sequence are set together or not at all")
    if not (NO_PRODUCER <= producer_id < 2**63 and NO_SEQUENCE <= base_sequence < 2**31):
        raise RecordFormatError("producer_id or base_sequence out of range")

    if isinstance(timestamps_ms, int):
        stamps = np.full(count, timestamps_ms, dtype="<i8")
    else:
        stamps = np.ascontiguousarray(timestamps_ms, dtype="<i8")
        if stamps.shape != (count,):
            raise RecordFormatError("timestamps_ms must have one entry per record")
    value_lengths, value_data = _binary_parts(pa, values, "values")
    flags = 0
    parts: list[Any] = [b"", stamps, _int32(value_lengths, "values")]
    key_data: Any = b""
    if keys is not None:
        if len(keys) != count:
            raise RecordFormatError("keys must have one entry per record")
        if keys.null_count != count:
            flags |= _FLAG_KEYS
            key_lengths, key_data = _binary_parts(pa, keys, "keys")
            parts.append(_int32(key_lengths, "keys"))
    header_data: Any = b""
    if headers is not None:
        if len(headers) != count:
            raise RecordFormatError("headers must have one entry per record")
        blobs = headers if _is_binary(pa, headers.type) else header_blobs(headers)
        blob_lengths, header_data = _binary_parts(pa, blobs, "headers")
        if blob_lengths.min() < 0:
            raise RecordFormatError("a header blob is null; use b'' for a record without")
        if blob_lengths.any():
            flags |= _FLAG_HEADERS
            parts.append(blob_lengths.astype("<u4"))
        else:
            header_data = b""
    parts[0] = bytes((flags,))
    parts += [key_data, value_data, header_data]
    return seal_payload(
        b"".join(parts),
        record_count=count,
        first_timestamp_ms=int(stamps[0]),
        max_timestamp_ms=int(stamps.max()),
        compression=compression,
        producer_id=producer_id,
        base_sequence=base_sequence,
        limits=limits,
    )


def _is_binary(pa: ModuleType, kind: Any) -> bool:
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))


def _int32(lengths: np.ndarray, name: str) -> np.ndarray:
    if lengths.size and int(lengths.max()) > 2**31 - 1:  # pragma: no cover - limits are lower
        raise BatchLimitError(f"an item in {name} is too large")
    return lengths.astype("<i4")


def _list_sizes(pa: ModuleType, lists: Any) -> np.ndarray:
    """Entries per list (0 for a null list), int64."""
    import pyarrow.compute as pc

    sizes = pc.list_value_length(lists).fill_null(0)
    return np.asarray(sizes.to_numpy(zero_copy_only=False), dtype=np.int64)


def _binary_parts(pa: ModuleType, array: Any, name: str) -> tuple[np.ndarray, Any]:
    """Lengths (int64, -1 = null) and the concatenated bytes of the non-null items
    of a binary or string array: the offsets and data buffers, with the array's
    slice offset applied, copied only when a null slot holds bytes."""
    kind = array.type
    count = len(array)
    if pa.types.is_binary(kind) or pa.types.is_string(kind):
        offset_type = "<i4"
    elif pa.types.is_large_binary(kind) or pa.types.is_large_string(kind):
        offset_type = "<i8"
    elif pa.types.is_null(kind):
        return np.full(count, -1, dtype=np.int64), b""
    else:
        raise InvalidInputError(f"{name} must be binary or string, not {kind}")
    if count == 0:
        return np.zeros(0, dtype=np.int64), b""
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[
        array.offset : array.offset + count + 1
    ]
    lengths = np.diff(offsets).astype(np.int64)
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        if lengths[~valid].any():
            # Arrow lets a null slot span bytes; rebuild without them.
            empty = "" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else b""
            filled = array.fill_null(pa.scalar(empty, kind))
            lengths, data = _binary_parts(pa, filled, name)
            return np.where(valid, lengths, -1), data
        lengths = np.where(valid, lengths, -1)
    start, end = int(offsets[0]), int(offsets[-1])
    data = memoryview(data_buffer)[start:end] if data_buffer is not None else b""
    return lengths, data
