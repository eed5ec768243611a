"""Adding partitions to a consumed topic (issue 34): the group's target moves only
what it must, and the coordinator picks the new partitions up from the catalogue
at the next heartbeat, for topic and pattern subscriptions alike."""

from __future__ import annotations

import random

import pytest

from laminar.groups.assignment import AssignmentMember, target_assignment
from laminar.groups.coordinator import PREPARE_ROUNDS_MAX, Coordinator
from laminar.groups.entries import Subscription
from laminar.groups.member import GroupMember, MemberActions
from laminar.groups.state import GroupState


def _grow(seed: int, *, equal: bool, k_multiple: bool) -> tuple[int, int, int, int]:
    """One random group going from P to P + k partitions: (members, k, partitions
    changing member (the new ones included), old partitions changing member)."""
    rng = random.Random(seed)
    count = rng.randint(1, 8)
    weights = [1.0] * count if equal else [rng.choice([0.5, 1.0, 2.0, 3.0]) for _ in range(count)]
    members = [AssignmentMember(f"m{i}-{rng.randrange(10**6)}", w) for i, w in enumerate(weights)]
    old = rng.randint(1, 40)
    added = count * rng.randint(1, 4) if k_multiple else rng.randint(1, 20)
    group = f"g{seed}"
    before = target_assignment(group, members, [("t", i) for i in range(old)])
    after = target_assignment(
        group, members, [("t", i) for i in range(old + added)], previous=before
    )
    moved = sum(1 for tp, key in after.items() if before.get(tp) != key)
    old_moved = sum(1 for tp, key in before.items() if after[tp] != key)
    return count, added, moved, old_moved


@pytest.mark.parametrize("equal", [True, False])
def test_adding_k_partitions_moves_at_most_k_plus_members(equal: bool) -> None:
    for seed in range(400):
        count, added, moved, _ = _grow(seed, equal=equal, k_multiple=False)
        assert moved <= added + count, (seed, count, added, moved)


def test_no_old_partition_moves_when_the_caps_allow() -> None:
    """Equal weights and k a multiple of the members: every member's cap grows by
    k / members, so the new partitions fit around the old ones."""
    for seed in range(400):
        _, _, moved, old_moved = _grow(seed, equal=True, k_multiple=True)
        assert old_moved == 0, seed
        assert moved > 0


def _heartbeat(
    state: GroupState,
    coordinator: Coordinator,
    member: GroupMember,
    now_ms: int,
    catalogue: dict[str, int],
) -> MemberActions:
    request = member.request()
    for _ in range(PREPARE_ROUNDS_MAX):
        entries = coordinator.prepare(request, now_ms, catalogue)
        if not entries:
            break
        for entry in entries:
            state.apply(entry)
    return member.on_answer(coordinator.answer(request), sent_ms=now_ms)


@pytest.mark.parametrize(
    "subscription", [Subscription(("t",)), Subscription(pattern="t|u")], ids=["topic", "pattern"]
)
def test_members_pick_up_added_partitions_at_the_next_heartbeat(
    subscription: Subscription,
) -> None:
    """The coordinator resolves the subscription against the catalogue it is given
    at every heartbeat (nothing cached): once its node applied 4 -> 6, the next
    heartbeats hand out t/4 and t/5 and revoke nothing (2 members, k = 2)."""
    state = GroupState()
    coordinator = Coordinator(state, 0)
    members = [GroupMember("g", f"m{i}", subscription, session_timeout_ms=30_000) for i in range(2)]
    catalogue = {"t": 4, "other": 2}
    owned: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    now_ms = 0
    for _ in range(6):  # join, settle the hand-offs
        for member in members:
            now_ms += 100
            actions = _heartbeat(state, coordinator, member, now_ms, catalogue)
            for tp in actions.revoke:
                member.revoked(tp)
                owned[member.member_id].discard(tp)
            owned[member.member_id].update(tp for tp, _, _ in actions.start)
    assert sorted(tp for tps in owned.values() for tp in tps) == [("t", i) for i in range(4)]
    before = {member_id: set(tps) for member_id, tps in owned.items()}

    catalogue["t"] = 6
    started: list[tuple[str, int]] = []
    for member in members:
        now_ms += 100
        actions = _heartbeat(state, coordinator, member, now_ms, catalogue)
        assert actions.revoke == ()
        started += [tp for tp, _, _ in actions.start]
    assert sorted(started) == [("t", 4), ("t", 5)]  # within one heartbeat of each member
    group = state.group("g")
    assert group is not None and group.partition_counts == {"t": 6}
    for member_id, tps in before.items():
        assert tps <= set(group.owned_by(member_id))  # the old partitions stayed
