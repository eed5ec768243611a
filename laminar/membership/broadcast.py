"""The piggyback queue (memberlist's ``TransmitLimitedQueue``).

Holds at most one pending update per member (a newer update about a member
replaces the older one). Each time an update is put in a packet its transmit count
rises; after ``limit`` transmits it is dropped. Packets take the least-sent updates
first, newest first among equals, so fresh news spreads before old news is
repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar.membership.member import NodeId


@dataclass(slots=True)
class _Pending:
    order: int
    data: bytes
    transmits: int


class BroadcastQueue:
    """Pending encoded updates keyed by the member they are about."""

    __slots__ = ("_next_order", "_pending")

    def __init__(self) -> None:
        self._pending: dict[NodeId, _Pending] = {}
        self._next_order = 0

    def __len__(self) -> int:
        return len(self._pending)

    def queue(self, node_id: NodeId, data: bytes) -> None:
        """Add an update about ``node_id``, replacing any older one."""
        self._next_order += 1
        self._pending.pop(node_id, None)
        self._pending[node_id] = _Pending(self._next_order, data, 0)

    def discard(self, node_id: NodeId) -> None:
        self._pending.pop(node_id, None)

    def pending_transmits(self, node_id: NodeId) -> int | None:
        """How often the update about ``node_id`` was sent, None if not pending."""
        entry = self._pending.get(node_id)
        return None if entry is None else entry.transmits

    def take(self, budget_bytes: int, limit: int) -> list[bytes]:
        """Updates fitting in ``budget_bytes``, counting one transmit for each."""
        if not self._pending or budget_bytes <= 0:
            return []
        candidates = sorted(
            self._pending.items(), key=lambda item: (item[1].transmits, -item[1].order)
        )
        taken: list[bytes] = []
        remaining = budget_bytes
        for node_id, entry in candidates:
            size = len(entry.data)
            if size > remaining:
                continue
            taken.append(entry.data)
            remaining -= size
            entry.transmits += 1
            if entry.transmits >= limit:
                del self._pending[node_id]
            if remaining < 16:
                break
        return taken
