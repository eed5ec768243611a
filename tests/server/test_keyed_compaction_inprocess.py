"""Keyed compaction on three whole nodes in one process (real membership, peer
transport and gRPC on 127.0.2.x; memory logs of small segments, each node's of
another size): a topic created with ``cleanup_policy`` ``compact`` is compacted by
a command its leader agreed through the log, and every node serves the same
batches for every offset (fetched from each node directly)."""

from __future__ import annotations

from pathlib import Path

import grpc

from laminar.records import decode_records, encode_batch, iter_batches, parse_header
from laminar.segment.config import LogConfig
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import LogStorage
from laminar.server.node import Node
from laminar.v1 import laminar_pb2 as pb
from tests.server.aio import bounded
from tests.server.test_node_inprocess import (
    DEADLINE_S,
    config,
    leader_of,
    stop_nodes,
    stub,
    wait_until,
)

TOPIC = "changelog"
KEY = (TOPIC, 0)
KEYS = 8
RECORDS = 120


class SmallSegments:
    """Memory logs sealing a segment every few batches (a different count per node)."""

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def open(self, directory: str, config: LogConfig) -> LogStorage:
        return MemoryLog(limits=config.limits, fsync=False, segment_batches_max=self.batches)


async def _fetch_all(node: Node, channels: list[grpc.aio.Channel], end: int) -> list[bytes]:
    """Every batch ``node`` serves below ``end``, from offset 0, raw."""
    api = stub(node, channels)
    batches: list[bytes] = []
    offset = 0
    while offset < end:
        response = await api.Fetch(
            pb.FetchRequest(topic=TOPIC, partition=0, offset=offset), timeout=5
        )
        data = response.batches
        assert data, (node.config.node_id, offset)
        for position, header in iter_batches(data, verify=False):
            if header.base_offset >= end:
                return batches
            batches.append(bytes(data[position : position + header.length]))
            offset = header.next_offset
    return batches


@bounded(DEADLINE_S * 4)
async def test_three_nodes_compact_a_compact_topic_alike(tmp_path: Path) -> None:
    nodes = []
    for index, batches in enumerate((5, 7, 11)):
        node_config = config(tmp_path, index)
        nodes.append(await Node.open(node_config, log_factory=SmallSegments(batches).open))
    channels: list[grpc.aio.Channel] = []
    try:
        await wait_until(lambda: all(len(n.members()) == 3 for n in nodes), "three members")
        await wait_until(lambda: leader_of(nodes, ("__cluster", 0)), "a metadata leader")
        admin = leader_of(nodes, ("__cluster", 0))
        assert admin is not None
        topic_config = pb.TopicConfig(
            partitions=1,
            replication_factor=3,
            cleanup_policy="compact",
            delete_retention_ms=0,
            min_cleanable_dirty_ratio=0.5,
        )
        request = pb.CreateTopicRequest(name=TOPIC, config=topic_config)
        await stub(admin, channels).CreateTopic(request, timeout=DEADLINE_S)
        await wait_until(lambda: leader_of(nodes, KEY), "a partition leader")
        leader = leader_of(nodes, KEY)
        assert leader is not None
        api = stub(leader, channels)
        for index in range(RECORDS):
            batch = encode_batch([b"value-%d" % index], keys=[b"key-%d" % (index % KEYS)])
            await api.Produce(
                pb.ProduceRequest(topic=TOPIC, partition=0, batches=[batch]), timeout=5
            )

        def applied_alike() -> bool:
            replicas = [node.host.get(KEY) for node in nodes]
            if any(r is None or r.compacting for r in replicas):
                return False
            done = {r.core.compacted_through for r in replicas}  # type: ignore[union-attr]
            ends = {r.core.high_watermark for r in replicas}  # type: ignore[union-attr]
            return len(done) == 1 and done != {-1} and len(ends) == 1

        def state() -> list[tuple[int, int, bool]]:
            replicas = [node.host.get(KEY) for node in nodes]
            return [(r.core.compacted_through, r.core.high_watermark, r.compacting)  # type: ignore[union-attr]
                    for r in replicas]  # fmt: skip

        for _ in range(20):  # a later command may apply while the fetches run: again
            await wait_until(applied_alike, "every replica to apply the same commands")
            before = state()
            served = [await _fetch_all(node, channels, before[0][1]) for node in nodes]
            if state() == before:
                break
        assert served[0] == served[1] == served[2]
        records = [
            (record.key, record.value)
            for batch in served[0]
            if not parse_header(batch).is_control
            for record in decode_records(batch)
        ]
        assert len(records) < RECORDS  # superseded records are gone
        newest = {b"key-%d" % (i % KEYS): b"value-%d" % i for i in range(RECORDS)}
        assert {key: value for key, value in records} == newest  # the newest survive
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)
