"""Stateful property test: SegmentLog and MemoryLog against a list model.

The model holds the batches written (their exact stamped bytes and records) and,
for the disk log, the base offsets of the segments, which it derives from the
documented roll and retention rules (``LogConfig``): a segment is rolled before an
append would make a non-empty segment larger than ``segment_bytes_max``; retention
deletes the oldest sealed segment while the remaining ones still hold at least
``retention_bytes``. The memory log's segments are its roll points.

Logs get gaps between batches as keyed compaction leaves them: followers' appends
past the end (``append_stamped(after=)``) and sealed segments replaced by a subset
of their batches (``replace_segment``). A read in a gap returns the batches after
it, ``term_at`` there is the term of the batch before it (-1 at the log start).
"""

from __future__ import annotations

import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from laminar.errors import InvalidInputError, NonMonotonicOffsetError, OffsetOutOfRangeError
from laminar.records import decode_records, parse_header, with_leader_fields
from laminar.segment import FsyncPolicy, LogConfig, MemoryLog, SegmentLog
from laminar.segment.files import SegmentFiles
from tests.segment.support import (
    FakeClock,
    RecordSpec,
    make_batch,
    open_files_under,
    split_batches,
)

SEGMENT_BYTES_MAX = 2048
INDEX_INTERVAL_BYTES = 256
RETENTION_CHOICES: list[int | None] = [None, 2500, 6000]

# Timestamps include negative values: the format allows them and 0 must not be
# mistaken for "no timestamp".
record_specs = st.lists(
    st.tuples(
        st.integers(-6, 40),
        st.none() | st.binary(max_size=6),
        st.binary(max_size=160),
    ),
    min_size=1,
    max_size=5,
)


@dataclass
class ModelBatch:
    base_offset: int
    term: int
    records: list[RecordSpec]
    data: bytes  # the stamped batch exactly as the log must return it

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


