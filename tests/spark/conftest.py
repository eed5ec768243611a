"""One local SparkSession and one real 3-node cluster for the whole directory.

The directory is skipped when pyspark, pyarrow or java is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs java", allow_module_level=True)

from laminar_client import Client, Producer

from laminar.testing.processes import ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import start_cluster

CLIENTS = Path(__file__).resolve().parents[2] / "clients"
BASE_MS = 1_700_000_000_000
MODULE_TIMEOUT_S = 300
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
    found = dict.fromkeys(range(partitions), 0)
    for answer in replica_high_watermarks(client, topic, partitions):
        for partition, high_watermark in answer.items():
            found[partition] = max(found[partition], high_watermark)
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


def replica_high_watermarks(client: Client, topic: str, partitions: int) -> list[dict[int, int]]:
    """Each live node's high watermark per partition it holds a replica of (its own
    ``ListOffsets`` answer: a follower's trails the leader's by a heartbeat)."""
    request = pb.ListOffsetsRequest(topic=topic, partitions=list(range(partitions)))
    found = []
    for address in [m.grpc_address for m in client.metadata().members.values() if m.live]:
        answer = client.transport.call(
            address, "ListOffsets", request, pb.ListOffsetsResponse, timeout_s=5
        )
        found.append(
            {
                p.partition: p.high_watermark
                for p in answer.partitions
                if not p.HasField("error") or not p.error.code
            }
        )
    return found


def wait_replicated(
    servers: str, topic: str, partitions: int, rows: Sequence[tuple[Any, ...]] = ()
) -> None:
    """Wait until every replica of each partition has the same high watermark, past
    ``rows`` (as :func:`produce` returns them), when given. Call it with no write in
    flight. A read plans its ends with one ``ListOffsets`` that any replica may
    answer, so right after an acknowledged write it may not see the last records."""
    ends = dict.fromkeys(range(partitions), 0)
    for row in rows:
        ends[row[3]] = max(ends[row[3]], row[4] + 1)

    def caught_up() -> bool:
        answers = replica_high_watermarks(client, topic, partitions)
        for partition, end in ends.items():
            seen = {answer[partition] for answer in answers if partition in answer}
            if len(seen) != 1 or min(seen) < end:
                return False
        return True

    with Client(servers) as client:
        wait_for(caught_up, 30, f"every replica of {topic} to agree, past {ends}")


def fill_topic(servers: str, name: str, partitions: int, count: int) -> list[tuple[object, ...]]:
    """Create ``name`` and write ``count`` records to it with :func:`produce`; its rows,
    once every replica has them."""
    with Client(servers) as client:
        create_topic(client, name, partitions)
    with Producer(servers, linger_s=0.02) as producer:
        rows = produce(producer, name, partitions, count)
    wait_replicated(servers, name, partitions, rows)
    return rows


def jsonable(value: Any) -> Any:
    """``value`` with bytes as hex and tuples as lists, as JSON gives it back."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def run_module(module: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """``python -m module args`` in a fresh interpreter from the checkout's root (for
    what needs a process of its own, such as its one SparkSession); the JSON object
    it printed last."""
    child = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=CLIENTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=MODULE_TIMEOUT_S,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.splitlines()[-1])


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


def make_session(
    master: str, app_name: str, conf: dict[str, str] | None = None, *, register: bool = False
) -> Any:
    """A SparkSession (``getOrCreate``) whose driver, executors and Python workers
    stay on loopback and run this interpreter, with ``clients`` on the workers' path
    so that PySpark's discovery of ``pyspark_*`` modules finds ``pyspark_laminar``
    (an installed wheel has it in site-packages); ``conf`` adds or overrides
    settings. ``register`` also registers the data source in the driver, as
    ``docs/spark.md`` says an editable install needs (the shared local session
    relies on discovery instead, and so tests it)."""
    from pyspark.sql import SparkSession

    path = os.environ.get("PYTHONPATH", "")
    if str(CLIENTS) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(CLIENTS), path) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the JVMs too stay on loopback
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        **(conf or {}),
    }
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    if register:
        from laminar_spark import LaminarDataSource

        session.dataSource.register(LaminarDataSource)
    return session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = make_session("local[2,2]", "laminar-spark-tests")
    try:
        yield session
    finally:
        session.stop()
