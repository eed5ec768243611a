"""Which partition a key goes to: the one function the node and the clients share.

``xxh3_64(key, seed 0) mod partitions`` over the key's bytes. The producer, the CLI
and the Spark writer route keyed records with it (``laminar_client.partitioner``
re-exports it), and the node finds the ``__groups`` partition of a consumer group
with it (``key_partition(group.encode(), 8)``), so a client can compute where a
group lives without asking. Defined once here because the node must not import the
client package, while the client already depends on ``laminar``.
"""

from __future__ import annotations

import xxhash

from laminar.errors import InvalidInputError

__all__ = ["key_partition"]


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of a record with ``key`` in a topic of ``partitions`` partitions.

    ``xxh3_64_intdigest(key)`` (seed 0) modulo ``partitions``: stable across
    processes, machines and versions; documented in ``docs/design.md``.
    """
    if partitions < 1:
        raise InvalidInputError(f"a topic has at least one partition, got {partitions}")
    return xxhash.xxh3_64_intdigest(key) % partitions
