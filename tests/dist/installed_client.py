"""Run by an installed Laminar's own interpreter (a venv outside the checkout, see
``test_wheel.py``): produce and consume through ``laminar_client`` and, with
``--spark``, read the topic back with ``spark.read.format("laminar")`` and no
``spark.dataSource.register`` call. Prints one JSON line: what it checked.

Usage: ``python installed_client.py SERVERS TOPIC COUNT [--spark]``.
"""

from __future__ import annotations

import json
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from laminar_client import Client, Consumer, Producer

from laminar.testing.processes import wait_for

DEADLINE_S = 120.0


def installed_from(module_name: str) -> str:
    """Where ``module_name`` was imported from; fails unless it is this venv's
    site-packages (not a checkout on sys.path, not an editable install)."""
    module = __import__(module_name)
    path = Path(module.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert site in path.parents, f"{module_name} imported from {path}, not from {site}"
    return str(path)


def produce_and_consume(servers: str, topic: str, count: int) -> list[bytes]:
    with Client(servers) as client:
        client.create_topic(topic, 3, 3)

        def led() -> bool:
            found = client.metadata(refresh=True).topics.get(topic)
            return found is not None and all(p.leader for p in found.partitions)

        wait_for(led, DEADLINE_S, f"every partition of {topic} to have a leader")
    values = [f"value-{i}".encode() for i in range(count)]
    with Producer(servers, acks="all") as producer:
        futures = [
            producer.send(topic, value, key=f"key-{i % 7}".encode())
            for i, value in enumerate(values)
        ]
        producer.flush()
        partitions = {future.result(60).partition for future in futures}
    assert partitions == {0, 1, 2}, partitions
    read: list[bytes] = []
    with Consumer(servers) as consumer:
        consumer.assign([(topic, partition) for partition in range(3)])
        deadline = time.monotonic() + DEADLINE_S
        while len(read) < count and time.monotonic() < deadline:
            read.extend(record.value for record in consumer.records(timeout_s=1.0))
    assert sorted(read) == sorted(values), f"read {len(read)} of {count} records"
    return values


def spark_read(servers: str, topic: str, values: list[bytes]) -> int:
    from pyspark.sql import SparkSession  # not in a [client] install

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("laminar-installed-wheel")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        # No spark.dataSource.register: PySpark finds pyspark_laminar.DefaultSource.
        # Planning the first read fails at once when the name is unknown.
        def frame() -> Any:
            return (
                spark.read.format("laminar")
                .option("servers", servers)
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load()
            )

        try:
            columns = frame().columns
        except Exception as error:  # Spark's message, without the JVM's stack
            lines = [line for line in str(error).splitlines() if line.strip()]
            head = " ".join(lines[:2])  # py4j's "while calling ...", then Spark's error
            raise SystemExit(f"spark.read.format('laminar') failed: {head}") from None
        assert columns[:2] == ["key", "value"], columns

        def read_all() -> bool:
            # A read's ends come from one replica's ListOffsets, which may trail the
            # leader's by a heartbeat right after a write: read until all are there.
            rows = frame().select("value").collect()
            return sorted(bytes(row.value) for row in rows) == sorted(values)

        what = f"spark.read.format('laminar') to return the {len(values)} records"
        wait_for(read_all, DEADLINE_S, what)
    finally:
        spark.stop()
    return len(values)


def main(argv: list[str]) -> int:
    servers, topic, count = argv[0], argv[1], int(argv[2])
    spark = "--spark" in argv[3:]
    report: dict[str, object] = {
        "laminar_client": installed_from("laminar_client"),
        "laminar": installed_from("laminar"),
    }
    values = produce_and_consume(servers, topic, count)
    report["consumed"] = len(values)
    if spark:
        report["spark_read"] = spark_read(servers, topic, values)
        report["pyspark_laminar"] = installed_from("pyspark_laminar")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
