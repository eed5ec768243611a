"""Unit and property tests of the record-batch codec."""

from __future__ import annotations

import random
import struct
import tracemalloc
from collections.abc import Callable, Iterator

import msgpack
import pytest
import xxhash
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar import records
from laminar.errors import (
    BatchLimitError,
    ChecksumMismatchError,
    RecordFormatError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from laminar.records import (
    HEADER_BYTES,
    BatchLimits,
    Compression,
    Record,
    check_payload,
    column_view,
    decode_batch,
    decode_records,
    encode_batch,
    encode_control_batch,
    encode_records,
    iter_batches,
    next_offset,
    parse_header,
    stamp,
    verify_batch,
    with_leader_fields,
)
from tests.batches import with_payload, with_stored


def _records(count: int) -> list[Record]:
    return [
        Record(
            -1,
            1_700_000_000_000 + (index * 7) % 13,
            None if index % 3 == 0 else f"key-{index}".encode(),
            None if index % 5 == 4 else bytes([index % 256]) * (index % 17),
            () if index % 2 else (("trace", b"t%d" % index), ("n", b"")),
        )
        for index in range(count)
    ]


@pytest.fixture(scope="module", autouse=True, params=["numpy", "python"])
def column_checks(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test twice: check_payload's numpy column checks for every batch, and
    its pure-Python reader for every batch (both must refuse exactly what decode
    refuses)."""
    saved = records.VECTORIZE_RECORDS_MIN
    records.VECTORIZE_RECORDS_MIN = 1 if request.param == "numpy" else 2**31
    try:
        yield str(request.param)
    finally:
        records.VECTORIZE_RECORDS_MIN = saved


@pytest.mark.parametrize("compression", list(Compression))
def test_round_trip_keeps_every_field(compression: Compression) -> None:
    original = _records(50)
    batch = encode_records(original, compression=compression, producer_id=7, base_sequence=3)
    header = parse_header(batch)
    assert header.record_count == 50
    assert header.compression is compression
    assert header.producer_id == 7 and header.base_sequence == 3
    assert header.base_offset == records.NO_OFFSET and header.term == records.NO_TERM
    assert header.first_timestamp_ms == original[0].timestamp_ms
    assert header.max_timestamp_ms == max(r.timestamp_ms for r in original)
    decoded = decode_records(batch)
    assert [r._replace(offset=-1) for r in decoded] == original


def test_header_layout_is_pinned() -> None:
    """The documented byte layout: a reimplementation elsewhere relies on it."""
    batch = encode_batch([b"hello"], keys=[b"k"], timestamps_ms=[1000])
    stamped = with_leader_fields(batch, base_offset=42, term=9)
    length, magic, attributes = struct.unpack_from("<IBB", stamped, 0)
    assert (length, magic, attributes) == (len(stamped), 1, 0)
    assert struct.unpack_from("<i", stamped, 8)[0] == 1  # record_count
    assert struct.unpack_from("<qq", stamped, 16) == (42, 9)
    assert struct.unpack_from("<qq", stamped, 32) == (1000, 1000)
    assert struct.unpack_from("<qi", stamped, 48) == (-1, -1)
    payload_checksum, header_checksum = struct.unpack_from("<QQ", stamped, 64)
    assert payload_checksum == xxhash.xxh3_64_intdigest(stamped[HEADER_BYTES:])
    assert header_checksum == xxhash.xxh3_64_intdigest(stamped[:72])


def test_stamp_changes_only_leader_fields_and_header_checksum() -> None:
    batch = encode_batch([b"a", b"b"], timestamps_ms=5)
    head, payload = stamp(batch, 100, 3)
    assert bytes(payload) == batch[HEADER_BYTES:]
    stamped = head + payload
    header = verify_batch(stamped)
    assert (header.base_offset, header.term, header.last_offset) == (100, 3, 101)
    # Every byte outside the stamped fields and the header checksum is unchanged.
    assert stamped[:16] == batch[:16] and stamped[32:72] == batch[32:72]
    assert [r.offset for r in decode_records(stamped)] == [100, 101]


def test_columns_decode_without_building_records() -> None:
    batch = encode_batch([b"x", None, b"zz"], keys=[None, b"k", None], timestamps_ms=[3, 1, 2])
    decoded = decode_batch(batch)
    assert decoded.values == [b"x", None, b"zz"]
    assert decoded.keys == [None, b"k", None]
    assert decoded.timestamps_ms == [3, 1, 2]
    assert len(decoded) == 3


def test_control_batch_holds_one_record_and_is_flagged() -> None:
    batch = encode_control_batch(b"noop", b"", timestamp_ms=10)
    header = parse_header(batch)
    assert header.is_control and header.record_count == 1
    assert decode_records(batch)[0].key == b"noop"
    with pytest.raises(BatchLimitError):
        encode_batch([b"a", b"b"], control=True)


def test_compression_shrinks_repetitive_payloads() -> None:
    values = [b"the same hundred bytes " * 4] * 1000
    plain = encode_batch(values)
    packed = encode_batch(values, compression=Compression.ZSTD)
    assert len(packed) < len(plain) // 10
    assert decode_batch(packed).values == values


def test_iter_batches_walks_a_buffer_of_batches() -> None:
    batches = [with_leader_fields(encode_batch([b"v"] * n), 10 * n, 1) for n in (1, 2, 3)]
    buffer = b"".join(batches)
    positions = [position for position, _ in iter_batches(buffer)]
    assert positions == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(buffer[:-1]))


# ----------------------------------------------------------------------------- errors


def test_truncated_buffers_raise_truncated_batch_error() -> None:
    batch = encode_batch([b"value"] * 3)
    for cut in (0, 1, HEADER_BYTES - 1, HEADER_BYTES, len(batch) - 1):
        with pytest.raises(TruncatedBatchError):
            verify_batch(batch[:cut])
        with pytest.raises(TruncatedBatchError):
            decode_batch(batch[:cut])


def test_wrong_magic_is_unsupported() -> None:
    batch = bytearray(encode_batch([b"value"]))
    batch[4] = 99
    with pytest.raises(UnsupportedMagicError) as info:
        parse_header(batch)
    assert info.value.magic == 99


def test_payload_corruption_is_a_checksum_mismatch() -> None:
    batch = bytearray(encode_batch([b"value"] * 3))
    batch[-1] ^= 0x40
    parse_header(batch)  # the header alone is intact
    with pytest.raises(ChecksumMismatchError) as info:
        decode_batch(batch)
    assert info.value.which == "payload"


def test_header_corruption_is_a_checksum_mismatch() -> None:
    batch = bytearray(with_leader_fields(encode_batch([b"value"]), 5, 1))
    batch[17] ^= 0x01  # inside base_offset
    with pytest.raises(ChecksumMismatchError) as info:
        parse_header(batch)
    assert info.value.which == "header"


def test_every_single_bit_flip_is_detected() -> None:
    batch = with_leader_fields(encode_batch([b"ab", b"cd"], keys=[b"k", None]), 7, 2)
    for bit in range(len(batch) * 8):
        damaged = bytearray(batch)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(RecordFormatError):
            decode_batch(damaged)


def test_limits_reject_absurd_sizes() -> None:
    limits = BatchLimits(batch_bytes_max=1024, record_count_max=10)
    with pytest.raises(BatchLimitError):
        encode_batch([b"x"] * 11, limits=limits)
    with pytest.raises(BatchLimitError):
        encode_batch([b"x" * 2000], limits=limits)
    with pytest.raises(BatchLimitError):
        encode_batch([])
    big = encode_batch([b"x" * 2000])
    with pytest.raises(BatchLimitError):
        parse_header(big, limits=limits)
    with pytest.raises(BatchLimitError):
        BatchLimits(batch_bytes_max=10)


def test_forged_header_with_absurd_record_count_is_rejected() -> None:
    """A header whose checksum is right but whose counts are impossible."""
    batch = bytearray(encode_batch([b"x"]))
    struct.pack_into("<i", batch, 8, 5_000)
    struct.pack_into("<Q", batch, 72, xxhash.xxh3_64_intdigest(bytes(batch[:72])))
    with pytest.raises(RecordFormatError, match="cannot fit") as refused:
        parse_header(batch)
    assert not isinstance(refused.value, BatchLimitError)  # impossible, not too large
    struct.pack_into("<i", batch, 8, 2_000_000)
    struct.pack_into("<Q", batch, 72, xxhash.xxh3_64_intdigest(bytes(batch[:72])))
    with pytest.raises(BatchLimitError, match="record_count_max"):
        parse_header(batch)


def _with_producer(batch: bytes, producer_id: int, base_sequence: int) -> bytearray:
    """``batch`` with any producer fields, its header checksum made right again."""
    forged = bytearray(batch)
    struct.pack_into("<qi", forged, 48, producer_id, base_sequence)
    struct.pack_into("<Q", forged, 72, xxhash.xxh3_64_intdigest(bytes(forged[:72])))
    return forged


@pytest.mark.parametrize(
    ("producer_id", "base_sequence", "reason"),
    [
        (7, -1, "set together"),
        (-1, 0, "set together"),
        (-2, -1, "set together"),
        (-5, 3, "negative producer_id"),
        (7, -3, "negative"),
        (7, 2**31 - 2, "pass the last one"),
    ],
)
def test_producer_fields_out_of_rule_are_refused(
    producer_id: int, base_sequence: int, reason: str
) -> None:
    """docs/format.md: producer_id and base_sequence are both -1 or both >= 0, and a
    batch's last sequence is at most 2**31 - 1."""
    batch = _with_producer(encode_batch([b"a", b"b", b"c"]), producer_id, base_sequence)
    with pytest.raises(RecordFormatError, match=reason):
        parse_header(batch)
    with pytest.raises(RecordFormatError, match="pass the last one"):
        encode_batch([b"a", b"b"], producer_id=1, base_sequence=2**31 - 1)
    last = encode_batch([b"a", b"b", b"c"], producer_id=1, base_sequence=2**31 - 3)
    assert parse_header(last).base_sequence == 2**31 - 3


def test_bad_record_types_get_a_clear_error() -> None:
    with pytest.raises(RecordFormatError, match="bytes or None"):
        encode_batch(["text"])  # type: ignore[list-item]
    with pytest.raises(RecordFormatError):
        encode_batch([b"a"], keys=[b"k", b"extra"])
    with pytest.raises(RecordFormatError):
        encode_batch([b"a"], headers=[[("k", "not bytes")]])  # type: ignore[list-item]
    with pytest.raises(RecordFormatError):
        encode_batch([b"a"], producer_id=3)  # sequence missing
    with pytest.raises(RecordFormatError):
        stamp(encode_batch([b"a"]), -5, 1)
    for timestamps in ([1.5], ["1"], [2**63], [None]):
        with pytest.raises(RecordFormatError, match="64-bit integers"):
            encode_batch([b"a"], timestamps_ms=timestamps)  # type: ignore[arg-type]
    with pytest.raises(RecordFormatError, match="64-bit integers"):
        encode_batch([b"a", b"b"], timestamps_ms=-(2**63) - 1)


def test_timestamps_as_one_int_or_one_per_record() -> None:
    shared = decode_batch(encode_batch([b"a", b"b"], timestamps_ms=-7))
    assert shared.timestamps_ms == [-7, -7]
    assert (shared.header.first_timestamp_ms, shared.header.max_timestamp_ms) == (-7, -7)
    each = decode_batch(encode_batch([b"a", b"b", b"c"], timestamps_ms=(5, 9, 2**63 - 1)))
    assert each.timestamps_ms == [5, 9, 2**63 - 1]
    assert (each.header.first_timestamp_ms, each.header.max_timestamp_ms) == (5, 2**63 - 1)


def test_zstd_bomb_is_bounded_by_the_header() -> None:
    """A compressed payload that expands past its declared size is refused."""
    batch = bytearray(encode_batch([b"a" * 10_000], compression=Compression.ZSTD))
    struct.pack_into("<I", batch, 12, 200)  # claim a tiny uncompressed size
    struct.pack_into("<Q", batch, 72, xxhash.xxh3_64_intdigest(bytes(batch[:72])))
    with pytest.raises(RecordFormatError):
        decode_batch(batch)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_garbage_never_escapes_as_anything_but_record_format_error(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_batch(data)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_random_damage_of_a_valid_batch_is_detected_or_harmless(data: st.DataObject) -> None:
    batch = bytearray(encode_records(_records(8), compression=Compression.ZSTD))
    position = data.draw(st.integers(0, len(batch) - 1))
    value = data.draw(st.integers(0, 255))
    if batch[position] == value:
        return
    batch[position] = value
    with pytest.raises(RecordFormatError):
        decode_batch(batch)


record_strategy = st.builds(
    Record,
    st.just(-1),
    st.integers(-(2**40), 2**40),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=50),
    st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=30), st.sampled_from(list(Compression)))
def test_round_trip_property(original: list[Record], compression: Compression) -> None:
    batch = encode_records(original, compression=compression)
    assert decode_records(batch) == original
    stamped = with_leader_fields(batch, 1000, 4)
    assert [r.offset for r in decode_records(stamped)] == list(range(1000, 1000 + len(original)))


def test_decode_of_many_random_batches_matches() -> None:
    rng = random.Random(7)
    for _ in range(50):
        count = rng.randint(1, 200)
        values = [rng.randbytes(rng.randint(0, 64)) for _ in range(count)]
        assert decode_batch(encode_batch(values)).values == values


def test_next_offset_walks_whole_batches_and_rejects_partial_ones() -> None:
    first = with_leader_fields(encode_batch([b"a", b"b"]), 10, 1)
    second = with_leader_fields(encode_batch([b"c"] * 3), 12, 1)
    assert next_offset(first) == 12
    assert next_offset(first + second) == 15
    assert next_offset(memoryview(first + second)) == 15
    for cut in (b"", first + second[:3], first + second[:40], first[:-1]):
        with pytest.raises(TruncatedBatchError):
            next_offset(cut)
    too_short = bytearray(first)
    struct.pack_into("<I", too_short, 0, HEADER_BYTES - 1)
    with pytest.raises(RecordFormatError, match="below the header size"):
        next_offset(too_short)


# ------------------------------------------------------------------- payload structure


def _payload_of(batch: bytes) -> bytes:
    """The uncompressed payload of a batch."""
    stored = batch[HEADER_BYTES:]
    if parse_header(batch).compression is Compression.ZSTD:
        return zstandard.ZstdDecompressor().decompress(stored)
    return stored


def _raises_record_format_error(call: Callable[[], object]) -> bool:
    try:
        call()
    except RecordFormatError:
        return True
    return False


def _check_agrees_with_decode(batch: bytes) -> bool:
    """Whether ``batch`` is malformed, asserting that both functions say the same."""
    header = verify_batch(batch)
    decode_fails = _raises_record_format_error(lambda: decode_batch(batch))
    check_fails = _raises_record_format_error(lambda: check_payload(batch, header))
    assert check_fails == decode_fails
    return check_fails


# Batches of records from record_strategy, with or without compression.
batch_strategy = st.builds(
    lambda original, compression: encode_records(original, compression=compression),
    st.lists(record_strategy, min_size=1, max_size=30),
    st.sampled_from(list(Compression)),
)


@settings(max_examples=300, deadline=None)
@given(batch_strategy, st.booleans(), st.binary(max_size=20))
def test_check_payload_accepts_every_valid_batch(
    batch: bytes, stamped: bool, control_data: bytes
) -> None:
    if stamped:
        batch = with_leader_fields(batch, 1000, 4)
    check_payload(batch, verify_batch(batch))
    check_payload(memoryview(batch), verify_batch(batch))
    control = encode_control_batch(b"noop", control_data, timestamp_ms=3)
    check_payload(control, verify_batch(control))


def _header_blob(pairs: object) -> bytes:
    return msgpack.packb(pairs, use_bin_type=True)


def _one_record(
    value: bytes, *, header_blob: bytes | None = None, key: bytes | None = None
) -> bytes:
    """The payload of one record at timestamp 5, its columns written out by hand."""
    flags = (1 if key is not None else 0) | (2 if header_blob is not None else 0)
    columns = struct.pack("<Bqi", flags, 5, len(value))
    data = value
    if key is not None:
        columns += struct.pack("<i", len(key))
        data = key + value
    if header_blob is not None:
        columns += struct.pack("<I", len(header_blob))
        data += header_blob
    return columns + data


# Payloads of one record whose checksums are right but which no consumer can read.
_MALFORMED_ONE_RECORD_PAYLOADS = {
    "value length 10**6 in a 3-byte payload": struct.pack("<Bqi", 0, 5, 10**6) + b"abc",
    "value length -2": struct.pack("<Bqi", 0, 5, -2) + b"abc",
    "key length -2": struct.pack("<Bqii", 1, 5, 3, -2) + b"abc",
    "key length past the data": struct.pack("<Bqii", 1, 5, 3, 4) + b"abc",
    "unknown flag bit": struct.pack("<Bqi", 4, 5, 3) + b"abc",
    "headers flag without room for its column": struct.pack("<Bqi", 2, 5, 0) + b"ab",
    "timestamp disagrees with the header": struct.pack("<Bqi", 0, 6, 3) + b"abc",
    "trailing data": _one_record(b"abc") + b"!",
    "header blob not msgpack": _one_record(b"abc", header_blob=b"\xc1\xc1"),
    "header blob cut short": _one_record(b"abc", header_blob=_header_blob([["k", b"v"]])[:-1]),
    "header blob with extra data": _one_record(b"abc", header_blob=_header_blob([]) + b"\x90"),
    "header value a str": _one_record(b"abc", header_blob=_header_blob([["k", "v"]])),
    "header key bytes": _one_record(b"abc", header_blob=_header_blob([[b"k", b"v"]])),
    "header key bad utf-8": _one_record(b"abc", header_blob=b"\x91\x92\xa1\xff\xc4\x00"),
    "headers a map": _one_record(b"abc", header_blob=_header_blob({"k": b"v"})),
    "headers not a list": _one_record(b"abc", header_blob=_header_blob(7)),
    "header pair of three": _one_record(b"abc", header_blob=_header_blob([["k", b"v", b""]])),
    "header pair a bin": _one_record(b"abc", header_blob=_header_blob([b"kv"])),
}

# Unusual but readable: what decode_batch accepts, check_payload accepts.
_VALID_ONE_RECORD_PAYLOADS = {
    "plain": _one_record(b"abc"),
    "null value": struct.pack("<Bqi", 0, 5, -1) + b"",
    "keys flag with a null key": struct.pack("<Bqii", 1, 5, 3, -1) + b"abc",
    "headers flag with an empty blob": _one_record(b"abc", header_blob=b""),
    "headers an empty list": _one_record(b"abc", header_blob=_header_blob([])),
    "key and header": _one_record(b"abc", key=b"k", header_blob=_header_blob([["", b""]])),
}


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize(
    ("payload", "malformed"),
    [
        pytest.param(payload, True, id=name)
        for name, payload in _MALFORMED_ONE_RECORD_PAYLOADS.items()
    ]
    + [
        pytest.param(payload, False, id=name)
        for name, payload in _VALID_ONE_RECORD_PAYLOADS.items()
    ],
)
def test_check_payload_refuses_exactly_what_decode_refuses(
    payload: bytes, malformed: bool, compression: Compression
) -> None:
    template = encode_batch([b"abc"], timestamps_ms=5, compression=compression)
    assert _check_agrees_with_decode(with_payload(template, payload)) is malformed


def test_check_payload_refuses_timestamps_that_disagree_with_the_header() -> None:
    batch = encode_batch([b"a", b"b", b"c"], timestamps_ms=[5, 9, 7])
    payload = _payload_of(batch)
    assert not _check_agrees_with_decode(batch)
    for fields in ({"first_timestamp_ms": 4}, {"max_timestamp_ms": 8}, {"max_timestamp_ms": 10}):
        assert _check_agrees_with_decode(with_payload(batch, payload, **fields)), fields


def test_check_payload_refuses_a_malformed_control_batch() -> None:
    control = encode_control_batch(b"noop", b"data", timestamp_ms=3)
    payload = bytearray(_payload_of(control))
    struct.pack_into("<i", payload, 1 + 8 + 4, 5)  # the key's length, 4 in truth
    assert _check_agrees_with_decode(with_payload(control, bytes(payload)))


@pytest.mark.parametrize("compression", list(Compression))
def test_check_payload_refuses_a_batch_cut_short(compression: Compression) -> None:
    batch = encode_batch([b"value"] * 3, compression=compression)
    header = verify_batch(batch)
    with pytest.raises(TruncatedBatchError):
        check_payload(batch[:-1], header)


def test_check_payload_applies_the_limits_decode_applies() -> None:
    batch = encode_batch([b"x"] * 20)
    with pytest.raises(BatchLimitError):
        check_payload(batch, verify_batch(batch), limits=BatchLimits(record_count_max=10))


def test_zstd_frame_declaring_more_than_the_header_is_refused_unallocated() -> None:
    """decompress() allocates what the frame declares, not what the header does."""
    template = encode_batch([b"a" * 1000], compression=Compression.ZSTD)
    bomb = zstandard.ZstdCompressor().compress(bytes(32 * 1024 * 1024))
    damaged = with_stored(template, bomb)
    header = verify_batch(damaged)
    tracemalloc.start()
    try:
        with pytest.raises(RecordFormatError, match="frame size"):
            check_payload(damaged, header)
        with pytest.raises(RecordFormatError, match="frame size"):
            decode_batch(damaged)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 1024 * 1024


@pytest.mark.parametrize(
    "extra", [b"xx", zstandard.ZstdCompressor().compress(b"more"), b"\x50\x2a\x4d\x18\0\0\0\0"]
)
def test_a_zstd_payload_is_one_frame_and_nothing_after_it(extra: bytes) -> None:
    """zstandard decodes the first frame and ignores what follows; other decoders
    read on into further frames, so Laminar refuses anything after the frame
    (garbage, a second frame, a skippable frame) to keep every decoder in step."""
    template = encode_batch([b"a" * 1000], compression=Compression.ZSTD)
    frame = template[HEADER_BYTES:]
    assert decode_batch(with_stored(template, frame)).values == [b"a" * 1000]
    damaged = with_stored(template, frame + extra)
    with pytest.raises(RecordFormatError, match="after the zstd frame"):
        check_payload(damaged, verify_batch(damaged))
    with pytest.raises(RecordFormatError, match="after the zstd frame"):
        decode_batch(damaged)
    cut = with_stored(template, frame[:-3])
    with pytest.raises(RecordFormatError):
        decode_batch(cut)


@settings(max_examples=400, deadline=None)
@given(batch_strategy, st.data())
def test_check_payload_fails_exactly_when_decode_fails(batch: bytes, data: st.DataObject) -> None:
    """Damage re-checksummed, so that only the payload's structure can tell."""
    payload = bytearray(_payload_of(batch))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(payload) - 1))
        payload[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.sampled_from([0, 0, 1, 4]))
    damaged = with_payload(batch, bytes(payload[: len(payload) - cut]))
    if _raises_record_format_error(lambda: verify_batch(damaged)):
        return  # the damage broke the header's own rules (too few bytes per record)
    _check_agrees_with_decode(damaged)


