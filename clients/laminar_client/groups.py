"""Consumer groups on the client: typed results of the group calls, and the
session that makes a :class:`~laminar_client.consumer.Consumer` a group member.

Routing
-------
A group lives in partition ``key_partition(group.encode(), 8)`` of the internal
topic ``__groups``; every call but ``ListGroups`` must reach that partition's
leader (the group's *coordinator*). Internal topics are not in the metadata the
client holds, so the first call goes to any node, which answers ``NOT_LEADER``
with the leader's address; the client remembers that hint like a write's, so
later calls go straight to the coordinator (see :meth:`Client._group_call`).

The member session
------------------
The decisions are :class:`laminar.groups.member.GroupMember`'s (sans-IO); this
module only carries them out. A heartbeat thread sends a heartbeat every
``heartbeat_interval_ms`` of the last answer (session / 15), feeds the answer to
the member and queues the resulting :class:`~laminar.groups.member.MemberActions`.
The application's thread drains the queue between chunks of records
(:meth:`GroupSession.poll`), because the consumer and the user's hooks are not
thread-safe, running :func:`~laminar.groups.member.handover_steps`: lost
partitions are dropped and ``on_lost`` told, moved ones revoked (auto-commit,
``on_revoked``, stop reading, report the release), confirmed ones started at their
committed offset (or ``auto_offset_reset``) and ``on_assigned`` told. A heartbeat
that answers ``FENCED`` makes the member drop everything and join again with
epoch 0; so does a lapsed lease (:attr:`GroupSession.lease_until_s`, checked by
the consumer before each record it hands out).

Auto-commit hands the positions that moved to a committer thread each time the
application asks for the next chunk, and reads on: the committer sends the latest
positions, one call at a time (a synchronous commit per chunk would cap a member at
one chunk per commit round trip). Before a partition is released, and at
``close()``, the commit is synchronous: the committer is drained first, then what
is still uncommitted is sent and awaited.

Guarantee: at-least-once. A record is committed only after the application
asked for the next one (it was processed); a member stopped past its session
hands out nothing more once it runs again (its lease lapsed), and any commit it
had in flight is refused (``FENCED``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, assert_never

from laminar.errors import (
    FencedMemberError,
    InvalidInputError,
    LaminarError,
    UnknownTopicOrPartitionError,
)
from laminar.groups.assignment import check_group_id, check_member_key, check_weight
from laminar.groups.coordinator import HEARTBEATS_PER_SESSION, HeartbeatAnswer, HeartbeatRequest
from laminar.groups.entries import Subscription
from laminar.groups.member import (
    CommitNow,
    GroupMember,
    HandoverStep,
    MemberActions,
    Notify,
    Read,
    Released,
    handover_steps,
)
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.group_wire import (
    GROUP_PARTITIONS_PER_CALL_MAX,
    GROUPS_PARTITIONS,
    GROUPS_TOPIC,
    CommittedOffset,
    GroupDescription,
    GroupMemberInfo,
    GroupPartitionInfo,
    GroupSummary,
    answer_from_proto,
    check_partition_count,
    commit_results,
    group_partition,
    heartbeat_to_proto,
)
from laminar_client.types import TopicPartition

__all__ = [
    "GROUPS_PARTITIONS",
    "GROUPS_TOPIC",
    "GROUP_PARTITIONS_PER_CALL_MAX",
    "CommittedOffset",
    "GroupDescription",
    "GroupMemberInfo",
    "GroupOptions",
    "GroupPartitionInfo",
    "GroupSession",
    "GroupSummary",
    "HeartbeatRequest",
    "answer_from_proto",
    "check_partition_count",
    "commit_results",
    "group_partition",
    "heartbeat_to_proto",
]

_LOG = logging.getLogger(__name__)

ACTIONS_QUEUED_MAX = 1024
"""Most heartbeat outcomes waiting for the application's thread. Only answers that
change something are queued; past this the application has not polled for
hundreds of heartbeats, and the oldest ``start``/``revoke`` outcomes are merged
away by a fence-and-rejoin (see :meth:`GroupSession._queue`)."""
POLL_SLICE_S = 0.1
"""Longest a group consumer waits for records before looking at heartbeat
outcomes again: a revoked partition stops being read within this (or one
chunk's processing time)."""
_RETRY_WAIT_S = 0.2
"""Pause after a failed heartbeat (coordinator moving) before the next try."""


# ----------------------------------------------------------------------------- session


Hook = Callable[[list[TopicPartition]], object]
"""``on_assigned`` / ``on_revoked`` / ``on_lost``: called with the partitions. With
an :class:`~laminar_client.consumer.AsyncConsumer` a hook may also be a coroutine
function (its result is awaited)."""

Offsets = Mapping[tuple[str, int], int | None]
"""What the session asks the consumer to read: partition -> start (None: the
committed offset was absent, use ``auto_offset_reset``; or keep the position)."""


class GroupReader(Protocol):
    """What a session needs of its consumer besides ``assign`` (given to the drivers)."""

    @property
    def client(self) -> Client: ...

    def assignment(self) -> frozenset[TopicPartition]: ...

    def position(self, tp: tuple[str, int]) -> int: ...


@dataclass(frozen=True, slots=True)
class GroupOptions:
    """A group consumer's membership settings (the consumer's ``group=`` arguments),
    checked when the consumer is made, before it subscribes."""

    group: str
    instance_id: str | None = None
    weight: float = 1.0
    session_timeout_s: float = 45.0
    rebalance_timeout_s: float = 60.0
    auto_commit: bool = True
    on_assigned: Hook | None = None
    on_revoked: Hook | None = None
    on_lost: Hook | None = None

    def __post_init__(self) -> None:
        check_group_id(self.group)
        if self.instance_id is not None:
            check_member_key(self.instance_id)
        if not 0.1 <= self.session_timeout_s <= 3600:
            raise InvalidInputError("session_timeout_s must be in [0.1, 3600]")
        if not 0.1 <= self.rebalance_timeout_s <= 3600:
            raise InvalidInputError("rebalance_timeout_s must be in [0.1, 3600]")
        check_weight(self.weight)


@dataclass(frozen=True, slots=True)
class _PreparedCommit:
    member_id: str
    member_epoch: int
    offsets: dict[tuple[str, int], int]
    commits: list[tuple[str, int, int, int, str]]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupSession:
    """A consumer's membership: the heartbeat thread and the actions it queues.

    Shared between two threads: the heartbeat thread (requests, answers) and the
    application's (commits, revocations, the lease); ``_lock`` guards the member and
    the queue. What the application's side does is written once, as
    :func:`~laminar.groups.member.handover_steps` (:meth:`_due_steps`,
    :meth:`_closing_steps`, :meth:`_prepare_commit`), and carried out by a
    synchronous driver (:meth:`poll`, :meth:`commit`, :meth:`close`) for
    :class:`~laminar_client.consumer.Consumer` and an asyncio one (the ``_async``
    methods: network calls in a worker thread, hooks awaited) for
    :class:`~laminar_client.consumer.AsyncConsumer`.

    :attr:`lease_until_s` is read by the consumer before it hands out each record:
    past it (``time.monotonic()``), the member stops and calls
    :meth:`lapse_if_due` (see :mod:`laminar.groups.member`, "The lease").
    """

    def __init__(
        self, consumer: GroupReader, options: GroupOptions, subscription: Subscription
    ) -> None:
        self._consumer = consumer
        self._client = consumer.client
        self.options = options
        self.member = GroupMember(
            group_id=options.group,
            # Chosen here, not by the coordinator, so a retried join is idempotent and
            # the id survives a fence (the member rejoins under the same name).
            member_id=uuid.uuid4().hex,
            subscription=subscription,
            instance_id=options.instance_id,
            weight=options.weight,
            session_timeout_ms=round(options.session_timeout_s * 1000),
            rebalance_timeout_ms=round(options.rebalance_timeout_s * 1000),
        )
        self.member.request().join_entry()  # every field checked now, not by the heartbeat
        self.auto_commit = options.auto_commit
        self._hooks: dict[str, Hook | None] = {
            "assigned": options.on_assigned,
            "revoked": options.on_revoked,
            # KIP-429's default: onPartitionsLost calls onPartitionsRevoked.
            "lost": options.on_lost if options.on_lost is not None else options.on_revoked,
        }
        self._lock = threading.Lock()
        self._actions: deque[MemberActions] = deque()
        self._refusal: InvalidInputError | None = None
        """A refusal of the heartbeat itself, raised to the application once."""
        self._missing_since_s: dict[str, float] = {}
        """Subscribed topics the coordinator's answers do not list (none such in the
        catalogue), since when (monotonic)."""
        self._missing_reported: set[str] = set()
        self.lease_until_s = -math.inf
        """The member's lease on the monotonic clock (seconds): the consumer hands out
        no record past it (see :meth:`lapse_if_due`)."""
        self._committed: dict[tuple[str, int], int] = {}
        """Last committed next offset per owned partition (for lag and to skip
        commits that would change nothing)."""
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._heartbeats_paused = False
        self._interval_s = options.session_timeout_s / HEARTBEATS_PER_SESSION
        # Auto-commit runs in the background: the application hands positions over
        # after each chunk and reads on; a committer thread sends the latest ones,
        # one call at a time. (A synchronous commit per chunk capped a member at
        # one chunk per commit round trip: members fell behind a modest producer.)
        self._commits = threading.Condition()
        self._handed: dict[tuple[str, int], int] = {}
        """Last position handed to the committer per partition (sent or pending)."""
        self._pending: dict[tuple[str, int], int] = {}
        self._sending = False
        self._committer: threading.Thread | None = None
        if self.auto_commit:
            self._committer = threading.Thread(
                target=self._commit_loop, name=f"laminar-commit-{self.group}", daemon=True
            )
            self._committer.start()
        self._thread = threading.Thread(
            target=self._run, name=f"laminar-group-{self.group}", daemon=True
        )
        self._thread.start()

    @property
    def group(self) -> str:
        return self.member.group_id

    # -- heartbeat thread

    def _run(self) -> None:
        while not self._stopped.is_set():
            wait_s = self._interval_s
            if not self._heartbeats_paused:
                try:
                    self._beat()
                except InvalidInputError as error:
                    # The coordinator refused the request itself (not a passing
                    # state): the application hears of it from its next read.
                    self._refused(error)
                except LaminarError as error:
                    _LOG.info("group=%s heartbeat failed: %s", self.group, error)
                    wait_s = min(wait_s, _RETRY_WAIT_S)
            self._wake.wait(wait_s)
            self._wake.clear()

    def _beat(self) -> None:
        with self._lock:
            request = self.member.request()
        timeout_s = max(0.1, self.member.session_timeout_ms / 1000 / 3)
        sent_ms = _now_ms()  # before the first attempt: the lease is never overstated
        try:
            answer = self._client.group_heartbeat(request, timeout_s=timeout_s)
        except FencedMemberError:
            answer = HeartbeatAnswer(self.group, request.member_id, fenced=True)
            _LOG.info("group=%s member=%s fenced: rejoining", self.group, request.member_id)
        with self._lock:
            if request.member_epoch != self.member.member_epoch:
                return  # fenced, or the lease lapsed, meanwhile: this answer is stale
            actions = self.member.on_answer(answer, sent_ms=sent_ms)
            if not answer.fenced:
                self._note_topics(answer)
            self._queue(actions)
            self._sync_lease()
            if answer.heartbeat_interval_ms > 0:
                self._interval_s = answer.heartbeat_interval_ms / 1000
        if actions.rejoin:
            self._wake.set()  # join again at once rather than one interval later

    def _queue(self, actions: MemberActions) -> None:
        """Queue ``actions`` for the application's thread (holding the lock)."""
        if not (actions.start or actions.revoke or actions.lost or actions.rejoin):
            return
        if len(self._actions) >= ACTIONS_QUEUED_MAX:
            # The application stopped polling: drop everything and start over (a
            # rejoin loses whatever the reader reads when it is carried out).
            self._actions.clear()
            actions = self.member.fence()
            self._sync_lease()
        self._actions.append(actions)

    def _note_topics(self, answer: HeartbeatAnswer) -> None:
        """Note which explicitly subscribed topics do not exist (lock held)."""
        present = {topic for topic, _count in answer.partition_counts}
        now_s = time.monotonic()
        for topic in self.member.subscription.topics:
            if topic in present:
                self._missing_since_s.pop(topic, None)
                self._missing_reported.discard(topic)
            else:
                self._missing_since_s.setdefault(topic, now_s)

    def _raise_unknown_topics(self) -> None:
        """Raise :class:`UnknownTopicOrPartitionError` once for subscribed topics that
        have not existed for ``UNKNOWN_TOPIC_WAIT_S`` (a topic created a moment ago
        may still be spreading); the subscription stays, and a topic created later
        is read (app thread)."""
        now_s = time.monotonic()
        with self._lock:
            due = sorted(
                topic
                for topic, since_s in self._missing_since_s.items()
                if now_s - since_s >= UNKNOWN_TOPIC_WAIT_S and topic not in self._missing_reported
            )
            self._missing_reported.update(due)
        if due:
            raise UnknownTopicOrPartitionError(
                f"group {self.group} subscribes to {', '.join(map(repr, due))}, which does not "
                "exist; the member stays subscribed and reads the topic once it is created"
            )

    def _sync_lease(self) -> None:
        deadline_ms = self.member.lease_deadline_ms
        self.lease_until_s = -math.inf if deadline_ms is None else deadline_ms / 1000

    def _refused(self, error: InvalidInputError) -> None:
        with self._lock:
            self._refusal = error
        _LOG.warning("group=%s heartbeat refused: %s", self.group, error)

    def pause_heartbeats(self) -> None:
        """Stop heartbeating while keeping the partitions (tests: a stalled member)."""
        self._heartbeats_paused = True

    # -- the lease (application's thread)

    def lapse_if_due(self) -> bool:
        """Whether the lease has lapsed; if so the member gives up everything it holds
        and rejoins, and the next :meth:`poll` tells the application (``on_lost``)."""
        if time.monotonic() < self.lease_until_s:
            return False
        with self._lock:
            if not (self.member.holds() or self._consumer.assignment()):
                return False
            if self.member.member_epoch == 0 and any(a.rejoin for a in self._actions):
                return True  # fenced already: the queued rejoin loses everything read
            waited_ms = None
            if self.member.lease_deadline_ms is not None:
                waited_ms = (
                    self.member.session_timeout_ms + _now_ms() - self.member.lease_deadline_ms
                )
            self._actions.clear()
            self._actions.append(self.member.fence())
            self._sync_lease()
        _LOG.warning(
            "group=%s member=%s lease lapsed (no heartbeat acknowledged for %s ms, session "
            "%d ms): its partitions are lost; rejoining",
            self.group,
            self.member.member_id,
            waited_ms,
            self.member.session_timeout_ms,
        )
        self._wake.set()
        return True

    # -- application's side: the steps

    def _next_actions(self) -> MemberActions | None:
        with self._lock:
            return self._actions.popleft() if self._actions else None

    def _due_steps(self) -> Iterator[HandoverStep]:
        """What the application must hear first (raised), then the steps of every
        queued outcome."""
        self._raise_refusal()
        self._raise_unknown_topics()
        yield from self._queued_steps()

    def _queued_steps(self) -> Iterator[HandoverStep]:
        """The steps of every queued outcome, in order, each computed against what
        the reader reads when its turn comes (a lapsed lease queues its loss)."""
        self.lapse_if_due()
        while (actions := self._next_actions()) is not None:
            yield from self._steps_of(actions)

    def _closing_steps(self) -> Iterator[HandoverStep]:
        """Queued outcomes, then the revocation of everything still read (while the
        member owns it: the hooks can commit), or its loss after a lapsed lease."""
        yield from self._queued_steps()
        with self._lock:
            actions = self.member.revoke_all()
        yield from self._steps_of(actions)

    def _steps_of(self, actions: MemberActions) -> list[HandoverStep]:
        return handover_steps(actions, self._consumer.assignment(), auto_commit=self.auto_commit)

    def _raise_refusal(self) -> None:
        with self._lock:
            error, self._refusal = self._refusal, None
        if error is not None:
            raise error

    def _hook(self, step: Notify) -> Hook | None:
        if step.hook != "assigned":
            for tp in step.partitions:
                self._committed.pop(tp, None)
                with self._commits:
                    self._handed.pop(tp, None)
                    self._pending.pop(tp, None)
        return self._hooks[step.hook]

    def _released(self, step: Released) -> None:
        with self._lock:
            for tp in step.partitions:
                self.member.revoked(tp)
        self._wake.set()  # report the release now: the new owner is waiting

    def owned(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self.member.holds())

    def _positions(self) -> dict[tuple[str, int], int]:
        """The position of every owned partition being read (app thread)."""
        offsets: dict[tuple[str, int], int] = {}
        assigned = self._consumer.assignment()
        for tp in self.owned():
            if _tp(tp) in assigned:
                position = self._consumer.position(tp)
                if position >= 0:
                    offsets[tp] = position
        return offsets

    def _prepare_commit(
        self, offsets: Mapping[tuple[str, int], int] | None, metadata: str, *, changed_only: bool
    ) -> _PreparedCommit | None:
        """The commit to send (None: nothing to commit). Raises
        :class:`FencedMemberError` for a partition not owned (nothing is sent)."""
        if offsets is None:
            offsets = self._positions()
        if changed_only:
            offsets = {tp: o for tp, o in offsets.items() if self._committed.get(tp) != o}
        if not offsets:
            return None
        check_partition_count(len(offsets), "a commit")
        with self._lock:
            member_id, epoch = self.member.member_id, self.member.member_epoch
            commits = [self.member.commit(tp, offset, metadata) for tp, offset in offsets.items()]
        return _PreparedCommit(
            member_id,
            epoch,
            dict(offsets),
            [
                (c.topic, c.partition, c.next_offset, c.assignment_epoch, c.metadata)
                for c in commits
            ],
        )

    def _send_commit(self, prepared: _PreparedCommit) -> None:
        """Send a prepared commit (blocking: a worker thread runs it for asyncio)."""
        results = self._client.commit_offsets(
            self.group, prepared.member_id, prepared.member_epoch, prepared.commits
        )
        first_error: LaminarError | None = None
        for tp, error in results.items():
            if error is None:
                self._committed[tp] = prepared.offsets[tp]
            elif first_error is None:
                first_error = error
        if isinstance(first_error, FencedMemberError):
            self._fenced(prepared.member_epoch)
        if first_error is not None:
            raise first_error

    def _check_lease_for_commit(self) -> None:
        """A member whose lease lapsed commits nothing (app thread)."""
        if self.lapse_if_due():
            raise FencedMemberError(
                self.group,
                self.member.member_id,
                "its lease lapsed (no heartbeat acknowledged within the session timeout): "
                "its partitions are lost and go to on_lost",
            )

    # -- background auto-commit

    def _commit_in_background(self) -> None:
        """Hand the positions that moved to the committer thread (app thread; never
        blocks on the network)."""
        offsets = self._positions()
        with self._commits:
            changed = {
                tp: offset
                for tp, offset in offsets.items()
                if self._handed.get(tp) != offset and self._committed.get(tp) != offset
            }
            if changed:
                self._pending.update(changed)
                self._handed.update(changed)
                self._commits.notify_all()

    def _commit_loop(self) -> None:
        """The committer thread: send what is pending, the latest positions only."""
        while True:
            with self._commits:
                while not self._pending and not self._stopped.is_set():
                    self._commits.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._sending = True
            try:
                with self._lock:
                    owned = self.member.holds()
                offsets = {tp: offset for tp, offset in batch.items() if tp in owned}
                prepared = self._prepare_commit(offsets, "", changed_only=True)
                if prepared is not None:
                    self._send_commit(prepared)
            except LaminarError as error:
                _log_quiet_commit(self.group, error)
                with self._commits:  # send these again at the next chance
                    for tp, offset in batch.items():
                        if self._handed.get(tp) == offset:
                            self._handed.pop(tp, None)
            finally:
                with self._commits:
                    self._sending = False
                    self._commits.notify_all()

    def _settle_background(self) -> None:
        """Wait until the committer has nothing pending or in flight (blocking), so
        that a synchronous commit is the last word."""
        if self._committer is None:
            return
        timeout_s = self.member.session_timeout_ms / 1000
        with self._commits:
            self._commits.wait_for(lambda: not self._pending and not self._sending, timeout_s)

    def _fenced(self, epoch: int) -> None:
        with self._lock:
            if self.member.member_epoch != epoch:
                return  # already handled
            self._queue(self.member.fence())
            self._sync_lease()
        self._wake.set()

    def committed(self) -> dict[tuple[str, int], int]:
        return dict(self._committed)

    def _stop_and_leave(self) -> None:
        """Stop committing and beating, then leave (blocking)."""
        self._stopped.set()
        self._wake.set()
        with self._commits:
            self._pending.clear()
            self._commits.notify_all()
        if self._committer is not None:
            self._committer.join(timeout=self.member.session_timeout_ms / 1000 + 5)
        self._thread.join(timeout=self.member.session_timeout_ms / 1000 + 5)
        with self._lock:
            member_id, epoch = self.member.member_id, self.member.member_epoch
        if epoch > 0 and not self._heartbeats_paused:
            try:
                self._client.leave_group(self.group, member_id, epoch)
            except LaminarError as error:
                _LOG.info("group=%s leave failed (the session expires): %s", self.group, error)

    def slice_s(self, deadline_s: float | None) -> float:
        """How long the next wait for records may block."""
        if deadline_s is None:
            return POLL_SLICE_S
        return max(0.0, min(POLL_SLICE_S, deadline_s - time.monotonic()))

    # -- the synchronous driver (Consumer)

    def poll(self, assign: Callable[[Offsets], None]) -> None:
        """Check the lease, auto-commit (in the background), then carry out what the
        heartbeats decided (app thread). A hook's exception is raised once every
        step ran, so what the reader reads still equals what the hooks said."""
        if not self.lapse_if_due() and self.auto_commit:  # lapsed: commit nothing
            self._commit_in_background()
        self._run_steps(self._due_steps(), assign)

    def _run_steps(self, steps: Iterator[HandoverStep], assign: Callable[[Offsets], None]) -> None:
        failure: BaseException | None = None
        for step in steps:
            match step:
                case Read(offsets):
                    assign(offsets)
                case CommitNow():
                    self._commit_quietly()
                case Notify(_, partitions):
                    hook = self._hook(step)
                    if hook is not None:
                        try:
                            hook([_tp(tp) for tp in partitions])
                        except Exception as error:
                            failure = failure or error
                case Released():
                    self._released(step)
                case _:
                    assert_never(step)
        if failure is not None:
            raise failure

    def commit(
        self, offsets: Mapping[tuple[str, int], int] | None, metadata: str, *, changed_only: bool
    ) -> None:
        """Commit ``offsets`` (default: the position of every owned partition).

        Raises :class:`FencedMemberError` when the member no longer owns a
        partition or its lease lapsed (and queues the drop-and-rejoin), or the
        refusal of a commit.
        """
        self._check_lease_for_commit()
        self._settle_background()
        prepared = self._prepare_commit(offsets, metadata, changed_only=changed_only)
        if prepared is not None:
            self._send_commit(prepared)

    def _commit_quietly(self) -> None:
        try:
            self.commit(None, "", changed_only=True)
        except LaminarError as error:
            _log_quiet_commit(self.group, error)

    def close(self, assign: Callable[[Offsets], None]) -> None:
        """Carry out what is queued, then revoke everything still read (auto-commit,
        then ``on_revoked``, while the member still owns it), stop beating, leave.
        After a lapsed lease the partitions go to ``on_lost`` instead."""
        try:
            self._run_steps(self._closing_steps(), assign)
        finally:
            self._stop_and_leave()

    # -- the asyncio driver (AsyncConsumer)

    async def poll_async(self, assign: Callable[[Offsets], Awaitable[None]]) -> None:
        """:meth:`poll` on the event loop: synchronous commits in a worker thread,
        hooks awaited."""
        if not self.lapse_if_due() and self.auto_commit:  # lapsed: commit nothing
            self._commit_in_background()
        await self._run_steps_async(self._due_steps(), assign)

    async def _run_steps_async(
        self, steps: Iterator[HandoverStep], assign: Callable[[Offsets], Awaitable[None]]
    ) -> None:
        failure: BaseException | None = None
        for step in steps:
            match step:
                case Read(offsets):
                    await assign(offsets)
                case CommitNow():
                    await self._commit_quietly_async()
                case Notify(_, partitions):
                    hook = self._hook(step)
                    if hook is not None:
                        try:
                            await _maybe_await(hook([_tp(tp) for tp in partitions]))
                        except Exception as error:
                            failure = failure or error
                case Released():
                    self._released(step)
                case _:
                    assert_never(step)
        if failure is not None:
            raise failure

    async def commit_async(
        self, offsets: Mapping[tuple[str, int], int] | None, metadata: str, *, changed_only: bool
    ) -> None:
        """:meth:`commit` without blocking the event loop."""
        self._check_lease_for_commit()
        await asyncio.to_thread(self._settle_background)
        prepared = self._prepare_commit(offsets, metadata, changed_only=changed_only)
        if prepared is not None:
            await asyncio.to_thread(self._send_commit, prepared)

    async def _commit_quietly_async(self) -> None:
        try:
            await self.commit_async(None, "", changed_only=True)
        except LaminarError as error:
            _log_quiet_commit(self.group, error)

    async def close_async(self, assign: Callable[[Offsets], Awaitable[None]]) -> None:
        """:meth:`close` without blocking the event loop."""
        try:
            await self._run_steps_async(self._closing_steps(), assign)
        finally:
            await asyncio.to_thread(self._stop_and_leave)


async def _maybe_await(result: object) -> None:
    if inspect.isawaitable(result):
        await result


def _log_quiet_commit(group: str, error: LaminarError) -> None:
    if isinstance(error, FencedMemberError):
        _LOG.info("group=%s auto-commit refused: %s", group, error)
    else:
        _LOG.warning("group=%s auto-commit failed: %s", group, error)


def _tp(tp: tuple[str, int]) -> TopicPartition:
    return TopicPartition(*tp)
