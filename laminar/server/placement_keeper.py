"""Placement's bookkeeping on a node: the target replica list of every partition.

The rules are pure functions (:func:`laminar.server.rules.placement_members`,
:func:`~laminar.server.rules.placement_targets`); :class:`PlacementKeeper` holds
their last result and answers from it:

- :meth:`PlacementKeeper.replan`: every partition's target from the members (the
  view, and the members gossip reaped while their grace lasts) and the catalogue,
  each ordered for the replica host (nodes that may not lead moved last);
- :meth:`PlacementKeeper.accepts`: whether a message for a partition this node
  lacks may create its replica (only when placement assigns it here);
- :meth:`PlacementKeeper.keeps`: whether a replica its group removed stays (it was
  removed while unreachable and placement wants it back here).

:func:`settings_of` (with :func:`retention_of`) and :func:`partition_counts` read
the catalogue for the host and the group coordinators: live, so that an altered
topic's retention and compaction settings apply at the next check, without a
restart.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from laminar.ids import TopicPartition
from laminar.membership import Member
from laminar.placement import PlacementMember
from laminar.server import rules
from laminar.server.members import MemberTracker
from laminar.server.metadata import METADATA_KEY, MetadataState


class PlacementKeeper:
    """The targets placement gives the partitions, as of the last :meth:`replan`."""

    def __init__(
        self,
        node_id: str,
        members: MemberTracker,
        *,
        replica_move_grace_ms: int,
        maintenance_grace_ms: int,
    ) -> None:
        self.node_id = node_id
        self._members = members
        self._replica_move_grace_ms = replica_move_grace_ms
        self._maintenance_grace_ms = maintenance_grace_ms
        self._targets: dict[TopicPartition, tuple[str, ...]] = {}

    def placement_members(
        self, view: Iterable[Member], now_ms: int, maintenance: Collection[str]
    ) -> list[PlacementMember]:
        """The members as placement sees them: the view, and the members gossip
        reaped while their grace lasts (forgotten once it is over)."""
        view = list(view)
        in_view = {member.node_id for member in view}
        gone = self._members.gone
        view += [member for node_id, (member, _) in gone.items() if node_id not in in_view]
        members = rules.placement_members(
            view,
            self.node_id,
            {node_id: since_ms for node_id, (_member, since_ms) in gone.items()},
            now_ms,
            self._replica_move_grace_ms,
            maintenance,
            self._maintenance_grace_ms,
            self._members.incompatible,
        )
        for placed in members:
            if not placed.alive and placed.node_id not in in_view:
                del gone[placed.node_id]  # reaped, and its grace is over
        return members

    def replan(
        self,
        view: Iterable[Member],
        now_ms: int,
        metadata: MetadataState,
        may_not_lead: Collection[str],
    ) -> dict[TopicPartition, tuple[str, ...]]:
        """Recompute every partition's target; returns the non-empty ones as the
        replica host takes them (``may_not_lead``, out of disk space or in
        maintenance, moved last: never the preferred leader)."""
        topics = {
            name: (topic.spec.partitions, topic.spec.replication_factor)
            for name, topic in metadata.topics.items()
        }
        members = self.placement_members(view, now_ms, metadata.maintenance)
        self._targets = rules.placement_targets(members, topics)
        return {
            key: rules.full_last(target, may_not_lead)
            for key, target in self._targets.items()
            if target
        }

    def target_of(self, key: TopicPartition) -> tuple[str, ...]:
        """Placement's replica list for ``key``, preferred leader first (unordered
        for the host: see :meth:`replan`)."""
        return self._targets.get(key, ())

    def accepts(self, key: TopicPartition, metadata: MetadataState) -> bool:
        """Whether a message for a partition this node lacks may create its replica.

        Only when placement assigns the partition to this node: a leader adding us
        agrees with our own placement, while messages still in flight to a replica
        that was just removed (drained, moved) must not resurrect it empty.
        """
        if key != METADATA_KEY and (
            key[0] not in metadata.topics
            or not 0 <= key[1] < metadata.topics[key[0]].spec.partitions
        ):
            return False
        return self.node_id in self._targets.get(key, ())

    def keeps(self, key: TopicPartition) -> bool:
        """Whether this node's replica that its group removed stays: placement wants
        it here (it was removed while unreachable and is back), so it keeps its log
        and catches up from where it matches when the leader adds it again."""
        return self.node_id in self._targets.get(key, ())


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's cleanup settings as a replica's driver applies them."""

    retention_bytes: int | None
    """None: no limit (also when ``cleanup_policy`` is ``compact``)."""
    retention_ms: int | None
    """None: no limit (also when ``cleanup_policy`` is ``compact``)."""
    cleanup_policy: str
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    """-1: none."""
    min_cleanable_dirty_ratio: float

    @property
    def compact(self) -> bool:
        """Whether keyed compaction applies (``compact`` in the policy)."""
        return "compact" in self.cleanup_policy.split(",")


def settings_of(metadata: MetadataState, key: TopicPartition) -> TopicSettings | None:
    """The settings of ``key``'s topic as the catalogue holds them now; None for a
    topic it lacks (``__cluster``). Retention applies only to a policy with
    ``delete``: a compact-only topic keeps every key's newest record (as Kafka)."""
    topic = metadata.topics.get(key[0])
    if topic is None:
        return None
    spec = topic.spec
    deletes = "delete" in spec.cleanup_policy.split(",")
    return TopicSettings(
        retention_bytes=spec.retention_bytes if deletes and spec.retention_bytes > 0 else None,
        retention_ms=spec.retention_ms if deletes and spec.retention_ms > 0 else None,
        cleanup_policy=spec.cleanup_policy,
        delete_retention_ms=spec.delete_retention_ms,
        min_compaction_lag_ms=spec.min_compaction_lag_ms,
        max_compaction_lag_ms=spec.max_compaction_lag_ms,
        min_cleanable_dirty_ratio=spec.min_cleanable_dirty_ratio,
    )


def retention_of(metadata: MetadataState, key: TopicPartition) -> tuple[int | None, int | None]:
    """The topic's retention, ``(bytes, ms)`` with None for unlimited (and for a
    compact-only topic: :func:`settings_of`)."""
    settings = settings_of(metadata, key)
    if settings is None:
        return None, None
    return settings.retention_bytes, settings.retention_ms


def partition_counts(metadata: MetadataState) -> dict[str, int]:
    """Each topic's partition count, for the group coordinators."""
    return {name: topic.spec.partitions for name, topic in metadata.topics.items()}
