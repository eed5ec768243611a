"""Unit tests of the assignment table and diff."""

from __future__ import annotations

import pytest

from laminar.errors import InvalidInputError
from laminar.placement import (
    AssignmentTable,
    PlacementMember,
    diff,
    partition_key,
    replicas,
    score,
)

KEYS = [partition_key(f"topic-{topic}", index) for topic in range(3) for index in range(100)]
MEMBERS = [
    PlacementMember(f"node-{index}", 1.0 + index % 3, f"zone-{index % 4}") for index in range(10)
]


def _table(members: list[PlacementMember], k: int = 3) -> AssignmentTable:
    return AssignmentTable.build(KEYS, members, k)


def test_table_agrees_with_replicas() -> None:
    table = _table(MEMBERS)
    for key, chosen in table.items():
        assert chosen == replicas(key, MEMBERS, 3)
        assert table.replicas_for(key) == chosen
        assert table.leader_for(key) == chosen[0]
    assert sum(table.replica_counts().values()) == 3 * len(KEYS)
    assert sum(table.leader_counts().values()) == len(KEYS)


def test_cached_columns_hold_exactly_the_public_scores() -> None:
    table = _table(MEMBERS)
    for member in MEMBERS:
        column = table._columns[member.node_id]
        for index in range(0, len(KEYS), 7):
            assert column[index] == score(member.node_id, member.weight, KEYS[index])


def test_unknown_and_duplicate_keys_are_rejected() -> None:
    table = _table(MEMBERS)
    with pytest.raises(InvalidInputError):
        table.replicas_for("nope/0")
    with pytest.raises(InvalidInputError):
        AssignmentTable.build(["a/0", "a/0"], MEMBERS, 3)
    with pytest.raises(InvalidInputError):
        AssignmentTable.build(KEYS, [*MEMBERS, MEMBERS[0]], 3)
    with pytest.raises(InvalidInputError):
        AssignmentTable.build(KEYS, MEMBERS, 0)


def test_join_moves_only_to_the_joiner() -> None:
    table = _table(MEMBERS)
    joiner = PlacementMember("node-new", 2.0, "zone-1")
    joined = table.with_member(joiner)
    moves = diff(table, joined)
    assert moves
    for move in moves:
        assert move.added == ("node-new",)
        assert len(move.removed) == 1
        assert move.leader_changed == (move.replicas_after[0] == "node-new")
    assert joined.replica_sets == _table([*MEMBERS, joiner]).replica_sets


def test_leave_moves_only_away_from_the_leaver() -> None:
    table = _table(MEMBERS)
    left = table.without_member("node-4")
    moves = diff(table, left)
    assert len(moves) == table.replica_counts()["node-4"]
    for move in moves:
        assert move.removed == ("node-4",)
        assert len(move.added) == 1
    assert "node-4" not in left.members
    assert left.replica_sets == _table([m for m in MEMBERS if m.node_id != "node-4"]).replica_sets


def test_drain_moves_every_replica_away_and_undrain_restores() -> None:
    table = _table(MEMBERS)
    drained_member = PlacementMember("node-2", 0.0, "zone-2")
    drained = table.with_member(drained_member)
    assert drained.replica_counts()["node-2"] == 0
    assert drained.members["node-2"] == drained_member
    restored = drained.with_member(MEMBERS[2])
    assert restored.replica_sets == table.replica_sets
    assert diff(table, restored) == ()


def test_with_members_reconciles_a_whole_list() -> None:
    table = _table(MEMBERS)
    target = [
        *MEMBERS[:3],
        PlacementMember("node-3", 5.0, "zone-3"),
        PlacementMember("node-4", 1.0, "zone-0", alive=False),
        *MEMBERS[6:],
        PlacementMember("node-x", 1.0, "zone-9"),
    ]
    assert table.with_members(target).replica_sets == _table(target).replica_sets
    with pytest.raises(InvalidInputError):
        table.with_members([MEMBERS[0], MEMBERS[0]])


def test_zone_change_alone_reuses_scores_and_matches_rebuild() -> None:
    table = _table(MEMBERS)
    moved = PlacementMember("node-5", MEMBERS[5].weight, "zone-0")
    updated = table.with_member(moved)
    target = [moved if m.node_id == "node-5" else m for m in MEMBERS]
    assert updated.replica_sets == _table(target).replica_sets


def test_no_eligible_members_then_one_joins() -> None:
    empty = AssignmentTable.build(KEYS, [PlacementMember("d", 0.0)], 3)
    assert all(chosen == () for chosen in empty.replica_sets)
    assert empty.leader_for(KEYS[0]) is None
    one = empty.with_member(PlacementMember("a"))
    assert all(chosen == ("a",) for chosen in one.replica_sets)
    assert all(move.leader_after == "a" and move.leader_before is None for move in diff(empty, one))


def test_diff_over_different_partition_lists() -> None:
    small = AssignmentTable.build(KEYS[:5], MEMBERS, 3)
    large = AssignmentTable.build(KEYS[3:8], MEMBERS, 3)
    moves = diff(small, large)
    assert [move.partition_key for move in moves] == [*KEYS[:3], *KEYS[5:8]]
    assert moves[0].replicas_after == ()
    assert moves[0].removed == moves[0].replicas_before
    assert moves[-1].replicas_before == ()
    assert moves[-1].added == moves[-1].replicas_after


def test_removing_an_absent_member_is_a_no_op() -> None:
    table = _table(MEMBERS)
    assert table.without_member("ghost").replica_sets == table.replica_sets
    assert table.with_member(MEMBERS[0]).replica_sets == table.replica_sets


def test_join_into_a_new_zone_enters_even_below_the_floor() -> None:
    # Regression (found by the property test): two members of zone "a" hold every
    # partition; a weak joiner in a new zone must still take one slot everywhere.
    members = [PlacementMember("a1", 1.0, "a"), PlacementMember("a2", 1.0, "a")]
    table = AssignmentTable.build(KEYS, members, 2)
    joiner = PlacementMember("b1", 0.001, "b")
    joined = table.with_member(joiner)
    assert all("b1" in chosen for chosen in joined.replica_sets)
    assert joined.replica_sets == AssignmentTable.build(KEYS, [*members, joiner], 2).replica_sets
