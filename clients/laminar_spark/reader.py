"""Reading one task's share of a partition as Arrow batches (runs on an executor; no Spark).

:func:`read_range` fetches a :class:`~laminar_spark.planner.ReadTask` from any
replica (:meth:`~laminar_client.Client.fetch` rotates replicas and moves on at
once from one that refuses connections, within ``attempt_timeout_s`` from one
that hangs), verifies the checksum of every batch it yields records of, skips
control batches and batches another task owns, cuts the records outside the
range and yields ``pyarrow.RecordBatch`` es built from the columns
(:func:`~laminar_client.arrow.columns_to_arrow`): no Python object per record.

A fetch resumes at the next offset the task needs, which is always a batch
boundary after the first, so a replica that dies mid-read costs one failed
attempt, and no record is yielded twice or skipped.

Offsets need not be dense: keyed compaction leaves gaps between batches. A fetch
at an offset in a gap returns the batch after it; positions always come from the
batches' ends, and a task whose remaining offsets hold no batch is done: the
first batch after the position starts at or past the task's end, or the replica
answered nothing at all below its high watermark (a gap at the end of a
compacted range). Task sizes stay counted in offsets, as Spark's Kafka source
counts them, so a task over a compacted range may yield fewer rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from laminar_client.arrow import ColumnSlice, slices_to_arrow
from laminar_client.client import Client

from laminar.errors import InvalidInputError, OffsetOutOfRangeError, RequestTimeoutError
from laminar.records import column_view, iter_batches, verify_batch
from laminar_spark.planner import DataLossError, OffsetRange, ReadTask

__all__ = ["FETCH_BYTES", "FETCH_BYTES_MAX", "STALL_TIMEOUT_S", "read_range"]

log = logging.getLogger("laminar_spark")

FETCH_BYTES = 8 * 1024 * 1024
"""Most bytes asked per fetch."""
FETCH_BYTES_MAX = 16 * 1024 * 1024
"""Largest ``fetch_bytes`` accepted: a node's default ``fetch_bytes_max``."""
FIRST_FETCH_BYTES = 64 * 1024
"""Most bytes a task's first fetch asks for, before it knows its records' size (a
round trip more for a large task; far less data moved for a small one)."""
FETCH_BYTES_MIN = 64 * 1024
"""Fewest bytes a fetch asks for (a node returns at least one whole batch anyway)."""
STALL_POLL_S = 0.05
"""Pause between fetches while no replica holds the next offset yet."""
STALL_TIMEOUT_S = 30.0
"""How long a task waits for replicas to hold offsets below the planned end (a
replica's high watermark may trail the leader's by a heartbeat)."""


def read_range(
    client: Client,
    task: ReadTask | OffsetRange,
    *,
    headers: bool = False,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = FETCH_BYTES,
    stall_timeout_s: float = STALL_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Any]:
    """Arrow batches of the records ``task`` owns (an :class:`OffsetRange` is read
    whole, cut at both ends; a :class:`ReadTask` as the planner's docstring says)."""
    if not 0 < fetch_bytes <= FETCH_BYTES_MAX:
        raise InvalidInputError(f"fetch_bytes must be in (0, {FETCH_BYTES_MAX}], got {fetch_bytes}")
    if isinstance(task, OffsetRange):
        task = ReadTask.whole(task)
    topic, partition = task.topic, task.partition
    position = task.start  # the next offset this task needs
    sizer = _FetchSizer(fetch_bytes)
    stalled_since: float | None = None
    while position < task.end:
        try:
            max_bytes = sizer.next_bytes(task.end - position)
            result = client.fetch(topic, partition, position, max_bytes=max_bytes)
        except OffsetOutOfRangeError as error:
            if position < error.start_offset:
                resume = _below_log_start(client, task, position, fail_on_data_loss)
                if resume is not None:
                    position = resume
                    continue
            # Past the end of the replica that answered (it trails the planned end),
            # or below its log start while another replica still holds the offset:
            # the next fetch goes to another replica; waited for below.
            served_by, high_watermark, data = "a replica", error.end_offset, b""
            answered = False
        else:
            answered = True
            served_by, high_watermark, data = (
                result.served_by,
                result.high_watermark,
                result.batches,
            )
        before = position
        pieces: list[ColumnSlice] = []
        for piece, after in _owned(memoryview(data), task, position, sizer):
            if piece is not None:
                pieces.append(piece)
            position = after
        if pieces:  # one Arrow batch per fetch: Spark pays per batch, not per row
            yield slices_to_arrow(pieces, topic, partition, headers=headers)
        if position > before:
            stalled_since = None
            continue
        if answered and not data and high_watermark > position:
            # Nothing below its high watermark from ``position`` on: a gap that keyed
            # compaction left (a read in a gap returns the batch after it).
            position = min(high_watermark, task.end)
            continue
        # Nothing at ``position`` on the replica that answered: it trails the planned end.
        now = clock()
        stalled_since = now if stalled_since is None else stalled_since
        if now - stalled_since >= stall_timeout_s:
            raise RequestTimeoutError(
                f"{topic}-{partition}: no replica returned offset {position} (planned end "
                f"{task.end}) within {stall_timeout_s} s; last answer from {served_by}, "
                f"high watermark {high_watermark}"
            )
        sleep(STALL_POLL_S)


