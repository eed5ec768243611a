"""Logs with gaps between batches (keyed compaction) and the segment swap, on both
storages: SegmentLog on disk and MemoryLog.

A log here is built from stamped batches of one record each at chosen offsets, so
that every expected answer (reads, terms, timestamps) is computed from the list
written, independently of the log's own bookkeeping.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar.errors import InvalidInputError, NonMonotonicOffsetError, OffsetOutOfRangeError
from laminar.records import encode_batch, encode_control_batch, parse_header, with_leader_fields
from laminar.replica.epochs import Epochs
from laminar.segment import FsyncPolicy, LogConfig, MemoryLog, SegmentLog
from laminar.segment.files import SegmentFiles
from laminar.segment.layout import replacement_path
from laminar.segment.storage import LogStorage, SegmentSummary
from tests.segment.support import FakeClock, open_files_under, scrub_pass, split_batches

CONFIG = LogConfig(
    segment_bytes_max=1 << 20,
    index_interval_bytes=256,
    fsync_policy=FsyncPolicy.NEVER,
    retention_ms=None,
)


@dataclass(frozen=True)
class Stamped:
    base: int
    count: int
    term: int
    timestamp_ms: int
    data: bytes

    @property
    def next(self) -> int:
        return self.base + self.count


def stamped(base: int, term: int, *, count: int = 1, timestamp_ms: int | None = None) -> Stamped:
    """A batch of ``count`` records at ``base`` (timestamps ``base * 10`` on)."""
    first_ms = base * 10 if timestamp_ms is None else timestamp_ms
    raw = encode_batch(
        [f"v{base + i}".encode() for i in range(count)],
        keys=[f"k{(base + i) % 3}".encode() for i in range(count)],
        timestamps_ms=[first_ms + i for i in range(count)],
    )
    return Stamped(base, count, term, first_ms, with_leader_fields(raw, base, term))


Opener = Callable[..., LogStorage]


@pytest.fixture(params=["disk", "memory"])
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens (and reopens, for the disk) one log; closes what it opened."""
    opened: list[LogStorage] = []

    def opener(start_offset: int = 0) -> LogStorage:
        log: LogStorage
        if request.param == "disk":
            log = SegmentLog.open(
                str(tmp_path / "log"), CONFIG, initial_offset=start_offset, clock_ms=FakeClock()
            )
        else:
            log = MemoryLog(start_offset, segment_batches_max=1000)
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def fill(
    log: LogStorage, batches: list[Stamped], *, roll_before: frozenset[int] = frozenset()
) -> None:
    """Append ``batches`` as a follower would (gaps vouched for by ``after``),
    rolling the active segment before each base in ``roll_before``."""
    for batch in batches:
        if batch.base in roll_before:
            log.roll()
        assert log.append_stamped(batch.data, after=log.end_offset) == batch.base


def read_all(log: LogStorage, *, max_bytes: int = 1) -> list[bytes]:
    found: list[bytes] = []
    offset = log.start_offset
    while offset < log.end_offset:
        got = split_batches(log.read(offset, max_bytes))
        if not got:
            break
        found += got
        offset = parse_header(got[-1]).next_offset
    return found


def holder(batches: list[Stamped], offset: int) -> Stamped | None:
    """The batch a read at ``offset`` starts with: the one holding it or the next."""
    return next((batch for batch in batches if batch.next > offset), None)


def term_expected(batches: list[Stamped], offset: int) -> int:
    before = [batch for batch in batches if batch.base <= offset]
    return before[-1].term if before else -1


# --------------------------------------------------------------------------- appends


def test_append_stamped_accepts_a_gap_only_when_the_leader_vouches_for_it(
    open_log: Opener,
) -> None:
    log = open_log()
    log.append_stamped(stamped(0, 1, count=3).data)
    gapped = stamped(7, 1).data
    with pytest.raises(NonMonotonicOffsetError):
        log.append_stamped(gapped)  # no `after`: dense, as before
    with pytest.raises(NonMonotonicOffsetError):
        log.append_stamped(gapped, after=2)  # the leader's end is not ours
    with pytest.raises(NonMonotonicOffsetError):
        log.append_stamped(stamped(2, 1).data, after=3)  # overlaps the last batch
    assert log.end_offset == 3
    assert log.append_stamped(gapped, after=3) == 7
    assert log.end_offset == 8
    assert log.append_stamped(stamped(8, 2).data, after=8) == 8  # no gap: fine too


