"""Keyed compaction's engine (laminar/segment/compaction.py): the survival rule
against a model, canonical re-encoding, confluence, independence of the number of
passes (with each key map: pyarrow's and the dict), and the ``compact`` command's
strict decoding."""

from __future__ import annotations

import builtins
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laminar.errors import CorruptBatchError, InvalidInputError, ZstdVersionError
from laminar.records import (
    HEADER_BYTES,
    Compression,
    Header,
    Record,
    column_view,
    decode_batch,
    encode_batch,
    encode_control_batch,
    encode_records,
    encode_run,
    encode_runs,
    libzstd_version,
    parse_header,
    seal_payload,
    with_leader_fields,
    zstd_compress,
)
from laminar.segment import compaction
from laminar.segment.compaction import (
    KEY_ENTRY_BYTES,
    CompactCommand,
    SupersededOffsets,
    build_superseded,
    compact,
)

LARGE_MEMORY_BYTES = 64 * 1024 * 1024


# ----------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class Log:
    """Stamped batches in offset order, and where they end."""

    batches: list[bytes]
    end_offset: int

    def boundaries(self) -> list[int]:
        return [parse_header(batch).base_offset for batch in self.batches] + [self.end_offset]


def stamp_log(
    parts: Sequence[tuple[str, Sequence[Record], Compression, bool]], first_offset: int = 0
) -> Log:
    """Batches from ``(kind, records, compression, idempotent)``; kind "control" is
    a noop control batch, a new term starting with it."""
    batches, offset, term = [], first_offset, 1
    producer_sequence = 0
    for kind, records, compression, idempotent in parts:
        if kind == "control":
            term += 1
            batch = encode_control_batch(b"noop", b"", offset)
        elif idempotent:
            batch = encode_records(
                records, compression=compression, producer_id=42, base_sequence=producer_sequence
            )
            producer_sequence += len(records)
        else:
            batch = encode_records(records, compression=compression)
        batches.append(with_leader_fields(batch, offset, term))
        offset += parse_header(batch).record_count
    return Log(batches, offset)


# b"l..." is longer than SHORT_KEY_BYTES: its map key is its hash, and a group holding
# it goes record by record even with pyarrow installed.
keys = st.sampled_from([b"a", b"b", b"c", b"", b"dd", b"long key, 28 bytes of it...."]) | st.none()
values = st.binary(max_size=12) | st.none()
headers = st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.binary(max_size=3)), max_size=2)
records = st.builds(
    lambda timestamp_ms, key, value, record_headers: Record(
        -1, timestamp_ms, key, value, tuple(record_headers)
    ),
    st.integers(-5, 5),
    keys,
    values,
    headers | st.just([]),
)
parts = st.lists(
    st.one_of(
        st.tuples(
            st.just("records"),
            st.lists(records, min_size=1, max_size=8),
            st.sampled_from([Compression.NONE, Compression.ZSTD]),
            st.booleans(),
        ),
        st.just(("control", (), Compression.NONE, False)),
    ),
    min_size=1,
    max_size=12,
)


@st.composite
def logs_and_commands(draw: st.DrawFn) -> tuple[Log, CompactCommand]:
    log = stamp_log(draw(parts), first_offset=draw(st.sampled_from([0, 1000])))
    # E is a batch boundary in the contract; the engine also takes one inside a batch
    # (the records from E on are untouched).
    end = draw(st.sampled_from(log.boundaries()) | st.integers(log.boundaries()[0], log.end_offset))
    tombstones_end = draw(st.integers(log.boundaries()[0], end))
    return log, command(end, tombstones_end)


def command(end: int, tombstones_end: int, codec: int = 1) -> CompactCommand:
    return CompactCommand(end, tombstones_end, codec=codec, zstd=libzstd_version())


def run(
    log_batches: list[bytes], cmd: CompactCommand, memory_bytes_max: int = LARGE_MEMORY_BYTES
) -> list[bytes]:
    """Compact ``log_batches`` as a replica does: superseded offsets from its own
    batches, from its first offset up to the command's end. An empty log (one that
    compaction emptied: a lone tombstone past its horizon) stays empty."""
    if not log_batches:
        return []
    start = parse_header(log_batches[0]).base_offset
    with build_superseded(lambda: log_batches, start, cmd.end, memory_bytes_max) as superseded:
        return list(compact(log_batches, cmd, superseded))


