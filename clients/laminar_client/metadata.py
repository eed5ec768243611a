"""Cluster metadata as immutable values, converted once from the wire, and merged.

The API objects (client, producers, later consumer groups) read a
:class:`ClusterMetadata` snapshot; the cache in :mod:`laminar_client.client`
decides when to fetch a new one and from which nodes.

One node's answer can be wrong about leaders: a node without a replica of a
partition does not know its leader, and a node cut off from the others, or slow
to learn of a failure, reports an old leader or none. So the cache asks several
nodes and :func:`merge_answers` combines their answers; :func:`answers_settled`
says when the answers so far are enough. Both are pure functions of the answers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from laminar.errors import TopicNotAuthorizedError, UnknownTopicOrPartitionError
from laminar.placement import PlacementMember, partition_key, replicas
from laminar.topic_settings import LATER_SETTINGS, TOPIC_SETTINGS
from laminar.v1 import laminar_pb2 as pb

# Members in these states can hold replicas (a suspect member keeps its partitions).
_LIVE_STATES = frozenset({"alive", "suspect"})
# On a tie between answers, the livelier state wins (lower first).
_STATE_ORDER = {"alive": 0, "suspect": 1, "dead": 2, "left": 3}

SET_ON_TOPIC = "topic"
"""A setting's source (:meth:`TopicMetadata.source`): given when the topic was
created, or by an alter."""
CLUSTER_DEFAULT = "cluster default"
"""A setting's source: the cluster's default, when the topic was created without it
or the setting was reset."""


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One cluster member as gossiped: addresses, relative weight, zone and state."""

    node_id: str
    grpc_address: str
    gossip_address: str = ""
    weight: float = 1.0
    zone: str = ""
    state: str = "alive"
    incarnation: int = 0

    @property
    def live(self) -> bool:
        """Whether placement counts this member (alive or merely suspect)."""
        return self.state in _LIVE_STATES

    @classmethod
    def from_proto(cls, member: pb.Member) -> MemberInfo:
        return cls(
            node_id=member.node_id,
            grpc_address=member.grpc_address,
            gossip_address=member.gossip_address,
            weight=member.weight,
            zone=member.zone,
            state=member.state,
            incarnation=member.incarnation,
        )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's settings; -1 retention means unlimited.

    - ``cleanup_policy``: one of :data:`~laminar.topic_settings.CLEANUP_POLICIES`.
    - ``delete_retention_ms``: how long a tombstone (a keyed record with no value)
      stays readable once keyed compaction first covered it.
    - ``min_compaction_lag_ms`` / ``max_compaction_lag_ms``: records younger than the
      first are never compacted; one older than the second (-1: none) makes
      compaction run whatever the dirty ratio.
    - ``min_cleanable_dirty_ratio``: the share of not yet compacted bytes at which
      compaction runs.

    A node that predates keyed compaction sends none of these: they read as the
    defaults (no compaction).
    """

    partitions: int
    replication_factor: int
    retention_bytes: int = -1
    retention_ms: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = -1
    min_cleanable_dirty_ratio: float = 0.5

    @classmethod
    def from_proto(cls, config: pb.TopicConfig) -> TopicConfig:
        # A later setting unset (a node that predates it): the dataclass default.
        given: dict[str, Any] = {
            name: getattr(config, name)
            for name in TOPIC_SETTINGS
            if name not in LATER_SETTINGS or config.HasField(name)
        }
        return cls(**given)

    def to_proto(self) -> pb.TopicConfig:
        """The wire form of these settings."""
        return pb.TopicConfig(**{name: getattr(self, name) for name in TOPIC_SETTINGS})


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as the answering node knows it.

    ``replicas`` is placement's ordered list (first = preferred leader); ``leader``
    is None when unknown; ``high_watermark`` is -1 when the answering node holds no
    replica.
    """

    topic: str
    partition: int
    replicas: tuple[str, ...]
    leader: str | None = None
    high_watermark: int = -1
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, topic: str, info: pb.PartitionInfo) -> PartitionMetadata:
        return cls(
            topic=topic,
            partition=info.partition,
            replicas=tuple(info.replicas),
            leader=info.leader or None,
            high_watermark=info.high_watermark,
            voters=tuple(info.voters),
            learners=tuple(info.learners),
        )


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic: its name, settings and partitions (ordered by index)."""

    name: str
    config: TopicConfig
    partitions: tuple[PartitionMetadata, ...]
    defaults: tuple[str, ...] = ()
    """The :class:`TopicConfig` fields the cluster's defaults set at creation (the
    request left them out): ``partitions``, ``replication_factor``,
    ``retention_bytes``, ``retention_ms``."""
    sources: tuple[tuple[str, str], ...] = ()
    """Where each :class:`TopicConfig` field's value came from, as ``(field name,
    source)`` pairs: :data:`SET_ON_TOPIC` (created or altered with it) or
    :data:`CLUSTER_DEFAULT` (left out at creation, or reset). Empty from a node that
    predates it: :meth:`source` then reads ``defaults``."""

    def source(self, name: str) -> str:
        """Where the setting ``name`` came from: :data:`SET_ON_TOPIC` or
        :data:`CLUSTER_DEFAULT`."""
        for setting, source in self.sources:
            if setting == name:
                return source
        return CLUSTER_DEFAULT if name in self.defaults else SET_ON_TOPIC

    @classmethod
    def from_proto(cls, info: pb.TopicInfo) -> TopicMetadata:
        partitions = sorted(
            (PartitionMetadata.from_proto(info.name, p) for p in info.partitions),
            key=lambda p: p.partition,
        )
        return cls(
            name=info.name,
            config=TopicConfig.from_proto(info.config),
            partitions=tuple(partitions),
            defaults=tuple(info.defaults),
            sources=tuple(
                (
                    source.name,
                    CLUSTER_DEFAULT
                    if source.source == pb.SettingSource.CLUSTER_DEFAULT
                    else SET_ON_TOPIC,
                )
                for source in info.sources
            ),
        )


@dataclass(frozen=True, slots=True)
class AlteredTopic:
    """The answer to :meth:`~laminar_client.Client.alter_topic`: the topic as it is
    after the change (or would be, when only validated) and as it was before."""

    topic: TopicMetadata
    previous: TopicMetadata

    def changes(self) -> list[tuple[str, object, object]]:
        """``(field, old value, new value)`` for each setting whose value or source
        changed, in :data:`~laminar.topic_settings.TOPIC_SETTINGS` order."""
        changed: list[tuple[str, object, object]] = []
        for name in TOPIC_SETTINGS:
            old = getattr(self.previous.config, name)
            new = getattr(self.topic.config, name)
            if old != new or self.previous.source(name) != self.topic.source(name):
                changed.append((name, old, new))
        return changed


@dataclass(frozen=True, slots=True)
class AddedPartitions:
    """The answer to :meth:`~laminar_client.Client.create_partitions`: the topic
    after the change (or as it would be, when only validated) and its partition
    count before. ``topic.partitions`` lists the new ones from index ``previous``
    (with their founding replicas)."""

    topic: TopicMetadata
    previous: int

    @property
    def added(self) -> tuple[PartitionMetadata, ...]:
        """The new partitions, by index."""
        return tuple(p for p in self.topic.partitions if p.partition >= self.previous)


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """A snapshot of members and topics, as answered by node ``node_id``.

    A merged snapshot (:func:`merge_answers`) names the first node that answered in
    ``node_id`` and every node whose answer it combines in ``answered_by``.
    """

    cluster_id: str
    node_id: str
    members: Mapping[str, MemberInfo]
    topics: Mapping[str, TopicMetadata]
    metadata_offset: int = -1
    answered_by: tuple[str, ...] = ()
    filtered: bool = False
    """The answer shows only the topics this caller may describe (authorization)."""
    _partitions: dict[tuple[str, int], PartitionMetadata] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for topic in self.topics.values():
            for partition in topic.partitions:
                self._partitions[(topic.name, partition.partition)] = partition

    @classmethod
    def from_proto(cls, response: pb.MetadataResponse) -> ClusterMetadata:
        return cls(
            cluster_id=response.cluster_id,
            node_id=response.node_id,
            members={m.node_id: MemberInfo.from_proto(m) for m in response.members},
            topics={t.name: TopicMetadata.from_proto(t) for t in response.topics},
            metadata_offset=response.metadata_offset,
            answered_by=(response.node_id,),
            filtered=response.filtered,
        )

    def topic(self, name: str) -> TopicMetadata:
        """The topic named ``name``, or :class:`UnknownTopicOrPartitionError`."""
        topic = self.topics.get(name)
        if topic is None:
            if self.filtered:
                raise TopicNotAuthorizedError(name)
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def partition(self, topic: str, partition: int) -> PartitionMetadata:
        """One partition, or :class:`UnknownTopicOrPartitionError`."""
        found = self._partitions.get((topic, partition))
        if found is None:
            self.topic(topic)  # raises for an unknown topic
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        return found

    def find_partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        """One partition, or None when this snapshot does not know it."""
        return self._partitions.get((topic, partition))

    def is_live(self, node_id: str) -> bool:
        """Whether ``node_id`` may serve: not known as dead or left (unknown counts as live)."""
        member = self.members.get(node_id)
        return member is None or member.live

    def address_of(self, node_id: str) -> str | None:
        """The gRPC address of a member, or None if it is unknown or has none."""
        member = self.members.get(node_id)
        return member.grpc_address if member is not None and member.grpc_address else None

    def replicas_of(self, topic: str, partition: int) -> tuple[str, ...]:
        """The partition's replicas in placement order.

        Taken from the answering node; when it sent none, computed from the members
        with the same rendezvous placement the nodes use.
        """
        info = self.partition(topic, partition)
        if info.replicas:
            return info.replicas
        factor = self.topic(topic).config.replication_factor
        members = [
            PlacementMember(m.node_id, weight=m.weight, zone=m.zone, alive=m.live)
            for m in self.members.values()
        ]
        return replicas(partition_key(topic, partition), members, max(factor, 1))

    def live_replicas(self, topic: str, partition: int) -> tuple[str, ...]:
        """The replicas and voters that are not dead or left, in placement order."""
        info = self.partition(topic, partition)
        ordered = dict.fromkeys((*self.replicas_of(topic, partition), *info.voters))
        return tuple(node_id for node_id in ordered if self.is_live(node_id))

    def live_leader(self, topic: str, partition: int) -> str | None:
        """The leader, unless unknown or known to be dead or left."""
        leader = self.partition(topic, partition).leader
        return leader if leader and self.is_live(leader) else None

    def preferred_leader(self, topic: str, partition: int) -> str | None:
        """The live leader as known, else the first live replica, else None."""
        leader = self.live_leader(topic, partition)
        if leader is not None:
            return leader
        ordered = self.live_replicas(topic, partition)
        return ordered[0] if ordered else None

    def grpc_addresses(self) -> list[str]:
        """Every member's gRPC address, live members first, in node id order."""
        ordered = sorted(self.members.values(), key=lambda m: (not m.live, m.node_id))
        return [m.grpc_address for m in ordered if m.grpc_address]


