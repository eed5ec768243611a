"""df.write / df.writeStream .format("laminar") against the live 3-node cluster.

Each test writes to topics of its own (``writer-*``). The session's master is
``local[2,2]``: Spark retries a failed task once, which the failure test relies on.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client, key_partition

from laminar.records import decode_batch, iter_batches
from laminar.testing.processes import ProcessCluster
from tests.spark.conftest import create_topic, replica_high_watermarks

UTC = datetime.UTC


def servers_of(cluster: ProcessCluster) -> str:
    return ",".join(node.grpc for node in cluster.nodes)


def high_watermarks(client: Client, topic: str, partitions: int) -> dict[int, int]:
    """The highest high watermark any node reports per partition: the leader's
    (``client.list_offsets`` asks one replica, which may trail it by a heartbeat)."""
    found = dict.fromkeys(range(partitions), 0)
    for answer in replica_high_watermarks(client, topic, partitions):
        for partition, high_watermark in answer.items():
            found[partition] = max(found[partition], high_watermark)
    return found


def read_log(client: Client, topic: str, partition: int, end: int) -> list[Any]:
    """Every data batch of the partition below ``end``, decoded (control batches
    skipped); waits for a replica that trails the leader."""
    batches: list[Any] = []
    offset = 0
    deadline = time.monotonic() + 30
    while offset < end:
        data = client.fetch(topic, partition, offset).batches
        for position, header in iter_batches(data):
            if header.next_offset > offset and not header.is_control:
                batches.append(decode_batch(data, position))
            offset = max(offset, header.next_offset)
        if not data:
            assert time.monotonic() < deadline, f"{topic}-{partition} stuck at {offset} < {end}"
            time.sleep(0.05)
    return batches


def read_values(client: Client, topic: str, partitions: int) -> list[tuple[int, bytes | None]]:
    """(partition, value) of every record below the leaders' high watermarks."""
    out: list[tuple[int, bytes | None]] = []
    for partition, end in high_watermarks(client, topic, partitions).items():
        for batch in read_log(client, topic, partition, end):
            out.extend((partition, value) for value in batch.values)
    return out


def assert_batches_unique(client: Client, topic: str, partitions: int) -> int:
    """No (producer, sequence) twice in the log: nothing was written twice. The
    number of batches."""
    seen: Counter[tuple[int, int]] = Counter()
    for partition, end in high_watermarks(client, topic, partitions).items():
        for batch in read_log(client, topic, partition, end):
            seen[(partition, batch.header.producer_id, batch.header.base_sequence)] += 1
    assert [key for key, n in seen.items() if n > 1] == []
    return len(seen)


@pytest.fixture(scope="module")
def servers(cluster: ProcessCluster) -> str:
    return servers_of(cluster)


def test_round_trip_keys_headers_partitions_timestamps(spark: Any, servers: str) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    topic = "writer-round-trip"
    with Client(servers) as client:
        create_topic(client, topic, 3)
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
            StructField("partition", IntegerType()),
            StructField("timestamp", TimestampType()),
        ]
    )
    base = datetime.datetime(2024, 5, 1, tzinfo=UTC)
    rows = []
    for i in range(300):
        # (key, value) identifies a row: tombstones (null values) have keys of their own.
        value = None if i % 11 == 5 else f"v{i}".encode() * (1 + i % 4)
        key = f"t{i}".encode() if value is None else None if i % 7 == 0 else f"k{i % 40}".encode()
        headers = [("n", str(i).encode()), ("e", b"")] if i % 3 == 0 else []
        partition = i % 3 if i % 5 == 0 else None
        stamp = None if i % 13 == 0 else base + datetime.timedelta(milliseconds=i * 1001)
        rows.append((key, value, headers, partition, stamp))
    before_ms = int(time.time() * 1000)
    df = spark.createDataFrame(rows, schema).repartition(2)
    (
        df.write.format("laminar")
        .option("servers", servers)
        .option("topic", topic)
        .option("batchRecordsMax", "16")
        .mode("append")
        .save()
    )
    after_ms = int(time.time() * 1000)
    read = (
        spark.read.format("laminar")
        .option("servers", servers)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .selectExpr("key", "value", "headers", "partition", "unix_millis(timestamp) AS ts")
        .collect()
    )
    got = Counter()
    for row in read:
        key = None if row.key is None else bytes(row.key)
        value = None if row.value is None else bytes(row.value)
        headers = tuple((h.key, bytes(h.value)) for h in row.headers)
        got[(key, value, headers)] += 1
        source = next(r for r in rows if r[0] == key and r[1] == value)
        if source[3] is not None:
            assert row.partition == source[3]
        elif key is not None:
            assert row.partition == key_partition(key, 3)
        if source[4] is None:  # the write's time, drawn on the driver
            assert before_ms - 60_000 <= row.ts <= after_ms
        else:
            assert row.ts == int(source[4].timestamp() * 1000)
    assert got == Counter((r[0], r[1], tuple(r[2])) for r in rows)


def test_topic_column_and_string_columns(spark: Any, servers: str) -> None:
    topics = ("writer-col-a", "writer-col-b")
    with Client(servers) as client:
        for topic in topics:
            create_topic(client, topic, 2)
    df = spark.range(0, 400, numPartitions=2).selectExpr(
        "IF(id % 2 = 0, 'writer-col-a', 'writer-col-b') AS topic",
        "CAST(id AS STRING) AS key",
        "CONCAT('value-', id) AS value",
    )
    df.write.format("laminar").option("servers", servers).mode("append").save()
    with Client(servers) as client:
        for parity, topic in enumerate(topics):
            values = read_values(client, topic, 2)
            expected = {
                f"value-{i}".encode(): key_partition(str(i).encode(), 2)
                for i in range(parity, 400, 2)
            }
            assert sorted(v for _, v in values) == sorted(expected)
            assert all(partition == expected[value] for partition, value in values)