# ----------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Stored:
    offset: int
    control: bool
    record: Record


def stored(batches: list[bytes]) -> list[Stored]:
    """Every record of ``batches``, control ones included, with its offset."""
    found = []
    for batch in batches:
        decoded = decode_batch(batch)
        for record in decoded.records():
            found.append(Stored(record.offset, decoded.header.is_control, record))
    return found


def model_survivors(log: Log, cmd: CompactCommand) -> list[Stored]:
    """The survival rule, written from its statement over decoded records."""
    everything = stored(log.batches)

    def survives(item: Stored) -> bool:
        record = item.record
        if item.control or item.offset >= cmd.end or record.key is None:
            return True
        newer = any(
            not other.control and other.record.key == record.key
            for other in everything
            if item.offset < other.offset < cmd.end
        )
        return not newer and (record.value is not None or item.offset >= cmd.tombstones_end)

    return [item for item in everything if survives(item)]


# ----------------------------------------------------------------------------- rule


FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # key_map patches for the whole test


@pytest.fixture(params=["dict", "arrow"])
def key_map(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each key map: the dict (without pyarrow) and Arrow's."""
    if request.param == "arrow":
        assert compaction._arrow() is not None
    else:
        monkeypatch.setattr(compaction, "_arrow", lambda: None)
    return str(request.param)


@pytest.mark.usefixtures("key_map")
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logs_and_commands())
def test_survivors_are_exactly_those_of_the_rule(case: tuple[Log, CompactCommand]) -> None:
    """The newest record of each key below E survives, older ones do not, tombstones
    below T go, null keys and everything at or after E stay: record for record,
    offsets, timestamps, keys, values and headers."""
    log, cmd = case
    assert stored(run(log.batches, cmd)) == model_survivors(log, cmd)


@settings(max_examples=200, deadline=None)
@given(logs_and_commands())
def test_batches_kept_whole_are_byte_identical_and_runs_canonical(
    case: tuple[Log, CompactCommand],
) -> None:
    """Control batches, batches at or after E and batches whose records all survive
    come out byte for byte; every other output batch is the canonical encoding of
    one maximal run of survivors of one input batch (base, term, producer fields)."""
    log, cmd = case
    output = run(log.batches, cmd)
    survivors = {item.offset for item in model_survivors(log, cmd)}
    expected: list[bytes] = []
    for batch in log.batches:
        header = parse_header(batch)
        offsets = range(header.base_offset, header.next_offset)
        kept = [offset in survivors for offset in offsets]
        if header.is_control or header.base_offset >= cmd.end or all(kept):
            expected.append(batch)
            continue
        records = decode_batch(batch).records()
        index = 0
        while index < len(kept):
            if not kept[index]:
                index += 1
                continue
            stop = index
            while stop < len(kept) and kept[stop]:
                stop += 1
            sequence = header.base_sequence + index if header.base_sequence >= 0 else -1
            fresh = encode_records(
                records[index:stop],
                compression=header.compression,
                producer_id=header.producer_id,
                base_sequence=sequence,
            )
            expected.append(with_leader_fields(fresh, header.base_offset + index, header.term))
            index = stop
    assert output == expected


