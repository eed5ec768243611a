"""Rebuilding and following one ``__groups`` partition's state from its log (sans-IO).

Theory of operation
===================

A :class:`GroupReplay` is fed the partition's batches in log order, from an offset
the shell reads at (:attr:`GroupReplay.read_offset`), and keeps the
:class:`~laminar.groups.state.GroupState` they produce. Snapshot records
(:mod:`laminar.snapshots`) bound the log: the leader appends the whole state as of
an offset ``A`` at offsets ``X >= A`` and, once that is applied, every replica
deletes its log below ``A``. So a replica whose log starts at ``start > 0`` cannot
replay from 0; it *seeks*: it reads from ``start`` to the first complete snapshot
whose ``A >= start``, restores it, and reads again from ``A`` (entries of
``[A, X)`` were appended while the snapshot was being written and are not in it).
From then on it *applies*: entries go to the state, snapshot chunks change nothing
(a completed one is reported, so the shell can delete the prefix, and checked
against the replica's own applied-entry count at ``A`` where that is still known:
a paired check that the snapshot and the replayed log agree). A log that starts at
0 is replayed from 0: snapshots in it are redundant.

While seeking, :attr:`GroupReplay.applied_offset` is -1: the state is not usable.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from laminar.errors import InvalidInputError
from laminar.groups.entries import decode_record
from laminar.groups.state import ApplyResult, GroupState
from laminar.snapshots import CompleteSnapshot, SnapshotAssembler, SnapshotChunk

SNAPSHOT_BYTES_FLOOR = 4 << 20
"""The default floor: a new snapshot is due once the records applied since the last
one exceed it (and :data:`SNAPSHOT_GROWTH_FACTOR` times the last snapshot's size):
below it a snapshot would cost more than it frees, and the log of a small state
stays within a few segments. A node's is ``HostConfig.snapshot_bytes_floor``."""

SNAPSHOT_GROWTH_FACTOR = 2
"""A new snapshot is due once the records since the last one exceed this many times
its size: writing snapshots then costs at most about half of the bytes appended
(amortised), and the log stays under about (factor + 2) x the state plus the floor
and one segment."""

COUNTS_KEPT_MAX = 1024
"""Batch ends whose applied-entry count is kept for the paired check of a snapshot
completing later (a snapshot ends a few batches after its ``A`` in practice)."""


def snapshot_due(
    bytes_since_snapshot: int, last_snapshot_bytes: int, floor_bytes: int = SNAPSHOT_BYTES_FLOOR
) -> bool:
    """Whether the leader should write a snapshot now (see the two constants)."""
    threshold = max(floor_bytes, SNAPSHOT_GROWTH_FACTOR * last_snapshot_bytes)
    return bytes_since_snapshot > threshold


@dataclass(slots=True)
class BatchApplied:
    """What applying one batch did."""

    results: list[tuple[int, ApplyResult | None]] = field(default_factory=list)
    """Each record's offset and outcome (None: not an entry, or not decodable)."""
    snapshots: list[CompleteSnapshot] = field(default_factory=list)
    """Snapshots that completed in this batch (applying: the shell may delete the log
    below their ``as_of_offset``)."""
    errors: list[str] = field(default_factory=list)
    """Records skipped or checks failed (for the shell's error log)."""
    restart: bool = False
    """Seeking found its snapshot: the rest of this read is stale, read again from
    :attr:`GroupReplay.read_offset`."""


class GroupReplay:
    """The state of one ``__groups`` partition, rebuilt from ``start_offset`` on."""

    def __init__(self, start_offset: int, *, restore_inline: bool = True) -> None:
        self.start_offset = start_offset
        self._restore_inline = restore_inline
        self.pending_restore: CompleteSnapshot | None = None
        """Found while seeking, to be restored by the caller (``restore_inline``
        False: a large state takes seconds to decode, which a shell does on a
        thread) and handed to :meth:`finish_restore`; nothing is fed meanwhile."""
        self.state = GroupState()
        self.read_offset = start_offset
        """The next offset to read and feed (a batch boundary)."""
        self.seeking = start_offset > 0
        self._seek = SnapshotAssembler(keep_payload=True)
        self._follow = SnapshotAssembler(keep_payload=False)
        self._counts_at: OrderedDict[int, int] = OrderedDict()
        if not self.seeking:
            self._counts_at[start_offset] = 0
        self.bytes_since_snapshot = 0
        """Record bytes applied since the last complete snapshot (or the start)."""
        self.last_snapshot_bytes = 0
        self.restored_from: CompleteSnapshot | None = None
        """The snapshot this replay was rebuilt from (None: replayed from 0)."""

    @property
    def applied_offset(self) -> int:
        """The state is as of this offset; -1 while seeking (no usable state yet)."""
        return -1 if self.seeking else self.read_offset

    @property
    def torn_snapshots(self) -> int:
        return self._seek.torn + self._follow.torn

    def apply_batch(
        self, base_offset: int, next_offset: int, records: Sequence[tuple[int, bytes]]
    ) -> BatchApplied:
        """Feed the batch ``[base_offset, next_offset)`` (``records``: offset and value
        of each record, none for a control batch); it must start at :attr:`read_offset`."""
        assert self.pending_restore is None, "fed while a restore is pending"
        if base_offset != self.read_offset:
            raise AssertionError(
                f"read up to {self.read_offset}, next batch starts at {base_offset}"
            )
        out = BatchApplied()
        if self.seeking:
            self._seek_batch(records, out)
            if out.restart:
                return out
        else:
            for offset, value in records:
                self.bytes_since_snapshot += len(value)
                out.results.append((offset, self._apply_record(offset, value, out)))
        self.read_offset = next_offset
        if not self.seeking:
            self._counts_at[next_offset] = self.state.applied_count
            if len(self._counts_at) > COUNTS_KEPT_MAX:
                self._counts_at.popitem(last=False)
        return out

    def _seek_batch(self, records: Sequence[tuple[int, bytes]], out: BatchApplied) -> None:
        for offset, value in records:
            try:
                record = decode_record(value)
            except InvalidInputError:
                continue  # reported when applied, after the restore
            if not isinstance(record, SnapshotChunk):
                continue
            complete = self._seek.add(record, offset)
            if complete is None or complete.as_of_offset < self.start_offset:
                continue
            out.restart = True
            self.pending_restore = complete
            if self._restore_inline:
                assert complete.payload is not None
                try:
                    state: GroupState | None = GroupState.restore_payload(complete.payload)
                except InvalidInputError as error:
                    out.errors.append(f"snapshot at {offset} does not restore: {error}")
                    state = None
                out.errors.extend(self.finish_restore(state))
            return

    def finish_restore(self, state: GroupState | None) -> list[str]:
        """The state :attr:`pending_restore` decodes to (None: it did not decode):
        continue from its ``as_of_offset``, or seek on past it. Returns errors."""
        complete = self.pending_restore
        assert complete is not None, "finish_restore without a pending restore"
        self.pending_restore = None
        errors = []
        if state is not None and state.applied_count != complete.applied_count:
            errors.append(f"snapshot at {complete.end_offset - 1}: applied count differs")
            state = None
        if state is None:
            self.read_offset = complete.end_offset  # seek on, past this one
            return errors
        self.state = state
        self.seeking = False
        self.restored_from = complete
        self.read_offset = complete.as_of_offset
        self._counts_at = OrderedDict({complete.as_of_offset: state.applied_count})
        self._seek = SnapshotAssembler(keep_payload=True)  # frees what it held
        return errors

    def _apply_record(self, offset: int, value: bytes, out: BatchApplied) -> ApplyResult | None:
        try:
            record = decode_record(value)
        except InvalidInputError as error:
            # Validated before it was appended: only a newer Laminar writes these.
            out.errors.append(f"skipping entry at offset {offset}: {error}")
            return None
        if not isinstance(record, SnapshotChunk):
            return self.state.apply(record)
        complete = self._follow.add(record, offset)
        if complete is not None:
            count = self._counts_at.get(complete.as_of_offset)
            if count is not None and count != complete.applied_count:
                # The snapshot and this replica's own replay disagree: keep the log
                # (the prefix is not deleted below it); the next one is due as before.
                out.errors.append(
                    f"snapshot at {offset} as of {complete.as_of_offset} holds "
                    f"{complete.applied_count} entries, this replica applied {count}: "
                    "ignored, the log is kept"
                )
                return None
            self.bytes_since_snapshot = 0
            self.last_snapshot_bytes = complete.snapshot_bytes
            out.snapshots.append(complete)
        return None
