"""The membership wire messages (what), separate from their encoding (codec.py).

A UDP packet carries one or more messages: usually a primary one (ping, ack, ...)
followed by piggybacked updates (alive, suspect, dead). A TCP stream carries one
push-pull message with a full state.
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar.membership.member import MemberState, Metadata, NodeId


@dataclass(frozen=True, slots=True)
class Ping:
    """Are you alive? ``target_id`` guards against a new node reusing an address."""

    sequence: int
    target_id: NodeId
    source_id: NodeId
    source_address: str


@dataclass(frozen=True, slots=True)
class Ack:
    """Answer to a ping (or relayed answer to a ping-req); ``source_id`` is the target."""

    sequence: int
    source_id: NodeId


@dataclass(frozen=True, slots=True)
class Nack:
    """Lifeguard: a relay's "I asked, the target did not answer" (proves the relay
    and the path to it are fine, so the requester is not the slow one)."""

    sequence: int
    source_id: NodeId


@dataclass(frozen=True, slots=True)
class PingRequest:
    """Please ping ``target`` for me and relay its ack (with my ``sequence``)."""

    sequence: int
    target_id: NodeId
    target_address: str
    source_id: NodeId
    source_address: str
    want_nack: bool


@dataclass(frozen=True, slots=True)
class Alive:
    """``node_id`` is alive at ``incarnation`` with these attributes."""

    node_id: NodeId
    incarnation: int
    gossip_address: str
    grpc_address: str
    weight: float
    zone: str
    metadata: Metadata


@dataclass(frozen=True, slots=True)
class Suspect:
    """``from_id`` suspects ``node_id`` at ``incarnation``."""

    node_id: NodeId
    incarnation: int
    from_id: NodeId


@dataclass(frozen=True, slots=True)
class Dead:
    """``from_id`` declares ``node_id`` dead; ``from_id == node_id`` means it left."""

    node_id: NodeId
    incarnation: int
    from_id: NodeId


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One member in a push-pull full state."""

    alive: Alive
    state: MemberState


@dataclass(frozen=True, slots=True)
class PushPull:
    """A full-state exchange: a request (``is_reply`` false) gets a reply in kind."""

    source_id: NodeId
    source_address: str
    is_join: bool
    is_reply: bool
    members: tuple[MemberRecord, ...]


Gossip = Alive | Suspect | Dead
Message = Ping | Ack | Nack | PingRequest | Alive | Suspect | Dead | PushPull
