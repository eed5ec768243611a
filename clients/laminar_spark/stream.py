"""The streaming reader: ``spark.readStream.format("laminar")``.

Theory of operation
===================

Spark drives a micro-batch stream through a handful of calls, all made on the
driver in one long-lived Python process per query (PySpark's streaming source
runner), except :meth:`LaminarStreamReader.read`, which runs on executors:

``initialOffset()``
    Only for a new query (a restart resumes from the checkpoint): resolves
    ``startingOffsets`` (default ``latest``, as Spark's Kafka source) or the
    starting times through the batch planner's own functions, against one
    ``ListOffsets`` snapshot.
``latestOffset(start, limit)``
    The end of the next micro-batch: one metadata and ``ListOffsets`` snapshot,
    then the admission rules (:func:`next_end`): ``maxOffsetsPerTrigger`` shared
    across partitions in proportion to their lag (:func:`rate_limit`),
    ``minOffsetsPerTrigger`` with ``maxTriggerDelay``. Returning ``start`` means "no
    batch now". A partition missing from ``start`` (new, or of a new topic matching
    ``subscribePattern``) starts at its log start ("earliest").
``partitions(start, end)``
    The offset ranges between the two offsets (a partition missing from ``start``
    begins at 0, as in Spark's Kafka source, so the answer depends on nothing but
    ``start`` and ``end``), checked against the log start (``failOnDataLoss``) and
    cut into tasks by :func:`~laminar_spark.planner.split_ranges`.
``read(partition)``
    :func:`~laminar_spark.reader.read_range`, exactly as the batch reader.
``commit(end)``
    Nothing: see :meth:`LaminarStreamReader.commit`.

An *offset* (Spark's word for a stream position) is ``{"topic": {"partition":
next_offset}}``. Spark writes each batch's end to its offset log before running
the batch and compares offsets as JSON text, so :func:`offsets_to_json` always
orders topics by name and partitions by number: the same position is always the
same text. Exactly once, across restarts (with a sink that is, such as files or
``foreachBatch`` keyed on the batch id): a batch's ranges are a function of the two
logged offsets, so a batch replayed after a crash reads the same records (unless
retention deleted them meanwhile: ``failOnDataLoss``), and the next batch starts
where the last committed one ended.

Versions: on PySpark 4.2+ the reader has admission control (``latestOffset(start,
limit)``, :meth:`~LaminarStreamReader.getDefaultReadLimit`) and supports
``Trigger.AvailableNow`` (:meth:`~LaminarStreamReader.prepareForTriggerAvailableNow`).
PySpark 4.0/4.1 call ``latestOffset()`` with no arguments: the reader then
remembers the position itself and applies ``maxOffsetsPerTrigger`` on its own once
it knows where the stream is (after ``initialOffset``, or when Spark replays or
commits a batch on restart; the first batch after a restart that finds every batch
committed is not limited). ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are
ignored there, and ``Trigger.AvailableNow`` / ``Trigger.Once``, which Spark then
runs as one batch up to one ``latestOffset()``, read at most
``maxOffsetsPerTrigger`` offsets per run when it is set.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from laminar.errors import InvalidInputError, UnknownTopicOrPartitionError
from laminar.ids import TopicPartition
from laminar_spark.kafka_options import warn_ignored
from laminar_spark.options import ReadOptions, parse_options
from laminar_spark.partition import input_partitions, read_partition
from laminar_spark.planner import (
    DataLossError,
    OffsetRange,
    resolve_ranges,
    resolve_times,
    select_partitions,
    split_ranges,
)
from laminar_spark.security import open_client

if TYPE_CHECKING:
    from laminar_client.client import Client, PartitionOffsets
    from laminar_client.metadata import ClusterMetadata
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
else:
    try:  # PySpark >= 4.2: admission control and Trigger.AvailableNow for Python sources
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxRows,
            ReadMinRows,
            SupportsTriggerAvailableNow,
        )
    except ImportError:  # PySpark 4.0/4.1: stand-ins, never passed in by Spark

        class ReadLimit:
            pass

        @dataclass
        class ReadAllAvailable(ReadLimit):
            pass

        @dataclass
        class ReadMaxRows(ReadLimit):
            max_rows: int

        @dataclass
        class ReadMinRows(ReadLimit):
            min_rows: int

        class SupportsTriggerAvailableNow:
            pass


__all__ = [
    "REPLICA_ROUNDS_MAX",
    "LaminarStreamReader",
    "Position",
    "next_end",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "reconcile",
    "stream_ranges",
]

log = logging.getLogger("laminar_spark")

Position = dict[TopicPartition, int]
"""The next offset to read of each partition."""
OffsetJson = dict[str, dict[str, int]]
"""A :data:`Position` as Spark keeps it: ``{"topic": {"partition": offset}}``."""

REPLICA_ROUNDS_MAX = 5
"""Most ``ListOffsets`` rounds of one snapshot that asks every replica
(:meth:`LaminarStreamReader._snapshot`): one per live replica of the widest partition."""
OFFSET_MAX = 2**63 - 1
"""Spark keeps offsets as longs."""


# --------------------------------------------------------------------------- offsets


def offsets_to_json(position: Mapping[TopicPartition, int]) -> OffsetJson:
    """``position`` in Spark's form, topics by name and partitions by number (Spark
    compares offsets as JSON text, so one position must always give one text)."""
    offsets: OffsetJson = {}
    for (topic, partition), offset in sorted(position.items()):
        offsets.setdefault(topic, {})[str(partition)] = offset
    return offsets


def offsets_from_json(offsets: object, what: str = "offset") -> Position:
    """A position from Spark's form (as :func:`offsets_to_json` wrote it, read back
    from a checkpoint): a clear error if it is not that shape."""
    shape = '{"topic": {"partition": offset}} with offsets >= 0'
    if not isinstance(offsets, dict):
        raise InvalidInputError(f"{what} must be {shape}, got {offsets!r}")
    position: Position = {}
    for topic, entries in offsets.items():
        if not isinstance(topic, str) or not isinstance(entries, dict):
            raise InvalidInputError(f"{what}: topic {topic!r} needs {shape}, got {entries!r}")
        for partition, offset in entries.items():
            text = str(partition)
            valid = isinstance(offset, int) and not isinstance(offset, bool)
            if not text.isdigit() or not valid or not 0 <= offset <= OFFSET_MAX:
                raise InvalidInputError(
                    f"{what}: {topic}-{partition} needs a partition number and an offset "
                    f">= 0, got {partition!r}: {offset!r}"
                )
            position[(topic, int(text))] = offset
    return position


def _name(topic_partition: TopicPartition) -> str:
    return f"{topic_partition[0]}-{topic_partition[1]}"


# --------------------------------------------------------------------------- admission


def rate_limit(
    begins: Mapping[TopicPartition, int], highs: Mapping[TopicPartition, int], max_offsets: int
) -> Position:
    """The end of each partition in ``highs`` such that a batch reads at most
    ``max_offsets`` offsets, shared in proportion to each partition's lag (Spark's
    Kafka source's ``rateLimit``).

    The shares are whole numbers that add up to exactly ``min(max_offsets, total
    lag)`` (largest remainders first; Kafka's rounding can read up to one offset per
    partition more than the limit). When ``max_offsets`` allows it, every partition
    with a lag gets at least one offset, taken from the largest share (Kafka's "don't
    starve small partitions"), so a partition with little lag still progresses
    while others hold millions.
    """
    if max_offsets < 1:
        raise InvalidInputError(f"max_offsets must be >= 1, got {max_offsets}")
    lags = {tp: highs[tp] - begins[tp] for tp in sorted(highs) if highs[tp] > begins[tp]}
    if sum(lags.values()) <= max_offsets:
        return dict(highs)
    shares = _shares(lags, max_offsets)
    if max_offsets >= len(lags):
        for tp in [tp for tp, share in shares.items() if share == 0]:
            donor = min(shares, key=lambda other: (-shares[other], other))
            shares[donor] -= 1  # >= 2: the shares add up to at least one per partition
            shares[tp] = 1
    ends = {tp: begins[tp] + shares[tp] if tp in shares else high for tp, high in highs.items()}
    assert sum(shares.values()) == max_offsets, (shares, max_offsets)
    return ends


def _shares(weights: Mapping[TopicPartition, int], amount: int) -> dict[TopicPartition, int]:
    """``amount`` split in proportion to ``weights`` (which add up to more) into whole
    numbers, the remainder one by one to the largest fractions (ties: first in order)."""
    total = sum(weights.values())
    shares: dict[TopicPartition, int] = {}
    fractions: list[tuple[int, TopicPartition]] = []
    for tp, weight in weights.items():
        shares[tp], remainder = divmod(weight * amount, total)
        fractions.append((-remainder, tp))
    for _, tp in heapq.nsmallest(amount - sum(shares.values()), fractions):
        shares[tp] += 1
    return shares


def next_end(
    begins: Mapping[TopicPartition, int],
    highs: Mapping[TopicPartition, int],
    *,
    max_offsets: int | None,
    min_offsets: int | None,
    waited_s: float,
    max_trigger_delay_s: float,
) -> Position | None:
    """The end of the next micro-batch, or None to wait for more data.

    ``begins`` and ``highs`` hold the same partitions (``highs[tp] >= begins[tp]``).
    With ``min_offsets``, fewer new offsets than that wait, unless ``waited_s``
    (since the last batch) reached ``max_trigger_delay_s``; then ``max_offsets``
    caps the batch (:func:`rate_limit`). Kafka's order: the minimum first.
    """
    if min_offsets is not None and waited_s < max_trigger_delay_s:
        available = sum(highs[tp] - begins[tp] for tp in highs)
        if available < min_offsets:
            return None
    if max_offsets is None:
        return dict(highs)
    return rate_limit(begins, highs, max_offsets)


def reconcile(
    start: Mapping[TopicPartition, int],
    known: Mapping[TopicPartition, PartitionOffsets],
    *,
    fail_on_data_loss: bool,
) -> tuple[Position, Position]:
    """Where each partition in ``known`` (the current snapshot) begins and how far it
    can go: ``(begins, highs)`` over the same partitions.

    A partition missing from ``start`` is new and begins at its log start. A start
    below the log start lost offsets to retention, and a partition of ``start``
    missing from ``known`` is gone: both fail with ``fail_on_data_loss``, else are
    skipped with a warning. A high watermark below the start is a replica that
    trails (``ListOffsets`` may be answered by any replica): nothing new there yet.
    """
    lost: list[str] = []
    for tp in sorted(start.keys() - known.keys()):
        message = (
            f"{_name(tp)} is gone (deleted, or no longer selected by the options): the "
            f"offsets from {start[tp]} on"
        )
        if fail_on_data_loss:
            raise DataLossError(
                f"{message} cannot be read; set failOnDataLoss=false to go on without it"
            )
        lost.append(f"{message} are skipped")
    begins: Position = {}
    highs: Position = {}
    for tp in sorted(known):
        low = known[tp].log_start_offset
        begin = start.get(tp, low)
        if begin < low:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{_name(tp)}: offsets [{begin}, {low}) are no longer available (log "
                    f"start is {low}); set failOnDataLoss=false to skip them"
                )
            lost.append(f"{_name(tp)}: {low - begin} offsets [{begin}, {low})")
            begin = low
        begins[tp] = begin
        highs[tp] = max(known[tp].high_watermark, begin)
    if lost:
        log.warning("failOnDataLoss=false: skipping %s", "; ".join(lost))
    return begins, highs


def stream_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    known: Mapping[TopicPartition, PartitionOffsets],
    *,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """The non-empty ranges ``[start, end)`` of one micro-batch.

    A partition missing from ``start`` begins at 0 (Spark's Kafka source: a new
    partition is read from its first offset, and the range must not depend on when
    it is planned). ``known`` holds the current log starts of the partitions with a
    non-empty range; offsets below them (or of a partition missing from ``known``:
    gone) fail with ``fail_on_data_loss``, else are skipped with a warning. An end
    before the start cannot come from :meth:`LaminarStreamReader.latestOffset`; it
    fails or is skipped the same way.
    """
    ranges: list[OffsetRange] = []
    lost: list[str] = []
    hint = "; set failOnDataLoss=false to skip them"
    for tp in sorted(end):
        begin, stop = start.get(tp, 0), end[tp]
        if stop < begin:
            message = f"{_name(tp)}: the batch ends at {stop}, before its start {begin}"
            if fail_on_data_loss:
                raise DataLossError(message + hint)
            lost.append(message)
            continue
        if stop == begin:
            continue
        if tp not in known:
            message = f"{_name(tp)} is gone (deleted?): offsets [{begin}, {stop})"
            if fail_on_data_loss:
                raise DataLossError(f"{message} cannot be read{hint}")
            lost.append(message)
            continue
        low = known[tp].log_start_offset
        if begin < low:
            missing = min(stop, low)
            if fail_on_data_loss:
                raise DataLossError(
                    f"{_name(tp)}: offsets [{begin}, {missing}) are no longer available "
                    f"(log start is {low}){hint}"
                )
            lost.append(f"{_name(tp)}: {missing - begin} offsets [{begin}, {missing})")
            begin = missing
        if begin < stop:
            ranges.append(OffsetRange(tp[0], tp[1], begin, stop))
    if lost:
        log.warning("failOnDataLoss=false: skipping %s", "; ".join(lost))
    return ranges


# --------------------------------------------------------------------------- the reader


class LaminarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's micro-batch stream over a live cluster (see the module docstring).

    Spark pickles the reader to executors, which only call :meth:`read`: pickling
    keeps the checked options alone (:meth:`__getstate__`); the driver's client and
    state are made on first use.
    """

    def __init__(
        self,
        options: dict[str, str],
        schema: StructType,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        del schema  # the columns follow includeHeaders, as the batch reader's
        self.options: ReadOptions = parse_options(options, streaming=True)
        warn_ignored(self.options.ignored, "laminar streaming read")
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self._client: Client | None = None
        self._position: Position | None = None  # PySpark 4.0/4.1 only: the start
        self._target: dict[TopicPartition, PartitionOffsets] | None = None  # AvailableNow
        self._latest: Position | None = None  # last snapshot: reportLatestOffset
        self._last_trigger_s: float | None = None  # None: no batch yet (never delays)

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._clock = time.monotonic
        self._reset()

    # ------------------------------------------------------------------ driver

    def initialOffset(self) -> OffsetJson:  # noqa: N802
        """The first offset of a new query: ``startingOffsets`` (default ``latest``)
        or the starting times, resolved as the batch reader resolves them. Asks every
        replica (:meth:`_snapshot`), so ``latest`` starts after every record
        acknowledged before the query started (a trailing replica's answer alone could
        start a little earlier)."""
        client = self._connect()
        metadata = client.metadata(refresh=True)
        counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
        selected = select_partitions(self.options, counts, filtered=metadata.filtered)
        known = self._snapshot(client, selected, replica_rounds=_rounds(metadata, selected))
        gone = sorted({t for t, ps in selected.items() for p in ps if (t, p) not in known})
        if gone:
            raise UnknownTopicOrPartitionError(
                f"topic(s) {', '.join(gone)} deleted while the query started"
            )
        offsets: dict[str, dict[int, PartitionOffsets]] = {}
        for (topic, partition), answer in known.items():
            offsets.setdefault(topic, {})[partition] = answer
        options = resolve_times(self.options, selected, offsets, client.list_offsets)
        ranges = resolve_ranges(options, selected, offsets)
        position = {(r.topic, r.partition): r.start for r in ranges}
        self._position = position
        return offsets_to_json(position)

    def latestOffset(  # noqa: N802
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> OffsetJson:
        """The end of the next micro-batch (``start`` itself: no batch now).

        PySpark 4.2+ passes ``start`` and ``limit``: :class:`ReadAllAvailable` (e.g.
        ``Trigger.Once``) reads everything, otherwise the options' limits apply
        (Spark passes only that or :meth:`getDefaultReadLimit`'s value, which stands
        for both limits since PySpark has no composite limit). PySpark 4.0/4.1 pass
        nothing: see the module docstring.
        """
        begin: Position | None
        if start is None:
            begin = self._position
            max_offsets = self.options.max_offsets_per_trigger if begin is not None else None
            min_offsets = None
        else:
            begin = offsets_from_json(start, "start offset")
            max_offsets, min_offsets = self._limits(limit)
        if self._target is not None:
            known = self._target
            min_offsets = None  # no data beyond the target will come to reach a minimum
        else:
            client = self._connect()
            metadata = client.metadata(refresh=True)
            known = self._snapshot(client, self._streamed(metadata), replica_rounds=1)
        if begin is None:  # 4.0/4.1 after a restart: where the stream is is unknown
            highs = {tp: answer.high_watermark for tp, answer in known.items()}
            self._latest = self._position = highs
            return offsets_to_json(highs)
        begins, highs = reconcile(begin, known, fail_on_data_loss=self.options.fail_on_data_loss)
        self._latest = highs
        now = self._clock()
        waited_s = math.inf if self._last_trigger_s is None else now - self._last_trigger_s
        end = next_end(
            begins,
            highs,
            max_offsets=max_offsets,
            min_offsets=min_offsets,
            waited_s=waited_s,
            max_trigger_delay_s=self.options.max_trigger_delay_s,
        )
        if end is None:
            return offsets_to_json(begin)
        self._last_trigger_s = now
        self._position = end
        return offsets_to_json(end)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``maxOffsetsPerTrigger`` as :class:`ReadMaxRows`, else
        ``minOffsetsPerTrigger`` as :class:`ReadMinRows`, else everything. Spark hands
        this value back to :meth:`latestOffset`, which applies both options."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> OffsetJson | None:  # noqa: N802
        """The high watermarks of the last :meth:`latestOffset` (the query's progress
        shows how far behind it is), or None before the first."""
        return None if self._latest is None else offsets_to_json(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """``Trigger.AvailableNow``: the high watermarks now are the query's target;
        :meth:`latestOffset` never goes past them (in batches of the per-trigger
        limit) and returns its start once there, which ends the query. Asks every
        replica (:meth:`_snapshot`), so the target holds every record acknowledged
        before now. ``minOffsetsPerTrigger`` is ignored: no more data will come."""
        client = self._connect()
        metadata = client.metadata(refresh=True)
        selected = self._streamed(metadata)
        self._target = self._snapshot(client, selected, replica_rounds=_rounds(metadata, selected))
        log.info(
            "trigger AvailableNow: target is the high watermarks of %d partition(s)",
            len(self._target),
        )

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The tasks of the micro-batch from ``start`` to ``end``: its ranges
        (:func:`stream_ranges`, checked against the log starts now) split by
        ``minPartitions`` / ``maxRecordsPerPartition``."""
        begin = offsets_from_json(start, "start offset")
        stop = offsets_from_json(end, "end offset")
        if self._position is None:  # 4.0/4.1: a replayed batch says where the stream is
            self._position = stop
        live = {tp: offset for tp, offset in stop.items() if offset > begin.get(tp, 0)}
        selected: dict[str, list[int]] = {}
        for topic, partition in sorted(live):
            selected.setdefault(topic, []).append(partition)
        known = self._snapshot(self._connect(), selected, replica_rounds=1) if live else {}
        ranges = stream_ranges(begin, stop, known, fail_on_data_loss=self.options.fail_on_data_loss)
        tasks = split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records=self.options.max_records_per_partition,
        )
        return input_partitions(tasks)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do on the broker: Laminar keeps no consumer position for this
        reader. Spark's checkpoint (its offset and commit logs) is the one record of
        progress, as with Spark's Kafka source, which commits nothing to Kafka
        either; a second record could only disagree with it. (PySpark 4.0/4.1: the
        reader notes where the stream is, for ``maxOffsetsPerTrigger``.)"""
        if self._position is None:
            self._position = offsets_from_json(end, "committed offset")

    def stop(self) -> None:
        """Close the driver's client (Spark calls this when the query ends)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow batches of one task's range, as the batch reader reads them."""
        return read_partition(self.options, partition)

    # ------------------------------------------------------------------ helpers

    def _connect(self) -> Client:
        """The driver's client, opened on first use and kept for the query."""
        if self._client is None:
            self._client = open_client(self.options.servers, self.options.security)
        return self._client

    def _limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """``(max_offsets, min_offsets)`` for ``limit`` (None: the options')."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        most = self.options.max_offsets_per_trigger
        least = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows, least
        if isinstance(limit, ReadMinRows):
            return most, limit.min_rows
        return most, least

    def _streamed(self, metadata: ClusterMetadata) -> dict[str, list[int]]:
        """The partitions being read now. Unlike a batch read's, a subscribed topic or
        assigned partition that no longer exists is left out, not an error: what it
        held is judged by :func:`reconcile` (``failOnDataLoss``)."""
        counts = {name: len(topic.partitions) for name, topic in metadata.topics.items()}
        options = self.options
        if options.subscribe is not None:
            return {t: list(range(counts[t])) for t in options.subscribe if t in counts}
        if options.assign is not None:
            return {
                t: [p for p in sorted(ps) if p < counts[t]]
                for t, ps in options.assign.items()
                if t in counts
            }
        return select_partitions(options, counts, filtered=metadata.filtered)

    def _snapshot(
        self, client: Client, selected: Mapping[str, Sequence[int]], *, replica_rounds: int
    ) -> dict[TopicPartition, PartitionOffsets]:
        """Each selected partition's log start and high watermark; a topic that
        vanished meanwhile is left out.

        ``ListOffsets`` is answered by any replica, whose high watermark may trail the
        leader's by a heartbeat; with ``replica_rounds`` > 1 it is asked that many
        times (the replicas take turns) and the highest answers are kept, so the
        result is the leader's view.
        """
        from laminar_client.client import LIST_OFFSETS_PARTITIONS_MAX, PartitionOffsets

        known: dict[TopicPartition, PartitionOffsets] = {}
        gone: set[str] = set()
        for _ in range(replica_rounds):
            for topic, partitions in selected.items():
                for i in range(0, len(partitions), LIST_OFFSETS_PARTITIONS_MAX):
                    if topic in gone:
                        break
                    chunk = partitions[i : i + LIST_OFFSETS_PARTITIONS_MAX]
                    try:
                        answers = client.list_offsets(topic, chunk)
                    except UnknownTopicOrPartitionError:
                        gone.add(topic)  # deleted since the metadata: judged as gone
                        for partition in partitions:
                            known.pop((topic, partition), None)
                        break
                    for partition, answer in answers.items():
                        seen = known.get((topic, partition), answer)
                        known[(topic, partition)] = PartitionOffsets(
                            max(seen.log_start_offset, answer.log_start_offset),
                            max(seen.high_watermark, answer.high_watermark),
                            None,
                        )
        return known


def _rounds(metadata: ClusterMetadata, selected: Mapping[str, Sequence[int]]) -> int:
    """``ListOffsets`` rounds that reach every live replica of every partition."""
    widest = max(
        (len(metadata.live_replicas(t, p)) for t, ps in selected.items() for p in ps), default=1
    )
    return max(1, min(widest, REPLICA_ROUNDS_MAX))
