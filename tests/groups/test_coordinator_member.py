"""The coordinator's heartbeat handling and the member's decisions, wired in memory."""

from __future__ import annotations

from dataclasses import replace

import pytest

from laminar.errors import FencedMemberError
from laminar.groups.coordinator import PREPARE_ROUNDS_MAX, Coordinator, HeartbeatAnswer
from laminar.groups.entries import Leave, LeaveReason, Subscription
from laminar.groups.member import GroupMember, MemberActions
from laminar.groups.state import GroupState, Outcome

SUB = Subscription(("t",))
CATALOGUE = {"t": 6, "other": 3}
SESSION_MS = 3000
REBALANCE_MS = 2000


class Harness:
    """A coordinator, its state and members, with the shell's loop in memory."""

    def __init__(self) -> None:
        self.state = GroupState()
        self.coordinator = Coordinator(self.state, 0)
        self.log: list[object] = []

    def member(self, member_id: str, instance_id: str | None = None) -> GroupMember:
        return GroupMember(
            "g",
            member_id,
            SUB,
            instance_id=instance_id,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
        )

    def heartbeat(self, member: GroupMember, now_ms: int) -> tuple[HeartbeatAnswer, MemberActions]:
        request = member.request()
        for _ in range(PREPARE_ROUNDS_MAX):
            entries = self.coordinator.prepare(request, now_ms, CATALOGUE)
            if not entries:
                break
            for entry in entries:
                self.log.append(entry)
                self.state.apply(entry)
        answer = self.coordinator.answer(request)
        return answer, member.on_answer(answer, sent_ms=now_ms)

    def tick(self, now_ms: int) -> list[object]:
        entries = self.coordinator.tick(now_ms, CATALOGUE)
        for entry in entries:
            self.log.append(entry)
            self.state.apply(entry)
        return list(entries)


def test_first_member_gets_everything_in_one_heartbeat() -> None:
    harness = Harness()
    member = harness.member("m1")
    answer, actions = harness.heartbeat(member, 0)
    assert not answer.fenced and answer.member_epoch == 1
    assert answer.partition_counts == (("t", 6),)  # "other" is not subscribed
    assert [tp for tp, _, _ in actions.start] == [("t", i) for i in range(6)]
    assert all(committed is None for _, _, committed in actions.start)


def test_join_moves_partitions_only_after_release() -> None:
    harness = Harness()
    first, second = harness.member("m1"), harness.member("m2")
    harness.heartbeat(first, 0)
    _, actions = harness.heartbeat(second, 100)
    assert actions.start == ()  # all still owned by m1
    _, actions = harness.heartbeat(first, 200)
    assert len(actions.revoke) == 3
    for tp in actions.revoke:
        harness.state.apply(first.commit(tp, 42))  # the final commit in the hook
        first.revoked(tp)
    harness.heartbeat(first, 300)  # reports the releases
    harness.tick(300)  # hands them to m2
    _, actions = harness.heartbeat(second, 400)
    assert sorted(tp for tp, _, _ in actions.start) == sorted(
        actions_revoked := actions_tps(actions)
    )
    assert {committed for _, _, committed in actions.start} == {42}
    assert len(actions_revoked) == 3


def actions_tps(actions: MemberActions) -> list[tuple[str, int]]:
    return [tp for tp, _, _ in actions.start]


