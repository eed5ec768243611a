"""The public gRPC service (``laminar.v1.Laminar``) of a broker node.

Every handler validates its request, does the work through the node's replica host
and metadata, and turns any :class:`~laminar.errors.LaminarError` into a status
with a typed detail (:mod:`laminar.grpc_errors`). An unexpected exception becomes
``INTERNAL`` with a log line; it never takes the node down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from laminar.errors import (
    BatchLimitError,
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import abort_with
from laminar.membership import Member
from laminar.placement import partition_key, replicas
from laminar.records import parse_header
from laminar.replica.types import Acks, Role
from laminar.server.host import PartitionKey
from laminar.server.metadata import (
    CLUSTER_TOPIC,
    METADATA_KEY,
    TopicSpec,
    TopicState,
    create_topic_command,
    delete_topic_command,
)
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc

if TYPE_CHECKING:
    from laminar.server.node import Node

_LOG = logging.getLogger(__name__)
_ACKS = {pb.ACKS_ALL: Acks.ALL, pb.ACKS_LEADER: Acks.LEADER, pb.ACKS_NONE: Acks.NONE}
BATCHES_PER_PRODUCE_MAX = 10_000
ADMIN_TIMEOUT_S = 15.0

_R = TypeVar("_R")
_Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_R]]


def _guarded(handler: _Handler[_R]) -> _Handler[_R]:
    """Map Laminar errors to statuses; log and hide anything unexpected."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _R:
        try:
            return await handler(self, request, context)
        except LaminarError as error:
            await abort_with(context, error)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception:
            _LOG.exception("%s failed", handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error (see the node log)")
        raise AssertionError("unreachable")  # abort always raises

    return wrapper


class LaminarService(laminar_pb2_grpc.LaminarServicer):
    def __init__(self, node: Node) -> None:
        self._node = node

    # ------------------------------------------------------------------ data

    @_guarded
    async def Produce(  # noqa: N802 - gRPC method names
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        node = self._node
        key = self._key(request.topic, request.partition)
        if not request.batches:
            raise InvalidInputError("a produce request needs at least one batch")
        if len(request.batches) > BATCHES_PER_PRODUCE_MAX:
            raise BatchLimitError(
                f"{len(request.batches)} batches in one request; at most {BATCHES_PER_PRODUCE_MAX}"
            )
        for batch in request.batches:
            header = parse_header(batch)
            if header.length != len(batch):
                raise InvalidInputError(
                    f"batch announces {header.length} bytes but {len(batch)} were sent"
                )
            if header.is_control:
                raise InvalidInputError("control batches are internal")
        acks = _ACKS.get(request.acks)
        if acks is None:
            raise InvalidInputError(f"unknown acks value {request.acks}")
        timeout_ms = request.timeout_ms or node.config.produce_timeout_ms
        timeout_s = min(timeout_ms, 10 * node.config.produce_timeout_ms) / 1000
        host = node.host
        assert host is not None
        if host.get(key) is None:
            raise self._not_leader(key)
        try:
            calls = [host.produce(key, bytes(b), acks, timeout_s) for b in request.batches]
            # One batch (the common case) is awaited directly: gather would wrap it in
            # a task, one more hop through the event loop each way.
            results = [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls)
        except NotLeaderError as error:
            raise NotLeaderError(error.leader_id, node.grpc_address_of(error.leader_id)) from None
        return pb.ProduceResponse(
            base_offsets=[result.base_offset for result in results],
            duplicates=[result.duplicate for result in results],
        )

    @_guarded
    async def Fetch(  # noqa: N802
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        node = self._node
        key = self._key(request.topic, request.partition, internal=True)
        config = node.config
        max_bytes = request.max_bytes or config.fetch_bytes_max
        if max_bytes > config.fetch_bytes_max:
            raise InvalidInputError(f"max_bytes must be at most {config.fetch_bytes_max}")
        if request.offset < 0:
            raise InvalidInputError(f"offset must be >= 0, got {request.offset}")
        wait_s = min(request.max_wait_ms, config.fetch_wait_ms_max) / 1000
        host = node.host
        assert host is not None
        if host.get(key) is None:
            target = node.target_of(key)
            raise UnknownTopicOrPartitionError(
                f"{key[0]}/{key[1]} has no replica on {node.node_id}; replicas: "
                f"{', '.join(target) or 'unknown'}"
            )
        result = await host.fetch(key, request.offset, max_bytes, wait_s)
        return pb.FetchResponse(
            batches=result.batches,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            served_by=node.node_id,
        )

    # ------------------------------------------------------------------ metadata

    @_guarded
    async def Metadata(  # noqa: N802
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        node = self._node
        names = list(request.topics) or sorted(node.metadata.topics)
        topics = []
        for name in names:
            topic = node.metadata.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"no topic {name!r}")
            topics.append(self._topic_info(topic))
        return pb.MetadataResponse(
            cluster_id=node.identity.cluster_id or "",
            node_id=node.node_id,
            members=[_member(m) for m in node.members()],
            topics=topics,
            metadata_offset=node.metadata.applied_offset,
        )

    @_guarded
    async def ListTopics(  # noqa: N802
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTopicsResponse:
        node = self._node
        return pb.ListTopicsResponse(
            topics=[self._topic_info(node.metadata.topics[n]) for n in sorted(node.metadata.topics)]
        )

    @_guarded
    async def DescribeCluster(  # noqa: N802
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeClusterResponse:
        """Members, and the health of every partition this node leads."""
        node = self._node
        host = node.host
        assert host is not None
        partitions = []
        for key in sorted(host.keys()):
            replica = host.get(key)
            if replica is None or replica.core.role is not Role.LEADER:
                continue
            core = replica.core
            config = core.group_config
            voters = list(config.voters) if config else []
            matches = core.match_offsets()
            in_sync = sum(
                1 for v in voters if v == node.node_id or matches.get(v, -1) >= core.high_watermark
            )
            wanted = self._replication_factor(key)
            partitions.append(
                pb.PartitionHealth(
                    topic=key[0],
                    partition=key[1],
                    leader=node.node_id,
                    replicas=list(node.target_of(key)),
                    voters=voters,
                    under_replicated=in_sync < wanted,
                )
            )
        return pb.DescribeClusterResponse(
            cluster_id=node.identity.cluster_id or "",
            node_id=node.node_id,
            members=[_member(m) for m in node.members()],
            partitions=partitions,
        )

    @_guarded
    async def UpdateNode(  # noqa: N802
        self, request: pb.UpdateNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateNodeResponse:
        node = self._node
        weight = request.weight if request.HasField("weight") else None
        zone = request.zone if request.HasField("zone") else None
        if zone is not None and (len(zone.encode()) > 64 or "\x00" in zone):
            raise InvalidInputError("zone must be at most 64 bytes without NUL")
        if weight is not None and not (0 <= weight < float("inf")):
            raise InvalidInputError(f"weight must be a finite number >= 0, got {weight}")
        node.update_self(weight, zone)
        me = next(m for m in node.members() if m.node_id == node.node_id)
        # The gossip thread applies the change asynchronously: answer with what was set.
        me = dataclasses.replace(me, weight=node.identity.weight, zone=node.identity.zone)
        return pb.UpdateNodeResponse(member=_member(me))

    # ------------------------------------------------------------------ admin

    @_guarded
    async def CreateTopic(  # noqa: N802
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicResponse:
        node = self._node
        config = request.config
        spec = TopicSpec(
            name=request.name,
            partitions=config.partitions or 1,
            replication_factor=config.replication_factor or 3,
            retention_bytes=config.retention_bytes or -1,
            retention_ms=config.retention_ms or -1,
        )
        spec.validate()
        self._require_metadata_leader()
        if spec.name in node.metadata.topics:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        members = node._placement_members()
        eligible = sum(1 for m in members if m.eligible)
        if spec.replication_factor > eligible:
            raise InvalidTopicError(
                f"replication factor {spec.replication_factor} needs as many nodes with "
                f"weight > 0; the cluster has {eligible}"
            )
        founders = [
            replicas(partition_key(spec.name, p), members, spec.replication_factor)
            for p in range(spec.partitions)
        ]
        command_id = uuid.uuid4().hex
        offset = await self._propose_metadata(create_topic_command(spec, founders, command_id))
        topic = node.metadata.topics.get(spec.name)
        if topic is None or node.metadata.applied_ids.get(command_id) != offset:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        if topic.command_id != command_id:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        return pb.CreateTopicResponse(topic=self._topic_info(topic))

    @_guarded
    async def DeleteTopic(  # noqa: N802
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        node = self._node
        self._require_metadata_leader()
        if request.name not in node.metadata.topics:
            raise UnknownTopicOrPartitionError(f"no topic {request.name!r}")
        await self._propose_metadata(delete_topic_command(request.name, uuid.uuid4().hex))
        return pb.DeleteTopicResponse()

    # ------------------------------------------------------------------ helpers

    def _key(self, topic: str, partition: int, *, internal: bool = False) -> PartitionKey:
        """The partition named by a request; ``internal`` allows ``__cluster/0``
        (readable like any partition, for metadata catch-up; never writable)."""
        if topic == CLUSTER_TOPIC and partition == 0 and internal:
            return METADATA_KEY
        state = self._node.metadata.topics.get(topic)
        if state is None:
            raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
        if not 0 <= partition < state.spec.partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{state.spec.partitions - 1}, not {partition}"
            )
        return (topic, partition)

    def _replication_factor(self, key: PartitionKey) -> int:
        if key == METADATA_KEY:
            return len(self._node.target_of(key))
        topic = self._node.metadata.topics.get(key[0])
        return topic.spec.replication_factor if topic else 0

    def _not_leader(self, key: PartitionKey) -> NotLeaderError:
        """Where to go for ``key`` when this node has no replica: placement's first."""
        target = self._node.target_of(key)
        leader = target[0] if target else None
        return NotLeaderError(leader, self._node.grpc_address_of(leader))

    def _require_metadata_leader(self) -> None:
        node = self._node
        host = node.host
        assert host is not None
        replica = host.get(METADATA_KEY)
        if replica is not None and replica.core.role is Role.LEADER:
            return
        if replica is not None and replica.core.leader is not None:
            leader = str(replica.core.leader)
            raise NotLeaderError(leader, node.grpc_address_of(leader))
        raise self._not_leader(METADATA_KEY)

    async def _propose_metadata(self, batch: bytes) -> int:
        node = self._node
        host = node.host
        assert host is not None
        result = await host.produce(METADATA_KEY, batch, Acks.ALL, ADMIN_TIMEOUT_S)
        try:
            await node.wait_metadata(result.base_offset + 1, ADMIN_TIMEOUT_S)
        except TimeoutError:
            raise RequestTimeoutError("the change committed but was not applied in time") from None
        return result.base_offset

    def _topic_info(self, topic: TopicState) -> pb.TopicInfo:
        node = self._node
        host = node.host
        assert host is not None
        partitions = []
        for partition in range(topic.spec.partitions):
            key = (topic.spec.name, partition)
            replica = host.get(key)
            info = pb.PartitionInfo(partition=partition, replicas=list(node.target_of(key)))
            if replica is not None:
                core = replica.core
                info.leader = str(core.leader or "")
                info.high_watermark = core.high_watermark
                config = core.group_config
                if config is not None:
                    info.voters.extend(config.voters)
                    info.learners.extend(config.learners)
            else:
                info.high_watermark = -1
            partitions.append(info)
        spec = topic.spec
        return pb.TopicInfo(
            name=spec.name,
            config=pb.TopicConfig(
                partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                retention_bytes=spec.retention_bytes,
                retention_ms=spec.retention_ms,
            ),
            partitions=partitions,
        )


def _member(member: Member) -> pb.Member:
    return pb.Member(
        node_id=member.node_id,
        gossip_address=member.gossip_address,
        grpc_address=member.grpc_address,
        weight=member.weight,
        zone=member.zone,
        state=member.state.value,
        incarnation=member.incarnation,
    )