def merge_answers(answers: Sequence[ClusterMetadata]) -> ClusterMetadata:
    """One snapshot from the ``Metadata`` answers of several nodes (at least one).

    - **Members**: a node that answered is taken as it describes itself (it is up,
      whatever the others think). Any other member gets the state most answers give
      it; a tie goes to the livelier state, because trusting a dead node costs one
      failed attempt while distrusting a live leader refuses writes. Its other
      fields come from the answer with its highest incarnation.
    - **Topics**: those of the answer with the highest ``metadata_offset`` (it has
      applied the most topic changes); the others' views of the same partitions
      still count for leaders.
    - **Leader** of a partition: a vote among the answers of nodes that host it
      (``high_watermark >= 0``) and name a live leader. Most votes wins; then a
      leader that names itself; then the highest high watermark among its voters
      (a deposed leader cannot advance it); then the lowest node id. Answers of
      nodes without a replica vote only when no hosting node names a live leader.
    - **Replicas, voters, learners** from the elected leader's own answer if it
      hosts the partition, else from the first hosting answer; the high watermark
      is the highest any hosting node reports.
    """
    assert answers, "merge_answers needs at least one answer"
    first = answers[0]
    members = _merge_members(answers)
    newest = max(answers, key=lambda answer: answer.metadata_offset)
    topics = {
        name: replace(
            topic,
            partitions=tuple(
                _merge_partition(answers, members, name, p.partition) for p in topic.partitions
            ),
        )
        for name, topic in newest.topics.items()
    }
    return ClusterMetadata(
        cluster_id=first.cluster_id,
        node_id=first.node_id,
        members=members,
        topics=topics,
        metadata_offset=newest.metadata_offset,
        answered_by=tuple(dict.fromkeys(node for a in answers for node in a.answered_by)),
        filtered=any(answer.filtered for answer in answers),
    )


