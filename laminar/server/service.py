"""The public gRPC service (``laminar.v1.Laminar``) of a broker node.

Every handler validates its request, does the work through the node's replica host
and metadata, and turns any :class:`~laminar.errors.LaminarError` into a status
with a typed detail (:mod:`laminar.grpc_errors`). A request body that does not
parse is ``INVALID_ARGUMENT`` (detail ``INVALID_INPUT``) instead of grpcio's
``UNKNOWN`` with a traceback: :func:`add_to_server` registers the handlers with
deserializers that hand the handler a :class:`MalformedRequest` instead of raising.
An unexpected exception becomes ``INTERNAL``; it never takes the node down. Both are
logged through a :class:`RateLimitedLog`, so that a client cannot flood the log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from laminar.errors import (
    BatchLimitError,
    FencedMemberError,
    GroupNotEmptyError,
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    NotLeaderError,
    RequestTimeoutError,
    TopicExistsError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.groups.coordinator import HeartbeatRequest
from laminar.groups.entries import Commit, Delete, Reset, Subscription
from laminar.groups.state import ApplyResult, Group, Outcome
from laminar.grpc_errors import abort_with, error_code_name, error_to_status
from laminar.ids import TopicPartition
from laminar.membership import Member, MemberState
from laminar.membership.keyring import KeyringState
from laminar.records import check_produced_header, has_null_key, next_offset
from laminar.replica.types import Acks, Role
from laminar.security.acl import ACLS_MAX, Acl, AclFilter
from laminar.security.acl_wire import acl_of, binding_of, filter_of
from laminar.server import rules
from laminar.server.api import NodeApi
from laminar.server.config import ServiceConfig
from laminar.server.groups import group_partition, group_status
from laminar.server.host import ProduceResult
from laminar.server.members import protocol_version_of
from laminar.server.metadata import (
    CLUSTER_TOPIC,
    METADATA_KEY,
    PARTITIONS_MAX,
    TopicSpec,
    TopicState,
    acls_command,
    add_partitions_command,
    alter_topic_command,
    create_topic_command,
    delete_topic_command,
    maintenance_command,
    validate_node_id,
)
from laminar.server.observability.histogram import RequestStats
from laminar.server.transport import GAPPED_LOGS_PROTOCOL
from laminar.topic_settings import ALTERABLE_SETTINGS, TOPIC_SETTINGS
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc

_LOG = logging.getLogger(__name__)
_ACKS = {pb.ACKS_ALL: Acks.ALL, pb.ACKS_LEADER: Acks.LEADER, pb.ACKS_NONE: Acks.NONE}

_R = TypeVar("_R")
_Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_R]]
SERVICE_NAME = "laminar.v1.Laminar"
LIST_OFFSETS_PARTITIONS_MAX = PARTITIONS_MAX
"""Most partitions one ``ListOffsets`` call names: every partition of the largest topic."""
_LOOKUPS_PER_YIELD = 64
"""Timestamp lookups (each may read and decode a batch) between yields to the loop."""


class RateLimitedLog:
    """At most one log line per ``interval_s`` per kind; the lines skipped are counted
    and reported with the next one."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self.suppressed: dict[str, int] = {}

    def __call__(self, kind: str, message: str, *args: object, traceback: bool = False) -> None:
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval_s:
            self.suppressed[kind] = self.suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        skipped = self.suppressed.pop(kind, 0)
        suffix = f" ({skipped} more since the last such line)" if skipped else ""
        _LOG.warning(message + suffix, *args, exc_info=traceback)


@dataclasses.dataclass(frozen=True, slots=True)
class MalformedRequest:
    """What a handler receives instead of a request body that did not parse."""

    method: str
    error: str


def _guarded(handler: _Handler[_R]) -> _Handler[_R]:
    """Map Laminar errors to statuses; log (rate-limited) and hide anything unexpected."""

    rpc = handler.__name__

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _R:
        if self.calls >= self._config.calls_max:
            self.counters["calls_refused"] += 1
            self.stats.observe(rpc, "CALLS_REFUSED", 0.0)
            await abort_with(
                context, UnavailableError(f"node busy: {self.calls} calls in progress; retry")
            )
        self.calls += 1
        started = time.perf_counter()
        code = "INTERNAL"
        try:
            if isinstance(request, MalformedRequest):
                self._rate_log(
                    "malformed",
                    "malformed %s request refused: %s",
                    request.method,
                    request.error,
                )
                raise InvalidInputError(
                    f"the {request.method} request body is not a valid "
                    f"laminar.v1.{request.method}Request: {request.error}"
                )
            answer = await handler(self, request, context)
            code = "OK"
            return answer
        except LaminarError as error:
            code = error_code_name(error)
            await abort_with(context, error)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except grpc.aio.AbortError:
            code = "ABORTED"  # the handler aborted the call itself
            raise
        except Exception:
            self._rate_log("internal", "%s failed", handler.__name__, traceback=True)
            await context.abort(grpc.StatusCode.INTERNAL, "internal error (see the node log)")
        finally:
            self.calls -= 1
            self.stats.observe(rpc, code, time.perf_counter() - started)
        raise AssertionError("unreachable")  # abort always raises

    return wrapper


def _lenient(method: str, message_type: type[Message]) -> Callable[[bytes], object]:
    """A deserializer that returns :class:`MalformedRequest` instead of raising."""

    def deserialize(data: bytes) -> object:
        try:
            return message_type.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as error:
            return MalformedRequest(method, str(error)[:200] or type(error).__name__)

    return deserialize


REGISTERED_METHODS = ("Produce", "ProduceMany", "Fetch")
"""The methods registered with the gRPC server; the others go through its generic
handler. Every call a grpc.aio server takes runs an ``asyncio.wait`` over one pending
request per registered method: with all 26 of ``laminar.v1.Laminar`` registered, about
31 futures each time, which cost the leader's event loop about 2% of its CPU per
produce request (``bench/cpu_bench.py``, issue 33 point 8). A generic lookup is one
dict lookup in Python."""


def add_to_server(service: LaminarService, server: grpc.aio.Server) -> None:
    """Register every method of ``laminar.v1.Laminar`` on ``server``, with lenient
    deserializers (see the module docstring)."""
    descriptor = pb.DESCRIPTOR.services_by_name["Laminar"]
    handlers = {}
    for method in descriptor.methods:
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            getattr(service, method.name),
            request_deserializer=_lenient(method.name, request_type),
            response_serializer=response_type.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered methods skip the generic handler lookup, but grpc.aio's server keeps a
    # request pending per registered method and waits on all of them (asyncio.wait) at
    # every call it takes: the data path only (REGISTERED_METHODS).
    hot = {name: handlers[name] for name in REGISTERED_METHODS}
    server.add_registered_method_handlers(SERVICE_NAME, hot)


