"""An in-process fake of the `Laminar` gRPC service, on real servers on 127.0.0.1.

One `FakeCluster` runs several `FakeNode`s, each a grpc.server on an ephemeral
port, sharing one in-memory state (topics, logs, leaders). Tests script failures
with `fail_next(node_id, method, *errors)` (an error; `("after", error)` to fail
after doing the work; a `threading.Event` to hang until it is set), make a node's
replica serve a batch with a flipped byte with `corrupt_on(node_id, topic,
partition, base_offset)` (its ReportCorruption answers "damaged" for that batch),
and read the call log in `calls`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from laminar.errors import (
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import TopicExistsError, error_metadata, error_to_status
from laminar.records import decode_batch, iter_batches, with_leader_fields
from laminar.replica.producers import ProducerTable
from laminar.replica.producers import Verdict as SequenceVerdict
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc as pb_grpc


@dataclass
class FakePartition:
    replicas: list[str]
    leader: str | None
    batches: list[bytes] = field(default_factory=list)
    end_offset: int = 0
    sequences: dict[tuple[int, int], int] = field(default_factory=dict)
    # What Metadata reports as leader (may differ from `leader` to test redirects).
    advertised_leader: str | None = None
    # Set to the replica's own ProducerTable to check sequences as a real node does
    # (duplicates within the window, gaps refused); None keeps `sequences` above.
    producers: ProducerTable | None = None
    # The first offset still stored (retention): Fetch below it answers
    # OFFSET_OUT_OF_RANGE; Fetch and ListOffsets report it.
    log_start: int = 0
    # Who votes now (None: the replicas), to show a replica move under way.
    voters: list[str] | None = None


@dataclass
class FakeTopic:
    config: pb.TopicConfig
    partitions: list[FakePartition]
    defaults: list[str] = field(default_factory=list)


FAKE_DEFAULTS = {
    "replication_factor": 3,
    "retention_bytes": -1,
    "retention_ms": -1,
    "cleanup_policy": "delete",
    "delete_retention_ms": 86_400_000,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": -1,
    "min_cleanable_dirty_ratio": 0.5,
}


def abort(context: grpc.ServicerContext, error: LaminarError) -> None:
    status, detail = error_to_status(error)
    context.set_trailing_metadata(error_metadata(detail))
    context.abort(status, detail.message)


class FakeServicer(pb_grpc.LaminarServicer):
    def __init__(self, cluster: FakeCluster, node_id: str) -> None:
        self.cluster = cluster
        self.node_id = node_id

    def _enter(self, method: str, request, context):
        cluster = self.cluster
        with cluster.lock:
            cluster.calls.append((self.node_id, method, request))
            queue = cluster.failures[(self.node_id, method)]
            failure = queue.pop(0) if queue else None
        if failure is not None:
            if isinstance(failure, threading.Event):  # hang until the test sets it
                failure.wait(10)
                return None
            if isinstance(failure, tuple):  # ("after", error): do the work, then fail
                return failure[1]
            abort(context, failure)
        return None

    def _partition(self, context, topic: str, index: int) -> FakePartition:
        found = self.cluster.topics.get(topic)
        if found is None or index >= len(found.partitions):
            abort(context, UnknownTopicOrPartitionError(f"unknown {topic}/{index}"))
        return found.partitions[index]

    def Produce(self, request, context):
        fail_after = self._enter("Produce", request, context)
        cluster = self.cluster
        with cluster.lock:
            part = self._partition(context, request.topic, request.partition)
            if part.leader != self.node_id:
                leader = part.leader
                address = cluster.address_of(leader) if leader else None
                abort(context, NotLeaderError(leader, address))
            offsets = []
            for raw in request.batches:
                (_, header), *_ = list(iter_batches(raw))
                key = (header.producer_id, header.base_sequence)
                if part.producers is not None:
                    check = part.producers.check(*key, header.record_count)
                    if check.verdict is SequenceVerdict.DUPLICATE:
                        offsets.append(check.base_offset)
                        continue
                    if check.verdict is SequenceVerdict.OUT_OF_ORDER:
                        abort(context, OutOfOrderSequenceError(*key, check.expected_sequence))
                    part.producers.record(*key, header.record_count, part.end_offset)
                elif header.producer_id >= 0 and key in part.sequences:
                    offsets.append(part.sequences[key])
                    continue
                base = part.end_offset
                part.batches.append(with_leader_fields(raw, base, 1))
                part.end_offset += header.record_count
                if header.producer_id >= 0:
                    part.sequences[key] = base
                offsets.append(base)
            cluster.changed.notify_all()
        if fail_after is not None:
            abort(context, fail_after)
        return pb.ProduceResponse(base_offsets=offsets)

    def Fetch(self, request, context):
        self._enter("Fetch", request, context)
        cluster = self.cluster
        with cluster.lock:
            part = self._partition(context, request.topic, request.partition)
            if self.node_id not in part.replicas:
                abort(context, NotLeaderError(None, None))
            if not part.log_start <= request.offset <= part.end_offset:
                abort(
                    context,
                    OffsetOutOfRangeError(request.offset, part.log_start, part.end_offset),
                )
            if request.offset == part.end_offset and request.max_wait_ms:
                cluster.changed.wait_for(
                    lambda: part.end_offset > request.offset, request.max_wait_ms / 1000
                )
            out = bytearray()
            for batch in part.batches:
                (_, header), *_ = list(iter_batches(batch))
                if header.next_offset <= request.offset:
                    continue
                if out and request.max_bytes and len(out) + len(batch) > request.max_bytes:
                    break
                start = len(out)
                out += batch
                flipped = cluster.corrupt.get(
                    (self.node_id, request.topic, request.partition, header.base_offset)
                )
                if flipped is not None:
                    out[start + flipped % len(batch)] ^= 0x01
            return pb.FetchResponse(
                batches=bytes(out),
                high_watermark=part.end_offset,
                log_start_offset=part.log_start,
                served_by=self.node_id,
            )

    def ReportCorruption(self, request, context):
        self._enter("ReportCorruption", request, context)
        cluster = self.cluster
        with cluster.lock:
            part = self._partition(context, request.topic, request.partition)
            for batch in part.batches:
                (_, header), *_ = list(iter_batches(batch))
                if header.base_offset <= request.offset < header.next_offset:
                    where = (self.node_id, request.topic, request.partition, header.base_offset)
                    damaged = where in cluster.corrupt
                    return pb.ReportCorruptionResponse(
                        damaged=damaged, reason="flipped" if damaged else ""
                    )
            abort(context, OffsetOutOfRangeError(request.offset, part.log_start, part.end_offset))

    def ListOffsets(self, request, context):
        self._enter("ListOffsets", request, context)
        cluster = self.cluster
        with cluster.lock:
            found = cluster.topics.get(request.topic)
            if found is None:
                abort(context, UnknownTopicOrPartitionError(f"unknown topic {request.topic!r}"))
            answers = []
            for index in request.partitions:
                answer = pb.PartitionOffsets(partition=index)
                error: LaminarError | None = None
                if index >= len(found.partitions):
                    error = UnknownTopicOrPartitionError(f"unknown {request.topic}/{index}")
                elif self.node_id not in found.partitions[index].replicas:
                    error = UnavailableError(f"{request.topic}/{index}: no replica here")
                if error is not None:
                    answer.error.CopyFrom(error_to_status(error)[1])
                else:
                    part = found.partitions[index]
                    answer.log_start_offset = part.log_start
                    answer.high_watermark = part.end_offset
                    if request.HasField("timestamp_ms"):
                        for batch in part.batches:
                            (_, header), *_ = list(iter_batches(batch))
                            times = decode_batch(batch, verify=False).timestamps_ms
                            late = [i for i, t in enumerate(times) if t >= request.timestamp_ms]
                            if late:
                                answer.offset_for_timestamp = header.base_offset + late[0]
                                break
                answers.append(answer)
            return pb.ListOffsetsResponse(partitions=answers, served_by=self.node_id)

    def Metadata(self, request, context):
        self._enter("Metadata", request, context)
        cluster = self.cluster
        with cluster.lock:
            offset, topics = cluster.frozen_metadata.get(
                self.node_id,
                (
                    cluster.metadata_offset,
                    [cluster.topic_proto(n) for n in sorted(cluster.topics)],
                ),
            )
            return pb.MetadataResponse(
                cluster_id="fake",
                node_id=self.node_id,
                members=cluster.members_proto(),
                topics=topics,
                metadata_offset=offset,
            )

    def CreateTopic(self, request, context):
        self._enter("CreateTopic", request, context)
        cluster = self.cluster
        with cluster.lock:
            if not request.name or "/" in request.name:
                abort(context, InvalidTopicError(f"invalid topic name {request.name!r}"))
            if request.name in cluster.topics:
                abort(context, TopicExistsError(f"topic {request.name!r} already exists"))
            nodes = sorted(cluster.nodes)
            # Unset fields take the cluster's defaults, as a node's do.
            config = pb.TopicConfig(**{**FAKE_DEFAULTS, "partitions": 1})
            config.replication_factor = min(3, len(nodes))
            defaults = []
            for name in ("partitions", *FAKE_DEFAULTS):
                if request.config.HasField(name):
                    setattr(config, name, getattr(request.config, name))
                else:
                    defaults.append(name)
            rf = config.replication_factor
            partitions = []
            for index in range(config.partitions):
                replicas = [nodes[(index + i) % len(nodes)] for i in range(rf)]
                partitions.append(FakePartition(replicas=replicas, leader=replicas[0]))
            cluster.topics[request.name] = FakeTopic(config, partitions, defaults)
            return pb.CreateTopicResponse(topic=cluster.topic_proto(request.name))

    def _topic_at_metadata_leader(self, context, name: str) -> FakeTopic:
        """The topic to change; NOT_LEADER unless this is n0, the fake's metadata
        leader (cluster lock held)."""
        if self.node_id != "n0":
            abort(context, NotLeaderError("n0", self.cluster.address_of("n0")))
        topic = self.cluster.topics.get(name)
        if topic is None:
            abort(context, UnknownTopicOrPartitionError(f"unknown topic {name!r}"))
        return topic

    def AlterTopic(self, request, context):
        """Alter as a node does, in miniature: the metadata leader is n0 (others
        answer NOT_LEADER); a bad retention is refused naming the field."""
        self._enter("AlterTopic", request, context)
        cluster = self.cluster
        with cluster.lock:
            topic = self._topic_at_metadata_leader(context, request.name)
            previous = cluster.topic_proto(request.name)
            config = pb.TopicConfig()
            config.CopyFrom(topic.config)
            for descriptor, value in request.set.ListFields():
                setattr(config, descriptor.name, value)
            for name in request.reset:
                setattr(config, name, FAKE_DEFAULTS[name])
            for name in ("retention_ms", "retention_bytes"):
                if getattr(config, name) == 0 or getattr(config, name) < -1:
                    abort(context, InvalidTopicError(f"{name} must be positive or -1"))
            set_names = {d.name for d, _ in request.set.ListFields()}
            defaults = [n for n in [*topic.defaults, *request.reset] if n not in set_names]
            altered = FakeTopic(config, topic.partitions, list(dict.fromkeys(defaults)))
            answer = cluster.topic_proto(request.name, altered)
            if not request.validate_only:
                cluster.topics[request.name] = altered
            return pb.AlterTopicResponse(topic=answer, previous=previous)

    def CreatePartitions(self, request, context):
        self._enter("CreatePartitions", request, context)
        cluster = self.cluster
        with cluster.lock:
            topic = self._topic_at_metadata_leader(context, request.name)
            previous = topic.config.partitions
            if request.to <= previous:
                abort(
                    context,
                    InvalidInputError(
                        f"topic {request.name} has {previous} partitions; --to must be more"
                    ),
                )
            if request.validate_only:
                config = pb.TopicConfig()
                config.CopyFrom(topic.config)
                would = FakeTopic(config, list(topic.partitions), topic.defaults)
                cluster.grow(would, request.to)
                answer = cluster.topic_proto(request.name, would)
            else:
                cluster.add_partitions(request.name, request.to)
                answer = cluster.topic_proto(request.name)
            return pb.CreatePartitionsResponse(topic=answer, previous=previous)

    def DeleteTopic(self, request, context):
        self._enter("DeleteTopic", request, context)
        with self.cluster.lock:
            if self.cluster.topics.pop(request.name, None) is None:
                abort(context, UnknownTopicOrPartitionError(f"unknown topic {request.name!r}"))
            return pb.DeleteTopicResponse()

    def ListTopics(self, request, context):
        self._enter("ListTopics", request, context)
        with self.cluster.lock:
            topics = [self.cluster.topic_proto(n) for n in sorted(self.cluster.topics)]
            return pb.ListTopicsResponse(topics=topics)

    def DescribeCluster(self, request, context):
        self._enter("DescribeCluster", request, context)
        cluster = self.cluster
        with cluster.lock:
            health = [
                pb.PartitionHealth(
                    topic=name,
                    partition=index,
                    leader=part.leader or "",
                    replicas=part.replicas,
                    voters=part.voters if part.voters is not None else part.replicas,
                    under_replicated=index == 1,
                )
                for name, topic in sorted(cluster.topics.items())
                for index, part in enumerate(topic.partitions)
            ]
            return pb.DescribeClusterResponse(
                cluster_id="fake",
                node_id=self.node_id,
                members=cluster.members_proto(),
                partitions=health,
                disk=cluster.disks.get(self.node_id),
                maintenance=cluster.maintenance,
                incompatible_peers=cluster.incompatible_peers.get(self.node_id, []),
            )

    def UpdateNode(self, request, context):
        self._enter("UpdateNode", request, context)
        with self.cluster.lock:
            member = self.cluster.members[self.node_id]
            if request.HasField("weight"):
                member.weight = request.weight
            if request.HasField("zone"):
                member.zone = request.zone
            return pb.UpdateNodeResponse(member=member)

    def SetMaintenance(self, request, context):
        self._enter("SetMaintenance", request, context)
        with self.cluster.lock:
            maintenance = self.cluster.maintenance
            if request.enter and request.node_id not in maintenance:
                maintenance.append(request.node_id)
            elif not request.enter and request.node_id in maintenance:
                maintenance.remove(request.node_id)
            return pb.SetMaintenanceResponse(maintenance=maintenance)


class FakeNode:
    def __init__(self, cluster: FakeCluster, node_id: str) -> None:
        self.node_id = node_id
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_LaminarServicer_to_server(FakeServicer(cluster, node_id), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.running = False

    def start(self) -> None:
        self.server.start()
        self.running = True

    def stop(self) -> None:
        self.server.stop(grace=None).wait()
        self.running = False


class FakeCluster:
    def __init__(self, node_count: int = 3) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.calls: list[tuple[str, str, object]] = []
        self.failures: dict[tuple[str, str], list] = defaultdict(list)
        # (node, topic, partition, base offset) -> the byte of that batch the node
        # serves flipped (negative: from the end).
        self.corrupt: dict[tuple[str, str, int, int], int] = {}
        self.topics: dict[str, FakeTopic] = {}
        self.nodes: dict[str, FakeNode] = {}
        self.members: dict[str, pb.Member] = {}
        self.disks: dict[str, pb.NodeDisk] = {}
        self.maintenance: list[str] = []
        self.incompatible_peers: dict[str, list[pb.IncompatiblePeer]] = {}
        self.metadata_offset = 0
        # node -> the metadata offset and topics it answers with, frozen (a node that
        # lags the catalogue); absent: the cluster's current state.
        self.frozen_metadata: dict[str, tuple[int, list[pb.TopicInfo]]] = {}
        """What each node's DescribeCluster says of its disk (none: not said)."""
        for index in range(node_count):
            node_id = f"n{index}"
            node = FakeNode(self, node_id)
            self.nodes[node_id] = node
            self.members[node_id] = pb.Member(
                node_id=node_id,
                grpc_address=node.address,
                gossip_address=f"127.0.0.1:{9000 + index}",
                weight=1.0,
                zone=f"z{index}",
                state="alive",
            )
        for node in self.nodes.values():
            node.start()

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    def address_of(self, node_id: str) -> str:
        return self.nodes[node_id].address

    def fail_next(self, node_id: str, method: str, *errors) -> None:
        with self.lock:
            self.failures[(node_id, method)].extend(errors)

    def corrupt_on(
        self, node_id: str, topic: str, partition: int, base_offset: int, byte: int = -1
    ) -> None:
        """Make ``node_id`` serve the batch at ``base_offset`` with byte ``byte``
        flipped (default: the payload's last; 0-71 are in the checksummed header)."""
        with self.lock:
            self.corrupt[(node_id, topic, partition, base_offset)] = byte

    def calls_to(self, method: str) -> list[str]:
        with self.lock:
            return [node for node, name, _ in self.calls if name == method]

    def add_topic(self, name: str, partitions: int = 1, rf: int = 3) -> None:
        with self.lock:
            config = pb.TopicConfig(
                partitions=partitions, replication_factor=rf, retention_bytes=-1, retention_ms=-1
            )
            nodes = sorted(self.nodes)
            parts = []
            for index in range(partitions):
                replicas = [nodes[(index + i) % len(nodes)] for i in range(rf)]
                parts.append(FakePartition(replicas=replicas, leader=replicas[0]))
            self.topics[name] = FakeTopic(config, parts)

    def add_partitions(self, name: str, to: int) -> None:
        """Raise ``name``'s partition count to ``to`` (the new ones empty), and the
        metadata offset with it."""
        with self.lock:
            self.grow(self.topics[name], to)
            self.metadata_offset += 1

    def grow(self, topic: FakeTopic, to: int) -> None:
        nodes = sorted(self.nodes)
        rf = topic.config.replication_factor
        for index in range(topic.config.partitions, to):
            replicas = [nodes[(index + i) % len(nodes)] for i in range(rf)]
            topic.partitions.append(FakePartition(replicas=replicas, leader=replicas[0]))
        topic.config.partitions = to

    def partition(self, topic: str, index: int = 0) -> FakePartition:
        return self.topics[topic].partitions[index]

    def members_proto(self) -> list[pb.Member]:
        return [self.members[n] for n in sorted(self.members)]

    def topic_proto(self, name: str, topic: FakeTopic | None = None) -> pb.TopicInfo:
        topic = self.topics[name] if topic is None else topic
        infos = []
        for index, part in enumerate(topic.partitions):
            leader = part.advertised_leader if part.advertised_leader is not None else part.leader
            infos.append(
                pb.PartitionInfo(
                    partition=index,
                    replicas=part.replicas,
                    leader=leader or "",
                    high_watermark=part.end_offset,
                    voters=part.voters if part.voters is not None else part.replicas,
                )
            )
        sources = [
            pb.SettingSource(
                name=setting,
                source=pb.SettingSource.CLUSTER_DEFAULT
                if setting in topic.defaults
                else pb.SettingSource.TOPIC,
            )
            for setting in ("partitions", *FAKE_DEFAULTS)
        ]
        return pb.TopicInfo(
            name=name,
            config=topic.config,
            partitions=infos,
            defaults=topic.defaults,
            sources=sources,
        )

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.running:
                node.stop()
