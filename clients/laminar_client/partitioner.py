"""Which partition a record goes to: one function for every writer.

A keyed record goes to :func:`key_partition` (defined in :mod:`laminar.partitioning`,
shared with the node, which places consumer groups with it): ``xxh3_64(key, seed 0) mod
partitions``, computed over the key's *serialized* bytes. The producer, the CLI
(``laminar produce --key-partitioning``) and the Spark writer all call this one
function, so a key lands on the same partition whichever of them wrote it, and
any language can compute it (xxh3-64 has implementations everywhere). The
mapping changes when the topic's partition count does, as in Kafka:
:func:`moved_key_fraction` says how much of it.

A record without a key goes to a *sticky* partition (:class:`StickyPartitioner`,
Kafka's KIP-480/KIP-794 behaviour): all keyless records of a topic go to one
partition until about a batch's worth of bytes (``batch_bytes_max``) was sent to
it, then to another, chosen at random. Round-robin per record would split the
same records into one small batch per partition; sticking fills whole batches,
and switching on bytes produced (not on batch creation, KIP-794) keeps a slow
partition from drawing more records than the others.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

from laminar.errors import InvalidInputError
from laminar.partitioning import key_partition

__all__ = ["StickyPartitioner", "key_partition", "moved_key_fraction"]


def moved_key_fraction(old: int, new: int) -> Fraction:
    """The share of keys that map to another partition when a topic goes from
    ``old`` to ``new`` partitions, under ``hash mod partitions``, exact.

    A hash's partition depends only on its residue ``r`` modulo ``lcm(old, new)``,
    and the residues are equally likely; the key stays iff ``r mod old == r mod
    new``. Over each block of ``new`` consecutive residues starting at ``k*new``,
    that holds for ``r = k*new + t`` exactly when ``old`` divides ``k*new`` and
    ``t < min(old, new)``; within ``[0, lcm)`` only ``k = 0`` qualifies. So
    ``min(old, new)`` residues of ``lcm(old, new)`` stay: 4 -> 8 moves 1/2,
    4 -> 6 moves 2/3, 8 -> 12 moves 2/3.
    """
    if old < 1 or new < 1:
        raise InvalidInputError(f"partition counts must be >= 1, got {old} and {new}")
    return 1 - Fraction(min(old, new), math.lcm(old, new))


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
