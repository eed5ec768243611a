"""Which node addresses failed to answer recently, and how long to skip them.

A node that did not answer a call (connection refused or reset, or no answer
before the attempt's deadline) is *skipped* for a while: routing puts it behind
every other candidate, so a dead or partitioned node costs one failed attempt,
not one per call. The n-th failure in a row (n from 1) skips it for
``min(node_skip_max_ms, node_skip_initial_ms * 2**(n - 1))``; any answer from the
node, even an error, ends the streak. A skipped node is still used when nothing
else is left, the one whose skip ends first before the others.

A node that answered with an error (``NOT_LEADER``, ``UNAVAILABLE`` for lack of a
leader or quorum) is reachable and stays a good source of metadata; it is not
skipped.

Sans-IO: the caller passes the time, and serializes access (the cache holds its
lock around every call).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from laminar_client.retry import RetryPolicy

ADDRESSES_MAX = 4096
"""Most addresses remembered; beyond it the one whose skip ends first is forgotten."""


@dataclass(slots=True)
class _Failures:
    streak: int
    skip_until_s: float


class NodeHealth:
    """Failure streaks by address, and the skips they imply."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._failures: dict[str, _Failures] = {}

    def failed(self, address: str, now_s: float) -> None:
        """``address`` did not answer at ``now_s``: skip it, longer after each failure."""
        entry = self._failures.get(address)
        streak = 1 if entry is None else min(entry.streak + 1, 64)
        skip_ms = min(
            self._policy.node_skip_max_ms, self._policy.node_skip_initial_ms * 2 ** (streak - 1)
        )
        if entry is None and len(self._failures) >= ADDRESSES_MAX:
            oldest = min(self._failures, key=lambda a: self._failures[a].skip_until_s)
            del self._failures[oldest]
        self._failures[address] = _Failures(streak, now_s + skip_ms / 1000)

    def answered(self, address: str) -> None:
        """``address`` answered (a result or an error of its own): stop skipping it."""
        self._failures.pop(address, None)

    def skipped(self, address: str, now_s: float) -> bool:
        """Whether ``address`` failed recently enough to be avoided."""
        entry = self._failures.get(address)
        return entry is not None and now_s < entry.skip_until_s

    def usable(self, addresses: Iterable[str], now_s: float) -> list[str]:
        """``addresses`` not skipped, in their order; if all are, the one whose skip ends first."""
        ordered = list(dict.fromkeys(addresses))
        healthy = [a for a in ordered if not self.skipped(a, now_s)]
        if healthy or not ordered:
            return healthy
        return [min(ordered, key=lambda a: self._failures[a].skip_until_s)]

    def by_skip_end(self, addresses: Iterable[str], now_s: float) -> list[str]:
        """The skipped ones among ``addresses``, the one whose skip ends first first."""
        skipped = [a for a in dict.fromkeys(addresses) if self.skipped(a, now_s)]
        return sorted(skipped, key=lambda a: self._failures[a].skip_until_s)
