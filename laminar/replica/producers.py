"""Idempotent producers: duplicate and gap detection per partition.

A producer numbers its records; a batch carries ``(producer_id, base_sequence)``
and covers sequences ``[base_sequence, base_sequence + record_count)``. Every
replica applies the batches it appends (leader and followers alike), so a new
leader already knows each producer's recent batches. The table remembers the last
``window`` batches per producer; a retry of one of them is a duplicate answered
with the original offset, a batch that skips ahead is out of order.

A produce request may carry several batches of one producer: :meth:`ProducerTable.admit`
checks each against the table and the request's earlier batches (they must follow
each other's sequences). What a verdict means for the reply (and that only a leader
sure of its lease may call a sequence out of order) is the core's decision.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from laminar.records import NO_PRODUCER, BatchHeader


class Verdict(Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"


@dataclass(frozen=True, slots=True)
class SequenceCheck:
    verdict: Verdict
    base_offset: int = -1  # the original's offset, for DUPLICATE
    expected_sequence: int = -1  # for OUT_OF_ORDER


_NEW = SequenceCheck(Verdict.NEW)


@dataclass(frozen=True, slots=True)
class NotConsecutive:
    """A batch of one request that does not follow the same producer's batch before
    it in that request."""

    previous_sequence: int
    previous_count: int
    base_sequence: int

    @property
    def detail(self) -> str:
        return (
            "batches of one producer in one request must have consecutive "
            f"sequences: {self.previous_sequence}+{self.previous_count} is followed by "
            f"{self.base_sequence}"
        )


@dataclass(frozen=True, slots=True)
class _Written:
    base_sequence: int
    record_count: int
    base_offset: int


class ProducerTable:
    """Recent batches of each idempotent producer, bounded in producers and batches."""

    def __init__(self, window: int, producers_max: int) -> None:
        self._window = window
        self._producers_max = producers_max
        self._producers: OrderedDict[int, deque[_Written]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, producer_id: int, base_sequence: int, record_count: int) -> SequenceCheck:
        if producer_id == NO_PRODUCER:
            return _NEW
        recent = self._producers.get(producer_id)
        if not recent:
            return _NEW  # unknown producer (new, or forgotten): accept its sequence
        for written in recent:
            if written.base_sequence == base_sequence:
                if written.record_count == record_count:
                    return SequenceCheck(Verdict.DUPLICATE, base_offset=written.base_offset)
                break
        last = recent[-1]
        expected = last.base_sequence + last.record_count
        if base_sequence == expected:
            return _NEW
        return SequenceCheck(Verdict.OUT_OF_ORDER, expected_sequence=expected)

    def admit(
        self, header: BatchHeader, earlier: Sequence[tuple[BatchHeader, SequenceCheck]]
    ) -> SequenceCheck | NotConsecutive:
        """The verdict on a request's batch given the request's ``earlier`` batches
        (with their verdicts): a batch following a new batch of its producer in the
        request is new too; otherwise :meth:`check` decides."""
        producer_id = header.producer_id
        previous = None
        if producer_id != NO_PRODUCER:
            previous = next((c for c in reversed(earlier) if c[0].producer_id == producer_id), None)
        if previous is not None:
            last, last_check = previous
            if header.base_sequence != last.base_sequence + last.record_count:
                return NotConsecutive(last.base_sequence, last.record_count, header.base_sequence)
            if last_check.verdict is Verdict.NEW:
                return last_check
        return self.check(producer_id, header.base_sequence, header.record_count)

    def record(
        self, producer_id: int, base_sequence: int, record_count: int, base_offset: int
    ) -> None:
        if producer_id == NO_PRODUCER:
            return
        recent = self._producers.get(producer_id)
        if recent is None:
            recent = deque(maxlen=self._window)
            self._producers[producer_id] = recent
            if len(self._producers) > self._producers_max:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(producer_id)
        recent.append(_Written(base_sequence, record_count, base_offset))

    def truncate(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log suffix was removed)."""
        for producer_id in list(self._producers):
            recent = self._producers[producer_id]
            while recent and recent[-1].base_offset >= offset:
                recent.pop()
            if not recent:
                del self._producers[producer_id]

    def forget_before(self, offset: int) -> None:
        """Forget batches below ``offset``: keyed compaction up to ``offset`` may have
        trimmed or removed them (a trimmed run keeps its producer and sequences, so
        its successor's sequence would look out of order). A producer with nothing
        left is unknown, and its next sequence is accepted as a new producer's (only
        a retry of a batch that old is no longer recognised as a duplicate)."""
        for producer_id in list(self._producers):
            recent = self._producers[producer_id]
            while recent and recent[0].base_offset < offset:
                recent.popleft()
            if not recent:
                del self._producers[producer_id]

    def clear(self) -> None:
        self._producers.clear()
