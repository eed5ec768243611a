"""Planning a batch read: topics -> partitions -> offset ranges -> Spark tasks.

Runs on the driver, once: every range is resolved from one ``ListOffsets``
answer per topic, so ``latest`` is the high watermark seen then and tasks never
read past it. The pure steps (:func:`select_partitions`, :func:`resolve_ranges`,
:func:`split_ranges`) take plain data, so they are tested without a cluster.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from laminar_client.client import LIST_OFFSETS_PARTITIONS_MAX, Client, PartitionOffsets

from laminar.errors import InvalidInputError, UnknownTopicOrPartitionError
from laminar_spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions

__all__ = [
    "DataLossError",
    "OffsetRange",
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


def select_partitions(
    options: ReadOptions, partition_counts: Mapping[str, int]
) -> dict[str, list[int]]:
    """The partitions to read per topic, from the topics' partition counts."""
    if options.subscribe is not None:
        missing = [t for t in options.subscribe if t not in partition_counts]
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
    """Every partition named in a JSON spec must be one being read."""
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


def _offset(spec: OffsetSpec, topic: str, partition: int, default: int) -> int:
    if isinstance(spec, int):
        return spec
    return spec.get(topic, {}).get(partition, default)


def resolve_ranges(
    options: ReadOptions,
    selected: Mapping[str, Sequence[int]],
    offsets: Mapping[str, Mapping[int, PartitionOffsets]],
) -> list[OffsetRange]:
    """Each selected partition's ``[start, end)`` from its log start and high watermark.

    A partition left out of a JSON spec starts at earliest and ends at latest. An
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
            start = _offset(options.starting, topic, partition, EARLIEST)
            end = _offset(options.ending, topic, partition, LATEST)
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
    source's default); it ends at its high watermark. A partition left out of a
    per-partition JSON keeps ``startingOffsets`` / ``endingOffsets``.
    """
    starting, ending = options.starting, options.ending
    if options.starting_time is not None:
        _check_spec("startingOffsetsByTimestamp", options.starting_time, selected)
        found = _offsets_at(options.starting_time, selected, lookup)
        starting = _merged(
            options.starting,
            found,
            selected,
            offsets,
            start=True,
            strategy=options.starting_time_strategy,
        )
    if options.ending_time is not None:
        _check_spec("endingOffsetsByTimestamp", options.ending_time, selected)
        found = _offsets_at(options.ending_time, selected, lookup)
        ending = _merged(
            options.ending,
            found,
            selected,
            offsets,
            start=False,
            strategy=options.starting_time_strategy,
        )
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
            if isinstance(times, int):
                time_ms: int | None = times
            else:
                time_ms = times.get(topic, {}).get(partition)
            if time_ms is not None:
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


def _merged(
    spec: OffsetSpec,
    found: Mapping[tuple[str, int], int | None],
    selected: Mapping[str, Sequence[int]],
    offsets: Mapping[str, Mapping[int, PartitionOffsets]],
    *,
    start: bool,
    strategy: str,
) -> OffsetSpec:
    """An explicit spec for every selected partition: the offset found for its
    time, else what ``spec`` says for it (-2/-1 for the words)."""
    default = EARLIEST if start else LATEST
    merged: dict[str, dict[int, int]] = {}
    for topic, partitions in selected.items():
        for partition in partitions:
            if (topic, partition) in found:
                offset = found[(topic, partition)]
                if offset is None:
                    if start and strategy == "error":
                        raise InvalidInputError(
                            f"{topic}-{partition}: no record at or after the starting time; "
                            "set startingOffsetsByTimestampStrategy=latest to start at its "
                            "end instead"
                        )
                    offset = offsets[topic][partition].high_watermark
            elif isinstance(spec, int):
                offset = spec
            else:
                offset = spec.get(topic, {}).get(partition, default)
            merged.setdefault(topic, {})[partition] = offset
    return merged


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Non-empty ranges cut into Spark tasks.

    Each range gets ``ceil(size / max_records)`` parts (one without ``max_records``);
    while there are fewer than ``min_partitions`` parts in all, the range with the
    most offsets per part gets one more (never more parts than offsets). A range's
    parts are near-equal, the larger ones first.
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
    tasks: list[OffsetRange] = []
    for r, n in zip(live, parts, strict=True):
        base, extra = divmod(r.size, n)
        start = r.start
        for k in range(n):
            end = start + base + (1 if k < extra else 0)
            tasks.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return tasks


def plan(options: ReadOptions, client: Client) -> list[OffsetRange]:
    """Resolve ``options`` against the cluster (one metadata and one ``ListOffsets``
    per topic) and split the ranges into tasks."""
    metadata = client.metadata(refresh=True)
    counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
    selected = select_partitions(options, counts)
    offsets: dict[str, dict[int, PartitionOffsets]] = {}
    for topic, partitions in selected.items():
        answers: dict[int, PartitionOffsets] = {}
        for i in range(0, len(partitions), LIST_OFFSETS_PARTITIONS_MAX):
            answers.update(
                client.list_offsets(topic, partitions[i : i + LIST_OFFSETS_PARTITIONS_MAX])
            )
        offsets[topic] = answers
    options = resolve_times(options, selected, offsets, client.list_offsets)
    ranges = resolve_ranges(options, selected, offsets)
    return split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records=options.max_records_per_partition,
    )
