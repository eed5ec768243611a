"""The seam between the replication layer and storage: :class:`LogStorage`.

Two implementations: :class:`laminar.segment.SegmentLog` on disk and
:class:`laminar.segment.MemoryLog` in memory (for the simulator and unit tests).
Both hold *record batches* (``laminar.records``) at dense offsets: a batch occupies
``[base_offset, base_offset + record_count)``.
"""

from __future__ import annotations

from typing import Protocol

Buffer = bytes | bytearray | memoryview


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

    def append_stamped(self, batch: Buffer) -> int:
        """Append a batch already stamped by a leader (a follower's append).

        Its base offset must equal ``end_offset``; returns it.
        """
        ...

    def read(self, offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
        """Whole raw batches, starting with the one containing ``offset``.

        Returns at most ``max_bytes`` unless the first batch alone is larger, in
        which case that one batch is returned, so a reader always progresses.
        Only batches that end at or below ``upper_offset`` (exclusive bound, e.g. a
        high watermark) are returned. ``offset == end_offset`` returns ``b""``;
        outside ``[start_offset, end_offset]`` raises ``OffsetOutOfRangeError``.
        """
        ...

    def truncate_suffix(self, offset: int) -> int:
        """Remove every batch from the one containing ``offset`` on; returns the new end."""
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
        """The term of the batch containing ``offset``."""
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