def test_reads_terms_and_timestamps_over_gaps(open_log: Opener) -> None:
    batches = [
        stamped(0, 1, count=2),
        stamped(5, 1),
        stamped(6, 2, count=3),
        stamped(20, 2),
        stamped(21, 4),
        stamped(30, 4, count=2),
    ]
    log = open_log()
    fill(log, batches, roll_before=frozenset({20, 30}))
    assert (log.start_offset, log.end_offset, log.last_term) == (0, 32, 4)
    for offset in range(0, 32):
        expected = holder(batches, offset)
        assert expected is not None
        assert split_batches(log.read(offset, 1)) == [expected.data], offset
        assert log.term_at(offset) == term_expected(batches, offset), offset
    assert read_all(log) == [batch.data for batch in batches]
    assert read_all(log, max_bytes=1 << 20) == [batch.data for batch in batches]
    for timestamp_ms in range(-5, 320):
        after = [
            batch.base + i
            for batch in batches
            for i in range(batch.count)
            if batch.timestamp_ms + i >= timestamp_ms
        ]
        assert log.offset_for_timestamp(timestamp_ms) == (after[0] if after else None)
    with pytest.raises(OffsetOutOfRangeError):
        log.term_at(32)


def test_a_gapped_disk_log_reopens_unchanged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = [stamped(0, 1), stamped(4, 1, count=2), stamped(9, 2), stamped(15, 3), stamped(18, 3)]
    directory = str(tmp_path / "log")
    with SegmentLog.open(directory, CONFIG) as log:
        fill(log, batches, roll_before=frozenset({9}))
    files = sorted(os.listdir(directory))
    caplog.set_level(logging.INFO, logger="laminar.segment")
    with SegmentLog.open(directory, CONFIG) as log:
        assert log.damage_found is None
        assert (log.end_offset, log.last_term) == (19, 3)
        assert read_all(log) == [batch.data for batch in batches]
        assert [log.term_at(o) for o in range(19)] == [term_expected(batches, o) for o in range(19)]
    assert sorted(os.listdir(directory)) == files
    assert not [r for r in caplog.records if "rebuilding index" in r.getMessage()]
    assert not [r for r in caplog.records if "truncating" in r.getMessage()]


