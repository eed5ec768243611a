"""The record batch: the one unit of the wire, replication and disk.

Theory of operation
-------------------
A producer encodes records into a batch once. The broker never re-encodes it: the
leader only stamps two header fields (``base_offset``, ``term``) and recomputes the
small header checksum; followers and the disk store the bytes as they are; the
consumer decodes. The broker's hot path therefore touches an 80-byte header and, on
receipt, one xxh3-64 pass over the payload — never the records themselves. (Keyed
compaction, off the hot path, re-encodes the surviving runs of a partly compacted
batch with :func:`encode_run`.)

A batch whose checksums are right can still be malformed (a producer bug, or a
hostile one): a value length past the payload, a header blob that is not msgpack.
Stored, it would stop every consumer at its offset, so on receipt the leader also
runs :func:`check_payload`, which raises exactly when :func:`decode_batch` would. It
reads the timestamp and length columns with a few C-level passes each and never the
keys or values; only header blobs (when a batch has any) are unpacked one by one,
and a compressed payload is decompressed, into at most the size its header declares.

The format -- the 80-byte header, the columnar payload, zstd, both XXH3-64
checksums, control batches, every validity rule and limit, the canonical choices
and idempotent sequencing -- is specified in ``docs/format.md``, with conformance
vectors in ``docs/conformance/batches-v1.json``; this module implements it and
does not repeat it. Where the two disagree, one of them has a bug.

Errors: every malformed input raises a :class:`laminar.errors.RecordFormatError`
subclass; no ``IndexError`` or ``struct.error`` reaches the caller.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cache, partial
from itertools import accumulate, pairwise
from types import ModuleType
from typing import NamedTuple, TypeVar

import msgpack
import xxhash
import zstandard

from laminar.errors import (
    BatchLimitError,
    ChecksumMismatchError,
    InvalidInputError,
    RecordFormatError,
    TruncatedBatchError,
    UnsupportedMagicError,
)

MAGIC = 1
HEADER_BYTES = 80
HEADER_STRUCT = struct.Struct("<IBBHiIqqqqqiIQQ")
assert HEADER_STRUCT.size == HEADER_BYTES
# The same layout with the reserved fields skipped: unpacks straight into BatchHeader.
_PARSE_STRUCT = struct.Struct("<IBBxxiIqqqqqi4xQQ")
assert _PARSE_STRUCT.size == HEADER_BYTES

# Byte positions of header fields that are read or written on their own.
_LENGTH_STRUCT = struct.Struct("<I")
_STAMP_STRUCT = struct.Struct("<qq")  # base_offset, term at byte 16
_STAMP_POSITION = 16
_CHECKSUMMED_HEADER_BYTES = 72
_CHECKSUM_STRUCT = struct.Struct("<Q")
_HEADER_CHECKSUM_POSITION = 72

ATTRIBUTE_CODEC_MASK = 0x07
ATTRIBUTE_CONTROL = 0x10
_ATTRIBUTES_KNOWN = ATTRIBUTE_CODEC_MASK | ATTRIBUTE_CONTROL

_FLAG_KEYS = 0x01
_FLAG_HEADERS = 0x02
_FLAG_BYTES = tuple(bytes((flags,)) for flags in range(4))  # a payload's first byte

NO_OFFSET = -1
NO_TERM = -1
NO_PRODUCER = -1
NO_SEQUENCE = -1

# Hard ceilings of the format itself; callers pass tighter limits (see BatchLimits).
BATCH_BYTES_CEILING = 256 * 1024 * 1024
RECORD_COUNT_CEILING = 10_000_000
# The smallest a record can be in an uncompressed payload: timestamp + value length.
_RECORD_BYTES_MIN = 12

_NATIVE_IS_LITTLE = sys.byteorder == "little"
_INT64_MAX = 2**63 - 1
_SEQUENCE_LIMIT = 2**31
"""Sequence numbers are int32: a batch's last sequence is at most 2**31 - 1."""
_INT64_STRUCT = struct.Struct("<q")


class Compression(IntEnum):
    """Whole-payload compression codec (header attribute bits 0-2)."""

    NONE = 0
    ZSTD = 1


_COMPRESSION_OF = {codec.value: codec for codec in Compression}
"""Each codec by its value: a lookup, where ``Compression(value)`` costs some 2 us
(the enum's call), once per batch a read or a compaction pass looks into."""


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """Upper bounds applied when encoding or accepting a batch.

    ``batch_bytes_max``: the largest whole batch (header included) accepted, as stored.
    ``payload_uncompressed_bytes_max``: the largest payload after decompression; it
    bounds the memory a small compressed batch can make a reader allocate.
    ``record_count_max``: the most records in one batch.
    """

    batch_bytes_max: int = 16 * 1024 * 1024
    payload_uncompressed_bytes_max: int = 64 * 1024 * 1024
    record_count_max: int = 1_000_000

    def __post_init__(self) -> None:
        if not HEADER_BYTES < self.batch_bytes_max <= BATCH_BYTES_CEILING:
            raise BatchLimitError(
                f"batch_bytes_max must be in ({HEADER_BYTES}, {BATCH_BYTES_CEILING}]"
            )
        if not 0 < self.payload_uncompressed_bytes_max <= BATCH_BYTES_CEILING:
            raise BatchLimitError(
                f"payload_uncompressed_bytes_max must be in (0, {BATCH_BYTES_CEILING}]"
            )
        if not 0 < self.record_count_max <= RECORD_COUNT_CEILING:
            raise BatchLimitError(f"record_count_max must be in (0, {RECORD_COUNT_CEILING}]")


DEFAULT_LIMITS = BatchLimits()


Header = tuple[str, bytes]


class Record(NamedTuple):
    """One decoded record. ``offset`` is -1 until the batch has been stamped."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class BatchHeader(NamedTuple):
    """The parsed fixed header of a batch."""

    length: int
    magic: int
    attributes: int
    record_count: int
    payload_uncompressed_bytes: int
    base_offset: int
    term: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    base_sequence: int
    payload_checksum: int
    header_checksum: int

    @property
    def compression(self) -> Compression:
        codec = self.attributes & ATTRIBUTE_CODEC_MASK
        found = _COMPRESSION_OF.get(codec)
        return Compression(codec) if found is None else found  # unknown: ValueError

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTRIBUTE_CONTROL)

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record (valid once stamped)."""
        return self.base_offset + self.record_count - 1

    @property
    def next_offset(self) -> int:
        """The offset just after this batch."""
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch's records as columns: cheap to build, cheap to turn into Arrow arrays."""

    header: BatchHeader
    timestamps_ms: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[Header, ...]]

    def __len__(self) -> int:
        return len(self.values)

    def records(self) -> list[Record]:
        """The batch as :class:`Record` tuples, offsets filled in from the header."""
        base = self.header.base_offset
        count = len(self.values)
        offsets: Sequence[int] = (
            range(base, base + count) if base != NO_OFFSET else [NO_OFFSET] * count
        )
        # tuple.__new__ through partial builds each NamedTuple at C speed.
        make = partial(tuple.__new__, Record)
        return list(
            map(
                make,
                zip(offsets, self.timestamps_ms, self.keys, self.values, self.headers, strict=True),
            )
        )


