"""Messages between the replicas of one partition, and what the core returns.

Messages carry no partition: the node wraps them per partition, and coalesces all
messages for one peer produced in one tick into one envelope (see
:mod:`laminar.replica.coalesce`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from laminar.replica.types import GroupConfig, NodeId, Role


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A (pre-)candidate asks for a vote. ``transfer`` bypasses the leader lease."""

    term: int
    candidate: NodeId
    end_offset: int
    last_term: int
    pre_vote: bool
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int
    voter: NodeId
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Batches ``[prev_end_offset, end_offset)`` following an entry of ``prev_term``."""

    term: int
    leader: NodeId
    prev_end_offset: int
    prev_term: int
    batches: bytes
    end_offset: int
    commit_offset: int


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """``match_offset``: on success, the follower holds the leader's log up to here.

    On rejection, ``end_offset`` is the follower's log end and ``conflict_term`` /
    ``conflict_start`` describe its entry at the leader's ``prev_end_offset - 1``
    (-1 when its log is shorter), so the leader can skip a whole term at once.
    """

    term: int
    follower: NodeId
    success: bool
    match_offset: int
    end_offset: int
    prev_end_offset: int = -1
    """The request's ``prev_end_offset``, so that a stale answer can be told apart."""
    conflict_term: int = -1
    conflict_start: int = -1
    healing_since: int = -1
    """-1, or: the follower lost entries or its term and vote to damaged storage
    (found when its log ended here) and has not been re-added since. It holds what
    ``match_offset`` says, but the leader must not count on anything it said before
    and must take it out of the voters; the value tells one damage from another
    (see :class:`~laminar.replica.core.ReplicaCore`, "Damaged storage")."""
    log_start: int = -1
    """The follower's log start: the leader checks that a log it had to forget
    holds nothing of its own below a removed tombstone (see ``discard`` in
    :class:`InstallStart`)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A leader is alive; ``commit_offset`` is capped at what the follower matches.

    ``member`` is False once the follower has been removed from the group by a
    committed configuration: it may then delete its replica.
    """

    term: int
    leader: NodeId
    commit_offset: int
    member: bool = True
    quiesce: bool = False
    """The partition is idle and every replica holds the whole committed log: stop
    expecting heartbeats until the next message (membership watches the leader)."""


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    term: int
    follower: NodeId
    end_offset: int
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """The leader hands leadership over: start an election at once."""

    term: int
    leader: NodeId


@dataclass(frozen=True, slots=True)
class InstallStart:
    """The follower needs entries below the leader's log start (retention deleted
    them): continue from ``start_offset`` instead, whose previous entry has
    ``start_term``. ``config`` is the msgpack ``[offset, voters, learners]`` of the
    configuration in effect at the start (its control batch may be gone). Answered
    with an :class:`AppendResponse` whose ``prev_end_offset`` is ``start_offset``.

    ``discard``: restart the log at ``start_offset`` even where it matches (a
    committed offset the follower holds). Keyed compaction: the leader's log has
    tombstones removed below a command's ``tombstones_end``; a follower whose log it
    had to forget (damaged storage, or a replica re-added with an old log) and which
    matches only below that point holds records of its own there that a removed
    tombstone superseded, which would survive there alone (see ``ReplicaCore``,
    "Keyed compaction"). Ignored while the follower's high watermark is above
    ``start_offset`` (the leader asks again from further on)."""

    term: int
    leader: NodeId
    start_offset: int
    start_term: int
    config: bytes
    commit_offset: int
    discard: bool = False


Message = (
    VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | TimeoutNow
    | InstallStart
)


@dataclass(frozen=True, slots=True)
class Outbound:
    """A message for one peer."""

    destination: NodeId
    message: Message


class ProduceStatus(StrEnum):
    """The outcome of a produce request (a rejection is a value, not an exception)."""

    OK = "ok"
    DUPLICATE = "duplicate"  # already written; base_offset is the original's
    NOT_LEADER = "not_leader"  # leader_hint says where to go (may be None)
    UNAVAILABLE = "unavailable"  # no quorum reachable, or too many pending writes
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    INVALID = "invalid"  # malformed batch


@dataclass(frozen=True, slots=True)
class ProduceReply:
    """The answer to ``propose(request_id, …)``.

    A NOT_LEADER or UNAVAILABLE answer to a batch that had been appended means its
    outcome is unknown (it may still commit under the next leader): an idempotent
    producer retries and is answered DUPLICATE with the original offset.
    """

    request_id: int
    status: ProduceStatus
    base_offset: int = -1
    leader_hint: NodeId | None = None
    detail: str = ""
    expected_sequence: int = -1  # OUT_OF_ORDER_SEQUENCE: what the producer must send


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    term: int
    leader: NodeId | None


@dataclass(frozen=True, slots=True)
class ConfigChanged:
    """The group's configuration entry at ``offset`` is now in effect here."""

    config: GroupConfig
    offset: int


@dataclass(frozen=True, slots=True)
class Removed:
    """This replica left the group for good; the shell may delete its data."""

    term: int


@dataclass(frozen=True, slots=True)
class Compact:
    """The keyed compaction command of the ``compact`` control batch at ``offset`` is
    committed: compact the log by it (``value``: the engine's
    ``CompactCommand.to_value()``; see :mod:`laminar.replica.compaction_control`).
    Given once per batch while the core runs, and again after a restart for every
    command past the one the shell reported done
    (:meth:`~laminar.replica.core.ReplicaCore.compaction_done`)."""

    offset: int
    value: bytes


Event = RoleChanged | ConfigChanged | Removed | Compact


@dataclass(frozen=True, slots=True)
class Ready:
    """What the shell must do after a batch of inputs, in this order.

    0. ``early_messages`` may be sent at once, before or during the sync: a
       leader's appends and heartbeats (Raft §10.2.1: the leader writes its own log
       in parallel with replicating it; it counts itself toward the commit only
       after ``advance``).
    1. If ``sync``: make every appended batch and the staged state durable
       (``LogStorage.sync()``).
    2. Send ``messages`` and deliver ``replies``; handle ``events``.
    3. Call ``core.advance(ready)``.

    Batches were already appended to the storage by the core; term and vote changes
    were staged (``stage_state``), so ``sync`` is set whenever a message depends on
    them. ``high_watermark``: offsets below it are committed; reads may return them.
    ``committed_from`` / ``high_watermark`` is the newly committed range.
    """

    early_messages: tuple[Outbound, ...]
    messages: tuple[Outbound, ...]
    replies: tuple[ProduceReply, ...]
    events: tuple[Event, ...]
    sync: bool
    end_offset: int
    committed_from: int
    high_watermark: int

    @property
    def empty(self) -> bool:
        return not (
            self.early_messages or self.messages or self.replies or self.events or self.sync
        ) and (self.committed_from == self.high_watermark)
