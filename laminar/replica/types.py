"""Identifiers and small value types shared by the replication core."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from laminar.ids import NodeId, Term

__all__ = ["NEVER_MS", "Acks", "GroupConfig", "NodeId", "Role", "Term"]

NEVER_MS = -(2**62)
"""A time (in ms) that never happened: "not heard from", "never caught up"."""


class Role(StrEnum):
    """A replica's role in its partition's consensus group."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"
    REMOVED = "removed"


class Acks(StrEnum):
    """When a produce request is answered.

    ``all``: once the batch is committed (on a majority of voters, durably).
    ``leader``: once the batch is durable on the leader; lost if the leader fails
    before replicating it. ``none``: answered at once; nothing is promised.
    """

    ALL = "all"
    LEADER = "leader"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Who is in a partition's consensus group.

    ``voters`` elect leaders and count for commit; ``learners`` receive the log
    (to catch up before promotion) but do neither. A node is in at most one.
    """

    voters: tuple[NodeId, ...]
    learners: tuple[NodeId, ...] = ()

    def __post_init__(self) -> None:
        assert not set(self.voters) & set(self.learners), "voter and learner at once"
        assert len(set(self.voters)) == len(self.voters), "duplicate voter"
        assert len(set(self.learners)) == len(self.learners), "duplicate learner"

    @property
    def members(self) -> tuple[NodeId, ...]:
        return self.voters + self.learners

    def quorum(self) -> int:
        return len(self.voters) // 2 + 1