# --------------------------------------------------------------------------- encoding


def encode_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps_ms: Sequence[int] | int = 0,
    headers: Sequence[Sequence[Header]] | None = None,
    compression: Compression = Compression.NONE,
    control: bool = False,
    producer_id: int = NO_PRODUCER,
    base_sequence: int = NO_SEQUENCE,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> bytes:
    """Encode records given as columns into one batch (base offset and term unset).

    ``timestamps_ms`` is one timestamp per record, or one int used for all of them.
    ``keys`` and ``headers``, when given, have one entry per record.
    """
    count = len(values)
    if count == 0:
        raise BatchLimitError("a batch holds at least one record")
    if count > limits.record_count_max:
        raise BatchLimitError(f"{count} records exceed record_count_max {limits.record_count_max}")
    if control and count != 1:
        raise BatchLimitError("a control batch holds exactly one record")
    if (producer_id == NO_PRODUCER) != (base_sequence == NO_SEQUENCE):
        raise RecordFormatError("producer_id and base_sequence are set together or not at all")
    if not (NO_PRODUCER <= producer_id <= _INT64_MAX and NO_SEQUENCE <= base_sequence < 2**31):
        raise RecordFormatError("producer_id or base_sequence out of range")
    if base_sequence > _SEQUENCE_LIMIT - count:
        raise RecordFormatError(
            f"sequences {base_sequence} + {count} records pass the last one, {_SEQUENCE_LIMIT - 1}"
        )

    # struct.pack with "<" writes little-endian columns in one C call; it is faster
    # than building an array.array from the sequence (23 vs 33 us for 1,000 ints).
    try:
        if isinstance(timestamps_ms, int):
            timestamp_column = _INT64_STRUCT.pack(timestamps_ms) * count
            first_timestamp_ms = max_timestamp_ms = timestamps_ms
        else:
            if len(timestamps_ms) != count:
                raise RecordFormatError("timestamps_ms must have one entry per record")
            timestamp_column = struct.pack(f"<{count}q", *timestamps_ms)
            first_timestamp_ms = timestamps_ms[0]
            max_timestamp_ms = max(timestamps_ms)
    except struct.error:
        raise RecordFormatError("timestamps must be 64-bit integers") from None

    flags = 0
    value_lengths, value_data = _column(values, "values")
    key_lengths = key_data = b""
    if keys is not None:
        if len(keys) != count:
            raise RecordFormatError("keys must have one entry per record")
        if keys.count(None) != count:
            flags |= _FLAG_KEYS
            key_lengths, key_data = _column(keys, "keys")
    header_lengths = header_data = b""
    if headers is not None:
        if len(headers) != count:
            raise RecordFormatError("headers must have one entry per record")
        if any(headers):
            flags |= _FLAG_HEADERS
            header_lengths, header_data = _headers_column(headers)

    parts = [
        bytes((flags,)),
        timestamp_column,
        value_lengths,
        key_lengths,
        header_lengths,
        key_data,
        value_data,
        header_data,
    ]
    return seal_payload(
        b"".join(parts),
        record_count=count,
        first_timestamp_ms=first_timestamp_ms,
        max_timestamp_ms=max_timestamp_ms,
        compression=compression,
        producer_id=producer_id,
        base_sequence=base_sequence,
        control=control,
        limits=limits,
    )


def seal_payload(
    payload: bytes,
    *,
    record_count: int,
    first_timestamp_ms: int,
    max_timestamp_ms: int,
    compression: Compression,
    producer_id: int = NO_PRODUCER,
    base_sequence: int = NO_SEQUENCE,
    control: bool = False,
    limits: BatchLimits = DEFAULT_LIMITS,
    base_offset: int = NO_OFFSET,
    term: int = NO_TERM,
) -> bytes:
    """A whole batch around an uncompressed, already checked ``payload``: its size
    limits checked, compressed, and the header with both checksums in front (leader
    fields unset, unless given: :func:`encode_run` writes stamped batches). The one
    place every encoder (:func:`encode_batch`, the Arrow encoder in
    ``laminar_client.arrow``) turns a payload into a batch."""
    uncompressed_bytes = len(payload)
    if uncompressed_bytes > limits.payload_uncompressed_bytes_max:
        raise BatchLimitError(
            f"payload of {uncompressed_bytes} bytes exceeds payload_uncompressed_bytes_max "
            f"{limits.payload_uncompressed_bytes_max}"
        )
    if compression is Compression.ZSTD:
        payload = zstd_compress(payload)
    elif compression is not Compression.NONE:
        raise RecordFormatError(f"unknown compression {compression!r}")
    length = HEADER_BYTES + len(payload)
    if length > limits.batch_bytes_max:
        raise BatchLimitError(
            f"batch of {length} bytes exceeds batch_bytes_max {limits.batch_bytes_max}"
        )
    attributes = int(compression) | (ATTRIBUTE_CONTROL if control else 0)
    header = _pack_header(
        length=length,
        attributes=attributes,
        record_count=record_count,
        payload_uncompressed_bytes=uncompressed_bytes,
        base_offset=base_offset,
        term=term,
        first_timestamp_ms=first_timestamp_ms,
        max_timestamp_ms=max_timestamp_ms,
        producer_id=producer_id,
        base_sequence=base_sequence,
        payload_checksum=xxhash.xxh3_64_intdigest(payload),
    )
    return header + payload


ZSTD_LEVEL = 3
"""The zstd level every Laminar encoder writes (docs/format.md, section 1.3)."""


def zstd_compress(payload: bytes) -> bytes:
    """``payload`` as one zstd frame at Laminar's pinned parameters: level
    ``ZSTD_LEVEL``, the content size declared, no checksum, one thread.

    For one libzstd version (:func:`libzstd_version`) the frame is a function of the
    payload alone; keyed compaction relies on that to write the same bytes on every
    replica (docs/format.md, section 1.7).
    """
    compressor = zstandard.ZstdCompressor(
        level=ZSTD_LEVEL, write_checksum=False, write_content_size=True, threads=0
    )
    return compressor.compress(payload)


def libzstd_version() -> str:
    """The version of the libzstd that :func:`zstd_compress` runs, such as ``"1.5.7"``."""
    return ".".join(map(str, zstandard.ZSTD_VERSION))


