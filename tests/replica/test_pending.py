"""Tests of the leader's acks=all requests waiting for the commit (replica.pending)."""

from __future__ import annotations

from laminar.replica.messages import ProduceReply, ProduceStatus
from laminar.replica.pending import PendingWrites
from laminar.replica.types import NodeId


def test_answered_in_offset_order_as_the_commit_passes() -> None:
    pending = PendingWrites()
    pending.add(30, request_id=3, base_offset=20, status=ProduceStatus.OK)
    pending.add(10, request_id=1, base_offset=0, status=ProduceStatus.OK)
    pending.add(20, request_id=2, base_offset=10, status=ProduceStatus.DUPLICATE)
    replies: list[ProduceReply] = []
    pending.committed(19, replies)
    assert replies == [ProduceReply(1, ProduceStatus.OK, base_offset=0)]
    pending.committed(30, replies)
    assert [r.request_id for r in replies] == [1, 2, 3]
    assert replies[1].status is ProduceStatus.DUPLICATE and replies[1].base_offset == 10
    assert len(pending) == 0


def test_abandoned_requests_are_told_not_leader() -> None:
    pending = PendingWrites()
    pending.add(10, request_id=1, base_offset=0, status=ProduceStatus.OK)
    pending.add(20, request_id=2, base_offset=10, status=ProduceStatus.OK)
    replies: list[ProduceReply] = []
    pending.abandon(NodeId("b"), replies)
    assert sorted(r.request_id for r in replies) == [1, 2]
    assert all(
        r.status is ProduceStatus.NOT_LEADER and r.leader_hint == "b" and r.base_offset < 0
        for r in replies
    )
    assert not pending
    pending.committed(100, replies)
    assert len(replies) == 2