def test_expiry_then_zombie_commit_is_fenced_and_rejoins() -> None:
    harness = Harness()
    zombie, other = harness.member("m1"), harness.member("m2")
    harness.heartbeat(zombie, 0)
    tp = next(iter(zombie.active))
    harness.state.apply(zombie.commit(tp, 10))
    harness.heartbeat(other, 100)
    # m1 pauses; m2 keeps heartbeating; m1 expires after the session timeout.
    for now_ms in range(200, SESSION_MS + 400, 200):
        harness.heartbeat(other, now_ms)
        harness.tick(now_ms)
    assert "m1" not in harness.state.groups["g"].members
    # Fenced first when the rebalance timeout (m1 never released what moved to m2)
    # is shorter than the session timeout; expired otherwise.
    assert any(isinstance(entry, Leave) and entry.member_id == "m1" for entry in harness.log)
    result = harness.state.apply(zombie.commit(tp, 99))
    assert result.outcome is Outcome.FENCED
    harness.heartbeat(other, SESSION_MS + 400)
    assert harness.state.groups["g"].commits[tp].next_offset == 10
    answer, actions = harness.heartbeat(zombie, SESSION_MS + 500)
    assert answer.fenced and actions.rejoin and tp in actions.lost
    assert zombie.member_epoch == 0 and not zombie.active
    with pytest.raises(FencedMemberError):
        zombie.commit(tp, 100)
    answer, _ = harness.heartbeat(zombie, SESSION_MS + 600)
    assert not answer.fenced and answer.member_epoch > 0


def test_owner_that_never_releases_is_fenced_after_rebalance_timeout() -> None:
    harness = Harness()
    stubborn, newcomer = harness.member("m1"), harness.member("m2")
    harness.heartbeat(stubborn, 0)
    harness.heartbeat(newcomer, 0)
    now_ms = 0
    while "m1" in harness.state.groups["g"].members and now_ms < 10_000:
        now_ms += 100
        harness.heartbeat(newcomer, now_ms)
        request = stubborn.request()  # heartbeats but never releases
        harness.coordinator.prepare(request, now_ms, CATALOGUE)
        harness.tick(now_ms)
    assert Leave("g", "m1", LeaveReason.FENCED) in harness.log
    assert REBALANCE_MS < now_ms <= REBALANCE_MS + 200


def test_new_coordinator_gives_everyone_a_fresh_session() -> None:
    harness = Harness()
    member = harness.member("m1")
    harness.heartbeat(member, 0)
    rebuilt = GroupState()
    for entry in harness.log:
        rebuilt.apply(entry)  # type: ignore[arg-type]
    # The new leader starts long after the last heartbeat it could have seen.
    coordinator = Coordinator(rebuilt, 10 * SESSION_MS)
    assert coordinator.tick(10 * SESSION_MS + SESSION_MS - 1, CATALOGUE) == []
    expired = coordinator.tick(11 * SESSION_MS + 1, CATALOGUE)
    assert expired == [Leave("g", "m1", LeaveReason.EXPIRED)]


def test_static_member_restart_keeps_its_partitions() -> None:
    harness = Harness()
    old, other = harness.member("a-1", instance_id="a"), harness.member("b-1", instance_id="b")
    harness.heartbeat(old, 0)
    harness.heartbeat(other, 0)
    for now_ms in (100, 200, 300):
        for member in (old, other):
            _, actions = harness.heartbeat(member, now_ms)
            for tp in actions.revoke:
                member.revoked(tp)
        harness.tick(now_ms)
    before = dict(old.active)
    restarted = harness.member("a-2", instance_id="a")
    _, actions = harness.heartbeat(restarted, 400)
    assert sorted(tp for tp, _, _ in actions.start) == sorted(before)
    assert all(epoch == before[tp] + 1 for tp, epoch, _ in actions.start)
    assert other.active and not set(other.active) & set(before)


def test_describe_host_is_remembered_and_forgotten_with_the_member() -> None:
    harness = Harness()
    member = harness.member("m1")
    request = replace(member.request(), host="127.0.0.1:5000")
    for entry in harness.coordinator.prepare(request, 0, CATALOGUE):
        harness.state.apply(entry)
    assert harness.coordinator.host_of("g", "m1") == "127.0.0.1:5000"
    harness.tick(SESSION_MS + 1)  # expires
    harness.tick(SESSION_MS + 2)
    assert "m1" not in harness.state.groups["g"].members
    assert harness.coordinator.host_of("g", "m1") == ""


def test_the_answer_carries_the_members_target() -> None:
    harness = Harness()
    first, second = harness.member("m1"), harness.member("m2")
    harness.heartbeat(first, 0)
    answer, _ = harness.heartbeat(second, 1)
    assert set(answer.assigned) == set(harness.state.groups["g"].target_of("m2"))
    assert len(answer.assigned) == 3
