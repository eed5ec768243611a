"""The assignment table: replicas of many partitions, updated incrementally.

Theory of operation
===================

:func:`laminar.placement.rendezvous.replicas` answers for one partition. A node needs
the answer for every partition, and again after every membership change, so the
table keeps, per eligible member, a *score column*: that member's score for every
partition, computed with exactly the same arithmetic as
:func:`~laminar.placement.rendezvous.score`. It also keeps, per partition, the
replica tuple, its *floor* (the lowest score among the selected replicas, or
``-inf`` when fewer than ``k`` members are eligible) and its *depth* (the zone rank
of the last replica: 0 when all replicas are in distinct zones).

A membership change is applied as at most one *leave* followed by at most one
*join* of a single member (a weight, zone or liveness change is a leave of the old
version and a join of the new one; an ineligible version is simply not ranked):

- **Leave of X** can change only partitions whose replicas include X. If X was not
  selected, every member X outranked in its zone moves up one zone rank but stays
  behind X's old position, which was already outside the selection.
- **Join of X** can change only partitions where X's score is at least the floor,
  or where X's zone holds fewer replicas than the depth. Say X is selected with zone
  rank ``j``, and the last replica has zone rank ``d`` (the depth). If ``j < d``,
  either X outranks a selected member of its own zone, so its score beats that
  member's and so the floor, or X's zone holds fewer than ``d`` replicas (a zone
  that ran short, or a new zone: then X enters whatever its score). If ``j == d``,
  X's score beats the last replica's. ``j > d`` cannot be selected.

After a leave, each candidate partition is re-ranked from the cached columns with
the same selection function as a full build. After a join, only the joiner can
enter (see "Minimal disruption" in :mod:`.rendezvous`), so each candidate takes the
best ``k`` of its old replicas plus the joiner, which needs no other member's score.
Every other partition keeps its replicas, floor and depth, which the arguments
above show are unchanged. The result is therefore exactly equal to a full
recompute; a property test checks this over random sequences of joins, leaves and
weight, zone and liveness changes.

A table is an immutable value: updates return a new table that shares the score
columns it did not change. Columns are never mutated after they are built.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import xxhash

from laminar.errors import InvalidInputError
from laminar.placement.rendezvous import (
    KEY_SEPARATOR_BYTES,
    PlacementMember,
    check_replica_count,
    eligible_members,
    select_indices,
    zone_indexes_of,
)

_NO_FLOOR = -math.inf
"""Floor of a partition with fewer than k replicas: any joining member may enter."""

_TWO_TO_MINUS_53 = 2.0**-53

_Selection = tuple[tuple[str, ...], float, int]
"""Per partition: replica tuple, floor (lowest replica score) and depth (see above)."""


def _score_column(member: PlacementMember, key_prefixes: Sequence[bytes]) -> list[float]:
    """One member's score for every partition; the arithmetic of ``rendezvous.score``.

    ``key_prefixes[p]`` is the UTF-8 partition key followed by the separator byte.
    Inlined rather than calling ``score`` per pair because this loop is the whole
    cost of a full build.
    """
    node_bytes = member.node_id.encode()
    negative_weight = -member.weight
    hash64 = xxhash.xxh3_64_intdigest
    log = math.log
    scale = _TWO_TO_MINUS_53
    return [
        negative_weight / log(((hash64(prefix + node_bytes) >> 11) | 1) * scale)
        for prefix in key_prefixes
    ]


@dataclass(frozen=True, slots=True)
class _Ranking:
    """Eligible members in node-id order with their zones and score columns."""

    node_ids: tuple[str, ...]
    zone_indexes: tuple[int, ...]
    zone_total: int
    columns: tuple[Sequence[float], ...]

    @classmethod
    def of(
        cls, members: Mapping[str, PlacementMember], columns: Mapping[str, Sequence[float]]
    ) -> _Ranking:
        eligible = eligible_members(members.values())
        zone_indexes = tuple(zone_indexes_of(eligible))
        return cls(
            node_ids=tuple(member.node_id for member in eligible),
            zone_indexes=zone_indexes,
            zone_total=len(set(zone_indexes)),
            columns=tuple(columns[member.node_id] for member in eligible),
        )

    def rows(self, partition_count: int) -> Iterable[Sequence[float]]:
        """Every partition's scores, aligned with ``node_ids``; for a full build."""
        if not self.columns:
            return [()] * partition_count
        return zip(*self.columns, strict=True)

    def select(self, partition_index: int, k: int) -> _Selection:
        """Replicas, floor and depth of one partition, from the cached columns."""
        return self.select_row([column[partition_index] for column in self.columns], k)

    def select_row(self, row: Sequence[float], k: int) -> _Selection:
        """Replicas, floor and depth of one partition given its scores."""
        chosen = select_indices(row, self.zone_indexes, k, self.zone_total)
        if not chosen:
            return (), _NO_FLOOR, 0
        floor = min(row[index] for index in chosen) if len(chosen) == k else _NO_FLOOR
        # Replicas come in zone-rank order, so the last one's zone rank is the depth.
        last_zone = self.zone_indexes[chosen[-1]]
        depth = sum(1 for index in chosen if self.zone_indexes[index] == last_zone) - 1
        return tuple(self.node_ids[index] for index in chosen), floor, depth


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """How one partition's replica tuple changed between two tables.

    ``removed`` and ``added`` are in replica order of the old and new tuple; a move
    with neither only reordered the replicas (for instance a new preferred leader).
    """

    partition_key: str
    replicas_before: tuple[str, ...]
    replicas_after: tuple[str, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]

    @property
    def leader_before(self) -> str | None:
        return self.replicas_before[0] if self.replicas_before else None

    @property
    def leader_after(self) -> str | None:
        return self.replicas_after[0] if self.replicas_after else None

    @property
    def leader_changed(self) -> bool:
        return self.leader_before != self.leader_after


