"""Offline reads: ``spark.read.format("laminar").option("path", DIR)`` reads segment
files straight from a node's data directory, with no cluster.

Theory of operation
-------------------
A node keeps each replica in ``<data>/partitions/<topic>/<partition>/``: segments
named by the base offset of their first batch (``00000000000000000000.log``, with
``.index`` and ``.timeindex`` once sealed or after a clean close), a ``state`` file
and a ``committed`` file (:mod:`laminar.segment.committed`): every offset below the
value it holds was committed when the node wrote it (at most ~1 s before).

Planning (the driver, :func:`plan`) lists the partition directories under
``path`` that the options and pushed filters select, reads each one's committed
bound, and makes one task per segment, or per index range of a large sealed
segment (``bytesPerTask``). Offset filters drop whole segments (a segment holds
``[its base, the next one's base)``) and start a task at the index entry at or
below the first offset wanted; a lower bound on ``timestamp`` starts it at the
time index entry before which every batch is older.

Reading (an executor, :func:`read_segment`) opens the segment file read-only
(nothing here ever writes, locks or repairs a file: the node may be running),
``pread``s whole batches in windows of up to :data:`READ_WINDOW_BYTES`, checks each
header, its base offset (at or past the end of the batch before it: keyed
compaction leaves gaps between batches, never overlaps) and its payload checksum before
yielding its records as Arrow (:func:`~laminar_client.arrow.slices_to_arrow`: no
Python object per record). Control batches, batches below the wanted offsets and
batches wholly older than the time bound are skipped without reading their
payload. A damaged batch raises :class:`~laminar.errors.CorruptSegmentError`
naming the file, the offset and the byte position; its records are never
returned. The one exception is a *torn tail* of the last segment, which a crash
mid-append leaves and node recovery cuts: fewer than a header's bytes left, a
batch running past the end of the file, or nothing but zero bytes from the batch
on. The read stops there.

By default only offsets below the committed bound are read (a replica's
uncommitted tail may still be truncated by a new leader); ``includeUncommitted``
reads everything in the files. A partition directory holding data but no
``committed`` file (written by an older node) fails the default read, naming the
option, rather than guessing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laminar_client.arrow import ColumnSlice, slices_to_arrow
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from laminar.errors import CorruptSegmentError, InvalidInputError, RecordFormatError
from laminar.records import HEADER_BYTES, BatchHeader, column_view, parse_header, verify_batch
from laminar.segment.committed import read_committed
from laminar.segment.index import SparseIndex
from laminar.segment.layout import (
    ReplicaDirectory,
    index_path,
    parse_partition,
    partitions_directory,
    replica_directories,
    segment_base_of,
    segment_bases,
    segment_path,
    time_index_path,
)
from laminar_spark.kafka_options import unknown_option
from laminar_spark.options import parse_assign, parse_boolean, parse_pattern, parse_subscribe
from laminar_spark.partition import spark_schema
from laminar_spark.pushdown import Pushed
from laminar_spark.pushdown_reader import PushdownReader

__all__ = [
    "BYTES_PER_TASK_DEFAULT",
    "OFFLINE_OPTIONS",
    "READ_WINDOW_BYTES",
    "OfflineBatchReader",
    "OfflineOptions",
    "SegmentTask",
    "offline_schema",
    "parse_offline_options",
    "plan",
    "read_segment",
]

log = logging.getLogger("laminar_spark")

OFFLINE_OPTIONS = (
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "includeHeaders",
    "includeUncommitted",
    "bytesPerTask",
)
_BY_LOWER = {name.lower(): name for name in OFFLINE_OPTIONS}

BYTES_PER_TASK_DEFAULT = 128 * 1024 * 1024
"""Most segment bytes one task reads when the segment's index allows a cut."""
BYTES_PER_TASK_MAX = 1 << 40
READ_WINDOW_BYTES = 8 * 1024 * 1024
"""Bytes ``pread`` at once (more when one batch is larger): whole batches are
checked and converted from the window, so memory per task stays near this (two
windows at most, while an Arrow batch joins records from both)."""
ARROW_ROWS_MIN = 32_768
"""Rows per Arrow batch handed to Spark (the log batches read are joined until they
reach it; the last of a task may have fewer)."""
TASKS_MAX = 100_000
"""Most tasks one read plans (a larger ``bytesPerTask`` gives fewer)."""
_ZERO_CHECK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class OfflineOptions:
    """An offline read's options, checked (see :func:`parse_offline_options`)."""

    path: str
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    include_headers: bool = False
    include_uncommitted: bool = False
    bytes_per_task: int = BYTES_PER_TASK_DEFAULT