def test_newest_value_of_each_key_survives_and_tombstones_follow_the_horizon() -> None:
    """A hand-made log: key a updated three times, b deleted by a tombstone below T,
    c deleted by one at T, a null-key record superseded by nothing."""
    log = stamp_log(
        [
            (
                "records",
                [rec(b"a", b"1"), rec(b"b", b"1"), rec(None, b"x")],
                Compression.NONE,
                False,
            ),
            (
                "records",
                [rec(b"a", b"2"), rec(b"b", None), rec(b"c", b"1")],
                Compression.NONE,
                False,
            ),
            ("records", [rec(b"c", None), rec(b"a", b"3")], Compression.NONE, False),
            ("records", [rec(b"a", b"4")], Compression.NONE, False),
        ]
    )
    kept = stored(run(log.batches, command(end=8, tombstones_end=5)))
    assert [(item.offset, item.record.key, item.record.value) for item in kept] == [
        (2, None, b"x"),
        (6, b"c", None),  # a tombstone at T: kept until a later command's T passes it
        (7, b"a", b"3"),  # the newest below E; a@8 is past E, untouched
        (8, b"a", b"4"),
    ]
    later = stored(run(log.batches, command(end=8, tombstones_end=7)))
    assert [item.offset for item in later] == [2, 7, 8]


def rec(key: bytes | None, value: bytes | None, timestamp_ms: int = 0) -> Record:
    return Record(-1, timestamp_ms, key, value, ())


def test_a_batch_with_every_record_surviving_is_not_re_encoded() -> None:
    """Even in a non-canonical encoding (a key column of nulls only, which the
    format accepts but no encoder writes), a batch kept whole keeps its bytes."""
    payload = (
        b"\x01"  # flags: key column present
        + (7).to_bytes(8, "little", signed=True)
        + (1).to_bytes(4, "little", signed=True)
        + (-1).to_bytes(4, "little", signed=True)
        + b"v"
    )
    odd = with_leader_fields(
        seal_payload(
            payload,
            record_count=1,
            first_timestamp_ms=7,
            max_timestamp_ms=7,
            compression=Compression.NONE,
        ),
        0,
        1,
    )
    keyed = with_leader_fields(encode_records([rec(b"k", b"1"), rec(b"k", b"2")]), 1, 1)
    output = run([odd, keyed], command(end=3, tombstones_end=3))
    assert output[0] == odd
    assert [r.value for r in decode_batch(output[1]).records()] == [b"2"]


# ----------------------------------------------------------------------------- confluence


@settings(max_examples=200, deadline=None)
@given(logs_and_commands(), st.data())
def test_compaction_is_confluent(case: tuple[Log, CompactCommand], data: st.DataObject) -> None:
    """Raw -> C gives the bytes of raw -> C0 -> C for any earlier C0 (E0 <= E,
    T0 <= T), and C applied twice gives the bytes of C once: a replica that got the
    range raw, or already compacted, or redoes it after a crash, ends the same."""
    log, cmd = case
    direct = run(log.batches, cmd)
    assert run(direct, cmd) == direct
    boundaries = [b for b in log.boundaries() if b <= cmd.end]
    end0 = data.draw(st.sampled_from(boundaries))
    earlier = command(end0, data.draw(st.integers(boundaries[0], min(end0, cmd.tombstones_end))))
    assert run(run(log.batches, earlier), cmd) == direct


@pytest.mark.usefixtures("key_map")
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logs_and_commands())
def test_the_result_does_not_depend_on_the_number_of_passes(
    case: tuple[Log, CompactCommand],
) -> None:
    """A key map of one entry (many passes, buckets grown by overflows) gives the
    bytes of one pass with room for every key."""
    log, cmd = case
    start = log.boundaries()[0]
    with build_superseded(lambda: log.batches, start, cmd.end, KEY_ENTRY_BYTES) as tiny:
        assert run(log.batches, cmd, KEY_ENTRY_BYTES) == run(log.batches, cmd)
        distinct = {
            item.record.key
            for item in stored(log.batches)
            if item.record.key is not None and not item.control and item.offset < cmd.end
        }
        if len(distinct) > 1:
            assert tiny.passes > 1


@pytest.mark.usefixtures("key_map")
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(logs_and_commands(), st.data())
def test_superseded_offsets_do_not_depend_on_where_the_range_starts(
    case: tuple[Log, CompactCommand], data: st.DataObject
) -> None:
    """A replica whose log starts later (retention, a late learner) finds the same
    superseded offsets for every offset it holds: survival of o depends only on
    [o, E)."""
    log, cmd = case
    first = log.boundaries()[0]
    start = data.draw(st.integers(first, cmd.end))
    held = [b for b in log.batches if parse_header(b).next_offset > start]
    with (
        build_superseded(lambda: log.batches, first, cmd.end, LARGE_MEMORY_BYTES) as whole,
        build_superseded(lambda: held, start, cmd.end, LARGE_MEMORY_BYTES) as later,
    ):
        offsets = range(start, cmd.end)
        assert [o in later for o in offsets] == [o in whole for o in offsets]
        assert not any(o in later for o in range(first, start))


