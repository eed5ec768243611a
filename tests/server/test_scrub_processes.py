"""Bit rot under a running cluster of real node processes (issue 28, point 4).

Three nodes, one partition on all of them, small segments. One bit is flipped in
a sealed segment of two replicas while the nodes run: node1's scrubber finds its
own and fences the replica; node0 keeps serving its copy (its reads trust what it
wrote), so a consumer that prefers node0 gets a batch failing its checksum, reads
it from another replica and reports node0, which re-verifies and fences. The
consumer gets every record intact and no error. Every wait has a deadline; every
process is stopped in a ``finally``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from laminar_client import Client, Consumer, Producer

from laminar.records import HEADER_BYTES, iter_batches
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import CLIENT_TIMEOUT_S, SETTLE_S, wait_leader, wait_settled

TOPIC = "rot"
RECORDS = 400
SEGMENT_BYTES = 64 * 1024
NO_REOPEN = "storage_retry_ms = 600000\nstorage_retry_max_ms = 600000\n"


def node_config(root: Path, index: int, scrub_bytes_per_s: int) -> Path:
    path = root / f"node{index}.toml"
    path.write_text(
        f"[host]\nscrub_bytes_per_s = {scrub_bytes_per_s}\nscrub_pass_min_ms = 200\n"
        # The reopen of a damaged replica is another change's (quarantine, repair).
        + NO_REOPEN
        + f"[log]\nsegment_bytes_max = {SEGMENT_BYTES}\n"
    )
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(tmp_path)
    try:
        for index in range(3):
            scrub = 8 << 20 if index == 1 else 0  # only node1 scrubs
            config = node_config(tmp_path, index, scrub)
            args = ["--config", str(config), "--zone", f"z{index}"]
            node = cluster.add_node(bootstrap=index == 0, extra_args=args)
            cluster.wait_ready(node)
        wait_settled(cluster)
        yield cluster
    finally:
        cluster.close()


def segment_files(node: NodeProcess) -> list[Path]:
    return sorted((node.data_dir / "partitions" / TOPIC / "0").glob("*.log"))


def flip_payload(path: Path) -> None:
    """Flip a bit in the payload of the segment's second batch (the node runs on)."""
    (_, first), (position, second), *_ = iter_batches(path.read_bytes())
    assert position == first.length
    position += HEADER_BYTES + (second.length - HEADER_BYTES) // 2
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x10]))


def high_watermark(cluster: ProcessCluster, node: NodeProcess) -> int:
    request = pb.ListOffsetsRequest(topic=TOPIC, partitions=[0])
    answer = cluster.stub(node).ListOffsets(request, timeout=2).partitions[0]
    return -1 if answer.HasField("error") else answer.high_watermark


def logged(node: NodeProcess, *parts: str) -> bool:
    text = node.log_path.read_text(errors="replace")
    return any(all(part in line for part in parts) for line in text.splitlines())


def fenced(cluster: ProcessCluster, node: NodeProcess) -> list[str]:
    answer = cluster.stub(node).DescribeCluster(pb.DescribeClusterRequest(), timeout=2)
    return [f.reason for f in answer.fenced if (f.topic, f.partition) == (TOPIC, 0)]


def test_rot_is_found_by_the_scrubber_and_never_reaches_a_consumer(
    cluster: ProcessCluster,
) -> None:
    bootstrap = [n.grpc for n in cluster.nodes]
    with Client(bootstrap, timeout_s=CLIENT_TIMEOUT_S) as client:
        client.create_topic(TOPIC, 1, 3)
    wait_leader(cluster, TOPIC, 0)
    values = [b"%05d:" % i + bytes(1000) for i in range(RECORDS)]
    with Producer(bootstrap, linger_s=0.001, batch_bytes_max=16 * 1024) as producer:
        for value in values:
            producer.send(TOPIC, value, partition=0)
        producer.flush(CLIENT_TIMEOUT_S)
    # Every replica holds everything (control batches take offsets too).
    wait_for(
        lambda: (
            len({high_watermark(cluster, n) for n in cluster.nodes}) == 1
            and high_watermark(cluster, cluster.nodes[0]) >= RECORDS
        ),
        SETTLE_S,
        "every replica to hold every record",
    )
    node0, node1, node2 = cluster.nodes
    # Different sealed segments of node0 and node1: every batch keeps two good copies.
    victim0, victim1 = segment_files(node0)[1], segment_files(node1)[3]
    assert victim1 != segment_files(node1)[-1], "the victims must be sealed"
    flip_payload(victim0)
    flip_payload(victim1)

    # node1's scrubber finds its damage and takes its replica out of service.
    wait_for(
        lambda: logged(node1, "damage found replica=rot/0", "source=scrub", str(victim1)),
        SETTLE_S,
        "node1's scrubber to find the damage",
    )
    assert any("CorruptSegmentError" in reason for reason in fenced(cluster, node1))

    # node0 serves its rotten batch; the consumer reads it elsewhere and reports it.
    started_s = time.monotonic()
    with Consumer(bootstrap, client_zone="z0", fetch_bytes_max=64 * 1024) as consumer:
        consumer.assign([(TOPIC, 0)])
        got = []
        for record in consumer.records(timeout_s=CLIENT_TIMEOUT_S):
            got.append(record.value)
            if len(got) == RECORDS:
                break
        assert got == values
        assert consumer.counters["corrupt_batches"] >= 1
    assert time.monotonic() - started_s < CLIENT_TIMEOUT_S
    wait_for(
        lambda: logged(node0, "damage found replica=rot/0", "source=consumer report"),
        SETTLE_S,
        "node0 to confirm the reported damage",
    )
    assert fenced(cluster, node0)
    assert logged(node0, str(victim0))

    # The report is refused whole when it is malformed; an intact batch stays served.
    stub = cluster.stub(node2)

    def report(topic: str, offset: int) -> pb.ReportCorruptionResponse:
        request = pb.ReportCorruptionRequest(topic=topic, partition=0, offset=offset)
        return stub.ReportCorruption(request, timeout=5)

    assert report(TOPIC, 10).damaged is False
    for topic, offset, code in [
        (TOPIC, -1, grpc.StatusCode.INVALID_ARGUMENT),
        (TOPIC, RECORDS + 100, grpc.StatusCode.OUT_OF_RANGE),
        ("nope", 0, grpc.StatusCode.NOT_FOUND),
    ]:
        with pytest.raises(grpc.RpcError) as caught:
            report(topic, offset)
        assert caught.value.code() == code
    assert not fenced(cluster, node2)
