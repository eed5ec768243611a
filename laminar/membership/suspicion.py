"""Lifeguard's dynamic suspicion timeout (memberlist's ``suspicion.go``), as a value.

A suspicion starts at ``max_ms`` and shrinks towards ``min_ms`` on a log scale as
independent members confirm it: ``k`` expected confirmations bring it to the
minimum. The timer itself is just a deadline the state machine compares ``now_ms``
against; nothing here schedules anything.
"""

from __future__ import annotations

import math

from laminar.membership.member import NodeId


def remaining_timeout_ms(
    confirmations: int, expected: int, elapsed_ms: int, min_ms: int, max_ms: int
) -> int:
    """memberlist's ``remainingSuspicionTime``: time left before the suspect is dead.

    ``frac = ln(confirmations + 1) / ln(expected + 1)`` and the timeout is
    ``max - frac * (max - min)``, never below ``min``."""
    fraction = math.log(confirmations + 1.0) / math.log(expected + 1.0)
    raw_ms = max_ms - fraction * (max_ms - min_ms)
    timeout_ms = max(min_ms, math.floor(raw_ms))
    return timeout_ms - elapsed_ms


class Suspicion:
    """One suspected member's timer, with the members that confirmed it."""

    __slots__ = (
        "_confirmers",
        "deadline_ms",
        "expected",
        "max_ms",
        "min_ms",
        "start_ms",
        "verify_at_ms",
    )

    def __init__(
        self, suspector: NodeId, expected: int, min_ms: int, max_ms: int, start_ms: int
    ) -> None:
        assert 0 < min_ms <= max_ms
        self.expected = expected
        self.min_ms = min_ms
        self.max_ms = max_ms
        self.start_ms = start_ms
        # The first suspector is not an independent confirmation of itself.
        self._confirmers: dict[NodeId, None] = {suspector: None}
        self.deadline_ms = start_ms + (max_ms if expected >= 1 else min_ms)
        self.verify_at_ms = start_ms + min_ms
        """When the suspecting node should probe the suspect itself (buddy system):
        a suspicion still running after the minimum timeout lacks confirmations."""

    @property
    def confirmation_count(self) -> int:
        return len(self._confirmers) - 1

    def confirm(self, from_id: NodeId, now_ms: int) -> bool:
        """Count an independent confirmation; True when it was new (re-gossip it)."""
        if self.confirmation_count >= self.expected or from_id in self._confirmers:
            return False
        self._confirmers[from_id] = None
        elapsed_ms = now_ms - self.start_ms
        remaining_ms = remaining_timeout_ms(
            self.confirmation_count, self.expected, elapsed_ms, self.min_ms, self.max_ms
        )
        self.deadline_ms = now_ms + max(0, remaining_ms)
        return True