def test_compact_refuses_superseded_offsets_of_another_end() -> None:
    log = stamp_log([("records", [rec(b"a", b"1"), rec(b"a", b"2")], Compression.NONE, False)])
    with (
        build_superseded(lambda: log.batches, 0, 1, LARGE_MEMORY_BYTES) as superseded,
        pytest.raises(InvalidInputError, match="built up to 1, the command's end is 2"),
    ):
        list(compact(log.batches, command(2, 0), superseded))


@pytest.mark.usefixtures("key_map")
def test_passes_grow_with_the_keys_and_the_bitmap_is_the_same() -> None:
    """40 distinct keys in a map of 4 entries: several passes, same superseded set."""
    log = stamp_log(
        [
            (
                "records",
                [rec(b"k%d" % ((7 * i + j) % 40), b"v") for j in range(10)],
                Compression.NONE,
                False,
            )
            for i in range(20)
        ]
    )
    read = lambda: log.batches  # noqa: E731
    with (
        build_superseded(read, 0, log.end_offset, 4 * KEY_ENTRY_BYTES) as small,
        build_superseded(read, 0, log.end_offset, LARGE_MEMORY_BYTES) as large,
    ):
        assert small.passes > 8 and large.passes == 1
        everything = range(log.end_offset)
        assert [o in small for o in everything] == [o in large for o in everything]
        assert sum(o in large for o in everything) == log.end_offset - 40


def test_batches_at_or_after_the_end_pass_through() -> None:
    log = stamp_log(
        [("records", [rec(b"a", b"%d" % i) for i in range(3)], Compression.NONE, False)] * 4
    )
    output = run(log.batches, command(end=6, tombstones_end=6))
    assert output[-2:] == log.batches[-2:]
    assert [r.offset for r in stored(output)] == [5, 6, 7, 8, 9, 10, 11]


# ----------------------------------------------------------------------------- codecs


def zstd_log() -> Log:
    return stamp_log(
        [
            (
                "records",
                [rec(b"a", b"x" * 50), rec(b"b", b"y" * 50), rec(b"a", b"z" * 50)],
                Compression.ZSTD,
                True,
            )
        ]
    )


def test_a_trimmed_zstd_batch_is_zstd_at_the_pinned_parameters() -> None:
    (output,) = run(zstd_log().batches, command(end=3, tombstones_end=0))
    header = parse_header(output)
    assert header.compression is Compression.ZSTD
    assert (header.base_offset, header.record_count, header.base_sequence) == (1, 2, 1)
    params = zstandard.get_frame_parameters(output[HEADER_BYTES:])
    assert params.content_size == header.payload_uncompressed_bytes
    assert not params.has_checksum


def test_codec_0_writes_trimmed_runs_uncompressed() -> None:
    (output,) = run(zstd_log().batches, command(end=3, tombstones_end=0, codec=0))
    assert parse_header(output).compression is Compression.NONE
    assert [r.value for r in decode_batch(output).records()] == [b"y" * 50, b"z" * 50]


def test_another_libzstd_version_refuses_to_re_encode_zstd() -> None:
    """Codec 1 with another version named: the bytes could differ from the leader's."""
    cmd = CompactCommand(3, 0, codec=1, zstd="0.0.1")
    with pytest.raises(ZstdVersionError, match=r"0\.0\.1"):
        run(zstd_log().batches, cmd)
    # Nothing to re-encode as zstd: the version does not matter.
    plain = stamp_log([("records", [rec(b"a", b"1"), rec(b"a", b"2")], Compression.NONE, False)])
    assert stored(run(plain.batches, cmd))[0].offset == 1


