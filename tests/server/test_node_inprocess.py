"""Three whole nodes in one process, on memory logs whose fsync can be made to fail.

Real membership (UDP), real peer transport (TCP) and real gRPC, on 127.0.2.x, but
the logs are :class:`~laminar.segment.memory.MemoryLog` s handed in by a log
factory: a test injects fsync failures, and a reopened log holds only what was
synced (what a power loss would leave). Waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from laminar.errors import OffsetOutOfRangeError, StorageError
from laminar.grpc_errors import error_from_rpc
from laminar.records import encode_batch
from laminar.replica.types import Role
from laminar.segment.config import LogConfig
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import LogStorage
from laminar.server.config import NodeConfig, ServiceConfig
from laminar.server.disk import DiskUsage
from laminar.server.host import HostConfig
from laminar.server.node import Node
from laminar.server.service import RateLimitedLog
from laminar.topic_settings import TOPIC_SETTINGS
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server import aio
from tests.server.aio import bounded

DEADLINE_S = 20.0
TOPIC = "events"


class MemoryDisks:
    """Memory logs by directory; ``failing`` directories fail every fsync."""

    def __init__(self) -> None:
        self.logs: dict[str, MemoryLog] = {}
        self.failing: set[str] = set()

    def open(self, directory: str, config: LogConfig) -> LogStorage:
        previous = self.logs.get(directory)
        log = previous.crash() if previous is not None else MemoryLog(limits=config.limits)
        self.logs[directory] = log
        real_sync = log.sync

        def sync() -> None:
            if any(directory.startswith(root) for root in self.failing):
                raise OSError(5, "Input/output error (injected)")
            real_sync()

        log.sync = sync  # type: ignore[method-assign]
        return log


run = bounded(DEADLINE_S * 4)


def config(root: Path, index: int, **changes: Any) -> NodeConfig:
    host = f"127.0.2.{index + 1}"
    return NodeConfig.local(
        str(root / f"n{index}"),
        gossip=f"{host}:7000",
        grpc=f"{host}:7100",
        peer=f"{host}:7200",
        node_id=f"n{index}",
        bootstrap=index == 0,
        seeds=() if index == 0 else ("127.0.2.1:7000",),
        host=HostConfig(storage_retry_ms=200, storage_retry_max_ms=1000, retention_check_ms=50),
        **changes,
    )


async def wait_until(condition: Callable[[], object], what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S, poll_s=0.02)


def leader_of(nodes: list[Node], key: tuple[str, int]) -> Node | None:
    for node in nodes:
        replica = node.host.get(key)
        if replica is not None and replica.core.role is Role.LEADER:
            return node
    return None


async def start_nodes(root: Path, disks: MemoryDisks, count: int = 3) -> list[Node]:
    nodes = []
    for index in range(count):
        nodes.append(await Node.open(config(root, index), log_factory=disks.open))
    await wait_until(
        lambda: all(len(n.members()) == count for n in nodes), "every node to see the others"
    )
    return nodes


async def stop_nodes(nodes: list[Node]) -> None:
    for node in nodes:
        await node.stop(graceful=False)


def stub(node: Node, channels: list[grpc.aio.Channel]) -> laminar_pb2_grpc.LaminarStub:
    # A channel of its own subchannels: gRPC shares them process-wide by default,
    # so one left in reconnect backoff by an earlier test's node at the same
    # address would fail this test's first calls with "connection refused".
    channel = grpc.aio.insecure_channel(
        node.config.grpc, options=[("grpc.use_local_subchannel_pool", 1)]
    )
    channels.append(channel)
    return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]


async def create_topic(
    nodes: list[Node], channels: list[grpc.aio.Channel], *, retention_bytes: int = -1
) -> None:
    await wait_until(lambda: leader_of(nodes, ("__cluster", 0)), "a metadata leader")
    admin = leader_of(nodes, ("__cluster", 0))
    assert admin is not None
    request = pb.CreateTopicRequest(
        name=TOPIC,
        config=pb.TopicConfig(
            partitions=1, replication_factor=3, retention_bytes=retention_bytes, retention_ms=-1
        ),
    )
    await stub(admin, channels).CreateTopic(request, timeout=DEADLINE_S)
    await wait_until(lambda: leader_of(nodes, (TOPIC, 0)), "a partition leader")


async def produce(node: Node, value: bytes, channels: list[grpc.aio.Channel]) -> int:
    request = pb.ProduceRequest(topic=TOPIC, partition=0, batches=[encode_batch([value])])
    response = await stub(node, channels).Produce(request, timeout=5)
    return int(response.base_offsets[0])


@run
async def test_a_leader_whose_fsync_fails_is_fenced_reported_and_replaced(tmp_path: Path) -> None:
    disks = MemoryDisks()
    nodes = await start_nodes(tmp_path, disks)
    channels: list[grpc.aio.Channel] = []
    try:
        await create_topic(nodes, channels)
        leader = leader_of(nodes, (TOPIC, 0))
        assert leader is not None
        await produce(leader, b"before", channels)

        disks.failing.add(leader.config.data_dir)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await produce(leader, b"refused", channels)
        assert isinstance(error_from_rpc(caught.value), StorageError)

        # Out of service, and said so in the cluster description.
        status = await stub(leader, channels).DescribeCluster(
            pb.DescribeClusterRequest(), timeout=5
        )
        # The node's __groups replicas fail their fsyncs too; this test is about TOPIC.
        fenced = [f for f in status.fenced if f.topic == TOPIC]
        assert [(f.topic, f.partition) for f in fenced] == [(TOPIC, 0)]
        assert "Input/output error" in fenced[0].reason
        # The other replicas elect a leader and take writes.
        others = [node for node in nodes if node is not leader]
        await wait_until(lambda: leader_of(others, (TOPIC, 0)), "a new leader")
        new_leader = leader_of(others, (TOPIC, 0))
        assert new_leader is not None
        await produce(new_leader, b"after", channels)

        disks.failing.clear()  # the disk is back: the replica is reopened and rejoins
        await wait_until(lambda: not leader.host.fenced(), "the reopen")
        replica = leader.host.get((TOPIC, 0))
        assert replica is not None
        await wait_until(lambda: replica.core.leader is not None, "the reopened replica's leader")
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)


@run
async def test_shutdown_is_bounded_when_a_peer_is_gone(tmp_path: Path) -> None:
    disks = MemoryDisks()
    nodes = await start_nodes(tmp_path, disks)
    channels: list[grpc.aio.Channel] = []
    try:
        await create_topic(nodes, channels)
        gone = nodes.pop()
        await gone.stop(graceful=False)  # its peer address now refuses connections
        for value in (b"x", b"y"):  # keep replicating towards it: links reconnect
            leader = leader_of(nodes, (TOPIC, 0))
            if leader is not None:
                await produce(leader, value, channels)
        started = time.monotonic()
        await nodes[0].stop(graceful=True)
        elapsed_s = time.monotonic() - started
        bound_s = (nodes[0].config.handover_timeout_ms + nodes[0].config.shutdown_timeout_ms) / 1000
        assert elapsed_s < bound_s + 1.0
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)


@run
async def test_topic_retention_advances_every_replicas_log_start(tmp_path: Path) -> None:
    disks = MemoryDisks()
    nodes = await start_nodes(tmp_path, disks)
    channels: list[grpc.aio.Channel] = []
    try:
        batch_bytes = len(encode_batch([b"v" * 100]))
        await create_topic(nodes, channels, retention_bytes=5 * batch_bytes)
        leader = leader_of(nodes, (TOPIC, 0))
        assert leader is not None
        last = 0
        for index in range(20):
            last = await produce(leader, b"%03d" % index + b"v" * 97, channels)

        def starts() -> list[int]:
            replicas = [node.host.get((TOPIC, 0)) for node in nodes]
            return [r.core.start_offset if r is not None else -1 for r in replicas]

        # Memory logs drop batch by batch: each replica keeps the last 5 or 6.
        await wait_until(lambda: all(start >= last - 5 for start in starts()), "retention")
        request = pb.FetchRequest(topic=TOPIC, partition=0, offset=0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(leader, channels).Fetch(request, timeout=5)
        error = error_from_rpc(caught.value)
        assert isinstance(error, OffsetOutOfRangeError)
        assert error.start_offset == starts()[nodes.index(leader)]
        assert error.end_offset == last + 1
        start = error.start_offset
        response = await stub(leader, channels).Fetch(
            pb.FetchRequest(topic=TOPIC, partition=0, offset=start), timeout=5
        )
        assert response.log_start_offset == start and response.batches
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)


@run
async def test_calls_beyond_the_limit_are_refused_and_counted(tmp_path: Path) -> None:
    node = await Node.open(
        config(tmp_path, 0, service=ServiceConfig(calls_max=1)), log_factory=MemoryDisks().open
    )
    channels: list[grpc.aio.Channel] = []
    try:
        await wait_until(lambda: leader_of([node], ("__cluster", 0)), "the metadata leader")
        # The node appends the creation of __groups once it leads: wait for it, so
        # that the long-poll below finds nothing new.
        await wait_until(lambda: "__groups" in node.metadata.topics, "__groups to exist")
        replica = node.host.get(("__cluster", 0))
        assert replica is not None
        end = replica.core.high_watermark
        # A long-poll holds the only call slot...
        poll = pb.FetchRequest(topic="__cluster", partition=0, offset=end, max_wait_ms=3000)
        held = asyncio.ensure_future(stub(node, channels).Fetch(poll, timeout=10))
        await wait_until(lambda: node.service.calls == 1, "the long-poll to be in progress")
        # ...so another call is refused at once, retriable.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(node, channels).Metadata(pb.MetadataRequest(), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert node.service.counters["calls_refused"] == 1
        assert (await held).batches == b""
        await stub(node, channels).Metadata(pb.MetadataRequest(), timeout=5)  # free again
    finally:
        for channel in channels:
            await channel.close()
        await node.stop(graceful=False)


def test_rate_limited_log_says_how_many_lines_it_skipped(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = RateLimitedLog(10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="laminar.server.service"):
        for _ in range(100):  # a client flooding the node with bad requests
            log("malformed", "malformed %s request refused", "Produce")
        now[0] = 10.0
        log("malformed", "malformed %s request refused", "Fetch")
    assert [r.getMessage() for r in caplog.records] == [
        "malformed Produce request refused",
        "malformed Fetch request refused (99 more since the last such line)",
    ]


@run
async def test_a_full_node_is_gossiped_hands_over_founds_nothing_and_comes_back(
    tmp_path: Path,
) -> None:
    """The node's part of a full disk (issue 28): gossip tells the peers, the targets
    put the full node last, a new topic is founded elsewhere, and once space is
    back the node is again the preferred leader it was."""
    free_bytes = {index: 100 << 20 for index in range(3)}
    nodes: list[Node] = []
    for index in range(3):
        usage = functools.partial(lambda i: DiskUsage(free_bytes[i], 100 << 20), index)
        base = config(tmp_path, index)
        watermark = dataclasses.replace(
            base.host, disk_free_bytes_min=10 << 20, disk_free_percent_min=0.0
        )
        node_config = dataclasses.replace(base, host=watermark)
        nodes.append(await Node.open(node_config, log_factory=MemoryDisks().open, disk_usage=usage))
    channels: list[grpc.aio.Channel] = []
    try:
        await wait_until(lambda: all(len(n.members()) == 3 for n in nodes), "the members")
        await create_topic(nodes, channels)
        full = leader_of(nodes, (TOPIC, 0))
        assert full is not None
        others = [node for node in nodes if node is not full]
        free_bytes[nodes.index(full)] = 1 << 20

        def told() -> bool:
            return all(full.node_id in node.host.full_nodes() for node in others)

        await wait_until(told, "the peers to hear that the node is full")
        await wait_until(lambda: leader_of(others, (TOPIC, 0)), "a leader with space")
        for node in nodes:  # still a replica everywhere, but last: never preferred
            replica = node.host.get((TOPIC, 0))
            assert replica is not None and replica.core.target is not None
            assert replica.core.target[-1] == full.node_id
        status = await stub(full, channels).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
        assert status.disk.full and status.disk.watermark_bytes == 10 << 20
        request = pb.CreateTopicRequest(
            name="later",
            config=pb.TopicConfig(
                partitions=6, replication_factor=2, retention_bytes=-1, retention_ms=-1
            ),
        )
        await wait_until(lambda: leader_of(nodes, ("__cluster", 0)) in others, "metadata moved")
        admin = leader_of(nodes, ("__cluster", 0))
        assert admin is not None
        await stub(admin, channels).CreateTopic(request, timeout=DEADLINE_S)
        await wait_until(lambda: "later" in full.metadata.topics, "the new topic everywhere")
        founders = full.metadata.topics["later"].founding_replicas
        assert all(full.node_id not in replicas for replicas in founders), founders

        free_bytes[nodes.index(full)] = 100 << 20
        await wait_until(lambda: not any(n.host.full_nodes() for n in nodes), "space back")
        await wait_until(lambda: leader_of(nodes, (TOPIC, 0)) is full, "its leadership back")
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)


@run
async def test_topic_settings_left_unset_take_the_clusters_defaults(tmp_path: Path) -> None:
    """A generic gRPC client that leaves TopicConfig fields unset (proto3 field
    presence) gets the metadata leader's defaults, listed in ``defaults``; an
    explicit 0 is still refused. Two nodes: the replication factor default (3) is
    capped at the 2 nodes with weight > 0."""
    disks = MemoryDisks()
    service = ServiceConfig(default_partitions=4)
    nodes = [
        await Node.open(
            dataclasses.replace(config(tmp_path, index), service=service), log_factory=disks.open
        )
        for index in range(2)
    ]
    channels: list[grpc.aio.Channel] = []
    try:
        await wait_until(lambda: all(len(n.members()) == 2 for n in nodes), "both nodes")
        await wait_until(lambda: leader_of(nodes, ("__cluster", 0)), "a metadata leader")
        admin = leader_of(nodes, ("__cluster", 0))
        assert admin is not None
        api = stub(admin, channels)
        created = await api.CreateTopic(pb.CreateTopicRequest(name="all"), timeout=DEADLINE_S)
        config_ = created.topic.config
        assert (config_.partitions, config_.replication_factor) == (4, 2)
        assert (config_.retention_bytes, config_.retention_ms) == (-1, -1)
        assert list(created.topic.defaults) == list(TOPIC_SETTINGS)  # all nine
        assert {s.name for s in created.topic.sources} == set(TOPIC_SETTINGS)
        assert {s.source for s in created.topic.sources} == {pb.SettingSource.CLUSTER_DEFAULT}
        assert created.topic.config.cleanup_policy == "delete"
        some = pb.CreateTopicRequest(name="some", config=pb.TopicConfig(partitions=2))
        created = await api.CreateTopic(some, timeout=DEADLINE_S)
        assert created.topic.config.partitions == 2
        assert "partitions" not in created.topic.defaults
        assert "replication_factor" in created.topic.defaults
        answer = await api.Metadata(pb.MetadataRequest(topics=["some"]), timeout=5)
        assert list(answer.topics[0].defaults) == list(created.topic.defaults)
        for zero in (pb.TopicConfig(partitions=0), pb.TopicConfig(replication_factor=0)):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await api.CreateTopic(
                    pb.CreateTopicRequest(name="zero", config=zero), timeout=DEADLINE_S
                )
            assert type(error_from_rpc(raised.value)).__name__ == "InvalidTopicError"
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)
