"""Planning a batch read: topics -> partitions -> offset ranges -> Spark tasks.

Runs on the driver, once: every range is resolved from one ``ListOffsets``
answer per topic, so ``latest`` is the high watermark seen then and tasks never
read past it. Filters Spark pushed down (:mod:`laminar_spark.pushdown`) then
narrow the ranges (:func:`narrow_ranges`), and :func:`split_ranges` cuts them
into tasks. The pure steps take plain data, so they are tested without a cluster.

Splitting without knowing where batches start
---------------------------------------------
The planner cannot see batch boundaries (asking for them would cost an index RPC
per split point), yet a batch that straddles a split point should be fetched,
verified and decoded by one task, not two. So a split point inside a range is
*soft*: the :class:`ReadTask` that owns ``[start, end)`` reads every batch whose
base offset falls in it *whole*, even past ``end``, and skips a batch that begins
below ``start`` (the previous task owns it). Only the range's own bounds,
``range_start`` and ``range_end``, cut records. Every batch of the range then has
exactly one owner: the first task owns the batch holding ``range_start``, and any
other batch is owned by the task whose ``[start, end)`` holds its base offset.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from laminar_client.client import LIST_OFFSETS_PARTITIONS_MAX, Client, PartitionOffsets

from laminar.errors import (
    InvalidInputError,
    TopicNotAuthorizedError,
    UnknownTopicOrPartitionError,
)
from laminar_spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions
from laminar_spark.pushdown import Pushed

__all__ = [
    "DataLossError",
    "OffsetRange",
    "ReadTask",
    "narrow_ranges",
    "plan",
    "resolve_ranges",
    "select_partitions",
    "split_ranges",
]

log = logging.getLogger("laminar_spark")


class DataLossError(InvalidInputError):
    """Offsets asked for are below the partition's log start (``failOnDataLoss``)."""


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One Spark task's share of a range ``[range_start, range_end)`` of a partition.

    The task owns the batches whose base offset is in ``[start, end)`` and, when
    ``start == range_start``, the batch holding ``start`` too; it yields their
    records that lie in ``[range_start, range_end)`` (see the module docstring).
    A task with ``(start, end) == (range_start, range_end)`` reads exactly its range.
    """

    topic: str
    partition: int
    start: int
    end: int
    range_start: int
    range_end: int

    def __post_init__(self) -> None:
        if not self.range_start <= self.start <= self.end <= self.range_end:
            raise InvalidInputError(
                f"{self.topic}-{self.partition}: a task's [{self.start}, {self.end}) must lie "
                f"in its range [{self.range_start}, {self.range_end})"
            )

    @classmethod
    def whole(cls, offsets: OffsetRange) -> ReadTask:
        """The task that reads all of ``offsets``, cut at both of its ends."""
        topic, partition, start, end = offsets.topic, offsets.partition, offsets.start, offsets.end
        return cls(topic, partition, start, end, start, end)

    @property
    def size(self) -> int:
        """Offsets owned (the records read differ by at most a batch at each end)."""
        return self.end - self.start


def select_partitions(
    options: ReadOptions, partition_counts: Mapping[str, int], *, filtered: bool = False
) -> dict[str, list[int]]:
    """The partitions to read per topic, from the topics' partition counts.

    ``filtered``: the cluster showed only the topics this caller may describe
    (:attr:`ClusterMetadata.filtered`), so a topic named and not seen raises
    :class:`TopicNotAuthorizedError` (an :class:`UnknownTopicOrPartitionError` too)
    rather than a bare unknown topic. A pattern matches the topics shown.
    """
    if options.subscribe is not None:
        missing = [t for t in options.subscribe if t not in partition_counts]
        if missing and filtered:
            raise TopicNotAuthorizedError(missing[0])
        if missing:
            raise UnknownTopicOrPartitionError(
                f"option 'subscribe': unknown topic(s) {', '.join(missing)}"
            )
        return {t: list(range(partition_counts[t])) for t in options.subscribe}
    if options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        return {
            t: list(range(count))
            for t, count in sorted(partition_counts.items())
            if not t.startswith("__") and pattern.fullmatch(t)
        }
    assert options.assign is not None
    selected: dict[str, list[int]] = {}
    for topic, partitions in options.assign.items():
        if topic not in partition_counts and filtered:
            raise TopicNotAuthorizedError(topic)
        if topic not in partition_counts:
            raise UnknownTopicOrPartitionError(f"option 'assign': unknown topic {topic!r}")
        count = partition_counts[topic]
        beyond = [p for p in partitions if p >= count]
        if beyond:
            raise UnknownTopicOrPartitionError(
                f"option 'assign': topic {topic!r} has partitions 0..{count - 1}, not {beyond}"
            )
        selected[topic] = sorted(partitions)
    return selected


def _check_spec(option: str, spec: OffsetSpec, selected: Mapping[str, Sequence[int]]) -> None:
    """A JSON spec names exactly the partitions being read, as in Spark's Kafka source.

    Its rule (``KafkaOffsetReaderAdmin.fetchPartitionOffsets`` and
    ``fetchSpecificTimestampBasedOffsets``, which both ``assert(partitions ==
    partitionOffsets.keySet, ...)``): "If startingOffsets contains specific offsets,
    you must specify all TopicPartitions. Use -1 for latest, -2 for earliest." and
    "If starting/endingOffsetsByTimestamp contains specific offsets, you must
    specify all topics." The same holds for ``endingOffsets``, in batch and streaming
    reads alike. So a partition left out is an error, not a silent default.
    """
    if isinstance(spec, int):
        return
    for topic, entries in spec.items():
        if topic not in selected:
            raise InvalidInputError(
                f"option {option!r} names topic {topic!r}, which is not being read "
                f"(reading: {', '.join(sorted(selected)) or 'none'})"
            )
        extra = sorted(set(entries) - set(selected[topic]))
        if extra:
            raise InvalidInputError(
                f"option {option!r} names partition(s) {extra} of {topic!r}, which are not "
                f"being read (reading: {list(selected[topic])})"
            )
    missing = [
        f"{topic}-{partition}"
        for topic, partitions in selected.items()
        for partition in partitions
        if partition not in spec.get(topic, {})
    ]
    if missing:
        fill = "-2 for earliest, -1 for latest" if "Timestamp" not in option else "a time"
        raise InvalidInputError(
            f"option {option!r} must name every partition being read, as in Spark's Kafka "
            f"source (use {fill}); missing: {', '.join(missing[:20])}"
            + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        )


def _offset(spec: OffsetSpec, topic: str, partition: int) -> int:
    """The offset ``spec`` gives the partition (checked by :func:`_check_spec`)."""
    return spec if isinstance(spec, int) else spec[topic][partition]


def resolve_ranges(
    options: ReadOptions,
    selected: Mapping[str, Sequence[int]],
    offsets: Mapping[str, Mapping[int, PartitionOffsets]],
) -> list[OffsetRange]:
    """Each selected partition's ``[start, end)`` from its log start and high watermark.

    A JSON spec must name every partition read (:func:`_check_spec`). An
    explicit offset beyond the high watermark, or a start after the end, is an
    error. A start below the log start fails (``failOnDataLoss``, the default) or
    moves up to the log start, logging how many offsets were skipped.
    """
    _check_spec("startingOffsets", options.starting, selected)
    _check_spec("endingOffsets", options.ending, selected)
    ranges: list[OffsetRange] = []
    skipped: list[str] = []
    for topic, partitions in selected.items():
        for partition in partitions:
            known = offsets[topic][partition]
            low, high = known.log_start_offset, known.high_watermark
            name = f"{topic}-{partition}"
            start = _offset(options.starting, topic, partition)
            end = _offset(options.ending, topic, partition)
            start = low if start == EARLIEST else high if start == LATEST else start
            end = high if end == LATEST else end
            if start > high:
                raise InvalidInputError(
                    f"option 'startingOffsets': offset {start} of {name} is beyond its "
                    f"high watermark {high}"
                )
            if end > high:
                raise InvalidInputError(
                    f"option 'endingOffsets': offset {end} of {name} is beyond its "
                    f"high watermark {high}"
                )
            if start > end:
                raise InvalidInputError(
                    f"{name}: starting offset {start} is after ending offset {end}"
                )
            if start < low:
                lost = min(end, low)
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"{name}: offsets [{start}, {lost}) are no longer available (log start "
                        f"is {low}); set failOnDataLoss=false to skip them"
                    )
                skipped.append(f"{name}: {lost - start} offsets [{start}, {lost})")
                start = lost
            ranges.append(OffsetRange(topic, partition, start, end))
    if skipped:
        log.warning(
            "failOnDataLoss=false: skipping offsets below the log start: %s", "; ".join(skipped)
        )
    return ranges


Lookup = Callable[..., Mapping[int, PartitionOffsets]]
"""``client.list_offsets(topic, partitions, timestamp_ms=...)``."""


def resolve_times(
    options: ReadOptions,
    selected: Mapping[str, Sequence[int]],
    offsets: Mapping[str, Mapping[int, PartitionOffsets]],
    lookup: Lookup,
) -> ReadOptions:
    """``options`` with its starting and ending times turned into offsets.

    A time's offset is the first whose record timestamp is at least the time
    (``ListOffsets``). A partition with no such record starts at its high watermark
    with ``startingOffsetsByTimestampStrategy=latest``, else fails (Spark's Kafka
    source's default); it ends at its high watermark. A per-partition JSON names
    every partition read (:func:`_check_spec`), so a time replaces the offsets
    options wholly, as in Spark's Kafka source.
    """
    starting, ending = options.starting, options.ending
    if options.starting_time is not None:
        _check_spec("startingOffsetsByTimestamp", options.starting_time, selected)
        found = _offsets_at(options.starting_time, selected, lookup)
        starting = _resolved(found, offsets, start=True, strategy=options.starting_time_strategy)
    if options.ending_time is not None:
        _check_spec("endingOffsetsByTimestamp", options.ending_time, selected)
        found = _offsets_at(options.ending_time, selected, lookup)
        ending = _resolved(found, offsets, start=False, strategy=options.starting_time_strategy)
    return dataclasses.replace(
        options, starting=starting, ending=ending, starting_time=None, ending_time=None
    )


def _offsets_at(
    times: int | Mapping[str, Mapping[int, int]],
    selected: Mapping[str, Sequence[int]],
    lookup: Lookup,
) -> dict[tuple[str, int], int | None]:
    """The first offset at or after each partition's time (None: no such record)."""
    wanted: dict[int, dict[str, list[int]]] = {}  # time -> topic -> partitions
    for topic, partitions in selected.items():
        for partition in partitions:
            time_ms = times if isinstance(times, int) else times[topic][partition]
            wanted.setdefault(time_ms, {}).setdefault(topic, []).append(partition)
    found: dict[tuple[str, int], int | None] = {}
    for time_ms, topics in wanted.items():
        for topic, partitions in topics.items():
            for i in range(0, len(partitions), LIST_OFFSETS_PARTITIONS_MAX):
                chunk = partitions[i : i + LIST_OFFSETS_PARTITIONS_MAX]
                answers = lookup(topic, chunk, timestamp_ms=time_ms)
                for partition in chunk:
                    found[(topic, partition)] = answers[partition].offset_for_timestamp
    return found


def _resolved(
    found: Mapping[tuple[str, int], int | None],
    offsets: Mapping[str, Mapping[int, PartitionOffsets]],
    *,
    start: bool,
    strategy: str,
) -> OffsetSpec:
    """An explicit spec for every partition of ``found``: the offset found for its
    time, or its high watermark when none was found (an error for a start with the
    ``error`` strategy)."""
    resolved: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in found.items():
        if offset is None and start and strategy == "error":
            raise InvalidInputError(
                f"{topic}-{partition}: no record at or after the starting time; "
                "set startingOffsetsByTimestampStrategy=latest to start at its "
                "end instead"
            )
        end = offsets[topic][partition].high_watermark
        resolved.setdefault(topic, {})[partition] = end if offset is None else offset
    return resolved


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[ReadTask]:
    """Non-empty ranges cut into Spark tasks at soft split points (module docstring).

    Each range gets ``ceil(size / max_records)`` parts (one without ``max_records``);
    while there are fewer than ``min_partitions`` parts in all, the range with the
    most offsets per part gets one more (never more parts than offsets). A range's
    parts are near-equal, the larger ones first. A task may read up to one batch
    more than its share (the batch straddling its end) and a task inside one large
    batch reads nothing, so ``max_records`` bounds offsets owned, not rows read.
    """
    live = [r for r in ranges if r.size > 0]
    parts = [1 if max_records is None else -(-r.size // max_records) for r in live]
    if min_partitions is not None and sum(parts) < min_partitions:
        heap = [(-r.size / n, i) for i, (r, n) in enumerate(zip(live, parts, strict=True))]
        heapq.heapify(heap)
        total = sum(parts)
        while total < min_partitions and heap:
            _, i = heapq.heappop(heap)
            if parts[i] >= live[i].size:
                continue
            parts[i] += 1
            total += 1
            heapq.heappush(heap, (-live[i].size / parts[i], i))
    tasks: list[ReadTask] = []
    for r, n in zip(live, parts, strict=True):
        base, extra = divmod(r.size, n)
        start = r.start
        for k in range(n):
            end = start + base + (1 if k < extra else 0)
            tasks.append(ReadTask(r.topic, r.partition, start, end, r.start, r.end))
            start = end
    return tasks


def narrow_ranges(
    ranges: Sequence[OffsetRange], pushed: Pushed, lookup: Lookup
) -> list[OffsetRange]:
    """The non-empty parts of ``ranges`` that pushed filters allow.

    Partitions and offsets are cut as :class:`~laminar_spark.pushdown.Pushed` says.
    A lowest time moves each range's start to the first record at or after it
    (one ``ListOffsets`` per topic); with no such record on the replica that
    answered, to that replica's high watermark: every record below is older, so
    none that passes is skipped. A range whose start is already below the
    replica's log start is not moved, so that the read still reports the loss
    (``failOnDataLoss``) instead of the time hiding it.
    """
    kept: list[OffsetRange] = []
    for r in ranges:
        if pushed.allows(r.topic, r.partition):
            start, end = pushed.offsets(r.start, r.end)
            if start < end:
                kept.append(OffsetRange(r.topic, r.partition, start, end))
    time_ms = pushed.timestamp_min_ms
    if time_ms is None or not kept:
        return kept
    wanted: dict[str, list[int]] = {}
    for r in kept:
        wanted.setdefault(r.topic, []).append(r.partition)
    answers: dict[tuple[str, int], PartitionOffsets] = {}
    for topic, partitions in wanted.items():
        for i in range(0, len(partitions), LIST_OFFSETS_PARTITIONS_MAX):
            chunk = partitions[i : i + LIST_OFFSETS_PARTITIONS_MAX]
            for partition, answer in lookup(topic, chunk, timestamp_ms=time_ms).items():
                answers[(topic, partition)] = answer
    narrowed = []
    for r in kept:
        answer = answers[(r.topic, r.partition)]
        start = r.start
        if answer.log_start_offset <= r.start:
            found = answer.offset_for_timestamp
            older_below = answer.high_watermark if found is None else found
            start = min(max(start, older_below), r.end)
        if start < r.end:
            narrowed.append(OffsetRange(r.topic, r.partition, start, r.end))
    return narrowed


def plan(options: ReadOptions, client: Client, pushed: Pushed | None = None) -> list[ReadTask]:
    """Resolve ``options`` against the cluster (one metadata and one ``ListOffsets``
    per topic), narrow the ranges by the ``pushed`` filters and split them into
    tasks."""
    metadata = client.metadata(refresh=True)
    counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
    selected = select_partitions(options, counts, filtered=metadata.filtered)
    offsets: dict[str, dict[int, PartitionOffsets]] = {}
    for topic, partitions in selected.items():
        answers: dict[int, PartitionOffsets] = {}
        for i in range(0, len(partitions), LIST_OFFSETS_PARTITIONS_MAX):
            # From each leader: a follower's high watermark trails it by a heartbeat,
            # and a read planned right after an acknowledged write must include it
            # (Spark's Kafka source takes "latest" from the leaders too).
            answers.update(
                client.list_offsets(
                    topic, partitions[i : i + LIST_OFFSETS_PARTITIONS_MAX], leader=True
                )
            )
        offsets[topic] = answers
    options = resolve_times(options, selected, offsets, client.list_offsets)
    ranges = resolve_ranges(options, selected, offsets)
    if pushed is not None and pushed != Pushed():
        before = sum(r.size for r in ranges)
        ranges = narrow_ranges(ranges, pushed, client.list_offsets)
        log.info(
            "pushed filters narrow the read from %d to %d offsets: %s",
            before,
            sum(r.size for r in ranges),
            pushed,
        )
    return split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records=options.max_records_per_partition,
    )
