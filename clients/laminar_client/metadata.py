"""Cluster metadata as immutable values, converted once from the wire.

The API objects (client, producers, later consumer groups) read a
:class:`ClusterMetadata` snapshot; the :class:`~laminar_client.transport.Transport`
and the cache in :mod:`laminar_client.client` decide when to fetch a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar.errors import UnknownTopicOrPartitionError
from laminar.placement import PlacementMember, partition_key, replicas
from laminar.v1 import laminar_pb2 as pb

# Members in these states can hold replicas (a suspect member keeps its partitions).
_LIVE_STATES = frozenset({"alive", "suspect"})


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
    """A topic's settings; -1 retention means unlimited."""

    partitions: int
    replication_factor: int
    retention_bytes: int = -1
    retention_ms: int = -1

    @classmethod
    def from_proto(cls, config: pb.TopicConfig) -> TopicConfig:
        return cls(
            partitions=config.partitions,
            replication_factor=config.replication_factor,
            retention_bytes=config.retention_bytes,
            retention_ms=config.retention_ms,
        )

    def to_proto(self) -> pb.TopicConfig:
        return pb.TopicConfig(
            partitions=self.partitions,
            replication_factor=self.replication_factor,
            retention_bytes=self.retention_bytes,
            retention_ms=self.retention_ms,
        )


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
        )


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """A snapshot of members and topics, as answered by node ``node_id``."""

    cluster_id: str
    node_id: str
    members: Mapping[str, MemberInfo]
    topics: Mapping[str, TopicMetadata]
    metadata_offset: int = -1
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
        )

    def topic(self, name: str) -> TopicMetadata:
        """The topic named ``name``, or :class:`UnknownTopicOrPartitionError`."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return topic

    def partition(self, topic: str, partition: int) -> PartitionMetadata:
        """One partition, or :class:`UnknownTopicOrPartitionError`."""
        found = self._partitions.get((topic, partition))
        if found is None:
            self.topic(topic)  # raises for an unknown topic
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        return found

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

    def preferred_leader(self, topic: str, partition: int) -> str | None:
        """The leader as known, else placement's first replica, else None."""
        info = self.partition(topic, partition)
        if info.leader:
            return info.leader
        ordered = self.replicas_of(topic, partition)
        return ordered[0] if ordered else None

    def grpc_addresses(self) -> list[str]:
        """Every member's gRPC address, live members first, in node id order."""
        ordered = sorted(self.members.values(), key=lambda m: (not m.live, m.node_id))
        return [m.grpc_address for m in ordered if m.grpc_address]


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One partition's replication health, from ``DescribeCluster``."""

    topic: str
    partition: int
    leader: str | None
    replicas: tuple[str, ...]
    voters: tuple[str, ...]
    under_replicated: bool

    @classmethod
    def from_proto(cls, health: pb.PartitionHealth) -> PartitionHealth:
        return cls(
            topic=health.topic,
            partition=health.partition,
            leader=health.leader or None,
            replicas=tuple(health.replicas),
            voters=tuple(health.voters),
            under_replicated=health.under_replicated,
        )


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """Members and per-partition health, as answered by node ``node_id``."""

    cluster_id: str
    node_id: str
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionHealth, ...]

    @classmethod
    def from_proto(cls, response: pb.DescribeClusterResponse) -> ClusterDescription:
        return cls(
            cluster_id=response.cluster_id,
            node_id=response.node_id,
            members=tuple(MemberInfo.from_proto(m) for m in response.members),
            partitions=tuple(PartitionHealth.from_proto(p) for p in response.partitions),
        )
