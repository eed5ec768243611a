"""Coalescing of replication messages between two nodes (design §6, efficiency).

A node hosts many partitions; in one tick each of their cores may address the same
peer (heartbeats especially). The shell adds every core's outbound messages to a
:class:`Coalescer` and drains it once per tick: one :class:`PeerBundle` per peer
holds all of them, tagged with their partition, so a node with hundreds of idle
partitions sends one packet per peer per heartbeat interval, not hundreds.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from laminar.replica.messages import Heartbeat, HeartbeatResponse, Message, Outbound
from laminar.replica.types import NodeId


@dataclass(frozen=True, slots=True)
class PeerBundle:
    """Everything one node sends to one peer in one tick.

    Heartbeats and their answers are kept apart from the rest so that the wire
    encoding can pack them as compact tuples.
    """

    heartbeats: tuple[tuple[Hashable, Heartbeat | HeartbeatResponse], ...]
    messages: tuple[tuple[Hashable, Message], ...]

    def __len__(self) -> int:
        return len(self.heartbeats) + len(self.messages)

    def items(self) -> list[tuple[Hashable, Message]]:
        """Every ``(partition, message)``: heartbeats last, so that appends arrive first."""
        return [*self.messages, *self.heartbeats]


class Coalescer:
    """Collects ``(partition, Outbound)`` pairs and groups them by destination."""

    __slots__ = ("_heartbeats", "_messages")

    def __init__(self) -> None:
        self._heartbeats: dict[NodeId, list[tuple[Hashable, Heartbeat | HeartbeatResponse]]] = {}
        self._messages: dict[NodeId, list[tuple[Hashable, Message]]] = {}

    def add(self, partition: Hashable, outbound: Outbound) -> None:
        message = outbound.message
        if isinstance(message, Heartbeat | HeartbeatResponse):
            self._heartbeats.setdefault(outbound.destination, []).append((partition, message))
        else:
            self._messages.setdefault(outbound.destination, []).append((partition, message))

    def add_all(self, partition: Hashable, outbound: tuple[Outbound, ...]) -> None:
        for item in outbound:
            self.add(partition, item)

    def drain(self) -> dict[NodeId, PeerBundle]:
        """One bundle per destination, in first-seen order; the coalescer is emptied."""
        destinations = dict.fromkeys([*self._messages, *self._heartbeats])
        bundles = {
            destination: PeerBundle(
                tuple(self._heartbeats.get(destination, ())),
                tuple(self._messages.get(destination, ())),
            )
            for destination in destinations
        }
        self._heartbeats.clear()
        self._messages.clear()
        return bundles
