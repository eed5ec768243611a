"""``ListOffsets``: the replica host's answer on a leader and a follower, then the
gRPC service of three in-process nodes (memory logs, real membership, transport and
gRPC) and the client against it.

Record timestamps are wall-clock-like (``T0`` and after): the replication core stamps
its control batches (leader no-ops, configuration changes) with its own monotonic
clock, far below ``T0``, so that they never match a lookup here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from laminar_client import Client, PartitionOffsets, Watermarks

from laminar.errors import (
    InvalidInputError,
    StorageError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import error_from_rpc
from laminar.ids import TopicPartition
from laminar.records import encode_batch, with_leader_fields
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.messages import AppendRequest
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.memory import MemoryLog
from laminar.server.config import NodeConfig
from laminar.server.driver import Standalone
from laminar.server.host import HostConfig, ReplicaHost
from laminar.server.host import PartitionOffsets as HostOffsets
from laminar.server.node import Node
from laminar.server.service import LIST_OFFSETS_PARTITIONS_MAX
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server import aio
from tests.server.aio import bounded
from tests.server.test_node_inprocess import MemoryDisks, leader_of

DEADLINE_S = 20.0
KEY = ("events", 0)
T0 = 1_700_000_000_000
"""A wall-clock time in ms; every record timestamp in these tests is T0 + something."""

run = bounded(DEADLINE_S * 4)


async def wait_until(condition: Any, what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S, poll_s=0.01)


def batch(*timestamps_ms: int) -> bytes:
    values = [b"at %d" % t for t in timestamps_ms]
    return encode_batch(values, timestamps_ms=[T0 + t for t in timestamps_ms])


def _no_peers(node: str, bundle: object) -> None:
    raise AssertionError("a single-voter group sends nothing")


class _KeepNewestBatch(Standalone):
    def retention_of(self, key: TopicPartition) -> tuple[int | None, int | None]:
        return 1, None  # keep the newest batch only


async def leading_host(tmp_path: Path, **options: Any) -> ReplicaHost:
    log_config = options.pop("log_config", LogConfig())
    host = ReplicaHost(
        "n1", str(tmp_path), ReplicaConfig.local(), log_config, send=_no_peers, **options
    )
    await host.start()
    replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
    await wait_until(lambda: replica.core.role is Role.LEADER, "the single voter to lead")
    return host


# --------------------------------------------------------------------------- the host


@run
async def test_the_leader_finds_the_first_offset_at_or_after_a_time_record_by_record(
    tmp_path: Path,
) -> None:
    # Small segments and index intervals: the lookup crosses segments and uses the
    # time index, on the real segment log.
    log_config = LogConfig(segment_bytes_max=600, index_interval_bytes=100)
    host = await leading_host(tmp_path, log_config=log_config)
    try:
        # Timestamps out of order within and across batches.
        produced = [
            batch(100, 300, 200),
            batch(150, 400),
            *(batch(1000 + n) for n in range(20)),
        ]
        offsets = [(await host.produce(KEY, b, Acks.ALL, 5)).base_offset for b in produced]
        first, second = offsets[0], offsets[1]
        replica = host.get(KEY)
        assert replica is not None and len(replica.log._segments) > 2  # type: ignore[attr-defined]
        end = offsets[-1] + 1

        def lookup(timestamp_ms: int | None) -> int | None:
            answer = host.list_offsets(KEY, None if timestamp_ms is None else T0 + timestamp_ms)
            assert (answer.log_start_offset, answer.high_watermark) == (0, end)
            return answer.offset_for_timestamp

        assert lookup(None) is None  # no time asked
        assert lookup(-(10**6)) == first  # everything is later: the first data record
        assert lookup(100) == first
        assert lookup(101) == first + 1  # 300, although 200 comes after it
        assert lookup(250) == first + 1
        assert lookup(301) == second + 1  # 400: the first batch holds nothing as late
        assert lookup(400) == second + 1
        assert lookup(401) == offsets[2]
        assert lookup(1010) == offsets[12]
        assert lookup(1019) == offsets[21]
        assert lookup(1020) is None  # every record is earlier
    finally:
        await host.close()


@run
async def test_retention_moves_the_start_and_the_lookup_with_it(tmp_path: Path) -> None:
    host = await leading_host(
        tmp_path,
        log_factory=lambda directory, config: MemoryLog(limits=config.limits),
        owner=_KeepNewestBatch(),
        host_config=HostConfig(retention_check_ms=20),
    )
    try:
        offsets = [
            (await host.produce(KEY, batch(t), Acks.ALL, 5)).base_offset for t in (10, 20, 30)
        ]
        replica = host.get(KEY)
        assert replica is not None
        await wait_until(lambda: replica.core.start_offset == offsets[-1], "retention")
        # The earliest time now finds the new start, the first record kept.
        answer = host.list_offsets(KEY, T0)
        assert answer == HostOffsets(offsets[-1], offsets[-1] + 1, offsets[-1])
    finally:
        await host.close()


@run
async def test_a_follower_answers_below_its_high_watermark_only(tmp_path: Path) -> None:
    host = ReplicaHost(
        "n1", str(tmp_path), ReplicaConfig.local(), LogConfig(), send=lambda node, bundle: None
    )
    term = 7  # above any term the follower could reach by itself meanwhile
    await host.start()
    try:
        replica = host.open_replica(KEY, GroupConfig((NodeId("n0"), NodeId("n1"))))

        def append(prev_end: int, data: bytes, end: int, commit: int) -> None:
            request = AppendRequest(
                term=term,
                leader=NodeId("n0"),
                prev_end_offset=prev_end,
                prev_term=-1 if prev_end == 0 else term,
                batches=data,
                end_offset=end,
                commit_offset=commit,
            )
            host.on_bundle("n0", PeerBundle((), ((KEY, request),)))
            host.flush_now()

        # Offsets 0-1 (times 10, 20) committed; offset 2 (time 30) only appended.
        first = with_leader_fields(batch(10, 20), 0, term)
        second = with_leader_fields(batch(30), 2, term)
        append(0, first + second, 3, 2)
        await wait_until(lambda: replica.log.end_offset == 3, "the follower's append")
        assert replica.core.role is Role.FOLLOWER
        answer = host.list_offsets(KEY, T0 + 15)
        assert (answer.log_start_offset, answer.high_watermark) == (0, 2)
        assert answer.offset_for_timestamp == 1
        # The only record as late as 30 is not committed: no answer, not offset 2.
        assert host.list_offsets(KEY, T0 + 25).offset_for_timestamp is None

        append(3, b"", 3, 3)  # the leader's next heartbeat commits it
        await wait_until(lambda: replica.core.high_watermark == 3, "the commit")
        assert host.list_offsets(KEY, T0 + 25).offset_for_timestamp == 2
    finally:
        await host.close()


@run
async def test_a_host_without_a_serving_replica_says_why(tmp_path: Path) -> None:
    disks = MemoryDisks()
    host = await leading_host(
        tmp_path,
        log_factory=disks.open,
        host_config=HostConfig(storage_retry_ms=60_000, storage_retry_max_ms=60_000),
    )
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            host.list_offsets(("events", 1), None)
        disks.failing.add(str(tmp_path))  # a failed fsync fences the replica
        with pytest.raises(StorageError):
            await host.produce(KEY, batch(10), Acks.ALL, 5)
        with pytest.raises(UnavailableError, match="out of service"):
            host.list_offsets(KEY, None)
    finally:
        await host.close()


# --------------------------------------------------------------------------- the service

TOPIC = "offsets"
SPREAD = "spread"


def node_config(root: Path, index: int) -> NodeConfig:
    # Addresses of their own, so that these nodes never meet another test's.
    address = f"127.0.4.{index + 1}"
    return NodeConfig.local(
        str(root / f"n{index}"),
        gossip=f"{address}:7000",
        grpc=f"{address}:7100",
        peer=f"{address}:7200",
        node_id=f"n{index}",
        bootstrap=index == 0,
        seeds=() if index == 0 else ("127.0.4.1:7000",),
    )


class Cluster:
    """Three in-process nodes and a stub per node."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.channels = [grpc.aio.insecure_channel(node.config.grpc) for node in nodes]
        self.stubs = [laminar_pb2_grpc.LaminarStub(c) for c in self.channels]  # type: ignore[no-untyped-call]

    def stub(self, node: Node) -> laminar_pb2_grpc.LaminarStub:
        return self.stubs[self.nodes.index(node)]

    async def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        await wait_until(lambda: leader_of(self.nodes, ("__cluster", 0)), "a metadata leader")
        admin = leader_of(self.nodes, ("__cluster", 0))
        assert admin is not None
        config = pb.TopicConfig(
            partitions=partitions,
            replication_factor=replication_factor,
            retention_bytes=-1,
            retention_ms=-1,
        )
        request = pb.CreateTopicRequest(name=name, config=config)
        await self.stub(admin).CreateTopic(request, timeout=DEADLINE_S)
        for partition in range(partitions):
            key = (name, partition)
            await wait_until(lambda key=key: leader_of(self.nodes, key), f"a leader of {key}")
        await wait_until(
            lambda: all(name in node.metadata.topics for node in self.nodes), "the catalogue"
        )

    async def list_offsets(
        self, node: Node, topic: str, partitions: Sequence[int], timestamp_ms: int | None = None
    ) -> pb.ListOffsetsResponse:
        request = pb.ListOffsetsRequest(topic=topic, partitions=partitions)
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        return await self.stub(node).ListOffsets(request, timeout=5)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        for node in self.nodes:
            await node.stop(graceful=False)


