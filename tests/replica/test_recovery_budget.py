"""A leader sends a replica catching up as a learner no more than the node's
recovery budget allows (``NodeLiveness.recovery_grant``), and the rest once the
budget refills; voters in step are not held back."""

from __future__ import annotations

import os
import random

from laminar.records import iter_batches
from laminar.replica.core import NodeLiveness, ReplicaCore
from laminar.replica.messages import AppendRequest
from laminar.replica.types import Acks, NodeId
from laminar.segment.memory import MemoryLog
from tests.replica.test_core import CONFIG, GROUP, Group, _batch

A, B, C = GROUP.voters
D = NodeId("d")
VALUE_BYTES = 10_000


class Budget(NodeLiveness):
    def __init__(self) -> None:
        self.tokens = 1 << 62
        self.spent = 0

    def recovery_grant(self) -> int:
        return max(0, self.tokens)

    def recovery_spend(self, count: int) -> None:
        self.tokens -= count
        self.spent += count


def group_with_budget() -> tuple[Group, Budget]:
    """The three voters, the leader-to-be ``A`` with a budget, and a fourth core ``D``
    with an empty log, not in the group yet."""
    group = Group()  # its cores, rebuilt on fresh logs, A's with the budget
    budget = Budget()
    group.storages = {node: MemoryLog(fsync=False) for node in GROUP.voters}
    group.cores = {
        node: ReplicaCore(
            node,
            group.storages[node],
            CONFIG,
            now_ms=0,
            rng=random.Random(node),
            initial=GROUP,
            liveness=budget if node == A else None,
        )
        for node in GROUP.voters
    }
    group.storages[D] = MemoryLog(fsync=False)
    group.cores[D] = ReplicaCore(D, group.storages[D], CONFIG, now_ms=0, rng=random.Random(D))
    group.replies[D] = []
    return group, budget


def appended_bytes_to(group: Group, peer: NodeId) -> int:
    return sum(
        len(message.message.batches)
        for ready in group.readies
        for message in ready.messages + ready.early_messages
        if message.destination == peer and isinstance(message.message, AppendRequest)
    )


def test_a_learner_catches_up_within_the_budget_and_voters_are_not_held_back() -> None:
    group, budget = group_with_budget()
    group.elect(A)
    leader = group.cores[A]
    for number in range(40):
        leader.propose(number, _batch(os.urandom(VALUE_BYTES)), Acks.ALL, group.now)
    group.deliver_all()
    assert group.cores[B].end_offset == group.cores[C].end_offset == leader.end_offset
    assert budget.spent == 0  # voters in step are not charged
    largest = max(h.length for _, h in iter_batches(group.storages[A].read(0, 1 << 30)))

    budget.tokens = 3 * VALUE_BYTES
    leader.set_target((A, B, C, D), group.now)
    group.advance_time(CONFIG.reconfigure_stable_ms + 200)
    group.deliver_all()
    assert D in leader.group_config.learners  # type: ignore[union-attr]
    sent = appended_bytes_to(group, D)
    assert 0 < sent <= 3 * VALUE_BYTES + largest  # the grant, and at most one batch over
    assert group.cores[D].end_offset < leader.end_offset
    group.advance_time(5 * CONFIG.heartbeat_interval_ms)  # no budget: nothing more
    group.deliver_all()
    assert appended_bytes_to(group, D) == sent

    # Writes to the voters go on meanwhile, at full speed.
    leader.propose(99, _batch(b"during"), Acks.ALL, group.now)
    group.deliver_all()
    assert leader.high_watermark == leader.end_offset  # committed by A, B and C

    budget.tokens = 1 << 62  # refilled: the learner catches up and becomes a voter
    group.advance_time(CONFIG.reconfigure_stable_ms + 10 * CONFIG.heartbeat_interval_ms)
    group.deliver_all()
    assert group.cores[D].end_offset >= leader.high_watermark
    assert D in leader.group_config.voters  # type: ignore[union-attr]
