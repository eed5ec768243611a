"""The target assignment of a consumer group: capped weighted rendezvous.

Theory of operation
===================

Every replica of a group's ``__groups`` partition computes the same answer to
"which member should read partition ``t/p``" from the same inputs, without
talking: the group id, the members (each with a *key* and a weight), the group's
partitions and the previous answer (step 5). The function is pure and
deterministic, so the coordinator validates ownership claims with it when it
applies them from the log, and tells each member its part in every heartbeat
answer.

1. **Member key.** ``instance_id`` when the member has one, else ``member_id``.
   A static member that restarts with a new member id but the same instance id has
   the same key, hence the same target: its partitions do not move.

2. **Scores.** For partition ``t/p`` and a member with key ``k`` and weight ``w``
   the score is :func:`laminar.placement.rendezvous.score` with the placement key
   ``"<group>/<topic>/<partition>"`` and node id ``k``. So the hashed bytes are::

       utf8(group) + b"/" + utf8(topic) + b"/" + ascii(decimal partition)
           + b"\\x00" + utf8(k)

   with xxh3-64 seed 0, turned into ``u`` in (0, 1) and ``score = -w / ln(u)``
   exactly as that module's docstring says. Topic names cannot contain ``/`` and
   nothing here may contain NUL, so distinct (group, topic, partition, key) never
   hash the same bytes. Plain rendezvous (highest score wins) gives member ``k`` a
   partition with probability ``w / W`` and moves only the winner's partitions
   when a member joins or leaves, but balances only in expectation.

3. **Loads.** With ``P`` partitions and total weight ``W``, a member's quota is
   ``P*w/W`` computed exactly (weights as exact binary fractions, so every member
   agrees). Every member gets ``floor`` of its quota, and the ``P - sum(floors)``
   remaining *extra* slots go one each to members with a fractional quota: those
   whose top choices overflow their floor the most (then by key). So each member
   holds ``floor(P*w/W)`` or ``ceil(P*w/W)`` partitions, never more than the ceil:
   at equal weights loads differ by at most one.

4. **Capped assignment = minimum total cost.** Among all assignments with exactly
   these loads, take the one minimising the sum of ``-ln(score)`` over partitions
   (a transportation problem). It is computed by starting from plain rendezvous
   (every partition at its top choice, which is optimal without caps) and moving
   the overflow along shortest paths in the member graph (successive shortest
   paths with Dijkstra and potentials): one augmentation per partition of excess,
   each moving one partition from an overfull member, possibly through a chain of
   members, to one with room. The optimum is characterised by prices: there are
   per-member factors ``c_m`` such that every partition goes to the member with the
   highest ``score * c_m``. It is therefore *rendezvous with corrected weights*:
   the corrections are as small as the balance allows, and when plain rendezvous
   happens to be balanced nothing moves at all.

5. **Sticky: the previous target is an input.** The group's state keeps its
   target and recomputes it at every group epoch with the previous one as
   ``previous`` (:meth:`laminar.groups.state.Group.retarget`). A partition's cost
   for every member but its previous one gains :data:`MOVE_COST`, larger than any
   difference of ``-ln(score)``; so the minimum-cost assignment first moves as few
   partitions as the loads allow, then deviates least from rendezvous. A join
   moves exactly the joiner's share (each old member sheds its excess, the
   lowest-scored first), a leave exactly the leaver's partitions, new partitions
   go to members with room. Partitions whose previous member is gone, and the very
   first target, fall back to plain capped rendezvous.

Why this variant
----------------
A join or leave must move few partitions beyond the ideal (the joiner's fair
share, or the leaver's partitions). Plain "partitions in fixed order, each to its
best member below its cap" lets one capped member push partitions down the order
onto other members, a cascade; the minimum-cost assignment instead decides the
overflow globally, with the smallest possible deviation from everyone's preference.
Without history (step 5), measured over 1000 random group ids (``python -m
bench.group_assignment``), on a 4th member joining a group of 3 over 60 partitions
the fraction of partitions that change owner is 1.115x the ideal 1/4 (0.279) on
average with this variant, against 1.14x for fixed order, 1.15x for a global greedy
by score, 1.18x for "strongest top choice first" and 1.13x for "top choice, then
shed the cheapest overflow". The excess is the joiner not taking exactly a third of
its share from each old member, which no function of the member set alone can
ensure; hence step 5, which makes it exactly 1.0x (and a leave move nothing but
the leaver's partitions), at the price of the target being state rather than a
function every member could compute from the member list.

Guarantees
----------
- Deterministic: integer and exact rational arithmetic for the loads; scores and
  costs in binary64 with the placement module's portability caveat; every tie is
  broken by member key (code point order) and partition order (topic, index).
- Balanced: each member holds ``floor`` or ``ceil`` of ``P*w/W`` partitions.
- Sticky for static members: the answer depends on member keys, not member ids.
- Minimal movement: with ``previous``, the fewest partitions change member that the
  loads allow; among those answers, the total ``-ln(score)`` is minimal.

Cost: ``O(P*N)`` scores plus ``O(N^2 + N log P)`` per partition of overflow (about
``sqrt(P*N)``). Limits: :data:`GROUP_MEMBERS_MAX` members and
:data:`GROUP_PARTITIONS_MAX` partitions per group.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from laminar.errors import InvalidInputError
from laminar.ids import TopicPartition
from laminar.placement.rendezvous import score

GROUP_MEMBERS_MAX = 100
"""Members in one group: the overflow step is quadratic in members per move (100
members over 10,000 partitions take about 3 s on one core; see the bench)."""

GROUP_PARTITIONS_MAX = 10_000
"""Partitions one group may consume: the assignment scores every (partition, member)."""

WEIGHT_MAX = 1_000_000.0
"""Largest member weight; weights are relative, so this only guards against absurd ones."""

MOVE_COST = 1e6
"""Cost added for taking a partition from its previous member (step 5): above any
difference of ``-ln(score)`` (at most about 800 with the weight limits), so the
solver first minimises the partitions moved, then deviates least from rendezvous."""

MEMBER_KEY_BYTES_MAX = 128
"""Longest member key (instance id or member id) in UTF-8 bytes."""

GROUP_ID_BYTES_MAX = 255
"""Longest group id in UTF-8 bytes."""


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """One member as the assignment sees it: its key and its relative weight.

    ``key`` is the instance id of a static member, else its member id; ``weight``
    is relative capacity (finite, > 0): a member with twice the weight gets twice
    the partitions.
    """

    key: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        check_member_key(self.key)
        check_weight(self.weight)


def check_group_id(group_id: str) -> None:
    """Reject a group id that is empty, too long or contains NUL or a control character."""
    _check_text("group id", group_id, GROUP_ID_BYTES_MAX)


def check_member_key(key: str) -> None:
    """Reject a member key (member id or instance id) that could not be hashed safely."""
    _check_text("member key", key, MEMBER_KEY_BYTES_MAX)


def check_weight(weight: float) -> None:
    """Reject a weight that is not a finite number in (0, :data:`WEIGHT_MAX`]."""
    if not (isinstance(weight, float | int) and math.isfinite(weight)):
        raise InvalidInputError(f"member weight must be a finite number, got {weight!r}")
    if not 0.0 < weight <= WEIGHT_MAX:
        raise InvalidInputError(f"member weight must be in (0, {WEIGHT_MAX}], got {weight}")


def _check_text(what: str, text: str, bytes_max: int) -> None:
    if not isinstance(text, str) or not text:
        raise InvalidInputError(f"{what} must be a non-empty string, got {text!r:.80}")
    if len(text.encode()) > bytes_max:
        raise InvalidInputError(f"{what} longer than {bytes_max} UTF-8 bytes: {text!r:.80}")
    if any(ord(character) < 0x20 for character in text):
        raise InvalidInputError(f"{what} must not contain control characters: {text!r:.80}")


def assignment_key(group_id: str, topic: str, partition: int) -> str:
    """The rendezvous key of one partition inside one group (step 2)."""
    return f"{group_id}/{topic}/{partition}"


def load_bounds(partition_count: int, weights: Sequence[float]) -> list[tuple[int, int]]:
    """``(floor, ceil)`` of each member's quota ``P*w/W``, computed exactly."""
    total_weight = sum((Fraction(weight) for weight in weights), Fraction(0))
    bounds: list[tuple[int, int]] = []
    for weight in weights:
        quota = partition_count * Fraction(weight) / total_weight
        bounds.append((math.floor(quota), math.ceil(quota)))
    return bounds