def test_zstd_compress_writes_what_the_encoder_wrote_before() -> None:
    """The pinned parameters are zstandard's defaults at level 3: batches that
    producers already wrote stay as they were."""
    payload = b"laminar " * 1000
    assert zstd_compress(payload) == zstandard.ZstdCompressor(level=3).compress(payload)


# ----------------------------------------------------------------------------- encode_run


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=10), st.data(), st.sampled_from(list(Compression)))
def test_a_run_is_the_canonical_encoding_of_its_records(
    batch_records: list[Record], data: st.DataObject, compression: Compression
) -> None:
    batch = with_leader_fields(
        encode_records(batch_records, compression=compression, producer_id=9, base_sequence=100),
        500,
        3,
    )
    start = data.draw(st.integers(0, len(batch_records) - 1))
    stop = data.draw(st.integers(start + 1, len(batch_records)))
    fresh = encode_records(
        batch_records[start:stop], compression=compression, producer_id=9, base_sequence=100 + start
    )
    got = encode_run(column_view(batch), start, stop, compression=compression)
    assert got == with_leader_fields(fresh, 500 + start, 3)


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=12), st.data(), st.sampled_from(list(Compression)))
def test_the_runs_of_a_batch_are_each_run_encoded_alone(
    batch_records: list[Record], data: st.DataObject, compression: Compression
) -> None:
    """encode_runs reads the batch's columns once for all its runs (null keys,
    tombstones and headers anywhere): each run comes out as encode_run gives it."""
    batch = with_leader_fields(
        encode_records(batch_records, compression=compression, producer_id=9, base_sequence=100),
        500,
        3,
    )
    cuts = sorted(data.draw(st.sets(st.integers(0, len(batch_records)), min_size=2)))
    runs = [run for run in itertools.pairwise(cuts) if data.draw(st.booleans())]
    view = column_view(batch)
    assert list(encode_runs(view, runs, compression=compression)) == [
        encode_run(view, start, stop, compression=compression) for start, stop in runs
    ]


def test_a_run_of_a_non_canonical_batch_is_canonical() -> None:
    """Header blobs written as an empty array (0x90) or with a str16 key, which
    decoders accept, come out canonical: length 0, and the shortest forms."""
    str16 = b"\x91\x92\xda\x00\x01k\xc4\x01v"  # [["k", b"v"]], the key as str16
    assert str16 != msgpack.packb([["k", b"v"]], use_bin_type=True)
    batch = with_leader_fields(
        encode_batch([b"1", b"2", b"3"], keys=[b"a", b"b", b"c"], headers=[[("x", b"y")], [], []]),
        0,
        1,
    )
    odd = column_view(_with_header_blobs(batch, [b"\x91\x92\xa1x\xc4\x01y", b"\x90", str16]))
    canonical = encode_batch([b"2", b"3"], keys=[b"b", b"c"], headers=[[], [("k", b"v")]])
    assert encode_run(odd, 1, 3, compression=Compression.NONE) == with_leader_fields(
        canonical, 1, 1
    )
    only_empty = encode_batch([b"2"], keys=[b"b"])  # no header column at all
    assert encode_run(odd, 1, 2, compression=Compression.NONE) == with_leader_fields(
        only_empty, 1, 1
    )


def _with_header_blobs(batch: bytes, blobs: list[bytes]) -> bytes:
    """``batch`` (uncompressed, with a header column) with other header blobs."""
    header = parse_header(batch)
    view = column_view(batch)
    count = header.record_count
    payload = b"".join(
        (
            bytes((0x03,)),
            bytes(view.timestamps),
            bytes(view.value_lengths),
            bytes(view.key_lengths or b""),
            b"".join(len(blob).to_bytes(4, "little") for blob in blobs),
            bytes(view.data[: view.headers_start]),
            *blobs,
        )
    )
    sealed = seal_payload(
        payload,
        record_count=count,
        first_timestamp_ms=header.first_timestamp_ms,
        max_timestamp_ms=header.max_timestamp_ms,
        compression=Compression.NONE,
    )
    return with_leader_fields(sealed, header.base_offset, header.term)


