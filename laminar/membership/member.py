"""What the rest of the node sees: members, their states, and membership events."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from laminar.ids import NodeId

__all__ = ["EventKind", "Member", "MemberEvent", "MemberState", "Metadata", "NodeId"]

Metadata = tuple[tuple[str, str], ...]
"""A member's small metadata map, as sorted ``(key, value)`` pairs (immutable)."""


class MemberState(enum.Enum):
    """SWIM states. ``left`` is a graceful departure, ``dead`` a detected failure."""

    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"
    LEFT = "left"

    @property
    def is_gone(self) -> bool:
        """Dead or left: not probed, not counted as a live member."""
        return self is MemberState.DEAD or self is MemberState.LEFT


@dataclass(frozen=True, slots=True)
class Member:
    """One member as this node currently knows it (an immutable snapshot)."""

    node_id: NodeId
    gossip_address: str
    """``host:port`` of its UDP gossip endpoint (TCP push-pull on the same port)."""
    grpc_address: str
    """``host:port`` of its gRPC service (for the rest of Laminar)."""
    weight: float
    """Capacity for placement (>= 0; 0 means host nothing new)."""
    zone: str
    """Failure domain label."""
    incarnation: int
    """Raised by the member itself to refute suspicion or to publish a change."""
    state: MemberState
    metadata: Metadata

    def metadata_dict(self) -> dict[str, str]:
        """The metadata as a fresh dict."""
        return dict(self.metadata)


class EventKind(enum.Enum):
    """What happened to a member, from this node's point of view."""

    JOINED = "joined"
    """First seen alive, or alive again after being dead or left."""
    UPDATED = "updated"
    """Weight, zone, metadata or an address changed."""
    SUSPECT = "suspect"
    """Failed a probe; it may refute."""
    ALIVE = "alive"
    """A suspect refuted the suspicion."""
    DEAD = "dead"
    """Declared failed."""
    LEFT = "left"
    """Left gracefully."""


@dataclass(frozen=True, slots=True)
class MemberEvent:
    """One change of a member, with the member's state after the change."""

    kind: EventKind
    member: Member
    at_ms: int
    """The ``now_ms`` of the core call that produced the event."""
