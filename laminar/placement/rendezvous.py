"""Weighted rendezvous hashing with failure domains: who holds one partition.

Theory of operation
===================

Every node and every client must agree on the replicas of every partition without
talking to each other, so placement is a pure function of ``(partition key, member
list, k)``. It is *weighted rendezvous hashing* (highest random weight) with the
logarithmic method, followed by a zone-aware pick of the first ``k``.

1. **Partition key.** ``"<topic>/<partition>"``, e.g. ``"orders/7"``
   (:func:`partition_key`).

2. **Hash.** For each eligible member (alive and weight > 0) hash the bytes::

       utf8(key) + b"\\x00" + utf8(node_id)

   with **xxh3-64, seed 0** (the ``XXH3_64bits`` function of the reference xxHash
   library), read as an unsigned 64-bit integer ``h``. The zero byte is a separator;
   neither a partition key nor a node id may contain it, so distinct pairs never
   produce the same bytes.

3. **Uniform value u strictly inside (0, 1).** Keep the top 53 bits of ``h`` and force
   the lowest of those bits to one::

       m = (h >> 11) | 1            # an odd integer in [1, 2**53 - 1]
       u = m * 2**-53               # exact in IEEE-754 binary64

   ``u`` is the midpoint of one of 2**52 equal cells of (0, 1), so
   ``2**-53 <= u <= 1 - 2**-53``: never 0 (``ln 0`` is -inf) and never 1 (``ln 1``
   is 0, a division by zero). Every step is exact in binary64 arithmetic.

4. **Score.** ``score = -weight / ln(u)`` in binary64, with ``ln`` the platform's
   natural logarithm (``math.log``; C's ``log``). ``ln(u)`` is negative, so the score
   is positive and grows with the weight. For a fixed key, the probability that a
   member has the highest score is exactly ``weight / sum(weights)``: ``-1/ln(u)``
   of a uniform ``u`` is the reciprocal of an Exp(1) variable, so the maximum of
   ``weight_i / E_i`` is won by member ``i`` with probability proportional to
   ``weight_i`` (the race of exponential clocks). Changing one member's weight
   rescales only that member's scores, so only partitions that member wins or loses
   move.

5. **Ranking.** Members are ranked by score, highest first; an exact tie (which
   needs two 64-bit hashes to agree in their top 52 bits, or different weights to
   produce the same quotient) goes to the node id that sorts first by its UTF-8
   bytes (equivalently, by code points).

6. **Zone-aware pick.** Give each member its *zone rank*: 0 for the best-ranked
   member of its zone, 1 for the second, and so on. The replicas are the first
   ``k`` members ordered by ``(zone rank, ranking)``. Read as a walk: take the best
   member of every zone in ranking order, then the second best of every zone, and
   so on until ``k`` are taken. Hence:

   - with at least ``k`` zones, no two replicas share a zone;
   - with fewer zones, replica counts per zone differ by at most one, unless a zone
     runs out of members (Pulsar's anti-affinity: evenly across domains first, then
     across the nodes inside a domain — the rendezvous ranking spreads those);
   - the first replica is always the member with the highest score overall: it is
     the **preferred leader**, and its share of leaderships is its weight share;
   - fewer than ``k`` eligible members yield fewer replicas; the caller decides
     whether that is enough.

   A member that is not alive, or has weight 0 (draining), is not ranked at all, so
   it receives no replicas and its partitions move to the members that would have
   held them had it never existed.

Minimal disruption
------------------
When a member X joins, the zone ranks of the members of X's zone that X outranks
grow by one and every other key is unchanged. Each such shifted key is still
better than the key it replaces, so no member outside the old selection can enter
except X: a join either leaves a replica set exactly as it was, or adds X and
drops exactly one member (not necessarily the last one: in a zone-constrained pick
X can push out a member of its own zone). A leave is the mirror image. Both
properties are checked by property tests, and :mod:`laminar.placement.table` uses
them to recompute only the partitions that can change.

Portability note
----------------
Steps 1-3 are exact integer/binary64 arithmetic. Step 4 depends on ``ln`` being
correctly rounded or nearly so (glibc, musl, macOS, Java ``StrictMath`` and .NET all
agree on these arguments in practice); a one-ulp difference could swap two members
only when their scores agree to about 1e-16 relative, which the vectors in
``tests/placement/placement_vectors.json`` let an implementer check.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import xxhash

from laminar.errors import InvalidInputError

KEY_SEPARATOR_BYTES = b"\x00"
"""Byte placed between the partition key and the node id before hashing."""

_TWO_TO_MINUS_53 = 2.0**-53
"""Scale from a 53-bit integer to (0, 1); a power of two, so multiplying is exact."""

_hash64 = xxhash.xxh3_64_intdigest
_log = math.log


def partition_key(topic: str, partition: int) -> str:
    """The placement key of one partition: ``"<topic>/<partition>"``."""
    if partition < 0:
        raise InvalidInputError(f"partition index must be >= 0, got {partition}")
    return f"{topic}/{partition}"


def _check_key(key: str) -> None:
    if "\x00" in key:
        raise InvalidInputError(f"placement key must not contain a NUL character: {key!r}")


def unit_interval(key: str, node_id: str) -> float:
    """The uniform value ``u`` in (0, 1) for one (partition key, node) pair (steps 2-3)."""
    _check_key(key)
    _check_key(node_id)
    digest = _hash64(key.encode() + KEY_SEPARATOR_BYTES + node_id.encode())
    return ((digest >> 11) | 1) * _TWO_TO_MINUS_53


def score(node_id: str, weight: float, key: str) -> float:
    """The rendezvous score of ``node_id`` with ``weight`` for ``key`` (step 4).

    Higher wins. Weight 0 gives score 0: such a member is never ranked.
    """
    if not (math.isfinite(weight) and weight >= 0.0):
        raise InvalidInputError(f"weight must be finite and >= 0, got {weight}")
    return -weight / _log(unit_interval(key, node_id))


@dataclass(frozen=True, slots=True)
class PlacementMember:
    """What placement needs to know about one cluster member.

    The node converts its membership view into these, so placement never depends on
    the membership module. ``weight`` is relative capacity (0 drains the member);
    ``zone`` is the failure-domain label (members with the same label share a rack,
    host or availability zone); ``alive`` is False for dead or left members, which
    hold no replicas. A merely *suspect* member should stay alive here, so that one
    slow probe does not move partitions.
    """

    node_id: str
    weight: float = 1.0
    zone: str = ""
    alive: bool = True

    def __post_init__(self) -> None:
        if not self.node_id or "\x00" in self.node_id:
            raise InvalidInputError(f"node id must be non-empty without NUL: {self.node_id!r}")
        if not (math.isfinite(self.weight) and self.weight >= 0.0):
            raise InvalidInputError(
                f"weight of {self.node_id} must be finite and >= 0, got {self.weight}"
            )

    @property
    def eligible(self) -> bool:
        """Whether this member can hold replicas at all."""
        return self.alive and self.weight > 0.0


def select_indices(
    scores: Sequence[float], zone_indexes: Sequence[int], k: int, zone_total: int | None = None
) -> list[int]:
    """Indexes of the replicas among candidates, in replica order (steps 5-6).

    ``scores[i]`` and ``zone_indexes[i]`` describe candidate ``i``; candidates must be
    listed in ascending node-id order so that the stable sort breaks ties by node id.
    ``zone_total`` (the number of distinct zone indexes) may be passed to save
    counting them per call. Shared by :func:`replicas` and the assignment table so
    both give the same answer.
    """
    ranked = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)
    if zone_total is None:
        zone_total = len(set(zone_indexes))
    taken_per_zone: dict[int, int] = {}
    by_zone_rank: list[list[int]] = []
    for index in ranked:
        zone_index = zone_indexes[index]
        zone_rank = taken_per_zone.get(zone_index, 0)
        taken_per_zone[zone_index] = zone_rank + 1
        if zone_rank == len(by_zone_rank):
            by_zone_rank.append([index])
        else:
            by_zone_rank[zone_rank].append(index)
        # Once every zone has shown its best member, zone rank 0 is complete; if it
        # alone fills k slots, the rest of the ranking cannot change the answer.
        if len(taken_per_zone) == zone_total and len(by_zone_rank[0]) >= k:
            return by_zone_rank[0][:k]
    selected: list[int] = []
    for group in by_zone_rank:
        selected.extend(group)
        if len(selected) >= k:
            break
    return selected[:k]


def eligible_members(members: Iterable[PlacementMember]) -> list[PlacementMember]:
    """Alive members with weight > 0, sorted by node id; rejects duplicate node ids."""
    by_id: dict[str, PlacementMember] = {}
    for member in members:
        if member.node_id in by_id:
            raise InvalidInputError(f"duplicate node id in member list: {member.node_id}")
        by_id[member.node_id] = member
    return [by_id[node_id] for node_id in sorted(by_id) if by_id[node_id].eligible]


def zone_indexes_of(members: Sequence[PlacementMember]) -> list[int]:
    """A small integer per distinct zone label, aligned with ``members``."""
    index_by_zone: dict[str, int] = {}
    return [index_by_zone.setdefault(member.zone, len(index_by_zone)) for member in members]


def check_replica_count(k: int) -> None:
    """Reject a replication factor that cannot mean anything."""
    if k < 1:
        raise InvalidInputError(f"replica count k must be >= 1, got {k}")


def replicas(key: str, members: Iterable[PlacementMember], k: int) -> tuple[str, ...]:
    """The node ids holding ``key``, preferred leader first (at most ``k`` of them).

    Only alive members with weight > 0 are considered; zones are spread as described
    in the module docstring. Returns fewer than ``k`` ids when fewer members are
    eligible.
    """
    check_replica_count(k)
    candidates = eligible_members(members)
    scores = [score(member.node_id, member.weight, key) for member in candidates]
    chosen = select_indices(scores, zone_indexes_of(candidates), k)
    return tuple(candidates[index].node_id for index in chosen)
