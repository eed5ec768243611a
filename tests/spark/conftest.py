"""One local SparkSession and one real 3-node cluster for the whole directory.

The directory is skipped when pyspark, pyarrow or java is missing.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs java", allow_module_level=True)

import grpc
from laminar_client import Client, Producer

from laminar.testing.processes import ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server.test_cluster import start_cluster

CLIENTS = Path(__file__).resolve().parents[2] / "clients"
BASE_MS = 1_700_000_000_000
KAFKA_COLUMNS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
    ("headers", "array<struct<key:string,value:binary>>"),
]
"""Spark's Kafka source's columns with ``includeHeaders=true``, in its order
(``KafkaRecordToRowConverter.kafkaSchema``): every read mode's too."""


@dataclass(frozen=True)
class Produced:
    """What the fixture wrote: ``rows`` as the reader returns them (sorted)."""

    servers: str
    rows: dict[str, list[tuple[object, ...]]]


def create_topic(client: Client, name: str, partitions: int) -> None:
    client.create_topic(name, partitions, 3)

    def led() -> bool:
        topic = client.metadata(refresh=True).topics.get(name)
        return topic is not None and all(p.leader for p in topic.partitions)

    wait_for(led, 30, f"every partition of {name} to have a leader")


def high_watermarks(client: Client, topic: str, partitions: int) -> dict[int, int]:
    """The highest high watermark any node reports per partition: the leader's
    (``client.list_offsets`` asks one replica, which may trail it by a heartbeat)."""
    request = pb.ListOffsetsRequest(topic=topic, partitions=list(range(partitions)))
    found = dict.fromkeys(range(partitions), 0)
    for address in [m.grpc_address for m in client.metadata().members.values() if m.live]:
        with grpc.insecure_channel(address) as channel:
            stub = laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]
            for answer in stub.ListOffsets(request, timeout=5).partitions:
                if not answer.HasField("error") or not answer.error.code:
                    found[answer.partition] = max(found[answer.partition], answer.high_watermark)
    return found


def produce(
    producer: Producer, topic: str, partitions: int, count: int
) -> list[tuple[object, ...]]:
    futures = []
    for i in range(count):
        key = None if i % 5 == 0 else f"k{i}".encode()
        value = None if i % 17 == 3 else f"value-{topic}-{i}".encode() * (1 + i % 3)
        headers = [("h", f"{i}".encode()), ("n", b"")] if i % 2 else []
        stamp = BASE_MS + i * 1000
        future = producer.send(
            topic, value, key=key, partition=i % partitions, headers=headers, timestamp_ms=stamp
        )
        futures.append((future, key, value, headers, stamp))
    producer.flush()
    rows = []
    for future, key, value, headers, stamp in futures:
        meta = future.result(30)
        # A record without headers reads as null headers, as in Spark's Kafka source.
        row_headers = tuple(headers) or None
        rows.append((key, value, topic, meta.partition, meta.offset, stamp, row_headers))
    return sorted(rows, key=lambda r: (r[3], r[4]))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"), 3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def produced(cluster: ProcessCluster) -> Produced:
    servers = ",".join(node.grpc for node in cluster.nodes)
    rows: dict[str, list[tuple[object, ...]]] = {}
    with Client(servers) as client:
        create_topic(client, "events", 3)
        create_topic(client, "other", 2)
        create_topic(client, "empty", 1)
    with Producer(servers, linger_s=0.05) as producer:
        rows["events"] = produce(producer, "events", 3, 600)
        rows["other"] = produce(producer, "other", 2, 40)
    rows["empty"] = []
    return Produced(servers, rows)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    # Workers run this interpreter and see ``clients`` on their path, so PySpark's
    # discovery of ``pyspark_*`` modules finds ``pyspark_laminar`` (an installed
    # wheel has it in site-packages).
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(CLIENTS), path) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the JVM too stays on loopback
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("laminar-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
