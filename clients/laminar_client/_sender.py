"""Sans-IO: the order of one partition's batches, their sequence numbers and retries.

A :class:`PartitionSender` decides which of a partition's sealed batches go out
now, with which ``(producer_id, base_sequence)``, and what an answer means. It does
no I/O and keeps no time of its own: the producer's event loop sends what
:meth:`PartitionSender.to_send` returns and reports each attempt's outcome with
:meth:`~PartitionSender.acked` or :meth:`~PartitionSender.failed`.

The rules (specified for every client in ``docs/format.md``, section 2; the
numbers, and what an error means, are :mod:`laminar_client.sequencing`'s; they rely
on the broker's producer table, ``laminar/replica/producers.py``:
it remembers each producer's last 5 batches per partition, answers a retry of one
of them with its original offset, refuses a batch whose sequence leaves a gap after
the last one written — ``OUT_OF_ORDER_SEQUENCE``, so that batch was certainly not
written — and accepts any sequence from a producer it does not know):

- **Normal**: up to ``max_in_flight`` (≤ 5, the broker's window) batches in flight,
  stamped in order with consecutive sequences of one producer id (a *lineage*),
  counted from the oldest unresolved batch: answers cross on the wire, and an
  acknowledgement of a later batch frees no slot while an earlier one is
  unresolved (else a written batch whose answer failed could fall out of the
  broker's window before its retry, be refused as out of order, and be
  restamped and written twice).
- **A new lineage** (the first one, or after a restamp) sends one batch and waits
  for its acknowledgement before it pipelines: until the broker knows the producer
  id it accepts any sequence, so a later batch overtaking a failed first one would
  be written, and the first one's retry would then be refused — or written out of
  order.
- **Recovery**: any failed attempt stops new sends until every attempt in flight
  has answered; then the unresolved batches are resent one at a time, oldest first,
  with the same bytes (a batch that was written after all is recognised and
  answered with its offset). Recovery ends when none is left.
- **Restamp**: when the oldest unresolved batch is refused as out of order (and
  the refusal is not stale: the batch before it was not acknowledged since, or it
  was resent alone), the broker proves it — and, the broker refusing gaps, every later batch of the
  lineage — unwritten: the batch that would have filled the gap was refused for
  good or expired unwritten. Every unresolved batch is then restamped, in order,
  with a new producer id from sequence 0 (a new lineage).
- **Definite failures** (the batch is invalid, the topic does not exist, no
  majority of the partition's replicas has disk space) fail that batch's records;
  the later batches go on (their out-of-order answer, if the broker knows the
  producer, leads to a restamp).
- **Delivery timeout**: :meth:`expire` fails the batches whose deadline passed and
  that are not in an attempt: queued ones were never sent; the others may have been
  written (``DeliveryTimeoutError.sent``).

So the records of one partition are written in the order they were sent, each at
most once, whatever fails — as long as the broker remembers the producer (a node
that lost its producer table, after retention removed every batch of the producer
for instance, cannot tell a retry from a new batch; Kafka has the same limit).
"""

from __future__ import annotations

import contextlib
import enum
from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from laminar.errors import DeliveryTimeoutError
from laminar.records import NO_PRODUCER
from laminar_client.sequencing import (
    PRODUCER_WINDOW_BATCHES,
    SEQUENCE_LIMIT,
    Lineage,
    Verdict,
    verdict,
)

__all__ = [
    "MAX_IN_FLIGHT_LIMIT",
    "SEQUENCE_LIMIT",
    "Batch",
    "PartitionSender",
    "State",
    "Verdict",
    "verdict",
]

MAX_IN_FLIGHT_LIMIT = PRODUCER_WINDOW_BATCHES
"""The broker remembers the last 5 batches of each producer (``producer_window``)."""


class State(enum.Enum):
    QUEUED = "queued"  # sealed, no sequence yet
    SENDING = "sending"  # an attempt is in flight
    RETRY = "retry"  # its last attempt failed; to be resent with the same bytes
    DONE = "done"  # acknowledged or failed for good


