"""Which partition a record goes to: one function for every writer.

A keyed record goes to :func:`key_partition` (defined in :mod:`laminar.partitioning`,
shared with the node, which places consumer groups with it): ``xxh3_64(key, seed 0) mod
partitions``, computed over the key's *serialized* bytes. The producer, the CLI
(``laminar produce --key-partitioning``) and the Spark writer all call this one
function, so a key lands on the same partition whichever of them wrote it, and
any language can compute it (xxh3-64 has implementations everywhere). The
mapping changes when the topic's partition count does, as in Kafka.

A record without a key goes to a *sticky* partition (:class:`StickyPartitioner`,
Kafka's KIP-480/KIP-794 behaviour): all keyless records of a topic go to one
partition until about a batch's worth of bytes (``batch_bytes_max``) was sent to
it, then to another, chosen at random. Round-robin per record would split the
same records into one small batch per partition; sticking fills whole batches,
and switching on bytes produced (not on batch creation, KIP-794) keeps a slow
partition from drawing more records than the others.
"""

from __future__ import annotations

import random

from laminar.errors import InvalidInputError
from laminar.partitioning import key_partition

__all__ = ["StickyPartitioner", "key_partition"]


class StickyPartitioner:
    """Keyless records: one partition per topic until ``switch_bytes`` were sent to it.

    Not thread-safe on its own: the producer calls it under its lock.
    """

    __slots__ = ("_rng", "_state", "switch_bytes")

    def __init__(self, switch_bytes: int, rng: random.Random | None = None) -> None:
        if switch_bytes < 1:
            raise InvalidInputError("switch_bytes must be >= 1")
        self.switch_bytes = switch_bytes
        self._rng = rng if rng is not None else random.Random()
        # topic -> [partition, bytes sent to it since the switch, partition count]
        self._state: dict[str, list[int]] = {}

    def partition(self, topic: str, partitions: int, size: int) -> int:
        """The partition for a keyless record of ``size`` bytes (counted towards the switch)."""
        state = self._state.get(topic)
        if state is None or state[2] != partitions:
            state = [self._rng.randrange(partitions), 0, partitions]
            self._state[topic] = state
        elif state[1] >= self.switch_bytes:
            state[0] = self._next(state[0], partitions)
            state[1] = 0
        state[1] += size
        return state[0]

    def _next(self, current: int, partitions: int) -> int:
        if partitions == 1:
            return 0
        choice = self._rng.randrange(partitions - 1)
        return choice + 1 if choice >= current else choice
