"""spark.readStream.format("laminar") against the live 3-node cluster.

Each test has topics of its own (``stream-*``). Queries run with
``Trigger.AvailableNow`` where they can (they end by themselves), and every wait
has a deadline.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client, Producer

from laminar.testing.processes import ProcessCluster, wait_for
from tests.spark.conftest import (
    KAFKA_COLUMNS,
    create_topic,
    fill_topic,
    produce,
    wait_replicated,
)

COLUMNS = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts"]
QUERY_TIMEOUT_S = 120
_names = itertools.count()


@pytest.fixture(scope="module")
def servers(cluster: ProcessCluster) -> str:
    return ",".join(node.grpc for node in cluster.nodes)


def new_topic(servers: str, prefix: str, partitions: int, count: int) -> tuple[str, list[Any]]:
    """A fresh topic with ``count`` records; returns its name and rows as read."""
    name = f"stream-{prefix}-{next(_names)}"
    return name, [r[:6] for r in fill_topic(servers, name, partitions, count)]


def add(servers: str, topic: str, partitions: int, count: int) -> list[Any]:
    """``count`` more records, once every replica has them; rows without headers."""
    with Producer(servers, linger_s=0.02) as producer:
        rows = produce(producer, topic, partitions, count)
    wait_replicated(servers, topic, partitions, rows)
    return [r[:6] for r in rows]


def stream(spark: Any, servers: str, **options: str) -> Any:
    reader = spark.readStream.format("laminar").option("servers", servers)
    return reader.options(**options).load().selectExpr(*COLUMNS)


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    out = [
        (
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            r.topic,
            r.partition,
            r.offset,
            r.ts,
        )
        for r in df.collect()
    ]
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def start_into_parquet(df: Any, checkpoint: Path, output: Path, **trigger: Any) -> Any:
    """``df`` streamed into parquet (an exactly-once sink) with ``trigger``; started."""
    writer = df.writeStream.format("parquet").option("path", str(output))
    return writer.option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()


def run_available_now(df: Any, checkpoint: Path, output: Path) -> Any:
    """One ``Trigger.AvailableNow`` run into parquet."""
    query = start_into_parquet(df, checkpoint, output, availableNow=True)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not end"
    assert query.exception() is None
    return query


def run_some_batches(df: Any, checkpoint: Path, output: Path, trigger: str, batches: int) -> Any:
    """A continuous query into parquet, stopped once ``batches`` micro-batches read
    something."""
    query = start_into_parquet(df, checkpoint, output, processingTime=trigger)
    try:
        wait_for(
            lambda: len(batch_sizes(query)) >= batches, QUERY_TIMEOUT_S, f"{batches} micro-batches"
        )
    finally:
        query.stop()
    assert query.exception() is None
    return query


def batch_sizes(query: Any) -> list[tuple[int, int]]:
    """``(offsets, rows)`` of each micro-batch that read anything, in batch order.
    Offsets count control batches too (a partition's first offsets may be one), so
    ``maxOffsetsPerTrigger`` bounds offsets, as in Spark's Kafka source."""
    sizes = {}
    for progress in query.recentProgress:
        source = progress.sources[0]
        start = json.loads(source.startOffset or "null") or {}
        end = json.loads(source.endOffset or "null") or {}
        offsets = sum(
            offset - start.get(topic, {}).get(partition, 0)
            for topic, partitions in end.items()
            for partition, offset in partitions.items()
        )
        sizes[progress.batchId] = (offsets, progress.numInputRows)
    return [sizes[b] for b in sorted(sizes) if sizes[b] != (0, 0)]


def test_available_now_reads_exactly_the_produced_rows(
    spark: Any, servers: str, tmp_path: Path
) -> None:
    topic, produced = new_topic(servers, "all", 3, 90)
    df = stream(spark, servers, subscribe=topic, startingOffsets="earliest")
    query = run_available_now(df, tmp_path / "checkpoint", tmp_path / "out")
    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == produced
    # The end is past every record (a control batch, e.g. a new leader's, may follow
    # them) and is what reportLatestOffset showed: the high watermarks at the start.
    source = query.recentProgress[-1].sources[0]
    end = json.loads(source.endOffset)[topic]
    assert all(end[str(p)] > max(r[4] for r in produced if r[3] == p) for p in range(3))
    assert json.loads(source.latestOffset) == {topic: end}


def test_a_stream_has_kafkas_columns(spark: Any, servers: str, tmp_path: Path) -> None:
    """``select *`` of a stream: Kafka's columns in Kafka's order, ``timestampType``
    0 and null headers for a record without any."""
    topic, produced = new_topic(servers, "columns", 2, 20)
    df = (
        spark.readStream.format("laminar")
        .option("kafka.bootstrap.servers", servers)
        .options(subscribe=topic, startingOffsets="earliest", includeHeaders="true")
        .load()
    )
    run_available_now(df, tmp_path / "checkpoint", tmp_path / "out")
    written = spark.read.parquet(str(tmp_path / "out"))
    assert written.columns == [name for name, _ in KAFKA_COLUMNS]
    rows = written.collect()
    assert len(rows) == len(produced)
    assert {row.timestampType for row in rows} == {0}
    assert sum(row.headers is None for row in rows) == 10  # produce(): every other one


def test_max_offsets_per_trigger_batches(spark: Any, servers: str, tmp_path: Path) -> None:
    topic, produced = new_topic(servers, "limited", 3, 90)
    df = stream(
        spark, servers, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20"
    )
    query = run_available_now(df, tmp_path / "checkpoint", tmp_path / "out")
    sizes = batch_sizes(query)
    offsets = [size for size, _ in sizes]
    assert sum(offsets) >= 90
    assert offsets == [20] * (len(offsets) - 1) + [sum(offsets) - 20 * (len(offsets) - 1)]
    assert 0 < offsets[-1] <= 20
    assert sum(rows for _, rows in sizes) == 90
    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == produced


def test_restart_from_checkpoint_reads_every_record_once(
    spark: Any, servers: str, tmp_path: Path
) -> None:
    """A continuous query stopped after some batches, more records (and a new topic
    matching the pattern, read from its earliest offset), then a restart from the
    same checkpoint: the output holds every record exactly once."""
    first, rows = new_topic(servers, "restart", 2, 60)
    pattern = f"{first}(-added)?"  # matches no other test's topic
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    options = {"subscribePattern": pattern, "startingOffsets": "earliest"}
    df = stream(spark, servers, maxOffsetsPerTrigger="15", **options)
    query = run_some_batches(df, checkpoint, output, "100 milliseconds", 2)
    sizes = batch_sizes(query)
    assert len(sizes) >= 2
    assert all(offsets <= 15 and rows <= offsets for offsets, rows in sizes)
    rows += add(servers, first, 2, 20)
    added = f"{first}-added"
    with Client(servers) as client:
        create_topic(client, added, 1)
    rows += add(servers, added, 1, 10)
    run_available_now(stream(spark, servers, **options), checkpoint, output)
    expected = sorted(rows, key=lambda r: (r[2], r[3], r[4]))
    assert rows_of(spark.read.parquet(str(output))) == expected


def test_starting_offsets_default_to_latest(spark: Any, servers: str, tmp_path: Path) -> None:
    topic, _ = new_topic(servers, "latest", 1, 10)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    run_available_now(stream(spark, servers, subscribe=topic), checkpoint, output)
    later = add(servers, topic, 1, 5)
    run_available_now(stream(spark, servers, subscribe=topic), checkpoint, output)
    assert rows_of(spark.read.parquet(str(output))) == later


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bogus": "1"}, "unknown option 'bogus'"),
        ({"endingOffsets": "latest"}, "option 'endingOffsets' is not allowed for a streaming"),
        ({"maxTriggerDelay": "soon"}, "option 'maxTriggerDelay' must be a duration"),
        ({"maxOffsetsPerTrigger": "-5"}, "option 'maxOffsetsPerTrigger' must be an integer >= 1"),
    ],
)
def test_bad_options_name_the_option(
    spark: Any, servers: str, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        df = stream(spark, servers, subscribe="stream-none", **options)
        query = df.writeStream.format("memory").queryName(f"bad{next(_names)}").start()
        try:
            query.awaitTermination(QUERY_TIMEOUT_S)
        finally:
            query.stop()


def test_a_running_stream_reads_added_partitions_at_the_next_trigger(
    spark: Any, servers: str, tmp_path: Path
) -> None:
    """``add-partitions`` under a running query: the next micro-batch's
    ``latestOffset`` takes fresh metadata, so the new partitions are read from their
    earliest offset, and the output holds every record once."""
    topic, rows = new_topic(servers, "grow", 2, 20)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    df = stream(spark, servers, subscribe=topic, startingOffsets="earliest")
    query = start_into_parquet(df, checkpoint, output, processingTime="200 milliseconds")
    try:
        wait_for(
            lambda: sum(n for _, n in batch_sizes(query)) >= 20, QUERY_TIMEOUT_S, "the first rows"
        )
        with Client(servers) as client:
            assert client.create_partitions(topic, 4).previous == 2
            wait_for(
                lambda: all(
                    p.leader for p in client.metadata(refresh=True).topic(topic).partitions
                ),
                QUERY_TIMEOUT_S,
                "leaders of the new partitions",
            )
        rows += add(servers, topic, 4, 20)  # records on partitions 0-3
        wait_for(
            lambda: sum(n for _, n in batch_sizes(query)) >= 40,
            QUERY_TIMEOUT_S,
            "the rows of the new partitions",
        )
    finally:
        query.stop()
    assert query.exception() is None
    written = rows_of(spark.read.parquet(str(output)))
    assert {r[3] for r in written} == {0, 1, 2, 3}
    assert written == sorted(rows, key=lambda r: (r[2], r[3], r[4]))