def no_older_than(held: ClusterMetadata | None, merged: ClusterMetadata) -> ClusterMetadata:
    """``merged`` (a refresh's answer), unless ``held`` (the snapshot it replaces)
    is of the same cluster and has applied more of the catalogue: then ``held``'s
    topics with what ``merged`` says of their partitions (leaders, replicas, high
    watermarks: fresher), at ``held``'s metadata offset.

    The nodes answering a refresh may not yet have applied a change another node
    answered before (an added partition, an altered setting); taking their answer
    would make the client's view go back, and a partition count shrink: a keyed
    producer would map keys by the old modulo again.
    """
    if (
        held is None
        or held.cluster_id != merged.cluster_id
        or held.metadata_offset <= merged.metadata_offset
    ):
        return merged
    topics = {
        name: replace(
            topic,
            partitions=tuple(
                merged.find_partition(name, p.partition) or p for p in topic.partitions
            ),
        )
        for name, topic in held.topics.items()
    }
    return replace(merged, topics=topics, metadata_offset=held.metadata_offset, _partitions={})


def answers_settled(answers: Sequence[ClusterMetadata], focus: tuple[str, int] | None) -> bool:
    """Whether asking more nodes would not change what these answers say.

    Settled when, for the ``focus`` partition (without a focus: for every
    partition), at least two hosting nodes (one, if it has a single live replica)
    name the same live leader and no hosting node names another. One answer is
    never enough where two can be had: a node that was cut off, or is slow to learn
    of an election, names an old leader, itself included.
    """
    if not answers:
        return False
    merged = merge_answers(answers)
    if focus is None:
        keys = [(t.name, p.partition) for t in merged.topics.values() for p in t.partitions]
    elif merged.find_partition(*focus) is None:
        return False  # maybe a topic too new for these nodes
    else:
        keys = [focus]
    for topic, partition in keys:
        named = _hosting_leaders(answers, merged, topic, partition)
        wanted = min(2, max(1, len(merged.live_replicas(topic, partition))))
        if len(named) < wanted or len(set(named)) != 1:
            return False
    return True