def test_an_emptied_segment_reopens_without_an_index_rebuild(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    batches = [stamped(i, 1 + i // 6) for i in range(12)]
    directory = str(tmp_path / "log")
    with SegmentLog.open(directory, CONFIG) as log:
        fill(log, batches, roll_before=frozenset({3, 6, 9}))
        log.replace_segment(3, [])  # every record of [3, 6) superseded
        log.replace_segment(6, [])  # [6, 9): its term's first batch too, here
    caplog.set_level(logging.INFO, logger="laminar.segment")
    with SegmentLog.open(directory, CONFIG) as log:
        held = batches[:3] + batches[9:]
        assert read_all(log) == [b.data for b in held]
        assert [log.term_at(o) for o in range(12)] == [term_expected(held, o) for o in range(12)]
        assert log.offset_for_timestamp(35) == 9  # the batches stamped 30-80 are gone
    assert not [r for r in caplog.records if "rebuilding index" in r.getMessage()]


def test_recovery_still_cuts_an_overlapping_or_older_term_batch(tmp_path: Path) -> None:
    directory = str(tmp_path / "log")
    with SegmentLog.open(directory, CONFIG) as log:
        fill(log, [stamped(0, 2, count=3), stamped(6, 2)])
    active = Path(directory) / f"{0:020d}.log"
    good = active.read_bytes()
    for bad in (stamped(5, 2).data, stamped(9, 1).data):  # overlaps; term goes back
        active.write_bytes(good + bad)
        with SegmentLog.open(directory, CONFIG) as log:
            assert log.end_offset == 7
            assert log.damage_found is not None
        assert active.read_bytes() == good


def test_truncation_in_a_gap_keeps_the_batches_before_it(open_log: Opener) -> None:
    log = open_log()
    fill(log, [stamped(0, 1), stamped(5, 1), stamped(9, 2)])
    assert log.truncate_suffix(7) == 6
    assert log.end_offset == 6
    assert read_all(log) == [stamped(0, 1).data, stamped(5, 1).data]
    assert log.truncate_suffix(3) == 1
    assert log.append_stamped(stamped(1, 2).data) == 1
    # A cut at a batch after a gap: the end is the batch before the gap's end (what
    # a reopened log finds), and the leader's next batch comes with that as `after`.
    log.append_stamped(stamped(4, 2, count=3).data, after=2)
    assert log.truncate_suffix(5) == 2
    assert log.append_stamped(stamped(6, 3).data, after=2) == 6


@pytest.mark.parametrize(("start", "start_term"), [(0, -1), (40, 1)])
def test_epochs_are_the_same_on_a_compacted_log(
    open_log: Opener, start: int, start_term: int
) -> None:
    """Each term starts with a batch compaction keeps (its noop): removing any other
    batches from sealed segments leaves Epochs.from_storage unchanged, for a log
    starting at 0 and for one starting later (retention) whose first batches go,
    leaving a gap at its start."""
    log = open_log(start)
    # A later log's first term began below its start: no noop at ``start`` then.
    noops = {start + 7, start + 15, start + 31} | ({0} if start == 0 else set())
    batches = [
        stamped(o, 1 + sum(1 for n in noops if 0 < n <= o)) for o in range(start, start + 40)
    ]
    fill(log, batches, roll_before=frozenset({start + 12, start + 25, start + 35}))
    before = Epochs.from_storage(log, start_term)
    assert len(before.as_list()) == 4
    for base, end in log.sealed_segments():
        log.replace_segment(
            base,
            [
                b.data
                for b in batches
                if base <= b.base < end and (b.base in noops or b.base % 4 == 3)
            ],
        )
    assert log.term_at(start) == (1 if start == 0 else -1)
    assert len(read_all(log)) < len(batches)
    after = Epochs.from_storage(log, start_term)
    assert after.as_list() == before.as_list()
    assert (after.start_offset, after.start_term) == (before.start_offset, before.start_term)
    assert log.start_offset == start


def _segment_end(log: LogStorage, base: int) -> int:
    return dict(log.sealed_segments())[base]


# --------------------------------------------------------------------------- segments


def test_roll_and_sealed_segments(open_log: Opener) -> None:
    log = open_log()
    assert log.sealed_segments() == []
    log.roll()  # nothing in the active segment: nothing happens
    assert log.sealed_segments() == []
    fill(log, [stamped(0, 1, count=3), stamped(3, 1)])
    log.roll()
    log.roll()
    fill(log, [stamped(4, 1)])
    log.roll()
    assert log.sealed_segments() == [(0, 4), (4, 5)]
    assert list(log.read_segment(0)) == [stamped(0, 1, count=3).data, stamped(3, 1).data]
    assert list(log.read_segment(5)) == []
    with pytest.raises(InvalidInputError):
        log.read_segment(3)


def test_memory_log_rolls_every_segment_batches_max() -> None:
    log = MemoryLog(segment_batches_max=3)
    fill(log, [stamped(i, 1) for i in range(8)])
    assert log.sealed_segments() == [(0, 3), (3, 6)]
    with pytest.raises(InvalidInputError):
        MemoryLog(segment_batches_max=0)


def test_replace_segment_swaps_a_sealed_segment(open_log: Opener) -> None:
    batches = [stamped(i, 1 + i // 8) for i in range(12)]  # term 2 starts at 8
    log = open_log()
    fill(log, batches, roll_before=frozenset({4, 8}))
    kept = [batches[1], batches[3]]
    log.replace_segment(0, [b.data for b in kept])
    log.replace_segment(4, [])  # a segment compaction emptied
    remaining = kept + batches[8:]
    assert (log.start_offset, log.end_offset) == (0, 12)
    assert read_all(log) == [b.data for b in remaining]
    assert list(log.read_segment(0)) == [b.data for b in kept]
    assert list(log.read_segment(4)) == []
    assert log.sealed_segments() == [(0, 4), (4, 8)]
    for offset in range(12):
        expected = holder(remaining, offset)
        assert expected is not None
        assert split_batches(log.read(offset, 1)) == [expected.data]
    # Terms in the gaps are those of the batches before them: the original terms.
    assert [log.term_at(o) for o in range(1, 12)] == [b.term for b in batches[1:]]
    assert log.term_at(0) == -1  # a gap at the log start: the caller's start term
    assert log.append(encode_batch([b"next"]), term=3) == 12


def test_segment_summary_is_the_stored_bytes_and_newest_and_oldest_timestamps(
    open_log: Opener,
) -> None:
    # Timestamps out of order (the newest is not the last batch), several index
    # entries per segment (CONFIG's 256-byte interval), one segment emptied.
    stamps = [70, 20, 90, 10, 30, 50, 40, 60, 5, 8, 100, 3]
    batches = [stamped(i, 1, count=2, timestamp_ms=ms) for i, ms in
               zip(range(0, 24, 2), stamps, strict=True)]  # fmt: skip
    log = open_log()
    fill(log, batches, roll_before=frozenset({8, 16, 20}))
    log.replace_segment(16, [])

    def expected() -> dict[int, SegmentSummary]:
        found: dict[int, SegmentSummary] = {}
        for base, end in [*log.sealed_segments(), (20, log.end_offset)]:
            held = [b for b in batches if base <= b.base < end and not 16 <= b.base < 20]
            newest = max((b.timestamp_ms + b.count - 1 for b in held), default=None)
            oldest = min((b.timestamp_ms for b in held), default=None)
            found[base] = SegmentSummary(sum(len(b.data) for b in held), newest, oldest)
        return found

    summaries = {base: log.segment_summary(base) for base in (0, 8, 16, 20)}
    assert summaries == expected()
    # Batch 8's 2nd record is the newest, batch 6's first the oldest.
    assert summaries[0] == SegmentSummary(sum(len(b.data) for b in batches[:4]), 91, 10)
    assert summaries[16] == SegmentSummary(0, None, None)
    for base, _ in log.sealed_segments():  # the bytes are those read_segment yields
        assert summaries[base].size_bytes == sum(len(batch) for batch in log.read_segment(base))
    with pytest.raises(InvalidInputError):
        log.segment_summary(2)
    if isinstance(log, SegmentLog):  # from the index files again, after a reopen
        log.close()
        log = open_log()
        # The oldest of a sealed segment is now its first batch's (the active one's
        # batches are all read at open: exact).
        reopened = {**summaries, 0: dataclasses.replace(summaries[0], oldest_timestamp_ms=70)}
        assert {base: log.segment_summary(base) for base in (0, 8, 16, 20)} == reopened


def test_segment_summary_oldest_skips_control_batches_and_forgets_what_truncation_cut(
    open_log: Opener,
) -> None:
    # A control batch's timestamp is the leader's monotonic clock: no record's age.
    control = with_leader_fields(encode_control_batch(b"noop", b"", 1), 0, 1)
    log = open_log()
    log.append_stamped(control, after=0)
    fill(log, [stamped(1, 1, timestamp_ms=50), stamped(2, 1, timestamp_ms=20)])
    fill(log, [stamped(3, 1, timestamp_ms=40)])
    fill(log, [stamped(4, 1, timestamp_ms=5)], roll_before=frozenset({4}))

    def size() -> int:
        return sum(len(batch) for batch in log.read_segment(0))

    assert log.segment_summary(0) == SegmentSummary(size(), 50, 20)
    # The cut takes the batch stamped 20 (segment 0 is active again, then sealed).
    log.truncate_suffix(2)
    fill(log, [stamped(2, 1, timestamp_ms=30)])
    log.roll()
    assert log.segment_summary(0) == SegmentSummary(size(), 50, 30)
    if isinstance(log, SegmentLog):
        # Reopened, from the index files: they keep no minimum, so the oldest is
        # the first data batch's (past the control batch), never older than the
        # oldest (Kafka's estimate; exact for records stamped in order).
        log.close()
        log = open_log()
        assert log.segment_summary(0) == SegmentSummary(size(), 50, 50)


def test_replace_segment_refuses_bad_input_whole(open_log: Opener, tmp_path: Path) -> None:
    batches = [stamped(i, 2 + i // 4) for i in range(12)]
    log = open_log()
    fill(log, [stamped(0, 1), *batches[1:]], roll_before=frozenset({4, 8}))
    corrupt = bytearray(batches[2].data)
    corrupt[-1] ^= 1
    refused = {
        "active": (8, [batches[9].data]),
        "no such segment": (2, []),
        "before the segment": (4, [batches[3].data]),
        "past the segment": (4, [batches[5].data, stamped(7, 3, count=2).data]),
        "overlapping": (4, [stamped(4, 3, count=2).data, batches[5].data]),
        "not increasing": (4, [batches[6].data, batches[5].data]),
        "corrupt": (0, [bytes(corrupt)]),
        "term below the log before it": (4, [stamped(5, 1).data]),
        "term above the log after it": (0, [stamped(1, 4).data]),
        "term going back": (0, [batches[1].data, stamped(2, 1).data]),
        "not a batch": (0, [b"garbage"]),
    }
    for reason, (base, new) in refused.items():
        with pytest.raises(InvalidInputError) as caught:
            log.replace_segment(base, new)
        assert caught.value is not None, reason
        assert read_all(log) == [stamped(0, 1).data] + [b.data for b in batches[1:]], reason
        if isinstance(log, SegmentLog):
            assert not os.path.exists(replacement_path(log.directory, base)), reason


def test_a_reader_of_the_old_segment_finishes_on_it(tmp_path: Path) -> None:
    batches = [stamped(i, 1) for i in range(10)]
    files = SegmentFiles()
    with SegmentLog.open(str(tmp_path / "log"), CONFIG, files=files) as log:
        fill(log, batches, roll_before=frozenset({6}))
        old = log.read_segment(0)
        assert next(old) == batches[0].data  # the old file is pinned now
        log.replace_segment(0, [batches[4].data])
        assert list(old) == [b.data for b in batches[1:6]]
        assert read_all(log) == [batches[4].data] + [b.data for b in batches[6:]]
        # The old file's descriptor is closed (by the freeing thread) once its
        # reader let go of it.
        assert files.wait_freed(timeout_s=30)
        assert files.freed_later == 1
        assert not [path for path in open_files_under(tmp_path) if "(deleted)" in path]
        assert log.segment_count == 2


def test_scrub_finds_no_damage_in_a_gapped_log(tmp_path: Path) -> None:
    batches = [stamped(i, 1) for i in range(10)]
    with SegmentLog.open(str(tmp_path / "log"), CONFIG) as log:
        fill(log, batches[:3] + batches[5:], roll_before=frozenset({6}))
        log.replace_segment(0, [batches[1].data, batches[5].data])
        assert scrub_pass(log, 100)[1] == []
        assert log.check_batch_at(3) is None  # in a gap: the batch after it is fine


def test_a_read_racing_a_swap_returns_the_old_or_the_new_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read has looked its segment up and pinned its file, and the segment is
    replaced before it reads (made certain by running the swap at that point): it
    returns the old file's batches or the new file's, whole, never a mix of the old
    file's bytes and the new file's positions."""
    import threading

    batches, offset = [], 0
    for number in range(30):  # batches of different sizes: positions differ per file
        batches.append(stamped(offset, 1, count=1 + number % 3))
        offset = batches[-1].next
    log = SegmentLog.open(str(tmp_path / "log"), CONFIG)
    fill(log, batches, roll_before=frozenset({batches[20].base}))
    kept = [batch for number, batch in enumerate(batches[:20]) if number % 3 == 1]
    read_from = SegmentLog._read_from
    swaps: list[threading.Thread] = []

    def swap_first(self: SegmentLog, *args: object) -> tuple[bytes, int]:
        if not swaps:  # (outside the log's lock: another thread may take it)
            swaps.append(
                threading.Thread(target=log.replace_segment, args=(0, [b.data for b in kept]))
            )
            swaps[0].start()
            swaps[0].join()
        return read_from(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SegmentLog, "_read_from", swap_first)
    reading = batches[4]
    got = split_batches(log.read(reading.base, 1 << 20))
    assert swaps and read_all(log, max_bytes=1 << 20) == [b.data for b in kept + batches[20:]]
    old = [b.data for b in batches[4:20]]
    new = [b.data for b in kept if b.next > reading.base]
    assert got in (old, new)
    log.close()
