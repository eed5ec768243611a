"""The leader's ``acks=all`` produce requests waiting for the commit.

Each waits for the high watermark to pass the end of its batch (or, for a retried
duplicate, of the original batch); it is answered when the commit passes that
offset, in offset order, or told ``NOT_LEADER`` when leadership is lost first
(its outcome is then unknown: the batch may still commit under the next leader).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from laminar.replica.messages import ProduceReply, ProduceStatus
from laminar.replica.types import NodeId


@dataclass(slots=True, order=True)
class _Pending:
    next_offset: int
    request_id: int
    base_offset: int = field(compare=False)
    status: ProduceStatus = field(compare=False)


class PendingWrites:
    """``acks=all`` requests ordered by the offset the commit must pass."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[_Pending] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(
        self, next_offset: int, request_id: int, base_offset: int, status: ProduceStatus
    ) -> None:
        """Answer ``request_id`` with ``status`` and ``base_offset`` once the commit
        reaches ``next_offset``."""
        heapq.heappush(self._heap, _Pending(next_offset, request_id, base_offset, status))

    def committed(self, high_watermark: int, replies: list[ProduceReply]) -> None:
        """Append to ``replies`` the answers of the requests ``high_watermark`` covers."""
        heap = self._heap
        while heap and heap[0].next_offset <= high_watermark:
            pending = heapq.heappop(heap)
            replies.append(
                ProduceReply(pending.request_id, pending.status, base_offset=pending.base_offset)
            )

    def abandon(self, leader_hint: NodeId | None, replies: list[ProduceReply]) -> None:
        """Leadership is lost: append a ``NOT_LEADER`` answer for every request to
        ``replies``, and forget them."""
        for pending in self._heap:
            replies.append(
                ProduceReply(
                    pending.request_id,
                    ProduceStatus.NOT_LEADER,
                    leader_hint=leader_hint,
                    detail="leadership lost before commit; outcome unknown",
                )
            )
        self._heap.clear()
