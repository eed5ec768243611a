"""A consumer-group member's decisions, sans-IO: what to start, release, lose, and
how the application hears of it.

Theory of operation
===================

The coordinator's answer carries the member's target (``assigned``: what the
group's sticky rendezvous target, :meth:`laminar.groups.state.Group.retarget`,
gives it at this group epoch), but the member *reads* only what the coordinator
confirmed it owns, at an assignment epoch.
Each answer turns into :class:`MemberActions`:

- ``start``: confirmed partitions in its target that it is not reading yet, with
  the committed offset to resume from (``None``: nothing committed; the client
  applies its earliest/latest option);
- ``revoke``: partitions it reads whose target moved to someone else. The client
  runs its ``on_revoked`` hook (the final commit fits there), stops reading, then
  calls :meth:`GroupMember.revoked`; the next heartbeat reports the release and
  the coordinator hands the partition on;
- ``lost``: partitions it must stop reading at once *without* committing: it is
  fenced, its lease lapsed (below), or the coordinator no longer lists them as
  its own (a commit would be refused anyway). The client tells the application
  through ``on_lost``;
- ``rejoin``: it was fenced or its lease lapsed; its next heartbeat joins again
  with epoch 0 (the same member id: a coordinator that has not expired it yet
  answers with what it still owns).

The lease
---------
The coordinator expires a member it has not heard from for the session timeout,
measured on its clock from a heartbeat's *arrival*. The member measures the same
window on its own clock from the *send time* of the last heartbeat the coordinator
acknowledged (:attr:`GroupMember.lease_deadline_ms`), which is never later than
the coordinator's view (a heartbeat arrives after it is sent). So a member whose
lease has not lapsed is still the owner of what it holds; once it has lapsed, the
member must behave as if it were expired: hand out no further record, commit
nothing, tell the application (``on_lost``) and rejoin (:meth:`GroupMember.lose`).
A member stopped (SIGSTOP, a long GC pause, a suspended laptop) past its session
therefore never resumes work on partitions that moved meanwhile.

A confirmed partition outside the member's target (the member list changed again
before it started) is released straight away: nothing was read, so there is
nothing to commit.

What the application hears
--------------------------
:func:`handover_steps` turns one :class:`MemberActions` into the steps a client
carries out on the application's thread, in order: what the reader reads
(:class:`Read`), a synchronous commit (:class:`CommitNow`), a hook call
(:class:`Notify`) and the end of a revocation (:class:`Released`). Every partition
that joins or leaves what the application reads is announced by exactly one hook:
``assigned`` once it is read, ``revoked`` while it is still read (it can be
committed) and then dropped, ``lost`` after it was dropped (it cannot be). Steps
are computed against what the reader reads now, so a partition announced once
(say revoked, and then lost in a fence queued behind) is not announced twice, and
what the reader reads always equals what the hooks said.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Literal

from laminar.errors import FencedMemberError
from laminar.groups.coordinator import HeartbeatAnswer, HeartbeatRequest
from laminar.groups.entries import Commit, Subscription
from laminar.ids import TopicPartition


@dataclass(frozen=True, slots=True)
class MemberActions:
    """What the client must do after one heartbeat answer (see the module docstring)."""

    start: tuple[tuple[TopicPartition, int, int | None], ...] = ()
    """(partition, assignment epoch, committed next offset or None) to start reading."""
    revoke: tuple[TopicPartition, ...] = ()
    lost: tuple[TopicPartition, ...] = ()
    rejoin: bool = False


@dataclass(slots=True)
class GroupMember:
    """One member's view of its group; feed it answers, ask it for requests."""

    group_id: str
    member_id: str
    subscription: Subscription
    instance_id: str | None = None
    weight: float = 1.0
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000
    member_epoch: int = 0
    group_epoch: int = 0
    active: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions being read -> their assignment epoch."""
    revoking: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions whose ``on_revoked`` hook is running."""
    released: dict[TopicPartition, int] = field(default_factory=dict)
    """Partitions given up, to report until the coordinator no longer lists them."""
    lease_deadline_ms: int | None = None
    """When the member stops being the owner of what it holds, on its own clock: the
    send time of the last acknowledged heartbeat + the session timeout (None: no
    heartbeat acknowledged since it joined or was fenced)."""

    @property
    def key(self) -> str:
        return self.instance_id or self.member_id

    def request(self, *, leave: bool = False) -> HeartbeatRequest:
        """The next heartbeat (``leave``: the goodbye, after revoking everything)."""
        return HeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            subscription=self.subscription,
            instance_id=self.instance_id,
            weight=self.weight,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            released=tuple(
                (topic, index, epoch) for (topic, index), epoch in sorted(self.released.items())
            ),
            leave=leave,
        )

    def on_answer(self, answer: HeartbeatAnswer, *, sent_ms: int) -> MemberActions:
        """Decide what to start, revoke and declare lost after one answer to the
        heartbeat sent at ``sent_ms`` (the member's clock)."""
        if answer.fenced:
            return self.fence()
        self.member_epoch = answer.member_epoch
        deadline_ms = sent_ms + self.session_timeout_ms
        if self.lease_deadline_ms is None or deadline_ms > self.lease_deadline_ms:
            self.lease_deadline_ms = deadline_ms
        target = frozenset(answer.assigned)
        owned = {(topic, index): epoch for topic, index, epoch in answer.owned}
        committed = {(topic, index): offset for topic, index, offset in answer.committed}
        for tp in [tp for tp, epoch in self.released.items() if owned.get(tp) != epoch]:
            del self.released[tp]  # the coordinator took note of the release
        lost = [tp for tp, epoch in sorted(self.active.items()) if owned.get(tp) != epoch]
        for tp in lost:
            del self.active[tp]
        for tp in [tp for tp, epoch in self.revoking.items() if owned.get(tp) != epoch]:
            del self.revoking[tp]
            lost.append(tp)
        revoke = [tp for tp in sorted(self.active) if tp not in target]
        for tp in revoke:
            self.revoking[tp] = self.active.pop(tp)
        start: list[tuple[TopicPartition, int, int | None]] = []
        for tp, epoch in sorted(owned.items()):
            if tp in self.active or tp in self.revoking or tp in self.released:
                continue
            if tp in target:
                self.active[tp] = epoch
                start.append((tp, epoch, committed.get(tp)))
            else:
                self.released[tp] = epoch
        return MemberActions(tuple(start), tuple(revoke), tuple(lost))

    def holds(self) -> frozenset[TopicPartition]:
        """What the member reads or is revoking (what a lapsed lease loses)."""
        return frozenset({*self.active, *self.revoking})

    def lease_lapsed(self, now_ms: int) -> bool:
        """Whether the member holds partitions its lease no longer covers."""
        return (
            self.lease_deadline_ms is not None
            and now_ms >= self.lease_deadline_ms
            and bool(self.active or self.revoking)
        )

    def lose(self) -> MemberActions:
        """The lease lapsed: everything held is lost; rejoin (see the module docstring)."""
        return self.fence()

    def revoke_all(self) -> MemberActions:
        """The member is closing: revoke everything it reads (the client commits, runs
        ``on_revoked`` and reports the releases before it leaves)."""
        revoke = tuple(sorted(self.active))
        self.revoking.update(self.active)
        self.active.clear()
        return MemberActions(revoke=revoke)

    def revoked(self, tp: TopicPartition) -> None:
        """The ``on_revoked`` hook of ``tp`` finished: report the release next time."""
        epoch = self.revoking.pop(tp, None)
        if epoch is not None:
            self.released[tp] = epoch

    def commit(self, tp: TopicPartition, next_offset: int, metadata: str = "") -> Commit:
        """The commit entry for a partition this member reads or is revoking.

        Raises :class:`FencedMemberError` if it holds no such partition (the client
        must not commit what it does not own).
        """
        epoch = self.active.get(tp, self.revoking.get(tp))
        if epoch is None or self.member_epoch == 0:
            raise FencedMemberError(self.group_id, self.member_id, f"does not own {tp}")
        return Commit(
            group_id=self.group_id,
            topic=tp[0],
            partition=tp[1],
            next_offset=next_offset,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            assignment_epoch=epoch,
            metadata=metadata,
        )

    def fence(self) -> MemberActions:
        """Drop everything without committing and rejoin with epoch 0 (the
        coordinator fenced the member, or its lease lapsed)."""
        lost = tuple(sorted(self.holds()))
        self.active.clear()
        self.revoking.clear()
        self.released.clear()
        self.member_epoch = 0
        self.lease_deadline_ms = None
        return MemberActions(lost=lost, rejoin=True)


