"""Idempotent batch producer: whole batches, stamped with a producer id and sequence numbers.

The low-level, synchronous way to write pre-built batches (one in flight per
partition); services use :class:`~laminar_client.producer.Producer`, which batches and
pipelines records itself. The chaos tests use this one to know each batch exactly.

Each partition a producer writes to numbers its records from 0; a batch carries
``(producer_id, base_sequence)`` and covers ``record_count`` sequence numbers. The
client retries a batch with the same bytes, so a batch that was written before its
acknowledgement was lost is recognised by the leader (or a new leader, which
learned the sequences through replication) and answered with its original offset
instead of being written twice.

The producer id is chosen at random by the client (63 bits, so two producers
colliding is negligible); the broker accepts any sequence from a producer id it
does not know. When a send fails with its outcome unknown (the retries ran out on
a retriable error), the producer switches to a new producer id: the next batch
neither collides with nor waits for the one in doubt. A failure that proves the
batch was not written (invalid input, unknown topic) keeps id and sequence. Which
failure is which, the sequence arithmetic and the id are
:mod:`laminar_client.sequencing`'s, as for every Laminar writer.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

from laminar.records import Compression, Header, encode_batch
from laminar_client.client import AcksMode, Client
from laminar_client.sequencing import Lineage, Verdict, random_producer_id, verdict


class IdempotentProducer:
    """Sends records so that client retries never duplicate them.

    ``send`` is synchronous: it returns the base offset once the batch is
    acknowledged with ``acks``. Thread-safe; sends to one partition are serialized,
    because sequences must reach the leader in order.
    """

    def __init__(
        self,
        client: Client,
        *,
        producer_id: int | None = None,
        compression: Compression = Compression.NONE,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._rng = rng if rng is not None else random.Random()
        self._compression = compression
        self._lock = threading.Lock()
        self.producer_id = producer_id if producer_id is not None else random_producer_id(self._rng)
        self._lineages: dict[tuple[str, int], Lineage] = {}
        """Per partition, ``producer_id``'s next sequence (all dropped by a rotation)."""
        self._partition_locks: dict[tuple[str, int], threading.Lock] = {}

    def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[Header]] | None = None,
        timestamps_ms: Sequence[int] | int | None = None,
        acks: AcksMode = "all",
        timeout_s: float | None = None,
    ) -> int:
        """Write ``values`` (one record each) as one batch; the base offset."""
        key = (topic, partition)
        with self._lock:
            partition_lock = self._partition_locks.setdefault(key, threading.Lock())
        with partition_lock:
            with self._lock:
                lineage = self._lineage_locked(key)
                if not lineage.fits(len(values)):
                    self._rotate_locked()
                    lineage = self._lineage_locked(key)
                producer_id, sequence = lineage.producer_id, lineage.next_sequence
            stamp_ms = int(time.time() * 1000) if timestamps_ms is None else timestamps_ms
            batch = encode_batch(
                values,
                keys=keys,
                headers=headers,
                timestamps_ms=stamp_ms,
                compression=self._compression,
                producer_id=producer_id,
                base_sequence=sequence,
            )
            try:
                (base_offset,) = self._client.produce(
                    topic, partition, [batch], acks=acks, timeout_s=timeout_s
                )
            except Exception as error:
                if verdict(error) is not Verdict.FATAL:  # perhaps written, or a gap
                    with self._lock:
                        self._rotate_locked()
                raise
            with self._lock:
                if self._lineages.get(key) is lineage:  # not rotated meanwhile
                    lineage.take(len(values))
            return base_offset

    def _lineage_locked(self, key: tuple[str, int]) -> Lineage:
        lineage = self._lineages.get(key)
        if lineage is None:
            lineage = self._lineages[key] = Lineage(self.producer_id)
        return lineage

    def _rotate_locked(self) -> None:
        """Start over with a fresh producer id and every sequence at 0."""
        self.producer_id = random_producer_id(self._rng)
        self._lineages.clear()