class Batch(Protocol):
    """What the sender needs of a batch (the producer's ``ProducerBatch``)."""

    state: State
    producer_id: int
    base_sequence: int
    sent: bool

    @property
    def record_count(self) -> int: ...

    @property
    def deadline_s(self) -> float: ...

    def stamp(self, producer_id: int, base_sequence: int) -> None:
        """Encode (or restamp) the batch with this producer id and sequence."""
        ...

    def succeed(self, base_offset: int) -> None:
        """Acknowledged at ``base_offset``: resolve its records."""
        ...

    def fail(self, error: BaseException) -> None:
        """Failed for good: fail its records with ``error``."""
        ...


B = TypeVar("B", bound=Batch)


class PartitionSender(Generic[B]):
    """Sequencing, pipelining and recovery of one partition's batches (see the module)."""

    def __init__(
        self,
        *,
        max_in_flight: int,
        new_producer_id: Callable[[], int] | None,
    ) -> None:
        """``new_producer_id`` None: not idempotent (no sequences; retries may
        duplicate, and then reorder, batches)."""
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT_LIMIT:
            raise ValueError(f"max_in_flight must be in [1, {MAX_IN_FLIGHT_LIMIT}]")
        self.max_in_flight = max_in_flight
        self._new_producer_id = new_producer_id
        self._queue: deque[B] = deque()
        self._unresolved: deque[B] = deque()  # stamped, in sequence order
        self._lineage: Lineage | None = None  # the producer id and its next sequence
        self._lineage_confirmed = new_producer_id is None
        self.recovering = False
        self.restamps = 0
        self._acked_end = 0
        self._alone: B | None = None  # the batch resent alone in recovery, if any
        # The lineage's batches in the order they were stamped, from the oldest
        # unresolved one on (see _span; those before it are dropped as it advances).
        self._stamped: deque[B] = deque()

    # ------------------------------------------------------------------ state

    @property
    def producer_id(self) -> int:
        """The current lineage's producer id (``NO_PRODUCER`` before the first)."""
        return NO_PRODUCER if self._lineage is None else self._lineage.producer_id

    def enqueue(self, batch: B) -> None:
        """A sealed batch, to be sent after every batch enqueued before it."""
        batch.state = State.QUEUED
        self._queue.append(batch)

    @property
    def idle(self) -> bool:
        """Nothing queued, in flight or waiting for a retry."""
        return not self._queue and not self._unresolved

    @property
    def in_flight(self) -> int:
        return sum(1 for batch in self._unresolved if batch.state is State.SENDING)

    def pending(self) -> list[B]:
        """Every batch not yet resolved, oldest first."""
        return [*self._unresolved, *self._queue]

    # ------------------------------------------------------------------ decisions

    def to_send(self) -> list[B]:
        """The batches to send now, marked ``SENDING``, in order."""
        if self.recovering:
            if any(batch.state is State.SENDING for batch in self._unresolved):
                return []  # wait until every attempt in flight has answered
            head = self._unresolved[0] if self._unresolved else None
            if head is not None:
                head.state = State.SENDING
                head.sent = True
                self._alone = head
                return [head]
            self.recovering = False
        out: list[B] = []
        while self._queue:
            if self._needs_new_lineage(self._queue[0]):
                if self._unresolved:
                    break  # a lineage starts only when the previous one is resolved
                self._new_lineage()
            limit = self.max_in_flight if self._lineage_confirmed else 1
            if self._span() >= limit:
                break
            batch = self._queue.popleft()
            self._stamp_new(batch)
            batch.state = State.SENDING
            batch.sent = True
            self._unresolved.append(batch)
            out.append(batch)
        return out

    def acked(self, batch: B, base_offset: int) -> None:
        """An attempt of ``batch`` was acknowledged (a recognised retry too)."""
        if batch.state is State.DONE:
            return
        batch.state = State.DONE
        self._remove(batch)
        if batch.producer_id == self.producer_id:
            self._lineage_confirmed = True
            self._acked_end = max(self._acked_end, batch.base_sequence + batch.record_count)
        batch.succeed(base_offset)

    def failed(self, batch: B, error: BaseException) -> Verdict:
        """An attempt of ``batch`` failed with ``error``; returns how it was treated."""
        if batch.state is State.DONE:
            return Verdict.FATAL
        kind = verdict(error)
        if kind is Verdict.FATAL:
            batch.state = State.DONE
            self._remove(batch)
            batch.fail(error)
        else:
            batch.state = State.RETRY
        self.recovering = True
        if (
            kind is Verdict.OUT_OF_ORDER
            and self._is_head(batch)
            and not self._sending()
            and (batch is self._alone or self._acked_end != batch.base_sequence)
        ):
            # Unless the refusal is stale: the batch before it was acknowledged after
            # the refusal was decided (answers cross on the wire), so the gap is
            # filled; a resend alone settles it.
            self._restamp_unresolved()
        return kind

    def expire(self, now_s: float) -> list[B]:
        """Fail the batches whose delivery deadline passed and that are not in an
        attempt; returns them."""
        expired: list[B] = []
        for batch in list(self._queue):
            if batch.deadline_s <= now_s:
                self._queue.remove(batch)
                batch.state = State.DONE
                batch.fail(
                    DeliveryTimeoutError(
                        "record not sent within delivery_timeout_s (no attempt left the client)",
                        sent=False,
                    )
                )
                expired.append(batch)
        for batch in list(self._unresolved):
            if batch.state is State.RETRY and batch.deadline_s <= now_s:
                self._unresolved.remove(batch)
                batch.state = State.DONE
                batch.fail(
                    DeliveryTimeoutError(
                        "record not acknowledged within delivery_timeout_s; "
                        "it may have been written",
                        sent=True,
                    )
                )
                expired.append(batch)
        if expired:
            self.recovering = True
        return expired

    def fail_all(self, error: BaseException) -> list[B]:
        """Fail every batch not in an attempt (the producer is closing)."""
        failed = [b for b in (*self._unresolved, *self._queue) if b.state is not State.SENDING]
        for batch in failed:
            batch.state = State.DONE
            batch.fail(error)
        self._queue.clear()
        self._unresolved = deque(b for b in self._unresolved if b.state is State.SENDING)
        return failed

    def next_deadline_s(self) -> float | None:
        """The earliest delivery deadline of a batch that :meth:`expire` could fail."""
        deadlines = [b.deadline_s for b in self._queue]
        deadlines += [b.deadline_s for b in self._unresolved if b.state is State.RETRY]
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------ internals

    def _sending(self) -> bool:
        return any(batch.state is State.SENDING for batch in self._unresolved)

    def _is_head(self, batch: B) -> bool:
        return bool(self._unresolved) and self._unresolved[0] is batch

    def _span(self) -> int:
        """How many batches were stamped from the oldest unresolved one on, that one
        included. Answers cross on the wire, so an acknowledgement of a later batch
        frees no slot while an earlier one is unresolved: the broker remembers the
        last 5 batches written, and with more written after it, a batch that was
        written but whose answer failed would be refused as out of order on its retry
        (not recognised), then restamped and written twice."""
        if not self._unresolved:
            return 0
        head = self._unresolved[0]
        while self._stamped and self._stamped[0] is not head:
            self._stamped.popleft()  # resolved: before the oldest unresolved batch
        return len(self._stamped) if self._stamped else len(self._unresolved)

    def _remove(self, batch: B) -> None:
        with contextlib.suppress(ValueError):
            self._unresolved.remove(batch)

    def _needs_new_lineage(self, batch: B) -> bool:
        return self._new_producer_id is not None and (
            self._lineage is None or not self._lineage.fits(batch.record_count)
        )

    def _stamp_new(self, batch: B) -> None:
        lineage = self._lineage
        if lineage is None:  # not idempotent
            batch.stamp(NO_PRODUCER, -1)
            return
        batch.stamp(lineage.producer_id, lineage.take(batch.record_count))
        self._stamped.append(batch)

    def _new_lineage(self) -> None:
        assert self._new_producer_id is not None
        self._lineage = Lineage(self._new_producer_id())
        self._acked_end = 0  # the sequence after the lineage's acknowledged batches
        self._lineage_confirmed = False
        self._stamped.clear()

    def _restamp_unresolved(self) -> None:
        """The oldest unresolved batch is certainly unwritten, and so is every later
        one of its lineage: give them all a new lineage, in order."""
        if self._new_producer_id is None:
            return
        self.restamps += 1
        self._new_lineage()
        for batch in self._unresolved:
            self._stamp_new(batch)
