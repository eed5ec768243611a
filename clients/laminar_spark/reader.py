"""Reading one task's offset range as Arrow batches (runs on an executor; no Spark).

:func:`read_range` fetches ``[start, end)`` of one partition from any replica
(:meth:`~laminar_client.Client.fetch` rotates replicas and retries one that
fails), verifies every batch's checksum, skips control batches, cuts the records
outside the range and yields ``pyarrow.RecordBatch`` es built from the columns
(:func:`~laminar_client.arrow.columns_to_arrow`): no Python object per record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from laminar_client.arrow import columns_to_arrow
from laminar_client.client import Client

from laminar.errors import OffsetOutOfRangeError, RequestTimeoutError
from laminar.records import column_view, iter_batches
from laminar_spark.planner import DataLossError, OffsetRange

__all__ = ["FETCH_BYTES", "STALL_TIMEOUT_S", "read_range"]

log = logging.getLogger("laminar_spark")

FETCH_BYTES = 8 * 1024 * 1024
"""Bytes asked per fetch."""
STALL_TIMEOUT_S = 30.0
"""How long a task waits for replicas to hold offsets below the planned end (a
replica's high watermark may trail the leader's by a heartbeat)."""


def read_range(
    client: Client,
    task: OffsetRange,
    *,
    headers: bool = False,
    fail_on_data_loss: bool = True,
    fetch_bytes: int = FETCH_BYTES,
    stall_timeout_s: float = STALL_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Any]:
    """Arrow batches of the records at offsets ``[task.start, task.end)``."""
    topic, partition, end = task.topic, task.partition, task.end
    offset = task.start
    stalled_since: float | None = None
    while offset < end:
        try:
            result = client.fetch(topic, partition, offset, max_bytes=fetch_bytes)
        except OffsetOutOfRangeError as error:
            if offset < error.start_offset:
                offset = _below_log_start(client, task, offset, fail_on_data_loss)
                continue
            # Past the end of the replica that answered: it trails the planned end
            # (the next fetch starts at another replica); waited for below.
            served_by, high_watermark, data = "a replica", error.end_offset, b""
        else:
            served_by, high_watermark, data = (
                result.served_by,
                result.high_watermark,
                result.batches,
            )
        buffer = memoryview(data)
        before = offset
        for position, header in iter_batches(buffer, verify=True):
            if header.next_offset <= offset:
                continue
            if header.base_offset >= end:
                break
            if not header.is_control and header.record_count:
                view = column_view(buffer, position, verify=False)
                first = max(offset - header.base_offset, 0)
                stop = min(header.record_count, end - header.base_offset)
                yield columns_to_arrow(view, topic, partition, first, stop, headers=headers)
            offset = min(header.next_offset, end)
            if offset >= end:
                break
        if offset > before:
            stalled_since = None
            continue
        # Nothing at ``offset`` on the replica that answered: it trails the planned end.
        now = clock()
        stalled_since = now if stalled_since is None else stalled_since
        if now - stalled_since >= stall_timeout_s:
            raise RequestTimeoutError(
                f"{topic}-{partition}: no replica returned offset {offset} (planned end {end}) "
                f"within {stall_timeout_s} s; last answer from {served_by}, "
                f"high watermark {high_watermark}"
            )
        sleep(0.05)


def _below_log_start(client: Client, task: OffsetRange, offset: int, fail: bool) -> int:
    """The offset to go on from when ``offset`` is no longer in the log."""
    name = f"{task.topic}-{task.partition}"
    low = client.list_offsets(task.topic, [task.partition])[task.partition].log_start_offset
    if low <= offset:
        raise OffsetOutOfRangeError(offset, low, task.end)
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