@dataclass(frozen=True, slots=True, eq=False)
class AssignmentTable:
    """Replica tuples of a fixed list of partitions for one member list and ``k``.

    Build with :meth:`build`; change with :meth:`with_member`, :meth:`without_member`
    or :meth:`with_members`, which return new tables equal to a full rebuild. Fields
    starting with an underscore are caches; do not construct the class directly.
    """

    k: int
    partition_keys: tuple[str, ...]
    members: Mapping[str, PlacementMember]
    replica_sets: tuple[tuple[str, ...], ...]
    _floors: tuple[float, ...]
    _depths: tuple[int, ...]
    _columns: Mapping[str, Sequence[float]]
    _key_prefixes: tuple[bytes, ...]
    _index_by_key: Mapping[str, int]

    @classmethod
    def build(
        cls, partition_keys: Iterable[str], members: Iterable[PlacementMember], k: int
    ) -> AssignmentTable:
        """Place every partition from scratch."""
        check_replica_count(k)
        keys = tuple(partition_keys)
        index_by_key: dict[str, int] = {}
        for index, key in enumerate(keys):
            if "\x00" in key:
                raise InvalidInputError(f"placement key must not contain NUL: {key!r}")
            if index_by_key.setdefault(key, index) != index:
                raise InvalidInputError(f"duplicate partition key: {key!r}")
        member_by_id: dict[str, PlacementMember] = {}
        for member in members:
            if member.node_id in member_by_id:
                raise InvalidInputError(f"duplicate node id in member list: {member.node_id}")
            member_by_id[member.node_id] = member
        sorted_members = MappingProxyType(
            {node_id: member_by_id[node_id] for node_id in sorted(member_by_id)}
        )
        key_prefixes = tuple(key.encode() + KEY_SEPARATOR_BYTES for key in keys)
        columns = {
            node_id: _score_column(member, key_prefixes)
            for node_id, member in sorted_members.items()
            if member.eligible
        }
        ranking = _Ranking.of(sorted_members, columns)
        replica_sets: list[tuple[str, ...]] = []
        floors: list[float] = []
        depths: list[int] = []
        for row in ranking.rows(len(keys)):
            chosen, floor, depth = ranking.select_row(row, k)
            replica_sets.append(chosen)
            floors.append(floor)
            depths.append(depth)
        return cls(
            k=k,
            partition_keys=keys,
            members=sorted_members,
            replica_sets=tuple(replica_sets),
            _floors=tuple(floors),
            _depths=tuple(depths),
            _columns=columns,
            _key_prefixes=key_prefixes,
            _index_by_key=index_by_key,
        )

    # -- queries -------------------------------------------------------------------

    def replicas_for(self, key: str) -> tuple[str, ...]:
        """Replica tuple of one partition key, preferred leader first."""
        index = self._index_by_key.get(key)
        if index is None:
            raise InvalidInputError(f"partition key not in this table: {key!r}")
        return self.replica_sets[index]

    def leader_for(self, key: str) -> str | None:
        """Preferred leader of one partition key, or None when no member is eligible."""
        chosen = self.replicas_for(key)
        return chosen[0] if chosen else None

    def items(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        """(partition key, replicas) pairs in table order."""
        return zip(self.partition_keys, self.replica_sets, strict=True)

    def replica_counts(self) -> dict[str, int]:
        """Number of replicas each member holds (0 for members holding none)."""
        counts = dict.fromkeys(self.members, 0)
        for chosen in self.replica_sets:
            for node_id in chosen:
                counts[node_id] += 1
        return counts

    def leader_counts(self) -> dict[str, int]:
        """Number of partitions each member is the preferred leader of."""
        counts = dict.fromkeys(self.members, 0)
        for chosen in self.replica_sets:
            if chosen:
                counts[chosen[0]] += 1
        return counts

    # -- updates -------------------------------------------------------------------

    def with_member(self, member: PlacementMember) -> AssignmentTable:
        """The table after ``member`` joins or changes weight, zone or liveness."""
        return self._apply({member.node_id: member}, ())

    def without_member(self, node_id: str) -> AssignmentTable:
        """The table after ``node_id`` leaves the member list (no-op if absent)."""
        return self._apply({}, (node_id,))

    def with_members(self, members: Iterable[PlacementMember]) -> AssignmentTable:
        """The table for a whole new member list, reached one member change at a time."""
        new_by_id: dict[str, PlacementMember] = {}
        for member in members:
            if member.node_id in new_by_id:
                raise InvalidInputError(f"duplicate node id in member list: {member.node_id}")
            new_by_id[member.node_id] = member
        departed = tuple(node_id for node_id in self.members if node_id not in new_by_id)
        changed = {
            node_id: member
            for node_id, member in sorted(new_by_id.items())
            if self.members.get(node_id) != member
        }
        return self._apply(changed, departed)

    def _apply(
        self, changed: Mapping[str, PlacementMember], departed: Sequence[str]
    ) -> AssignmentTable:
        draft = _Draft(self)
        for node_id in departed:
            draft.remove(node_id)
        for member in changed.values():
            draft.replace(member)
        return AssignmentTable(
            k=self.k,
            partition_keys=self.partition_keys,
            members=MappingProxyType(
                {node_id: draft.members[node_id] for node_id in sorted(draft.members)}
            ),
            replica_sets=tuple(draft.replica_sets),
            _floors=tuple(draft.floors),
            _depths=tuple(draft.depths),
            _columns=draft.columns,
            _key_prefixes=self._key_prefixes,
            _index_by_key=self._index_by_key,
        )


class _Draft:
    """Mutable working copy of a table while one update is applied; never escapes.

    Copies only the per-partition lists and the member/column maps; the columns
    themselves are shared with the source table and never written.
    """

    __slots__ = ("columns", "depths", "floors", "k", "key_prefixes", "members", "replica_sets")

    def __init__(self, table: AssignmentTable) -> None:
        self.k = table.k
        self.key_prefixes = table._key_prefixes
        self.members = dict(table.members)
        self.columns = dict(table._columns)
        self.replica_sets = list(table.replica_sets)
        self.floors = list(table._floors)
        self.depths = list(table._depths)

    def remove(self, node_id: str) -> None:
        """Member ``node_id`` leaves the member list."""
        old = self.members.pop(node_id, None)
        if old is not None and old.eligible:
            self._leave(node_id)

    def replace(self, member: PlacementMember) -> None:
        """Member joins, or changes: a leave of the old version, a join of the new."""
        old = self.members.get(member.node_id)
        if old == member:
            return
        kept_column: Sequence[float] | None = None
        if old is not None and old.eligible:
            del self.members[member.node_id]
            dropped_column = self._leave(member.node_id)
            if old.weight == member.weight:
                kept_column = dropped_column  # only the zone changed: scores stay valid
        self.members[member.node_id] = member
        if not member.eligible:
            return
        column = _score_column(member, self.key_prefixes) if kept_column is None else kept_column
        self.columns[member.node_id] = column
        self._join(member, column)

    def _leave(self, node_id: str) -> Sequence[float]:
        """Recompute the partitions that held ``node_id``; returns its dropped column."""
        column = self.columns.pop(node_id)
        affected = [index for index, chosen in enumerate(self.replica_sets) if node_id in chosen]
        if affected:
            ranking = _Ranking.of(self.members, self.columns)
            for index in affected:
                self._store(index, ranking.select(index, self.k))
        return column

    def _join(self, joiner: PlacementMember, column: Sequence[float]) -> None:
        """Recompute the partitions the joiner can enter (see the module docstring).

        Only the joiner can enter a replica set, so the new set is the best ``k`` of
        the old set plus the joiner: no full ranking is needed.
        """
        zone_by_id = {node_id: member.zone for node_id, member in self.members.items()}
        joiner_zone = joiner.zone
        scores_and_bounds = zip(column, self.floors, self.depths, strict=True)
        for index, (joiner_score, floor, depth) in enumerate(scores_and_bounds):
            chosen = self.replica_sets[index]
            if joiner_score < floor and (
                depth == 0 or sum(zone_by_id[node_id] == joiner_zone for node_id in chosen) >= depth
            ):
                continue
            candidates = [(self.columns[node_id][index], node_id) for node_id in chosen]
            candidates.append((joiner_score, joiner.node_id))
            self._store(index, _best_of(candidates, zone_by_id, self.k))

    def _store(self, index: int, selection: _Selection) -> None:
        self.replica_sets[index], self.floors[index], self.depths[index] = selection


def _best_of(
    candidates: list[tuple[float, str]], zone_by_id: Mapping[str, str], k: int
) -> _Selection:
    """Replicas, floor and depth chosen among a partition's old replicas plus a joiner.

    The old replicas of each zone are that zone's best members, so their zone ranks
    can be read off the old set itself. The joiner's zone rank counted this way is
    understated only when an unselected member of its zone outscores it; that
    member's key is already worse than every selected key and the joiner's is worse
    still, so the joiner is rightly left out. The result equals ``select_indices``
    over all members.
    """
    # Same ranking as select_indices: score descending, then node id ascending.
    candidates.sort(key=lambda candidate: (-candidate[0], candidate[1]))
    taken_per_zone: dict[str, int] = {}
    zone_ranks: list[int] = []
    for _, node_id in candidates:
        zone = zone_by_id[node_id]
        zone_rank = taken_per_zone.get(zone, 0)
        taken_per_zone[zone] = zone_rank + 1
        zone_ranks.append(zone_rank)
    order = sorted(range(len(candidates)), key=zone_ranks.__getitem__)[:k]
    selected = tuple(candidates[index][1] for index in order)
    floor = min(candidates[index][0] for index in order) if len(order) == k else _NO_FLOOR
    return selected, floor, zone_ranks[order[-1]]


def diff(old: AssignmentTable, new: AssignmentTable) -> tuple[PartitionMove, ...]:
    """Partitions whose replica tuple differs between ``old`` and ``new``.

    Partitions present in only one table count as moving from or to no replicas.
    Moves are listed in ``old``'s partition order, then ``new``'s extra partitions.
    """
    if old.partition_keys == new.partition_keys:
        pairs: Iterable[tuple[str, tuple[str, ...], tuple[str, ...]]] = (
            (key, before, after)
            for key, before, after in zip(
                old.partition_keys, old.replica_sets, new.replica_sets, strict=True
            )
            if before != after
        )
    else:
        before_by_key = dict(old.items())
        after_by_key = dict(new.items())
        keys = list(old.partition_keys)
        keys.extend(key for key in new.partition_keys if key not in before_by_key)
        pairs = (
            (key, before_by_key.get(key, ()), after_by_key.get(key, ()))
            for key in keys
            if before_by_key.get(key, ()) != after_by_key.get(key, ())
        )
    return tuple(_move(key, before, after) for key, before, after in pairs)


def _move(key: str, before: tuple[str, ...], after: tuple[str, ...]) -> PartitionMove:
    return PartitionMove(
        partition_key=key,
        replicas_before=before,
        replicas_after=after,
        removed=tuple(node_id for node_id in before if node_id not in after),
        added=tuple(node_id for node_id in after if node_id not in before),
    )
