"""The sans-IO consensus core of one partition replica (design §6).

:class:`ReplicaCore` is Raft with record offsets as the log index and each batch's
``term`` as the entry term. It never touches the network or a clock: the shell feeds
it inputs (:meth:`~ReplicaCore.propose`, :meth:`~ReplicaCore.step` with a peer's
message, :meth:`~ReplicaCore.tick`, :meth:`~ReplicaCore.set_target`,
:meth:`~ReplicaCore.hint_leader_dead`) with the current time, and then drains the
outputs.

This module holds the roles and their transitions: elections, replication, the
leader's tick, healing. The rules it applies live in modules of their own, split
along the seams etcd raft has (``quorum``, ``tracker``, ``confchange``):

* :mod:`~laminar.replica.quorum`: the commit rule
  (:func:`~laminar.replica.quorum.commit_offset`) and the in-sync rule;
* :mod:`~laminar.replica.progress`: the leader's view of each peer (probe and
  replicate modes, requests in flight, where to probe after a rejection);
* :mod:`~laminar.replica.confchange`: configuration control batches and the next
  single change towards the placement target;
* :mod:`~laminar.replica.producers`: idempotent producers' duplicates and gaps;
* :mod:`~laminar.replica.state`: what is persisted besides the log (term, vote,
  configurations) and its format;
* :mod:`~laminar.replica.liveness`: what the core asks of its node
  (:class:`~laminar.replica.liveness.NodeLiveness`);
* :mod:`~laminar.replica.epochs`: the term of each offset.

Shell contract
--------------
The core calls its :class:`~laminar.segment.storage.LogStorage` directly (appends,
truncations, reads, ``save_state``) — like etcd's ``Storage``, storage calls are
synchronous and cheap, except ``sync()``, which the shell runs. ``save_state`` is
durable when it returns, so term and vote are on disk before any message that
depends on them exists. After any inputs, the shell loops::

    while core.has_ready():
        ready = core.ready()
        send(ready.early_messages)  # 0. a leader's appends may go out at once
        if ready.sync:
            storage.sync()          # 1. persist appended batches and staged state
        send(ready.messages)        # 2. only then send, reply and publish events
        deliver(ready.replies)
        handle(ready.events)
        core.advance(ready)         # 3. tell the core the batches are durable

No other input may reach the core between ``ready()`` and ``advance()``. A follower's
append acknowledgement and an ``acks=leader`` reply travel in the same ``Ready`` as
the batches they cover, so they leave only after the fsync; the leader counts its
own log toward the commit only from ``advance`` on.

Protocol notes (see ``docs/design.md`` for the reasoning)
----------------------------------------------------------
* Pre-vote, and a leader lease: a voter that heard from a leader within the minimum
  election timeout refuses (pre-)votes, unless the candidate was handed leadership
  (``TimeoutNow``) or is that leader itself (campaigning, it no longer leads). A
  quiesced follower holds the lease until membership hints that the leader died,
  or the leader campaigns (it restarted too quickly to be declared dead). With
  ``check_quorum`` a leader that has not heard from a majority for the maximum
  election timeout steps down, and refuses writes (``UNAVAILABLE``) as soon as it
  lacks a recent quorum.
* A new leader appends a no-op control batch; the commit only advances to an offset
  whose batch has the leader's term.
* Replication per follower has two modes: *probe* (one request at a time, to find
  where the logs match: rejections carry the follower's conflicting term and where
  it starts, and the leader skips a whole term at once) and *replicate* (up to
  ``inflight_appends_max`` requests in flight). Lost requests are detected by a
  retransmit timeout, which falls back to probing.
* Heartbeats are separate from appends: they carry ``min(commit, match)`` for that
  follower, so a follower's high watermark never covers entries it does not hold
  from this leader.
* Configuration changes are control batches (key ``config``, msgpack value
  ``{"voters": [...], "learners": [...]}``) and take effect when appended, one at a
  time. The history of configurations is saved in the state file before the batch
  is appended; entries at or past the log end are dropped on restart.
* Idempotent producers: every replica applies every appended batch to its
  :class:`~laminar.replica.producers.ProducerTable`, rebuilt from the log on start.
* Keyed compaction is agreed through the log (:mod:`~laminar.replica.compaction_control`):
  the leader appends a ``compact`` control batch when its shell asks
  (:meth:`ReplicaCore.propose_compact`); every replica's ``Ready`` carries a
  :class:`~laminar.replica.messages.Compact` event once its high watermark passes
  the batch, and again after a restart until the shell reports it applied
  (:meth:`ReplicaCore.compaction_done`, saved as ``compacted_through``). A
  compacted log has gaps between batches: a follower appends a batch past its log
  end when the leader's request vouches for the gap (nothing of the leader's log
  lies between the previous batch and it), and the term of an offset in a gap is
  the term of the batch before it (a term starts with a no-op, never removed), so
  elections and log matching are unchanged.
  A peer whose log the leader does not know yet (a new progress) is sent no batch
  below the newest command's ``tombstones_end`` until its first match is checked:
  a log holding records of its own below removed tombstones is restarted past them
  (:meth:`ReplicaCore._check_peer_log`, ``InstallStart.discard``).

Damaged storage
---------------
Raft assumes what a replica acknowledged or voted stays on its disk. A replica
whose shell found damage when opening it (a corrupt batch, so the log was cut
before it: :attr:`StorageDamage.lost_entries`; or a state file with no valid
copy: :attr:`StorageDamage.lost_state`) may have acknowledged entries it no longer
holds, or voted in a term it forgot. If it voted as before, it could elect a
candidate lacking entries that were committed with its acknowledgement; if it
kept its old place among the voters, the leader could count on what it said
before. So it *heals* (:attr:`ReplicaCore.healing`, persisted in the state until
it is over):

* it never votes (nor pre-votes) and never campaigns;
* it follows the leader and acknowledges what it really holds, flagged
  with where the damage was found: the leader drops what it knew of its log and,
  one change at a time,
  moves it from the voters to the learners (a committed change, so the remaining
  voters hold everything committed before it);
* it catches up like any learner, and the leader promotes it back once it has
  caught up (the placement target, or the current members without one);
* it is healed when it appends a configuration that makes it a voter again,
  after it was a non-voter since the damage (a leader promotes only a learner
  that caught up). A group of one, or with a majority healing, has no leader
  until an operator accepts the loss (:meth:`ReplicaCore.accept_data_loss`).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

import msgpack

from laminar.errors import CorruptBatchError, OffsetOutOfRangeError, RecordFormatError
from laminar.logfields import PEER, TERM, fields, parse_partition_name
from laminar.records import (
    DEFAULT_LIMITS,
    BatchHeader,
    BatchLimits,
    check_payload,
    encode_control_batch,
    iter_batches,
    next_offset,
    parse_header,
    verify_batch,
)
from laminar.replica.compaction_control import (
    command_end,
    command_tombstones_end,
    compact_in,
    encode_compact,
)
from laminar.replica.confchange import (
    CONTROL_CONFIG,
    CONTROL_NOOP,
    TransferTo,
    config_in,
    encode_config,
    next_change,
)
from laminar.replica.config import ReplicaConfig
from laminar.replica.epochs import Epochs
from laminar.replica.liveness import (
    GROUP_SILENCE_MAX_TIMEOUTS,
    NO_LIVENESS,
    SLOWNESS_STRETCH_MAX,
    LoopLag,
    NodeLiveness,
    leader_presumed_alive,
    stretched_ms,
)
from laminar.replica.messages import (
    AppendRequest,
    AppendResponse,
    Compact,
    ConfigChanged,
    Event,
    Heartbeat,
    HeartbeatResponse,
    InstallStart,
    Message,
    Outbound,
    ProduceReply,
    ProduceStatus,
    Ready,
    Removed,
    RoleChanged,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from laminar.replica.pending import PendingWrites
from laminar.replica.producers import NotConsecutive, ProducerTable, SequenceCheck, Verdict
from laminar.replica.progress import Mode, Progress, probe_after_rejection
from laminar.replica.quorum import commit_offset, in_sync, majority_heard
from laminar.replica.state import BOOTSTRAP_OFFSET, decode_state, encode_state, founding_state
from laminar.replica.types import NEVER_MS, Acks, GroupConfig, NodeId, Role
from laminar.segment.compaction import COMMAND_VALUE_BYTES_MAX
from laminar.segment.storage import Buffer, LogStorage

__all__ = [  # names other modules import from here (some now live in the modules above)
    "CONTROL_CONFIG",
    "CONTROL_NOOP",
    "GROUP_SILENCE_MAX_TIMEOUTS",
    "SLOWNESS_STRETCH_MAX",
    "LoopLag",
    "NodeLiveness",
    "ReplicaCore",
    "StorageDamage",
    "encode_config",
    "founding_state",
]

_LOG = logging.getLogger(__name__)

_EARLY = (AppendRequest, Heartbeat)  # a leader's; sendable before its own fsync
_QUIESCED_WAKE_MS = 60_000  # a quiesced replica still ticks now and then (cheaply)


@dataclass(frozen=True, slots=True)
class StorageDamage:
    """What a replica lost to damaged storage, as its shell found it when opening it
    (see "Damaged storage" in the module docstring)."""

    lost_entries: bool = False
    """The log was cut before a corrupt batch: entries it acknowledged may be gone."""
    lost_state: bool = False
    """The state file had no valid copy: its term, vote and the configurations below
    the log start are gone."""


class ReplicaCore:
    """One replica of one partition. Not thread-safe; one caller drives it.

    ``initial`` is the configuration the group was created with (the same on every
    founding replica); a replica joining an existing group passes None and learns
    its configuration from the log it receives.
    """

    def __init__(
        self,
        node_id: NodeId,
        storage: LogStorage,
        config: ReplicaConfig,
        *,
        now_ms: int,
        rng: random.Random,
        initial: GroupConfig | None = None,
        limits: BatchLimits = DEFAULT_LIMITS,
        founding: bool = False,
        liveness: NodeLiveness | None = None,
        damage: StorageDamage | None = None,
        name: str = "",
    ) -> None:
        """``initial``: the group's configuration when this replica is one of its
        founders; with a storage holding no state, the replica founds the group (its
        first voter leads term 1, see :func:`founding_state`). ``founding``: the
        storage already holds exactly :func:`founding_state` (written by the host for
        many replicas at once); found the group from it. ``liveness``: what the
        node knows beyond this group (see :class:`NodeLiveness`). ``damage``: what
        the shell found lost when it opened the storage (its damaged files set
        aside, the log cut before the first corrupt batch, a lost state file
        dropped): the replica heals (see "Damaged storage"). ``name``: the
        partition, ``topic/index`` (:func:`laminar.logfields.partition_name`), that
        every log line of the core names after the node id, and gives as its
        ``topic`` and ``partition`` fields."""
        self.node_id = node_id
        self._label = f"{node_id} {name}" if name else node_id
        self._log_fields = fields(parse_partition_name(name), node_id=node_id)
        self._liveness = liveness or NO_LIVENESS
        self._storage = storage
        self._config = config
        self._rng = rng
        self._limits = limits
        self._now = now_ms

        self.term = 0
        self._saved_term = 0  # the term last saved: terms never go back
        self.voted_for: NodeId | None = None
        self._configs: list[tuple[int, GroupConfig]] = []
        # (term, offset) pairs answering "term of the entry at o" for o just below the
        # log start, whose batches retention deleted (see advance_start).
        self._start_epochs: list[list[int]] = []
        self._healing_since: int | None = None
        self._healing_told_term = -1  # the term of the last append answered while healing
        self._compacted_through = -1  # the last compact command the shell applied
        # Keyed compaction commands in the log, (offset, value), ascending: those past
        # _compact_emitted are given to the shell once committed; older ones stay (the
        # shell's decision takes T from them) until the shell prunes them.
        self._compacts: list[tuple[int, bytes]] = []
        saved = storage.load_state()
        if founding:
            # The host wrote the founding state itself (many replicas, one sync):
            # act on it only if the log is still exactly as founded.
            founding = (
                initial is not None
                and saved == founding_state(initial)
                and storage.end_offset == storage.start_offset == 0
            )
        else:
            founding = saved is None and initial is not None and bool(initial.voters)
        if saved is None:
            if initial is not None:
                self._configs.append((BOOTSTRAP_OFFSET, initial))
            if founding:
                assert initial is not None
                # A new group needs no election: term 1 belongs to its first voter by
                # construction (every founder saves that vote before anything else),
                # so nobody else can win it, and every later election is for term 2+.
                self.term = 1
                self.voted_for = initial.voters[0]
            self._save_state(now=True)
        else:
            self._load_state(saved)
        end = storage.end_offset
        self._epochs = Epochs.from_storage(storage, self._saved_term_at(storage.start_offset - 1))
        self._producers = ProducerTable(config.producer_window, config.producers_max)
        logged = self._rebuild_from_log()
        if self._compacted_through >= end:
            # The log lost the end that held the last command applied (damaged
            # storage, or unsynced entries lost in a crash): when that command comes
            # back from the leader it covers entries fetched again, not compacted
            # here, so it must be applied again (the result is the same: idempotent).
            self._compacted_through = end - 1
        self._compact_emitted = self._compacted_through
        # The log is the truth for the configurations it holds (their saves are
        # staged like term and vote, so a crash may leave the state behind the log,
        # or ahead of a truncation); the state only for those below the log start.
        self._configs = [(o, c) for o, c in self._configs if o < storage.start_offset] + logged
        if damage is not None and (damage.lost_entries or damage.lost_state):
            self._start_healing(damage)

        self.role = Role.FOLLOWER
        self.leader: NodeId | None = None
        self.high_watermark = storage.start_offset
        self._durable_end = end
        self._leader_heard_ms = NEVER_MS
        self._election_deadline = now_ms + self._election_timeout()
        self._votes: set[NodeId] = set()

        # leader state
        self._progress: dict[NodeId, Progress] = {}
        # While _flush_appends runs: start offset -> (batches read, their end).
        self._read_once: dict[int, tuple[bytes, int]] | None = None
        self._departing: dict[NodeId, int] = {}  # removed peers still told the commit
        self._pending = PendingWrites()
        self._heartbeat_due = 0
        self._leader_since_ms = 0
        self._term_start_offset = 0
        self._transfer_to: NodeId | None = None
        self._transfer_deadline = 0
        self._timeout_now_sent = False
        self._target: tuple[NodeId, ...] | None = None
        self._target_since_ms = 0

        # outputs
        self._messages: list[Outbound] = []
        self._replies: list[ProduceReply] = []
        self._events: list[Event] = []
        self._appended = False
        self._reported_watermark = self.high_watermark
        self._removed = False
        self._transfer_backoff_until = 0
        self._quiesced = False
        self._successor = False  # named to succeed a leader membership declared dead
        self._deferred = False  # let the successor campaign first (once per leader)
        self.last_leader: NodeId | None = self.leader
        """The leader this replica last heard from (kept while it campaigns: its
        timeout may fire before membership declares that leader dead)."""
        if founding:
            assert initial is not None
            if initial.voters[0] == node_id:
                self._become_leader()
            else:
                self.leader = self.last_leader = initial.voters[0]
                self._leader_heard_ms = now_ms  # its lease: as if it had just been heard

    # ------------------------------------------------------------------ state

    def _save_state(self, *, now: bool = False) -> None:
        """Persist term, vote and configurations.

        Term, vote and configuration changes are *staged*: the shell's next
        ``sync()`` (which the ``Ready`` carrying any dependent message asks for)
        makes them durable, off the event loop. The configurations at or above the
        log start are read back from the log on restart (the log's pages may reach
        the disk before the state, or a truncation before its save), so the state
        only has to be right about those below the log start: changes to the log
        start (retention, ``InstallStart``) and a group's founding are written at
        once (``now``).
        """
        assert self.term >= self._saved_term, (self._label, self.term, self._saved_term)
        self._saved_term = self.term
        state = encode_state(
            self.term,
            self.voted_for,
            self._configs,
            self._start_epochs,
            self._healing_since,
            self._compacted_through,
        )
        if now:
            self._storage.save_state(state)
        else:
            self._storage.stage_state(state)
            self._appended = True  # the next Ready must sync

    def _load_state(self, saved: bytes) -> None:
        state = decode_state(saved)
        self.term = self._saved_term = state.term
        self.voted_for = state.vote
        self._configs = state.configs
        self._start_epochs = state.start_epochs
        self._healing_since = state.healing_since
        self._compacted_through = state.compacted_through

    def _rebuild_from_log(self) -> list[tuple[int, GroupConfig]]:
        """Apply every batch of the log to the producer table (state lives in the
        log), note its keyed compaction commands, and return the configurations the
        log holds, in offset order."""
        configs: list[tuple[int, GroupConfig]] = []
        offset = self._storage.start_offset
        end = self._storage.end_offset
        while offset < end:
            data = self._storage.read(offset, 1 << 20)
            if not data:
                break  # the log ends in a gap (keyed compaction removed its last batches)
            for position, header in iter_batches(data, verify=False, limits=self._limits):
                # Paired with the storage's check on append: batches follow each other
                # (with gaps between them where keyed compaction removed records).
                assert header.base_offset >= offset, (self._label, header.base_offset, offset)
                if not header.is_control:
                    self._producers.record(
                        header.producer_id,
                        header.base_sequence,
                        header.record_count,
                        header.base_offset,
                    )
                else:
                    batch = memoryview(data)[position : position + header.length]
                    config = config_in(header, batch, self._limits)
                    if config is not None:
                        configs.append((header.base_offset, config))
                    self._note_compact(header, batch)
                offset = header.next_offset
        # Compaction may have trimmed producers' batches below the newest command's
        # end: a table rebuilt from them must not call a sequence out of order.
        if self._compacts:
            self._forget_producers_before(self._compacts[-1][1])
        return configs

    def _log_extra(self, peer: str | None = None) -> dict[str, object]:
        """A log line's fields (:mod:`laminar.logfields`): the partition, the term, and
        ``peer`` when the line is about one."""
        extra = {**self._log_fields, TERM: self.term}
        if peer is not None:
            extra[PEER] = peer
        return extra

    # ------------------------------------------------------------------ damage

    def _start_healing(self, damage: StorageDamage) -> None:
        """Storage damage found at open: heal (see "Damaged storage")."""
        if damage.lost_state:
            # The term it reached is at least the last one its log holds.
            self.term = max(self.term, self._epochs.last_term)
            self.voted_for = None
        self._healing_since = self._storage.end_offset
        _LOG.warning(
            "%s: damaged storage (lost entries=%s, lost term and vote=%s): healing from "
            "the leader as a non-voter from offset %d",
            self._label,
            damage.lost_entries,
            damage.lost_state,
            self._healing_since,
            extra=self._log_extra(),
        )
        self._save_state(now=True)

    def _healing_since_or_none(self) -> int:
        return -1 if self._healing_since is None else self._healing_since

    @property
    def healing(self) -> bool:
        """Healing from damaged storage: it neither votes nor campaigns, and the leader
        keeps it among the learners until it has caught up (see "Damaged storage")."""
        return self._healing_since is not None

    def accept_data_loss(self, members: Sequence[NodeId] = ()) -> bool:
        """An operator's decision: stop healing and vote again with what this replica
        holds, so that a group whose replicas are all (or mostly) damaged can elect a
        leader. Acknowledged entries the elected leader lacks are lost. ``members``:
        the group's voters (the placement target), for a replica that lost its state
        and knows no configuration (a group's founding one lives in the state).
        True when the replica was healing."""
        if self._healing_since is None:
            return False
        if self.group_config is None and members:
            self._configs.insert(0, (BOOTSTRAP_OFFSET, GroupConfig(tuple(members))))
        _LOG.warning(
            "%s: accepting data loss: healing stopped at offset %d (log end %d); this "
            "replica votes again",
            self._label,
            self._healing_since,
            self._storage.end_offset,
            extra=self._log_extra(),
        )
        self._healing_since = None
        self._save_state(now=True)
        return True

    def _maybe_healed(self, offset: int, config: GroupConfig) -> None:
        """The configuration entry at ``offset`` was appended here: healed when it
        makes this replica a voter again after it was not one since the damage."""
        since = self._healing_since
        if since is None or offset < since or self.node_id not in config.voters:
            return
        previous = [c for o, c in self._configs if o < offset]
        if previous and self.node_id in previous[-1].voters:
            return  # still the voter it was: the leader has not taken it out yet
        _LOG.info(
            "%s: healed: a voter again from offset %d (damage found at %d)",
            self._label,
            offset,
            since,
            extra=self._log_extra(),
        )
        self._healing_since = None
        self._save_state()

    # ------------------------------------------------------------------ views

    @property
    def group_config(self) -> GroupConfig | None:
        """The latest configuration in the log (in effect, committed or not)."""
        return self._configs[-1][1] if self._configs else None

    @property
    def end_offset(self) -> int:
        return self._storage.end_offset

    @property
    def start_offset(self) -> int:
        return self._storage.start_offset

    @property
    def durable_end(self) -> int:
        """The log end as of the last ``advance`` of a synced ``Ready`` (or the open):
        what the shell has made durable."""
        return self._durable_end

    @property
    def removed(self) -> bool:
        return self._removed

    @property
    def target(self) -> tuple[NodeId, ...] | None:
        """The replica list last given to :meth:`set_target`."""
        return self._target

    @property
    def transferring_to(self) -> NodeId | None:
        return self._transfer_to

    def match_offsets(self) -> dict[NodeId, int]:
        """The leader's view of how far each peer's log matches its own (for status)."""
        return {peer: progress.match_offset for peer, progress in self._progress.items()}

    def in_sync_voters(self, now_ms: int) -> tuple[NodeId, ...]:
        """The voters in sync with this leader (itself included), by
        :func:`~laminar.replica.quorum.in_sync`; empty unless this replica leads."""
        if self.role is not Role.LEADER:
            return ()
        end = self._storage.end_offset
        lag_max_ms = self._config.replica_lag_max_ms
        voters = []
        for voter in self._voters():
            progress = self._progress.get(voter)
            if voter == self.node_id or (
                progress is not None
                and not progress.healing
                and in_sync(
                    now_ms=now_ms,
                    heard_ms=progress.heard_ms,
                    caught_up_ms=progress.caught_up_ms,
                    match_offset=progress.match_offset,
                    end_offset=end,
                    quiesced=self._quiesced,
                    lag_max_ms=lag_max_ms,
                )
            ):
                voters.append(voter)
        return tuple(voters)

    def _voters(self) -> tuple[NodeId, ...]:
        config = self.group_config
        return config.voters if config else ()

    def _is_voter(self) -> bool:
        return self.node_id in self._voters()

    @property
    def quiesced(self) -> bool:
        return self._quiesced

    def next_wake_ms(self) -> int:
        """When :meth:`tick` should next be called."""
        if self._removed or self._quiesced:
            return self._now + _QUIESCED_WAKE_MS
        if self.role is Role.LEADER:
            return self._heartbeat_due
        return self._election_deadline

    @property
    def term_committed(self) -> bool:
        """Whether this node leads and has committed an entry of its own term.

        Only then is every entry of earlier terms known committed, so a state
        machine applied up to the high watermark is complete (a new leader's high
        watermark may trail until its term-start no-op commits).
        """
        return self.role is Role.LEADER and self.high_watermark > self._term_start_offset

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Committed batches from ``offset``, never reaching the high watermark.

        Empty when ``offset`` is at or above the high watermark (nothing committed
        there yet); below the log start raises :class:`OffsetOutOfRangeError`.
        """
        start = self._storage.start_offset
        if offset < start:
            raise OffsetOutOfRangeError(offset, start, self.high_watermark)
        if offset >= self.high_watermark:
            return b""
        return self._storage.read(offset, max_bytes, upper_offset=self.high_watermark)

    # ------------------------------------------------------------------ inputs

    def propose(self, request_id: int, batch: Buffer, acks: Acks, now_ms: int) -> None:
        """A client's batch; the answer comes out as a :class:`ProduceReply`.

        :meth:`propose_batches` for one batch, written out (every write's path)."""
        self._now = now_ms
        self._wake()
        result = self._refuse_request(request_id, 1) or self._check_batch(request_id, batch, ())
        reply = (
            result
            if isinstance(result, ProduceReply)
            else self._accept(request_id, batch, *result, acks)
        )
        if reply is not None:
            self._replies.append(reply)

    def propose_batches(
        self,
        request_ids: Sequence[int],
        batches: Sequence[Buffer],
        acks: Acks,
        now_ms: int,
    ) -> None:
        """The batches of one produce request: every one is appended, or none is.

        Every batch is checked (format, payload structure, producer sequence) before
        any is appended; when one is refused, every batch of the request gets that
        refusal. Batches of one idempotent producer in a request must follow each
        other's sequences. Each batch is answered by its own :class:`ProduceReply`.
        """
        assert len(request_ids) == len(batches) >= 1
        self._now = now_ms
        self._wake()
        refusal = self._refuse_request(request_ids[0], len(batches))
        checked: list[tuple[BatchHeader, SequenceCheck]] = []
        for request_id, batch in zip(request_ids, batches, strict=True):
            if refusal is not None:
                break
            result = self._check_batch(request_id, batch, checked)
            if isinstance(result, ProduceReply):
                refusal = result
            else:
                checked.append(result)
        if refusal is not None:
            self._replies.extend(
                dataclasses.replace(refusal, request_id=request_id) for request_id in request_ids
            )
            return
        for request_id, batch, (header, check) in zip(request_ids, batches, checked, strict=True):
            reply = self._accept(request_id, batch, header, check, acks)
            if reply is not None:
                self._replies.append(reply)

    def _refuse_request(self, request_id: int, batch_count: int) -> ProduceReply | None:
        """Why this replica takes no write now, or None."""
        if self.role is not Role.LEADER:
            return ProduceReply(request_id, ProduceStatus.NOT_LEADER, leader_hint=self.leader)
        if self._transfer_to is not None:
            return ProduceReply(
                request_id,
                ProduceStatus.NOT_LEADER,
                leader_hint=self._transfer_to,
                detail="leadership is being transferred",
            )
        woke_recently = self._now - self._leader_since_ms < self._config.election_timeout_max_ms
        if not (woke_recently or self._has_recent_quorum()):
            return ProduceReply(
                request_id, ProduceStatus.UNAVAILABLE, detail="no quorum of replicas reachable"
            )
        if len(self._pending) + batch_count > self._config.pending_produce_max:
            return ProduceReply(
                request_id, ProduceStatus.UNAVAILABLE, detail="too many writes awaiting commit"
            )
        return None

    def _check_batch(
        self,
        request_id: int,
        batch: Buffer,
        earlier: Sequence[tuple[BatchHeader, SequenceCheck]],
    ) -> tuple[BatchHeader, SequenceCheck] | ProduceReply:
        """A batch's header and sequence verdict, or the reply refusing it.

        ``earlier``: the checked batches before it in the same request.
        """
        try:
            header = verify_batch(batch, limits=self._limits)  # on receipt, once
            if header.length == len(batch):
                check_payload(batch, header, limits=self._limits)
        except RecordFormatError as error:
            return ProduceReply(request_id, ProduceStatus.INVALID, detail=str(error))
        if header.length != len(batch):
            return ProduceReply(
                request_id,
                ProduceStatus.INVALID,
                detail=f"buffer holds {len(batch)} bytes, the batch {header.length}",
            )
        if header.is_control:
            return ProduceReply(
                request_id, ProduceStatus.INVALID, detail="control batches are internal"
            )
        check = self._producers.admit(header, earlier)
        match check:
            case NotConsecutive():
                return ProduceReply(request_id, ProduceStatus.INVALID, detail=check.detail)
            case SequenceCheck(verdict=Verdict.OUT_OF_ORDER):
                if not self._has_lease():
                    # A deposed leader (cut off, or idle and quiesced) may not know the
                    # producer's latest batches: only a confirmed leader may say "gap".
                    return ProduceReply(
                        request_id,
                        ProduceStatus.UNAVAILABLE,
                        detail="cannot confirm the producer's sequence yet; retry",
                    )
                return ProduceReply(
                    request_id,
                    ProduceStatus.OUT_OF_ORDER_SEQUENCE,
                    expected_sequence=check.expected_sequence,
                    detail=f"expected sequence {check.expected_sequence}, "
                    f"got {header.base_sequence}",
                )
            case SequenceCheck():
                return header, check
            case _:
                assert_never(check)

    def _accept(
        self,
        request_id: int,
        batch: Buffer,
        header: BatchHeader,
        check: SequenceCheck,
        acks: Acks,
    ) -> ProduceReply | None:
        """Append a checked batch (or answer a duplicate); None when the answer waits
        for the commit."""
        if check.verdict is Verdict.DUPLICATE:
            original_next = check.base_offset + header.record_count
            if acks is Acks.ALL and original_next > self.high_watermark:
                self._pending.add(
                    original_next, request_id, check.base_offset, ProduceStatus.DUPLICATE
                )
                return None
            return ProduceReply(request_id, ProduceStatus.DUPLICATE, base_offset=check.base_offset)
        base = self._storage.append(batch, term=self.term, verified=True)
        self._note_appended(header._replace(base_offset=base, term=self.term), batch)
        if acks is Acks.ALL:
            self._pending.add(base + header.record_count, request_id, base, ProduceStatus.OK)
            return None
        return ProduceReply(request_id, ProduceStatus.OK, base_offset=base)

    def set_target(self, replicas: Sequence[NodeId], now_ms: int) -> None:
        """The replica list placement wants, best first (first = preferred leader).

        Only the leader acts on it, once it has been unchanged for
        ``reconfigure_stable_ms``; every replica keeps it in case it becomes leader.
        """
        self._now = now_ms
        target = tuple(dict.fromkeys(replicas))
        if target != self._target:
            self._target = target or None
            self._target_since_ms = now_ms
            self._wake()

    def peer_returned(self, peer: NodeId, now_ms: int) -> None:
        """Membership says ``peer``'s node is alive again: a leader that quiesced
        while it was dead wakes up to bring it up to date."""
        self._now = now_ms
        if self.role is Role.LEADER and peer in self._progress:
            self._wake()

    def led_by(self, node: NodeId | str) -> bool:
        """Whether ``node`` is this replica's leader, or the last one it heard from
        while it knows of none (campaigning): a death hint about ``node`` concerns it."""
        return self.leader == node or (self.leader is None and self.last_leader == node)

    def hint_leader_dead(self, now_ms: int) -> None:
        """Membership says the leader is dead: forget its lease and campaign soon."""
        self._now = now_ms
        if self.role in (Role.FOLLOWER, Role.PRE_CANDIDATE) and not self._removed:
            self._leader_gone()

    def _leader_gone(self) -> None:
        """The leader no longer leads: drop its lease (and quiescence) and campaign
        soon: the successor at once, the others only if it does not win.

        The successor is the first voter after the dead leader in the placement
        target's order (the config's without a target), which every survivor
        computes alike; so survivors told at once do not split the vote (with
        random head starts alone, thousands of groups losing their leader together
        split hundreds of votes). It retries a refused pre-vote (a voter not told
        yet keeps the lease) every quarter timeout or so; pre-votes raise no term.
        The others wait two election timeouts (stretched while the node is slow),
        time for the successor to win even on a busy node: one that starts early
        grants the successor's pre-vote and campaigns itself, and two candidates of
        a two-node majority split the vote.
        """
        gone = self.leader if self.leader is not None else self.last_leader
        # Told already since the leader was last heard (its pre-votes, membership's
        # hints, each repeated): the wait set then stands, else a leader that keeps
        # pre-voting with a shorter log would put off everyone's campaign for ever.
        told = self._deferred and self._leader_heard_ms == NEVER_MS
        self._quiesced = False
        self._leader_heard_ms = NEVER_MS
        base = self._config.election_timeout_min_ms
        self._successor = gone is not None and self._successor_of(gone) == self.node_id
        self._deferred = True  # its own wait follows
        if self._successor:
            spread = self._rng.randint(0, base // 8)
            self._election_deadline = min(self._election_deadline, self._now + spread)
        elif not told:
            self._election_deadline = self._now + 2 * self._election_timeout()

    def transfer_leadership(self, target: NodeId, now_ms: int) -> bool:
        """Start handing leadership to ``target`` (a voter); False when not possible."""
        self._now = now_ms
        if (
            self.role is not Role.LEADER
            or target == self.node_id
            or target not in self._voters()
            or target not in self._progress
            or self._progress[target].healing
        ):
            return False
        self._wake()
        self._transfer_to = target
        self._transfer_deadline = now_ms + self._config.transfer_timeout_ms
        self._timeout_now_sent = False
        self._maybe_send_timeout_now()
        return True

    def tick(self, now_ms: int) -> None:
        self._now = now_ms
        if self._removed:
            return
        if self.role is Role.LEADER:
            if now_ms >= self._heartbeat_due:
                self._leader_tick()
            return
        if now_ms >= self._election_deadline:
            self._election_deadline = now_ms + self._election_timeout()
            if self._healing_since is not None:
                self._announce_healing()  # even to a quiesced leader: it must wake
                return
            if (
                self._quiesced
                and self.leader is not None
                and self._liveness.peer_alive(self.leader)
            ):
                return  # idle, and its leader's node is alive: nothing to do
            if self._may_campaign() and not self._leader_presumed_alive(now_ms):
                if self._defer_to_successor():
                    return
                self._campaign(pre_vote=self._config.pre_vote)

    def _announce_healing(self) -> None:
        """A healing replica does not campaign: when it hears no leader for a timeout,
        or only heartbeats from one that has not sent it an append since, it tells
        that leader (else every member it knows) where its log ends and that it
        heals, which wakes a quiesced leader and makes it probe this log again."""
        leader = self.leader if self.leader is not None else self.last_leader
        # Without a leader heard of: the members it knows, else (its state lost, the
        # founding configuration with it) the placement target the shell gave it.
        peers = [leader] if leader is not None else list(self._members() or self._target or ())
        response = AppendResponse(
            self.term,
            self.node_id,
            success=False,
            match_offset=-1,
            end_offset=self._storage.end_offset,
            healing_since=self._healing_since_or_none(),
        )
        for peer in peers:
            if peer != self.node_id:
                self._messages.append(Outbound(peer, response))

    def _may_campaign(self) -> bool:
        """A voter campaigns (on a timeout, or handed leadership) only while its node
        may lead (see :meth:`NodeLiveness.may_lead`)."""
        return self._is_voter() and self._liveness.may_lead()

    def _successor_of(self, leader: NodeId) -> NodeId | None:
        """The voter that succeeds ``leader``: the first after it in the placement
        target's order (the configuration's without a target); every replica
        computes the same."""
        voters = self._voters()
        order = [v for v in (self._target or voters) if v in voters and v != leader]
        return order[0] if order else None

    def _defer_to_successor(self) -> bool:
        """A follower whose leader went silent lets the successor campaign first:
        it waits one more election timeout, once per leader (reset when a leader is
        heard). Timeouts fire before membership declares the leader dead when
        clients keep the groups busy; without this, both survivors of a group
        campaigned at once and split the vote in hundreds of groups."""
        if self.role is not Role.FOLLOWER or self._deferred:
            return False
        leader = self.leader if self.leader is not None else self.last_leader
        if leader is None or self._successor_of(leader) in (None, self.node_id):
            return False
        self._deferred = True
        self._election_deadline = self._now + self._election_timeout()
        return True

    def _leader_presumed_alive(self, now_ms: int) -> bool:
        """The group's timeout passed, but the node knows better: its leader's node
        talks to this one, or this node is too slow for its timers to mean anything
        (see :class:`NodeLiveness`). Never after a hint that the leader died."""
        leader = self.leader
        if leader is None or self.role is not Role.FOLLOWER:
            return False
        return leader_presumed_alive(
            self._liveness,
            leader,
            now_ms=now_ms,
            leader_heard_ms=self._leader_heard_ms,
            election_timeout_min_ms=self._config.election_timeout_min_ms,
            election_timeout_max_ms=self._config.election_timeout_max_ms,
        )

    def step(self, source: NodeId, message: Message, now_ms: int) -> None:
        """A message from peer ``source``."""
        self._now = now_ms
        if self._removed:
            return
        match message:
            case AppendRequest():
                self._on_append(message)
            case AppendResponse():
                self._on_append_response(message)
            case Heartbeat():
                self._on_heartbeat(message)
            case HeartbeatResponse():
                self._on_heartbeat_response(message)
            case VoteRequest():
                self._on_vote_request(message)
            case VoteResponse():
                self._on_vote_response(message)
            case TimeoutNow():
                self._on_timeout_now(message)
            case InstallStart():
                self._on_install_start(message)
            case _:
                assert_never(message)

    # ------------------------------------------------------------------ outputs

    def has_ready(self) -> bool:
        if self.role is Role.LEADER:
            self._flush_appends()
        return bool(
            self._messages
            or self._replies
            or self._events
            or self._appended
            or self._reported_watermark != self.high_watermark
        )

    def ready(self) -> Ready:
        if self.role is Role.LEADER:
            self._flush_appends()
        if self._compacts and self._compacts[-1][0] > self._compact_emitted:
            self._emit_compacts()
        early = tuple(m for m in self._messages if isinstance(m.message, _EARLY))
        late = tuple(m for m in self._messages if not isinstance(m.message, _EARLY))
        ready = Ready(
            early_messages=early,
            messages=late,
            replies=tuple(self._replies),
            events=tuple(self._events),
            sync=self._appended,
            end_offset=self._storage.end_offset,
            committed_from=self._reported_watermark,
            high_watermark=self.high_watermark,
        )
        self._messages.clear()
        self._replies.clear()
        self._events.clear()
        self._appended = False
        self._reported_watermark = self.high_watermark
        return ready

    def advance(self, ready: Ready) -> None:
        """The shell carried ``ready`` out: its batches are durable."""
        if ready.sync and ready.end_offset > self._durable_end:
            self._durable_end = min(ready.end_offset, self._storage.end_offset)
        if self.role is Role.LEADER:
            self._maybe_commit()

    # ------------------------------------------------------------------ log changes

    def _note_appended(self, header: BatchHeader, batch: Buffer) -> None:
        """Bookkeeping for one batch just appended (by leader or follower)."""
        self._appended = True
        self._epochs.note_append(header.term, header.base_offset)
        if not header.is_control:
            self._producers.record(
                header.producer_id, header.base_sequence, header.record_count, header.base_offset
            )
            return
        self._note_compact(header, batch)
        config = config_in(header, batch, self._limits)
        if config is not None:
            assert self._configs and self._configs[-1] == (header.base_offset, config), self._label
            self._events.append(ConfigChanged(config, header.base_offset))
            if self.role is Role.LEADER:
                self._leader_config_changed(config)

    def _record_config(self, base_offset: int, config: GroupConfig) -> None:
        """Note a configuration entry before its batch is appended. Its save is
        staged (made durable by the next sync, off the event loop) like term and
        vote: on restart the configurations are read back from the log itself, so
        a state file behind the log loses nothing. (Saving at once cost three
        fsyncs on the loop per change: a node failure that reconfigures thousands
        of groups blocked it for seconds.)"""
        self._configs.append((base_offset, config))
        self._save_state()
        self._maybe_healed(base_offset, config)

    # ------------------------------------------------------------------ keyed compaction

    def propose_compact(self, value: bytes, now_ms: int) -> int | None:
        """Append a keyed compaction command (its shell's decision, ``value`` the
        engine's ``CompactCommand.to_value()``) as a ``compact`` control batch; its
        offset, or None when this replica may not (it does not lead, has not
        committed an entry of its term yet, or hands leadership over). Every replica
        gets a :class:`Compact` once the batch is committed."""
        self._now = now_ms
        assert len(value) <= COMMAND_VALUE_BYTES_MAX, (self._label, len(value))
        if self.role is not Role.LEADER or not self.term_committed or self._transfer_to:
            return None
        self._wake()
        batch = encode_compact(value, now_ms)
        base = self._storage.append(batch, term=self.term)
        self._note_appended(parse_header(batch)._replace(base_offset=base, term=self.term), batch)
        _LOG.info(
            "%s: keyed compaction command at offset %d",
            self._label,
            base,
            extra=self._log_extra(),
        )
        return base

    def compaction_done(self, offset: int) -> None:
        """The shell applied the compaction command at ``offset`` (and every earlier
        one): after a restart, only later commands are given again. Saved with the
        next sync (a command re-run after a crash is harmless: idempotent)."""
        if offset > self._compacted_through:
            self._compacted_through = offset
            self._save_state()

    @property
    def compacted_through(self) -> int:
        """The offset of the last compaction command the shell applied (-1: none)."""
        return self._compacted_through

    @property
    def compact_commands(self) -> tuple[tuple[int, bytes], ...]:
        """The compaction commands this replica knows in its log, ``(offset, value)``
        ascending (committed or not; older ones until :meth:`prune_compact_commands`)."""
        return tuple(self._compacts)

    def prune_compact_commands(self, before: int) -> None:
        """Forget the commands below offset ``before`` already given to the shell (it
        keeps what its decisions need)."""
        limit = min(before, self._compact_emitted + 1)
        self._compacts = [entry for entry in self._compacts if entry[0] >= limit]

    def _note_compact(self, header: BatchHeader, batch: Buffer) -> None:
        value = compact_in(header, batch, self._limits)
        if value is not None:
            assert not self._compacts or self._compacts[-1][0] < header.base_offset, self._label
            self._compacts.append((header.base_offset, value))

    def _emit_compacts(self) -> None:
        """A :class:`Compact` for every command the high watermark passed since the
        last ``Ready`` (each once)."""
        for offset, value in self._compacts:
            if offset <= self._compact_emitted:
                continue
            if offset >= self.high_watermark:
                break
            self._compact_emitted = offset
            self._forget_producers_before(value)
            self._events.append(Compact(offset, value))

    def _forget_producers_before(self, value: bytes) -> None:
        try:
            end = command_end(value)
        except CorruptBatchError as error:
            _LOG.warning("%s: %s", self._label, error, extra=self._log_extra())
            return
        self._producers.forget_before(end)

    # ------------------------------------------------------------------ log start

    def advance_start(self, offset: int, now_ms: int) -> None:
        """Retention: drop the log below ``offset`` (whole storage units at most up to
        it, and never past the high watermark: only committed entries go)."""
        self._now = now_ms
        target = min(offset, self.high_watermark, self._durable_end)
        storage = self._storage
        if target <= storage.start_offset:
            return
        # Saved before the delete: after a crash in between, the saved pairs still
        # answer for whichever start the log then has.
        pairs = []
        if storage.start_offset > 0 and self._epochs.start_term >= 0:
            pairs.append([self._epochs.start_term, storage.start_offset - 1])
        pairs += [[term, start] for term, start in self._epochs.as_list() if start < target]
        self._start_epochs = pairs
        self._save_state(now=True)
        storage.delete_before(target)
        self._epochs.drop_before(storage.start_offset, storage.end_offset)

    def _saved_term_at(self, offset: int) -> int:
        """The term of the entry at ``offset`` below the log start, from the saved pairs."""
        term = -1
        for known_term, start in self._start_epochs:
            if start <= offset:
                term = known_term
        return term if offset >= 0 else -1

    def _send_install(
        self, peer: NodeId, progress: Progress, *, start: int = -1, discard: bool = False
    ) -> None:
        """Tell ``peer`` to continue from ``start`` (the log start by default):
        ``discard``, restart its log there even where it matches (see
        :meth:`_check_peer_log`)."""
        if start < 0:
            start = self._storage.start_offset
        config_offset, config = BOOTSTRAP_OFFSET, self.group_config
        for known_offset, known in self._configs:
            if known_offset < start:
                config_offset, config = known_offset, known
        assert config is not None
        request = InstallStart(
            term=self.term,
            leader=self.node_id,
            start_offset=start,
            start_term=self._term_before(start),
            config=msgpack.packb([config_offset, list(config.voters), list(config.learners)]),
            commit_offset=self.high_watermark,
            discard=discard,
        )
        self._messages.append(Outbound(peer, request))
        progress.sent(start, self._now, advance=False)
        if discard:
            _LOG.info(
                "%s: %s matches only below removed tombstones and holds records of its own: "
                "restarting its log at %d",
                self._label,
                peer,
                start,
                extra=self._log_extra(peer),
            )
            return
        _LOG.info(
            "%s: %s is below the log start %d: sending the start",
            self._label,
            peer,
            start,
            extra=self._log_extra(peer),
        )

    def _tombstones_end(self) -> int:
        """The newest keyed compaction command's ``tombstones_end`` in this log (T
        never goes back from one command to the next); 0 without one."""
        for _, value in reversed(self._compacts):
            try:
                return command_tombstones_end(value)
            except CorruptBatchError:
                continue  # (refused by the shell when given to it)
        return 0

    def _check_peer_log(self, peer: NodeId, progress: Progress, response: AppendResponse) -> bool:
        """The first match of a peer whose log this leader does not know (a new
        progress: after an election, a peer added, or one healing from damage) is
        checked against removed tombstones; True once the peer's log may be used.

        Below the newest command's ``tombstones_end`` T this log has tombstones
        removed. A peer whose log matches only at X < T and holds records of its own
        below X (its log starts below X) would take the range from X on with those
        tombstones gone: a record of its own that only such a tombstone superseded
        would survive there alone (a deleted key back on one replica). A peer that
        held this leader's log when each command was decided matches at or past T
        (the driver holds T to every peer's match), so this is a peer that lost
        entries to damaged storage, or was removed and added again with an old log.
        It is told to restart its log past X (``InstallStart.discard``) and its
        answers count for nothing until its log starts there."""
        log_start = response.log_start
        if progress.own_end < 0:
            # It matched at the request's start P. Below T it was sent nothing (see
            # _send_append), so its log up to its end is its own.
            if response.prev_end_offset >= self._tombstones_end() or (
                log_start >= response.end_offset
            ):
                progress.log_checked = True
                return True
            progress.own_end = min(response.end_offset, self._storage.end_offset)
        if log_start >= progress.own_end:
            progress.log_checked = True
            progress.own_end = -1
            return True
        start = progress.own_end
        if start > self.high_watermark or start < self._storage.start_offset:
            # Not committed that far here yet (a new leader), or below the log start
            # (retention): ask again on the peer's next answer (its probe is
            # retransmitted; below the start, it gets the start).
            return False
        self._send_install(peer, progress, start=start, discard=True)
        return False

    def _on_install_start(self, request: InstallStart) -> None:
        if request.term < self.term:
            return  # a stale leader's; its heartbeats learn our term
        self._heard_from_leader(request.term, request.leader)
        storage = self._storage
        start = request.start_offset
        matches = (
            storage.start_offset <= start <= storage.end_offset
            and self._term_before(start) == request.start_term
        )
        if request.discard and self.high_watermark > start:
            return  # the leader asks again from further on (see InstallStart.discard)
        if not matches or (request.discard and storage.start_offset < start):
            # Everything we hold below ``start`` is committed (and so matches) only up to
            # our high watermark, which is at most ``start`` here: drop it all.
            assert self.high_watermark <= start, (self._label, self.high_watermark, start)
            config_offset, voters, learners = msgpack.unpackb(request.config)
            storage.reset(start)
            self._epochs.reset(start, request.start_term)
            self._producers.clear()
            self._compacts.clear()
            self._durable_end = start
            self._start_epochs = [[request.start_term, start - 1]] if start > 0 else []
            self._configs = [
                (
                    int(config_offset),
                    GroupConfig(tuple(map(NodeId, voters)), tuple(map(NodeId, learners))),
                )
            ]
            self._save_state(now=True)
            self._follow_commit(start)
            _LOG.info(
                "%s: log restarted at %d from %s",
                self._label,
                start,
                request.leader,
                extra=self._log_extra(request.leader),
            )
        self._follow_commit(min(request.commit_offset, storage.end_offset, start))
        self._acknowledge(request.leader, match_offset=start, prev_end_offset=start)

    def _truncate(self, offset: int) -> None:
        assert offset >= self.high_watermark, (
            f"{self._label}: truncating committed entries ({offset} < {self.high_watermark})"
        )
        self._storage.truncate_suffix(offset)
        self._epochs.truncate(offset)
        self._producers.truncate(offset)
        self._compacts = [entry for entry in self._compacts if entry[0] < offset]
        self._durable_end = min(self._durable_end, offset)
        kept = [(o, c) for o, c in self._configs if o < offset]
        if len(kept) != len(self._configs):
            self._configs = kept
            self._save_state()  # staged: a restart reads the configurations from the log
            config = self.group_config
            if config is not None:
                self._events.append(ConfigChanged(config, self._configs[-1][0]))

    def _boundary_at_or_below(self, offset: int) -> int:
        """The start of the batch holding ``offset`` in this log (clamped to the log)."""
        start, end = self._storage.start_offset, self._storage.end_offset
        if offset >= end:
            return end
        if offset <= start:
            return start
        data = self._storage.read(offset, 1)
        base = parse_header(data, limits=self._limits).base_offset
        # In a gap (keyed compaction) the read gives the batch after it: the gap's
        # offsets hold nothing, so the offset itself is a boundary.
        return min(base, offset)

    def _term_before(self, offset: int) -> int:
        """Term of the entry just before ``offset`` (-1 at the very beginning)."""
        return self._epochs.term_at(offset - 1) if offset > 0 else -1

    # ------------------------------------------------------------------ roles

    def _election_timeout(self) -> int:
        """A random election timeout, stretched while the node is slow (its timers
        fire late and its peers' messages wait in its queue: campaigning then only
        adds load, see :class:`NodeLiveness`)."""
        timeout = self._rng.randint(
            self._config.election_timeout_min_ms, self._config.election_timeout_max_ms
        )
        return stretched_ms(timeout, self._liveness.slowness())

    def _set_role(self, role: Role, leader: NodeId | None) -> None:
        if role is not self.role or leader != self.leader:
            self.role = role
            self.leader = leader
            self._events.append(RoleChanged(role, self.term, leader))

    def _become_follower(self, term: int, leader: NodeId | None) -> None:
        was_leader = self.role is Role.LEADER
        if term > self.term:
            self.term = term
            self.voted_for = None
            self._save_state()
        if was_leader:
            self._abandon_leadership(leader)
        self._votes.clear()
        self._set_role(Role.FOLLOWER, leader)
        self._election_deadline = self._now + self._election_timeout()

    def _abandon_leadership(self, new_leader: NodeId | None) -> None:
        self._pending.abandon(new_leader, self._replies)
        self._progress.clear()
        self._departing.clear()
        self._transfer_to = None

    def _campaign(self, *, pre_vote: bool, transfer: bool = False) -> None:
        voters = self._voters()
        self._votes = {self.node_id}
        if pre_vote:
            self._set_role(Role.PRE_CANDIDATE, None)
            term = self.term + 1
        else:
            self.term += 1
            self.voted_for = self.node_id
            self._save_state()
            self._set_role(Role.CANDIDATE, None)
            term = self.term
        self._election_deadline = self._now + self._election_timeout()
        if pre_vote and self._successor:  # retry soon: see _leader_gone
            quarter = self._config.election_timeout_min_ms // 4
            self._election_deadline = self._now + quarter + self._rng.randint(0, quarter)
        request = VoteRequest(
            term=term,
            candidate=self.node_id,
            end_offset=self._storage.end_offset,
            last_term=self._epochs.last_term,
            pre_vote=pre_vote,
            transfer=transfer,
        )
        for voter in voters:
            if voter != self.node_id:
                self._messages.append(Outbound(voter, request))
        self._check_votes()

    def _check_votes(self) -> None:
        voters = self._voters()
        granted = sum(1 for voter in voters if voter in self._votes)
        if granted < len(voters) // 2 + 1:
            return
        if self.role is Role.PRE_CANDIDATE:
            self._campaign(pre_vote=False)
        elif self.role is Role.CANDIDATE:
            self._become_leader()

    def _become_leader(self) -> None:
        self._votes.clear()
        self._successor = False
        self._set_role(Role.LEADER, self.node_id)
        self._leader_since_ms = self._now
        end = self._storage.end_offset
        self._progress = {}
        for peer in self._members():
            if peer != self.node_id:
                self._progress[peer] = Progress(next_offset=end, heard_ms=self._now)
        self._departing.clear()
        if len(self._configs) > 1:
            # Members the latest change removed may not know yet: keep telling them.
            for peer in self._configs[-2][1].members:
                if peer != self.node_id and peer not in self._progress:
                    self._progress[peer] = Progress(next_offset=end, heard_ms=self._now)
                    self._departing[peer] = -1
        self._transfer_to = None
        self._term_start_offset = end
        noop = encode_control_batch(CONTROL_NOOP, b"", self._now)
        base = self._storage.append(noop, term=self.term)
        self._note_appended(parse_header(noop)._replace(base_offset=base, term=self.term), noop)
        self._heartbeat_due = self._now  # announce at once
        self._leader_tick()
        self._maybe_commit()

    def _members(self) -> tuple[NodeId, ...]:
        config = self.group_config
        return config.members if config else ()

    def _leader_config_changed(self, config: GroupConfig) -> None:
        end = self._storage.end_offset
        for peer in config.members:
            if peer == self.node_id:
                continue
            if peer not in self._progress or peer in self._departing:
                # New, or re-added while its removal was still being told: it may
                # have deleted its replica since, so nothing it held is assumed.
                self._progress[peer] = Progress(next_offset=end, heard_ms=self._now)
            self._departing.pop(peer, None)
        for peer in list(self._progress):
            if peer not in config.members:
                # Keep replicating until the change commits, so the peer learns it left.
                self._departing[peer] = -1

    # ------------------------------------------------------------------ leader

    def _leader_tick(self) -> None:
        now = self._now
        self._heartbeat_due = now + self._config.heartbeat_interval_ms
        if self._quiesced:
            return
        if (
            self._config.check_quorum
            and now - self._leader_since_ms >= self._config.election_timeout_max_ms
            and not self._has_recent_quorum()
        ):
            _LOG.info(
                "%s: lost contact with a quorum, stepping down",
                self._label,
                extra=self._log_extra(),
            )
            self._become_follower(self.term, None)
            return
        if self._transfer_to is not None and now >= self._transfer_deadline:
            self._transfer_to = None  # abandoned; proposals resume
            self._transfer_backoff_until = now + 5 * self._config.transfer_timeout_ms
        retransmit_ms = self._config.election_timeout_min_ms // 2
        for progress in self._progress.values():
            progress.expire(now, retransmit_ms)
        quiesce = self._may_quiesce()
        for peer, progress in self._progress.items():
            commit = min(self.high_watermark, max(progress.match_offset, 0))
            member = self._departing.get(peer, -1) < 0  # still in, or removal uncommitted
            heartbeat = Heartbeat(self.term, self.node_id, commit, member=member, quiesce=quiesce)
            self._messages.append(Outbound(peer, heartbeat))
        if quiesce:
            self._quiesced = True
            return
        self._expire_departing()
        self._maybe_reconfigure()
        self._maybe_prefer_leader()

    def _has_lease(self) -> bool:
        """A majority of voters answered within the minimum election timeout, so no
        other leader can have been elected meanwhile (they refuse votes that long)."""
        return self._majority_heard_within(self._config.election_timeout_min_ms)

    def _has_recent_quorum(self) -> bool:
        """Check-quorum: a majority answered within the maximum election timeout
        (stretched while the node is slow), or their nodes talked to this one."""
        if not self._config.check_quorum:
            return True
        window = self._config.election_timeout_max_ms * self._liveness.slowness()
        return self._majority_heard_within(int(window), node_level=True)

    def _majority_heard_within(self, window_ms: int, *, node_level: bool = False) -> bool:
        return majority_heard(
            self._voters(),
            leader=self.node_id,
            now_ms=self._now,
            window_ms=window_ms,
            heard_ms=self._heard_ms,
            node_heard_ms=self._liveness.peer_heard_ms if node_level else None,
        )

    def _heard_ms(self, peer: NodeId) -> int:
        """When this leader last heard from ``peer``'s replica."""
        progress = self._progress.get(peer)
        return progress.heard_ms if progress is not None else NEVER_MS

    def _flush_appends(self) -> None:
        # Followers in step get the same batches: read them from the log once.
        self._read_once = {}
        try:
            for peer, progress in self._progress.items():
                self._send_appends(peer, progress)
        finally:
            self._read_once = None  # the log changes after this: never reuse a read
        self._maybe_send_timeout_now()

    def _send_appends(self, peer: NodeId, progress: Progress) -> None:
        end = self._storage.end_offset
        # A learner (healing, or new) catches up within the node's recovery budget.
        recovering = progress.healing or peer not in self._voters()
        if progress.mode is Mode.PROBE:
            if not progress.inflight:
                self._send_append(peer, progress, advance=False, recovering=recovering)
            return
        while progress.next_offset < end and len(progress.inflight) < (
            self._config.inflight_appends_max
        ):
            if not self._send_append(peer, progress, advance=True, recovering=recovering):
                return  # out of recovery budget: a later flush sends on

    def _send_append(
        self, peer: NodeId, progress: Progress, *, advance: bool, recovering: bool = False
    ) -> bool:
        """Send ``peer`` an append from its next offset; False (nothing sent) when it
        is ``recovering`` and the node's recovery budget is spent."""
        start = progress.next_offset
        if start < self._storage.start_offset:
            self._send_install(peer, progress)
            return True
        data = b""
        request_end = start
        if not progress.log_checked and start < self._tombstones_end():
            pass  # nothing until its log is checked (_check_peer_log): a probe alone
        elif start < self._storage.end_offset and recovering:
            grant = self._liveness.recovery_grant()
            if grant <= 0:
                return False
            data = self._storage.read(start, min(grant, self._config.append_bytes_max))
            request_end = next_offset(data)
            self._liveness.recovery_spend(len(data))
        elif start < self._storage.end_offset:
            shared = self._read_once
            cached = shared.get(start) if shared is not None else None
            if cached is None:
                data = self._storage.read(start, self._config.append_bytes_max)
                request_end = next_offset(data)
                if shared is not None:
                    shared[start] = (data, request_end)
            else:
                data, request_end = cached
        assert start <= request_end <= self._storage.end_offset, (self._label, start, request_end)
        request = AppendRequest(
            term=self.term,
            leader=self.node_id,
            prev_end_offset=start,
            prev_term=self._term_before(start),
            batches=data,
            end_offset=request_end,
            commit_offset=self.high_watermark,
        )
        self._messages.append(Outbound(peer, request))
        progress.sent(request_end, self._now, advance=advance)
        return True

    def _on_append_response(self, response: AppendResponse) -> None:
        if response.term > self.term:
            self._become_follower(response.term, None)
            return
        if self.role is not Role.LEADER or response.term < self.term:
            return
        progress = self._progress.get(response.follower)
        if progress is None:
            return
        progress.heard_ms = self._now
        progress.reported_end = response.end_offset
        since = response.healing_since
        if since >= 0 and since not in (progress.healed_since, progress.healing_since):
            # Damaged storage: what it said before no longer holds (its log may be
            # shorter now); it leaves the voters (_maybe_reconfigure) and its log is
            # probed again. (A damage this leader promoted it back from is old news.)
            self._forget_log_of(response.follower, progress, since)
            self._wake()
        elif progress.healing and since != progress.healing_since:
            return  # sent before the damage: it says nothing about its log now
        if response.success:
            # Paired with the assertion on sending: only this leader's log is acked.
            assert response.match_offset <= self._storage.end_offset, (
                self._label,
                response.follower,
                response.match_offset,
                self._storage.end_offset,
            )
            if not progress.log_checked and not self._check_peer_log(
                response.follower, progress, response
            ):
                return
            progress.acknowledged(response.match_offset, self._storage.end_offset, self._now)
            self._maybe_commit()
            return
        if progress.stale_rejection(response.prev_end_offset):
            return
        if 0 < response.prev_end_offset <= self._storage.start_offset:
            # No match at our log start: nothing older to probe; the follower restarts
            # its log at our start.
            progress.probe(self._storage.start_offset - 1)
            return
        candidate = probe_after_rejection(
            conflict_term=response.conflict_term,
            conflict_start=response.conflict_start,
            follower_end=response.end_offset,
            prev_end_offset=response.prev_end_offset,
            match_offset=progress.match_offset,
            epochs=self._epochs,
            log_start=self._storage.start_offset,
            log_end=self._storage.end_offset,
        )
        progress.probe(self._boundary_at_or_below(candidate))

    def _on_heartbeat_response(self, response: HeartbeatResponse) -> None:
        if response.term > self.term:
            self._become_follower(response.term, None)
            return
        if self.role is not Role.LEADER or response.term < self.term:
            return
        progress = self._progress.get(response.follower)
        if progress is not None:
            progress.heard_ms = self._now
            progress.reported_end = response.end_offset
            progress.reported_watermark = response.high_watermark
            if progress.match_offset >= self._storage.end_offset:
                progress.caught_up_ms = self._now

    def _forget_log_of(self, peer: NodeId, progress: Progress, since: int) -> None:
        """``peer`` heals from damaged storage found at ``since``: nothing it said
        before counts; probe its log again, and it leaves the voters meanwhile."""
        _LOG.info(
            "%s: %s heals from damaged storage: probing its log again",
            self._label,
            peer,
            extra=self._log_extra(peer),
        )
        progress.forget_log(since, self._storage.end_offset)

    def _may_quiesce(self) -> bool:
        """Idle, settled, and every peer holds the whole log and knows it is committed."""
        if (
            not self._config.quiesce
            or self._pending
            or self._transfer_to is not None
            or self._departing
            or not self._stable_leader()
        ):
            return False
        end = self._storage.end_offset
        if self.high_watermark != end or self._durable_end != end:
            return False
        config = self.group_config
        target = self._target
        if config is None or config.learners:
            return False
        if target is not None:
            # During the move grace a dead node stays in the target, maybe first.
            preferred = next((n for n in target if not self._liveness.peer_dead(n)), None)
            if set(target) != set(config.voters) or preferred != self.node_id:
                return False  # reconfiguration or a preferred-leader transfer is due
        settled = 1  # this leader
        for peer, progress in self._progress.items():
            if progress.healing:
                return False  # it is to be demoted, then promoted back
            if (
                progress.match_offset == end
                and progress.reported_watermark == end
                and not progress.inflight
            ):
                settled += peer in config.voters
            elif not self._liveness.peer_dead(peer) or peer not in config.voters:
                return False
            # else: a voter on a node membership declared dead. Heartbeating it until
            # placement moves its replica away (the move grace) kept thousands of
            # groups awake after a node failure; :meth:`peer_returned` wakes the
            # group when it is back.
        return settled >= len(config.voters) // 2 + 1

    def _wake(self) -> None:
        """Leave quiescence: the leader heartbeats again, followers expect it."""
        if not self._quiesced:
            return
        self._quiesced = False
        if self.role is Role.LEADER:
            self._heartbeat_due = self._now
            self._leader_since_ms = self._now  # check-quorum starts counting afresh
            for progress in self._progress.values():
                progress.reported_watermark = -1
        else:
            self._election_deadline = self._now + self._election_timeout()

    def _maybe_commit(self) -> None:
        committed = commit_offset(
            self._voters(),
            leader=self.node_id,
            durable_end=self._durable_end,
            acked_offset=self._acked_offset,
            high_watermark=self.high_watermark,
            term=self.term,
            term_start_offset=self._term_start_offset,
            term_at=self._epochs.term_at,
        )
        if committed == self.high_watermark:
            return
        assert self.high_watermark < committed <= self._storage.end_offset, (
            self._label,
            self.high_watermark,
            committed,
            self._storage.end_offset,
        )
        self.high_watermark = committed
        self._pending.committed(self.high_watermark, self._replies)
        if self.node_id not in self._members():
            self._check_removed()  # only if leadership could not be moved away first

    def _acked_offset(self, peer: NodeId) -> int:
        """What ``peer`` acknowledged of this leader's log, for the commit (-1 while
        it heals from damaged storage)."""
        progress = self._progress.get(peer)
        return progress.match_offset if progress is not None and not progress.healing else -1

    def _expire_departing(self) -> None:
        committed = self._committed_config_offset()
        for peer, until in list(self._departing.items()):
            if until < 0:
                latest = self._configs[-1][0] if self._configs else BOOTSTRAP_OFFSET
                if latest <= committed and (
                    (progress := self._progress.get(peer)) is None
                    or progress.match_offset > latest
                    or self._now - progress.heard_ms > self._config.election_timeout_max_ms
                ):
                    self._departing[peer] = self._now + self._config.election_timeout_max_ms
            elif self._now >= until:
                del self._departing[peer]
                self._progress.pop(peer, None)

    def _committed_config_offset(self) -> int:
        """Offset of the latest configuration entry below the high watermark."""
        for offset, _ in reversed(self._configs):
            if offset < self.high_watermark:
                return offset
        return BOOTSTRAP_OFFSET

    def _caught_up(self, peer: NodeId) -> bool:
        progress = self._progress.get(peer)
        return (
            progress is not None
            and progress.mode is Mode.REPLICATE
            and progress.match_offset >= self.high_watermark - self._config.catch_up_lag_offsets_max
            and self._now - progress.heard_ms < self._config.election_timeout_min_ms
        )

    def _stable_leader(self) -> bool:
        """Committed an entry of this term, and the latest configuration is committed."""
        if self.high_watermark <= self._term_start_offset or self._transfer_to is not None:
            return False
        latest = self._configs[-1][0] if self._configs else BOOTSTRAP_OFFSET
        return latest < self.high_watermark

    def _maybe_reconfigure(self) -> None:
        config = self.group_config
        if config is None or not self._stable_leader():
            return
        target = self._target
        if target is None:
            # Without a placement target the members stay; learners are promoted
            # once caught up (a replica healing from damaged storage, for one).
            target = config.members
        elif self._now - self._target_since_ms < self._config.reconfigure_stable_ms:
            target = None  # placement's wish is not settled yet: only demotions
        change = next_change(
            config,
            target,
            leader=self.node_id,
            caught_up=self._caught_up,
            healing=self._peer_healing,
        )
        match change:
            case None:
                return
            case TransferTo(node=successor):
                self.transfer_leadership(successor, self._now)
                return
            case GroupConfig():
                self._append_config(config, change)
            case _:
                assert_never(change)

    def _peer_healing(self, peer: NodeId) -> bool:
        progress = self._progress.get(peer)
        return progress is not None and progress.healing

    def _append_config(self, config: GroupConfig, change: GroupConfig) -> None:
        """Append ``change``, the next configuration after ``config``."""
        _LOG.info(
            "%s: configuration %s -> %s", self._label, config, change, extra=self._log_extra()
        )
        if change.voters != config.voters:
            for peer in set(change.voters) - set(config.voters):
                progress = self._progress.get(peer)
                if progress is not None and progress.healing:
                    # Caught up: a voter again; it knows once it appends this change.
                    progress.healing = False
                    progress.healed_since = progress.healing_since
        batch = encode_config(change, self._now)
        self._record_config(self._storage.end_offset, change)
        base = self._storage.append(batch, term=self.term)
        self._note_appended(parse_header(batch)._replace(base_offset=base, term=self.term), batch)

    def _maybe_prefer_leader(self) -> None:
        target = self._target
        if (
            target is None
            or target[0] == self.node_id
            or target[0] not in self._voters()
            or self.node_id not in target  # leaving: reconfiguration moves leadership
            or self._now - self._target_since_ms < self._config.reconfigure_stable_ms
            or not self._stable_leader()
            or self._now < self._transfer_backoff_until
            or not self._caught_up(target[0])
        ):
            return
        self.transfer_leadership(target[0], self._now)

    def _maybe_send_timeout_now(self) -> None:
        peer = self._transfer_to
        if peer is None or self._timeout_now_sent:
            return
        progress = self._progress.get(peer)
        if progress is not None and progress.match_offset == self._storage.end_offset:
            self._messages.append(Outbound(peer, TimeoutNow(self.term, self.node_id)))
            self._timeout_now_sent = True

    # ------------------------------------------------------------------ follower

    def _heard_from_leader(self, term: int, leader: NodeId, *, quiesce: bool = False) -> None:
        if term > self.term or self.role is not Role.FOLLOWER or self.leader != leader:
            self._become_follower(term, leader)
        self._leader_heard_ms = self._now
        self._election_deadline = self._now + self._election_timeout()
        self._quiesced = quiesce and self._config.quiesce
        self._successor = False
        self._deferred = False
        self.last_leader = leader

    def _on_append(self, request: AppendRequest) -> None:
        if request.term < self.term:
            self._reject(request, conflict_term=-1, conflict_start=-1)  # tells it our term
            return
        self._heard_from_leader(request.term, request.leader)
        end = self._storage.end_offset
        prev = request.prev_end_offset
        if prev > end:
            self._reject(request, conflict_term=-1, conflict_start=-1)
            return
        # Below our log start (retention deleted it) everything was committed, so it
        # matches any leader's log: take what the request holds past the start.
        assert self._storage.start_offset <= self.high_watermark, (
            self._label,
            "deleted past the commit",
        )
        local_term = (
            request.prev_term if prev < self._storage.start_offset else self._term_before(prev)
        )
        if local_term != request.prev_term:
            start = self._epochs.start_of(local_term)
            self._reject(
                request,
                conflict_term=local_term,
                conflict_start=max(start, self._storage.start_offset),
            )
            return
        try:
            self._append_from_leader(request.batches, prev)
        except RecordFormatError as error:
            _LOG.warning(
                "%s: malformed append from %s: %s",
                self._label,
                request.leader,
                error,
                extra=self._log_extra(request.leader),
            )
            return
        self._follow_commit(min(request.commit_offset, request.end_offset))
        self._acknowledge(request.leader, match_offset=request.end_offset, prev_end_offset=prev)

    def _follow_commit(self, offset: int) -> None:
        """The leader committed up to ``offset``, which this follower holds: its high
        watermark follows, never back and never past its own log end (paired with
        the same assertion on the leader's side, in :meth:`_maybe_commit`)."""
        assert offset <= self._storage.end_offset, (self._label, offset, self._storage.end_offset)
        self.high_watermark = max(self.high_watermark, offset)

    def _acknowledge(self, leader: NodeId, *, match_offset: int, prev_end_offset: int) -> None:
        """Tell ``leader`` this log holds its entries up to ``match_offset``."""
        self._healing_told_term = self.term  # the answer carries healing_since
        self._messages.append(
            Outbound(
                leader,
                AppendResponse(
                    self.term,
                    self.node_id,
                    success=True,
                    match_offset=match_offset,
                    end_offset=self._storage.end_offset,
                    prev_end_offset=prev_end_offset,
                    healing_since=self._healing_since_or_none(),
                    log_start=self._storage.start_offset,
                ),
            )
        )

    def _append_from_leader(self, batches: bytes, prev_end_offset: int) -> None:
        """Append the request's batches past what this log already holds.

        Between ``prev_end_offset`` and the first batch, and between two batches,
        the leader's log may have a gap (keyed compaction removed those records:
        they were committed, so whatever this log holds there is the same committed
        data, or nothing): a batch past this log's end is appended after the gap
        when the leader's log holds nothing between the previous batch and it.
        """
        view = memoryview(batches)
        position = 0
        size = len(batches)
        vouched = prev_end_offset  # the leader's log holds nothing in [vouched, base)
        while position < size:
            header = parse_header(view, position, limits=self._limits)
            batch = view[position : position + header.length]
            if len(batch) != header.length:
                raise RecordFormatError("partial batch in an append request")
            position += header.length
            gap_from, vouched = vouched, header.next_offset
            if header.next_offset <= self._storage.start_offset:
                continue  # committed, and deleted here by retention
            end = self._storage.end_offset
            if header.base_offset < end:
                if self._epochs.term_at(header.base_offset) == header.term:
                    continue  # already held: same term and offset means the same batch
                self._truncate(header.base_offset)
                end = self._storage.end_offset
            # A gap in the leader's log from gap_from on: what this log holds between
            # gap_from and its end was committed there (the same records).
            if header.base_offset > end and gap_from > end:
                raise RecordFormatError(
                    f"append at {header.base_offset} leaves {end}..{gap_from} unfilled"
                )
            config = config_in(header, batch, self._limits)
            if config is not None:
                self._record_config(header.base_offset, config)
            if header.base_offset > end:
                self._storage.append_stamped(batch, after=end)
            else:
                self._storage.append_stamped(batch)
            self._note_appended(header, batch)

    def _reject(self, request: AppendRequest, *, conflict_term: int, conflict_start: int) -> None:
        if request.term == self.term:
            self._healing_told_term = self.term  # the answer carries healing_since
        self._messages.append(
            Outbound(
                request.leader,
                AppendResponse(
                    self.term,
                    self.node_id,
                    success=False,
                    match_offset=-1,
                    end_offset=self._storage.end_offset,
                    prev_end_offset=request.prev_end_offset,
                    conflict_term=conflict_term,
                    conflict_start=conflict_start,
                    healing_since=self._healing_since_or_none(),
                ),
            )
        )

    def _on_heartbeat(self, heartbeat: Heartbeat) -> None:
        if heartbeat.term < self.term:
            self._messages.append(
                Outbound(
                    heartbeat.leader,
                    HeartbeatResponse(self.term, self.node_id, self._storage.end_offset),
                )
            )
            return
        commit = min(heartbeat.commit_offset, self._storage.end_offset)
        self._follow_commit(commit)
        # Quiesce only when this replica holds everything the leader committed.
        quiesce = heartbeat.quiesce and commit == heartbeat.commit_offset
        self._heard_from_leader(heartbeat.term, heartbeat.leader, quiesce=quiesce)
        if not heartbeat.member:
            self._check_removed()
        if self._healing_since is not None and self._healing_told_term != self.term:
            # A leader that believes this log whole only heartbeats it: tell it, until
            # it sends an append (whose answer says so) in this term.
            self._announce_healing()
        response = HeartbeatResponse(
            self.term, self.node_id, self._storage.end_offset, self.high_watermark
        )
        self._messages.append(Outbound(heartbeat.leader, response))

    def _on_timeout_now(self, message: TimeoutNow) -> None:
        if (
            message.term != self.term
            or not self._may_campaign()
            or self.role is Role.LEADER
            or self._healing_since is not None
        ):
            return
        _LOG.info(
            "%s: leadership handed over by %s",
            self._label,
            message.leader,
            extra=self._log_extra(message.leader),
        )
        self._leader_heard_ms = NEVER_MS
        self._campaign(pre_vote=False, transfer=True)

    # ------------------------------------------------------------------ votes

    def _in_lease(self) -> bool:
        if self.role is Role.LEADER or self._quiesced:
            return True  # quiesced: membership tells us when the leader dies
        return (
            self.leader is not None
            and self._now - self._leader_heard_ms < self._config.election_timeout_min_ms
        )

    def _up_to_date(self, request: VoteRequest) -> bool:
        return (request.last_term, request.end_offset) >= (
            self._epochs.last_term,
            self._storage.end_offset,
        )

    def _on_vote_request(self, request: VoteRequest) -> None:
        if self.role is Role.LEADER and request.candidate in self._progress:
            self._wake()  # a member that lost track of us (e.g. it restarted)
        elif request.candidate == self.leader and request.term > self.term:
            # Our leader campaigns for a later term, so it no longer leads: it
            # restarted, or stepped down. Its lease is void, and a quiesced follower
            # must not wait for membership to declare it dead: a node restarted
            # within the failure-detection time never is.
            self._leader_gone()
        if request.term > self.term and not request.transfer and self._in_lease():
            self._vote(request, granted=False)
            return
        if self._healing_since is not None:
            # It may have acknowledged entries it lost, or voted in a term it forgot:
            # it votes again only once re-added (see "Damaged storage").
            if request.term > self.term and not request.pre_vote:
                self._become_follower(request.term, None)
            self._vote(request, granted=False)
            return
        if request.pre_vote:
            self._vote(request, granted=request.term > self.term and self._up_to_date(request))
            return
        if request.term > self.term:
            self._become_follower(request.term, None)
        granted = (
            request.term == self.term
            and self.voted_for in (None, request.candidate)
            and self._up_to_date(request)
        )
        if granted and self.voted_for is None:
            self.voted_for = request.candidate
            self._save_state()
        if granted:
            self._election_deadline = self._now + self._election_timeout()
        self._vote(request, granted=granted)

    def _vote(self, request: VoteRequest, *, granted: bool) -> None:
        term = request.term if granted and request.pre_vote else self.term
        self._messages.append(
            Outbound(
                request.candidate,
                VoteResponse(term, self.node_id, granted=granted, pre_vote=request.pre_vote),
            )
        )

    def _on_vote_response(self, response: VoteResponse) -> None:
        if response.pre_vote:
            if self.role is not Role.PRE_CANDIDATE:
                return
            if response.granted and response.term == self.term + 1:
                self._votes.add(response.voter)
                self._check_votes()
            elif not response.granted and response.term > self.term:
                self._become_follower(response.term, None)
            return
        if response.term > self.term:
            self._become_follower(response.term, None)
            return
        if self.role is Role.CANDIDATE and response.term == self.term and response.granted:
            self._votes.add(response.voter)
            self._check_votes()

    # ------------------------------------------------------------------ removal

    def _check_removed(self) -> None:
        """Leave for good once a committed configuration no longer includes us.

        Called only when the leader says we are out (or we lead and are out): a
        replica catching up replays old configurations that may not include it.
        """
        if self._removed or not self._configs:
            return
        offset, config = self._configs[-1]
        if self.node_id in config.members or offset >= self.high_watermark:
            return
        self._removed = True
        if self.role is Role.LEADER:
            self._abandon_leadership(None)
        self._set_role(Role.REMOVED, None)
        self._events.append(Removed(self.term))