class LogMachine(RuleBasedStateMachine):
    """One log and its model; ``kind`` is "segment" or "memory"."""

    def __init__(self, kind: str, root: Path, counter: itertools.count[int]) -> None:
        super().__init__()
        self.kind = kind
        self.root = root / f"machine-{next(counter)}"
        self.generation = 0
        self.clock = FakeClock()
        self.retention_bytes: int | None = None
        self.start = 0
        self.batches: list[ModelBatch] = []
        self.segment_bases = [0]
        self.state: bytes | None = None
        # One idle descriptor at most: sealed segments are evicted and reopened
        # all the time, so every rule runs through the file cache's paths.
        self.files = SegmentFiles(capacity=1)
        self.log: SegmentLog | MemoryLog = self._open_fresh()

    # ------------------------------------------------------------------ helpers

    @property
    def is_disk(self) -> bool:
        return self.kind == "segment"

    @property
    def end(self) -> int:
        # The active segment's base when it holds no batch (a compacted segment's
        # batches may end before it).
        last = self.batches[-1].next_offset if self.batches else self.start
        return max(last, self.segment_bases[-1])

    @property
    def last_term(self) -> int:
        return self.batches[-1].term if self.batches else -1

    def _directory(self) -> Path:
        return self.root / f"gen-{self.generation}"

    def _config(self) -> LogConfig:
        return LogConfig(
            segment_bytes_max=SEGMENT_BYTES_MAX,
            index_interval_bytes=INDEX_INTERVAL_BYTES,
            fsync_policy=FsyncPolicy.NEVER,
            retention_ms=None,
            retention_bytes=self.retention_bytes,
        )

    def _open_fresh(self) -> SegmentLog | MemoryLog:
        if not self.is_disk:
            return MemoryLog()
        return SegmentLog.open(
            str(self._directory()), self._config(), clock_ms=self.clock, files=self.files
        )

    def _segment_bytes(self, base: int, following: int | None) -> int:
        return sum(
            len(batch.data)
            for batch in self.batches
            if batch.base_offset >= base and (following is None or batch.base_offset < following)
        )

    def _model_retention(self) -> int:
        if self.retention_bytes is None:
            return 0
        bounds = [*self.segment_bases[1:], None]
        sizes = [
            self._segment_bytes(base, following)
            for base, following in zip(self.segment_bases, bounds, strict=True)
        ]
        total = sum(sizes)
        deleted = 0
        while len(self.segment_bases) > 1 and total - sizes[0] >= self.retention_bytes:
            total -= sizes.pop(0)
            self.segment_bases.pop(0)
            deleted += 1
        self.start = self.segment_bases[0]
        self.batches = [batch for batch in self.batches if batch.base_offset >= self.start]
        return deleted

    def _model_append(self, batch: ModelBatch) -> None:
        if self.is_disk:
            active = self._segment_bytes(self.segment_bases[-1], None)
            if active and active + len(batch.data) > SEGMENT_BYTES_MAX:
                self.segment_bases.append(self.end)  # (the batch may start past it)
                self._model_retention()
        self.batches.append(batch)

    def _batch_index(self, offset: int) -> int:
        """The batch holding ``offset``, or the first one after it (a gap); the
        number of batches when none is at or after it."""
        for index, batch in enumerate(self.batches):
            if offset < batch.next_offset:
                return index
        return len(self.batches)

    def _term_at(self, offset: int) -> int:
        before = [batch.term for batch in self.batches if batch.base_offset <= offset]
        return before[-1] if before else -1

    def _segment_batches(self, base: int) -> list[ModelBatch]:
        number = self.segment_bases.index(base)
        following = self.segment_bases[number + 1] if number + 1 < len(self.segment_bases) else None
        return [
            batch
            for batch in self.batches
            if batch.base_offset >= base and (following is None or batch.base_offset < following)
        ]

    def _draw_term(self, step: int) -> int:
        return max(self.last_term, 0) + step

    # ------------------------------------------------------------------ appends

    @rule(batches=st.lists(record_specs, min_size=1, max_size=3), term_step=st.integers(0, 1))
    def append(self, batches: list[list[RecordSpec]], term_step: int) -> None:
        term = self._draw_term(term_step)
        for records in batches:
            raw = make_batch(records)
            expected_base = self.end
            assert self.log.append(raw, term=term) == expected_base
            stamped = with_leader_fields(raw, expected_base, term)
            self._model_append(ModelBatch(expected_base, term, records, stamped))

    @rule(records=record_specs, term_step=st.integers(0, 2), wrong_by=st.sampled_from([-1, 1]))
    def append_stamped(self, records: list[RecordSpec], term_step: int, wrong_by: int) -> None:
        term = self._draw_term(term_step)
        raw = make_batch(records)
        if self.end + wrong_by >= 0:
            with pytest.raises(NonMonotonicOffsetError):
                self.log.append_stamped(with_leader_fields(raw, self.end + wrong_by, term))
        stamped = with_leader_fields(raw, self.end, term)
        expected_base = self.end
        assert self.log.append_stamped(stamped) == expected_base
        self._model_append(ModelBatch(expected_base, term, records, stamped))

    @rule(records=record_specs, term_step=st.integers(0, 1), gap=st.integers(1, 6))
    def append_past_a_gap(self, records: list[RecordSpec], term_step: int, gap: int) -> None:
        term = self._draw_term(term_step)
        raw = make_batch(records)
        base = self.end + gap
        stamped = with_leader_fields(raw, base, term)
        for wrong in (None, self.end + 1, self.end - 1):
            if wrong is None or wrong >= 0:
                with pytest.raises(NonMonotonicOffsetError):
                    self.log.append_stamped(stamped, after=wrong)
        assert self.log.append_stamped(stamped, after=self.end) == base
        self._model_append(ModelBatch(base, term, records, stamped))

    # ------------------------------------------------------------------ segments

    @rule()
    def roll(self) -> None:
        self.log.roll()
        if self._segment_batches(self.segment_bases[-1]):
            self.segment_bases.append(self.end)
            if self.is_disk:
                self._model_retention()  # sealing applies retention
        self._check_segments()

    @rule(data=st.data())
    def replace_segment(self, data: st.DataObject) -> None:
        """Keyed compaction's rewrite of a sealed segment: a subset of its batches."""
        sealed = self.segment_bases[:-1]
        if not sealed:
            with pytest.raises(InvalidInputError):
                self.log.replace_segment(self.segment_bases[-1], [])
            return
        base = data.draw(st.sampled_from(sealed), label="segment")
        batches = self._segment_batches(base)
        assert list(self.log.read_segment(base)) == [batch.data for batch in batches]
        keep = data.draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
        kept = [batch for batch, kept in zip(batches, keep, strict=True) if kept]
        others = [batch for batch in self.batches if batch not in batches]
        if others and data.draw(st.booleans(), label="refused"):
            stray = data.draw(st.sampled_from(others), label="stray")
            with pytest.raises(InvalidInputError):
                refused = sorted([*kept, stray], key=_base_of_batch)
                self.log.replace_segment(base, [batch.data for batch in refused])
        self.log.replace_segment(base, [batch.data for batch in kept])
        self.batches = [batch for batch in self.batches if batch not in batches or batch in kept]
        self._check_segments()

    def _check_segments(self) -> None:
        bases = self.segment_bases
        assert self.log.sealed_segments() == list(itertools.pairwise(bases))

    # ------------------------------------------------------------------ reads

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        max_bytes = data.draw(st.integers(1, 3 * SEGMENT_BYTES_MAX), label="max_bytes")
        upper = data.draw(st.none() | st.integers(self.start, self.end + 1), label="upper")
        result = self.log.read(offset, max_bytes, upper_offset=upper)
        if offset == self.end:
            assert result == b""
            return
        got = split_batches(result)
        expected = self.batches[self._batch_index(offset) :]
        assert got == [batch.data for batch in expected[: len(got)]]
        first_allowed = bool(expected) and (upper is None or expected[0].next_offset <= upper)
        if first_allowed:
            assert got, "a read below the end returns at least one batch"
        else:
            assert result == b""
        if len(got) > 1:
            assert len(result) <= max_bytes
        for batch in expected[: len(got)]:
            assert upper is None or batch.next_offset <= upper
            decoded = [(r.timestamp_ms, r.key, r.value) for r in decode_records(batch.data)]
            assert decoded == [(t, k, v) for t, k, v in batch.records]

    @rule(below=st.booleans())
    def read_out_of_range(self, below: bool) -> None:
        offset = self.start - 1 if below else self.end + 1
        if offset < 0:
            return
        with pytest.raises(OffsetOutOfRangeError) as caught:
            self.log.read(offset, 1000)
        assert (caught.value.start_offset, caught.value.end_offset) == (self.start, self.end)

    @rule(timestamp_ms=st.integers(-8, 42))
    def offset_for_timestamp(self, timestamp_ms: int) -> None:
        expected = next(
            (
                batch.base_offset + index
                for batch in self.batches
                for index, (record_ms, _, _) in enumerate(batch.records)
                if record_ms >= timestamp_ms
            ),
            None,
        )
        assert self.log.offset_for_timestamp(timestamp_ms) == expected

    @rule(data=st.data())
    def term_at(self, data: st.DataObject) -> None:
        if self.start < self.end:
            offset = data.draw(st.integers(self.start, self.end - 1), label="offset")
            assert self.log.term_at(offset) == self._term_at(offset)
        with pytest.raises(OffsetOutOfRangeError):
            self.log.term_at(self.end)

    # ------------------------------------------------------------------ removals

    @rule(data=st.data())
    def truncate_suffix(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        if offset < self.end:
            del self.batches[self._batch_index(offset) :]
            kept = [base for base in self.segment_bases if base < offset]
            self.segment_bases = kept or self.segment_bases[:1]
        assert self.log.truncate_suffix(offset) == self.end
        self._check_segments()

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, self.end + 20), label="start")
        self.log.reset(start)
        self.start = start
        self.batches = []
        self.segment_bases = [start]
        self._check_segments()

    @precondition(lambda self: self.is_disk)
    @rule()
    def enforce_retention(self) -> None:
        assert isinstance(self.log, SegmentLog)
        deleted = self._model_retention()
        assert self.log.enforce_retention() == deleted

    @precondition(lambda self: not self.is_disk)
    @rule(data=st.data())
    def delete_before(self, data: st.DataObject) -> None:
        assert isinstance(self.log, MemoryLog)
        offset = data.draw(st.integers(self.start, self.end), label="offset")
        end = self.end
        self.log.delete_before(offset)
        # "Drop whole batches that end at or below offset" (the start: at most offset,
        # or the first batch kept when offset is in a gap).
        kept = [batch for batch in self.batches if batch.next_offset > offset]
        if len(kept) < len(self.batches):
            if kept:
                self.start = min(kept[0].base_offset, max(offset, self.start))
            else:
                self.start = max(min(offset, end), self.batches[-1].next_offset)
            self.segment_bases = [self.start, *(b for b in self.segment_bases if b > self.start)]
        self.batches = kept
        self._check_segments()

    # ------------------------------------------------------------------ state and reopen

    @rule(state=st.binary(max_size=40))
    def save_state(self, state: bytes) -> None:
        self.log.save_state(state)
        self.state = state

    @rule()
    def load_state(self) -> None:
        assert self.log.load_state() == self.state

    @rule(retention_bytes=st.sampled_from(RETENTION_CHOICES))
    def close_and_reopen(self, retention_bytes: int | None) -> None:
        if not self.is_disk:
            assert isinstance(self.log, MemoryLog)
            self.log = self.log.crash()
            return
        self.log.close()
        self.retention_bytes = retention_bytes
        self.log = SegmentLog.open(
            str(self._directory()), self._config(), clock_ms=self.clock, files=self.files
        )
        self._check_files()

    @precondition(lambda self: self.is_disk)
    @rule()
    def crash_and_reopen(self) -> None:
        """Copy the files of a log still open (no close: no active index written)."""
        source = self._directory()
        self.generation += 1
        shutil.copytree(source, self._directory())
        self.log.close()
        self.log = SegmentLog.open(
            str(self._directory()), self._config(), clock_ms=self.clock, files=self.files
        )
        self._check_files()

    def _check_files(self) -> None:
        names = sorted(path.name for path in self._directory().glob("*.log"))
        assert names == [f"{base:020d}.log" for base in self.segment_bases]

    # ------------------------------------------------------------------ invariants

    @invariant()
    def offsets_and_term_match(self) -> None:
        assert self.log.start_offset == self.start
        assert self.log.end_offset == self.end
        assert self.log.last_term == self.last_term
        if isinstance(self.log, SegmentLog):
            assert self.log.segment_count == len(self.segment_bases)
            assert self.log.size_bytes == sum(len(batch.data) for batch in self.batches)

    @invariant()
    def descriptors_bounded(self) -> None:
        """The active segment's file, plus at most the cache's one idle file, once the
        freeing thread has closed the files compaction replaced."""
        if self.is_disk:
            assert self.files.wait_freed(timeout_s=30)
            assert self.files.idle <= 1
            assert len(open_files_under(self.root)) <= 2

    @rule(max_bytes=st.sampled_from([1, 700, 1 << 20]))
    def read_everything(self, max_bytes: int) -> None:
        """Every batch is read back from the log start, through every gap."""
        offset, got = self.start, []
        while offset < self.end:
            found = split_batches(self.log.read(offset, max_bytes))
            if not found:
                break
            got += found
            offset = max(offset + 1, _next_offset(found[-1]))
        assert got == [batch.data for batch in self.batches]

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _base_of_batch(batch: ModelBatch) -> int:
    return batch.base_offset


def _next_offset(data: bytes) -> int:
    return parse_header(data).next_offset


@pytest.mark.parametrize("kind", ["segment", "memory"])
def test_log_matches_model(kind: str, tmp_path: Path) -> None:
    counter = itertools.count()
    run_state_machine_as_test(
        lambda: LogMachine(kind, tmp_path, counter),
        settings=settings(max_examples=500, stateful_step_count=30, deadline=None),
    )
