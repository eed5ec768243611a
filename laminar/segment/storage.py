"""The seam between the replication layer and storage: :class:`LogStorage`.

Two implementations: :class:`laminar.segment.SegmentLog` on disk and
:class:`laminar.segment.MemoryLog` in memory (for the simulator and unit tests).
Both hold *record batches* (``laminar.records``): a batch occupies
``[base_offset, base_offset + record_count)`` (record *i* at ``base_offset + i``).
Offsets increase along the log but need not be dense: keyed compaction removes
records from sealed segments and leaves *gaps between batches*, never inside one.
An offset in a gap belongs to no batch: a read there returns the batch after the
gap, and :meth:`LogStorage.term_at` answers the term of the batch before it.

Both also hold their batches in *segments* (SegmentLog: files; MemoryLog: runs of
batches between roll points): the last one is *active* (appended to), the others
*sealed*; only a sealed segment's batches can be replaced
(:meth:`LogStorage.replace_segment`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    """What a log keeps of one segment, without reading it
    (:meth:`LogStorage.segment_summary`): what keyed compaction's decision needs of a
    sealed segment it takes whole.

    ``size_bytes``: its stored batches' size. ``newest_timestamp_ms``: the largest
    ``max_timestamp_ms`` of their headers (control batches included); None when it
    holds no batch. ``oldest_timestamp_ms``: the smallest ``first_timestamp_ms`` of
    its *data* batches (a control batch's timestamp is the leader's monotonic clock,
    not record time); None when it holds none. A :class:`~laminar.segment.SegmentLog`
    knows it for the batches written since it opened the segment; for one opened
    from its index files (which keep no minimum) it takes the first data batch's,
    as Kafka estimates every segment's: the same for records stamped in order,
    never older.
    """

    size_bytes: int
    newest_timestamp_ms: int | None
    oldest_timestamp_ms: int | None


class LogStorage(Protocol):
    """A partition replica's log of record batches plus its small consensus state."""

    @property
    def start_offset(self) -> int:
        """The first offset still held (advanced by retention and :meth:`reset`)."""
        ...

    @property
    def end_offset(self) -> int:
        """The offset the next appended record will get."""
        ...

    @property
    def last_term(self) -> int:
        """The term of the last batch, or -1 for an empty log."""
        ...

    def append(self, batch: Buffer, *, term: int = 0, verified: bool = False) -> int:
        """Append one batch as leader: assign ``end_offset`` and ``term`` to it.

        The payload checksum is verified unless ``verified`` says the caller just
        did (the replication core verifies a produced batch on receipt).

        Returns the batch's base offset. The payload is not re-encoded.
        """
        ...

    def append_stamped(self, batch: Buffer, *, after: int | None = None) -> int:
        """Append a batch already stamped by a leader (a follower's append).

        Without ``after``, its base offset must equal ``end_offset``. With ``after``
        (the leader's end before this batch), ``end_offset`` must equal ``after`` and
        the base may lie beyond it: a gap the leader vouches for (its log was
        compacted there). Raises ``NonMonotonicOffsetError`` otherwise; returns the
        base offset.
        """
        ...

    def roll(self) -> None:
        """Seal the active segment now and start a new one at ``end_offset``
        (nothing happens when the active segment holds no batch)."""
        ...

    def sealed_segments(self) -> list[tuple[int, int]]:
        """``(base, end)`` of each sealed segment, ascending; ``end`` is the next
        segment's base (a compacted segment's batches may end before it)."""
        ...

    def read_segment(self, base: int) -> Iterator[Buffer]:
        """The raw stored batches of the segment based at ``base``, in order (a sealed
        one, or the active one as it is now). Raises ``InvalidInputError`` when no
        segment starts at ``base``."""
        ...

    def segment_summary(self, base: int) -> SegmentSummary:
        """The :class:`SegmentSummary` of the segment based at ``base`` (a sealed one,
        or the active one as it is now). Cheap: from what the log keeps of the
        segment, without reading its batches (a :class:`~laminar.segment.SegmentLog`
        reads a header or two at the first call for a segment it opened from its
        index files). Raises ``InvalidInputError`` when no segment starts at
        ``base``."""
        ...

    def replace_segment(
        self, base: int, batches: Iterable[Buffer], *, sync_directory: bool = True
    ) -> None:
        """Replace the batches of the *sealed* segment based at ``base`` by
        ``batches`` (keyed compaction's rewrite), crash-safely: after a crash at any
        point the segment holds the old batches or the new ones, never a mix.
        ``sync_directory`` False leaves the swap to be made durable by the next
        swap that is, or by :meth:`sync_directory` (until then a crash may leave the
        old batches): keyed compaction swaps a run of emptied segments so, with one
        directory fsync after them rather than one each.

        Every batch must be valid (checksums), lie inside ``[base, end)`` of that
        segment, and start after the previous one ends; there may be none. Anything
        else, or the active segment, raises ``InvalidInputError`` and changes
        nothing. Terms must not decrease along the log. ``start_offset`` does not
        move. A read already under way finishes on the old batches; later reads see
        the new ones.
        """
        ...

    def sync_directory(self) -> None:
        """Make the swaps made with ``sync_directory=False`` durable (one fsync of
        the log's directory; nothing for a log in memory)."""
        ...

    def read(self, offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
        """Whole raw batches, starting with the one containing ``offset`` (or, for an
        offset in a gap, the first batch after it).

        Returns at most ``max_bytes`` unless the first batch alone is larger, in
        which case that one batch is returned, so a reader always progresses.
        Only batches that end at or below ``upper_offset`` (exclusive bound, e.g. a
        high watermark) are returned. ``offset == end_offset`` returns ``b""``;
        outside ``[start_offset, end_offset]`` raises ``OffsetOutOfRangeError``.
        """
        ...

    def truncate_suffix(self, offset: int) -> int:
        """Remove every batch from the one containing ``offset`` on (for an offset in a
        gap: every batch after it); returns the new end (the end of the last batch
        kept, or ``offset`` where no batch is kept after it)."""
        ...

    def retention_offset(
        self, now_ms: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        """The log start that the limits allow now: the start of the oldest unit
        (segment, or batch in memory) to keep. Kafka's rule: a unit goes when what
        remains after it still holds ``retention_bytes``, or when its newest record is
        older than ``retention_ms``; the unit being appended to always stays. Returns
        ``start_offset`` when nothing may go; None limits are no limits."""
        ...

    def delete_before(self, offset: int) -> None:
        """Drop the whole units that end at or below ``offset`` (retention); the new
        ``start_offset`` is at most ``offset``."""
        ...

    def reset(self, start_offset: int) -> None:
        """Drop everything and continue empty at ``start_offset`` (snapshot install)."""
        ...

    def term_at(self, offset: int) -> int:
        """The term of the batch containing ``offset``. For an offset in a gap: the
        term of the batch before the gap (a term begins with a batch compaction
        never removes, so that is the removed record's term); -1 in a gap at the
        log start (the caller knows the term before ``start_offset``)."""
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms``, or None
        (control batches, stamped with the leader's monotonic clock, are skipped)."""
        ...

    def sync(self) -> None:
        """Force every appended batch to stable storage."""
        ...

    def save_state(self, state: bytes) -> None:
        """Durably and atomically replace the small consensus state (term, vote)."""
        ...

    def stage_state(self, state: bytes) -> None:
        """Replace the consensus state, durably and atomically at the next :meth:`sync`.

        :meth:`load_state` returns it at once; a crash before the sync keeps the
        previous state. ``sync`` writes the state before it syncs the log.
        """
        ...

    def load_state(self) -> bytes | None:
        """The last saved consensus state, or None."""
        ...

    def close(self) -> None:
        """Release resources; later calls raise ``LogClosedError``."""
        ...
