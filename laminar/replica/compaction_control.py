"""Keyed compaction agreed through the log: the ``compact`` control batch, and when
a leader asks for one.

Kafka's replicas compact on their own, so two replicas may serve different records
for the same old offset. Laminar serves reads from any replica, so the compaction
point is agreed through the partition's log: the leader's driver decides a command
(``end`` E, ``tombstones_end`` T, the rule; the engine's
:class:`~laminar.segment.compaction.CompactCommand`) and its core appends it as a
control batch (key :data:`CONTROL_COMPACT`, value ``CompactCommand.to_value()``),
replicated and committed like any batch. Every replica, once its high watermark
passes the batch, gets a :class:`~laminar.replica.messages.Compact` event (once) and
compacts exactly ``[log start, E)`` by the rule; the engine's result depends only on
the records in that range, which every replica holding them has alike, so every
replica serves the same bytes for the same offsets once it has applied the same
commands (see ``docs/design.md``, "Keyed compaction").

The core treats a command's value as opaque except for its ``end``
(:func:`command_end`), which it needs to forget idempotent producers' batches that
compaction may have trimmed (:meth:`~laminar.replica.producers.ProducerTable.forget_before`).

:func:`compaction_point` is the leader's decision rule, pure: whether to compact
now, and up to where.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from laminar.records import BatchHeader, BatchLimits, decode_batch, encode_control_batch
from laminar.segment.compaction import COMPACT_KIND, CompactCommand
from laminar.segment.storage import Buffer

CONTROL_COMPACT = COMPACT_KIND
"""The control batch of a keyed compaction command."""


def encode_compact(value: bytes, timestamp_ms: int) -> bytes:
    """The control batch carrying the compaction command ``value``."""
    return encode_control_batch(CONTROL_COMPACT, value, timestamp_ms)


def compact_in(header: BatchHeader, batch: Buffer, limits: BatchLimits) -> bytes | None:
    """The command value a ``compact`` control batch holds, or None for any other."""
    if not header.is_control:
        return None
    decoded = decode_batch(batch, verify=False, limits=limits)
    if decoded.keys[0] != CONTROL_COMPACT:
        return None
    value = decoded.values[0]
    return bytes(value) if value is not None else b""


def command_end(value: bytes) -> int:
    """A command's ``end`` (E), the one field the core reads (the engine's
    :meth:`CompactCommand.from_value` reads the value); raises
    :class:`~laminar.errors.CorruptBatchError` for a value it cannot read."""
    return CompactCommand.from_value(value).end


def command_tombstones_end(value: bytes) -> int:
    """A command's ``tombstones_end`` (T); raises
    :class:`~laminar.errors.CorruptBatchError` for a value it cannot read."""
    return CompactCommand.from_value(value).tombstones_end


# ------------------------------------------------------------------ the leader's decision


@dataclass(frozen=True, slots=True)
class Run:
    """A batch, or run of consecutive batches, of the dirty range, as the decision
    sees it: ``[base_offset, next_offset)``, its stored ``size_bytes``, and two
    timestamps from its batch headers. ``newest_timestamp_ms``: the largest
    ``max_timestamp_ms`` (control batches included); every record of the run is at
    most this new, so the minimum lag holds for the whole run once it holds for this.
    ``oldest_timestamp_ms``: the smallest ``first_timestamp_ms`` of its data batches
    (None when it holds only control batches, whose timestamps are the leader's
    monotonic clock, not record time); the maximum lag counts from it. A header has
    no minimum, so a batch counts from its first record (a producer stamps records
    as it adds them: the first is the oldest unless the producer chose otherwise).
    """

    base_offset: int
    next_offset: int
    oldest_timestamp_ms: int | None
    newest_timestamp_ms: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class LogView:
    """What the leader's driver read of its log for the decision (one replica).

    ``runs``: each batch, or run of consecutive batches, from ``dirty_from`` (the
    last command's end; the log start without one) on, ascending, as far as the
    driver has read; E falls at the end of one. ``clean_bytes``: the bytes below
    ``dirty_from`` (0 when unknown).
    """

    high_watermark: int
    active_base: int
    dirty_from: int
    clean_bytes: int
    runs: Sequence[Run]


@dataclass(frozen=True, slots=True)
class CompactionRule:
    """A topic's compaction settings, as the decision needs them (see
    ``TopicSettings``): Kafka's meanings."""

    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int  # -1: none
    delete_retention_ms: int


@dataclass(frozen=True, slots=True)
class Decision:
    """Compact up to ``end`` (a batch boundary), removing tombstones below
    ``tombstones_end``; ``reason`` for the log line (``"ratio"`` or ``"lag"``)."""

    end: int
    tombstones_end: int
    reason: str


def compaction_point(
    view: LogView,
    rule: CompactionRule,
    history: Sequence[tuple[int, int]],
    now_ms: int,
) -> Decision | None:
    """Whether to compact now, and up to where (None: not now).

    E = the end of the last whole run below ``min(high watermark, active segment
    base)`` that is not younger than ``min_compaction_lag_ms`` (the runs before the
    first one whose newest record is young); nothing to do when E is not above
    ``dirty_from``. Compact when the dirty bytes below E divided by all bytes below E
    reach ``min_cleanable_dirty_ratio``, or when the oldest dirty record below E (the
    smallest :attr:`Run.oldest_timestamp_ms`) is older than ``max_compaction_lag_ms``
    (if set): a run is due as soon as its oldest record is, however new its newest.
    T = the E of the newest earlier command (``history``: ``(end, time_ms)`` in log
    order) decided at least ``delete_retention_ms`` ago, so a tombstone stays readable
    at least that long after the first command that covered it (Kafka's meaning); 0
    without one.
    """
    limit = min(view.high_watermark, view.active_base)
    young_after = now_ms - rule.min_compaction_lag_ms
    end = view.dirty_from
    dirty_bytes = 0
    oldest_ms: int | None = None
    for run in view.runs:
        if run.next_offset > limit or (
            rule.min_compaction_lag_ms > 0 and run.newest_timestamp_ms > young_after
        ):
            break
        assert run.base_offset >= end, (run.base_offset, end)  # ascending, from dirty_from
        end = run.next_offset
        dirty_bytes += run.size_bytes
        run_oldest_ms = run.oldest_timestamp_ms
        if run_oldest_ms is not None and (oldest_ms is None or run_oldest_ms < oldest_ms):
            oldest_ms = run_oldest_ms
    if end <= view.dirty_from:
        return None
    total = view.clean_bytes + dirty_bytes
    ratio_due = total > 0 and dirty_bytes / total >= rule.min_cleanable_dirty_ratio
    lag_due = (
        rule.max_compaction_lag_ms >= 0
        and oldest_ms is not None
        and now_ms - oldest_ms > rule.max_compaction_lag_ms
    )
    if not (ratio_due or lag_due):
        return None
    tombstones_end = 0
    for earlier_end, time_ms in history:
        if time_ms <= now_ms - rule.delete_retention_ms:
            tombstones_end = min(earlier_end, end)
    return Decision(end, tombstones_end, "ratio" if ratio_due else "lag")


def prune_history(
    history: Sequence[tuple[int, int]], now_ms: int, delete_retention_ms: int
) -> list[tuple[int, int]]:
    """The commands T may still come from: every one decided within
    ``delete_retention_ms``, and the newest one before that."""
    horizon = now_ms - delete_retention_ms
    old = [entry for entry in history if entry[1] <= horizon]
    return old[-1:] + [entry for entry in history if entry[1] > horizon]
