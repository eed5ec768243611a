"""The member's lease and how a client carries out its actions (sans-IO)."""

from __future__ import annotations

from laminar.groups.coordinator import HeartbeatAnswer
from laminar.groups.entries import Subscription
from laminar.groups.member import (
    CommitNow,
    GroupMember,
    MemberActions,
    Notify,
    Read,
    Released,
    handover_steps,
)

SESSION_MS = 3000
A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


def member() -> GroupMember:
    return GroupMember("g", "m1", Subscription(("a",)), session_timeout_ms=SESSION_MS)


def answer(owned: dict[tuple[str, int], int], target: list[tuple[str, int]]) -> HeartbeatAnswer:
    return HeartbeatAnswer(
        "g",
        "m1",
        fenced=False,
        group_epoch=1,
        member_epoch=1,
        owned=tuple((t, p, e) for (t, p), e in owned.items()),
        assigned=tuple(target),
    )


def test_the_lease_runs_from_the_send_time_of_the_last_acknowledged_heartbeat() -> None:
    m = member()
    assert m.lease_deadline_ms is None and not m.lease_lapsed(10**9)  # holds nothing
    m.on_answer(answer({A0: 1}, [A0]), sent_ms=1_000)
    assert m.lease_deadline_ms == 1_000 + SESSION_MS
    assert not m.lease_lapsed(3_999)
    assert m.lease_lapsed(4_000)
    m.on_answer(answer({A0: 1}, [A0]), sent_ms=2_000)
    assert m.lease_deadline_ms == 5_000
    # A late answer to an older heartbeat never shortens (or stretches) it.
    m.on_answer(answer({A0: 1}, [A0]), sent_ms=1_500)
    assert m.lease_deadline_ms == 5_000


def test_a_lapsed_lease_loses_everything_held_and_rejoins() -> None:
    m = member()
    m.on_answer(answer({A0: 1, A1: 1}, [A0]), sent_ms=0)  # A1 moved: revoking
    assert m.holds() == {A0} and A1 in m.released  # never started: released at once
    m.on_answer(answer({A0: 1, A2: 2}, [A0, A2]), sent_ms=0)
    assert m.lease_lapsed(SESSION_MS)
    actions = m.lose()
    assert actions == MemberActions(lost=(A0, A2), rejoin=True)
    assert m.member_epoch == 0 and m.lease_deadline_ms is None and not m.holds()
    assert not m.lease_lapsed(10 * SESSION_MS)  # nothing left to lose
    assert m.request().member_epoch == 0  # the next heartbeat joins again


def test_a_revocation_commits_announces_stops_then_releases() -> None:
    steps = handover_steps(MemberActions(revoke=(A1,)), {A0, A1}, auto_commit=True)
    assert steps == [
        CommitNow(),
        Notify("revoked", (A1,)),  # still read: the hook may commit
        Read({A0: None}),
        Released((A1,)),
    ]
    manual = handover_steps(MemberActions(revoke=(A1,)), {A0, A1}, auto_commit=False)
    assert CommitNow() not in manual


def test_lost_partitions_are_dropped_before_the_hook_and_announced_once() -> None:
    steps = handover_steps(MemberActions(lost=(A0, A2)), {A0, A1}, auto_commit=True)
    assert steps == [Read({A1: None}), Notify("lost", (A0,))]  # A2 was never read
    assert handover_steps(MemberActions(lost=(A2,)), {A0}, auto_commit=True) == []


def test_a_fence_loses_everything_read() -> None:
    steps = handover_steps(MemberActions(lost=(A0,), rejoin=True), {A0, A1}, auto_commit=True)
    assert steps == [Read({}), Notify("lost", (A0, A1))]


def test_starts_read_from_the_committed_offset_then_announce() -> None:
    actions = MemberActions(start=((A1, 3, 42), (A2, 1, None)))
    steps = handover_steps(actions, {A0}, auto_commit=True)
    assert steps == [Read({A0: None, A1: 42, A2: None}), Notify("assigned", (A1, A2))]


def test_one_outcome_in_order_lost_revoked_assigned() -> None:
    actions = MemberActions(start=((A2, 1, 7),), revoke=(A1,), lost=(A0,))
    hooks = [
        s.hook
        for s in handover_steps(actions, {A0, A1}, auto_commit=False)
        if isinstance(s, Notify)
    ]
    assert hooks == ["lost", "revoked", "assigned"]