def parse_offline_options(options: Mapping[str, str]) -> OfflineOptions:
    """Check ``options`` (names case-insensitive) into :class:`OfflineOptions`.

    Raises :class:`InvalidInputError` naming the option and what it allows. The
    topic filters are optional here (every topic under ``path`` by default), and
    at most one may be given.
    """
    named: dict[str, str] = {}
    for raw_name, value in options.items():
        name = _BY_LOWER.get(raw_name.lower())
        if name is None:
            raise InvalidInputError(
                unknown_option(
                    raw_name,
                    OFFLINE_OPTIONS,
                    write=False,
                    what="an offline laminar read (the 'path' option reads segment files)",
                )
            )
        named[name] = str(value)
    path = named.get("path", "").strip()
    if not path:
        raise InvalidInputError(
            "option 'path' must name a node's data directory or one partition directory"
        )
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name in named]
    if len(chosen) > 1:
        raise InvalidInputError(
            "at most one of the options 'subscribe', 'subscribePattern' and 'assign' may be "
            f"given, got {chosen}"
        )
    bytes_per_task = BYTES_PER_TASK_DEFAULT
    if "bytesPerTask" in named:
        raw = named["bytesPerTask"].strip()
        if not raw.isdigit() or not 1 <= int(raw) <= BYTES_PER_TASK_MAX:
            raise InvalidInputError(
                f"option 'bytesPerTask' must be an integer in [1, {BYTES_PER_TASK_MAX}], "
                f"got {named['bytesPerTask']!r}"
            )
        bytes_per_task = int(raw)
    return OfflineOptions(
        path=os.path.abspath(path),
        subscribe=parse_subscribe(named["subscribe"]) if "subscribe" in named else None,
        subscribe_pattern=(
            parse_pattern(named["subscribePattern"]) if "subscribePattern" in named else None
        ),
        assign=parse_assign(named["assign"]) if "assign" in named else None,
        include_headers=parse_boolean("includeHeaders", named.get("includeHeaders", "false")),
        include_uncommitted=parse_boolean(
            "includeUncommitted", named.get("includeUncommitted", "false")
        ),
        bytes_per_task=bytes_per_task,
    )


def offline_schema(options: dict[str, str]) -> StructType:
    """The live reader's schema (checks every option first, so a typo fails at ``load()``)."""
    return spark_schema(headers=parse_offline_options(options).include_headers)


# ---------------------------------------------------------------------- planning


@dataclass(frozen=True)
class SegmentTask(InputPartition):
    """One Spark task: the batches of segment file ``path`` from byte ``start_position``
    (where the batch with base offset ``start_offset`` begins) up to
    ``end_position`` (a batch start; None: the end of the file), records cut to
    ``[offset_min, offset_end)``. ``last``: the partition's last segment, whose
    torn tail ends the read quietly. ``segment_end_offset``: the next segment's base
    (a sealed segment must end exactly there), None for the last one."""

    topic: str
    partition: int
    path: str
    start_position: int
    start_offset: int
    end_position: int | None
    offset_min: int
    offset_end: int | None
    timestamp_min_ms: int | None
    last: bool
    segment_end_offset: int | None


def plan(options: OfflineOptions, pushed: Pushed | None = None) -> list[SegmentTask]:
    """The tasks reading what ``options`` and ``pushed`` select (module docstring)."""
    pushed = Pushed() if pushed is None else pushed
    tasks: list[SegmentTask] = []
    for found in _select(options, _partition_dirs(options.path)):
        if not pushed.allows(found.topic, found.partition):
            continue
        tasks.extend(_plan_partition(found, options, pushed))
        if len(tasks) > TASKS_MAX:
            raise InvalidInputError(
                f"the offline read would run more than {TASKS_MAX} tasks; raise 'bytesPerTask' "
                f"(now {options.bytes_per_task}) or select fewer partitions"
            )
    return tasks


