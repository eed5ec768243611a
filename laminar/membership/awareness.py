"""Lifeguard's local health awareness (memberlist's ``awareness.go``).

A node that misses acks *and* nacks is more likely to be the slow one than its
peers are to be dead, so it stretches its own probe interval and timeout by
``1 + score`` instead of suspecting others quickly. The score rises on evidence
of local trouble and falls with each successful probe.
"""

from __future__ import annotations


class Awareness:
    """A health score in ``[0, max_multiplier - 1]``; 0 is healthy."""

    __slots__ = ("_max", "score")

    def __init__(self, max_multiplier: int, *, enabled: bool = True) -> None:
        assert max_multiplier >= 1
        self._max = max_multiplier if enabled else 1
        self.score = 0

    def apply_delta(self, delta: int) -> None:
        self.score = min(max(self.score + delta, 0), self._max - 1)

    def scale_ms(self, timeout_ms: int) -> int:
        return timeout_ms * (self.score + 1)
