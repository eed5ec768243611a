"""``ProduceMany``: several partitions' batches in one call, each partition accepted
or refused on its own, on three in-process nodes (memory logs, real gRPC)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from laminar.errors import InvalidInputError, NotLeaderError, RecordFormatError
from laminar.grpc_errors import error_from_detail, error_from_rpc
from laminar.records import encode_batch
from laminar.v1 import laminar_pb2 as pb
from tests.batches import columns_beyond_payload
from tests.server.test_list_offsets import run, start_cluster
from tests.server.test_node_inprocess import leader_of

TOPIC = "many"


def batch(*values: bytes) -> bytes:
    return encode_batch(list(values), timestamps_ms=1_700_000_000_000)


@run
async def test_each_partition_is_accepted_or_refused_on_its_own(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        await cluster.create_topic(TOPIC, 6, 1)
        node = cluster.nodes[0]
        led = [p for p in range(6) if leader_of(cluster.nodes, (TOPIC, p)) is node]
        other = [p for p in range(6) if p not in led]
        assert len(led) >= 2 and other, "placement spreads 6 partitions over 3 nodes"
        request = pb.ProduceManyRequest(
            partitions=[
                pb.PartitionBatches(
                    topic=TOPIC, partition=led[0], batches=[batch(b"a"), batch(b"b")]
                ),
                pb.PartitionBatches(topic=TOPIC, partition=other[0], batches=[batch(b"c")]),
                # All or none within a partition: a bad second batch refuses the first.
                pb.PartitionBatches(
                    topic=TOPIC, partition=led[1], batches=[batch(b"d"), columns_beyond_payload()]
                ),
                pb.PartitionBatches(topic=TOPIC, partition=6, batches=[batch(b"e")]),
            ],
        )
        response = await cluster.stub(node).ProduceMany(request, timeout=10)
        answers = list(response.partitions)
        assert [(a.topic, a.partition) for a in answers] == [
            (TOPIC, led[0]),
            (TOPIC, other[0]),
            (TOPIC, led[1]),
            (TOPIC, 6),
        ]
        assert not answers[0].HasField("error")
        assert len(answers[0].base_offsets) == 2
        assert answers[0].base_offsets[1] == answers[0].base_offsets[0] + 1
        redirect = error_from_detail(answers[1].error)
        assert isinstance(redirect, NotLeaderError)
        leader = leader_of(cluster.nodes, (TOPIC, other[0]))
        assert leader is not None and redirect.leader_address == leader.config.grpc
        assert isinstance(error_from_detail(answers[2].error), RecordFormatError)
        assert answers[3].error.code == pb.UNKNOWN_TOPIC_OR_PARTITION
        replica = node.host.get((TOPIC, led[1]))
        assert replica is not None and replica.core.end_offset == 1  # its no-op only
    finally:
        await cluster.close()


@run
async def test_a_request_that_is_wrong_as_a_whole_is_refused_whole(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path)
    try:
        await cluster.create_topic(TOPIC, 2, 1)
        twice = pb.PartitionBatches(topic=TOPIC, partition=0, batches=[batch(b"x")])
        for request in (
            pb.ProduceManyRequest(),
            pb.ProduceManyRequest(partitions=[twice, twice]),
            pb.ProduceManyRequest(partitions=[twice], acks=7),  # type: ignore[arg-type]
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await cluster.stubs[0].ProduceMany(request, timeout=5)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert isinstance(error_from_rpc(caught.value), InvalidInputError)
    finally:
        await cluster.close()
