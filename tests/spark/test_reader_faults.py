"""The batch reader when replicas die and retention deletes data, on a 3-node
cluster of this module's own (the shared one stays intact): small segments and a
fast retention check, so that the log start really moves."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from laminar_client import Client
from laminar_client.client import FetchResult
from laminar_spark.options import parse_options
from laminar_spark.planner import DataLossError, OffsetRange, plan
from laminar_spark.reader import read_range

from laminar.records import encode_batch
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import wait_settled
from tests.spark.conftest import create_topic

SEGMENT_BYTES = 64 * 1024
NODE_CONFIG = f"""
[host]
retention_check_ms = 100
[log]
segment_bytes_max = {SEGMENT_BYTES}
"""


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("reader-faults")
    config = root / "node.toml"
    config.write_text(NODE_CONFIG)
    cluster = ProcessCluster(root)
    try:
        first = cluster.add_node(bootstrap=True, extra_args=["--config", str(config)])
        cluster.wait_ready(first)
        for _ in range(2):
            cluster.add_node(extra_args=["--config", str(config)])
        for node in cluster.nodes:
            cluster.wait_ready(node)
        wait_settled(cluster)
        yield cluster
    finally:
        cluster.close()


def settled(cluster: ProcessCluster) -> None:
    """``wait_settled``, saying what every node sees when it times out."""
    try:
        wait_settled(cluster, 60)
    except TimeoutError:
        for node in cluster.nodes:
            if node.running:
                answer = cluster.stub(node).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
                print(f"node{node.index}:", answer)
        raise


def servers(cluster: ProcessCluster) -> str:
    return ",".join(node.grpc for node in cluster.nodes)


def write(
    client: Client, topic: str, batches: int, per_batch: int, value_bytes: int
) -> tuple[list[bytes], int]:
    """Append ``batches`` batches of ``per_batch`` distinct values; the values in
    offset order (this is the partition's only writer, and nothing else is in it
    but the leader's control batches, which readers skip), and the offset after
    the last (committed: acks=all)."""
    written: list[bytes] = []
    end = 0
    for b in range(batches):
        values = [f"{b:06d}-{i:05d}-".encode().ljust(value_bytes, b"x") for i in range(per_batch)]
        [base] = client.produce(topic, 0, encode_batch(values, timestamps_ms=1_700_000_000_000 + b))
        written += values
        end = base + per_batch
    return written, end


def values_of(batches: Iterator[Any]) -> tuple[list[int], list[bytes]]:
    offsets: list[int] = []
    values: list[bytes] = []
    for batch in batches:
        offsets += batch.column("offset").to_pylist()
        values += batch.column("value").to_pylist()
    return offsets, values


def replica_offsets(cluster: ProcessCluster, topic: str) -> list[tuple[int, int]]:
    """Each running replica's log start offset and high watermark."""
    found = []
    for node in cluster.nodes:
        if node.running:
            request = pb.ListOffsetsRequest(topic=topic, partitions=[0])
            answer = cluster.stub(node).ListOffsets(request, timeout=5).partitions[0]
            found.append((answer.log_start_offset, answer.high_watermark))
    return found


def log_starts(cluster: ProcessCluster, topic: str) -> list[int]:
    return [start for start, _ in replica_offsets(cluster, topic)]


def wait_known_everywhere(cluster: ProcessCluster, topic: str, end: int) -> None:
    """Until every replica's high watermark reaches ``end``, so that a plan's
    ``latest`` is ``end`` whichever replica answers."""
    wait_for(
        lambda: all(high >= end for _, high in replica_offsets(cluster, topic)),
        30,
        f"every replica of {topic}-0 to know offset {end - 1} committed",
    )


# ----------------------------------------------------------------- retention


def test_fail_on_data_loss_both_ways_after_retention(
    faulty: ProcessCluster, spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention moves the log start past offset 0; a read from 0 fails naming the
    partition and the missing offsets, or with failOnDataLoss=false returns what is
    left and logs the skip."""
    address = servers(faulty)
    with Client(address) as client:
        client.create_topic("retained", 1, 3, retention_bytes=2 * SEGMENT_BYTES)
        wait_for(
            lambda: client.metadata(refresh=True).topics["retained"].partitions[0].leader,
            30,
            "retained-0 to have a leader",
        )
        written, high = write(client, "retained", 60, 20, 400)  # ~500 KB: 8 segments
        wait_for(lambda: min(log_starts(faulty, "retained")) > 0, 30, "retention to run")
        wait_known_everywhere(faulty, "retained", high)
    reader = (
        spark.read.format("laminar")
        .option("servers", address)
        .option("subscribe", "retained")
        .option("startingOffsets", json.dumps({"retained": {"0": 0}}))
    )
    with pytest.raises(Exception, match=r"retained-0: offsets \[0, \d+\) are no longer available"):
        reader.load().collect()
    rows = reader.option("failOnDataLoss", "false").load().select("offset", "value").collect()
    offsets = [r.offset for r in rows]
    assert min(offsets) > 0 and max(offsets) < high
    by_offset = dict(zip(offsets, [bytes(r.value) for r in rows], strict=True))
    kept = [by_offset[o] for o in sorted(by_offset)]
    assert kept == written[len(written) - len(kept) :]  # the newest, none missing, in order
    # The skip is logged where the plan is made (the driver's planning worker,
    # whose log Spark keeps; here the planner is called directly to see it).
    options = parse_options(
        {
            "servers": address,
            "subscribe": "retained",
            "startingOffsets": json.dumps({"retained": {"0": 0}}),
            "failOnDataLoss": "false",
        }
    )
    with Client(address) as client, caplog.at_level(logging.WARNING, logger="laminar_spark"):
        tasks = plan(options, client)
    assert tasks[0].start > 0
    assert f"retained-0: {tasks[0].start} offsets [0, {tasks[0].start})" in caplog.text


def test_data_deleted_while_a_task_reads(faulty: ProcessCluster) -> None:
    """Planned before retention deletes the start of its range: a task fails naming
    what went (failOnDataLoss), or skips to the new log start and reads the rest."""
    address = servers(faulty)
    with Client(address) as client:
        client.create_topic("shrinking", 1, 3, retention_bytes=2 * SEGMENT_BYTES)
        wait_for(
            lambda: client.metadata(refresh=True).topics["shrinking"].partitions[0].leader,
            30,
            "shrinking-0 to have a leader",
        )
        written, end = write(client, "shrinking", 40, 20, 400)  # ~8 KB batches, 8 a segment
        wait_for(lambda: min(log_starts(faulty, "shrinking")) > 0, 30, "retention to run")
        task = OffsetRange("shrinking", 0, max(log_starts(faulty, "shrinking")), end)
        write(client, "shrinking", 12, 20, 400)  # deletes a segment or two more
        wait_for(
            lambda: min(log_starts(faulty, "shrinking")) > task.start,
            30,
            "retention to delete the start of the planned range",
        )
        low = max(log_starts(faulty, "shrinking"))
        assert low < task.end, "the sizes above should leave part of the range"
        with pytest.raises(
            DataLossError, match=rf"shrinking-0: offsets \[{task.start}, \d+\) were deleted"
        ):
            list(read_range(client, task))
        offsets, values = values_of(read_range(client, task, fail_on_data_loss=False))
    assert task.start < offsets[0] and offsets[-1] == task.end - 1
    first = written.index(values[0])
    assert values == written[first:]  # the rest of the planned range, in order


# ----------------------------------------------------------------- a replica dies


class Recording:
    """A Client whose fetches record the node that served them, and which runs
    ``on_fetch`` before each."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.served_by: list[str] = []
        self.on_fetch: Any = None

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int) -> FetchResult:
        if self.on_fetch is not None:
            self.on_fetch(offset)
        result = self.client.fetch(topic, partition, offset, max_bytes=max_bytes)
        self.served_by.append(result.served_by)
        return result

    def list_offsets(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.list_offsets(*args, **kwargs)


def node_named(cluster: ProcessCluster, node_id: str) -> NodeProcess:
    return next(node for node in cluster.nodes if f"node{node.index}" == node_id)


def test_a_replica_killed_mid_read_loses_and_repeats_nothing(faulty: ProcessCluster) -> None:
    """Small fetches; after the fifth, the node that served the last one is killed.
    The read moves to another replica at once and yields every record once."""
    address = servers(faulty)
    with Client(address) as client:
        create_topic(client, "killed", 1)
        written, high = write(client, "killed", 40, 100, 100)
        recording = Recording(client)
        killed: list[NodeProcess] = []
        kill_at_s: list[float] = []

        def kill_after_five(offset: int) -> None:
            if len(recording.served_by) == 5 and not killed:
                node = node_named(faulty, recording.served_by[-1])
                faulty.kill(node)
                killed.append(node)
                kill_at_s.append(time.monotonic())

        recording.on_fetch = kill_after_five
        try:
            task = OffsetRange("killed", 0, 0, high)
            offsets, values = values_of(
                read_range(recording, task, fetch_bytes=16 * 1024)  # type: ignore[arg-type]
            )
            elapsed_s = time.monotonic() - kill_at_s[0]
        finally:
            for node in killed:
                faulty.start(node)
                faulty.wait_ready(node)
            settled(faulty)  # the next test starts on a whole, settled cluster
    assert killed, "the read ended before the kill"
    assert values == written
    assert offsets == sorted(set(offsets))  # none twice, in order
    dead = f"node{killed[0].index}"
    assert dead in recording.served_by[:5] and dead not in recording.served_by[5:]
    assert len(recording.served_by) > 10  # most of the read came after the kill
    assert elapsed_s < 10, f"the rest of the read took {elapsed_s:.1f} s"


def test_spark_read_while_a_node_dies(faulty: ProcessCluster, spark: Any) -> None:
    """A Spark job of many tasks; a node is killed once some have finished. The job
    returns exactly the records written."""
    address = servers(faulty)
    with Client(address) as client:
        create_topic(client, "spark-killed", 1)
        written, end = write(client, "spark-killed", 50, 400, 100)
        wait_known_everywhere(faulty, "spark-killed", end)
    tracker = spark.sparkContext.statusTracker()
    result: dict[str, Any] = {}

    def job() -> None:
        try:
            df = (
                spark.read.format("laminar")
                .option("servers", address)
                .option("subscribe", "spark-killed")
                .option("maxRecordsPerPartition", "500")
                .load()
            )
            result["rows"] = df.select("offset", "value").collect()
        except Exception as error:  # reported by the assertion below
            result["error"] = error

    def tasks_done() -> bool:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        return any(s is not None and s.numCompletedTasks >= 4 for s in stages)

    spark.sparkContext.setJobGroup("reader-faults", "read while a node dies")
    thread = threading.Thread(target=job)
    thread.start()
    victim = faulty.nodes[1]
    try:
        wait_for(lambda: tasks_done() or not thread.is_alive(), 60, "the read to be under way")
        still_running = thread.is_alive()
        faulty.kill(victim)
        thread.join(120)
    finally:
        faulty.start(victim)
        faulty.wait_ready(victim)
        settled(faulty)
    assert still_running, "the job finished before the kill"
    assert "error" not in result, result.get("error")
    rows = sorted(result["rows"], key=lambda r: r.offset)
    assert [bytes(r.value) for r in rows] == written
    assert len({r.offset for r in rows}) == len(rows)