def test_encode_run_refuses_what_is_not_a_run() -> None:
    batch = with_leader_fields(encode_records([rec(b"a", b"1")]), 0, 1)
    with pytest.raises(InvalidInputError, match="not a run"):
        encode_run(column_view(batch), 0, 2, compression=Compression.NONE)
    with pytest.raises(InvalidInputError, match="stamped"):
        encode_run(
            column_view(encode_records([rec(b"a", b"1")])), 0, 1, compression=Compression.NONE
        )


# ----------------------------------------------------------------------------- the command


def test_the_command_round_trips_through_its_value() -> None:
    cmd = CompactCommand(end=10, tombstones_end=4, codec=0, zstd="1.5.7", time_ms=-3)
    assert CompactCommand.from_value(cmd.to_value()) == cmd
    assert msgpack.unpackb(cmd.to_value()) == {
        "v": 1,
        "end": 10,
        "tombstones_end": 4,
        "rule": 1,
        "codec": 0,
        "zstd": "1.5.7",
        "time_ms": -3,
    }


def fields(**changes: object) -> bytes:
    value = msgpack.unpackb(CompactCommand(10, 4).to_value())
    value.update(changes)
    return msgpack.packb({k: v for k, v in value.items() if v is not ...}, use_bin_type=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "not a msgpack map"),
        (fields(v=2), "unknown version 2"),
        (fields(v=True), "unknown version True"),
        (fields(end=...), r"missing \['end'\]"),
        (fields(extra=1), r"unknown \['extra'\]"),
        (fields(end="10"), "end must be an integer"),
        (fields(codec=True), "codec must be an integer"),
        (fields(end=-1, tombstones_end=0), "end -1 is not an offset"),
        (fields(tombstones_end=11), r"tombstones_end 11 is not in \[0, end 10\]"),
        (fields(rule=2), "unknown rule 2"),
        (fields(codec=2), "unknown codec 2"),
        (fields(zstd=b"1.5"), "zstd must be a version string"),
        (fields(zstd="9" * 65), "zstd must be a version string"),
        (fields(zstd="x" * 2000), "at most 1024"),
        (msgpack.packb({1: 2}), "not msgpack"),  # strict_map_key: only str keys
    ],
)
def test_a_bad_command_value_is_refused_with_its_problem(value: bytes, message: str) -> None:
    with pytest.raises(CorruptBatchError, match=message):
        CompactCommand.from_value(value)


def test_a_bad_command_is_refused_when_built() -> None:
    with pytest.raises(InvalidInputError, match="tombstones_end"):
        CompactCommand(end=1, tombstones_end=2)


# ----------------------------------------------------------------------------- limits


def test_build_superseded_refuses_a_budget_without_room_for_a_key() -> None:
    with pytest.raises(InvalidInputError, match="holds no key"):
        build_superseded(lambda: [], 0, 10, KEY_ENTRY_BYTES - 1)
    with pytest.raises(InvalidInputError, match="not a range"):
        build_superseded(lambda: [], 10, 5, LARGE_MEMORY_BYTES)


def test_build_superseded_gives_up_past_its_passes_max(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compaction, "BUCKETS_MAX", 2)
    log = stamp_log(
        [("records", [rec(b"k%d" % i, b"v") for i in range(50)], Compression.NONE, False)]
    )
    with pytest.raises(InvalidInputError, match="too small for the keys of 50 offsets"):
        build_superseded(lambda: log.batches, 0, 50, KEY_ENTRY_BYTES)


def test_a_large_bitmap_lives_in_a_temporary_file(tmp_path: object) -> None:
    """Over 8 Mi offsets the bitmap is an mmap'd file, with the same answers."""
    start = 0
    end = 8 * compaction.BITMAP_MEMORY_BYTES_MAX + 64
    top = end - 4
    log = stamp_log([("records", [rec(b"a", b"1"), rec(b"a", b"2")], Compression.NONE, False)], top)
    with build_superseded(
        lambda: log.batches, start, end, LARGE_MEMORY_BYTES, temp_dir=str(tmp_path)
    ) as big:
        assert big._file is not None
        assert [o in big for o in (top - 1, top, top + 1, end)] == [False, True, False, False]
        assert big.mask(top - 2, 4).tolist() == [False, False, True, False]
    assert big._file is None


