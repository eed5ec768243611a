"""The consumer groups of one ``__groups`` partition, as a deterministic state machine.

Theory of operation
===================

Every replica of a ``__groups`` partition applies the same entries
(:mod:`laminar.groups.entries`) in log order to a :class:`GroupState`, and
:meth:`GroupState.apply` decides each entry's fate from the state alone. So the
verdict on an entry is the same on every replica and on a coordinator rebuilt from
the log after a failover, whatever the leader believed when it appended it: the
coordinator may propose stale or duplicate entries; applying them is where they
are checked. An entry that does not take effect changes nothing and its
:class:`Outcome` says why (an expected rejection is an output, not an exception).

Per group the state is:

- ``members``: member id -> :class:`MemberInfo`, in join order. A join or leave
  bumps ``group_epoch``; a joining member's ``member_epoch`` is the group epoch
  its join produced, so (member id, member epoch) names one incarnation.
- ``subscription`` (set by the first member of an empty group; later joins must
  match it: mixed subscriptions are not supported yet) and ``partition_counts``,
  the subscription resolved against the catalogue by a ``partitions`` entry. The
  group's partitions are those of subscribed topics in ``partition_counts``.
- ``target_keys``: partition -> member key that should own it. Recomputed by
  :meth:`Group.retarget` at every group epoch from the members, the partitions
  *and the previous target* (:func:`~laminar.groups.assignment.target_assignment`
  with ``previous``), so it is state like the rest: every replica computes the
  same sequence because it applies the same entries in the same order. (So every
  replica must run the same assignment code: a change to it needs a versioned
  entry, like any other change to how entries apply.)
- ``owners``: partition -> (member id, assignment epoch), the *confirmed* owner.
  ``assignment_epochs`` keeps the last epoch ever used per partition, so a
  partition's assignment epochs strictly increase across owners.
- ``commits``: partition -> (next offset, metadata).

The rules, checked when applying:

- ``own`` succeeds only for a present member, for a partition of the group that
  nobody owns, whose target is that member, at exactly the partition's last
  assignment epoch + 1. Hence at most one confirmed owner per partition, and a new
  owner only after the old one released it, expired or was fenced.
- ``release`` succeeds only for the current owner at its assignment epoch.
- ``commit`` succeeds only from a present member at its member epoch that owns the
  partition at the commit's assignment epoch (else ``FENCED``), and never moves the
  committed offset backwards (``OFFSET_BEHIND``). A commit ordered after its
  member's expiry or the partition's release is fenced, so a paused zombie can
  still read a partition but can never overwrite the new owner's commits.
- ``leave`` (left, expired, fenced) drops the member's ownerships; a ``join``
  whose instance id belongs to another member replaces that member the same way.
- ``reset`` and ``delete`` apply only to a group with no members (``NOT_EMPTY``);
  reset is the only way a committed offset moves backwards.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from laminar.errors import InvalidInputError
from laminar.groups.assignment import (
    GROUP_MEMBERS_MAX,
    AssignmentMember,
    target_assignment,
)
from laminar.groups.entries import (
    Commit,
    Delete,
    GroupEntry,
    Join,
    Leave,
    Own,
    Partitions,
    Release,
    Reset,
    Subscription,
)
from laminar.ids import TopicPartition

SNAPSHOT_VERSION = 2
"""Version of :meth:`GroupState.snapshot`'s dict; :meth:`GroupState.restore` refuses others."""

GROUPS_PER_PARTITION_MAX = 100_000
"""Groups one ``__groups`` partition holds; a join creating one more is refused."""


