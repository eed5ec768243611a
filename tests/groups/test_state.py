"""Apply-time validation of GroupState: ownership, fencing, commits, admin entries."""

from __future__ import annotations

import pytest

from laminar.errors import InvalidInputError
from laminar.groups.entries import (
    Commit,
    Delete,
    Join,
    Leave,
    LeaveReason,
    Own,
    Partitions,
    Release,
    Reset,
    Subscription,
)
from laminar.groups.state import Committed, GroupState, Outcome, Ownership

SUB = Subscription(("t",))


def _group_of_two() -> GroupState:
    state = GroupState()
    assert state.apply(Join("g", "m1", SUB)).applied
    assert state.apply(Join("g", "m2", SUB)).applied
    assert state.apply(Partitions("g", (("t", 4),))).applied
    return state


def _owner_of(state: GroupState, member_id: str) -> tuple[str, int]:
    group = state.groups["g"]
    return group.target_of(member_id)[0]


def test_join_and_leave_bump_the_group_epoch_and_set_member_epochs() -> None:
    state = _group_of_two()
    group = state.groups["g"]
    assert [m.member_epoch for m in group.members.values()] == [1, 2]
    assert group.group_epoch == 3  # two joins and a partitions change
    assert state.apply(Join("g", "m1", SUB)).outcome is Outcome.DUPLICATE
    assert state.apply(Leave("g", "m2", LeaveReason.LEFT)).applied
    assert group.group_epoch == 4
    assert state.apply(Leave("g", "m2", LeaveReason.LEFT)).outcome is Outcome.UNKNOWN_MEMBER


def test_own_only_for_the_target_free_partition_at_the_next_epoch() -> None:
    state = _group_of_two()
    group = state.groups["g"]
    tp = _owner_of(state, "m1")
    other = "m2"
    assert state.apply(Own("g", *tp, other, 1)).outcome is Outcome.NOT_TARGET
    assert state.apply(Own("g", *tp, "m1", 2)).outcome is Outcome.STALE_EPOCH
    assert state.apply(Own("g", *tp, "ghost", 1)).outcome is Outcome.FENCED
    assert state.apply(Own("g", "t", 9, "m1", 1)).outcome is Outcome.NOT_TARGET
    assert state.apply(Own("g", *tp, "m1", 1)).applied
    assert state.apply(Own("g", *tp, "m1", 1)).outcome is Outcome.DUPLICATE
    assert group.owners[tp] == Ownership("m1", 1)
    # After m1 leaves, m2 is the target; the epoch continues from the last one.
    state.apply(Leave("g", "m1", LeaveReason.EXPIRED))
    assert tp not in group.owners
    assert state.apply(Own("g", *tp, "m2", 1)).outcome is Outcome.STALE_EPOCH
    assert state.apply(Own("g", *tp, "m2", 2)).applied


def test_release_only_by_the_owner_at_its_epoch() -> None:
    state = _group_of_two()
    tp = _owner_of(state, "m1")
    state.apply(Own("g", *tp, "m1", 1))
    assert state.apply(Release("g", *tp, "m2", 1)).outcome is Outcome.FENCED
    assert state.apply(Release("g", *tp, "m1", 2)).outcome is Outcome.FENCED
    assert state.apply(Release("g", *tp, "m1", 1)).applied
    assert state.apply(Release("g", *tp, "m1", 1)).outcome is Outcome.FENCED


def test_commit_only_by_the_owner_and_never_backwards() -> None:
    state = _group_of_two()
    group = state.groups["g"]
    tp = _owner_of(state, "m1")
    state.apply(Own("g", *tp, "m1", 1))
    assert state.apply(Commit("g", *tp, 10, "m1", 1, 1, "x")).applied
    assert state.apply(Commit("g", *tp, 9, "m1", 1, 1)).outcome is Outcome.OFFSET_BEHIND
    assert state.apply(Commit("g", *tp, 20, "m2", 2, 1)).outcome is Outcome.FENCED
    assert state.apply(Commit("g", *tp, 20, "m1", 2, 1)).outcome is Outcome.FENCED
    assert state.apply(Commit("g", *tp, 20, "m1", 1, 2)).outcome is Outcome.FENCED
    assert group.commits[tp] == Committed(10, "x")
    # A paused member expires, then commits: fenced, nothing overwritten.
    state.apply(Leave("g", "m1", LeaveReason.EXPIRED))
    assert state.apply(Commit("g", *tp, 30, "m1", 1, 1)).outcome is Outcome.FENCED
    assert group.commits[tp] == Committed(10, "x")