async def start_cluster(root: Path) -> Cluster:
    disks = MemoryDisks()
    nodes: list[Node] = []
    try:
        for index in range(3):
            nodes.append(await Node.open(node_config(root, index), log_factory=disks.open))
        await wait_until(lambda: all(len(n.members()) == 3 for n in nodes), "the membership")
    except BaseException:
        for node in nodes:
            await node.stop(graceful=False)
        raise
    return Cluster(nodes)


def answered(entry: pb.PartitionOffsets) -> tuple[int, int, int | None]:
    assert not entry.HasField("error"), entry.error
    found = entry.offset_for_timestamp if entry.HasField("offset_for_timestamp") else None
    return entry.log_start_offset, entry.high_watermark, found


@run
async def test_every_replica_answers_and_errors_are_per_partition(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        await cluster.create_topic(TOPIC, 1, 3)
        await cluster.create_topic(SPREAD, 12, 1)
        leader = leader_of(cluster.nodes, (TOPIC, 0))
        assert leader is not None
        produce = pb.ProduceRequest(
            topic=TOPIC, partition=0, batches=[batch(100, 300, 200), batch(400)]
        )
        base = (await cluster.stub(leader).Produce(produce, timeout=5)).base_offsets[0]
        end = base + 4

        def replicas_caught_up() -> bool:
            replicas = [node.host.get((TOPIC, 0)) for node in cluster.nodes]
            return all(r is not None and r.core.high_watermark == end for r in replicas)

        await wait_until(replicas_caught_up, "every replica's high watermark")
        for node in cluster.nodes:  # the leader and both followers
            response = await cluster.list_offsets(node, TOPIC, [0], T0 + 250)
            assert response.served_by == node.node_id
            assert [answered(e) for e in response.partitions] == [(0, end, base + 1)]
            response = await cluster.list_offsets(node, TOPIC, [0])  # no time asked
            assert [answered(e) for e in response.partitions] == [(0, end, None)]
            response = await cluster.list_offsets(node, TOPIC, [0], T0 + 401)
            assert [answered(e) for e in response.partitions] == [(0, end, None)]

        # A node answers what it hosts and sends the rest elsewhere, retriably, as Fetch.
        asker = cluster.nodes[0]
        partitions = list(range(12))
        response = await cluster.list_offsets(asker, SPREAD, [*partitions, 12, 2**32 - 1])
        entries = {entry.partition: entry for entry in response.partitions}
        assert list(entries) == [*partitions, 12, 2**32 - 1]  # the request's order
        hosted = [p for p in partitions if asker.host.get((SPREAD, p)) is not None]
        assert hosted and len(hosted) < 12  # placement spreads 12 partitions over 3 nodes
        for partition in partitions:
            entry = entries[partition]
            if partition in hosted:  # empty but for the first leader's no-op
                assert answered(entry) == (0, 1, None)
            else:
                assert entry.error.code == pb.UNAVAILABLE
                assert "has no replica on n0" in entry.error.message
        # Beyond the topic's partitions (2**32 - 1 is also what a -1 becomes on the wire).
        for partition in (12, 2**32 - 1):
            assert entries[partition].error.code == pb.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        await cluster.close()


async def refused(cluster: Cluster, request: pb.ListOffsetsRequest) -> tuple[str, Exception]:
    """The status code name and the typed error of a request the node refuses whole."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await cluster.stubs[0].ListOffsets(request, timeout=5)
    return caught.value.code().name, error_from_rpc(caught.value)


@run
async def test_bad_requests_are_refused_whole_and_the_client_reads_every_partition(
    tmp_path: Path,
) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        await cluster.create_topic(SPREAD, 6, 1)
        too_many = list(range(LIST_OFFSETS_PARTITIONS_MAX + 1))
        for partitions, words in (
            ([], "got 0"),
            (too_many, f"got {LIST_OFFSETS_PARTITIONS_MAX + 1}"),
            ([1, 2, 1], "more than once"),
        ):
            request = pb.ListOffsetsRequest(topic=SPREAD, partitions=partitions)
            status, error = await refused(cluster, request)
            assert status == "INVALID_ARGUMENT" and isinstance(error, InvalidInputError)
            assert words in str(error)
        request = pb.ListOffsetsRequest(topic="nope", partitions=[0])
        status, error = await refused(cluster, request)
        assert status == "NOT_FOUND" and isinstance(error, UnknownTopicOrPartitionError)

        # The client over real gRPC: each partition from the node that hosts it.
        bootstrap = ",".join(node.config.grpc for node in cluster.nodes)

        def use_client() -> tuple[dict[int, PartitionOffsets], Watermarks]:
            with Client(bootstrap, timeout_s=10) as client:
                offsets = client.list_offsets(SPREAD, range(6), timestamp_ms=T0)
                return offsets, client.watermarks(SPREAD, 3)

        offsets, marks = await asyncio.to_thread(use_client)
        assert offsets == dict.fromkeys(range(6), PartitionOffsets(0, 1, None))
        assert (marks.log_start_offset, marks.high_watermark) == (0, 1)
    finally:
        await cluster.close()