class Outcome(enum.StrEnum):
    """What applying one entry did."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    """Already true (a join of a present member, an own already held): nothing changed."""
    FENCED = "fenced"
    """The member is gone, or its member or assignment epoch is stale."""
    NOT_TARGET = "not_target"
    """An own for a partition that is not the group's, or not the member's target."""
    OWNED = "owned"
    """An own for a partition another member still owns."""
    STALE_EPOCH = "stale_epoch"
    """An own whose assignment epoch is not the partition's last + 1."""
    OFFSET_BEHIND = "offset_behind"
    """A commit below the committed offset; only a reset moves it back."""
    SUBSCRIPTION_MISMATCH = "subscription_mismatch"
    """A join whose subscription differs from the group's (mixed ones: not yet)."""
    GROUP_FULL = "group_full"
    """A join beyond the member or group limits."""
    NOT_EMPTY = "not_empty"
    """A reset or delete of a group that still has members."""
    UNKNOWN_GROUP = "unknown_group"
    UNKNOWN_MEMBER = "unknown_member"


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The outcome of one entry; ``replaced`` names a static member a join fenced."""

    outcome: Outcome
    detail: str = ""
    replaced: str | None = None

    @property
    def applied(self) -> bool:
        return self.outcome is Outcome.APPLIED


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One present member, as its join entry described it."""

    member_id: str
    instance_id: str | None
    weight: float
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_epoch: int

    @property
    def key(self) -> str:
        """The assignment key: instance id for a static member, else member id."""
        return self.instance_id or self.member_id


@dataclass(frozen=True, slots=True)
class Ownership:
    """A confirmed owner of one partition."""

    member_id: str
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed position: the next offset to read, and the committer's note."""

    next_offset: int
    metadata: str = ""


@dataclass(slots=True)
class Group:
    """The state of one group (see the module docstring); mutated only by apply."""

    group_id: str
    group_epoch: int = 0
    members: dict[str, MemberInfo] = field(default_factory=dict)
    subscription: Subscription | None = None
    partition_counts: dict[str, int] = field(default_factory=dict)
    owners: dict[TopicPartition, Ownership] = field(default_factory=dict)
    assignment_epochs: dict[TopicPartition, int] = field(default_factory=dict)
    commits: dict[TopicPartition, Committed] = field(default_factory=dict)
    target_keys: dict[TopicPartition, str] = field(default_factory=dict)
    """Partition -> member key that should own it, recomputed at every group epoch."""

    def partitions(self) -> list[TopicPartition]:
        """The group's partitions: subscribed topics of the last ``partitions`` entry."""
        if self.subscription is None:
            return []
        return [
            (topic, index)
            for topic in sorted(self.partition_counts)
            if self.subscription.matches(topic)
            for index in range(self.partition_counts[topic])
        ]

    def target(self) -> dict[TopicPartition, str]:
        """Partition -> member *key* that should own it (see :meth:`retarget`)."""
        return self.target_keys

    def retarget(self) -> None:
        """Recompute the target after the members or partitions changed.

        Sticky: the previous target is an input, so partitions stay with their
        member whenever the loads allow, and a join moves only the joiner's share.
        Every replica applies the same entries in the same order, so every replica
        computes the same sequence of targets; this runs at *every* group epoch
        (never lazily), since skipping one would change the next.
        """
        members = [AssignmentMember(m.key, m.weight) for m in self.members.values()]
        self.target_keys = target_assignment(
            self.group_id, members, self.partitions(), self.target_keys
        )

    def member_by_key(self, key: str) -> MemberInfo | None:
        return next((m for m in self.members.values() if m.key == key), None)

    def target_of(self, member_id: str) -> list[TopicPartition]:
        """The partitions whose target is ``member_id``, in order."""
        member = self.members.get(member_id)
        if member is None:
            return []
        return [tp for tp, key in sorted(self.target().items()) if key == member.key]

    def owned_by(self, member_id: str) -> dict[TopicPartition, int]:
        """Partition -> assignment epoch of what ``member_id`` owns."""
        return {
            tp: owner.assignment_epoch
            for tp, owner in sorted(self.owners.items())
            if owner.member_id == member_id
        }