class LaminarService(laminar_pb2_grpc.LaminarServicer):
    """The public API of one node; ``calls`` in progress, ``counters`` of refusals."""

    def __init__(
        self, node: NodeApi, config: ServiceConfig, *, rate_log: RateLimitedLog | None = None
    ) -> None:
        self._node = node
        self._config = config
        self._rate_log = (
            rate_log if rate_log is not None else RateLimitedLog(config.log_interval_ms / 1000)
        )
        self.calls = 0
        self.counters: dict[str, int] = {"calls_refused": 0}
        self.stats = RequestStats()
        """Latency by RPC and outcome, records and bytes produced and fetched (for
        ``--metrics``; :mod:`laminar.server.observability`)."""

    # ------------------------------------------------------------------ data

    @_guarded
    async def Produce(  # noqa: N802 - gRPC method names
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        if len(request.batches) > self._config.batches_per_produce_max:
            raise BatchLimitError(
                f"{len(request.batches)} batches in one request; "
                f"at most {self._config.batches_per_produce_max}"
            )
        acks, timeout_s = self._produce_settings(request.acks, request.timeout_ms)
        # Each read of a repeated bytes field copies the bytes out of the message
        # (upb): take them out once, not at every check, count and hand-over.
        batches = list(request.batches)
        results = await self._produce(request.topic, request.partition, batches, acks, timeout_s)
        return pb.ProduceResponse(
            base_offsets=[result.base_offset for result in results],
            duplicates=[result.duplicate for result in results],
        )

    @_guarded
    async def ProduceMany(  # noqa: N802
        self, request: pb.ProduceManyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceManyResponse:
        """Each partition's batches as by :meth:`Produce`, all partitions at once;
        what fails for one partition is that partition's ``error``."""
        entries = list(request.partitions)
        if not entries:
            raise InvalidInputError("a produce request needs at least one partition")
        batches = sum(len(entry.batches) for entry in entries)
        if batches > self._config.batches_per_produce_max:
            raise BatchLimitError(
                f"{batches} batches in one request; at most {self._config.batches_per_produce_max}"
            )
        if len({(entry.topic, entry.partition) for entry in entries}) != len(entries):
            raise InvalidInputError("a produce request names a partition more than once")
        acks, timeout_s = self._produce_settings(request.acks, request.timeout_ms)
        checked: list[LaminarError | list[int]] = []
        valid: list[tuple[TopicPartition, Sequence[bytes]]] = []
        batches_of = [list(entry.batches) for entry in entries]  # copied once (Produce)
        for entry, entry_batches in zip(entries, batches_of, strict=True):
            try:
                key, records = self._check_produce(entry.topic, entry.partition, entry_batches)
                valid.append((key, entry_batches))
                checked.append(records)
            except LaminarError as error:
                checked.append(error)
        # Every partition proposed in this step, in order (see ReplicaHost.produce_many).
        produced = iter(await self._node.host.produce_many(valid, acks, timeout_s))
        answers = []
        for entry, entry_batches, refused in zip(entries, batches_of, checked, strict=True):
            answer = pb.PartitionProduced(topic=entry.topic, partition=entry.partition)
            outcome = refused if isinstance(refused, LaminarError) else next(produced)
            if isinstance(outcome, NotLeaderError):
                outcome = NotLeaderError(
                    outcome.leader_id, self._node.grpc_address_of(outcome.leader_id)
                )
            if isinstance(outcome, LaminarError):
                answer.error.CopyFrom(error_to_status(outcome)[1])
            else:
                assert not isinstance(refused, LaminarError)
                self._count_produced(entry_batches, refused, outcome)
                answer.base_offsets.extend(result.base_offset for result in outcome)
                answer.duplicates.extend(result.duplicate for result in outcome)
            answers.append(answer)
        return pb.ProduceManyResponse(partitions=answers)

    def _produce_settings(self, acks_value: int, timeout_ms: int) -> tuple[Acks, float]:
        acks = _ACKS.get(acks_value)  # type: ignore[call-overload]
        if acks is None:
            raise InvalidInputError(f"unknown acks value {acks_value}")
        timeout_ms = timeout_ms or self._config.produce_timeout_ms
        return acks, min(timeout_ms, self._config.produce_timeout_max_ms) / 1000

    async def _produce(
        self,
        topic: str,
        partition: int,
        batches: Sequence[bytes],
        acks: Acks,
        timeout_s: float,
    ) -> list[ProduceResult]:
        """One partition's batches through its leader here, all or none."""
        key, records = self._check_produce(topic, partition, batches)
        host = self._node.host
        try:
            if len(batches) == 1:  # the common case, on the host's fast path
                results = [await host.produce(key, batches[0], acks, timeout_s)]
            else:  # All or none: the leader checks every batch before it appends any.
                results = await host.produce_batches(key, batches, acks, timeout_s)
        except NotLeaderError as error:
            grpc_address = self._node.grpc_address_of(error.leader_id)
            raise NotLeaderError(error.leader_id, grpc_address) from None
        self._count_produced(batches, records, results)
        return results

    def _count_produced(
        self, batches: Sequence[bytes], records: list[int], results: Sequence[ProduceResult]
    ) -> None:
        """Count the records and bytes of the batches appended (not the duplicates)."""
        stats = self.stats
        for batch, count, result in zip(batches, records, results, strict=True):
            if not result.duplicate:
                stats.produced_records += count
                stats.produced_bytes += len(batch)

    def _check_produce(
        self, topic: str, partition: int, batches: Sequence[bytes]
    ) -> tuple[TopicPartition, list[int]]:
        """The partition's key, if this request for it may go to the host here, and
        the record count of each batch."""
        key = self._key(topic, partition)
        if topic.startswith("__"):
            raise InvalidTopicError(f"topic {topic!r} is internal: only the nodes write it")
        if not batches:
            raise InvalidInputError("a produce request needs at least one batch")
        records = [check_produced_header(batch).record_count for batch in batches]
        if not self._node.serves(key):
            raise self._not_leader(key)
        if self._node.metadata.topics[topic].spec.cleanup_policy != "delete":
            refuse_null_keys(topic, batches)  # only a compacted topic pays for the decode
        return key, records

    @_guarded
    async def Fetch(  # noqa: N802
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        node = self._node
        key = self._key(request.topic, request.partition, internal=True)
        config = self._config
        max_bytes = request.max_bytes or config.fetch_bytes_max
        if max_bytes > config.fetch_bytes_max:
            raise InvalidInputError(f"max_bytes must be at most {config.fetch_bytes_max}")
        if request.offset < 0:
            raise InvalidInputError(f"offset must be >= 0, got {request.offset}")
        wait_s = min(request.max_wait_ms, config.fetch_wait_ms_max) / 1000
        if not node.serves(key):
            raise self._no_replica(key)
        result = await node.host.fetch(key, request.offset, max_bytes, wait_s)
        if result.batches:
            stats = self.stats
            stats.fetched_bytes += len(result.batches)
            # Records at or after the offset asked for (the first batch may start before).
            stats.fetched_records += next_offset(result.batches) - request.offset
        return pb.FetchResponse(
            batches=result.batches,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            served_by=node.node_id,
        )

    @_guarded
    async def ReportCorruption(  # noqa: N802
        self, request: pb.ReportCorruptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportCorruptionResponse:
        """A consumer got a batch failing its checksum from this node: re-verify the
        stored batch; damage fences the replica (see ``ReplicaHost.check_reported``)."""
        key = self._key(request.topic, request.partition, internal=True)
        if request.offset < 0:
            raise InvalidInputError(f"offset must be >= 0, got {request.offset}")
        if not self._node.serves(key):
            raise self._no_replica(key)
        damage = await self._node.host.check_reported(key, request.offset)
        if damage is None:
            return pb.ReportCorruptionResponse(damaged=False)
        return pb.ReportCorruptionResponse(damaged=True, reason=str(damage))

    @_guarded
    async def ListOffsets(  # noqa: N802
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        """Per partition, the local replica's start, high watermark and the offset for
        a time; what fails for one partition is that partition's ``error``."""
        partitions = list(request.partitions)
        if not 1 <= len(partitions) <= LIST_OFFSETS_PARTITIONS_MAX:
            raise InvalidInputError(
                f"list offsets needs 1 to {LIST_OFFSETS_PARTITIONS_MAX} partitions, "
                f"got {len(partitions)}"
            )
        if len(set(partitions)) != len(partitions):
            raise InvalidInputError("list offsets names a partition more than once")
        partition_count = self._partition_count(request.topic)
        timestamp_ms = request.timestamp_ms if request.HasField("timestamp_ms") else None
        answers = []
        for index, partition in enumerate(partitions):
            answers.append(
                self._partition_offsets(request.topic, partition, partition_count, timestamp_ms)
            )
            if timestamp_ms is not None and (index + 1) % _LOOKUPS_PER_YIELD == 0:
                await asyncio.sleep(0)  # lookups read the logs: let other calls in
        return pb.ListOffsetsResponse(partitions=answers, served_by=self._node.node_id)

    def _partition_offsets(
        self, topic: str, partition: int, partition_count: int, timestamp_ms: int | None
    ) -> pb.PartitionOffsets:
        answer = pb.PartitionOffsets(partition=partition)
        key = METADATA_KEY if topic == CLUSTER_TOPIC else (topic, partition)
        node = self._node
        try:
            if partition >= partition_count:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has partitions 0..{partition_count - 1}, not {partition}"
                )
            if not node.serves(key):
                raise self._no_replica(key)
            offsets = node.host.list_offsets(key, timestamp_ms)
        except LaminarError as error:
            answer.error.CopyFrom(error_to_status(error)[1])
            return answer
        answer.log_start_offset = offsets.log_start_offset
        answer.high_watermark = offsets.high_watermark
        if offsets.offset_for_timestamp is not None:
            answer.offset_for_timestamp = offsets.offset_for_timestamp
        return answer

    # ------------------------------------------------------------------ metadata

    @_guarded
    async def Metadata(  # noqa: N802
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        node = self._node
        names = list(request.topics) or _public(node.metadata.topics)
        topics = []
        for name in names:
            topic = node.metadata.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"no topic {name!r}")
            topics.append(self._topic_info(topic))
        return pb.MetadataResponse(
            cluster_id=node.cluster_id,
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
            topics=[
                self._topic_info(node.metadata.topics[n]) for n in _public(node.metadata.topics)
            ]
        )

    @_guarded
    async def DescribeCluster(  # noqa: N802
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeClusterResponse:
        return self.describe_cluster()

    @_guarded
    async def NodeStatus(  # noqa: N802
        self, request: pb.NodeStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatusResponse:
        return self.node_status()

    def node_status(self) -> pb.NodeStatusResponse:
        """This node's part of the status page: :meth:`describe_cluster`, its counter
        samples, the leadership changes it saw and the groups it coordinates (all
        read in one go on the loop: one instant)."""
        node = self._node
        now_ms = node.host.now_ms()
        history = node.counter_history
        groups = sorted(node.groups.led_groups(), key=lambda group: group.group_id)
        return pb.NodeStatusResponse(
            cluster=self.describe_cluster(),
            sample_interval_ms=history.interval_ms,
            samples=[
                pb.CounterSample(
                    age_ms=max(0, now_ms - sample.at_ms),
                    produced_records=sample.produced_records,
                    fetched_records=sample.fetched_records,
                )
                for sample in history.samples()
            ],
            leadership_changes=[
                pb.LeadershipChange(
                    topic=change.topic,
                    partition=change.partition,
                    leader=change.leader,
                    term=change.term,
                    age_ms=max(0, now_ms - change.at_ms),
                )
                for change in node.host.leadership_log.changes()
            ],
            groups=[_group_status(group) for group in groups[:STATUS_GROUPS_MAX]],
            groups_more=max(0, len(groups) - STATUS_GROUPS_MAX),
        )

    def describe_cluster(self) -> pb.DescribeClusterResponse:
        """Members, and the health of every partition this node leads."""
        node = self._node
        host = node.host
        members = node.members()
        alive = alive_nodes(node.node_id, members)
        now_ms = host.now_ms()
        partitions = []
        for key in sorted(host.replica_keys()):
            status = node.replica_status(key)
            if status is None or status.role is not Role.LEADER:
                continue
            in_sync = [v for v in node.in_sync_voters(key, now_ms) if v in alive]
            wanted = self._replication_factor(key)
            partitions.append(
                pb.PartitionHealth(
                    topic=key[0],
                    partition=key[1],
                    leader=node.node_id,
                    replicas=list(node.target_of(key)),
                    voters=list(status.voters),
                    under_replicated=len(in_sync) < wanted,
                    in_sync=in_sync,
                    term=status.term,
                    high_watermark=status.high_watermark,
                )
            )
        fenced = [
            pb.FencedReplica(
                topic=f.key[0],
                partition=f.key[1],
                reason=f.reason,
                fenced_for_ms=max(0, now_ms - f.since_ms),
            )
            for f in host.fenced()
        ]
        damaged = [
            pb.DamagedReplica(
                topic=d.key[0],
                partition=d.key[1],
                reason=d.reason,
                damaged_for_ms=max(0, now_ms - d.since_ms),
                quarantine=d.quarantine or "",
            )
            for d in host.damaged()
        ]
        disk = host.disk_status()
        return pb.DescribeClusterResponse(
            cluster_id=node.cluster_id,
            node_id=node.node_id,
            members=[_member(m) for m in members],
            partitions=partitions,
            fenced=fenced,
            damaged=damaged,
            disk=pb.NodeDisk(
                free_bytes=disk.free_bytes,
                total_bytes=disk.total_bytes,
                watermark_bytes=disk.watermark_bytes,
                full=disk.full,
            ),
            maintenance=list(node.metadata.maintenance),
            incompatible_peers=[
                pb.IncompatiblePeer(
                    node_id=peer.node_id,
                    address=peer.address,
                    protocol_version=peer.protocol_version,
                    reason=peer.reason,
                    refused_for_ms=max(0, now_ms - peer.since_ms),
                )
                for peer in node.incompatible_peers()
            ],
            protocol_version=node.protocol_version,
        )

    @_guarded
    async def RecoverPartition(  # noqa: N802
        self, request: pb.RecoverPartitionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecoverPartitionResponse:
        if not request.accept_data_loss:
            raise InvalidInputError(
                "recovering a partition whose replicas are damaged may lose acknowledged "
                "records: say so with accept_data_loss"
            )
        key = (request.topic, request.partition)
        hosted = self._node.replica_status(key) is not None
        recovered = self._node.host.accept_data_loss(key)
        return pb.RecoverPartitionResponse(recovered=recovered, hosted=hosted)

    @_guarded
    async def UpdateNode(  # noqa: N802
        self, request: pb.UpdateNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateNodeResponse:
        weight = request.weight if request.HasField("weight") else None
        zone = request.zone if request.HasField("zone") else None
        me = self._node.update_self(weight, zone)
        return pb.UpdateNodeResponse(member=_member(me))

    @_guarded
    async def SetMaintenance(  # noqa: N802
        self, request: pb.SetMaintenanceRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetMaintenanceResponse:
        node = self._node
        node_id = request.node_id
        validate_node_id(node_id)
        if request.enter and node_id not in {m.node_id for m in node.members()}:
            raise InvalidInputError(f"no member {node_id!r} in this cluster")
        self._require_leader(METADATA_KEY)
        if request.enter != (node_id in node.metadata.maintenance):
            command = maintenance_command(node_id, request.enter, uuid.uuid4().hex)
            await self._propose_metadata(command)
        return pb.SetMaintenanceResponse(maintenance=list(node.metadata.maintenance))

    @_guarded
    async def GossipKeyring(  # noqa: N802
        self, request: pb.GossipKeyringRequest, context: grpc.aio.ServicerContext
    ) -> pb.GossipKeyringResponse:
        keyring = self._node.keyring
        change = _keyring_change(request)
        state = (
            keyring.state if change is None else await keyring.change(change, self._node.node_id)
        )
        return pb.GossipKeyringResponse(
            node_id=self._node.node_id,
            keys=list(state.keys),
            encrypt_verify_incoming=state.encrypt_verify_incoming,
            encrypt_verify_outgoing=state.encrypt_verify_outgoing,
            counters=await keyring.counters(),
        )

    # ------------------------------------------------------------------ admin

    @_guarded
    async def CreateTopic(  # noqa: N802
        self, request: pb.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicResponse:
        node = self._node
        config = request.config  # unset: every field takes the cluster's default
        cluster = self._cluster_defaults()
        chosen = {
            name: getattr(config, name) if config.HasField(name) else cluster[name]
            for name in TOPIC_SETTINGS
        }  # an explicit 0 is refused by validate(), as the proto says
        defaults = tuple(name for name in TOPIC_SETTINGS if not config.HasField(name))
        spec = TopicSpec(name=request.name, defaults=defaults, **chosen)
        spec.validate()
        self._require_leader(METADATA_KEY)  # whose settings give the defaults
        if spec.compact:
            self._require_gapped_logs()
        if spec.name in node.metadata.topics:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        founders = self._founders(spec.name, spec.partitions, spec.replication_factor)
        command_id = uuid.uuid4().hex
        offset = await self._propose_metadata(create_topic_command(spec, founders, command_id))
        topic = node.metadata.topics.get(spec.name)
        if topic is None or node.metadata.applied_ids.get(command_id) != offset:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        if topic.command_id != command_id:
            raise TopicExistsError(f"topic {spec.name!r} already exists")
        return pb.CreateTopicResponse(topic=self._topic_info(topic))

    @_guarded
    async def AlterTopic(  # noqa: N802
        self, request: pb.AlterTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterTopicResponse:
        """Change a topic's settings through the metadata log: all of them or none
        (the first bad field named, nothing proposed)."""
        node = self._node
        topic = self._alterable_topic(request.name)
        changed: dict[str, Any] = {
            name: getattr(request.set, name)
            for name in TOPIC_SETTINGS
            if request.set.HasField(name)
        }
        if "partitions" in changed:
            raise InvalidTopicError("partitions is not altered here: CreatePartitions raises it")
        reset = list(dict.fromkeys(request.reset))
        for name in reset:
            if name not in ALTERABLE_SETTINGS:
                known = ", ".join(ALTERABLE_SETTINGS)
                raise InvalidTopicError(f"reset names {name!r:.60}: not one of {known}")
            if name in changed:
                raise InvalidTopicError(f"{name} is both set and reset")
        if not changed and not reset:
            raise InvalidTopicError(
                f"nothing to alter on topic {topic.spec.name!r}: set or reset a setting"
            )
        cluster = self._cluster_defaults()
        changed.update((name, cluster[name]) for name in reset)
        defaults = [name for name in topic.spec.defaults if name not in changed]
        defaults += [name for name in ALTERABLE_SETTINGS if name in reset]
        spec = dataclasses.replace(topic.spec, **changed, defaults=tuple(defaults))
        spec.validate()
        if spec.compact and not topic.spec.compact:
            self._require_gapped_logs()
        if spec.replication_factor > topic.spec.replication_factor:
            eligible = sum(member.eligible for member in node.placement_members())
            if spec.replication_factor > eligible:
                raise InvalidTopicError(
                    f"replication_factor {spec.replication_factor} needs as many nodes with "
                    f"weight > 0; the cluster has {eligible}"
                )
        previous = self._topic_info(topic)
        if request.validate_only:
            would_be = dataclasses.replace(topic, spec=spec)
            return pb.AlterTopicResponse(topic=self._topic_info(would_be), previous=previous)
        command_id = uuid.uuid4().hex
        command = alter_topic_command(topic, changed, reset, command_id)
        altered, _ = await self._propose_change(topic, command, command_id)
        return pb.AlterTopicResponse(topic=self._topic_info(altered), previous=previous)

    @_guarded
    async def CreatePartitions(  # noqa: N802
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        """Raise a topic's partition count; the new partitions are founded as a new
        topic's (placement's replicas, never on a full node, a node in maintenance
        last)."""
        topic = self._alterable_topic(request.name)
        spec = topic.spec
        if request.to <= spec.partitions:
            raise InvalidTopicError(
                f"topic {spec.name} has {spec.partitions} partitions; to must be more, "
                f"got {request.to}"
            )
        if request.to > PARTITIONS_MAX:
            raise InvalidTopicError(f"to must be at most {PARTITIONS_MAX}, got {request.to}")
        founders = self._founders(
            spec.name, request.to, spec.replication_factor, first_partition=spec.partitions
        )
        if request.validate_only:
            grown = dataclasses.replace(
                topic,
                spec=dataclasses.replace(spec, partitions=request.to),
                founding_replicas=topic.founding_replicas + tuple(founders),
            )
            return pb.CreatePartitionsResponse(
                topic=self._topic_info(grown), previous=spec.partitions
            )
        command_id = uuid.uuid4().hex
        command = add_partitions_command(topic, founders, command_id)
        now, offset = await self._propose_change(topic, command, command_id)
        if (offset, spec.partitions) not in now.additions:
            raise InvalidTopicError(
                f"topic {spec.name} has {now.spec.partitions} partitions now "
                "(changed meanwhile): nothing added"
            )
        return pb.CreatePartitionsResponse(topic=self._topic_info(now), previous=spec.partitions)

    async def _propose_change(
        self, topic: TopicState, command: bytes, command_id: str
    ) -> tuple[TopicState, int]:
        """Propose a change of ``topic`` and wait until it is applied here: the topic
        then, and the command's offset. A topic deleted meanwhile (perhaps created
        again: another ``command_id``) is ``UNKNOWN_TOPIC_OR_PARTITION``; a change
        that a concurrent one made invalid (it applied as nothing) is
        ``INVALID_TOPIC``, naming the field."""
        metadata = self._node.metadata
        offset = await self._propose_metadata(command)
        now = metadata.topics.get(topic.spec.name)
        if (
            now is None
            or now.command_id != topic.command_id
            or metadata.applied_ids.get(command_id) != offset
        ):
            raise UnknownTopicOrPartitionError(f"topic {topic.spec.name!r} was deleted meanwhile")
        refused = metadata.refused_ids.get(command_id)
        if refused is not None:  # a concurrent change made it invalid: nothing changed
            raise InvalidTopicError(f"{refused} (after a concurrent change; nothing changed)")
        return now, offset

    def _require_gapped_logs(self) -> None:
        """Refuse a compacted topic while a member present speaks a peer protocol
        before :data:`GAPPED_LOGS_PROTOCOL`: its replicas would refuse the gaps keyed
        compaction leaves (docs/design.md, "Keyed compaction": upgrade every node
        first)."""
        for member in self._node.members():
            if member.state.is_gone:
                continue
            version = protocol_version_of(member)
            if version is not None and version < GAPPED_LOGS_PROTOCOL:
                raise InvalidTopicError(
                    f"cleanup_policy compact needs every node on peer protocol "
                    f"{GAPPED_LOGS_PROTOCOL} or later; node {member.node_id} speaks {version} "
                    "(upgrade it first)"
                )

    def _alterable_topic(self, name: str) -> TopicState:
        """The topic an alter names, asked of the metadata leader (``NOT_LEADER``
        otherwise: it proposes, and its catalogue is the newest)."""
        if name.startswith("__"):
            raise InvalidTopicError(f"topic {name!r:.60} is internal and cannot be altered")
        self._require_leader(METADATA_KEY)
        topic = self._node.metadata.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"no topic {name!r:.210}")
        return topic

    def _cluster_defaults(self) -> dict[str, Any]:
        """Each setting's cluster default, from this node's (the proposer's) config:
        a default is settled when the command is proposed, so that every replica
        applies the same value (``reset`` resolves it again)."""
        eligible = sum(member.eligible for member in self._node.placement_members())
        plain = TopicSpec("-", 1, 1)
        return {
            **{name: getattr(plain, name) for name in TOPIC_SETTINGS},
            "partitions": self._config.default_partitions,
            "replication_factor": max(1, min(self._config.default_replication_factor, eligible)),
        }

    def _founders(
        self, name: str, partitions: int, factor: int, *, first_partition: int = 0
    ) -> list[tuple[str, ...]]:
        """The founding replicas of partitions ``first_partition`` up to
        ``partitions`` (:func:`rules.plan_topic`)."""
        node = self._node
        founders = rules.plan_topic(
            name,
            partitions,
            factor,
            node.placement_members(),
            node.host.full_nodes(),
            first_partition=first_partition,
        )
        # A node in maintenance may be down: it does not found (lead term 1) a partition.
        return [rules.full_last(group, node.metadata.maintenance) for group in founders]

    @_guarded
    async def DeleteTopic(  # noqa: N802
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        node = self._node
        if request.name.startswith("__"):
            raise InvalidTopicError(f"topic {request.name!r} is internal and cannot be deleted")
        self._require_leader(METADATA_KEY)
        if request.name not in node.metadata.topics:
            raise UnknownTopicOrPartitionError(f"no topic {request.name!r}")
        await self._propose_metadata(delete_topic_command(request.name, uuid.uuid4().hex))
        return pb.DeleteTopicResponse()

    # ------------------------------------------------------------------ ACLs

    @_guarded
    async def CreateAcls(  # noqa: N802
        self, request: pb.CreateAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAclsResponse:
        if not 1 <= len(request.acls) <= ACL_CHANGES_MAX:
            raise InvalidInputError(f"create 1 to {ACL_CHANGES_MAX} ACLs per call")
        acls = [acl_from_binding(binding) for binding in request.acls]
        self._require_leader(METADATA_KEY)
        held = self._node.metadata.acls
        new = [acl for acl in dict.fromkeys(acls) if acl not in held]
        if len(held) + len(new) > ACLS_MAX:
            raise InvalidInputError(f"a cluster holds at most {ACLS_MAX} ACLs")
        if new:
            await self._propose_metadata(acls_command(new, create=True, command_id=_new_id()))
        return pb.CreateAclsResponse()

    @_guarded
    async def ListAcls(  # noqa: N802
        self, request: pb.ListAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAclsResponse:
        """The ACLs as this node applied them (any node answers; one that is behind
        on the metadata may not show the latest change yet)."""
        acl_filter = filter_from_message(request.filter)
        found = sorted(acl for acl in self._node.metadata.acls if acl_filter.matches(acl))
        return pb.ListAclsResponse(acls=[binding_of(acl) for acl in found])

    @_guarded
    async def DeleteAcls(  # noqa: N802
        self, request: pb.DeleteAclsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteAclsResponse:
        if not 1 <= len(request.filters) <= ACL_FILTERS_MAX:
            raise InvalidInputError(f"give 1 to {ACL_FILTERS_MAX} filters per call")
        filters = [filter_from_message(message) for message in request.filters]
        self._require_leader(METADATA_KEY)
        doomed = sorted(
            acl for acl in self._node.metadata.acls if any(f.matches(acl) for f in filters)
        )
        if doomed:
            await self._propose_metadata(acls_command(doomed, create=False, command_id=_new_id()))
        return pb.DeleteAclsResponse(deleted=[binding_of(acl) for acl in doomed])

    # ------------------------------------------------------------------ groups

    @_guarded
    async def GroupHeartbeat(  # noqa: N802
        self, request: pb.GroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.GroupHeartbeatResponse:
        self._require_group_leader(request.group)
        member_id = request.member_id or uuid.uuid4().hex
        heartbeat = HeartbeatRequest(
            group_id=request.group,
            member_id=member_id,
            member_epoch=request.member_epoch,
            subscription=Subscription(tuple(request.topics), request.pattern or None),
            instance_id=request.instance_id or None,
            weight=request.weight or 1.0,
            session_timeout_ms=request.session_timeout_ms or 45_000,
            rebalance_timeout_ms=request.rebalance_timeout_ms or 60_000,
            released=tuple((p.topic, p.partition, p.assignment_epoch) for p in request.released),
            host=_peer_host(context.peer()),
        )
        answer = await self._node.groups.heartbeat(heartbeat, self._group_timeout_s())
        if answer.fenced:
            raise FencedMemberError(
                request.group, member_id, "unknown member or stale member epoch"
            )
        committed = {(topic, index): offset for topic, index, offset in answer.committed}
        group = await self._node.groups.group(request.group, self._group_timeout_s())
        owned = []
        for topic, index, epoch in answer.owned:
            info = pb.GroupOwnedPartition(topic=topic, partition=index, assignment_epoch=epoch)
            if (topic, index) in committed:
                info.committed_offset = committed[(topic, index)]
                if group is not None and (topic, index) in group.commits:
                    info.metadata = group.commits[(topic, index)].metadata
            owned.append(info)
        return pb.GroupHeartbeatResponse(
            member_id=member_id,
            member_epoch=answer.member_epoch,
            group_epoch=answer.group_epoch,
            heartbeat_interval_ms=answer.heartbeat_interval_ms,
            members=[
                pb.GroupMemberKey(member_id=m.member_id, key=m.key, weight=m.weight)
                for m in answer.members
            ],
            topics=[
                pb.GroupTopic(topic=topic, partitions=count)
                for topic, count in answer.partition_counts
            ],
            owned=owned,
            assigned=[pb.TopicPartitionRef(topic=t, partition=p) for t, p in answer.assigned],
        )

    @_guarded
    async def CommitOffsets(  # noqa: N802
        self, request: pb.CommitOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitOffsetsResponse:
        """Each partition's commit applies or is refused on its own, when applied."""
        offsets = list(request.offsets)
        if not 1 <= len(offsets) <= GROUP_PARTITIONS_PER_CALL_MAX:
            raise InvalidInputError(
                f"a commit names 1 to {GROUP_PARTITIONS_PER_CALL_MAX} partitions, "
                f"got {len(offsets)}"
            )
        if len({(o.topic, o.partition) for o in offsets}) != len(offsets):
            raise InvalidInputError("a commit names each partition once")
        self._require_group_leader(request.group)
        commits = [
            Commit(
                group_id=request.group,
                topic=o.topic,
                partition=o.partition,
                next_offset=o.next_offset,
                member_id=request.member_id,
                member_epoch=request.member_epoch,
                assignment_epoch=o.assignment_epoch,
                metadata=o.metadata,
            )
            for o in offsets
        ]
        results = await self._node.groups.commit(commits, self._group_timeout_s())
        answers = []
        for commit, result in zip(commits, results, strict=True):
            answer = pb.PartitionCommitted(topic=commit.topic, partition=commit.partition)
            error = _commit_error(commit, result)
            if error is not None:
                answer.error.CopyFrom(error_to_status(error)[1])
            answers.append(answer)
        return pb.CommitOffsetsResponse(partitions=answers)

    @_guarded
    async def FetchOffsets(  # noqa: N802
        self, request: pb.FetchOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchOffsetsResponse:
        if len(request.partitions) > GROUP_PARTITIONS_PER_CALL_MAX:
            raise InvalidInputError(f"at most {GROUP_PARTITIONS_PER_CALL_MAX} partitions per call")
        self._require_group_leader(request.group)
        group = await self._node.groups.group(request.group, self._group_timeout_s())
        commits = {} if group is None else group.commits
        asked = [(p.topic, p.partition) for p in request.partitions] or sorted(commits)
        answers = []
        for topic, index in asked:
            answer = pb.CommittedOffset(topic=topic, partition=index)
            committed = commits.get((topic, index))
            if committed is not None:
                answer.next_offset = committed.next_offset
                answer.metadata = committed.metadata
            answers.append(answer)
        return pb.FetchOffsetsResponse(offsets=answers)

    @_guarded
    async def LeaveGroup(  # noqa: N802
        self, request: pb.LeaveGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.LeaveGroupResponse:
        """Leaving is a heartbeat that says goodbye; an unknown member is already gone."""
        self._require_group_leader(request.group)
        groups = self._node.groups
        group = await groups.group(request.group, self._group_timeout_s())
        member = None if group is None else group.members.get(request.member_id)
        if group is None or member is None or group.subscription is None:
            return pb.LeaveGroupResponse()
        epoch = request.member_epoch or member.member_epoch
        leave = HeartbeatRequest(
            group_id=request.group,
            member_id=request.member_id,
            member_epoch=epoch,
            subscription=group.subscription,
            leave=True,
        )
        await groups.heartbeat(leave, self._group_timeout_s())
        return pb.LeaveGroupResponse()

    @_guarded
    async def ListGroups(  # noqa: N802
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        node = self._node
        groups = sorted(node.groups.led_groups(), key=lambda group: group.group_id)
        return pb.ListGroupsResponse(
            groups=[
                pb.GroupSummary(
                    group=group.group_id,
                    state=group_status(group),
                    member_count=len(group.members),
                    coordinator=node.node_id,
                )
                for group in groups
            ]
        )

    @_guarded
    async def DescribeGroup(  # noqa: N802
        self, request: pb.DescribeGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeGroupResponse:
        self._require_group_leader(request.group)
        group = await self._node.groups.group(request.group, self._group_timeout_s())
        answer = pb.DescribeGroupResponse(
            group=request.group, state=group_status(group), coordinator=self._node.node_id
        )
        if group is not None:
            _describe(group, answer)
            for info in answer.members:
                info.host = self._node.groups.host_of(request.group, info.member_id)
        return answer

    @_guarded
    async def ResetOffsets(  # noqa: N802
        self, request: pb.ResetOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResetOffsetsResponse:
        if any(not o.HasField("next_offset") for o in request.offsets):
            raise InvalidInputError("every reset offset needs next_offset")
        entry = Reset(
            request.group, tuple((o.topic, o.partition, o.next_offset) for o in request.offsets)
        )
        self._require_group_leader(request.group)
        result = await self._node.groups.admin(entry, self._group_timeout_s())
        _check_admin(request.group, result)
        return pb.ResetOffsetsResponse()

    @_guarded
    async def DeleteGroup(  # noqa: N802
        self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupResponse:
        entry = Delete(request.group)
        self._require_group_leader(request.group)
        result = await self._node.groups.admin(entry, self._group_timeout_s())
        if result is None or result.outcome is not Outcome.UNKNOWN_GROUP:
            _check_admin(request.group, result)
        return pb.DeleteGroupResponse()

    def _group_timeout_s(self) -> float:
        return self._config.produce_timeout_ms / 1000

    def _require_group_leader(self, group_id: str) -> None:
        """Refuse a group call on a node that does not lead the group's partition
        (``NOT_LEADER`` with the leader it knows, else placement's hint)."""
        self._require_leader(group_partition(group_id))

    # ------------------------------------------------------------------ helpers

    def _key(self, topic: str, partition: int, *, internal: bool = False) -> TopicPartition:
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

    def _partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (``__cluster`` one, readable like any)."""
        if topic == CLUSTER_TOPIC:
            return 1
        state = self._node.metadata.topics.get(topic)
        if state is None:
            raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
        return state.spec.partitions

    def _no_replica(self, key: TopicPartition) -> UnavailableError:
        """The answer for a partition that exists but has no replica on this node:
        another node serves it, so it is retriable, and the client moves on to a
        replica."""
        node = self._node
        target = node.target_of(key)
        return UnavailableError(
            f"{key[0]}/{key[1]} has no replica on {node.node_id}; replicas: "
            f"{', '.join(target) or 'unknown'}"
        )

    def _replication_factor(self, key: TopicPartition) -> int:
        return replication_factor(self._node, key)

    def _require_leader(self, key: TopicPartition) -> None:
        """Refuse a call on a node whose replica of ``key`` does not lead (or that has
        none), with ``NOT_LEADER`` naming :func:`rules.leader_hint`'s node."""
        status = self._node.replica_status(key)
        if status is not None and status.role is Role.LEADER:
            return
        raise self._not_leader(key, status.leader if status is not None else None)

    def _not_leader(self, key: TopicPartition, known_leader: str | None = None) -> NotLeaderError:
        """``NOT_LEADER`` for ``key``, naming :func:`rules.leader_hint`'s node and where
        it serves clients."""
        node = self._node
        gone = {m.node_id for m in node.members() if m.state.is_gone}
        leader = rules.leader_hint(node.node_id, known_leader, node.target_of(key), gone)
        return NotLeaderError(leader, node.grpc_address_of(leader))

    async def _propose_metadata(self, batch: bytes) -> int:
        node = self._node
        timeout_s = self._config.admin_timeout_ms / 1000
        result = await node.host.produce(METADATA_KEY, batch, Acks.ALL, timeout_s)
        try:
            await node.wait_metadata(result.base_offset + 1, timeout_s)
        except TimeoutError:
            raise RequestTimeoutError("the change committed but was not applied in time") from None
        return result.base_offset

    def _topic_info(self, topic: TopicState) -> pb.TopicInfo:
        node = self._node
        partitions = []
        for partition in range(topic.spec.partitions):
            key = (topic.spec.name, partition)
            status = node.replica_status(key)
            info = pb.PartitionInfo(partition=partition, replicas=list(node.target_of(key)))
            if status is not None:
                info.leader = status.leader or ""
                info.high_watermark = status.high_watermark
                info.voters.extend(status.voters)
                info.learners.extend(status.learners)
            else:
                info.high_watermark = -1
            partitions.append(info)
        spec = topic.spec
        source = pb.SettingSource
        return pb.TopicInfo(
            name=spec.name,
            config=pb.TopicConfig(**spec.settings()),  # type: ignore[arg-type]
            partitions=partitions,
            defaults=list(spec.defaults),
            sources=[
                source(
                    name=name,
                    source=source.CLUSTER_DEFAULT if name in spec.defaults else source.TOPIC,
                )
                for name in TOPIC_SETTINGS
            ],
        )


GROUP_PARTITIONS_PER_CALL_MAX = 10_000
"""Most partitions one commit or offset fetch names (a group's partition limit)."""
ACL_CHANGES_MAX = 1000
"""Most ACLs one CreateAcls call creates."""
ACL_FILTERS_MAX = 100
"""Most filters one DeleteAcls call gives."""
STATUS_GROUPS_MAX = 100
"""Most groups one ``NodeStatus`` answer lists (the first by name)."""
STATUS_COMMITS_MAX = 1_000
"""Most committed offsets of one group a ``NodeStatus`` answer lists."""


def replication_factor(node: NodeApi, key: TopicPartition) -> int:
    """How many replicas ``key`` should have: its topic's replication factor
    (``__cluster/0``: its placement target's length); 0 for an unknown topic."""
    if key == METADATA_KEY:
        return len(node.target_of(key))
    topic = node.metadata.topics.get(key[0])
    return topic.spec.replication_factor if topic else 0


def refuse_null_keys(topic: str, batches: Sequence[bytes]) -> None:
    """Refuse (``INVALID_INPUT``) batches holding a record without a key: keyed
    compaction keeps the newest record of each key, so a compacted topic takes
    keyed records only (as Kafka does)."""
    for index, batch in enumerate(batches):
        if has_null_key(batch):
            raise InvalidInputError(
                f"topic {topic!r} is compacted (cleanup_policy has compact): every record "
                f"needs a key; batch {index} holds one without"
            )


def alive_nodes(node_id: str, members: Sequence[Member]) -> set[str]:
    """This node and the members alive or suspect: the replicas that count as in
    sync when the leader heard from them lately (``DescribeCluster``, metrics)."""
    alive = {node_id}
    alive.update(m.node_id for m in members if m.state in (MemberState.ALIVE, MemberState.SUSPECT))
    return alive


def _new_id() -> str:
    return uuid.uuid4().hex


def acl_from_binding(binding: pb.AclBinding) -> Acl:
    """The ACL a request names (validated; empty pattern literal, permission allow)."""
    acl = acl_of(binding)
    acl.validate()
    return acl


def filter_from_message(message: pb.AclFilter) -> AclFilter:
    acl_filter = filter_of(message)
    acl_filter.validate()
    return acl_filter


def _keyring_change(
    request: pb.GossipKeyringRequest,
) -> Callable[[KeyringState], KeyringState] | None:
    """The change a ``GossipKeyring`` request asks for (None: list)."""
    key = request.key
    action = request.action
    if action == pb.KEYRING_LIST:
        return None
    if action == pb.KEYRING_INSTALL:
        return lambda state: state.install(key)
    if action == pb.KEYRING_USE:
        return lambda state: state.use(key)
    if action == pb.KEYRING_REMOVE:
        return lambda state: state.remove(key)
    if action == pb.KEYRING_SET_VERIFY:
        incoming = (
            request.encrypt_verify_incoming if request.HasField("encrypt_verify_incoming") else None
        )
        outgoing = (
            request.encrypt_verify_outgoing if request.HasField("encrypt_verify_outgoing") else None
        )
        if incoming is None and outgoing is None:
            raise InvalidInputError("KEYRING_SET_VERIFY needs encrypt_verify_incoming or _outgoing")
        return lambda state: state.with_verify(incoming=incoming, outgoing=outgoing)
    raise InvalidInputError(f"unknown keyring action {action}")


def _public(topics: Mapping[str, object]) -> list[str]:
    """Topic names for listings: internal ones (``__groups``) are hidden; they can
    still be asked for by name (a client routes group calls with their leaders)."""
    return sorted(name for name in topics if not name.startswith("__"))


def _commit_error(commit: Commit, result: ApplyResult | None) -> LaminarError | None:
    if result is None:
        return InvalidInputError("the commit entry was not understood when applied")
    if result.outcome is Outcome.APPLIED or result.outcome is Outcome.DUPLICATE:
        return None
    if result.outcome is Outcome.OFFSET_BEHIND:
        return InvalidInputError(f"{commit.topic}/{commit.partition}: {result.detail}")
    return FencedMemberError(commit.group_id, commit.member_id, result.detail or "fenced")


def _check_admin(group_id: str, result: ApplyResult | None) -> None:
    if result is None:
        raise InvalidInputError("the admin entry was not understood when applied")
    if result.outcome is Outcome.NOT_EMPTY:
        members = int(result.detail.split(" ")[0]) if result.detail[:1].isdigit() else 0
        raise GroupNotEmptyError(group_id, members)
    if result.outcome is not Outcome.APPLIED:
        raise InvalidInputError(f"group {group_id}: {result.outcome.value} {result.detail}")


def _peer_host(peer: str) -> str:
    """``host:port`` of a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix) :]
    return peer[:256]


def _describe(group: Group, answer: pb.DescribeGroupResponse) -> None:
    answer.group_epoch = group.group_epoch
    if group.subscription is not None:
        answer.topics.extend(group.subscription.topics)
        answer.pattern = group.subscription.pattern or ""
    for m in group.members.values():
        answer.members.append(
            pb.GroupMemberInfo(
                member_id=m.member_id,
                instance_id=m.instance_id or "",
                weight=m.weight,
                member_epoch=m.member_epoch,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
            )
        )
    target = group.target()
    for topic, index in sorted(set(group.partitions()) | set(group.commits)):
        tp = (topic, index)
        info = pb.GroupPartitionInfo(topic=topic, partition=index, target=target.get(tp, ""))
        owner = group.owners.get(tp)
        if owner is not None:
            info.owner = owner.member_id
        info.assignment_epoch = (
            owner.assignment_epoch if owner is not None else group.assignment_epochs.get(tp, 0)
        )
        committed = group.commits.get(tp)
        if committed is not None:
            info.committed_offset = committed.next_offset
            info.metadata = committed.metadata
        answer.partitions.append(info)


def _group_status(group: Group) -> pb.GroupStatus:
    commits = sorted(group.commits.items())
    return pb.GroupStatus(
        group=group.group_id,
        state=group_status(group),
        member_count=len(group.members),
        committed=[
            pb.GroupCommitted(
                topic=topic, partition=partition, committed_offset=position.next_offset
            )
            for (topic, partition), position in commits[:STATUS_COMMITS_MAX]
        ],
        committed_more=max(0, len(commits) - STATUS_COMMITS_MAX),
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