def target_assignment(
    group_id: str,
    members: Sequence[AssignmentMember],
    partitions: Iterable[TopicPartition],
    previous: Mapping[TopicPartition, str] | None = None,
) -> dict[TopicPartition, str]:
    """The member key that should own each partition (see the module docstring).

    ``previous`` is the group's target before this change (partition -> member
    key): partitions stay with their previous member whenever the loads allow
    (step 5). Returns an empty mapping when there are no members. Raises
    :class:`InvalidInputError` on duplicate member keys or partitions, on topic
    names containing ``/`` or NUL, and beyond the group limits.
    """
    check_group_id(group_id)
    ordered_members = _ordered_members(members)
    ordered_partitions = _ordered_partitions(partitions)
    if not ordered_members or not ordered_partitions:
        return {}
    solver = _CappedRendezvous(group_id, ordered_members, ordered_partitions, previous or {})
    holders = solver.solve()
    return {
        partition: ordered_members[holder].key
        for partition, holder in zip(ordered_partitions, holders, strict=True)
    }


def partitions_by_member(
    assignment: Mapping[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """Invert an assignment: member key -> its partitions in (topic, index) order."""
    inverted: dict[str, list[TopicPartition]] = {}
    for partition in sorted(assignment):
        inverted.setdefault(assignment[partition], []).append(partition)
    return inverted


def _ordered_members(members: Sequence[AssignmentMember]) -> list[AssignmentMember]:
    if len(members) > GROUP_MEMBERS_MAX:
        raise InvalidInputError(
            f"a group has at most {GROUP_MEMBERS_MAX} members, got {len(members)}"
        )
    by_key: dict[str, AssignmentMember] = {}
    for member in members:
        if member.key in by_key:
            raise InvalidInputError(f"duplicate member key in assignment: {member.key!r}")
        by_key[member.key] = member
    return [by_key[key] for key in sorted(by_key)]


def _ordered_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    unique: set[TopicPartition] = set()
    for topic, partition in partitions:
        if not topic or "/" in topic or "\x00" in topic:
            raise InvalidInputError(f"topic name must be non-empty without '/' or NUL: {topic!r}")
        if not isinstance(partition, int) or partition < 0:
            raise InvalidInputError(f"partition index must be an int >= 0, got {partition!r}")
        if (topic, partition) in unique:
            raise InvalidInputError(f"duplicate partition in assignment: {topic}/{partition}")
        unique.add((topic, partition))
        if len(unique) > GROUP_PARTITIONS_MAX:
            raise InvalidInputError(f"a group consumes at most {GROUP_PARTITIONS_MAX} partitions")
    return sorted(unique)


class _CappedRendezvous:
    """Minimum-cost assignment with exact loads, by successive shortest paths.

    Nodes are members (by index in key order). Partition ``q`` held by member ``i``
    gives the residual edge ``i -> j`` of cost ``cost[q][j] - cost[q][i]``; the
    edge's weight is the cheapest such ``q``, kept in a lazy min-heap per (i, j).
    Potentials keep reduced costs non-negative so Dijkstra applies.
    """

    def __init__(
        self,
        group_id: str,
        members: Sequence[AssignmentMember],
        partitions: Sequence[TopicPartition],
        previous: Mapping[TopicPartition, str],
    ) -> None:
        self.member_count = len(members)
        index_of = {member.key: index for index, member in enumerate(members)}
        self.costs: list[list[float]] = []
        for topic, index in partitions:
            costs = [
                -math.log(score(member.key, member.weight, assignment_key(group_id, topic, index)))
                for member in members
            ]
            keeper = index_of.get(previous.get((topic, index), ""))
            if keeper is not None:
                costs = [
                    cost if column == keeper else cost + MOVE_COST
                    for column, cost in enumerate(costs)
                ]
            self.costs.append(costs)
        self.holders = [min(range(self.member_count), key=row.__getitem__) for row in self.costs]
        self.counts = [0] * self.member_count
        for holder in self.holders:
            self.counts[holder] += 1
        self.caps = self._caps(len(partitions), [member.weight for member in members])
        self.potentials = [0.0] * self.member_count
        self.edges: list[list[list[tuple[float, int]]]] = [
            [[] for _ in range(self.member_count)] for _ in range(self.member_count)
        ]
        for partition_index, holder in enumerate(self.holders):
            self._push_edges(partition_index, holder)
        for row in self.edges:
            for heap in row:
                heapq.heapify(heap)

    def _caps(self, partition_count: int, weights: Sequence[float]) -> list[int]:
        bounds = load_bounds(partition_count, weights)
        caps = [floor for floor, _ in bounds]
        extras = partition_count - sum(caps)
        fractional = [index for index, (floor, ceil) in enumerate(bounds) if ceil > floor]
        # The extra slots go where the top choices overflow most: fewest moves.
        fractional.sort(key=lambda index: (-(self.counts[index] - caps[index]), index))
        for index in fractional[:extras]:
            caps[index] += 1
        assert sum(caps) == partition_count, "quota floors plus extras must cover every partition"
        return caps

    def _push_edges(self, partition_index: int, holder: int) -> None:
        row = self.costs[partition_index]
        for other in range(self.member_count):
            if other != holder:
                heapq.heappush(
                    self.edges[holder][other], (row[other] - row[holder], partition_index)
                )

    def _edge(self, source: int, target: int) -> tuple[float, int] | None:
        """The cheapest (cost delta, partition) to move from ``source`` to ``target``."""
        heap = self.edges[source][target]
        while heap and self.holders[heap[0][1]] != source:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def solve(self) -> list[int]:
        for _ in range(len(self.holders) + 1):
            overfull = next(
                (
                    index
                    for index in range(self.member_count)
                    if self.counts[index] > self.caps[index]
                ),
                None,
            )
            if overfull is None:
                return self.holders
            self._augment(overfull)
        raise AssertionError("capped assignment did not converge within one move per partition")

    def _augment(self, source: int) -> None:
        distances, previous = self._shortest_paths(source)
        target = min(
            (index for index in range(self.member_count) if self.counts[index] < self.caps[index]),
            key=lambda index: (distances[index], index),
        )
        moves: list[tuple[int, int]] = []
        node = target
        while node != source:
            parent = previous[node]
            edge = self._edge(parent, node)
            assert edge is not None, "a shortest-path edge must carry a partition"
            moves.append((edge[1], node))
            node = parent
        for partition_index, new_holder in moves:
            self.holders[partition_index] = new_holder
            self._push_edges(partition_index, new_holder)
        self.counts[source] -= 1
        self.counts[target] += 1
        for index, distance in enumerate(distances):
            if distance < math.inf:
                self.potentials[index] += distance

    def _shortest_paths(self, source: int) -> tuple[list[float], list[int]]:
        """Dijkstra on reduced costs from ``source`` over the dense member graph."""
        distances = [math.inf] * self.member_count
        previous = [-1] * self.member_count
        done = [False] * self.member_count
        distances[source] = 0.0
        for _ in range(self.member_count):
            node = -1
            best = math.inf
            for index in range(self.member_count):
                if not done[index] and distances[index] < best:
                    node, best = index, distances[index]
            if node < 0:
                break
            done[node] = True
            for other in range(self.member_count):
                if done[other] or other == node:
                    continue
                edge = self._edge(node, other)
                if edge is None:
                    continue
                reduced = edge[0] + self.potentials[node] - self.potentials[other]
                candidate = best + max(reduced, 0.0)
                if candidate < distances[other]:
                    distances[other] = candidate
                    previous[other] = node
        return distances, previous
