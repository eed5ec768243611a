"""What a node remembers of its recent past for the status page: its produce and
fetch counters sampled every few seconds, and the leadership changes its replicas
learnt of.

Both are bounded rings with no clock of their own: the shell passes ``now_ms``
(the node's monotonic milliseconds), and an answer gives ages (``now_ms`` minus
when), so that nodes with different clocks can be shown side by side. Each node
keeps its own; the page asks every node for them (``NodeStatus``,
docs/design.md, "The status page").
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SAMPLE_INTERVAL_MS = 5_000
"""How often a node samples its counters."""
HISTORY_MS = 600_000
"""How far back the samples go (10 minutes)."""
LEADERSHIP_CHANGES_MAX = 50
"""Leadership changes remembered (the newest)."""


@dataclass(frozen=True, slots=True)
class CounterSample:
    """The node's cumulative counters at ``at_ms``."""

    at_ms: int
    produced_records: int
    fetched_records: int


@dataclass(frozen=True, slots=True)
class LeadershipChange:
    """A replica here learnt that ``leader`` leads ``topic/partition`` in ``term``."""

    at_ms: int
    topic: str
    partition: int
    leader: str
    term: int


class CounterHistory:
    """The last ``history_ms`` of samples taken every ``interval_ms`` (the shell's
    loop paces them)."""

    def __init__(self, interval_ms: int = SAMPLE_INTERVAL_MS, history_ms: int = HISTORY_MS):
        if not 1 <= interval_ms <= history_ms:
            raise ValueError("interval_ms must be in 1..history_ms")
        self.interval_ms = interval_ms
        self._samples: deque[CounterSample] = deque(maxlen=history_ms // interval_ms + 1)

    def sample(self, now_ms: int, produced_records: int, fetched_records: int) -> None:
        self._samples.append(CounterSample(now_ms, produced_records, fetched_records))

    def samples(self) -> tuple[CounterSample, ...]:
        """Oldest first."""
        return tuple(self._samples)


class LeadershipLog:
    """The newest ``changes_max`` leadership changes, oldest first."""

    def __init__(self, changes_max: int = LEADERSHIP_CHANGES_MAX) -> None:
        self._changes: deque[LeadershipChange] = deque(maxlen=changes_max)

    def note(self, now_ms: int, topic: str, partition: int, leader: str, term: int) -> None:
        self._changes.append(LeadershipChange(now_ms, topic, partition, leader, term))

    def changes(self) -> tuple[LeadershipChange, ...]:
        return tuple(self._changes)