# ----------------------------------------------------------------------------- handover


@dataclass(frozen=True, slots=True)
class Read:
    """The reader reads exactly these partitions from now on: each from the given
    offset, or (None) from where it is, or from its committed offset /
    ``auto_offset_reset`` when it is new."""

    offsets: Mapping[TopicPartition, int | None]


@dataclass(frozen=True, slots=True)
class CommitNow:
    """Commit the positions of what is read now, synchronously (auto-commit before
    a revocation)."""


@dataclass(frozen=True, slots=True)
class Notify:
    """Call the application's hook ``hook`` with ``partitions``."""

    hook: Literal["assigned", "revoked", "lost"]
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Released:
    """The revocation of ``partitions`` is over: :meth:`GroupMember.revoked` each."""

    partitions: tuple[TopicPartition, ...]


HandoverStep = Read | CommitNow | Notify | Released


def handover_steps(
    actions: MemberActions, reading: Set[TopicPartition], *, auto_commit: bool
) -> list[HandoverStep]:
    """What carrying out ``actions`` takes when the reader reads ``reading`` (see
    the module docstring): lost partitions first (they are not ours any more; after
    a fence, everything read), then revocations, then starts."""
    current = set(reading)
    steps: list[HandoverStep] = []
    if actions.rejoin:
        # Fenced, or the lease lapsed: the member holds nothing now, so whatever is
        # read is lost (also what an outcome dropped from the queue would have lost).
        lost = tuple(sorted(current))
    else:
        lost = tuple(tp for tp in actions.lost if tp in current)
    if lost:
        current.difference_update(lost)
        steps += [Read(dict.fromkeys(sorted(current))), Notify("lost", lost)]
    revoked = tuple(tp for tp in actions.revoke if tp in current)
    if revoked:
        if auto_commit:
            steps.append(CommitNow())
        current.difference_update(revoked)
        steps += [Notify("revoked", revoked), Read(dict.fromkeys(sorted(current)))]
    if actions.revoke:
        steps.append(Released(actions.revoke))
    started = tuple(tp for tp, _epoch, _committed in actions.start if tp not in current)
    if started:
        offsets: dict[TopicPartition, int | None] = dict.fromkeys(sorted(current))
        for tp, _epoch, committed in actions.start:
            if tp in started:
                offsets[tp] = committed
        steps += [Read(offsets), Notify("assigned", started)]
    return steps
