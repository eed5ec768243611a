"""The offline reader through Spark, on the files of the shared cluster's nodes.

The live files are only read; every test that damages files works on a copy in
``tmp_path``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client, Producer

from laminar.records import encode_batch, parse_header, stamp
from laminar.segment.committed import read_committed
from laminar.testing.processes import ProcessCluster, wait_for
from tests.spark.conftest import KAFKA_COLUMNS, create_topic, high_watermarks, produce

TOPIC = "offline_events"
PARTITIONS = 2
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@dataclass(frozen=True)
class Written:
    servers: str
    data_dir: Path
    high_watermarks: dict[int, int]


@pytest.fixture(scope="module")
def written(cluster: ProcessCluster) -> Written:
    servers = ",".join(node.grpc for node in cluster.nodes)
    with Client(servers) as client:
        create_topic(client, TOPIC, PARTITIONS)
    with Producer(servers, linger_s=0.05) as producer:
        produce(producer, TOPIC, PARTITIONS, 300)
    with Client(servers) as client:
        # The leaders' (one replica's answer may trail them by a heartbeat, and node 0's
        # committed file must cover every record for the offline read to equal the live one).
        leaders = high_watermarks(client, TOPIC, PARTITIONS)
    data_dir = cluster.nodes[0].data_dir

    def covered() -> bool:
        return all(
            (read_committed(str(_partition_dir(data_dir, p))) or 0) >= leaders[p]
            for p in range(PARTITIONS)
        )

    wait_for(covered, 30, "the committed files of node 0 to cover what was produced")
    return Written(servers, data_dir, leaders)


def _partition_dir(data_dir: Path, partition: int, topic: str = TOPIC) -> Path:
    return data_dir / "partitions" / topic / str(partition)


def _rows(df: Any) -> list[tuple[object, ...]]:
    return sorted((tuple(row) for row in df.collect()), key=lambda row: (row[2], row[3], row[4]))


def _offline(spark: Any, path: Path, **options: str) -> Any:
    reader = spark.read.format("laminar").option("path", str(path))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_offline_read_equals_the_cluster_read(spark: Any, written: Written) -> None:
    live = _rows(
        spark.read.format("laminar")
        .option("servers", written.servers)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .load()
    )
    assert len(live) == 300
    offline_df = _offline(spark, written.data_dir, subscribe=TOPIC, includeHeaders="true")
    assert offline_df.columns == [name for name, _ in KAFKA_COLUMNS]
    offline = _rows(offline_df)
    assert offline == live
    assert {row[6] for row in offline} == {0}  # create time, every record
    # produce() gives every other record no headers: null, as in Kafka's source.
    assert sum(row[7] is None for row in offline) == 150
    one = _rows(_offline(spark, _partition_dir(written.data_dir, 1)))
    assert one == [row[:7] for row in live if row[3] == 1]


@pytest.fixture
def pushdown(spark: Any) -> Iterator[None]:
    spark.conf.set(PUSHDOWN, "true")
    try:
        yield
    finally:
        spark.conf.unset(PUSHDOWN)


def test_pushed_filters_prune_tasks(spark: Any, written: Written, pushdown: None) -> None:
    df = _offline(spark, written.data_dir, subscribe=TOPIC)
    assert df.rdd.getNumPartitions() == PARTITIONS  # one segment per partition
    narrowed = df.where("partition = 1 AND offset >= 10 AND offset < 20")
    assert narrowed.rdd.getNumPartitions() == 1
    assert [row.offset for row in narrowed.orderBy("offset").collect()] == list(range(10, 20))


def _copy(written: Written, tmp_path: Path, partition: int) -> Path:
    copy = _partition_dir(tmp_path / "node", partition)
    shutil.copytree(_partition_dir(written.data_dir, partition), copy)
    return copy


def _append_uncommitted(directory: Path) -> int:
    """Append a valid batch of 3 records after the copy's last batch (the committed
    file untouched); returns its base offset."""
    segment = sorted(directory.glob("*.log"))[-1]
    data = segment.read_bytes()
    position, last = 0, None
    while position < len(data):
        last = parse_header(data, position)
        position += last.length
    assert last is not None
    batch = encode_batch([b"u0", b"u1", b"u2"], timestamps_ms=1_700_000_999_000)
    head, payload = stamp(batch, last.next_offset, last.term)
    with open(segment, "ab") as file:
        file.write(bytes(head) + bytes(payload))
    return last.next_offset


def test_the_uncommitted_tail_only_on_request_and_a_torn_tail(
    spark: Any, written: Written, tmp_path: Path
) -> None:
    copy = _copy(written, tmp_path, 0)
    committed = read_committed(str(copy))
    assert committed is not None
    tail = _append_uncommitted(copy)
    assert tail >= committed
    default = [row.offset for row in _offline(spark, copy).collect()]
    assert max(default) < committed
    everything = _offline(spark, copy, includeUncommitted="true")
    values = {row.offset: row.value for row in everything.collect()}
    assert [values[tail + i] for i in range(3)] == [b"u0", b"u1", b"u2"]
    segment = sorted(copy.glob("*.log"))[-1]
    with open(segment, "r+b") as file:  # cut the new batch in two: a torn tail
        file.truncate(segment.stat().st_size - 10)
    torn = [row.offset for row in _offline(spark, copy, includeUncommitted="true").collect()]
    assert sorted(torn) == sorted(offset for offset in values if offset < tail)


def test_a_flipped_bit_fails_the_read_naming_file_and_offset(
    spark: Any, written: Written, tmp_path: Path
) -> None:
    copy = _copy(written, tmp_path, 1)
    segment = sorted(copy.glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    position = 0
    while (header := parse_header(data, position)).is_control:  # the leaders' no-ops
        position += header.length
    data[position + header.length - 1] ^= 0x10
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception) as caught:
        _offline(spark, copy).collect()
    message = str(caught.value)
    assert "CorruptSegmentError" in message or "corrupt batch" in message
    assert f"corrupt batch in {segment} at offset {header.base_offset} " in message
    assert f"(file position {position})" in message


def test_bad_options_fail_at_load(spark: Any, written: Written, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="unknown option 'servers'"):
        _offline(spark, written.data_dir, servers="localhost:1")
    with pytest.raises(Exception, match="neither a node's data directory"):
        _offline(spark, tmp_path).collect()
