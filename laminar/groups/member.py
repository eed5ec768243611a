"""A consumer-group member's decisions, sans-IO: what to start, release, stop.

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
- ``stop``: partitions it must stop reading at once *without* committing: it is
  fenced, or the coordinator no longer lists them as its own (a commit would be
  refused anyway);
- ``rejoin``: it was fenced; its next heartbeat joins again with epoch 0.

A confirmed partition outside the member's target (the member list changed again
before it started) is released straight away: nothing was read, so there is
nothing to commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    stop: tuple[TopicPartition, ...] = ()
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

    def on_answer(self, answer: HeartbeatAnswer) -> MemberActions:
        """Decide what to start, revoke and stop after one answer."""
        if answer.fenced:
            return self._fenced()
        self.member_epoch = answer.member_epoch
        target = frozenset(answer.assigned)
        owned = {(topic, index): epoch for topic, index, epoch in answer.owned}
        committed = {(topic, index): offset for topic, index, offset in answer.committed}
        for tp in [tp for tp, epoch in self.released.items() if owned.get(tp) != epoch]:
            del self.released[tp]  # the coordinator took note of the release
        stop = [tp for tp, epoch in sorted(self.active.items()) if owned.get(tp) != epoch]
        for tp in stop:
            del self.active[tp]
        for tp in [tp for tp, epoch in self.revoking.items() if owned.get(tp) != epoch]:
            del self.revoking[tp]
            stop.append(tp)
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
        return MemberActions(tuple(start), tuple(revoke), tuple(stop))

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

    def _fenced(self) -> MemberActions:
        stop = tuple(sorted({*self.active, *self.revoking}))
        self.active.clear()
        self.revoking.clear()
        self.released.clear()
        self.member_epoch = 0
        return MemberActions(stop=stop, rejoin=True)