def _hosting_leaders(
    answers: Sequence[ClusterMetadata], merged: ClusterMetadata, topic: str, partition: int
) -> list[str]:
    """The live leaders that nodes hosting the partition name, one entry per answer."""
    views = [answer.find_partition(topic, partition) for answer in answers]
    return [
        info.leader
        for info in views
        if info is not None
        and info.high_watermark >= 0
        and info.leader
        and merged.is_live(info.leader)
    ]


def _merge_members(answers: Sequence[ClusterMetadata]) -> dict[str, MemberInfo]:
    answered = {answer.node_id: answer for answer in answers}
    views: dict[str, list[MemberInfo]] = {}
    for answer in answers:
        for member in answer.members.values():
            views.setdefault(member.node_id, []).append(member)
    merged: dict[str, MemberInfo] = {}
    for node_id in sorted(views):
        own = answered.get(node_id)
        if own is not None and node_id in own.members:
            merged[node_id] = own.members[node_id]
            continue
        reported = views[node_id]
        counts = Counter(member.state for member in reported)
        state = min(counts, key=lambda s: (-counts[s], _STATE_ORDER.get(s, len(_STATE_ORDER))))
        newest = max(reported, key=lambda member: member.incarnation)
        merged[node_id] = replace(newest, state=state)
    return merged


