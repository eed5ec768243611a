"""What a replication core asks of the node that hosts it (issue 17), and the
decisions it takes from the answers.

The core decides from its own group's messages; :class:`NodeLiveness` adds what the
node knows beyond that group (membership, the node's event-loop lag, its disk, its
recovery budget). The functions below are the core's whole use of it for timing:
how far an election timeout stretches while the node is slow, and whether a
follower presumes its leader alive although the group's timeout passed. None of
this touches safety: votes, leases and commits stay per group.
"""

from __future__ import annotations

from laminar.replica.types import NEVER_MS, NodeId


class NodeLiveness:
    """What the node hosting a core knows beyond the core's own group (issue 17).

    Thousands of groups on a few nodes must not each decide on its own, from its
    own heartbeats, that a peer is gone or that it should step down: when the node
    is busy every group's heartbeats are late at once, and thousands of elections
    make it busier still (a metastable collapse). The shell passes this to every
    core; the defaults (nothing heard, never slow) leave a core to its group alone.

    - :meth:`peer_heard_ms`: when the node last received anything from ``peer``'s
      node (any group). A follower whose election timeout passes does not campaign
      while its leader's node is talking to it (up to
      :data:`GROUP_SILENCE_MAX_TIMEOUTS` election timeouts of silence in the group
      itself), and a leader's check-quorum counts a peer whose node talks to it.
    - :meth:`slowness`: >= 1; how far behind the node's own event loop runs
      (Lifeguard's local health). Above 1 the node's timers are not to be trusted:
      elections wait and check-quorum's window stretches by that factor.
    - :meth:`peer_alive`: membership (SWIM) says ``peer``'s node is alive. A
      quiesced follower does not campaign while its leader's node is alive: it
      learns of the leader's death from membership, and otherwise its periodic
      wake-up would wake every idle group once a minute.
    - :meth:`peer_dead`: membership declared ``peer``'s node dead. A leader may
      quiesce without it (its other voters caught up, a majority with itself)
      instead of heartbeating it until placement moves the replica away;
      :meth:`ReplicaCore.peer_returned` wakes the group when it is back.
    - :meth:`may_lead`: False while the node must not lead (its disk is below its
      free-space watermark, :mod:`laminar.server.disk`): a follower does not
      campaign and ignores a leadership handed to it (``TimeoutNow``); it still
      votes and follows. The host hands its current leaderships over itself.
    - :meth:`recovery_grant` / :meth:`recovery_spend`: the node's budget for
      replicating to peers that catch up as learners (a replica healing from
      damaged storage, or a new one): a leader sends them at most what the grant
      says (at least one batch), and the rest at a later flush (its heartbeats go
      on). Catching up at full speed saturated the disk and the links that the
      voters' own writes need (produce p99 x150 on one machine's disk).

    None of this touches safety: votes, leases and commits stay per group.
    """

    def peer_heard_ms(self, peer: NodeId) -> int:
        return NEVER_MS

    def peer_alive(self, peer: NodeId) -> bool:
        return False

    def peer_dead(self, peer: NodeId) -> bool:
        return False

    def slowness(self) -> float:
        return 1.0

    def may_lead(self) -> bool:
        return True

    def recovery_grant(self) -> int:
        return UNLIMITED

    def recovery_spend(self, count: int) -> None:
        pass


UNLIMITED = 1 << 62
"""A recovery grant without a limit (the default liveness's)."""

NO_LIVENESS = NodeLiveness()
"""The liveness of a core whose shell passes none: it decides from its group alone."""


class LoopLag:
    """A node's event-loop lag as :meth:`NodeLiveness.slowness` wants it: the worst
    recent lag (how late a timer ran), fading linearly over :attr:`DECAY_MS`;
    slowness is lag / ``tolerated_ms`` when above it, else 1. The host feeds it from
    its tick loop, the scale simulator from its simulated loop."""

    DECAY_MS = 2_000

    def __init__(self, tolerated_ms: float) -> None:
        self.tolerated_ms = max(1.0, tolerated_ms)
        self._lag_ms = 0.0
        self._at_ms = 0

    def note(self, lag_ms: int, now_ms: int) -> None:
        if lag_ms >= self.current(now_ms):
            self._lag_ms, self._at_ms = float(lag_ms), now_ms

    def current(self, now_ms: int) -> float:
        return max(0.0, self._lag_ms * (1 - (now_ms - self._at_ms) / self.DECAY_MS))

    def slowness(self, now_ms: int) -> float:
        lag = self.current(now_ms)
        return 1.0 if lag <= self.tolerated_ms else lag / self.tolerated_ms


SLOWNESS_STRETCH_MAX = 8.0
"""Election timeouts stretch with the node's slowness up to this factor."""

GROUP_SILENCE_MAX_TIMEOUTS = 10
"""A follower waits at most this many maximum election timeouts for its group's
leader while the leader's node keeps talking (a leader replica gone silently, e.g.
fenced by a storage failure, is replaced after that)."""


def stretched_ms(timeout_ms: int, slowness: float) -> int:
    """An election timeout stretched by the node's slowness (its timers fire late
    and its peers' messages wait in its queue: campaigning then only adds load), at
    most :data:`SLOWNESS_STRETCH_MAX` times."""
    return int(timeout_ms * min(slowness, SLOWNESS_STRETCH_MAX))


def leader_presumed_alive(
    liveness: NodeLiveness,
    leader: NodeId,
    *,
    now_ms: int,
    leader_heard_ms: int,
    election_timeout_min_ms: int,
    election_timeout_max_ms: int,
) -> bool:
    """A follower's election timeout passed, but the node knows better: ``leader``'s
    node talks to this one, or this node is too slow for its timers to mean anything.
    Not after :data:`GROUP_SILENCE_MAX_TIMEOUTS` maximum election timeouts of silence
    in the group itself (``leader_heard_ms``: when the group last heard its leader),
    nor when it never heard it (:data:`~laminar.replica.types.NEVER_MS`, also after
    a hint that the leader died)."""
    if leader_heard_ms == NEVER_MS:
        return False
    silence_ms = now_ms - leader_heard_ms
    if silence_ms >= GROUP_SILENCE_MAX_TIMEOUTS * election_timeout_max_ms:
        return False
    if liveness.slowness() > 1.0:
        return True
    return now_ms - liveness.peer_heard_ms(leader) < election_timeout_min_ms
