"""Unit tests of SegmentLog (and MemoryLog's crash model).

Each test pins one documented rule of the log: read semantics, roll, retention,
truncation, timestamp lookup, typed errors, fsync policies and directory syncs, and
the consensus state file. Expected values are derived from what the test wrote,
never from the log's own bookkeeping. Time is a FakeClock; concurrency is made
deterministic with gates on the patched system calls, never with sleeps.
"""

from __future__ import annotations

import os
import random
import stat
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from laminar.errors import (
    BatchLimitError,
    ChecksumMismatchError,
    InvalidInputError,
    LogClosedError,
    NonMonotonicOffsetError,
    OffsetOutOfRangeError,
    RecordFormatError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from laminar.records import HEADER_BYTES, BatchLimits, parse_header, with_leader_fields
from laminar.segment import FsyncPolicy, LogConfig, MemoryLog, SegmentLog
from laminar.segment.statefile import StateFile, decode_slot
from tests.segment.support import (
    FakeClock,
    RecordSpec,
    make_batch,
    records_of,
    simple_batch,
    split_batches,
)

BATCH = simple_batch(1)  # every batch of these tests that needs a fixed size
BATCH_BYTES = len(BATCH)
GATE_TIMEOUT_S = 10.0


def _config(**overrides: Any) -> LogConfig:
    settings: dict[str, Any] = {
        "segment_bytes_max": 1 << 20,
        "index_interval_bytes": 256,
        "fsync_policy": FsyncPolicy.NEVER,
        "retention_ms": None,
    }
    settings.update(overrides)
    return LogConfig(**settings)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., SegmentLog]]:
    """Opens logs in ``tmp_path/log`` (config overrides as keywords); closes them after."""
    opened: list[SegmentLog] = []

    def opener(*, initial_offset: int = 0, **overrides: Any) -> SegmentLog:
        log = SegmentLog.open(
            str(tmp_path / "log"),
            _config(**overrides),
            initial_offset=initial_offset,
            clock_ms=clock,
        )
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def _segment_files(directory: str, suffix: str = "log") -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(f".{suffix}"))


def _name(base_offset: int, suffix: str = "log") -> str:
    return f"{base_offset:020d}.{suffix}"


def _append_all(log: SegmentLog, batches: list[bytes], term: int = 1) -> list[bytes]:
    """Append ``batches``; returns them as the log must store them (stamped)."""
    stored = []
    for batch in batches:
        base = log.append(batch, term=term)
        stored.append(with_leader_fields(batch, base, term))
    return stored


# ---------------------------------------------------------------------------- appends


