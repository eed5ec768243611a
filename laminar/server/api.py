"""What the gRPC service (:mod:`laminar.server.service`) needs of its node.

Three protocols at one seam, so that the service depends on no concrete part of
the node and a unit test gives it a fake (``tests/server/test_service_unit.py``):

- :class:`NodeApi`: the node (:class:`~laminar.server.node.Node` is one): its ids,
  the catalogue, the members, placement, and the two below.
- :class:`PartitionHost`: the replica host's data path and its reports
  (:class:`~laminar.server.host.ReplicaHost` is one, structurally).
- :class:`GroupCoordinators`: the group coordinators of the ``__groups``
  partitions this node leads (:class:`~laminar.server.groups.GroupHost` is one).

A replica's state reaches the service as a :class:`ReplicaStatus` value, read by
the node: the service never holds a replica or its consensus core.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from laminar.errors import CorruptSegmentError, LaminarError
from laminar.groups.coordinator import HeartbeatAnswer, HeartbeatRequest
from laminar.groups.entries import Commit, Delete, Reset
from laminar.groups.state import ApplyResult, Group
from laminar.ids import TopicPartition
from laminar.membership import Member
from laminar.placement import PlacementMember
from laminar.replica.types import Acks, Role
from laminar.server.disk import DiskStatus
from laminar.server.host import (
    DamagedReplica,
    FencedReplica,
    FetchResult,
    PartitionOffsets,
    ProduceResult,
)
from laminar.server.keyring import NodeKeyring
from laminar.server.metadata import MetadataState
from laminar.server.observability.history import CounterHistory, LeadershipLog
from laminar.server.transport import IncompatiblePeer


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One local replica as the service reports it (read at one instant)."""

    role: Role
    leader: str | None
    """The leader the replica knows (itself when it leads); None during an election."""
    term: int
    high_watermark: int
    voters: tuple[str, ...]
    learners: tuple[str, ...]


class PartitionHost(Protocol):
    """The replica host as the service uses it: reads and writes through the local
    replicas, and what the host reports about them."""

    @property
    def leadership_log(self) -> LeadershipLog:
        """The leadership changes this node saw lately (``NodeStatus``)."""
        ...

    def now_ms(self) -> int: ...

    def replica_keys(self) -> list[TopicPartition]: ...

    def is_fenced(self, key: TopicPartition) -> bool: ...

    def fenced(self) -> list[FencedReplica]: ...

    def damaged(self) -> list[DamagedReplica]: ...

    def disk_status(self) -> DiskStatus: ...

    def full_nodes(self) -> frozenset[str]: ...

    def accept_data_loss(self, key: TopicPartition) -> bool: ...

    async def produce(
        self, key: TopicPartition, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult: ...

    async def produce_batches(
        self, key: TopicPartition, batches: Sequence[bytes], acks: Acks, timeout_s: float
    ) -> list[ProduceResult]: ...

    async def produce_many(
        self,
        requests: Sequence[tuple[TopicPartition, Sequence[bytes]]],
        acks: Acks,
        timeout_s: float,
    ) -> list[list[ProduceResult] | LaminarError]: ...

    async def fetch(
        self, key: TopicPartition, offset: int, max_bytes: int, max_wait_s: float
    ) -> FetchResult: ...

    def list_offsets(self, key: TopicPartition, timestamp_ms: int | None) -> PartitionOffsets: ...

    async def check_reported(
        self, key: TopicPartition, offset: int
    ) -> CorruptSegmentError | None: ...


class GroupCoordinators(Protocol):
    """The coordinators of the groups whose ``__groups`` partition this node leads."""

    async def heartbeat(self, request: HeartbeatRequest, timeout_s: float) -> HeartbeatAnswer: ...

    async def commit(
        self, commits: Sequence[Commit], timeout_s: float
    ) -> list[ApplyResult | None]: ...

    async def admin(self, entry: Reset | Delete, timeout_s: float) -> ApplyResult | None: ...

    async def group(self, group_id: str, timeout_s: float) -> Group | None: ...

    def host_of(self, group_id: str, member_id: str) -> str: ...

    def led_groups(self) -> Iterator[Group]: ...


class NodeApi(Protocol):
    """What the service needs of its node (:class:`~laminar.server.node.Node` is one)."""

    @property
    def node_id(self) -> str: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def host(self) -> PartitionHost: ...

    @property
    def metadata(self) -> MetadataState: ...

    @property
    def groups(self) -> GroupCoordinators: ...

    @property
    def keyring(self) -> NodeKeyring:
        """The node's gossip keyring."""
        ...

    def serves(self, key: TopicPartition) -> bool:
        """Whether this node holds a replica of ``key`` (fenced or not): a request
        for it is answered here rather than sent elsewhere."""
        ...

    def replica_status(self, key: TopicPartition) -> ReplicaStatus | None:
        """The local replica of ``key`` (None: none here)."""
        ...

    def in_sync_voters(self, key: TopicPartition, now_ms: int) -> list[str]:
        """The voters of ``key`` that the local leader heard from lately."""
        ...

    def members(self) -> list[Member]:
        """The membership view (never blocks)."""
        ...

    def target_of(self, key: TopicPartition) -> tuple[str, ...]:
        """Placement's replica list for ``key``, preferred leader first."""
        ...

    def grpc_address_of(self, node_id: str | None) -> str | None: ...

    def placement_members(self) -> list[PlacementMember]: ...

    @property
    def protocol_version(self) -> int: ...

    def incompatible_peers(self) -> list[IncompatiblePeer]:
        """Peers refused for their protocol version."""
        ...

    def update_self(self, weight: float | None, zone: str | None) -> Member:
        """Change this node's weight and/or zone; returns it as a member."""
        ...

    async def wait_metadata(self, offset: int, timeout_s: float) -> None:
        """Wait until the catalogue applied the metadata log up to ``offset``."""
        ...

    @property
    def counter_history(self) -> CounterHistory:
        """The node's produce and fetch counters, sampled (``NodeStatus``)."""
        ...