def _owned(
    buffer: memoryview, task: ReadTask, position: int, sizer: _FetchSizer
) -> Iterator[tuple[ColumnSlice | None, int]]:
    """Walk one fetch's batches from ``position``, yielding ``(slice, next
    position)`` per batch passed: the slice of records to yield, or None for a
    control batch or one that begins before a soft start (the previous task's).
    Stops after the batch that reaches the task's end, or at one past it.

    Only a batch whose records are yielded has its payload checksum verified and
    its columns read; the others cost a header parse (the header's own checksum is
    always checked).
    """
    soft_start = task.start != task.range_start
    for at, header in iter_batches(buffer, verify=False):
        base, after = header.base_offset, header.next_offset
        if after <= position:
            continue
        if base >= task.end:
            # The batch after ``position`` starts past the task: the rest of the task
            # is a gap (keyed compaction), or ``position`` already reached the end.
            yield None, max(position, task.end)
            return
        sizer.saw(header.length, header.record_count)
        piece: ColumnSlice | None = None
        if not header.is_control and not (soft_start and base < task.start == position):
            verify_batch(buffer, at)
            view = column_view(buffer, at, verify=False)
            first = max(position, task.range_start, base) - base  # (position: maybe a gap)
            stop = min(after, task.range_end) - base
            piece = (view, first, stop)
        position = after
        yield piece, position
        if position >= task.end:
            return


class _FetchSizer:
    """How many bytes the next fetch asks for.

    A fetch returns whole batches from the one holding the offset asked, up to
    ``max_bytes``: asking for ``fetch_bytes`` near a task's end would move (and the
    replica read) data that the next task reads again. So the first fetch asks for
    at most :data:`FIRST_FETCH_BYTES`, and later ones for the task's remaining
    offsets at the bytes per offset seen so far, plus the largest batch seen (the
    batch straddling the end is read whole), within ``[FETCH_BYTES_MIN, fetch_bytes]``.
    """

    def __init__(self, fetch_bytes: int) -> None:
        self.fetch_bytes = fetch_bytes
        self.bytes_seen = 0
        self.offsets_seen = 0
        self.batch_bytes_max = 0

    def saw(self, batch_bytes: int, record_count: int) -> None:
        self.bytes_seen += batch_bytes
        self.offsets_seen += record_count
        self.batch_bytes_max = max(self.batch_bytes_max, batch_bytes)

    def next_bytes(self, offsets_left: int) -> int:
        if not self.offsets_seen:
            return min(self.fetch_bytes, FIRST_FETCH_BYTES)
        wanted = -(-offsets_left * self.bytes_seen // self.offsets_seen) + self.batch_bytes_max
        return min(self.fetch_bytes, max(FETCH_BYTES_MIN, wanted))


def _below_log_start(client: Client, task: ReadTask, offset: int, fail: bool) -> int | None:
    """The offset to go on from when a replica no longer holds ``offset``, or None
    when the replica asked now still does (replicas apply retention each on its
    own timer, so they may disagree for a moment)."""
    name = f"{task.topic}-{task.partition}"
    low = client.list_offsets(task.topic, [task.partition])[task.partition].log_start_offset
    if low <= offset:
        return None
    lost = min(low, task.end)
    if fail:
        raise DataLossError(
            f"{name}: offsets [{offset}, {lost}) were deleted while reading (log start is "
            f"now {low}); set failOnDataLoss=false to skip them"
        )
    log.warning(
        "failOnDataLoss=false: %s: skipping %d offsets [%d, %d) deleted while reading",
        name,
        lost - offset,
        offset,
        lost,
    )
    return lost
