"""Membership: SWIM gossip with Lifeguard (design §4).

* :mod:`~laminar.membership.core`: the sans-IO state machine (:class:`MembershipCore`).
* :mod:`~laminar.membership.config`: :class:`MembershipConfig` and its presets.
* :mod:`~laminar.membership.codec` / :mod:`~laminar.membership.messages`: the wire.
* :mod:`~laminar.membership.suspicion`, :mod:`~laminar.membership.awareness`,
  :mod:`~laminar.membership.broadcast`: Lifeguard's timers, health, piggyback queue.
* :mod:`~laminar.membership.shell`: the asyncio UDP/TCP node (imported on demand, so
  that importing the core never imports asyncio).
* ``python -m laminar.membership``: a membership-only node printing JSON events.
"""

from laminar.membership.config import MembershipConfig, lan, local, simulation
from laminar.membership.core import Datagram, LocalMember, MembershipCore, Output
from laminar.membership.member import (
    EventKind,
    Member,
    MemberEvent,
    MemberState,
    Metadata,
    NodeId,
)

__all__ = [
    "Datagram",
    "EventKind",
    "LocalMember",
    "Member",
    "MemberEvent",
    "MemberState",
    "MembershipConfig",
    "MembershipCore",
    "Metadata",
    "NodeId",
    "Output",
    "lan",
    "local",
    "simulation",
]