def test_append_assigns_dense_offsets_and_stores_stamped_bytes(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    assert (log.start_offset, log.end_offset, log.last_term) == (0, 0, -1)
    batches = [simple_batch(count) for count in (1, 3, 2)]
    assert [log.append(batch, term=2) for batch in batches] == [0, 1, 4]
    assert (log.end_offset, log.last_term) == (6, 2)
    bases = [0, 1, 4]
    pairs = zip(batches, bases, strict=True)
    stored = b"".join(with_leader_fields(batch, base, 2) for batch, base in pairs)
    assert log.read(0, 1 << 20) == stored
    assert [record.offset for record in records_of(stored)] == list(range(6))
    assert [log.term_at(offset) for offset in range(6)] == [2] * 6


def test_initial_offset_applies_to_an_empty_directory_only(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(initial_offset=100)
    assert (log.start_offset, log.end_offset) == (100, 100)
    assert log.append(BATCH) == 100
    assert _segment_files(log.directory) == [_name(100)]
    log.close()
    reopened = open_log(initial_offset=5)
    assert (reopened.start_offset, reopened.end_offset) == (100, 101)


def test_append_stamped_keeps_the_leaders_bytes(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    stamped = with_leader_fields(simple_batch(2), 0, 4)
    assert log.append_stamped(stamped) == 0
    assert log.append_stamped(memoryview(with_leader_fields(BATCH, 2, 4))) == 2
    assert (log.end_offset, log.last_term) == (3, 4)
    assert split_batches(log.read(0, 1 << 20))[0] == stamped


# ---------------------------------------------------------------------------- reads


@pytest.fixture(params=[1, 1 << 20], ids=["dense-index", "sparse-index"])
def index_interval_bytes(request: pytest.FixtureRequest) -> int:
    """Both read paths: boundaries from index entries, and walking batch headers."""
    value: int = request.param
    return value


def _mixed_batches() -> list[bytes]:
    """Batches of different record counts and sizes, offsets 0..14."""
    return [simple_batch(count, value_bytes=7 * count) for count in (1, 3, 2, 4, 1, 4)]


def test_read_starts_with_the_batch_containing_the_offset(
    open_log: Callable[..., SegmentLog], index_interval_bytes: int
) -> None:
    log = open_log(index_interval_bytes=index_interval_bytes)
    stored = _append_all(log, _mixed_batches())
    bases = [parse_header(batch).base_offset for batch in stored]
    for offset in range(log.end_offset):
        containing = max(index for index, base in enumerate(bases) if base <= offset)
        assert log.read(offset, 1 << 20) == b"".join(stored[containing:]), offset
    assert log.read(log.end_offset, 1 << 20) == b""


def test_read_returns_whole_batches_within_max_bytes(
    open_log: Callable[..., SegmentLog], index_interval_bytes: int
) -> None:
    log = open_log(index_interval_bytes=index_interval_bytes)
    stored = _append_all(log, _mixed_batches())
    total = sum(map(len, stored))
    for max_bytes in range(1, total + 2):
        data = log.read(0, max_bytes)
        got = split_batches(data)
        assert got == stored[: len(got)], max_bytes
        assert got, "a read below the end always returns at least one batch"
        if len(got) > 1:
            assert len(data) <= max_bytes
        if len(got) < len(stored):
            # It took as many whole batches as fit.
            assert len(data) + len(stored[len(got)]) > max_bytes


def test_max_bytes_smaller_than_the_first_batch_returns_that_batch(
    open_log: Callable[..., SegmentLog], index_interval_bytes: int
) -> None:
    log = open_log(index_interval_bytes=index_interval_bytes)
    big = simple_batch(20, value_bytes=100)
    stored = _append_all(log, [big, BATCH])
    assert log.read(0, 1) == stored[0]
    assert log.read(19, HEADER_BYTES) == stored[0]
    assert log.read(20, 1) == stored[1]


def test_upper_offset_bounds_the_batches_returned(
    open_log: Callable[..., SegmentLog], index_interval_bytes: int
) -> None:
    log = open_log(index_interval_bytes=index_interval_bytes)
    stored = _append_all(log, _mixed_batches())
    ends = [parse_header(batch).next_offset for batch in stored]  # 1, 4, 6, 10, 11, 15
    for upper in range(log.end_offset + 2):
        for offset in range(log.end_offset):
            got = split_batches(log.read(offset, 1 << 20, upper_offset=upper))
            expected = [
                batch
                for batch, end in zip(stored, ends, strict=True)
                if end > offset and end <= upper
            ]
            assert got == expected, (offset, upper)


def test_read_stops_at_a_segment_boundary(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(segment_bytes_max=2 * BATCH_BYTES)
    stored = _append_all(log, [BATCH] * 5)
    assert log.segment_count == 3
    assert log.read(0, 1 << 20) == b"".join(stored[:2])
    assert log.read(1, 1 << 20) == stored[1]
    assert log.read(2, 1 << 20) == b"".join(stored[2:4])
    assert log.read(4, 1 << 20) == stored[4]


def test_reads_after_reopen_match_reads_before(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(segment_bytes_max=300, index_interval_bytes=100)
    rng = random.Random(7)
    batches = [simple_batch(rng.randint(1, 3), value_bytes=rng.randint(0, 60)) for _ in range(30)]
    _append_all(log, batches)
    requests = [
        (offset, max_bytes, upper)
        for offset in range(0, log.end_offset, 3)
        for max_bytes in (1, 150, 1 << 20)
        for upper in (None, offset + 4)
    ]
    before = [log.read(o, m, upper_offset=u) for o, m, u in requests]
    log.close()
    reopened = open_log(segment_bytes_max=300, index_interval_bytes=100)
    assert [reopened.read(o, m, upper_offset=u) for o, m, u in requests] == before


# ---------------------------------------------------------------------------- errors


def test_offset_out_of_range_carries_the_valid_range(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(initial_offset=10)
    _append_all(log, [simple_batch(3)])
    for offset in (9, 14, -1):
        with pytest.raises(OffsetOutOfRangeError) as caught:
            log.read(offset, 100)
        assert (caught.value.offset, caught.value.start_offset, caught.value.end_offset) == (
            offset,
            10,
            13,
        )
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_suffix(14)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_suffix(9)
    with pytest.raises(OffsetOutOfRangeError):
        log.term_at(13)  # the end holds no batch yet


def test_reading_below_start_after_retention_is_out_of_range(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=BATCH_BYTES, retention_bytes=0)
    _append_all(log, [BATCH] * 4)
    assert log.start_offset == 3
    with pytest.raises(OffsetOutOfRangeError) as caught:
        log.read(2, 100)
    assert (caught.value.start_offset, caught.value.end_offset) == (3, 4)
    assert log.read(3, 100) != b""


@pytest.mark.parametrize("max_bytes", [0, -1, 4097])
def test_bad_max_bytes_is_invalid_input(
    open_log: Callable[..., SegmentLog], max_bytes: int
) -> None:
    log = open_log(read_bytes_max=4096)
    _append_all(log, [BATCH])
    with pytest.raises(InvalidInputError):
        log.read(0, max_bytes)
    assert log.read(0, 4096) != b""


@pytest.mark.parametrize(
    ("base_offset", "why"), [(3, "gap"), (1, "overlap"), (0, "rewrite"), (-1, "unstamped")]
)
def test_append_stamped_must_follow_the_end(
    open_log: Callable[..., SegmentLog], base_offset: int, why: str
) -> None:
    log = open_log()
    _append_all(log, [simple_batch(2)])
    batch = simple_batch(1) if base_offset < 0 else with_leader_fields(BATCH, base_offset, 1)
    with pytest.raises(NonMonotonicOffsetError) as caught:
        log.append_stamped(batch)
    assert (caught.value.base_offset, caught.value.end_offset) == (base_offset, 2), why
    assert log.end_offset == 2
    assert os.path.getsize(os.path.join(log.directory, _name(0))) == len(simple_batch(2))


def test_terms_never_go_backward(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    log.append(BATCH, term=3)
    with pytest.raises(InvalidInputError):
        log.append(BATCH, term=2)
    with pytest.raises(InvalidInputError):
        log.append(BATCH, term=-1)
    with pytest.raises(InvalidInputError):
        log.append_stamped(with_leader_fields(BATCH, 1, 2))
    assert (log.end_offset, log.last_term) == (1, 3)


def _garbage(kind: str) -> bytes:
    good = simple_batch(2, value_bytes=30)
    damaged = bytearray(good)
    match kind:
        case "random":
            return random.Random(3).randbytes(len(good))
        case "empty":
            return b""
        case "header-only":
            return good[:HEADER_BYTES]
        case "cut-payload":
            return good[:-1]
        case "trailing-bytes":
            return good + b"\0"
        case "bad-magic":
            damaged[4] = 99
        case "header-bit":
            damaged[40] ^= 0x01
        case "payload-bit":
            damaged[-3] ^= 0x10
        case "two-batches":
            return good + good
        case _:
            raise AssertionError(kind)
    return bytes(damaged)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("random", RecordFormatError),
        ("empty", TruncatedBatchError),
        ("header-only", InvalidInputError),
        ("cut-payload", InvalidInputError),
        ("trailing-bytes", InvalidInputError),
        ("bad-magic", UnsupportedMagicError),
        ("header-bit", ChecksumMismatchError),
        ("payload-bit", ChecksumMismatchError),
        ("two-batches", InvalidInputError),
    ],
)
@pytest.mark.parametrize("stamped", [False, True], ids=["append", "append_stamped"])
def test_garbage_batch_is_rejected_and_nothing_is_written(
    open_log: Callable[..., SegmentLog], kind: str, error: type[Exception], stamped: bool
) -> None:
    log = open_log()
    stored = _append_all(log, [BATCH])
    garbage = _garbage(kind)
    if stamped and kind in {"cut-payload", "header-bit", "payload-bit", "trailing-bytes"}:
        garbage = _garbage_stamped(kind, base_offset=1)
    with pytest.raises(error):
        if stamped:
            log.append_stamped(garbage)
        else:
            log.append(garbage, term=1)
    assert log.end_offset == 1
    assert os.path.getsize(os.path.join(log.directory, _name(0))) == BATCH_BYTES
    # The log still works, and a restart finds exactly what was acknowledged.
    stored += _append_all(log, [BATCH])
    log.close()
    reopened = open_log()
    assert reopened.read(0, 1 << 20) == b"".join(stored)


def _garbage_stamped(kind: str, base_offset: int) -> bytes:
    good = bytearray(with_leader_fields(simple_batch(2, value_bytes=30), base_offset, 1))
    match kind:
        case "cut-payload":
            return bytes(good[:-1])
        case "trailing-bytes":
            return bytes(good) + b"\0"
        case "header-bit":
            good[40] ^= 0x01
        case "payload-bit":
            good[-3] ^= 0x10
    return bytes(good)


def test_batch_beyond_the_configured_limits_is_rejected(
    open_log: Callable[..., SegmentLog],
) -> None:
    limits = BatchLimits(batch_bytes_max=200, record_count_max=3)
    log = open_log(limits=limits)
    with pytest.raises(BatchLimitError):
        log.append(simple_batch(1, value_bytes=200))
    with pytest.raises(BatchLimitError):
        log.append(simple_batch(4, value_bytes=1))
    assert log.end_offset == 0
    assert log.append(simple_batch(3, value_bytes=1)) == 0


def test_every_operation_after_close_raises_log_closed(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    _append_all(log, [BATCH])
    log.save_state(b"before")
    log.close()
    log.close()  # idempotent
    operations: list[Callable[[], object]] = [
        lambda: log.append(BATCH),
        lambda: log.append_stamped(with_leader_fields(BATCH, 1, 1)),
        lambda: log.read(0, 100),
        lambda: log.truncate_suffix(0),
        lambda: log.reset(5),
        lambda: log.term_at(0),
        lambda: log.offset_for_timestamp(0),
        log.sync,
        log.enforce_retention,
        lambda: log.save_state(b"after"),
        log.load_state,
    ]
    for operation in operations:
        with pytest.raises(LogClosedError):
            operation()
    reopened = open_log()
    assert reopened.load_state() == b"before"
    assert reopened.end_offset == 1


# ---------------------------------------------------------------------------- roll


def test_roll_by_size_happens_before_an_append_would_overflow(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=3 * BATCH_BYTES)
    _append_all(log, [BATCH] * 3)
    assert _segment_files(log.directory) == [_name(0)]
    _append_all(log, [BATCH] * 4)
    assert _segment_files(log.directory) == [_name(0), _name(3), _name(6)]
    sizes = [os.path.getsize(os.path.join(log.directory, _name(base))) for base in (0, 3, 6)]
    assert sizes == [3 * BATCH_BYTES, 3 * BATCH_BYTES, BATCH_BYTES]
    # Sealed segments get their index files; the active one's live in memory.
    assert _segment_files(log.directory, "index") == [_name(0, "index"), _name(3, "index")]
    assert _segment_files(log.directory, "timeindex") == [
        _name(0, "timeindex"),
        _name(3, "timeindex"),
    ]
    log.close()
    assert len(_segment_files(log.directory, "index")) == 3


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=BATCH_BYTES + 10)
    big = simple_batch(2, value_bytes=200)
    stored = _append_all(log, [big, BATCH, big, BATCH])
    assert _segment_files(log.directory) == [_name(0), _name(2), _name(3), _name(5)]
    assert log.read(0, 1) == stored[0]
    assert log.read(3, 1) == stored[2]


def test_roll_by_age_counts_from_segment_creation(
    open_log: Callable[..., SegmentLog], clock: FakeClock
) -> None:
    log = open_log(segment_age_ms_max=1000)
    log.append(BATCH)
    clock.advance(999)
    log.append(BATCH)
    assert log.segment_count == 1
    clock.advance(1)
    log.append(BATCH)  # segment 0 was created 1000 ms ago
    assert _segment_files(log.directory) == [_name(0), _name(2)]
    clock.advance(999)
    log.append(BATCH)
    clock.advance(1)
    log.append(BATCH)
    assert _segment_files(log.directory) == [_name(0), _name(2), _name(4)]


def test_an_empty_segment_never_rolls_by_age(
    open_log: Callable[..., SegmentLog], clock: FakeClock
) -> None:
    log = open_log(segment_age_ms_max=1000)
    clock.advance(5000)
    assert log.append(BATCH) == 0
    assert _segment_files(log.directory) == [_name(0)]


# ---------------------------------------------------------------------------- retention


def test_retention_by_bytes_removes_whole_oldest_segments(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=2 * BATCH_BYTES)
    stored = _append_all(log, [BATCH] * 10)
    assert log.segment_count == 5
    log.close()
    # Oldest first, while the segments left still hold at least retention_bytes:
    # 10 -> 8 -> 6 batches; dropping a third would leave 4 < 5.
    log = open_log(segment_bytes_max=2 * BATCH_BYTES, retention_bytes=5 * BATCH_BYTES)
    assert log.start_offset == 0  # retention does not run on open
    assert log.enforce_retention() == 2
    assert log.start_offset == 4
    assert log.size_bytes == 6 * BATCH_BYTES
    assert _segment_files(log.directory) == [_name(4), _name(6), _name(8)]
    # Sealed segments keep their index files; the active one's were dropped on open.
    assert _segment_files(log.directory, "index") == [_name(4, "index"), _name(6, "index")]
    assert log.read(4, 1 << 20) == b"".join(stored[4:6])
    assert log.enforce_retention() == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    log.close()
    assert open_log(segment_bytes_max=2 * BATCH_BYTES).start_offset == 4


def test_retention_never_deletes_the_active_segment(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(segment_bytes_max=2 * BATCH_BYTES, retention_bytes=0)
    _append_all(log, [BATCH] * 5)  # rolls at offsets 2 and 4, each applies retention
    assert _segment_files(log.directory) == [_name(4)]
    assert (log.start_offset, log.end_offset) == (4, 5)
    assert log.enforce_retention() == 0
    assert log.segment_count == 1


def _timed_batch(*timestamps_ms: int) -> bytes:
    return make_batch([(timestamp_ms, None, b"v") for timestamp_ms in timestamps_ms])


def test_retention_by_age_uses_the_newest_record_of_each_segment(
    open_log: Callable[..., SegmentLog], clock: FakeClock
) -> None:
    one = len(_timed_batch(0))
    log = open_log(segment_bytes_max=2 * one, retention_ms=1000, segment_age_ms_max=10**9)
    # Segments by base offset: 0 holds ts 0, 1; 2 holds 500, 2000; 4 holds 10, 20; 6 is active.
    for timestamp_ms in (0, 1, 500, 2000, 10, 20, 30):
        log.append(_timed_batch(timestamp_ms))
    assert _segment_files(log.directory) == [_name(0), _name(2), _name(4), _name(6)]
    clock.now_ms = 1001
    assert log.enforce_retention() == 0  # segment 0's newest record (1) is exactly 1000 old
    clock.now_ms = 1002
    # Only a prefix goes: segment 4 is old too but sits behind segment 2's new record.
    assert log.enforce_retention() == 1
    assert log.start_offset == 2
    clock.now_ms = 3001
    assert log.enforce_retention() == 2
    assert _segment_files(log.directory) == [_name(6)]
    assert (log.start_offset, log.end_offset) == (6, 7)
    clock.now_ms = 10**9
    assert log.enforce_retention() == 0  # the active segment stays


def test_roll_applies_age_retention(open_log: Callable[..., SegmentLog], clock: FakeClock) -> None:
    log = open_log(segment_bytes_max=len(_timed_batch(0)), retention_ms=100)
    log.append(_timed_batch(0))
    clock.now_ms = 1000
    log.append(_timed_batch(1000))  # rolls; segment 0 (newest record 0) is expired
    assert _segment_files(log.directory) == [_name(1)]
    assert log.start_offset == 1


# ---------------------------------------------------------------------------- truncation


def test_truncate_inside_a_batch_removes_that_whole_batch(
    open_log: Callable[..., SegmentLog], index_interval_bytes: int
) -> None:
    log = open_log(index_interval_bytes=index_interval_bytes)
    stored = _append_all(log, [simple_batch(3), simple_batch(4), simple_batch(2)])
    assert log.truncate_suffix(5) == 3  # offset 5 is inside batch [3, 7): rounds down to 3
    assert (log.end_offset, log.last_term) == (3, 1)
    assert log.read(0, 1 << 20) == stored[0]
    assert os.path.getsize(os.path.join(log.directory, _name(0))) == len(stored[0])
    assert log.append(BATCH, term=2) == 3
    assert log.truncate_suffix(log.end_offset) == 4  # at the end: nothing to do
    assert log.end_offset == 4


def test_truncate_into_a_sealed_segment(open_log: Callable[..., SegmentLog]) -> None:
    config = {"segment_bytes_max": 2 * BATCH_BYTES}
    log = open_log(**config)
    stored = _append_all(log, [BATCH] * 7)
    assert _segment_files(log.directory) == [_name(0), _name(2), _name(4), _name(6)]
    assert log.truncate_suffix(3) == 3
    assert _segment_files(log.directory) == [_name(0), _name(2)]
    # The segment became active: its stale index files are gone.
    assert _segment_files(log.directory, "index") == [_name(0, "index")]
    assert (log.end_offset, log.segment_count) == (3, 2)
    stored = stored[:3] + _append_all(log, [BATCH] * 3, term=2)
    assert _segment_files(log.directory) == [_name(0), _name(2), _name(4)]
    assert log.term_at(2) == 1
    assert log.term_at(3) == 2
    log.close()
    reopened = open_log(**config)
    assert reopened.end_offset == 6
    data = b"".join(reopened.read(offset, 1 << 20) for offset in (0, 2, 4))
    assert data == b"".join(stored)


def test_truncate_to_a_segment_base_drops_that_segment(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=2 * BATCH_BYTES)
    _append_all(log, [BATCH] * 5)
    assert log.truncate_suffix(2) == 2
    # Segment 0 ends where segment 2 began, so it is the active one again.
    assert _segment_files(log.directory) == [_name(0)]
    assert _segment_files(log.directory, "index") == []
    assert (log.end_offset, log.last_term, log.segment_count) == (2, 1, 1)
    assert log.read(2, 100) == b""
    assert log.append(BATCH, term=2) == 2
    assert _segment_files(log.directory) == [_name(0), _name(2)]  # full: rolls again


def test_truncate_to_start_empties_the_log(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(initial_offset=7, segment_bytes_max=2 * BATCH_BYTES)
    _append_all(log, [BATCH] * 5, term=3)
    assert log.truncate_suffix(7) == 7
    assert (log.start_offset, log.end_offset, log.last_term) == (7, 7, -1)
    assert _segment_files(log.directory) == [_name(7)]
    assert log.offset_for_timestamp(0) is None
    assert log.append(BATCH, term=1) == 7  # terms may restart: nothing is left
    log.close()
    reopened = open_log()
    assert (reopened.start_offset, reopened.end_offset, reopened.last_term) == (7, 8, 1)


# ---------------------------------------------------------------------------- timestamps


def _expected_offset(timestamps_ms: list[int], start: int, timestamp_ms: int) -> int | None:
    for index, record_ms in enumerate(timestamps_ms):
        if record_ms >= timestamp_ms:
            return start + index
    return None


def test_offset_for_timestamp_with_monotonic_timestamps(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=250, index_interval_bytes=1)
    for first in range(0, 100, 10):
        log.append(make_batch([(first + step, None, b"x" * 20) for step in range(0, 10, 2)]))
    assert log.segment_count > 2
    assert log.offset_for_timestamp(-(2**63)) == 0
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1) == 1
    assert log.offset_for_timestamp(8) == 4
    assert log.offset_for_timestamp(9) == 5
    assert log.offset_for_timestamp(98) == 49
    assert log.offset_for_timestamp(99) is None


def test_offset_for_timestamp_with_non_monotonic_timestamps(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(index_interval_bytes=1)
    # The first record at or above the target in offset order, even when a later
    # record has an earlier timestamp.
    log.append(make_batch([(50, None, b"a"), (10, None, b"b"), (30, None, b"c")]))
    log.append(make_batch([(5, None, b"d"), (60, None, b"e")]))
    log.append(make_batch([(-3, None, b"f")]))
    expected = {-5: 0, 5: 0, 50: 0, 51: 4, 60: 4, 61: None}
    assert {ts: log.offset_for_timestamp(ts) for ts in expected} == expected


def test_timestamp_zero_survives_truncation_and_reopen(
    open_log: Callable[..., SegmentLog],
) -> None:
    # A segment whose newest record has timestamp 0, followed by older records:
    # 0 is a real timestamp, not "no timestamp".
    config = {"index_interval_bytes": 1, "segment_bytes_max": 3 * len(_timed_batch(0))}
    log = open_log(**config)
    for timestamp_ms in (0, -5, -7):
        log.append(_timed_batch(timestamp_ms))
    assert log.offset_for_timestamp(0) == 0
    assert log.truncate_suffix(2) == 2
    assert log.offset_for_timestamp(0) == 0
    log.append(_timed_batch(-9))
    log.append(_timed_batch(-9))  # rolls: segment 0 is sealed with its index files
    assert log.segment_count == 2
    log.close()
    reopened = open_log(**config)
    assert reopened.offset_for_timestamp(0) == 0
    assert reopened.offset_for_timestamp(-8) == 0
    assert reopened.offset_for_timestamp(1) is None


@pytest.mark.parametrize("seed", range(6))
def test_offset_for_timestamp_matches_a_scan(
    open_log: Callable[..., SegmentLog], seed: int
) -> None:
    rng = random.Random(seed)
    config = {"segment_bytes_max": 400, "index_interval_bytes": rng.choice([1, 150, 10**6])}
    log = open_log(**config)
    timestamps_ms: list[int] = []
    for _ in range(40):
        batch_ms = [rng.randint(-4, 8) for _ in range(rng.randint(1, 4))]
        log.append(make_batch([(ms, None, b"v" * rng.randint(0, 30)) for ms in batch_ms]))
        timestamps_ms += batch_ms

    def check(log: SegmentLog) -> None:
        for target in range(-6, 11):
            expected = _expected_offset(timestamps_ms, 0, target)
            assert log.offset_for_timestamp(target) == expected, (seed, target)

    check(log)
    cut = rng.randrange(1, log.end_offset)
    end = log.truncate_suffix(cut)
    del timestamps_ms[end:]
    check(log)
    log.close()
    reopened = open_log(**config)
    assert reopened.end_offset == end
    check(reopened)


# ---------------------------------------------------------------------------- fsync spies


@dataclass
class SyncSpy:
    """Counts fsync and fdatasync calls; snapshots the directory at each directory fsync."""

    directory: str
    file_syncs: list[int] = field(default_factory=list)  # inode of each file fsync
    data_syncs: int = 0
    directory_listings: list[set[str]] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_fsync, real_fdatasync = os.fsync, os.fdatasync

        def fsync(descriptor: int) -> None:
            status = os.fstat(descriptor)
            if stat.S_ISDIR(status.st_mode):
                self.directory_listings.append(set(os.listdir(self.directory)))
            else:
                self.file_syncs.append(status.st_ino)
            real_fsync(descriptor)

        def fdatasync(descriptor: int) -> None:
            self.data_syncs += 1
            real_fdatasync(descriptor)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)

    def reset(self) -> None:
        self.file_syncs.clear()
        self.data_syncs = 0
        self.directory_listings.clear()


@pytest.fixture
def spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SyncSpy:
    (tmp_path / "log").mkdir()
    result = SyncSpy(str(tmp_path / "log"))
    result.install(monkeypatch)
    return result


def _inode(directory: str, name: str) -> int:
    return os.stat(os.path.join(directory, name)).st_ino


def test_directory_is_synced_after_segment_creation_and_deletion(
    open_log: Callable[..., SegmentLog], spy: SyncSpy
) -> None:
    log = open_log(segment_bytes_max=BATCH_BYTES, retention_bytes=2 * BATCH_BYTES)
    assert any(_name(0) in listing for listing in spy.directory_listings)

    spy.reset()
    _append_all(log, [BATCH] * 2)  # rolls: creates segment 1
    assert any(_name(1) in listing for listing in spy.directory_listings)

    spy.reset()
    _append_all(log, [BATCH] * 2)  # rolls twice; the second deletes segment 0 by retention
    assert log.start_offset == 1
    assert any(
        _name(3) in listing and _name(0) not in listing for listing in spy.directory_listings
    )

    spy.reset()
    log.truncate_suffix(2)  # deletes segment 3
    assert spy.directory_listings
    assert _name(3) not in spy.directory_listings[-1]

    spy.reset()
    log.reset(50)  # deletes everything, creates segment 50
    assert spy.directory_listings[-1] == {_name(50)}


def test_never_policy_syncs_only_to_seal(open_log: Callable[..., SegmentLog], spy: SyncSpy) -> None:
    log = open_log(segment_bytes_max=3 * BATCH_BYTES, fsync_policy=FsyncPolicy.NEVER)
    spy.reset()
    _append_all(log, [BATCH] * 3)
    assert (spy.data_syncs, spy.file_syncs) == (0, [])
    _append_all(log, [BATCH])  # rolls: the sealed segment and its indexes are fsynced
    directory = log.directory
    sealed = {_inode(directory, _name(0, suffix)) for suffix in ("log", "index", "timeindex")}
    assert set(spy.file_syncs) == sealed
    assert spy.data_syncs == 0


def test_interval_policy_syncs_once_the_interval_has_passed(
    open_log: Callable[..., SegmentLog], spy: SyncSpy, clock: FakeClock
) -> None:
    log = open_log(fsync_policy=FsyncPolicy.INTERVAL, fsync_interval_ms=100)
    spy.reset()
    log.append(BATCH)
    clock.advance(99)
    log.append(BATCH)
    assert spy.data_syncs == 0
    clock.advance(1)
    log.append(BATCH)
    assert spy.data_syncs == 1
    clock.advance(99)
    log.append(BATCH)  # 99 ms since the last sync
    assert spy.data_syncs == 1
    log.sync()  # the node's timer forces one whenever it likes
    assert spy.data_syncs == 2
    clock.advance(99)
    log.append(BATCH)  # the forced sync restarted the interval
    assert spy.data_syncs == 2
    assert spy.file_syncs == []


def test_always_policy_syncs_before_each_append_returns(
    open_log: Callable[..., SegmentLog], spy: SyncSpy
) -> None:
    log = open_log(fsync_policy=FsyncPolicy.ALWAYS)
    spy.reset()
    for expected in range(1, 6):
        log.append(BATCH)
        assert spy.data_syncs == expected
    log.sync()  # everything is durable already: no fsync needed
    assert spy.data_syncs == 5


def test_always_policy_group_commit_shares_fsyncs(
    open_log: Callable[..., SegmentLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four appenders, in rounds; each fdatasync is held until the whole round has written.

    The file size seen when an fdatasync starts is durable once it returns; every
    append must return only after a durable size that covers its batch.
    """
    writers, rounds = 4, 6
    log = open_log(fsync_policy=FsyncPolicy.ALWAYS)
    condition = threading.Condition()
    progress = {"writes": 0, "syncs": 0, "durable_bytes": 0}
    real_pwritev, real_fdatasync = os.pwritev, os.fdatasync

    def pwritev(descriptor: int, buffers: list[Any], position: int) -> int:
        written = real_pwritev(descriptor, buffers, position)
        with condition:
            progress["writes"] += 1
            condition.notify_all()
        return written

    def fdatasync(descriptor: int) -> None:
        with condition:
            whole_round = condition.wait_for(
                lambda: progress["writes"] % writers == 0, GATE_TIMEOUT_S
            )
            assert whole_round, "a round's appends never all reached the file"
        size = os.fstat(descriptor).st_size
        real_fdatasync(descriptor)
        with condition:
            progress["syncs"] += 1
            progress["durable_bytes"] = max(progress["durable_bytes"], size)

    monkeypatch.setattr(os, "pwritev", pwritev)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    barrier = threading.Barrier(writers, timeout=GATE_TIMEOUT_S)

    def appender() -> list[int]:
        uncovered = []
        for _ in range(rounds):
            barrier.wait()
            base = log.append(BATCH, term=1)
            with condition:
                if progress["durable_bytes"] < (base + 1) * BATCH_BYTES:
                    uncovered.append(base)
        return uncovered

    with ThreadPoolExecutor(writers) as pool:
        results = [pool.submit(appender) for _ in range(writers)]
        uncovered = [base for result in results for base in result.result(GATE_TIMEOUT_S * 3)]
    appends = writers * rounds
    assert uncovered == []
    assert log.end_offset == appends
    # Per round: at most the first syncer's fsync and one more for everyone else.
    assert rounds <= progress["syncs"] <= 2 * rounds < appends


# ---------------------------------------------------------------------------- state file


def test_state_roundtrip_and_persistence(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    assert log.load_state() is None
    log.save_state(b"term=1")
    log.save_state(b"term=2;vote=a")
    assert log.load_state() == b"term=2;vote=a"
    log.save_state(b"")
    assert log.load_state() == b""
    log.save_state(b"x" * 10_000)
    log.close()
    assert open_log().load_state() == b"x" * 10_000


def test_save_state_is_synced_then_renamed_then_directory_synced(
    open_log: Callable[..., SegmentLog], spy: SyncSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()
    events: list[str] = []
    real_replace = os.replace

    def replace(source: str, target: str) -> None:
        events.append(f"replace syncs={len(spy.file_syncs)}")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    spy.reset()
    log.save_state(b"term=3")
    assert events == ["replace syncs=1"]  # the temporary was fsynced before the rename
    assert len(spy.file_syncs) == 1
    assert spy.directory_listings[-1] >= {"state"}
    assert "state.tmp" not in spy.directory_listings[-1]


@pytest.mark.parametrize("failing", ["fdatasync", "pwrite"])
def test_a_failed_save_state_never_touches_the_durable_state(
    open_log: Callable[..., SegmentLog], monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    log = open_log()
    log.save_state(b"old")
    log.save_state(b"older than new")

    def fail(*_: object) -> None:
        raise OSError("disk on fire")

    with monkeypatch.context() as patch:
        patch.setattr(os, failing, fail)
        with pytest.raises(OSError, match="disk on fire"):
            log.save_state(b"new")
    # Written in place over the slot that was not the durable one: the durable
    # state is intact whatever the failed write left (a later save reuses the slot).
    data = (Path(log.directory) / "state").read_bytes()
    size = len(data) // 2
    held = [decode_slot(data[i * size : (i + 1) * size], size) for i in (0, 1)]
    assert (2, b"older than new") in held
    assert StateFile(log.directory).load() in (b"older than new", b"new")
    log.save_state(b"next")
    log.close()
    reopened = open_log()
    assert reopened.load_state() == b"next"


# ---------------------------------------------------------------------------- MemoryLog


def _records(count: int, first_ms: int = 0) -> list[RecordSpec]:
    return [(first_ms + index, None, b"m") for index in range(count)]


def test_memory_log_crash_loses_unsynced_appends() -> None:
    log = MemoryLog(fsync=False)
    log.save_state(b"vote=a")
    first = log.append(make_batch(_records(2)), term=1)
    log.sync()
    log.append(make_batch(_records(3)), term=1)
    assert (first, log.end_offset, log.synced_end_offset) == (0, 5, 2)
    survivor = log.crash()
    assert (survivor.start_offset, survivor.end_offset, survivor.last_term) == (0, 2, 1)
    assert survivor.read(0, 1 << 20) == with_leader_fields(make_batch(_records(2)), 0, 1)
    assert survivor.load_state() == b"vote=a"
    assert survivor.append(BATCH, term=2) == 2


def test_memory_log_truncation_is_durable_at_once() -> None:
    log = MemoryLog(fsync=False)
    for _ in range(3):
        log.append(BATCH, term=1)
    log.sync()
    log.truncate_suffix(1)
    log.append(BATCH, term=2)  # unsynced
    survivor = log.crash()
    assert (survivor.end_offset, survivor.last_term) == (1, 1)


def test_memory_log_with_fsync_keeps_everything() -> None:
    log = MemoryLog(start_offset=10)
    for _ in range(3):
        log.append(BATCH, term=1)
    survivor = log.crash()
    assert (survivor.start_offset, survivor.end_offset) == (10, 13)
    assert survivor.read(10, 1 << 20) == log.read(10, 1 << 20)


@pytest.mark.parametrize("kind", ["random", "trailing-bytes", "header-bit", "payload-bit"])
def test_memory_log_rejects_garbage_like_the_disk_log(kind: str) -> None:
    log = MemoryLog()
    with pytest.raises(InvalidInputError):
        log.append(_garbage(kind), term=1)
    assert log.end_offset == 0


def test_memory_log_operations_after_close_raise() -> None:
    log = MemoryLog()
    log.close()
    with pytest.raises(LogClosedError):
        log.append(BATCH)
    with pytest.raises(LogClosedError):
        log.read(0, 10)


def _count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patches ``os.pread`` to record the position of every call in the returned list."""
    calls: list[int] = []
    real_pread = os.pread

    def counting_pread(descriptor: int, length: int, position: int) -> bytes:
        calls.append(position)
        return real_pread(descriptor, length, position)

    monkeypatch.setattr(os, "pread", counting_pread)
    return calls


def test_reading_recent_batches_needs_one_pread(
    open_log: Callable[..., SegmentLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The leader sends every new batch to its followers right after appending it:
    # reading a batch just appended must not scan headers from the last index entry.
    log = open_log(index_interval_bytes=1 << 20)
    stored = _append_all(log, [simple_batch(2) for _ in range(100)])
    calls = _count_preads(monkeypatch)
    for number in (99, 60, 98):
        calls.clear()
        assert log.read(2 * number, 1 << 20) == b"".join(stored[number:])
        assert len(calls) == 1
    calls.clear()
    assert log.read(2 * 99 + 1, 1 << 20) == stored[99]  # inside the batch
    assert len(calls) <= 2


def test_locating_an_older_batch_reads_its_index_interval_at_once(
    open_log: Callable[..., SegmentLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beyond the recent appends, a read finds its batch from the sparse index entry
    # below it: one pread covers the headers up to the next entry, then one more
    # reads the batches (not one pread per header walked).
    log = open_log(index_interval_bytes=16 * BATCH_BYTES)
    stored = _append_all(log, [BATCH] * 600)  # older than the recent-append ring
    log.close()
    log = open_log(index_interval_bytes=16 * BATCH_BYTES)  # no recent appends at all
    calls = _count_preads(monkeypatch)
    for number in (15, 16, 17, 100, 311, 599):
        calls.clear()
        assert log.read(number, BATCH_BYTES) == stored[number]
        assert len(calls) <= 2, (number, calls)


def test_recent_batches_stay_right_after_truncation(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(index_interval_bytes=1 << 20)
    _append_all(log, [simple_batch(2) for _ in range(10)])
    log.truncate_suffix(10)  # drops batches 5..9
    again = _append_all(log, [simple_batch(3, value_bytes=33) for _ in range(4)], term=2)
    assert log.end_offset == 22
    for number in range(len(again)):
        assert log.read(10 + 3 * number, 1 << 20) == b"".join(again[number:])
    assert log.read(11, 1 << 20) == b"".join(again)  # inside the first new batch


def test_retention_offset_names_what_may_go_and_delete_before_drops_it(
    open_log: Callable[..., SegmentLog],
) -> None:
    # The replica core decides when to delete (never past its high watermark): the
    # log only says how far its topic's limits allow, by whole segments.
    log = open_log(segment_bytes_max=2 * BATCH_BYTES)
    _append_all(log, [BATCH] * 10)  # segments at 0, 2, 4, 6, 8
    now_ms = 10**12
    assert log.retention_offset(now_ms, None, None) == 0
    assert log.retention_offset(now_ms, 5 * BATCH_BYTES, None) == 4
    assert log.retention_offset(now_ms, 1, None) == 8  # never the active segment
    assert log.retention_offset(now_ms, None, 1) == 8  # the batches' timestamps are old
    assert log.start_offset == 0  # nothing deleted by asking
    log.delete_before(5)  # only whole segments that end at or below 5
    assert log.start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    log.delete_before(100)
    assert log.start_offset == 8 and log.end_offset == 10


def test_memory_log_retention_works_batch_by_batch() -> None:
    log = MemoryLog(fsync=False)
    for _ in range(4):
        log.append(BATCH, term=1)
    size = len(log.read(0, 1 << 20)) // 4
    assert log.retention_offset(10**12, 2 * size, None) == 2
    assert log.retention_offset(10**12, None, 1) == 3
    log.delete_before(2)
    assert log.start_offset == 2