def _partition_dirs(path: str) -> list[ReplicaDirectory]:
    """The partition directories under ``path``: a node data directory (holding
    ``partitions/``) or one partition directory; anything else is an error."""
    if not os.path.isdir(path):
        raise InvalidInputError(f"option 'path': {path!r} is not a directory")
    if os.path.isdir(partitions_directory(path)):
        return replica_directories(path)
    partition = parse_partition(os.path.basename(path))
    if partition is not None and any(segment_base_of(n) is not None for n in os.listdir(path)):
        return [ReplicaDirectory(os.path.basename(os.path.dirname(path)), partition, path)]
    raise InvalidInputError(
        f"option 'path': {path!r} is neither a node's data directory (one holding "
        "'partitions/') nor a partition directory (<data>/partitions/<topic>/<partition>, "
        "holding NNNNNNNNNNNNNNNNNNNN.log segment files)"
    )


def _select(options: OfflineOptions, found: list[ReplicaDirectory]) -> list[ReplicaDirectory]:
    """``found`` narrowed by ``subscribe`` / ``subscribePattern`` / ``assign``, or
    without them every partition but those of internal ``__`` topics; a topic or
    partition named but absent under ``path`` is an error (a typo, or the node holds
    no replica of it)."""
    present = {(f.topic, f.partition) for f in found}
    topics = sorted({f.topic for f in found})
    if options.subscribe is not None:
        missing = [t for t in options.subscribe if t not in topics]
        if missing:
            raise InvalidInputError(
                f"option 'subscribe': no partition of {', '.join(missing)} under "
                f"{options.path!r} (topics there: {', '.join(topics) or 'none'})"
            )
        return [f for f in found if f.topic in options.subscribe]
    if options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        return [f for f in found if not f.topic.startswith("__") and pattern.fullmatch(f.topic)]
    if options.assign is not None:
        wanted = {(t, p) for t, partitions in options.assign.items() for p in partitions}
        missing_pairs = sorted(wanted - present)
        if missing_pairs:
            names = ", ".join(f"{t}-{p}" for t, p in missing_pairs)
            raise InvalidInputError(
                f"option 'assign': no directory for {names} under {options.path!r}"
            )
        return [f for f in found if (f.topic, f.partition) in wanted]
    if not os.path.isdir(partitions_directory(options.path)):
        return found  # one partition directory: the one the path names
    # A data directory: every topic but the internal ones (``__cluster``: the
    # catalogue's records), which only subscribe or assign can name.
    return [f for f in found if not f.topic.startswith("__")]


def _committed_bound(
    found: ReplicaDirectory, options: OfflineOptions, has_data: bool
) -> int | None:
    """The exclusive upper bound of the offsets to read; None: no bound."""
    if options.include_uncommitted:
        return None
    committed = read_committed(found.directory)
    if committed is None and has_data:
        raise InvalidInputError(
            f"{found.topic}-{found.partition}: {found.directory} has no 'committed' file "
            "(written by nodes since the offline reader exists, at most ~1 s after a commit), "
            "so what is committed there is unknown; set includeUncommitted=true to read "
            "every batch in the files, including an uncommitted tail"
        )
    return 0 if committed is None else committed


def _plan_partition(
    found: ReplicaDirectory, options: OfflineOptions, pushed: Pushed
) -> list[SegmentTask]:
    bases = segment_bases(found.directory)
    has_data = any(_file_bytes(segment_path(found.directory, b)) for b in bases)
    committed = _committed_bound(found, options, has_data)
    offset_min = pushed.offset_min
    offset_end = pushed.offset_end
    if committed is not None:
        offset_end = committed if offset_end is None else min(offset_end, committed)
    tasks: list[SegmentTask] = []
    for number, base in enumerate(bases):
        following = bases[number + 1] if number + 1 < len(bases) else None
        if offset_end is not None and base >= offset_end:
            break
        if following is not None and following <= offset_min:
            continue
        path = segment_path(found.directory, base)
        template = SegmentTask(
            found.topic,
            found.partition,
            path,
            0,
            base,
            None,
            offset_min,
            offset_end,
            pushed.timestamp_min_ms,
            following is None,
            following,
        )
        tasks.extend(_split_segment(template, options.bytes_per_task))
    return tasks


