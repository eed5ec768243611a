"""An in-memory :class:`LogStorage` with the disk log's semantics.

It stands in for the disk in the deterministic simulator: :meth:`MemoryLog.crash`
returns what a machine would find after losing power, i.e. only what had been
synced (appends after the last :meth:`sync` are lost; truncations and state saves
are durable at once, as on disk).

Segments are modelled by roll points: ``_segment_bases`` holds the base offset of
each segment, the first one the log start, the last one the active segment's. A
segment holds the batches based in ``[its base, the next base)``. Rolling seals
the active segment, which is durable at once (as sealing a segment file fsyncs
it); the log rolls by itself once the active segment holds
``segment_batches_max`` batches. Retention still drops single batches (the
first segment then begins at the new log start).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

from laminar.errors import InvalidInputError, LogClosedError, NonMonotonicOffsetError
from laminar.records import (
    DEFAULT_LIMITS,
    BatchLimits,
    decode_batch,
    parse_header,
    stamp,
    verify_batch,
)
from laminar.segment.offsets import check_read_range, check_replacement, check_term
from laminar.segment.storage import Buffer, SegmentSummary

SEGMENT_BATCHES_DEFAULT = 1000
"""Batches after which a :class:`MemoryLog` seals its active segment by default."""


class MemoryLog:
    """Record batches in a Python list. Not thread-safe; the simulator is single-threaded."""

    def __init__(
        self,
        start_offset: int = 0,
        *,
        limits: BatchLimits = DEFAULT_LIMITS,
        fsync: bool = True,
        segment_batches_max: int = SEGMENT_BATCHES_DEFAULT,
    ) -> None:
        if segment_batches_max < 1:
            raise InvalidInputError(f"segment_batches_max must be >= 1, got {segment_batches_max}")
        self._limits = limits
        self._fsync = fsync
        self._segment_batches_max = segment_batches_max
        self._start_offset = start_offset
        self._segment_bases: list[int] = [start_offset]
        self._base_offsets: list[int] = []
        self._next_offsets: list[int] = []  # offset after each batch (no header parsing)
        self._batches: list[bytes] = []
        self._terms: list[int] = []
        self._synced_count = 0
        self._state: bytes | None = None
        self._staged_state: bytes | None = None  # written by the next sync()
        self._closed = False

    # ------------------------------------------------------------------ properties

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        # The active segment's base when it holds no batch (it may lie past the last
        # batch: a compacted segment's batches can end before the next segment).
        if not self._batches:
            return self._segment_bases[-1]
        return max(self._next_offsets[-1], self._segment_bases[-1])

    @property
    def last_term(self) -> int:
        return self._terms[-1] if self._terms else -1

    @property
    def synced_end_offset(self) -> int:
        """The end offset a crash now would leave."""
        if self._synced_count == len(self._batches):
            return self.end_offset
        return (
            self._next_offsets[self._synced_count - 1] if self._synced_count else self._start_offset
        )

    # ------------------------------------------------------------------ writes

    def append(self, batch: Buffer, *, term: int = 0, verified: bool = False) -> int:
        self._check_open()
        limits = self._limits
        header = (
            parse_header(batch, limits=limits) if verified else verify_batch(batch, limits=limits)
        )
        if header.length != len(batch):
            raise InvalidInputError("buffer length differs from the batch length")
        check_term(term, self.last_term)
        base = self.end_offset
        head, payload = stamp(batch, base, term)
        self._push(base, base + header.record_count, term, b"".join((head, payload)))
        return base

    def append_stamped(self, batch: Buffer, *, after: int | None = None) -> int:
        self._check_open()
        header = verify_batch(batch, limits=self._limits)
        if header.length != len(batch):
            raise InvalidInputError("buffer length differs from the batch length")
        end_offset = self.end_offset
        if after is None:
            if header.base_offset != end_offset:
                raise NonMonotonicOffsetError(header.base_offset, end_offset)
        elif after != end_offset or header.base_offset < end_offset:
            raise NonMonotonicOffsetError(header.base_offset, end_offset)
        check_term(header.term, self.last_term)
        self._push(header.base_offset, header.next_offset, header.term, bytes(batch))
        return header.base_offset

    def _push(self, base: int, next_offset: int, term: int, data: bytes) -> None:
        active_first = bisect_left(self._base_offsets, self._segment_bases[-1])
        if len(self._batches) - active_first >= self._segment_batches_max:
            self.roll()
        self._base_offsets.append(base)
        self._next_offsets.append(next_offset)
        self._batches.append(data)
        self._terms.append(term)
        if self._fsync:
            self._synced_count = len(self._batches)

    def truncate_suffix(self, offset: int) -> int:
        self._check_open()
        check_read_range(offset, self.start_offset, self.end_offset)
        if offset == self.end_offset:
            return offset
        # The batch holding ``offset``, or the first one after it when it is in a gap.
        index = bisect_right(self._next_offsets, offset)
        del self._base_offsets[index:]
        del self._next_offsets[index:]
        del self._batches[index:]
        del self._terms[index:]
        self._synced_count = min(self._synced_count, index)
        # Segments based at or after ``offset`` are gone (the first one stays).
        keep = max(1, bisect_left(self._segment_bases, offset))
        del self._segment_bases[keep:]
        return self.end_offset

    # ------------------------------------------------------------------ segments

    def roll(self) -> None:
        """Seal the active segment (durable at once) unless it holds no batch."""
        self._check_open()
        if not self._batches or self._base_offsets[-1] < self._segment_bases[-1]:
            return
        self._segment_bases.append(self.end_offset)
        self._synced_count = len(self._batches)

    def sealed_segments(self) -> list[tuple[int, int]]:
        self._check_open()
        bases = self._segment_bases
        return list(itertools.pairwise(bases))

    def read_segment(self, base: int) -> Iterator[bytes]:
        self._check_open()
        first, last = self._segment_range(base)
        return iter(self._batches[first:last])

    def segment_summary(self, base: int) -> SegmentSummary:
        """(See :meth:`LogStorage.segment_summary`.) From the segment's batches in
        memory: their lengths and their headers' timestamps."""
        self._check_open()
        first, last = self._segment_range(base)
        headers = [parse_header(batch, limits=self._limits) for batch in self._batches[first:last]]
        return SegmentSummary(
            sum(header.length for header in headers),
            max((header.max_timestamp_ms for header in headers), default=None),
            min(
                (header.first_timestamp_ms for header in headers if not header.is_control),
                default=None,
            ),
        )

    def sync_directory(self) -> None:
        self._check_open()

    def replace_segment(
        self, base: int, batches: Iterable[Buffer], *, sync_directory: bool = True
    ) -> None:
        self._check_open()
        number = self._segment_number(base)
        if number == len(self._segment_bases) - 1:
            raise InvalidInputError(f"segment {base} is the active segment")
        end = self._segment_bases[number + 1]
        first, last = self._segment_range(base)
        term_min = self._terms[first - 1] if first > 0 else -1
        term_max = self._terms[last] if last < len(self._terms) else self.last_term
        new: list[tuple[int, int, int, bytes]] = []
        offset = base
        for data in batches:
            header = verify_batch(data, limits=self._limits)
            if header.length != len(data):
                raise InvalidInputError("buffer length differs from the batch length")
            check_replacement(header, base, end, offset, term_min, term_max)
            term_min = header.term
            offset = header.next_offset
            new.append((header.base_offset, header.next_offset, header.term, bytes(data)))
        self._base_offsets[first:last] = [entry[0] for entry in new]
        self._next_offsets[first:last] = [entry[1] for entry in new]
        self._terms[first:last] = [entry[2] for entry in new]
        self._batches[first:last] = [entry[3] for entry in new]
        # A sealed segment was synced when it was sealed; so is its replacement.
        self._synced_count = max(0, self._synced_count + len(new) - (last - first))

    def _segment_number(self, base: int) -> int:
        number = bisect_left(self._segment_bases, base)
        if number == len(self._segment_bases) or self._segment_bases[number] != base:
            raise InvalidInputError(f"no segment starts at offset {base}")
        return number

    def _segment_range(self, base: int) -> tuple[int, int]:
        """The indexes of the first batch of the segment based at ``base`` and of the
        first batch after it."""
        number = self._segment_number(base)
        first = bisect_left(self._base_offsets, base)
        if number + 1 == len(self._segment_bases):
            return first, len(self._batches)
        return first, bisect_left(self._base_offsets, self._segment_bases[number + 1])

    def reset(self, start_offset: int) -> None:
        self._check_open()
        if start_offset < 0:
            raise InvalidInputError("start offset must be >= 0")
        self._start_offset = start_offset
        self._segment_bases = [start_offset]
        self._base_offsets.clear()
        self._next_offsets.clear()
        self._batches.clear()
        self._terms.clear()
        self._synced_count = 0

    def retention_offset(
        self, now_ms: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        """Like :meth:`SegmentLog.retention_offset`, each batch a unit (the newest
        record's timestamp is the header's ``max_timestamp_ms``)."""
        self._check_open()
        sizes = [len(batch) for batch in self._batches]
        total_bytes = sum(sizes)
        keep = 0
        while keep < len(self._batches) - 1:
            too_big = retention_bytes is not None and total_bytes - sizes[keep] >= retention_bytes
            newest_ms = parse_header(self._batches[keep], limits=self._limits).max_timestamp_ms
            too_old = retention_ms is not None and newest_ms < now_ms - retention_ms
            if not (too_big or too_old):
                break
            total_bytes -= sizes[keep]
            keep += 1
        return self._base_offsets[keep] if self._batches else self._start_offset

    def delete_before(self, offset: int) -> None:
        """Drop whole batches that end at or below ``offset`` (retention)."""
        self._check_open()
        end_offset = self.end_offset
        # The batches ending at or below ``offset`` (gaps or not).
        index = bisect_right(self._next_offsets, offset)
        if index <= 0:
            return
        if index < len(self._batches):
            self._start_offset = min(self._base_offsets[index], max(offset, self._start_offset))
        else:
            self._start_offset = max(min(offset, end_offset), self._next_offsets[-1])
        later = bisect_right(self._segment_bases, self._start_offset)
        self._segment_bases = [self._start_offset, *self._segment_bases[later:]]
        del self._base_offsets[:index]
        del self._next_offsets[:index]
        del self._batches[:index]
        del self._terms[:index]
        self._synced_count = max(0, self._synced_count - index)

    def sync(self) -> None:
        self._check_open()
        if self._staged_state is not None:
            self._state, self._staged_state = self._staged_state, None
        self._synced_count = len(self._batches)

    def save_state(self, state: bytes) -> None:
        self._check_open()
        self._state = bytes(state)
        self._staged_state = None

    def stage_state(self, state: bytes) -> None:
        self._check_open()
        self._staged_state = bytes(state)

    def load_state(self) -> bytes | None:
        self._check_open()
        return self._state if self._staged_state is None else self._staged_state

    def damage(self, *, batches_kept: int | None, lose_state: bool) -> None:
        """(The simulator's disk damage, as the shell leaves it once it set the
        damaged files aside.) Keep only the first ``batches_kept`` batches (None: all),
        and with ``lose_state`` forget the state file."""
        self._check_open()
        if batches_kept is not None and batches_kept < len(self._batches):
            self.truncate_suffix(self._base_offsets[batches_kept])
        if lose_state:
            self._state = None
            self._staged_state = None

    def crash(self) -> MemoryLog:
        """A new log holding what survives a power loss now: synced batches and state."""
        survivor = MemoryLog(
            self._start_offset,
            limits=self._limits,
            fsync=self._fsync,
            segment_batches_max=self._segment_batches_max,
        )
        # Rolls sync, so every segment base lies at or below the synced end.
        survivor._segment_bases = list(self._segment_bases)
        survivor._base_offsets = self._base_offsets[: self._synced_count]
        survivor._next_offsets = self._next_offsets[: self._synced_count]
        survivor._batches = self._batches[: self._synced_count]
        survivor._terms = self._terms[: self._synced_count]
        survivor._synced_count = self._synced_count
        survivor._state = self._state
        return survivor

    def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
        self._check_open()
        check_read_range(offset, self.start_offset, self.end_offset)
        if max_bytes <= 0:
            raise InvalidInputError("max_bytes must be positive")
        if offset == self.end_offset:
            return b""
        parts: list[bytes] = []
        size = 0
        # The batch holding ``offset``, or the first one after it when it is in a gap.
        for index in range(bisect_right(self._next_offsets, offset), len(self._batches)):
            batch = self._batches[index]
            if upper_offset is not None and self._next_offsets[index] > upper_offset:
                break
            if parts and size + len(batch) > max_bytes:
                break
            parts.append(batch)
            size += len(batch)
            if size >= max_bytes:
                break
        return b"".join(parts)

    def term_at(self, offset: int) -> int:
        self._check_open()
        if not self.start_offset <= offset < self.end_offset:
            check_read_range(offset, self.start_offset, self.end_offset - 1)
        # The batch holding ``offset``, or the last one before it when it is in a gap
        # (-1: a gap at the log start).
        index = self._index_of(offset)
        return self._terms[index] if index >= 0 else -1

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        self._check_open()
        for batch in self._batches:
            header = parse_header(batch)
            # Control batches carry the leader's monotonic clock, not wall time.
            if not header.is_control and header.max_timestamp_ms >= timestamp_ms:
                decoded = decode_batch(batch, verify=False)
                for index, record_timestamp_ms in enumerate(decoded.timestamps_ms):
                    if record_timestamp_ms >= timestamp_ms:
                        return header.base_offset + index
        return None

    def _index_of(self, offset: int) -> int:
        return bisect_right(self._base_offsets, offset) - 1

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("log is closed")
