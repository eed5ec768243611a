"""Property tests of placement: disruption, zones, drain, incremental == full."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.placement import AssignmentTable, PlacementMember, diff, partition_key, replicas

# Raise for a long soak, e.g. LAMINAR_PLACEMENT_EXAMPLES_SCALE=20; 1 keeps CI fast.
EXAMPLES_SCALE = int(os.environ.get("LAMINAR_PLACEMENT_EXAMPLES_SCALE", "1"))

NODE_IDS = [f"n{index:02d}" for index in range(14)]
ZONES = ["a", "b", "c", "d"]
WEIGHTS = [0.0, 0.5, 1.0, 1.0, 2.0, 3.25]

weights = st.sampled_from(WEIGHTS)
zones = st.sampled_from(ZONES)


@st.composite
def member_lists(draw: st.DrawFn, minimum: int = 0) -> list[PlacementMember]:
    node_ids = draw(st.lists(st.sampled_from(NODE_IDS), min_size=minimum, unique=True))
    return [
        PlacementMember(
            node_id,
            draw(weights),
            draw(zones),
            draw(st.booleans().map(lambda dead: not dead) | st.just(True)),
        )
        for node_id in node_ids
    ]


partition_lists = st.integers(min_value=0, max_value=10_000).map(
    lambda seed: tuple(partition_key(f"topic-{seed}", index) for index in range(30))
)
replica_counts = st.integers(min_value=1, max_value=5)


def _eligible_joiner(members: list[PlacementMember], data: st.DataObject) -> PlacementMember:
    free = [node_id for node_id in NODE_IDS if node_id not in {m.node_id for m in members}]
    node_id = data.draw(st.sampled_from(free)) if free else "joiner"
    weight = data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.25]))
    return PlacementMember(node_id, weight, data.draw(zones))


@settings(max_examples=150 * EXAMPLES_SCALE, deadline=None)
@given(member_lists(), partition_lists, replica_counts, st.data())
def test_join_changes_only_what_it_must(
    members: list[PlacementMember], keys: tuple[str, ...], k: int, data: st.DataObject
) -> None:
    joiner = _eligible_joiner(members, data)
    before = AssignmentTable.build(keys, members, k)
    after = before.with_member(joiner)
    for old, new in zip(before.replica_sets, after.replica_sets, strict=True):
        if joiner.node_id not in new:
            assert new == old
            continue
        assert set(new) - set(old) == {joiner.node_id}
        assert len(set(old) - set(new)) == (1 if len(old) == k else 0)


@settings(max_examples=150 * EXAMPLES_SCALE, deadline=None)
@given(member_lists(minimum=1), partition_lists, replica_counts, st.data())
def test_leave_changes_only_what_it_must(
    members: list[PlacementMember], keys: tuple[str, ...], k: int, data: st.DataObject
) -> None:
    leaver = data.draw(st.sampled_from(members))
    before = AssignmentTable.build(keys, members, k)
    after = before.without_member(leaver.node_id)
    for old, new in zip(before.replica_sets, after.replica_sets, strict=True):
        if leaver.node_id not in old:
            assert new == old
            continue
        assert set(old) - set(new) == {leaver.node_id}
        assert len(set(new) - set(old)) <= 1


@settings(max_examples=150 * EXAMPLES_SCALE, deadline=None)
@given(member_lists(minimum=1), partition_lists, replica_counts, st.data())
def test_weight_change_moves_only_partitions_of_that_member(
    members: list[PlacementMember], keys: tuple[str, ...], k: int, data: st.DataObject
) -> None:
    changed = data.draw(st.sampled_from(members))
    new_weight = data.draw(weights)
    before = AssignmentTable.build(keys, members, k)
    after = before.with_member(replace(changed, weight=new_weight))
    for move in diff(before, after):
        if new_weight > changed.weight:
            assert changed.node_id in move.replicas_after
            assert set(move.added) <= {changed.node_id}
        else:
            assert changed.node_id in move.replicas_before
            assert set(move.removed) <= {changed.node_id}


@settings(max_examples=200 * EXAMPLES_SCALE, deadline=None)
@given(
    member_lists(),
    st.text(min_size=0, max_size=12).filter(lambda t: "\x00" not in t),
    st.integers(1, 6),
)
def test_zone_constraint_and_drain(members: list[PlacementMember], key: str, k: int) -> None:
    chosen = replicas(key, members, k)
    eligible = {m.node_id: m for m in members if m.alive and m.weight > 0}
    assert len(chosen) == min(k, len(eligible))
    assert len(set(chosen)) == len(chosen)
    assert set(chosen) <= set(eligible)  # weight 0 and dead members get nothing
    per_zone = Counter(eligible[node_id].zone for node_id in chosen)
    zone_sizes = Counter(member.zone for member in eligible.values())
    if len(zone_sizes) >= k:
        assert all(count == 1 for count in per_zone.values())
    for zone, size in zone_sizes.items():
        for other in zone_sizes:
            # A zone with two more replicas than another means the other ran out.
            if per_zone[other] >= per_zone[zone] + 2:
                assert per_zone[zone] == size


Operation = tuple[str, str, float, str, bool]
"""(kind, node id, weight, zone, alive); each kind reads the fields it needs."""

operations: st.SearchStrategy[Operation] = st.tuples(
    st.sampled_from(["join", "leave", "weight", "alive", "zone"]),
    st.sampled_from(NODE_IDS),
    weights,
    zones,
    st.booleans(),
)


def _apply_operation(
    current: dict[str, PlacementMember], operation: Operation
) -> PlacementMember | str | None:
    """Update ``current``; return the member to upsert, the id that left, or None."""
    kind, node_id, weight, zone, alive = operation
    existing = current.get(node_id)
    if kind == "leave":
        current.pop(node_id, None)
        return node_id
    if kind == "join":
        member = PlacementMember(node_id, weight, zone, alive)
    elif existing is None:
        return None
    elif kind == "weight":
        member = replace(existing, weight=weight)
    elif kind == "alive":
        member = replace(existing, alive=alive)
    else:
        member = replace(existing, zone=zone)
    current[node_id] = member
    return member


@settings(max_examples=150 * EXAMPLES_SCALE, deadline=None)
@given(member_lists(), partition_lists, replica_counts, st.lists(operations, max_size=8))
def test_incremental_updates_equal_a_full_recompute(
    members: list[PlacementMember], keys: tuple[str, ...], k: int, steps: list[Operation]
) -> None:
    table = AssignmentTable.build(keys, members, k)
    current = {member.node_id: member for member in members}
    for step in steps:
        change = _apply_operation(current, step)
        if isinstance(change, PlacementMember):
            table = table.with_member(change)
        elif isinstance(change, str):
            table = table.without_member(change)
        full = AssignmentTable.build(keys, current.values(), k)
        assert table.replica_sets == full.replica_sets
        assert table._floors == full._floors
        assert table._depths == full._depths
        assert dict(table.members) == dict(full.members)
    # The list form of the update reaches the same table from the start.
    start = AssignmentTable.build(keys, members, k)
    assert start.with_members(current.values()).replica_sets == table.replica_sets