def _merge_partition(
    answers: Sequence[ClusterMetadata],
    members: Mapping[str, MemberInfo],
    topic: str,
    partition: int,
) -> PartitionMetadata:
    views = [
        (answer, info)
        for answer in answers
        if (info := answer.find_partition(topic, partition)) is not None
    ]
    hosting = [(answer, info) for answer, info in views if info.high_watermark >= 0]
    leader = _elect(hosting, members) or _elect(views, members)
    base = next(
        (info for answer, info in hosting if answer.node_id == leader),
        hosting[0][1] if hosting else views[0][1],
    )
    high_watermark = max((info.high_watermark for _, info in hosting), default=-1)
    return replace(base, leader=leader, high_watermark=high_watermark)


def _elect(
    views: Sequence[tuple[ClusterMetadata, PartitionMetadata]],
    members: Mapping[str, MemberInfo],
) -> str | None:
    """The leader most of ``views`` name (see :func:`merge_answers` for the ties)."""
    votes: Counter[str] = Counter()
    self_named: set[str] = set()
    high_watermarks: dict[str, int] = {}
    for answer, info in views:
        leader = info.leader
        member = members.get(leader) if leader else None
        if not leader or (member is not None and not member.live):
            continue
        votes[leader] += 1
        if answer.node_id == leader:
            self_named.add(leader)
        high_watermarks[leader] = max(high_watermarks.get(leader, -1), info.high_watermark)
    if not votes:
        return None
    return min(
        votes,
        key=lambda node: (-votes[node], node not in self_named, -high_watermarks[node], node),
    )


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One partition's replication health, from ``DescribeCluster``."""

    topic: str
    partition: int
    leader: str | None
    replicas: tuple[str, ...]
    voters: tuple[str, ...]
    under_replicated: bool
    in_sync: tuple[str, ...] = ()
    """The voters in sync with the leader (it included): answered it and held its
    whole log recently."""
    term: int = 0
    """The leader's term: how many elections the group has had (0: no leader)."""

    @classmethod
    def from_proto(cls, health: pb.PartitionHealth) -> PartitionHealth:
        return cls(
            topic=health.topic,
            partition=health.partition,
            leader=health.leader or None,
            replicas=tuple(health.replicas),
            voters=tuple(health.voters),
            under_replicated=health.under_replicated,
            in_sync=tuple(health.in_sync),
            term=health.term,
        )


@dataclass(frozen=True, slots=True)
class FencedReplica:
    """A replica out of service on node ``node_id`` after a storage failure."""

    node_id: str
    topic: str
    partition: int
    reason: str
    fenced_for_ms: int

    @classmethod
    def from_proto(cls, node_id: str, fenced: pb.FencedReplica) -> FencedReplica:
        return cls(node_id, fenced.topic, fenced.partition, fenced.reason, fenced.fenced_for_ms)


@dataclass(frozen=True, slots=True)
class DamagedReplica:
    """A replica on node ``node_id`` healing from damaged storage (its damaged files
    set aside in ``quarantine``, "" when found by an earlier start of the node)."""

    node_id: str
    topic: str
    partition: int
    reason: str
    damaged_for_ms: int
    quarantine: str

    @classmethod
    def from_proto(cls, node_id: str, damaged: pb.DamagedReplica) -> DamagedReplica:
        return cls(
            node_id,
            damaged.topic,
            damaged.partition,
            damaged.reason,
            damaged.damaged_for_ms,
            damaged.quarantine,
        )