def test_a_retried_task_leaves_each_row_once(spark: Any, servers: str, tmp_path: Path) -> None:
    """Task 0 fails (first attempt only) after its writer produced several batches
    per partition; Spark retries it; every row is in the topic exactly once."""
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    topic = "writer-retry"
    partitions = 3
    rows = 6000  # two tasks of 3000 rows; task 0 fails at its row 2500
    with Client(servers) as client:
        create_topic(client, topic, partitions)
    marker = tmp_path / "failed.json"

    def value_of(i: int) -> bytes:
        # 200 bytes: the UDF worker's 64 KiB output buffer fills and flushes, so the
        # writer gets rows while the failing row waits.
        return f"row-{i}".encode().ljust(200, b".")

    def tag(i: int) -> bytes:
        # Self-contained: the UDF runs in a Python worker that cannot import tests.
        context = TaskContext.get()
        if context.partitionId() == 0 and context.attemptNumber() == 0 and i == 2500:
            import time

            from laminar_client import Client

            with Client(servers) as probe:
                deadline = time.monotonic() + 30
                written = 0
                # Task 1 writes 3000 rows; this task's writer has sent (and the leaders
                # committed) at least 1500 of its rows: > 5 batches per partition.
                while written < 4500 and time.monotonic() < deadline:
                    offsets = probe.list_offsets(topic, list(range(partitions)))
                    written = sum(o.high_watermark for o in offsets.values())
                    time.sleep(0.05)
            marker.write_text(json.dumps({"written": written}))
            raise RuntimeError("injected failure after some rows were written")
        return value_of(i)

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        df = spark.range(0, rows, numPartitions=2).select(
            col("id").cast("string").alias("key"), udf(tag, "binary")("id").alias("value")
        )
        (
            df.write.format("laminar")
            .option("servers", servers)
            .option("topic", topic)
            .option("batchRecordsMax", "50")
            .mode("append")
            .save()
        )
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    failed = json.loads(marker.read_text())
    assert failed["written"] >= 4500
    with Client(servers) as client:
        values = read_values(client, topic, partitions)
        assert Counter(v for _, v in values) == Counter(value_of(i) for i in range(rows))
        assert_batches_unique(client, topic, partitions)


def test_a_replayed_micro_batch_is_not_written_twice(
    spark: Any, servers: str, tmp_path: Path
) -> None:
    """Four micro-batches (one file each); the last one's commit is deleted, so the
    restarted query runs it again: its records are recognised, not duplicated."""
    topic = "writer-stream"
    with Client(servers) as client:
        create_topic(client, topic, 2)
    source = tmp_path / "in"
    source.mkdir()
    lines = {}
    for f in range(4):
        text = [f"file{f}-line{i}" for i in range(150)]
        lines[f] = text
        path = source / f"part-{f}.txt"
        path.write_text("\n".join(text) + "\n")
        stamp = 1_700_000_000 + f  # the file source takes files oldest first
        os.utime(path, (stamp, stamp))
    checkpoint = tmp_path / "checkpoint"

    def run() -> Any:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", "1")
            .load(str(source))
            .writeStream.format("laminar")
            .option("servers", servers)
            .option("topic", topic)
            .option("batchRecordsMax", "10")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return query

    first = run()
    assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1, 2, 3]
    for name in ("3", ".3.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    second = run()
    replayed = [p for p in second.recentProgress if p["numInputRows"]]
    assert [(p["batchId"], p["numInputRows"]) for p in replayed] == [(3, 150)]
    with Client(servers) as client:
        values = read_values(client, topic, 2)
        expected = [line.encode() for f in range(4) for line in lines[f]]
        assert Counter(v for _, v in values) == Counter(expected)
        assert_batches_unique(client, topic, 2)


def test_bad_writes_fail_before_writing(spark: Any, servers: str) -> None:
    topic = "writer-bad"
    with Client(servers) as client:
        create_topic(client, topic, 2)
    df = spark.range(0, 10).selectExpr(
        "id", "CAST(id AS STRING) AS value", "CAST(id AS INT) AS part"
    )

    def write(frame: Any, mode: str = "append", **options: str) -> None:
        writer = frame.write.format("laminar").mode(mode)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()

    cases = [
        (
            df,
            "append",
            {"servers": servers, "topic": topic, "subscribe": "x"},
            "unknown option 'subscribe'",
        ),
        (df, "append", {"topic": topic}, "option 'servers' is required"),
        (df, "append", {"servers": servers}, "give the option 'topic' or a 'topic' column"),
        (
            df,
            "append",
            {"servers": servers, "topic": "writer-missing"},
            "no topic 'writer-missing'",
        ),
        (df, "overwrite", {"servers": servers, "topic": topic}, "overwrite"),
        (
            df,
            "append",
            {"servers": servers, "topic": topic, "acks": "1"},
            "option 'acks' must be 'all'",
        ),
        (df, "append", {"servers": servers, "topic": topic, "batchBytesMax": "5"}, "batchBytesMax"),
        (
            df.selectExpr("id AS value"),
            "append",
            {"servers": servers, "topic": topic},
            "column 'value' must be binary or string, got bigint",
        ),
        (
            df.selectExpr("value", "5 AS partition"),
            "append",
            {"servers": servers, "topic": topic},
            "partition 5 is not in topic 'writer-bad'",
        ),
    ]
    for frame, mode, options, message in cases:
        with pytest.raises(Exception, match=message):
            write(frame, mode, **options)
    with Client(servers) as client:
        assert read_values(client, topic, 2) == []
