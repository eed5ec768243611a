"""A leader's view of each peer's log: where it matches, what is in flight, and how
far back to probe after a rejection (as etcd raft's ``tracker``).

Replication to a peer has two modes. In :attr:`Mode.PROBE` the leader sends one
request at a time, to find where the logs match; a rejection carries the
follower's conflicting term and where that term starts there, and
:func:`probe_after_rejection` skips a whole term at once. In
:attr:`Mode.REPLICATE` up to ``inflight_appends_max`` requests are in flight. Lost
requests are detected by a retransmit timeout (:meth:`Progress.expire`), which falls
back to probing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from laminar.replica.epochs import Epochs
from laminar.replica.types import NEVER_MS


class Mode(Enum):
    PROBE = "probe"
    REPLICATE = "replicate"


@dataclass(slots=True)
class Progress:
    """The leader's view of one peer's log."""

    next_offset: int
    match_offset: int = -1
    mode: Mode = Mode.PROBE
    inflight: deque[int] = field(default_factory=deque)  # end offsets of requests sent
    waiting_since_ms: int = 0
    heard_ms: int = NEVER_MS
    caught_up_ms: int = NEVER_MS  # when the peer last held the leader's whole log
    reported_end: int = -1
    reported_watermark: int = -1
    healing: bool = False  # its storage was damaged: out of the voters until caught up
    healing_since: int = -1  # the damage it heals from (its ``healing_since``)
    healed_since: int = -1  # the damage this leader promoted it back from: old news
    log_checked: bool = False  # its first match was checked against removed tombstones
    own_end: int = -1  # its log below here is its own, under a removed tombstone: discard it

    def sent(self, request_end: int, now_ms: int, *, advance: bool) -> None:
        """A request covering the log up to ``request_end`` went out (``advance``: in
        replicate mode, the next one starts there)."""
        if not self.inflight:
            self.waiting_since_ms = now_ms
        self.inflight.append(request_end)
        if advance:
            self.next_offset = request_end

    def acknowledged(self, match_offset: int, end_offset: int, now_ms: int) -> None:
        """The peer holds the leader's log up to ``match_offset`` (``end_offset``: the
        leader's log end): done probing, replicate from there."""
        self.match_offset = max(self.match_offset, match_offset)
        if self.match_offset >= end_offset:
            self.caught_up_ms = now_ms
        while self.inflight and self.inflight[0] <= self.match_offset:
            self.inflight.popleft()
        self.waiting_since_ms = now_ms
        if self.mode is Mode.PROBE:
            # From the match, not from the probe: the answer may be to an older
            # request (the probe, further on, lost), and with nothing in flight no
            # retransmit would ever send what lies between (as etcd raft's
            # BecomeReplicate: Next = Match + 1).
            self.mode = Mode.REPLICATE
            self.inflight.clear()
            self.next_offset = self.match_offset
        self.next_offset = max(self.next_offset, self.match_offset)

    def stale_rejection(self, prev_end_offset: int) -> bool:
        """A rejection of the request that started at ``prev_end_offset`` no longer
        matters: probing elsewhere by now, or below what the peer is known to hold."""
        if self.mode is Mode.PROBE:
            return prev_end_offset != self.next_offset
        return prev_end_offset < self.match_offset

    def probe(self, next_offset: int) -> None:
        """Probe the peer's log from ``next_offset``, one request at a time."""
        self.next_offset = next_offset
        self.mode = Mode.PROBE
        self.inflight.clear()

    def expire(self, now_ms: int, retransmit_ms: int) -> None:
        """Requests (or their answers) waited ``retransmit_ms``: they were lost; find
        the follower's end again."""
        if self.inflight and now_ms - self.waiting_since_ms >= retransmit_ms:
            self.inflight.clear()
            self.mode = Mode.PROBE
            if self.match_offset >= 0:
                self.next_offset = self.match_offset

    def forget_log(self, since: int, end_offset: int) -> None:
        """The peer heals from storage damage found at ``since``: nothing it said
        before counts; probe its log again (``end_offset``: the leader's log end)."""
        self.healing = True
        self.healing_since = since
        self.match_offset = -1
        self.log_checked = False
        self.own_end = -1
        self.caught_up_ms = NEVER_MS
        self.probe(min(self.next_offset, end_offset))


def probe_after_rejection(
    *,
    conflict_term: int,
    conflict_start: int,
    follower_end: int,
    prev_end_offset: int,
    match_offset: int,
    epochs: Epochs,
    log_start: int,
    log_end: int,
) -> int:
    """Where to probe a follower that rejected the request starting at
    ``prev_end_offset`` (the caller rounds it down to a batch start).

    Without a conflicting term (the follower's log ends before ``prev_end_offset``)
    from its end; with one, from the end of that term in the leader's log when the
    leader holds the term (the follower matches up to there), else from where the
    term starts in the follower's log. Always below ``prev_end_offset``, never below
    what the follower is known to match, and within the leader's log.
    """
    if conflict_term < 0:
        candidate = min(follower_end, prev_end_offset - 1)
    else:
        term_end = epochs.end_of(conflict_term, log_end)
        if term_end >= 0 and epochs.start_of(conflict_term) >= 0:
            candidate = term_end  # we hold that term: the follower matches up to its end
        else:
            candidate = conflict_start
        candidate = min(candidate, prev_end_offset - 1)
    candidate = max(candidate, match_offset, log_start)
    return min(candidate, log_end)