@pytest.mark.usefixtures("key_map")
def test_a_short_key_equal_to_a_long_keys_hash_is_another_key() -> None:
    """A long key goes by its 128-bit hash; a 16-byte key whose bytes are that hash
    is still another key, in either map (the dict's ints and bytes never compare
    equal; Arrow's long-key identities are 17 bytes)."""
    long_key = b"a key longer than sixteen bytes"
    lookalike = xxhash.xxh3_128_digest(long_key)
    assert len(lookalike) == compaction.SHORT_KEY_BYTES
    log = stamp_log(
        [
            ("records", [rec(long_key, b"1"), rec(lookalike, b"2")], Compression.NONE, False),
            ("records", [rec(long_key, b"3")], Compression.NONE, False),
        ]
    )
    with build_superseded(lambda: log.batches, 0, log.end_offset, LARGE_MEMORY_BYTES) as gone:
        assert [o in gone for o in range(log.end_offset)] == [True, False, False]


@pytest.mark.usefixtures("key_map")
def test_groups_merge_into_one_map_of_each_keys_newest() -> None:
    """Arrow's map merges each group's keys into those of the groups before it (a
    key seen again, a new one, long ones): the offsets a record by record model
    finds, with groups of every size."""
    rng = random.Random(7)
    names = [b"k%d" % i for i in range(30)] + [b"long key number %020d" % i for i in range(10)]
    parts = []
    for _ in range(40):
        chosen = [rng.choice([*names, None]) for _ in range(rng.randrange(1, 12))]
        parts.append(("records", [rec(key, b"v") for key in chosen], Compression.NONE, False))
    log = stamp_log(parts)
    newest = {}
    for item in stored(log.batches):
        if item.record.key is not None:
            newest[item.record.key] = item.offset
    expected = [
        item.record.key is not None and newest[item.record.key] != item.offset
        for item in stored(log.batches)
    ]
    for memory in (KEY_ENTRY_BYTES * 8, KEY_ENTRY_BYTES * 64, LARGE_MEMORY_BYTES):
        with build_superseded(lambda: log.batches, 0, log.end_offset, memory) as gone:
            assert [o in gone for o in range(log.end_offset)] == expected, memory


def test_a_protocol_superseded_set_works_as_the_bitmap_does() -> None:
    """compact() takes any Superseded: a plain set gives what the bitmap gives."""
    log = stamp_log([("records", [rec(b"a", b"1"), rec(b"a", b"2")], Compression.NONE, False)])

    class Offsets:
        def __contains__(self, offset: int) -> bool:
            return offset == 0

    output = list(compact(log.batches, command(2, 0), Offsets()))
    assert output == run(log.batches, command(2, 0))


def _unused(_: Iterator[bytes], __: SupersededOffsets, ___: Header) -> None:
    """Types named only for the annotations above."""


@given(st.lists(st.booleans(), max_size=80))
def test_runs_are_the_maximal_runs_of_survivors(flags: list[bool]) -> None:
    expected = []
    for index, flag in enumerate(flags):
        if flag and (index == 0 or not flags[index - 1]):
            expected.append([index, index + 1])
        elif flag:
            expected[-1][1] = index + 1
    got = list(compaction._runs(np.array(flags, dtype=bool)))
    assert got == [tuple(run) for run in expected]
    assert all(type(value) is int for run in got for value in run)


def test_a_pyarrow_that_does_not_load_leaves_the_dict(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An installed pyarrow whose libraries fail to load does not stop compaction:
    the key map is the dict, and the log says why."""
    real_import = builtins.__import__

    def failing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyarrow"):
            raise OSError("libarrow.so: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    compaction._arrow.cache_clear()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(builtins, "__import__", failing)
            assert compaction.key_map_kind() == "dict"
        assert "pyarrow does not load (libarrow.so" in caplog.text
    finally:
        compaction._arrow.cache_clear()
    assert compaction.key_map_kind() == "arrow"
