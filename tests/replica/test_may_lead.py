"""A node that may not lead (its disk is full: ``NodeLiveness.may_lead``) neither
campaigns nor takes a leadership handed to it, and still votes and follows."""

from __future__ import annotations

import random

from laminar.replica.core import NodeLiveness, ReplicaCore
from laminar.replica.types import Acks, NodeId, Role
from laminar.segment.memory import MemoryLog
from tests.replica.test_core import CONFIG, GROUP, Group, _batch


class Disk(NodeLiveness):
    def __init__(self) -> None:
        self.full = False

    def may_lead(self) -> bool:
        return not self.full


def group_with_disks() -> tuple[Group, dict[NodeId, Disk]]:
    group = Group()  # its cores, rebuilt with a liveness each on fresh logs
    disks = {node: Disk() for node in GROUP.voters}
    group.storages = {node: MemoryLog(fsync=False) for node in GROUP.voters}
    group.cores = {
        node: ReplicaCore(
            node,
            group.storages[node],
            CONFIG,
            now_ms=0,
            rng=random.Random(node),
            initial=GROUP,
            liveness=disks[node],
        )
        for node in GROUP.voters
    }
    return group, disks


A, B, C = GROUP.voters


def test_replicas_on_full_nodes_do_not_campaign_and_do_once_space_returns() -> None:
    group, disks = group_with_disks()
    group.elect(A)
    disks[B].full = disks[C].full = True
    # A is cut off: its followers' election timeouts pass many times over.
    group.advance_time(10 * CONFIG.election_timeout_max_ms, drop_to={A})
    assert group.cores[B].role is Role.FOLLOWER and group.cores[C].role is Role.FOLLOWER
    assert group.cores[B].term == group.cores[C].term == group.cores[A].term
    disks[B].full = False
    group.advance_time(3 * CONFIG.election_timeout_max_ms, drop_to={A})
    assert group.cores[B].role is Role.LEADER


def test_a_full_node_ignores_a_handed_leadership_but_votes_and_follows() -> None:
    group, disks = group_with_disks()
    group.elect(A)
    disks[B].full = True
    assert group.cores[A].transfer_leadership(B, group.now)
    group.deliver_all()
    assert group.cores[A].role is Role.LEADER and group.cores[B].role is Role.FOLLOWER
    group.advance_time(CONFIG.transfer_timeout_ms + 100)  # the transfer is abandoned
    leader = group.cores[A]
    assert leader.role is Role.LEADER and leader.transferring_to is None
    leader.propose(1, _batch(b"x"), Acks.ALL, group.now)
    group.advance_time(100)
    assert group.cores[B].high_watermark == leader.high_watermark == leader.end_offset
    # B still votes: with A cut off, C campaigns and wins with B's vote.
    group.advance_time(3 * CONFIG.election_timeout_max_ms, drop_to={A})
    assert group.cores[C].role is Role.LEADER and group.cores[B].leader == C
