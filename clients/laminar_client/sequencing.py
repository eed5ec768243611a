"""Sans-IO: the idempotent producer's numbers, and what the broker's answers about
them mean. The one owner of these rules for every writer: the batching producer's
:class:`~laminar_client._sender.PartitionSender`, the synchronous
:class:`~laminar_client.idempotent.IdempotentProducer` and the Spark writer's
``laminar_spark.producing.PartitionStream``.

The broker's side (``laminar/replica/producers.py``; ``docs/format.md``, section 2):
a batch carries ``(producer_id, base_sequence)`` and covers ``record_count``
sequence numbers; per partition the broker remembers each producer's last
:data:`PRODUCER_WINDOW_BATCHES` batches. A batch it remembers is answered with its
original offset (a *duplicate*: written once); a batch that does not start where
the producer's last one ended is refused ``OUT_OF_ORDER_SEQUENCE``
(:class:`~laminar.errors.OutOfOrderSequenceError`, with the sequence expected), so
it was certainly not written; a producer it does not know may start at any
sequence. Laminar has no producer epochs: a writer that must stop reusing its
numbers (its outcome is in doubt, or its sequences ran out) takes a new producer
id, a new :class:`Lineage`.

The writer's side, decided here:

- :class:`Lineage`: a producer id and the next sequence of one partition; a batch
  that would pass :data:`SEQUENCE_LIMIT` (int32) needs a new lineage.
- :func:`verdict`: what a failed produce attempt means for its batch: resend the
  same bytes (outcome unknown, or refused for now), certainly not written with a
  gap before it, or failed for good.
- :func:`records_held`: for a writer whose producer id never changes (Spark's,
  derived from the task), what an ``OUT_OF_ORDER_SEQUENCE`` answer's expected
  sequence says the broker already holds.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from laminar.errors import (
    LaminarError,
    OutOfOrderSequenceError,
    RetriableError,
    StorageError,
    StorageFullError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "PRODUCER_ID_MAX",
    "PRODUCER_WINDOW_BATCHES",
    "SEQUENCE_LIMIT",
    "Lineage",
    "Verdict",
    "random_producer_id",
    "records_held",
    "verdict",
]

SEQUENCE_LIMIT = 2**31
"""Sequences are int32: a lineage that would pass this starts a new producer id."""
PRODUCER_WINDOW_BATCHES = 5
"""The broker remembers the last 5 batches of each producer (``producer_window``):
the most batches of one partition a producer may have in flight."""
PRODUCER_ID_MAX = 2**63 - 1
"""Producer ids are non-negative int64 (-1 is "no producer")."""


def random_producer_id(rng: random.Random) -> int:
    """A new producer id drawn at random: 63 bits, so that two producers choosing the
    same one is negligible (the broker assigns none)."""
    return rng.randrange(PRODUCER_ID_MAX)


@dataclass(slots=True)
class Lineage:
    """One producer id's sequence numbers on one partition: :meth:`take` numbers
    the next batch from where the last one ended (from 0)."""

    producer_id: int
    next_sequence: int = 0

    def fits(self, record_count: int) -> bool:
        """Whether a batch of ``record_count`` records may still be numbered in this
        lineage (its sequences stay below :data:`SEQUENCE_LIMIT`)."""
        return self.next_sequence + record_count < SEQUENCE_LIMIT

    def take(self, record_count: int) -> int:
        """The base sequence of the next batch of ``record_count`` records."""
        assert self.fits(record_count), (self.next_sequence, record_count)
        base = self.next_sequence
        self.next_sequence = base + record_count
        return base


class Verdict(enum.Enum):
    """What a failed attempt means for its batch."""

    RETRY = "retry"  # outcome unknown, or refused for now: resend the same bytes
    OUT_OF_ORDER = "out_of_order"  # certainly not written (a gap before it)
    FATAL = "fatal"  # certainly not written, and never will be


def verdict(error: BaseException) -> Verdict:
    """How a writer treats ``error`` from a produce attempt.

    ``STORAGE`` is retried: the leader fenced its replica, but its followers may
    hold the batch, and a new leader may commit it. ``STORAGE_FULL`` is fatal: the
    batch was refused before it was written (no majority of the partition's replicas
    has disk space), and retrying for the whole delivery timeout would only hide that.
    ``UNKNOWN_TOPIC_OR_PARTITION`` is fatal here; the producer itself retries it for a
    moment first (a topic reaches every node shortly after its creation). An error
    outside :class:`~laminar.errors.LaminarError` (a transport surprise) leaves the
    outcome unknown.
    """
    if isinstance(error, OutOfOrderSequenceError):
        return Verdict.OUT_OF_ORDER
    if isinstance(error, StorageFullError):
        return Verdict.FATAL
    if isinstance(error, RetriableError | StorageError):
        return Verdict.RETRY
    if isinstance(error, LaminarError | UnknownTopicOrPartitionError):
        return Verdict.FATAL
    return Verdict.RETRY


def records_held(expected_sequence: int, base_sequence: int) -> int | None:
    """A request from ``base_sequence`` by a producer whose id never changes was
    refused ``OUT_OF_ORDER_SEQUENCE`` expecting ``expected_sequence``: how many
    records from ``base_sequence`` on the broker already holds (an earlier attempt
    wrote them: skip them, send the rest), or None when it expects an earlier
    sequence: records before the request, which the writer counted as written, were
    lost (their write was not committed before a leader change)."""
    if expected_sequence < base_sequence:
        return None
    return expected_sequence - base_sequence