class GroupState:
    """All groups of one ``__groups`` partition, applied entry by entry."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.applied_count = 0
        self._builder: SnapshotBuilder | None = None

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def apply(self, entry: GroupEntry) -> ApplyResult:
        """Apply one entry; deterministic, never raises on a well-formed entry."""
        if self._builder is not None:
            self._builder.capture(entry.group_id)  # before the entry changes it
        self.applied_count += 1
        match entry:
            case Join():
                return self._join(entry)
            case Leave():
                return self._leave(entry)
            case Partitions():
                return self._partitions(entry)
            case Own():
                return self._own(entry)
            case Release():
                return self._release(entry)
            case Commit():
                return self._commit(entry)
            case Reset():
                return self._reset(entry)
            case Delete():
                return self._delete(entry)

    def _join(self, entry: Join) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            if len(self.groups) >= GROUPS_PER_PARTITION_MAX:
                return ApplyResult(Outcome.GROUP_FULL, "too many groups in this partition")
            group = self.groups[entry.group_id] = Group(entry.group_id)
        if entry.member_id in group.members:
            return ApplyResult(Outcome.DUPLICATE, "member already present")
        replaced = group.member_by_key(entry.instance_id) if entry.instance_id else None
        if group.members and group.subscription != entry.subscription:
            return ApplyResult(Outcome.SUBSCRIPTION_MISMATCH, f"it has {group.subscription}")
        if replaced is None and len(group.members) >= GROUP_MEMBERS_MAX:
            return ApplyResult(Outcome.GROUP_FULL, f"{GROUP_MEMBERS_MAX} members already")
        if replaced is not None:
            self._drop_member(group, replaced.member_id)
        group.subscription = entry.subscription
        group.group_epoch += 1
        group.members[entry.member_id] = MemberInfo(
            member_id=entry.member_id,
            instance_id=entry.instance_id,
            weight=entry.weight,
            session_timeout_ms=entry.session_timeout_ms,
            rebalance_timeout_ms=entry.rebalance_timeout_ms,
            member_epoch=group.group_epoch,
        )
        group.retarget()
        return ApplyResult(
            Outcome.APPLIED, replaced=None if replaced is None else replaced.member_id
        )

    def _leave(self, entry: Leave) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.UNKNOWN_GROUP)
        if entry.member_id not in group.members:
            return ApplyResult(Outcome.UNKNOWN_MEMBER)
        self._drop_member(group, entry.member_id)
        group.group_epoch += 1
        group.retarget()
        return ApplyResult(Outcome.APPLIED)

    @staticmethod
    def _drop_member(group: Group, member_id: str) -> None:
        del group.members[member_id]
        for tp in [tp for tp, owner in group.owners.items() if owner.member_id == member_id]:
            del group.owners[tp]

    def _partitions(self, entry: Partitions) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.UNKNOWN_GROUP)
        counts = dict(entry.counts)
        if counts == group.partition_counts:
            return ApplyResult(Outcome.DUPLICATE)
        group.partition_counts = counts
        present = set(group.partitions())
        for tp in [tp for tp in group.owners if tp not in present]:
            del group.owners[tp]
        group.group_epoch += 1
        group.retarget()
        return ApplyResult(Outcome.APPLIED)

    def _own(self, entry: Own) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.UNKNOWN_GROUP)
        member = group.members.get(entry.member_id)
        if member is None:
            return ApplyResult(Outcome.FENCED, "member not present")
        tp = (entry.topic, entry.partition)
        current = group.owners.get(tp)
        if current is not None:
            if current == Ownership(entry.member_id, entry.assignment_epoch):
                return ApplyResult(Outcome.DUPLICATE)
            return ApplyResult(Outcome.OWNED, f"owned by {current.member_id}")
        if group.target().get(tp) != member.key:
            return ApplyResult(Outcome.NOT_TARGET)
        expected = group.assignment_epochs.get(tp, 0) + 1
        if entry.assignment_epoch != expected:
            return ApplyResult(Outcome.STALE_EPOCH, f"expected assignment epoch {expected}")
        group.owners[tp] = Ownership(entry.member_id, entry.assignment_epoch)
        group.assignment_epochs[tp] = entry.assignment_epoch
        return ApplyResult(Outcome.APPLIED)

    def _release(self, entry: Release) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.UNKNOWN_GROUP)
        tp = (entry.topic, entry.partition)
        if group.owners.get(tp) != Ownership(entry.member_id, entry.assignment_epoch):
            return ApplyResult(Outcome.FENCED, "not the owner at that assignment epoch")
        del group.owners[tp]
        return ApplyResult(Outcome.APPLIED)

    def _commit(self, entry: Commit) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.FENCED, "no such group")
        member = group.members.get(entry.member_id)
        if member is None or member.member_epoch != entry.member_epoch:
            return ApplyResult(Outcome.FENCED, "member not present at that member epoch")
        tp = (entry.topic, entry.partition)
        if group.owners.get(tp) != Ownership(entry.member_id, entry.assignment_epoch):
            return ApplyResult(Outcome.FENCED, "not the owner at that assignment epoch")
        current = group.commits.get(tp)
        if current is not None and entry.next_offset < current.next_offset:
            return ApplyResult(Outcome.OFFSET_BEHIND, f"committed {current.next_offset}")
        group.commits[tp] = Committed(entry.next_offset, entry.metadata)
        return ApplyResult(Outcome.APPLIED)

    def _reset(self, entry: Reset) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            if len(self.groups) >= GROUPS_PER_PARTITION_MAX:
                return ApplyResult(Outcome.GROUP_FULL, "too many groups in this partition")
            group = self.groups[entry.group_id] = Group(entry.group_id)
        if group.members:
            return ApplyResult(Outcome.NOT_EMPTY, f"{len(group.members)} member(s)")
        for topic, partition, next_offset in entry.offsets:
            group.commits[(topic, partition)] = Committed(next_offset, "reset")
        return ApplyResult(Outcome.APPLIED)

    def _delete(self, entry: Delete) -> ApplyResult:
        group = self.groups.get(entry.group_id)
        if group is None:
            return ApplyResult(Outcome.UNKNOWN_GROUP)
        if group.members:
            return ApplyResult(Outcome.NOT_EMPTY, f"{len(group.members)} member(s)")
        del self.groups[entry.group_id]
        return ApplyResult(Outcome.APPLIED)

    def snapshot(self) -> dict[str, Any]:
        """A plain dict (msgpack-able) of the whole state, for log compaction."""
        return {
            "v": SNAPSHOT_VERSION,
            "applied_count": self.applied_count,
            "groups": [_group_snapshot(self.groups[group_id]) for group_id in self.groups],
        }

    def begin_snapshot(self) -> SnapshotBuilder:
        """Start capturing the state as it is now (see :class:`SnapshotBuilder`);
        replaces a capture in progress."""
        self._builder = SnapshotBuilder(self)
        return self._builder

    def end_snapshot(self, builder: SnapshotBuilder) -> None:
        """Stop the capture ``builder`` (finished or abandoned)."""
        if self._builder is builder:
            self._builder = None

    @classmethod
    def restore_payload(cls, payload: bytes) -> GroupState:
        """The state a :meth:`SnapshotBuilder.payload` encodes; :class:`InvalidInputError`
        if malformed."""
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(payload))
        unpacker.feed(payload)
        try:
            header = next(unpacker)
            if not isinstance(header, list) or len(header) != 3:
                raise InvalidInputError("malformed group snapshot header")
            version, applied_count, count = header
            groups = [next(unpacker) for _ in range(int(count))]
        except (StopIteration, ValueError, TypeError, msgpack.UnpackException) as error:
            raise InvalidInputError(f"malformed group snapshot: {error!r}") from None
        return cls.restore({"v": version, "applied_count": applied_count, "groups": groups})

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any]) -> GroupState:
        """The state a :meth:`snapshot` describes; :class:`InvalidInputError` if malformed."""
        if snapshot.get("v") != SNAPSHOT_VERSION:
            raise InvalidInputError(f"unsupported group snapshot version {snapshot.get('v')!r}")
        state = cls()
        try:
            state.applied_count = int(snapshot["applied_count"])
            for raw in snapshot["groups"]:
                group = _group_restore(raw)
                state.groups[group.group_id] = group
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidInputError(f"malformed group snapshot: {error!r}") from None
        return state


class SnapshotBuilder:
    """The state as of :meth:`GroupState.begin_snapshot`, captured while entries apply.

    Building a large state at once would stall the node's loop, and freezing the
    state would stall the group's calls. So the capture is incremental and
    copy-before-write: :meth:`step` encodes a few groups at a time, and
    :meth:`GroupState.apply` has a group encoded before the first entry that would
    change it. Groups created after the start are not part of it. :meth:`payload`
    is then exactly what the state was at the start (its groups in the same order),
    whatever was applied since.
    """

    def __init__(self, state: GroupState) -> None:
        self._state = state
        self.applied_count = state.applied_count
        self._order = list(state.groups)
        self._members = set(self._order)
        self._captured: dict[str, bytes] = {}
        self._position = 0

    def capture(self, group_id: str) -> None:
        """Encode ``group_id`` as it is now, if it belongs and is not encoded yet."""
        if group_id in self._members and group_id not in self._captured:
            self._captured[group_id] = msgpack.packb(_group_snapshot(self._state.groups[group_id]))

    def step(self, groups_max: int) -> bool:
        """Encode up to ``groups_max`` more groups; True when every group is."""
        order = self._order
        end = min(len(order), self._position + groups_max)
        for group_id in order[self._position : end]:
            self.capture(group_id)
        self._position = end
        return end == len(order)

    def payload(self) -> bytes:
        """The encoded state (after :meth:`step` returned True)."""
        assert self._position == len(self._order), "payload() before the capture finished"
        header: bytes = msgpack.packb([SNAPSHOT_VERSION, self.applied_count, len(self._order)])
        return b"".join([header, *(self._captured[group_id] for group_id in self._order)])


def _group_snapshot(group: Group) -> dict[str, Any]:
    subscription = group.subscription
    return {
        "group_id": group.group_id,
        "group_epoch": group.group_epoch,
        "members": [
            [
                m.member_id,
                m.instance_id,
                m.weight,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                m.member_epoch,
            ]
            for m in group.members.values()
        ],
        "subscription": None
        if subscription is None
        else [list(subscription.topics), subscription.pattern],
        "partition_counts": [[topic, count] for topic, count in group.partition_counts.items()],
        "owners": [
            [topic, index, owner.member_id, owner.assignment_epoch]
            for (topic, index), owner in group.owners.items()
        ],
        "assignment_epochs": [
            [topic, index, epoch] for (topic, index), epoch in group.assignment_epochs.items()
        ],
        "commits": [
            [topic, index, committed.next_offset, committed.metadata]
            for (topic, index), committed in group.commits.items()
        ],
        "target": [[topic, index, key] for (topic, index), key in group.target_keys.items()],
    }


def _group_restore(raw: Mapping[str, Any]) -> Group:
    subscription = raw["subscription"]
    group = Group(
        group_id=str(raw["group_id"]),
        group_epoch=int(raw["group_epoch"]),
        subscription=None
        if subscription is None
        else Subscription(tuple(subscription[0]), subscription[1]),
        partition_counts={str(topic): int(count) for topic, count in raw["partition_counts"]},
    )
    for member_id, instance_id, weight, session_ms, rebalance_ms, epoch in raw["members"]:
        group.members[member_id] = MemberInfo(
            member_id, instance_id, float(weight), int(session_ms), int(rebalance_ms), int(epoch)
        )
    for topic, index, member_id, epoch in raw["owners"]:
        group.owners[(topic, index)] = Ownership(member_id, int(epoch))
    for topic, index, epoch in raw["assignment_epochs"]:
        group.assignment_epochs[(topic, index)] = int(epoch)
    for topic, index, next_offset, metadata in raw["commits"]:
        group.commits[(topic, index)] = Committed(int(next_offset), str(metadata))
    for topic, index, key in raw["target"]:
        group.target_keys[(str(topic), int(index))] = str(key)
    return group
