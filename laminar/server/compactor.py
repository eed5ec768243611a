"""Keyed compaction of one replica's log by one agreed command: the storage side.

The leader's driver decides a command and its core appends it to the partition's
log (:mod:`laminar.replica.compaction_control`); once it is committed, every
replica's driver hands it here. :func:`run_command` compacts ``[log start, E)``
exactly as the command says, whatever this replica's segment boundaries, start or
memory (the engine's result depends only on the records of the range,
:mod:`laminar.segment.compaction`):

1. the driver has rolled the active segment first when it began below E (on the
   event loop, between flush rounds), so that only sealed segments change;
2. :func:`~laminar.segment.compaction.build_superseded` passes over the range's
   batches (as many passes as ``compaction_memory_bytes_max`` needs);
3. each sealed segment below E is rewritten by
   :meth:`~laminar.segment.storage.LogStorage.replace_segment`, one at a time: a
   reader, or a crash, sees a segment before or after the command, never a mix. A
   segment whose every offset is superseded is replaced by nothing unread; one with
   none superseded and no tombstone to remove is left as it is (its rewrite would
   be the same bytes), saving the swap's fsyncs and file freeing.

It runs on a thread of its own (the host's compaction thread; inline in the
simulators). The log is shared with the event loop, which keeps appending to the
active segment and reading: the storage's own lock makes each call safe; the
driver keeps retention, truncation and reopening away from a replica while its
compaction runs (see :class:`~laminar.server.driver.ReplicaDriver`).
:class:`Pacer` holds the job to ``compaction_bytes_per_s_max`` of input, each
emptied segment's swap counted as its bytes (``SWAP_PACE_BYTES`` at most).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from laminar.records import iter_batches, parse_header, stored_header
from laminar.replica.compaction_control import LogView, Run
from laminar.segment.compaction import CompactCommand, build_superseded, compact
from laminar.segment.storage import Buffer, LogStorage

SCAN_BYTES_PER_CHECK = 1 << 20
"""The most the leader's decision reads of its dirty range per check, on the event
loop (about 2 ms here): only a segment the range begins or ends inside is read
(sealed segments wholly inside it are not: :func:`log_view`); it resumes there at
the next check (:class:`DirtyScan`)."""
SCAN_CHUNK_BYTES = 1 << 20
"""A segment the decision reads is seen in runs of batches of about this size: E
falls at the end of a run (a batch boundary)."""
SCAN_CHUNKS_MAX = 4096
"""The most runs one scan keeps (as many sealed segments, or 4 GiB read); E stops
at the last one."""
PACED_GROUP_RECORDS = 2048
"""The most records whose keys a paced job hashes in one step (``group_records_max``
of :func:`~laminar.segment.compaction.build_superseded`): a step holds the GIL for
most of its time, and a produce call waits out a step under way. With the engine's
default of 65,536 (pyarrow) a step is some 5 ms, and bench.compaction_bench saw
calls of 4-8 ms at each; at 8,192 about half a millisecond; at 2,048 a paced job's
p99 ratio was 1.41 against 1.45 at 8,192 (medians of 5 runs each, alternated). An
unpaced job (the bench's throughput figure) keeps the default."""
SWAP_PACE_BYTES = 1 << 20
"""What the swap of an emptied segment (one replaced unread: every offset
superseded) counts for against the pace at most: the segment's bytes, up to a
mebibyte. A swap is an fsync and a rename (the directory's fsync comes once after
a run of them); a job of small segments, most of them emptied, would otherwise
swap them back to back, and every produce call's fsync would queue behind them in
the filesystem's journal (bench.compaction_bench measured calls of 2-5 ms in such
a burst of 1 MiB segments, against 1.3 ms at p99 idle). A segment rewritten is
paced by its read already."""


class CompactionCancelledError(Exception):
    """The replica was closed while its compaction ran: stop where it is (the
    segments already replaced are whole; the command runs again from the start)."""


@dataclass(slots=True)
class Pacer:
    """Holds a job to ``bytes_per_s`` of input (0: no limit), sleeping on the job's
    own thread; ``sleep`` and ``clock`` are injectable (tests, the simulators)."""

    bytes_per_s: int
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    _started_s: float | None = None
    _bytes: int = 0

    def pace(self, count: int) -> None:
        if self.bytes_per_s <= 0:
            return
        now = self.clock()
        if self._started_s is None:
            self._started_s = now
        self._bytes += count
        ahead_s = self._bytes / self.bytes_per_s - (now - self._started_s)
        if ahead_s > 0:
            self.sleep(ahead_s)


NO_PACE = Pacer(0)


@dataclass(slots=True)
class DirtyScan:
    """What the leader has seen so far of its log's dirty range, from ``dirty_from``
    (the last command's end) to ``scanned_to``: its runs (:class:`Run`: a sealed
    segment, or whole batches read of one), so that each check looks only at what
    was appended since."""

    dirty_from: int
    scanned_to: int
    runs: list[Run]

    @classmethod
    def at(cls, dirty_from: int) -> DirtyScan:
        return cls(dirty_from, dirty_from, [])


def log_view(
    log: LogStorage,
    scan: DirtyScan,
    *,
    high_watermark: int,
    clean_bytes: int,
    bytes_max: int = SCAN_BYTES_PER_CHECK,
) -> LogView:
    """What :func:`~laminar.replica.compaction_control.compaction_point` needs of
    ``log``: the active segment's base and the runs from the scan's ``dirty_from`` up
    to it (and the high watermark), going on from where ``scan`` stopped.

    A sealed segment wholly inside the range is one run, from
    :meth:`~laminar.segment.storage.LogStorage.segment_summary` (its bytes, newest
    and oldest timestamps), without a read: a check costs a lookup per new segment
    (up to :data:`SCAN_CHUNKS_MAX` runs), however many bytes the backlog holds. Only
    a segment the range begins inside (the last command's end fell there) or ends
    inside (the high watermark) is read, at most ``bytes_max`` now, in runs of whole
    batches. The minimum lag is held against a run's newest record, so it holds for
    every record of a run taken; a whole segment is the coarser run: E stops before
    a segment holding any record younger than the lag, though its older batches
    could go (conservative: they are compacted once the segment's newest record is
    old enough). The maximum lag counts from a run's oldest record, so a whole
    segment is due as soon as its oldest record is (see :class:`Run`)."""
    sealed = log.sealed_segments()
    active_base = sealed[-1][1] if sealed else log.start_offset
    limit = min(high_watermark, active_base)
    offset = max(scan.scanned_to, log.start_offset)
    runs = scan.runs
    read = 0
    # The first sealed segment ending after ``offset``: the segments are contiguous,
    # so ``offset`` lies in it (at its base, unless the range begins inside it).
    first = bisect_right(sealed, offset, key=_segment_end)
    for base, end in sealed[first:]:
        if offset >= limit or len(runs) >= SCAN_CHUNKS_MAX:
            break
        if base >= offset and end <= limit:
            summary = log.segment_summary(base)
            newest_ms = summary.newest_timestamp_ms
            if newest_ms is not None:  # (a segment with no batch is no run)
                runs.append(
                    Run(
                        base,
                        end,
                        summary.oldest_timestamp_ms,
                        max(newest_ms, 0),
                        summary.size_bytes,
                    )
                )
            offset = scan.scanned_to = end
            continue
        stop = min(end, limit)
        while offset < stop and read < bytes_max and len(runs) < SCAN_CHUNKS_MAX:
            data = log.read(offset, min(SCAN_CHUNK_BYTES, bytes_max - read), upper_offset=stop)
            if not data:
                if stop == end:  # no batch of this segment from ``offset`` on
                    offset = scan.scanned_to = end
                break
            read += len(data)
            run_base, size, newest_ms = -1, 0, 0
            oldest_ms: int | None = None
            for _, header in iter_batches(data, verify=False):
                run_base = header.base_offset if run_base < 0 else run_base
                size += header.length
                newest_ms = max(newest_ms, header.max_timestamp_ms)
                if not header.is_control and (
                    oldest_ms is None or header.first_timestamp_ms < oldest_ms
                ):
                    oldest_ms = header.first_timestamp_ms
                offset = header.next_offset
            runs.append(Run(run_base, offset, oldest_ms, newest_ms, size))
            scan.scanned_to = offset
        if offset < end:
            break  # the budget is spent, or the rest is above the limit for now
    return LogView(high_watermark, active_base, scan.dirty_from, clean_bytes, runs)


def _segment_end(segment: tuple[int, int]) -> int:
    return segment[1]


def segments_below(log: LogStorage, end: int) -> list[tuple[int, int]]:
    """The sealed segments holding offsets below ``end``."""
    return [(base, seg_end) for base, seg_end in log.sealed_segments() if base < end]


def run_command(
    log: LogStorage,
    command: CompactCommand,
    *,
    memory_bytes_max: int,
    pacer: Pacer = NO_PACE,
    cancelled: Callable[[], bool] = lambda: False,
    temp_dir: str | None = None,
) -> int:
    """Compact ``log`` below ``command.end`` (its segments there are sealed); the
    bytes left below it. Raises :class:`CompactionCancelledError` when ``cancelled()`` turns true
    between steps, and the storage's errors."""
    if cancelled():
        raise CompactionCancelledError
    start = log.start_offset
    end = command.end
    segments = segments_below(log, end)
    paced = pacer.bytes_per_s > 0

    def read_range() -> Iterable[Buffer]:
        for base, _ in segments_below(log, end):
            if cancelled():
                raise CompactionCancelledError
            yield from _paced(log.read_segment(base), pacer)

    if start >= end or not segments:
        return 0
    kept = 0
    unsynced = False  # emptied segments swapped since the directory's last fsync
    with build_superseded(
        read_range,
        start,
        end,
        memory_bytes_max,
        temp_dir=temp_dir,
        group_records_max=PACED_GROUP_RECORDS if paced else None,
    ) as gone:
        for base, segment_end in segments:
            if cancelled():
                raise CompactionCancelledError
            span = segment_end - base
            superseded = gone.count(base, span)
            if segment_end <= end and superseded == span:
                swapped = log.segment_summary(base).size_bytes
                # Every offset superseded: not even read. The directory is synced
                # once after a run of them (the next rewrite's swap, or the end).
                log.replace_segment(base, [], sync_directory=False)
                unsynced = True
                pacer.pace(min(swapped, SWAP_PACE_BYTES))
                continue
            if not superseded and command.tombstones_end <= base:
                # compact() would pass every batch byte for byte: no rewrite, no swap
                # (a segment compacted by an earlier command whose keys are not newer
                # since). Read only to count the bytes kept.
                kept += sum(
                    len(batch)
                    for batch in _paced(log.read_segment(base), pacer)
                    if parse_header(batch).base_offset < end
                )
                continue
            output = _Counted(compact(_paced(log.read_segment(base), pacer), command, gone), end)
            log.replace_segment(base, output)
            unsynced = False
            kept += output.count
    if unsynced:
        log.sync_directory()  # the job is done, and so its result durable, only now
    return kept


def _paced(batches: Iterator[Buffer], pacer: Pacer) -> Iterator[Buffer]:
    """``batches``, each paced as it passes (as they are: no call a batch unpaced)."""
    if pacer.bytes_per_s <= 0:
        return batches
    return _pacing(batches, pacer)


def _pacing(batches: Iterator[Buffer], pacer: Pacer) -> Iterator[Buffer]:
    for batch in batches:
        pacer.pace(len(batch))
        yield batch


class _Counted(Iterator[Buffer]):
    """A rewrite's batches, those below ``end`` counted (bytes) as they pass."""

    def __init__(self, batches: Iterator[Buffer], end: int) -> None:
        self._batches = batches
        self._end = end
        self.count = 0

    def __next__(self) -> Buffer:
        batch = next(self._batches)
        if stored_header(batch).base_offset < self._end:  # read, or encoded by compact
            self.count += len(batch)
        return batch


__all__ = [
    "CompactionCancelledError",
    "Pacer",
    "log_view",
    "run_command",
    "segments_below",
]
