"""The connector on a Spark standalone cluster: executors in JVMs of their own, their
Python workers on this interpreter, reading from and writing to a live 3-node
Laminar cluster.

Rows are compared through explicit columns (key, value, topic, partition, offset,
timestamp, headers), whatever else the source's schema grows.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client, key_partition

from laminar.testing.processes import ProcessCluster, wait_for
from tests.spark.conftest import create_topic, fill_topic, wait_replicated
from tests.spark.test_reader import read, without_headers
from tests.spark.test_stream import (
    QUERY_TIMEOUT_S,
    add,
    new_topic,
    rows_of,
    run_available_now,
    run_some_batches,
    stream,
)
from tests.spark.test_writer import assert_batches_unique, servers_of
from tests.spark_cluster.conftest import EXECUTORS
from tests.spark_cluster.standalone import StandaloneSpark

pytestmark = pytest.mark.spark_cluster


def executor_processes(spark: Any, tasks: int) -> list[tuple[str, int | None]]:
    """(Python executable, pid of the executor JVM above it) of each of ``tasks``
    tasks. Defined inside, so that cloudpickle ships the function by value."""

    def where(_: object) -> tuple[str, int | None]:
        import os
        import sys

        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                if b"CoarseGrainedExecutorBackend" in file.read():
                    return sys.executable, pid
            with open(f"/proc/{pid}/stat") as file:
                stat = file.read()
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        return sys.executable, None

    rdd = spark.sparkContext.parallelize(range(tasks), tasks)
    result: list[tuple[str, int | None]] = rdd.map(where).collect()
    return result


def test_tasks_run_in_executor_jvms_on_this_interpreter(
    spark: Any, standalone: StandaloneSpark
) -> None:
    import os
    import sys

    assert spark.sparkContext.master == standalone.master_url
    context = spark.sparkContext._jsc.sc()

    def registered() -> bool:  # block managers: the driver's and one per executor
        return bool(context.getExecutorMemoryStatus().size() == EXECUTORS + 1)

    wait_for(registered, QUERY_TIMEOUT_S, "the executors")
    placed = executor_processes(spark, 8)
    assert {python for python, _ in placed} == {sys.executable}
    jvms = {jvm for _, jvm in placed}
    assert None not in jvms
    assert len(jvms) == EXECUTORS
    assert os.getpid() not in jvms


def test_batch_read_of_every_row(spark: Any, cluster: ProcessCluster) -> None:
    servers = servers_of(cluster)
    topic = "standalone-read"
    rows = fill_topic(servers, topic, 4, 20_000)
    assert read(spark, servers, subscribe=topic) == without_headers(rows)
    split = read(spark, servers, headers=True, subscribe=topic, minPartitions="10")
    assert split == rows


def test_batch_write_then_read_back(spark: Any, cluster: ProcessCluster) -> None:
    servers = servers_of(cluster)
    topic, partitions, count = "standalone-write", 3, 6_000
    with Client(servers) as client:
        create_topic(client, topic, partitions)
    df = spark.range(0, count, 1, 4).selectExpr(
        "CAST(concat('k', id % 500) AS BINARY) AS key",
        "CAST(concat('value-', id) AS BINARY) AS value",
    )
    writer = df.write.format("laminar").mode("append").option("servers", servers)
    writer.option("topic", topic).save()
    wait_replicated(servers, topic, partitions)
    got = read(spark, servers, subscribe=topic)
    expected = Counter((f"k{i % 500}".encode(), f"value-{i}".encode()) for i in range(count))
    assert Counter((key, value) for key, value, *_ in got) == expected
    assert all(partition == key_partition(key, partitions) for key, _, _, partition, *_ in got)
    with Client(servers) as client:
        assert assert_batches_unique(client, topic, partitions) > 0


def test_stream_restarts_from_its_checkpoint(
    spark: Any, cluster: ProcessCluster, tmp_path: Path
) -> None:
    """A continuous query into parquet, stopped after two micro-batches; more
    records; the query again from the same checkpoint: every record once."""
    servers = servers_of(cluster)
    topic, rows = new_topic(servers, "standalone", 2, 300)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    options = {"subscribe": topic, "startingOffsets": "earliest"}
    df = stream(spark, servers, maxOffsetsPerTrigger="100", **options)
    query = run_some_batches(df, checkpoint, output, "200 milliseconds", 2)
    first_batches = max(p.batchId for p in query.recentProgress)
    rows += add(servers, topic, 2, 200)
    again = run_available_now(stream(spark, servers, **options), checkpoint, output)
    assert min(p.batchId for p in again.recentProgress) > first_batches  # resumed
    assert rows_of(spark.read.parquet(str(output))) == sorted(rows, key=lambda r: (r[3], r[4]))