def test_static_member_rejoin_replaces_the_old_incarnation() -> None:
    state = GroupState()
    state.apply(Join("g", "old", SUB, instance_id="i"))
    state.apply(Partitions("g", (("t", 2),)))
    group = state.groups["g"]
    state.apply(Own("g", "t", 0, "old", 1))
    result = state.apply(Join("g", "new", SUB, instance_id="i"))
    assert result.applied and result.replaced == "old"
    assert list(group.members) == ["new"] and group.owners == {}
    assert group.target_of("new") == [("t", 0), ("t", 1)]
    assert state.apply(Commit("g", "t", 0, 5, "old", 1, 1)).outcome is Outcome.FENCED


def test_join_with_another_subscription_is_refused() -> None:
    state = _group_of_two()
    result = state.apply(Join("g", "m3", Subscription(("u",))))
    assert result.outcome is Outcome.SUBSCRIPTION_MISMATCH


def test_reset_and_delete_only_when_empty() -> None:
    state = _group_of_two()
    tp = _owner_of(state, "m1")
    state.apply(Own("g", *tp, "m1", 1))
    state.apply(Commit("g", *tp, 50, "m1", 1, 1))
    assert state.apply(Reset("g", ((*tp, 3),))).outcome is Outcome.NOT_EMPTY
    assert state.apply(Delete("g")).outcome is Outcome.NOT_EMPTY
    state.apply(Leave("g", "m1", LeaveReason.LEFT))
    state.apply(Leave("g", "m2", LeaveReason.LEFT))
    assert state.apply(Reset("g", ((*tp, 3),))).applied
    assert state.groups["g"].commits[tp].next_offset == 3
    assert state.apply(Delete("g")).applied
    assert state.group("g") is None
    assert state.apply(Delete("g")).outcome is Outcome.UNKNOWN_GROUP


def test_partitions_entry_drops_owners_of_vanished_topics() -> None:
    state = GroupState()
    state.apply(Join("g", "m1", Subscription(pattern="t.*")))
    state.apply(Partitions("g", (("t1", 1), ("t2", 1))))
    state.apply(Own("g", "t1", 0, "m1", 1))
    state.apply(Own("g", "t2", 0, "m1", 1))
    assert state.apply(Partitions("g", (("t1", 1), ("t2", 1)))).outcome is Outcome.DUPLICATE
    assert state.apply(Partitions("g", (("t2", 2),))).applied
    assert list(state.groups["g"].owners) == [("t2", 0)]


def test_snapshot_restore_round_trip() -> None:
    state = _group_of_two()
    tp = _owner_of(state, "m1")
    state.apply(Own("g", *tp, "m1", 1))
    state.apply(Commit("g", *tp, 7, "m1", 1, 1, "meta"))
    restored = GroupState.restore(state.snapshot())
    assert restored.snapshot() == state.snapshot()
    assert restored.groups["g"].target() == state.groups["g"].target()
    with pytest.raises(InvalidInputError):
        GroupState.restore({"v": 1, "applied_count": 0, "groups": [{"group_id": "g"}]})
    with pytest.raises(InvalidInputError):
        GroupState.restore({"v": 99})


def test_target_is_sticky_state_replayed_identically() -> None:
    """A join moves only the joiner's share, and a replica replaying the same
    entries reaches the same target (it is recomputed at every epoch)."""
    entries = [
        Join("g", "m1", SUB),
        Join("g", "m2", SUB),
        Join("g", "m3", SUB),
        Partitions("g", (("t", 60),)),
    ]
    state = GroupState()
    for entry in entries:
        state.apply(entry)
    before = dict(state.groups["g"].target())
    state.apply(Join("g", "m4", SUB))
    after = state.groups["g"].target()
    moved = [tp for tp in after if before[tp] != after[tp]]
    assert len(moved) == 15 and all(after[tp] == "m4" for tp in moved)
    replica = GroupState()
    for entry in [*entries, Join("g", "m4", SUB)]:
        replica.apply(entry)
    assert replica.groups["g"].target() == after
    # The sticky target differs from a fresh computation over the same members:
    # it is history, so the snapshot carries it.
    restored = GroupState.restore(state.snapshot())
    assert restored.groups["g"].target() == after