@dataclass(frozen=True, slots=True)
class IncompatiblePeer:
    """Node ``node_id`` refused ``peer_id`` (at ``address``) for its protocol version."""

    node_id: str
    peer_id: str
    address: str
    protocol_version: int
    reason: str
    refused_for_ms: int

    @classmethod
    def from_proto(cls, node_id: str, peer: pb.IncompatiblePeer) -> IncompatiblePeer:
        return cls(
            node_id,
            peer.node_id,
            peer.address,
            peer.protocol_version,
            peer.reason,
            peer.refused_for_ms,
        )


@dataclass(frozen=True, slots=True)
class NodeDisk:
    """Node ``node_id``'s data directory as it last measured it (bytes). The node is
    ``full`` while ``free_bytes`` is below ``watermark_bytes``: it leads nothing and
    takes no new replicas until space comes back."""

    node_id: str
    free_bytes: int
    total_bytes: int
    watermark_bytes: int
    full: bool

    @classmethod
    def from_proto(cls, node_id: str, disk: pb.NodeDisk) -> NodeDisk:
        return cls(node_id, disk.free_bytes, disk.total_bytes, disk.watermark_bytes, disk.full)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """Members and per-partition health, as answered by node ``node_id``."""

    cluster_id: str
    node_id: str
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionHealth, ...]
    fenced: tuple[FencedReplica, ...] = ()
    """Replicas out of service after a storage failure (each node reports its own)."""
    damaged: tuple[DamagedReplica, ...] = ()
    """Replicas healing from damaged storage (each node reports its own)."""
    disks: tuple[NodeDisk, ...] = ()
    """Each answering node's free space and full-disk state (each reports its own)."""
    maintenance: tuple[str, ...] = ()
    """The nodes in maintenance (cluster metadata: they lead nothing, and keep their
    replicas while down for up to the nodes' ``maintenance_grace_ms``)."""
    incompatible_peers: tuple[IncompatiblePeer, ...] = ()
    """Peers a node refused for an incompatible protocol version (each reports its own)."""

    @classmethod
    def from_proto(cls, response: pb.DescribeClusterResponse) -> ClusterDescription:
        disks: tuple[NodeDisk, ...] = ()
        if response.HasField("disk"):
            disks = (NodeDisk.from_proto(response.node_id, response.disk),)
        return cls(
            cluster_id=response.cluster_id,
            node_id=response.node_id,
            members=tuple(MemberInfo.from_proto(m) for m in response.members),
            partitions=tuple(PartitionHealth.from_proto(p) for p in response.partitions),
            fenced=tuple(FencedReplica.from_proto(response.node_id, f) for f in response.fenced),
            damaged=tuple(DamagedReplica.from_proto(response.node_id, d) for d in response.damaged),
            disks=disks,
            maintenance=tuple(response.maintenance),
            incompatible_peers=tuple(
                IncompatiblePeer.from_proto(response.node_id, peer)
                for peer in response.incompatible_peers
            ),
        )


@dataclass(frozen=True, slots=True)
class GossipKeyring:
    """One node's gossip encryption keyring (``Client.gossip_keyring``). ``keys``
    are secrets (32 bytes each), primary first; empty means no encryption."""

    node_id: str
    keys: tuple[bytes, ...]
    encrypt_verify_incoming: bool
    encrypt_verify_outgoing: bool
    counters: Mapping[str, int] = field(default_factory=dict)
    """Gossip frames the node dropped, by reason, and plain frames it accepted."""

    @property
    def primary(self) -> bytes | None:
        return self.keys[0] if self.keys else None

    @classmethod
    def from_proto(cls, answer: pb.GossipKeyringResponse) -> GossipKeyring:
        return cls(
            node_id=answer.node_id,
            keys=tuple(answer.keys),
            encrypt_verify_incoming=answer.encrypt_verify_incoming,
            encrypt_verify_outgoing=answer.encrypt_verify_outgoing,
            counters=dict(answer.counters),
        )