def encode_records(
    records: Sequence[Record],
    *,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER,
    base_sequence: int = NO_SEQUENCE,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> bytes:
    """Encode :class:`Record` values (their ``offset`` is ignored) into one batch."""
    if not records:
        raise BatchLimitError("a batch holds at least one record")
    _, timestamps_ms, keys, values, headers = zip(*records, strict=True)
    return encode_batch(
        values,
        keys=keys,
        timestamps_ms=timestamps_ms,
        headers=headers,
        compression=compression,
        producer_id=producer_id,
        base_sequence=base_sequence,
        limits=limits,
    )


def encode_control_batch(kind: bytes, data: bytes, timestamp_ms: int) -> bytes:
    """A control batch of one record: ``kind`` as its key and ``data`` as its value."""
    return encode_batch([data], keys=[kind], timestamps_ms=[timestamp_ms], control=True)


def _column(items: Sequence[bytes | None], name: str) -> tuple[bytes, bytes]:
    """Length column (-1 for None) and concatenated data of a bytes column."""
    count = len(items)
    try:
        data = b"".join(items)  # type: ignore[arg-type]
        lengths = _length_column(map(len, items), count, name)  # type: ignore[arg-type]
    except TypeError:
        for item in items:
            if item is not None and not isinstance(item, bytes | bytearray | memoryview):
                raise RecordFormatError(
                    f"{name} must be bytes or None, not {type(item).__name__}"
                ) from None
        data = b"".join(item for item in items if item is not None)
        lengths = _length_column((-1 if item is None else len(item) for item in items), count, name)
    return lengths, data


def _length_column(lengths: Iterable[int], count: int, name: str) -> bytes:
    """``count`` lengths as little-endian int32s; a TypeError from ``lengths`` passes."""
    try:
        return struct.pack(f"<{count}i", *lengths)
    except struct.error:
        raise BatchLimitError(f"an item in {name} is too large") from None


def _headers_column(headers: Sequence[Sequence[Header]]) -> tuple[bytes, bytes]:
    packer = msgpack.Packer(use_bin_type=True)
    blobs: list[bytes] = []
    for record_headers in headers:
        if not record_headers:
            blobs.append(b"")
            continue
        for pair in record_headers:
            if (
                len(pair) != 2
                or not isinstance(pair[0], str)
                or not isinstance(pair[1], bytes | bytearray)
            ):
                raise RecordFormatError("headers must be (str, bytes) pairs")
        blobs.append(packer.pack([list(pair) for pair in record_headers]))
    return _little(array("I", map(len, blobs))), b"".join(blobs)


def _little(column: array[int]) -> bytes:
    if not _NATIVE_IS_LITTLE:  # pragma: no cover - big-endian hosts only
        column = array(column.typecode, column)
        column.byteswap()
    return column.tobytes()


def _from_little(typecode: str, data: memoryview) -> array[int]:
    column = array(typecode)
    column.frombytes(data)
    if not _NATIVE_IS_LITTLE:  # pragma: no cover - big-endian hosts only
        column.byteswap()
    return column


def _pack_header(
    *,
    length: int,
    attributes: int,
    record_count: int,
    payload_uncompressed_bytes: int,
    base_offset: int,
    term: int,
    first_timestamp_ms: int,
    max_timestamp_ms: int,
    producer_id: int,
    base_sequence: int,
    payload_checksum: int,
) -> bytes:
    head = HEADER_STRUCT.pack(
        length,
        MAGIC,
        attributes,
        0,
        record_count,
        payload_uncompressed_bytes,
        base_offset,
        term,
        first_timestamp_ms,
        max_timestamp_ms,
        producer_id,
        base_sequence,
        0,
        payload_checksum,
        0,
    )[:_CHECKSUMMED_HEADER_BYTES]
    return head + _CHECKSUM_STRUCT.pack(xxhash.xxh3_64_intdigest(head))


# --------------------------------------------------------------------------- headers


def parse_header(
    buffer: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> BatchHeader:
    """Parse and validate the fixed header at ``position`` in ``buffer``.

    Checks the magic, the header checksum, known attributes and every length
    against ``limits``. Does not read the payload; the buffer may hold only the
    header. Raises a :class:`RecordFormatError` subclass on any problem.
    """
    available = len(buffer) - position
    if available < HEADER_BYTES:
        raise TruncatedBatchError(
            f"need {HEADER_BYTES} header bytes, have {max(available, 0)}",
            needed_bytes=HEADER_BYTES,
            available_bytes=max(available, 0),
        )
    fields = _PARSE_STRUCT.unpack_from(buffer, position)
    (
        length,
        magic,
        attributes,
        count,
        uncompressed_bytes,
        base_offset,
        term,
        first_timestamp_ms,
        max_timestamp_ms,
        producer_id,
        base_sequence,
        _,
        stored,
    ) = fields
    if magic != MAGIC:
        raise UnsupportedMagicError(magic)
    actual = xxhash.xxh3_64_intdigest(buffer[position : position + _CHECKSUMMED_HEADER_BYTES])
    if stored != actual:
        raise ChecksumMismatchError("header", stored, actual)
    header: BatchHeader = _new_header(fields)
    # This runs on every append and read: one pass over local ints that accepts
    # every well-formed uncompressed header; anything else (compressed, control,
    # or bad) takes the full check, which raises the precise error.
    if not (
        attributes == 0
        and HEADER_BYTES < length <= limits.batch_bytes_max
        and 0 < count <= limits.record_count_max
        and uncompressed_bytes == length - HEADER_BYTES
        and uncompressed_bytes <= limits.payload_uncompressed_bytes_max
        and count * _RECORD_BYTES_MIN < uncompressed_bytes
        and first_timestamp_ms <= max_timestamp_ms
        and NO_OFFSET <= base_offset <= _INT64_MAX - count
        and term >= NO_TERM
        and (
            producer_id == base_sequence == NO_PRODUCER
            or (producer_id >= 0 and 0 <= base_sequence <= _SEQUENCE_LIMIT - count)
        )
    ):
        _check_header_fields(header, limits)
    return header


def check_produced_header(
    batch: bytes | bytearray | memoryview, *, limits: BatchLimits = DEFAULT_LIMITS
) -> BatchHeader:
    """The header of ``batch`` as a client sent it in a produce request, checked as
    the node receiving the request checks it (``docs/format.md``, section 1.6, step
    1): every header rule, then the length against the bytes sent and no control
    batch (both :class:`InvalidInputError`). The payload is checked by the leader."""
    header = parse_header(batch, limits=limits)
    if header.length != len(batch):
        raise InvalidInputError(f"batch announces {header.length} bytes but {len(batch)} were sent")
    if header.is_control:
        raise InvalidInputError("control batches are internal")
    return header


# Builds a BatchHeader from the unpacked tuple at C speed (NamedTuple._make is Python).
_new_header = partial(tuple.__new__, BatchHeader)


def stored_header(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """The header of ``batch``, a batch whose header :func:`parse_header` has already
    checked (one a log's read yielded, as keyed compaction's passes take them):
    unpacked without checking it again, a third of the cost."""
    return _new_header(_PARSE_STRUCT.unpack_from(batch, 0))


def _check_header_fields(header: BatchHeader, limits: BatchLimits) -> None:
    # Raw ints rather than the enum properties: this runs on every append and read.
    attributes = header.attributes
    length = header.length
    count = header.record_count
    uncompressed_bytes = header.payload_uncompressed_bytes
    if attributes & ~_ATTRIBUTES_KNOWN or attributes & ATTRIBUTE_CODEC_MASK > Compression.ZSTD:
        raise RecordFormatError(f"unknown attribute bits {attributes:#04x}")
    # A limit passed is a BatchLimitError; an impossible field a plain RecordFormatError.
    if length <= HEADER_BYTES:
        raise RecordFormatError(f"batch length {length} leaves no payload")
    if length > limits.batch_bytes_max:
        raise BatchLimitError(
            f"batch length {length} exceeds batch_bytes_max {limits.batch_bytes_max}"
        )
    if count < 1:
        raise RecordFormatError(f"record count {count}: a batch holds at least one record")
    if count > limits.record_count_max:
        raise BatchLimitError(
            f"record count {count} exceeds record_count_max {limits.record_count_max}"
        )
    if uncompressed_bytes > limits.payload_uncompressed_bytes_max:
        raise BatchLimitError(
            f"uncompressed payload of {uncompressed_bytes} bytes exceeds "
            f"{limits.payload_uncompressed_bytes_max}"
        )
    if count * _RECORD_BYTES_MIN + 1 > uncompressed_bytes:
        raise RecordFormatError(f"{count} records cannot fit in {uncompressed_bytes} payload bytes")
    if not attributes & ATTRIBUTE_CODEC_MASK and uncompressed_bytes != length - HEADER_BYTES:
        raise RecordFormatError("uncompressed payload size disagrees with batch length")
    if attributes & ATTRIBUTE_CONTROL and count != 1:
        raise RecordFormatError("a control batch holds exactly one record")
    if header.max_timestamp_ms < header.first_timestamp_ms:
        raise RecordFormatError("max_timestamp_ms is below first_timestamp_ms")
    base_offset = header.base_offset
    if base_offset < NO_OFFSET or header.term < NO_TERM:
        raise RecordFormatError("negative base offset or term")
    if base_offset > _INT64_MAX - count:
        raise RecordFormatError("base offset overflows")
    producer_id, base_sequence = header.producer_id, header.base_sequence
    if (producer_id == NO_PRODUCER) != (base_sequence == NO_SEQUENCE):
        raise RecordFormatError("producer_id and base_sequence are set together or not at all")
    if producer_id < NO_PRODUCER or base_sequence < NO_SEQUENCE:
        raise RecordFormatError("negative producer_id or base_sequence")
    if base_sequence > _SEQUENCE_LIMIT - count:
        raise RecordFormatError(
            f"sequences {base_sequence} + {count} records pass the last one, {_SEQUENCE_LIMIT - 1}"
        )


def peek_length(buffer: bytes | bytearray | memoryview, position: int = 0) -> int:
    """The ``length`` field of the batch at ``position``, unvalidated (for framing)."""
    if len(buffer) - position < _LENGTH_STRUCT.size:
        raise TruncatedBatchError(
            "need 4 bytes for a batch length",
            needed_bytes=_LENGTH_STRUCT.size,
            available_bytes=max(len(buffer) - position, 0),
        )
    length: int = _LENGTH_STRUCT.unpack_from(buffer, position)[0]
    return length


def next_offset(buffer: bytes | bytearray | memoryview) -> int:
    """The offset after the last batch in a buffer of whole batches (a fetch result).

    Walks the batches by their length fields and parses only the last header, so a
    consumer learns where to fetch next without decoding anything.
    """
    position = 0
    last = -1
    size = len(buffer)
    unpack_length = _LENGTH_STRUCT.unpack_from  # peek_length, inlined: once per batch
    while position + _LENGTH_STRUCT.size <= size:
        last = position
        (length,) = unpack_length(buffer, position)
        if length < HEADER_BYTES:
            raise RecordFormatError(f"batch length {length} is below the header size")
        position += length
    if position < size:  # fewer than 4 bytes left: not even a length
        peek_length(buffer, position)
    if last < 0:
        raise TruncatedBatchError(
            "no batch in an empty buffer", needed_bytes=HEADER_BYTES, available_bytes=0
        )
    if position != size:
        raise TruncatedBatchError(
            "partial batch at the end of the buffer",
            needed_bytes=position - last,
            available_bytes=size - last,
        )
    return parse_header(buffer, last).next_offset


def stamp(
    batch: bytes | bytearray | memoryview, base_offset: int, term: int
) -> tuple[bytearray, memoryview]:
    """Set the leader fields without touching the payload.

    Returns the new 80-byte header and a view of the unchanged payload, so a writer
    can hand both to ``os.writev`` without copying the payload.
    """
    if base_offset < 0 or term < 0:
        raise RecordFormatError("base offset and term must be >= 0 when stamping")
    view = memoryview(batch)
    if len(view) < HEADER_BYTES:
        raise TruncatedBatchError(
            "batch shorter than its header",
            needed_bytes=HEADER_BYTES,
            available_bytes=len(view),
        )
    head = bytearray(view[:_CHECKSUMMED_HEADER_BYTES])
    _STAMP_STRUCT.pack_into(head, _STAMP_POSITION, base_offset, term)
    head += _CHECKSUM_STRUCT.pack(xxhash.xxh3_64_intdigest(head))
    return head, view[HEADER_BYTES:]


def with_leader_fields(batch: bytes | bytearray | memoryview, base_offset: int, term: int) -> bytes:
    """A copy of ``batch`` with ``base_offset`` and ``term`` set."""
    header, payload = stamp(batch, base_offset, term)
    return b"".join((header, payload))


_PRODUCER_STRUCT = struct.Struct("<qi")  # producer_id, base_sequence at byte 48
_PRODUCER_POSITION = 48


def with_producer_fields(
    batch: bytes | bytearray | memoryview, producer_id: int, base_sequence: int
) -> bytes:
    """A copy of ``batch`` with another ``(producer_id, base_sequence)``, payload unchanged.

    The producer restamps a batch the broker proved it never wrote (an out-of-order
    answer) to start a new sequence from it; only the header checksum is recomputed.
    """
    if not (0 <= producer_id <= _INT64_MAX and 0 <= base_sequence < 2**31):
        raise RecordFormatError("producer_id or base_sequence out of range")
    view = memoryview(batch)
    if len(view) < HEADER_BYTES:
        raise TruncatedBatchError(
            "batch shorter than its header", needed_bytes=HEADER_BYTES, available_bytes=len(view)
        )
    head = bytearray(view[:_CHECKSUMMED_HEADER_BYTES])
    _PRODUCER_STRUCT.pack_into(head, _PRODUCER_POSITION, producer_id, base_sequence)
    head += _CHECKSUM_STRUCT.pack(xxhash.xxh3_64_intdigest(head))
    return b"".join((head, view[HEADER_BYTES:]))


# --------------------------------------------------------------------------- validation


def verify_batch(
    batch: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> BatchHeader:
    """Validate the whole batch at ``position``: header, length and payload checksum."""
    header = parse_header(batch, position, limits=limits)
    verify_payload(batch, position, header)
    return header


def verify_payload(
    batch: bytes | bytearray | memoryview, position: int, header: BatchHeader
) -> None:
    """Check the length and payload checksum of the batch at ``position`` whose
    header :func:`parse_header` returned as ``header`` (:func:`verify_batch`'s second
    half, for a caller that has the header already)."""
    end = position + header.length
    if len(batch) < end:
        raise TruncatedBatchError(
            f"batch announces {header.length} bytes, buffer holds {len(batch) - position}",
            needed_bytes=header.length,
            available_bytes=len(batch) - position,
        )
    actual = xxhash.xxh3_64_intdigest(memoryview(batch)[position + HEADER_BYTES : end])
    if actual != header.payload_checksum:
        raise ChecksumMismatchError("payload", header.payload_checksum, actual)


def iter_batches(
    buffer: bytes | bytearray | memoryview,
    *,
    verify: bool = True,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each whole batch in a buffer of batches.

    Raises on the first malformed batch; a partial batch at the very end raises
    :class:`TruncatedBatchError` (a fetch response never holds one).
    """
    position = 0
    size = len(buffer)
    while position < size:
        header = (
            verify_batch(buffer, position, limits=limits)
            if verify
            else parse_header(buffer, position, limits=limits)
        )
        if not verify and position + header.length > size:
            raise TruncatedBatchError(
                "partial batch at the end of the buffer",
                needed_bytes=header.length,
                available_bytes=size - position,
            )
        yield position, header
        position += header.length


# --------------------------------------------------------------------------- decoding


def decode_batch(
    batch: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify: bool = True,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> DecodedBatch:
    """Decode the batch at ``position`` into columns.

    With ``verify`` (the default) the payload checksum is checked first; pass
    ``verify=False`` only for bytes already verified (e.g. by :func:`iter_batches`).
    """
    if verify:
        header = verify_batch(batch, position, limits=limits)
    else:
        header = parse_header(batch, position, limits=limits)
    payload = _payload(batch, position, header)
    try:
        return _decode_payload(header, payload)
    except _MALFORMED_PAYLOAD_ERRORS as error:
        raise _malformed(error) from None


def check_payload(
    batch: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> None:
    """Check that the payload of ``batch`` decodes, without decoding it.

    ``header`` is ``batch``'s header, already parsed and its payload checksum
    verified (:func:`verify_batch`); ``batch`` starts with it. Raises a
    :class:`RecordFormatError` subclass exactly when :func:`decode_batch` would, so a
    leader that runs this on receipt never stores a batch that consumers cannot read.
    ``limits`` is checked against ``header`` again, as :func:`decode_batch` would.

    The columns cost a few C-level passes each (no object per record), with numpy
    for a batch of at least ``VECTORIZE_RECORDS_MIN`` records without record headers
    (27 -> 7.7 us for 1,000 records). Header blobs, when the batch has any, are
    unpacked one by one. A compressed payload is decompressed, into at most
    ``header.payload_uncompressed_bytes``.
    """
    _check_header_fields(header, limits)
    payload = _payload(batch, 0, header)
    try:
        if header.record_count >= VECTORIZE_RECORDS_MIN and not payload[0] & _FLAG_HEADERS:
            _check_columns_vectorized(header, payload)
            return
        columns = _read_columns(header, payload)
        if columns.header_lengths is not None:
            blobs, _ = _split(columns.data, columns.headers_start, columns.header_lengths, 0)
            for blob in blobs:
                _unpack_headers(blob)
    except _MALFORMED_PAYLOAD_ERRORS as error:
        raise _malformed(error) from None


class ColumnView(NamedTuple):
    """A batch's payload cut into its raw little-endian columns (no object per record).

    What an Arrow builder needs: ``timestamps`` (int64 ms), ``value_lengths`` and
    ``key_lengths`` (int32, -1 = null; ``key_lengths`` None when every key is null),
    ``header_lengths`` (uint32, None without headers), and ``data``, which holds every
    key, then every value, then every header blob, each column's items back to back:
    values start at ``values_start``, header blobs at ``headers_start``.
    """

    header: BatchHeader
    timestamps: memoryview
    value_lengths: memoryview
    key_lengths: memoryview | None
    header_lengths: memoryview | None
    data: memoryview
    values_start: int
    headers_start: int


def column_view(
    batch: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    verify: bool = True,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> ColumnView:
    """The batch at ``position`` as raw columns, checked as :func:`decode_batch`
    checks them (header blobs are not unpacked)."""
    header = (
        verify_batch(batch, position, limits=limits)
        if verify
        else parse_header(batch, position, limits=limits)
    )
    payload = _payload(batch, position, header)
    try:
        columns = _read_columns(header, payload)
    except _MALFORMED_PAYLOAD_ERRORS as error:
        raise _malformed(error) from None
    layout = _ColumnLayout.of(header.record_count, payload)
    value_bytes = sum(columns.value_lengths) + columns.value_null_count  # -1 per null
    return _cut_columns(
        header, payload, layout, columns.headers_start - value_bytes, columns.headers_start
    )


def stored_column_view(batch: bytes | bytearray | memoryview, header: BatchHeader) -> ColumnView:
    """:func:`column_view` of a stored batch whose header :func:`parse_header`
    returned as ``header``: its columns cut without the checks (a stored batch's
    payload was checked on receipt, as :func:`key_column` relies on too), at about a
    third of the cost. Keyed compaction's rewrite cuts every batch it trims so."""
    payload = _payload(batch, 0, header)
    layout = _ColumnLayout.of(header.record_count, payload)
    key_bytes = 0
    if layout.flags & _FLAG_KEYS:
        key_lengths = _from_little("i", payload[layout.value_lengths_end : layout.key_lengths_end])
        key_bytes = sum(key_lengths) + key_lengths.count(-1)  # each -1 counted back
    value_lengths = _from_little("i", payload[layout.timestamps_end : layout.value_lengths_end])
    value_bytes = sum(value_lengths) + value_lengths.count(-1)
    return _cut_columns(header, payload, layout, key_bytes, key_bytes + value_bytes)


def _cut_columns(
    header: BatchHeader,
    payload: memoryview,
    layout: _ColumnLayout,
    values_start: int,
    headers_start: int,
) -> ColumnView:
    """The :class:`ColumnView` of ``payload``, laid out as ``layout``, whose values
    and header blobs start at ``values_start`` and ``headers_start`` of its data."""
    return ColumnView(
        header,
        payload[1 : layout.timestamps_end],
        payload[layout.timestamps_end : layout.value_lengths_end],
        payload[layout.value_lengths_end : layout.key_lengths_end]
        if layout.flags & _FLAG_KEYS
        else None,
        payload[layout.key_lengths_end : layout.data_start]
        if layout.flags & _FLAG_HEADERS
        else None,
        payload[layout.data_start :],
        values_start,
        headers_start,
    )


def encode_run(
    view: ColumnView,
    start: int,
    stop: int,
    *,
    compression: Compression,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> bytes:
    """The records ``[start, stop)`` (indexes) of the stamped batch ``view`` as one
    stamped batch, in the canonical encoding (docs/format.md, section 1.2).

    Its ``base_offset`` is the first record's offset, its ``term`` and
    ``producer_id`` the batch's, and its ``base_sequence`` the first record's
    sequence (or -1). The result is a function of those records and fields alone,
    not of how ``view``'s batch encoded them: a key column only when a key in the
    run is not null, a header column only when a record in the run has headers,
    header blobs re-packed canonically, and zstd at the pinned parameters
    (:func:`zstd_compress`). So re-encoding a run of a run gives the bytes that
    re-encoding it from the original batch gives (keyed compaction relies on it,
    docs/format.md, section 1.7).
    """
    return next(encode_runs(view, ((start, stop),), compression=compression, limits=limits))


def encode_runs(
    view: ColumnView,
    runs: Iterable[tuple[int, int]],
    *,
    compression: Compression,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> Iterator[bytes]:
    """:func:`encode_run` of each run ``(start, stop)`` of ``runs``, in turn: the
    batch's columns are read once for all its runs (keyed compaction re-encodes a
    few thousand runs of one or two records per segment, where reading the columns
    again per run cost as much as encoding it).

    The columns are cut with C-level array calls (no object per record), except the
    header blobs, which are unpacked and re-packed one by one.
    """
    header = view.header
    if header.is_control or header.base_offset == NO_OFFSET or header.term == NO_TERM:
        raise InvalidInputError("only a stamped batch of records has runs to re-encode")
    count = header.record_count
    timestamps = _from_little("q", view.timestamps)
    value_bounds = _item_bounds(_from_little("i", view.value_lengths), view.values_start)
    key_lengths_column = view.key_lengths
    key_lengths: array[int] | None = None
    key_bounds: list[int] = []
    if key_lengths_column is not None:
        key_lengths = _from_little("i", key_lengths_column)
        key_bounds = _item_bounds(key_lengths, 0)
        if -1 not in key_lengths:
            key_lengths = None  # every run has a key column: nothing to check per run
    header_lengths: array[int] | None = None
    header_bounds: list[int] = []
    if view.header_lengths is not None:
        header_lengths = _from_little("I", view.header_lengths)
        header_bounds = _item_bounds(header_lengths, view.headers_start)
    data = view.data
    for start, stop in runs:
        if not 0 <= start < stop <= count:
            raise InvalidInputError(
                f"records [{start}, {stop}) are not a run of the batch's {count}"
            )
        flags = 0
        length_columns: list[bytes | memoryview] = [view.value_lengths[4 * start : 4 * stop]]
        key_data: memoryview | bytes = b""
        if key_lengths_column is not None and (
            key_lengths is None or max(key_lengths[start:stop]) >= 0
        ):
            flags |= _FLAG_KEYS
            length_columns.append(key_lengths_column[4 * start : 4 * stop])
            key_data = data[key_bounds[start] : key_bounds[stop]]
        header_data = b""
        if header_lengths is not None:
            decoded: list[tuple[Header, ...]] = []
            try:
                for index in range(start, stop):
                    decoded.append(
                        _unpack_headers(data[header_bounds[index] : header_bounds[index + 1]])
                    )
            except _MALFORMED_PAYLOAD_ERRORS as error:
                raise _malformed(error) from None
            if any(decoded):
                flags |= _FLAG_HEADERS
                header_column, header_data = _headers_column(decoded)
                length_columns.append(header_column)
        payload = b"".join(
            (
                _FLAG_BYTES[flags],
                view.timestamps[8 * start : 8 * stop],  # little-endian as stored
                *length_columns,
                key_data,
                data[value_bounds[start] : value_bounds[stop]],
                header_data,
            )
        )
        base_sequence = header.base_sequence
        yield seal_payload(
            payload,
            record_count=stop - start,
            first_timestamp_ms=timestamps[start],
            max_timestamp_ms=max(timestamps[start:stop]),
            compression=compression,
            producer_id=header.producer_id,
            base_sequence=base_sequence if base_sequence == NO_SEQUENCE else base_sequence + start,
            limits=limits,
            base_offset=header.base_offset + start,
            term=header.term,
        )


def has_null_key(batch: bytes | bytearray | memoryview) -> bool:
    """Whether a record of ``batch`` has no key (a -1 key length, or no key column:
    every key null)."""
    lengths = column_view(batch).key_lengths
    return lengths is None or -1 in _from_little("i", lengths)


def _item_bounds(lengths: array[int], origin: int) -> list[int]:
    """Where each item of a length column (-1: null, no bytes) begins in the data,
    whose column begins at ``origin``, then where the last one ends: ``len(lengths)
    + 1`` positions, summed at C level."""
    if -1 in lengths:
        return list(accumulate((length if length > 0 else 0 for length in lengths), initial=origin))
    return list(accumulate(lengths, initial=origin))


def key_column(
    batch: bytes | bytearray | memoryview, header: BatchHeader
) -> tuple[memoryview, memoryview] | None:
    """The key lengths (little-endian int32, -1 for null) of the batch ``batch``
    whose header :func:`parse_header` returned as ``header``, and its payload's data
    (every key back to back, then the values and header blobs); None when the batch
    has no key column (every key null).

    What keyed compaction reads of every batch, without an object per record or
    the payload checks of :func:`column_view`: for stored batches, which were
    checked on receipt. A compressed payload is decompressed (into at most
    ``header.payload_uncompressed_bytes``). Raises :class:`RecordFormatError` when
    the columns do not fit the payload.
    """
    payload = _payload(batch, 0, header)
    layout = _ColumnLayout.of(header.record_count, payload)
    if not layout.flags & _FLAG_KEYS:
        return None
    return (
        payload[layout.value_lengths_end : layout.key_lengths_end],
        payload[layout.data_start :],
    )


_KEYS_HEADER_STRUCT = struct.Struct("<IxBxxi4xq")  # length, attributes, record_count, base


def stored_key_column(
    batch: bytes | bytearray | memoryview,
) -> tuple[int, int, int, memoryview, memoryview] | None:
    """``(base_offset, record_count, length, key lengths, data)`` of a stored batch
    (one a log's read yielded: its header and payload were checked when stored),
    the columns as :func:`key_column` cuts them; None for a control batch or one
    without a key column.

    Keyed compaction's first pass takes this of every batch: an uncompressed one
    (the common case) is cut here from four header fields, in a third of the time
    of :func:`stored_header` and :func:`key_column` (about 0.4 us against 1.3, 0.015 s
    per GiB of 64 KiB batches). The payload layout is :class:`_ColumnLayout`'s.
    """
    length, attributes, count, base_offset = _KEYS_HEADER_STRUCT.unpack_from(batch, 0)
    if attributes & ATTRIBUTE_CONTROL:
        return None
    if attributes & ATTRIBUTE_CODEC_MASK:  # compressed: key_column decompresses it
        columns = key_column(batch, stored_header(batch))
        return None if columns is None else (base_offset, count, length, *columns)
    if len(batch) < length:
        raise TruncatedBatchError(
            "batch longer than the buffer", needed_bytes=length, available_bytes=len(batch)
        )
    payload = memoryview(batch)[HEADER_BYTES:length]
    flags = payload[0]
    if flags & ~(_FLAG_KEYS | _FLAG_HEADERS):
        raise RecordFormatError(f"unknown payload flags {flags:#04x}")
    if not flags & _FLAG_KEYS:
        return None
    key_lengths_start = 1 + 12 * count  # after the flags, timestamps and value lengths
    key_lengths_end = key_lengths_start + 4 * count
    data_start = key_lengths_end + (4 * count if flags & _FLAG_HEADERS else 0)
    if data_start > len(payload):
        raise RecordFormatError("payload too short for its length columns")
    return (
        base_offset,
        count,
        length,
        payload[key_lengths_start:key_lengths_end],
        payload[data_start:],
    )


def decode_records(
    batch: bytes | bytearray | memoryview,
    *,
    verify: bool = True,
    limits: BatchLimits = DEFAULT_LIMITS,
) -> list[Record]:
    """Decode one batch into :class:`Record` tuples."""
    return decode_batch(batch, verify=verify, limits=limits).records()


VECTORIZE_RECORDS_MIN = 64
"""Below this many records the pure-Python column reader is faster: numpy's
per-call overhead (some 4 us per reduction) outweighs its per-record gain."""


@cache
def _numpy() -> ModuleType:
    """numpy, imported on first use (the client and CLI import this module too)."""
    import numpy

    return numpy


def _check_columns_vectorized(header: BatchHeader, payload: memoryview) -> None:
    """What :func:`_read_columns` checks, for a payload without record headers, with
    numpy's C loops instead of Python ints (the timestamps' max alone costs 15 us
    per 1,000 records as Python ints, 1.5 us here)."""
    np = _numpy()
    count = header.record_count
    layout = _ColumnLayout.of(count, payload)
    timestamps = np.frombuffer(payload, "<i8", count, 1)
    if int(timestamps[0]) != header.first_timestamp_ms or (
        int(timestamps.max()) != header.max_timestamp_ms
    ):
        raise RecordFormatError("record timestamps disagree with the header")
    data_bytes = _column_bytes(np, payload, layout.timestamps_end, count)
    if layout.flags & _FLAG_KEYS:
        data_bytes += _column_bytes(np, payload, layout.value_lengths_end, count)
    if data_bytes != len(payload) - layout.data_start:
        raise RecordFormatError("payload length columns disagree with its data")


def _column_bytes(np: ModuleType, payload: memoryview, position: int, count: int) -> int:
    """The data bytes a signed length column names; only -1 (null) may be negative."""
    lengths = np.frombuffer(payload, "<i4", count, position)
    total = int(lengths.sum(dtype=np.int64))
    smallest = int(lengths.min())
    if smallest < 0:
        nulls = int(np.count_nonzero(lengths == -1))
        if nulls != int(np.count_nonzero(lengths < 0)):
            raise RecordFormatError(f"negative length {smallest}")
        total += nulls
    return total


# What malformed columns raise from the decoding helpers (RecordFormatError is a
# ValueError): a payload whose checksum matches but whose columns are inconsistent
# was built by a buggy or hostile producer.
_MALFORMED_PAYLOAD_ERRORS = (ValueError, IndexError, TypeError, msgpack.UnpackException)


def _malformed(error: Exception) -> RecordFormatError:
    # Some msgpack errors carry no text (a reserved byte such as 0xc1): name the class.
    return RecordFormatError(f"malformed payload: {error or type(error).__name__}")


def _payload(
    batch: bytes | bytearray | memoryview, position: int, header: BatchHeader
) -> memoryview:
    """The payload of the batch at ``position``, decompressed."""
    if len(batch) - position < header.length:
        raise TruncatedBatchError(
            "batch longer than the buffer",
            needed_bytes=header.length,
            available_bytes=len(batch) - position,
        )
    stored = memoryview(batch)[position + HEADER_BYTES : position + header.length]
    return _decompress(header, stored)


def _decompress(header: BatchHeader, stored: memoryview) -> memoryview:
    if header.compression is Compression.NONE:
        return stored
    expected_bytes = header.payload_uncompressed_bytes
    try:
        # decompress() allocates the content size the frame declares and ignores
        # max_output_size when there is one, so a frame that declares more than the
        # header (a zstd bomb) is refused before anything is allocated.
        declared_bytes = zstandard.frame_content_size(stored)
        if declared_bytes not in (expected_bytes, _ZSTD_CONTENT_SIZE_UNKNOWN):
            raise RecordFormatError("compressed frame size disagrees with the header")
        # One frame and nothing after it: zstandard would ignore what follows, while
        # other decoders read on into further frames (docs/format.md).
        if _zstd_frame_bytes(stored) != len(stored):
            raise RecordFormatError("bytes after the zstd frame")
        data = zstandard.ZstdDecompressor().decompress(stored, max_output_size=expected_bytes)
    except zstandard.ZstdError as error:
        raise RecordFormatError(f"cannot decompress payload: {error}") from None
    if len(data) != expected_bytes:
        raise RecordFormatError("decompressed payload size disagrees with the header")
    return memoryview(data)


_ZSTD_CONTENT_SIZE_UNKNOWN = -1
_ZSTD_BLOCK_HEADER_BYTES = 3
_ZSTD_BLOCK_RLE = 1
_ZSTD_BLOCK_RESERVED = 3
_ZSTD_CHECKSUM_BYTES = 4


def _zstd_frame_bytes(stored: memoryview) -> int:
    """The length of the zstd frame at the start of ``stored``, from its block headers
    (RFC 8878, section 3.1.1); a ZstdError when it is not a whole frame.

    A walk over 3-byte block headers (at least one per 128 KiB of content): cheap
    beside the decompression it precedes.
    """
    position = zstandard.frame_header_size(stored)  # checks the magic number
    checksum = stored[4] & 0x04  # Frame_Header_Descriptor: Content_Checksum_flag
    while True:
        if position + _ZSTD_BLOCK_HEADER_BYTES > len(stored):
            raise zstandard.ZstdError("truncated zstd frame")
        block = int.from_bytes(stored[position : position + _ZSTD_BLOCK_HEADER_BYTES], "little")
        kind = (block >> 1) & 0x03
        if kind == _ZSTD_BLOCK_RESERVED:
            raise zstandard.ZstdError("reserved zstd block type")
        position += _ZSTD_BLOCK_HEADER_BYTES + (1 if kind == _ZSTD_BLOCK_RLE else block >> 3)
        if block & 0x01:  # Last_Block
            break
    position += _ZSTD_CHECKSUM_BYTES if checksum else 0
    if position > len(stored):
        raise zstandard.ZstdError("truncated zstd frame")
    return position


class _Columns(NamedTuple):
    """A payload cut into its columns, which :func:`_read_columns` checked fit."""

    timestamps_ms: list[int]
    key_lengths: array[int] | None  # None: no keys column, every key is null
    value_lengths: array[int]
    header_lengths: array[int] | None  # None: no headers column
    key_null_count: int
    value_null_count: int
    data: memoryview  # every key, value and header blob, concatenated
    headers_start: int  # where the header blobs start in ``data``


class _ColumnLayout(NamedTuple):
    """Where each column of a payload ends (see the module docstring's layout)."""

    flags: int
    timestamps_end: int
    value_lengths_end: int
    key_lengths_end: int
    data_start: int  # where the header lengths end and the keys, values, blobs start

    @classmethod
    def of(cls, count: int, payload: memoryview) -> _ColumnLayout:
        """The layout of ``payload``'s ``count`` records; RecordFormatError when its
        flags are unknown or its length columns do not fit."""
        flags = payload[0]
        if flags & ~(_FLAG_KEYS | _FLAG_HEADERS):
            raise RecordFormatError(f"unknown payload flags {flags:#04x}")
        timestamps_end = 1 + 8 * count
        value_lengths_end = timestamps_end + 4 * count
        key_lengths_end = value_lengths_end + (4 * count if flags & _FLAG_KEYS else 0)
        data_start = key_lengths_end + (4 * count if flags & _FLAG_HEADERS else 0)
        if data_start > len(payload):
            raise RecordFormatError("payload too short for its length columns")
        return _new_layout((flags, timestamps_end, value_lengths_end, key_lengths_end, data_start))


_new_layout = partial(tuple.__new__, _ColumnLayout)  # without NamedTuple's keyword handling


def _read_columns(header: BatchHeader, payload: memoryview) -> _Columns:
    """Cut ``payload`` into columns; check them against each other and the header.

    Checks all that decoding relies on except the header blobs' msgpack, at C level.
    """
    count = header.record_count
    flags, timestamps_end, value_lengths_end, key_lengths_end, data_start = _ColumnLayout.of(
        count, payload
    )

    # A list rather than the array: decoding returns one, and max() over a list is
    # cheaper than over an array, which makes an int per item.
    timestamps_ms = _from_little("q", payload[1:timestamps_end]).tolist()
    if timestamps_ms[0] != header.first_timestamp_ms or (
        max(timestamps_ms) != header.max_timestamp_ms
    ):
        raise RecordFormatError("record timestamps disagree with the header")
    value_lengths, value_bytes, value_null_count = _read_length_column(
        payload[timestamps_end:value_lengths_end]
    )
    key_lengths = header_lengths = None
    key_bytes, key_null_count = 0, count
    if flags & _FLAG_KEYS:
        key_lengths, key_bytes, key_null_count = _read_length_column(
            payload[value_lengths_end:key_lengths_end]
        )
    headers_start = key_bytes + value_bytes
    header_bytes = 0
    if flags & _FLAG_HEADERS:
        header_lengths = _from_little("I", payload[key_lengths_end:data_start])
        header_bytes = sum(header_lengths)
    data = payload[data_start:]
    if headers_start + header_bytes != len(data):
        raise RecordFormatError("payload length columns disagree with its data")
    return _Columns(
        timestamps_ms,
        key_lengths,
        value_lengths,
        header_lengths,
        key_null_count,
        value_null_count,
        data,
        headers_start,
    )


def _read_length_column(column: memoryview) -> tuple[array[int], int, int]:
    """A signed length column, the data bytes it names and its nulls (lengths of -1).

    Two C-level sums rather than ``min()``, which costs twice a sum: each negative
    length adds 2**32 more to the column's sum read as unsigned than read as signed.
    """
    lengths = _from_little("i", column)
    signed_sum = sum(lengths)
    negative_count = (sum(_from_little("I", column)) - signed_sum) >> 32
    if negative_count and lengths.count(-1) != negative_count:
        raise RecordFormatError(f"negative length {min(lengths)}")
    return lengths, signed_sum + negative_count, negative_count


def _decode_payload(header: BatchHeader, payload: memoryview) -> DecodedBatch:
    columns = _read_columns(header, payload)
    data = bytes(columns.data)
    keys: list[bytes | None]
    if columns.key_lengths is None:
        keys = [None] * header.record_count
        cursor = 0
    else:
        keys, cursor = _split(data, 0, columns.key_lengths, columns.key_null_count)
    values, cursor = _split(data, cursor, columns.value_lengths, columns.value_null_count)
    assert cursor == columns.headers_start
    headers: list[tuple[Header, ...]]
    if columns.header_lengths is None:
        headers = [()] * header.record_count
    else:
        blobs, cursor = _split(data, cursor, columns.header_lengths, 0)
        headers = [_unpack_headers(blob) for blob in blobs]
    assert cursor == len(data)
    return DecodedBatch(header, columns.timestamps_ms, keys, values, headers)


_Buffer = TypeVar("_Buffer", bytes, memoryview)


def _split(
    data: _Buffer, start: int, lengths: array[int], null_count: int
) -> tuple[list[_Buffer | None], int]:
    """Cut ``data`` at ``lengths`` (-1 = None) from ``start``: ``(items, end)``.

    The lengths were checked to fit ``data`` by :func:`_read_columns`.
    """
    if not null_count:
        bounds = list(accumulate(lengths, initial=start))
        return [data[a:b] for a, b in pairwise(bounds)], bounds[-1]
    items: list[_Buffer | None] = []
    cursor = start
    for length in lengths:
        if length < 0:
            items.append(None)
            continue
        items.append(data[cursor : cursor + length])
        cursor += length
    return items, cursor


def unpack_headers(blob: bytes | memoryview | None) -> tuple[Header, ...]:
    """One record's header blob (msgpack of ``[[str, bin], ...]``) as pairs."""
    try:
        return _unpack_headers(blob)
    except _MALFORMED_PAYLOAD_ERRORS as error:
        raise _malformed(error) from None


def _unpack_headers(blob: bytes | memoryview | None) -> tuple[Header, ...]:
    if not blob:
        return ()
    pairs = msgpack.unpackb(blob, use_list=False, raw=False, max_bin_len=len(blob))
    if not isinstance(pairs, tuple):
        raise RecordFormatError("record headers are not a list")
    for pair in pairs:
        if (
            not isinstance(pair, tuple)
            or len(pair) != 2
            or not isinstance(pair[0], str)
            or not isinstance(pair[1], bytes)
        ):
            raise RecordFormatError("record headers must be (str, bytes) pairs")
    return pairs