def _file_bytes(path: str) -> int:
    """The size of ``path``; 0 once it is gone (retention on a running node)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def _split_segment(task: SegmentTask, bytes_per_task: int) -> list[SegmentTask]:
    """``task`` (a whole segment) started as late as its index allows and cut at
    index entries into pieces of about ``bytes_per_task``; the whole segment when
    it has no usable index (the active segment of a running node)."""
    base = task.start_offset
    size = _file_bytes(task.path)
    directory = os.path.dirname(task.path)
    index = SparseIndex.read(index_path(directory, base), time_index_path(directory, base))
    if index is None or not index.entries_are_sane(size):
        return [task]
    wanted = max(task.offset_min - base, 0)
    if task.timestamp_min_ms is not None:
        wanted = max(wanted, index.time_floor(task.timestamp_min_ms))
    first_relative, first_position = index.floor(wanted)
    cuts = [(first_position, base + first_relative)]
    for relative, position in zip(index.relative_offsets, index.positions, strict=True):
        if position >= cuts[-1][0] + bytes_per_task:
            if task.offset_end is not None and base + relative >= task.offset_end:
                break
            cuts.append((position, base + relative))
    pieces = []
    for number, (position, offset) in enumerate(cuts):
        end = cuts[number + 1][0] if number + 1 < len(cuts) else None
        pieces.append(
            dataclasses.replace(
                task,
                start_position=position,
                start_offset=offset,
                end_position=end,
                segment_end_offset=task.segment_end_offset if end is None else None,
            )
        )
    return pieces


# ---------------------------------------------------------------------- reading


def read_segment(task: SegmentTask, *, headers: bool = False) -> Iterator[Any]:
    """Arrow batches of the records ``task`` selects (module docstring); raises
    :class:`CorruptSegmentError` at the first damaged batch it would need."""
    try:
        descriptor = os.open(task.path, os.O_RDONLY)
    except FileNotFoundError:
        raise InvalidInputError(
            f"{task.path} was deleted after the read was planned (retention or a "
            "deleted topic on a running node); run the read again"
        ) from None
    try:  # Spark pays per Arrow batch handed to it: a few, not one per log batch
        held: list[ColumnSlice] = []
        rows = 0
        for piece in _walk(descriptor, task):
            held.append(piece)
            rows += piece[2] - piece[1]
            if rows >= ARROW_ROWS_MIN:
                yield slices_to_arrow(held, task.topic, task.partition, headers=headers)
                held, rows = [], 0
        if held:
            yield slices_to_arrow(held, task.topic, task.partition, headers=headers)
    finally:
        os.close(descriptor)


def _walk(descriptor: int, task: SegmentTask) -> Iterator[ColumnSlice]:
    """The records to return of each batch of ``task`` in turn, checked."""
    size = os.fstat(descriptor).st_size
    end = size if task.end_position is None else min(task.end_position, size)
    position, expected = task.start_position, task.start_offset
    window = _Window(descriptor, size)
    while position < end:
        data, at = window.holding(position, HEADER_BYTES)
        header = _header(descriptor, task, data, at, position, expected, size)
        if header is None:
            return  # torn tail
        if task.offset_end is not None and header.base_offset >= task.offset_end:
            return
        if _wanted(task, header):
            data, at = window.holding(position, header.length)
            try:
                verify_batch(data, at)
                view = column_view(data, at, verify=False)
            except RecordFormatError as error:
                raise CorruptSegmentError(task.path, expected, position, str(error)) from None
            first = max(task.offset_min - header.base_offset, 0)
            stop = header.record_count
            if task.offset_end is not None:
                stop = min(stop, task.offset_end - header.base_offset)
            yield view, first, stop
        position += header.length
        expected = header.next_offset
    # A sealed segment's batches must end by the next one's start (they may end
    # before it: keyed compaction can remove a segment's last records).
    overlap = task.segment_end_offset is not None and expected > task.segment_end_offset
    if overlap and task.end_position is None:
        raise CorruptSegmentError(
            task.path,
            expected,
            position,
            f"the segment ends at offset {expected}, past the next one's start "
            f"{task.segment_end_offset}",
        )


class _Window:
    """Bytes of the file read ahead with one ``pread``: whole batches are checked
    and converted from it (Arrow arrays share its memory, so each window is a
    fresh ``bytes``, never reused)."""

    def __init__(self, descriptor: int, size: int) -> None:
        self.descriptor = descriptor
        self.size = size
        self.data = b""
        self.start = 0

    def holding(self, position: int, count: int) -> tuple[bytes, int]:
        """A buffer holding the file's ``[position, position + count)`` (less at the
        end of the file), and where ``position`` is in it."""
        at = position - self.start
        if at < 0 or at + count > len(self.data):
            wanted = max(count, min(READ_WINDOW_BYTES, self.size - position))
            self.data, self.start, at = _pread(self.descriptor, position, wanted), position, 0
        return self.data, at


def _pread(descriptor: int, position: int, count: int) -> bytes:
    data = os.pread(descriptor, count, position)
    while len(data) < count:  # a regular file returns short only at its end
        more = os.pread(descriptor, count - len(data), position + len(data))
        if not more:
            break
        data += more
    return data


def _header(
    descriptor: int,
    task: SegmentTask,
    window: bytes,
    at: int,
    position: int,
    expected: int,
    size: int,
) -> BatchHeader | None:
    """The checked header of the batch at ``position``; None at a torn tail of the
    last segment. Raises :class:`CorruptSegmentError` for anything else wrong."""
    try:
        header = parse_header(window, at)
    except RecordFormatError as error:
        if task.last and (
            size - position < HEADER_BYTES or _zeros_from(descriptor, position, size)
        ):
            return None
        raise CorruptSegmentError(
            task.path, expected, position, f"bad batch header: {error}"
        ) from None
    if position + header.length > size:
        if task.last:
            return None
        raise CorruptSegmentError(
            task.path,
            expected,
            position,
            f"the batch needs {header.length} bytes, the file has {size - position} left",
        )
    if header.base_offset < expected:  # (a gap before it is fine)
        raise CorruptSegmentError(
            task.path,
            expected,
            position,
            f"the batch's base offset is {header.base_offset}, expected {expected} or more",
        )
    return header


def _wanted(task: SegmentTask, header: BatchHeader) -> bool:
    """Whether any record of the batch may be returned (else its payload is not read)."""
    if header.is_control or header.next_offset <= task.offset_min:
        return False
    return task.timestamp_min_ms is None or header.max_timestamp_ms >= task.timestamp_min_ms


def _zeros_from(descriptor: int, position: int, size: int) -> bool:
    """Whether the file holds only zero bytes from ``position`` to its end (what a
    crash leaves past the data that reached the disk)."""
    while position < size:
        chunk = os.pread(descriptor, min(_ZERO_CHECK_BYTES, size - position), position)
        if not chunk or chunk.count(0) != len(chunk):
            return not chunk
        position += len(chunk)
    return True


# ---------------------------------------------------------------------- Spark


class OfflineBatchReader(PushdownReader):
    """Plans segment tasks on the driver (:meth:`partitions`), reads one on an
    executor (:meth:`read`), which must see the same files (local mode, or a
    shared filesystem). Pushed filters (PySpark >= 4.1 with
    ``spark.sql.python.filterPushdown.enabled``) on ``topic``, ``partition``,
    ``offset`` and ``timestamp`` prune partitions, segments and index ranges
    (:mod:`laminar_spark.pushdown` decides which Spark must still check)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = parse_offline_options(options)
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self.options, self.pushed)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentTask):
            return  # PySpark runs one task with ``None`` when partitions() returns []
        yield from read_segment(partition, headers=self.options.include_headers)
