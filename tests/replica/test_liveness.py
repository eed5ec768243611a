"""Tests of what a core decides from its node's liveness (laminar.replica.liveness)."""

from __future__ import annotations

from laminar.replica.liveness import (
    GROUP_SILENCE_MAX_TIMEOUTS,
    SLOWNESS_STRETCH_MAX,
    NodeLiveness,
    leader_presumed_alive,
    stretched_ms,
)
from laminar.replica.types import NEVER_MS, NodeId

LEADER = NodeId("b")
MIN_MS, MAX_MS = 150, 300


class _Node(NodeLiveness):
    def __init__(self, heard_ms: int, slowness: float = 1.0) -> None:
        self.heard_ms = heard_ms
        self.slow = slowness

    def peer_heard_ms(self, peer: NodeId) -> int:
        return self.heard_ms if peer == LEADER else NEVER_MS

    def slowness(self) -> float:
        return self.slow


def _alive(liveness: NodeLiveness, now_ms: int, leader_heard_ms: int) -> bool:
    return leader_presumed_alive(
        liveness,
        LEADER,
        now_ms=now_ms,
        leader_heard_ms=leader_heard_ms,
        election_timeout_min_ms=MIN_MS,
        election_timeout_max_ms=MAX_MS,
    )


def test_stretch() -> None:
    assert stretched_ms(200, 1.0) == 200
    assert stretched_ms(200, 2.5) == 500
    assert stretched_ms(200, 100.0) == int(200 * SLOWNESS_STRETCH_MAX)


def test_leader_presumed_alive_while_its_node_talks() -> None:
    now = 10_000
    assert _alive(_Node(heard_ms=now - MIN_MS + 1), now, leader_heard_ms=now - 1_000)
    assert not _alive(_Node(heard_ms=now - MIN_MS), now, leader_heard_ms=now - 1_000)
    assert not _alive(NodeLiveness(), now, leader_heard_ms=now - 1_000)  # knows nothing


def test_a_slow_node_presumes_its_leader_alive() -> None:
    now = 10_000
    assert _alive(_Node(heard_ms=NEVER_MS, slowness=1.5), now, leader_heard_ms=now - 1_000)


def test_not_after_long_group_silence_or_never_heard() -> None:
    now = 100_000
    silence_max_ms = GROUP_SILENCE_MAX_TIMEOUTS * MAX_MS
    talking = _Node(heard_ms=now, slowness=2.0)
    assert _alive(talking, now, leader_heard_ms=now - silence_max_ms + 1)
    assert not _alive(talking, now, leader_heard_ms=now - silence_max_ms)
    assert not _alive(talking, now, leader_heard_ms=NEVER_MS)