def test_stored_header_is_the_checked_header_of_a_stored_batch() -> None:
    """``stored_header`` (keyed compaction's passes, on batches a log's read checked)
    unpacks what ``parse_header`` returns, for every kind of batch."""
    batches = [
        with_leader_fields(encode_batch([b"v"], keys=[b"k"]), 7, 3),
        with_leader_fields(encode_batch([b"v" * 500] * 3, compression=Compression.ZSTD), 70, 4),
        encode_control_batch(b"noop", b"", 9),
    ]
    for batch in batches:
        assert records.stored_header(batch) == parse_header(batch)
        assert records.stored_header(batch).compression is parse_header(batch).compression


def test_a_headers_compression_is_its_codec_and_an_unknown_one_raises() -> None:
    header = parse_header(encode_batch([b"v" * 500] * 3, compression=Compression.ZSTD))
    assert header.compression is Compression.ZSTD
    assert header._replace(attributes=0).compression is Compression.NONE
    with pytest.raises(ValueError, match="5"):
        _ = header._replace(attributes=5).compression


@settings(max_examples=200, deadline=None)
@given(batch_strategy)
def test_stored_key_column_cuts_what_key_column_cuts(batch: bytes) -> None:
    """Keyed compaction's first pass cuts a stored batch's keys from four header
    fields: key_column's columns (nulls, headers, zstd, no keys at all) and the
    header's base, count and length; None for a batch without keys."""
    stamped = memoryview(with_leader_fields(batch, 500, 2))
    header = parse_header(stamped)
    columns = records.key_column(stamped, header)
    expected = (
        None
        if columns is None
        else (500, header.record_count, header.length, bytes(columns[0]), bytes(columns[1]))
    )
    got = records.stored_key_column(stamped)
    assert (None if got is None else (*got[:3], bytes(got[3]), bytes(got[4]))) == expected


def test_stored_key_column_skips_a_control_batch() -> None:
    assert records.stored_key_column(encode_control_batch(b"noop", b"k", 9)) is None


@settings(max_examples=200, deadline=None)
@given(batch_strategy)
def test_stored_column_view_cuts_what_column_view_checks_and_cuts(batch: bytes) -> None:
    """Keyed compaction's unchecked cut of a stored batch gives column_view's columns
    (nulls, headers, zstd, no keys at all), for the stamped batch as stored."""
    stamped = memoryview(with_leader_fields(batch, 500, 2))
    header = parse_header(stamped)
    assert records.stored_column_view(stamped, header) == column_view(stamped)
