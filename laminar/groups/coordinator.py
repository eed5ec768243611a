"""The group coordinator on the leader of a ``__groups`` partition, sans-IO.

Theory of operation
===================

The coordinator decides what to *append*; :class:`~laminar.groups.state.GroupState`
decides, when the entries are applied, whether they take effect. So the coordinator
can be wrong (stale after a failover, racing itself) without breaking safety: at
worst an entry is refused when applied. What it must get right is liveness:
sessions, expiries, handing free partitions to their target members, fencing an
owner that does not let go.

Only the heartbeat times live here, in memory: they are never replicated (a
heartbeat is not a log entry). A coordinator built on a new leader therefore gives
every present member a fresh session that starts when it is built (and a member it
has never heard of a fresh session from the first :meth:`tick` that sees it), so a
failover never expires anyone who kept heartbeating.

The shell's contract, per heartbeat request::

    entries = coordinator.prepare(request, now_ms, catalogue)
    while entries:                       # at most PREPARE_ROUNDS_MAX rounds
        append and apply entries to coordinator.state
        entries = coordinator.prepare(request, now_ms, catalogue)
    reply with coordinator.answer(request)

and every ``tick_interval_ms`` (or sooner): append and apply ``tick(now_ms,
catalogue)``. A new member takes up to four rounds (join; the group's
``partitions`` entry; its owns; nothing) because each is computed from the state the
previous one produced. ``catalogue`` maps each
topic to its partition count (the node's metadata view).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from laminar.groups.entries import (
    GroupEntry,
    Join,
    Leave,
    LeaveReason,
    Own,
    Partitions,
    Release,
    Subscription,
)
from laminar.groups.state import Group, GroupState
from laminar.ids import TopicPartition

PREPARE_ROUNDS_MAX = 4
"""Rounds of :meth:`Coordinator.prepare` per heartbeat: join, partitions, owns, nothing."""

HEARTBEATS_PER_SESSION = 15
"""A member heartbeats every session timeout / 15 (Kafka's 3 s of 45 s)."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """One member's heartbeat.

    ``member_epoch`` 0 asks to join (or, for a present member id, to learn its
    epoch again); otherwise it must be the member's current epoch, else the answer
    is ``fenced``. ``released`` lists (topic, partition, assignment epoch) the
    member stopped after its final commit; ``leave`` says goodbye.
    """

    group_id: str
    member_id: str
    member_epoch: int
    subscription: Subscription
    instance_id: str | None = None
    weight: float = 1.0
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000
    released: tuple[tuple[str, int, int], ...] = ()
    leave: bool = False
    host: str = ""
    """Where the heartbeat came from (for describe only; kept in memory like its time)."""

    def join_entry(self) -> Join:
        """The join this request implies (constructing it validates every field)."""
        return Join(
            group_id=self.group_id,
            member_id=self.member_id,
            subscription=self.subscription,
            instance_id=self.instance_id,
            weight=self.weight,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )


@dataclass(frozen=True, slots=True)
class AnswerMember:
    """A member as others need it to compute the target: id, key and weight."""

    member_id: str
    key: str
    weight: float


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """What the coordinator tells one member.

    ``fenced``: the member is unknown at that epoch; it drops every partition without
    committing and rejoins with epoch 0. Otherwise ``assigned`` is the member's
    target (the partitions it should own at this group epoch: it releases the
    others), ``owned`` lists what it is confirmed to own (topic, partition,
    assignment epoch) with the committed offsets to resume from in ``committed``
    (topic, partition, next offset; absent when nothing was committed), and
    ``members`` and ``partition_counts`` describe the group.
    """

    group_id: str
    member_id: str
    fenced: bool
    group_epoch: int = 0
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    members: tuple[AnswerMember, ...] = ()
    partition_counts: tuple[tuple[str, int], ...] = ()
    owned: tuple[tuple[str, int, int], ...] = ()
    committed: tuple[tuple[str, int, int], ...] = ()
    assigned: tuple[TopicPartition, ...] = ()


def resolve_partitions(
    subscription: Subscription, catalogue: Mapping[str, int]
) -> tuple[tuple[str, int], ...]:
    """The (topic, partition count) pairs a subscription covers, by topic name."""
    return tuple(
        (topic, catalogue[topic]) for topic in sorted(catalogue) if subscription.matches(topic)
    )


class Coordinator:
    """Heartbeats, expiries and ownership hand-offs for every group of one partition."""

    def __init__(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self._last_heard_ms: dict[tuple[str, str], int] = {
            (group_id, member_id): now_ms
            for group_id, group in state.groups.items()
            for member_id in group.members
        }
        self._moving_since_ms: dict[tuple[str, TopicPartition], int] = {}
        self._hosts: dict[tuple[str, str], str] = {}

    def host_of(self, group_id: str, member_id: str) -> str:
        """The address ``member_id`` last heartbeated from ("" if not heard yet)."""
        return self._hosts.get((group_id, member_id), "")

    def _heard(self, request: HeartbeatRequest, now_ms: int) -> None:
        key = (request.group_id, request.member_id)
        self._last_heard_ms[key] = now_ms
        if request.host:
            self._hosts[key] = request.host

    def prepare(
        self, request: HeartbeatRequest, now_ms: int, catalogue: Mapping[str, int]
    ) -> list[GroupEntry]:
        """Entries to append for this heartbeat (validates the request's fields)."""
        join = request.join_entry()
        group = self.state.group(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if member is None:
            if request.member_epoch != 0 or request.leave:
                return []
            self._heard(request, now_ms)
            return [join]
        assert group is not None
        if request.member_epoch not in (0, member.member_epoch):
            return []
        self._heard(request, now_ms)
        entries: list[GroupEntry] = [
            Release(request.group_id, topic, partition, request.member_id, epoch)
            for topic, partition, epoch in request.released
            if group.owners.get((topic, partition)) is not None
            and group.owners[(topic, partition)].member_id == request.member_id
            and group.owners[(topic, partition)].assignment_epoch == epoch
        ]
        if request.leave:
            entries.append(Leave(request.group_id, request.member_id, LeaveReason.LEFT))
            return entries
        if entries:
            return entries
        partitions = self._partitions_entry(group, catalogue)
        if partitions is not None:
            return [partitions]
        return self._own_entries(group, only_member=request.member_id)

    def answer(self, request: HeartbeatRequest) -> HeartbeatAnswer:
        """The reply to ``request``, from the state after its entries were applied."""
        group = self.state.group(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        if (
            group is None
            or member is None
            or request.member_epoch not in (0, member.member_epoch)
            or request.leave
        ):
            return HeartbeatAnswer(request.group_id, request.member_id, fenced=not request.leave)
        owned = group.owned_by(request.member_id)
        return HeartbeatAnswer(
            group_id=request.group_id,
            member_id=request.member_id,
            fenced=False,
            group_epoch=group.group_epoch,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=max(1, member.session_timeout_ms // HEARTBEATS_PER_SESSION),
            members=tuple(
                AnswerMember(m.member_id, m.key, m.weight)
                for m in sorted(group.members.values(), key=lambda m: m.key)
            ),
            partition_counts=tuple(sorted(group.partition_counts.items())),
            owned=tuple((topic, index, epoch) for (topic, index), epoch in owned.items()),
            assigned=tuple(group.target_of(request.member_id)),
            committed=tuple(
                (topic, index, group.commits[(topic, index)].next_offset)
                for topic, index in owned
                if (topic, index) in group.commits
            ),
        )

    def tick(self, now_ms: int, catalogue: Mapping[str, int]) -> list[GroupEntry]:
        """Expiries, fencing of owners that do not release, catalogue changes, owns."""
        entries: list[GroupEntry] = []
        for group_id in sorted(self.state.groups):
            entries.extend(self._tick_group(self.state.groups[group_id], now_ms, catalogue))
        self._forget_departed()
        return entries

    def _forget_departed(self) -> None:
        """Drop the heartbeat times and hosts of members no longer present."""
        for memory in (self._last_heard_ms, self._hosts):
            for group_id, member_id in list(memory):
                group = self.state.groups.get(group_id)
                if group is None or member_id not in group.members:
                    del memory[(group_id, member_id)]

    def _tick_group(
        self, group: Group, now_ms: int, catalogue: Mapping[str, int]
    ) -> list[GroupEntry]:
        leaving: list[GroupEntry] = []
        gone: set[str] = set()
        for member_id, member in group.members.items():
            heard_ms = self._last_heard_ms.setdefault((group.group_id, member_id), now_ms)
            if now_ms - heard_ms > member.session_timeout_ms:
                leaving.append(Leave(group.group_id, member_id, LeaveReason.EXPIRED))
                gone.add(member_id)
        for member_id in self._owners_past_rebalance(group, now_ms):
            if member_id not in gone:
                leaving.append(Leave(group.group_id, member_id, LeaveReason.FENCED))
                gone.add(member_id)
        if leaving:
            # Owns wait for the next tick: they are computed on the state after the
            # leaves are applied, when the target no longer includes these members.
            return leaving
        partitions = self._partitions_entry(group, catalogue)
        if partitions is not None:
            return [partitions]
        return self._own_entries(group)

    def _owners_past_rebalance(self, group: Group, now_ms: int) -> list[str]:
        """Owners of partitions moved away from them longer than their rebalance timeout."""
        target = group.target()
        late: list[str] = []
        moving: set[TopicPartition] = set()
        for tp, owner in sorted(group.owners.items()):
            member = group.members[owner.member_id]
            if target.get(tp) == member.key:
                continue
            moving.add(tp)
            since_ms = self._moving_since_ms.setdefault((group.group_id, tp), now_ms)
            if now_ms - since_ms > member.rebalance_timeout_ms and owner.member_id not in late:
                late.append(owner.member_id)
        for key in [k for k in self._moving_since_ms if k[0] == group.group_id]:
            if key[1] not in moving:
                del self._moving_since_ms[key]
        return late

    @staticmethod
    def _partitions_entry(group: Group, catalogue: Mapping[str, int]) -> Partitions | None:
        if group.subscription is None or not group.members:
            return None
        counts = resolve_partitions(group.subscription, catalogue)
        if dict(counts) == group.partition_counts:
            return None
        return Partitions(group.group_id, counts)

    @staticmethod
    def _own_entries(group: Group, only_member: str | None = None) -> list[GroupEntry]:
        """Owns for free partitions whose target member is present."""
        entries: list[GroupEntry] = []
        by_key = {member.key: member for member in group.members.values()}
        for tp, key in sorted(group.target().items()):
            if tp in group.owners:
                continue
            member = by_key[key]
            if only_member is not None and member.member_id != only_member:
                continue
            epoch = group.assignment_epochs.get(tp, 0) + 1
            entries.append(Own(group.group_id, tp[0], tp[1], member.member_id, epoch))
        return entries
