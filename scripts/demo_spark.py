"""The demo's Spark step: read topic ``demo`` from the local cluster with PySpark,
then the same from node 1's segment files with the offline reader (the ``path``
option: no cluster involved), and check that both give the same aggregate.

Run by ``scripts/demo.sh`` while the cluster is up; skips (and says why) when
PySpark or Java is missing. An installed Laminar needs no register call (PySpark
finds the ``pyspark_laminar`` module's ``DefaultSource``); a checkout installed in
editable mode hides that module from PySpark's discovery, so the demo registers
the source, which works everywhere.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any

SERVERS = "127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102"
OFFLINE_NODE_DIR = os.path.join(os.environ.get("LAMINAR_CLUSTER_DIR", ".cluster"), "node1")
COMMITTED_WAIT_S = 15.0


def main() -> int:
    if shutil.which("java") is None:
        print("spark step skipped: no java on PATH")
        return 0
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as f
    except ImportError:
        print("spark step skipped: pyspark is not installed (pip install 'laminar[spark]')")
        return 0
    # Spark's Python workers must run this interpreter (the one with Laminar installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything on loopback
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("laminar-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from laminar_spark import LaminarDataSource

    spark.dataSource.register(LaminarDataSource)
    try:
        df = (
            spark.read.format("laminar")
            .option("servers", SERVERS)
            .option("subscribe", "demo")
            .option("startingOffsets", "earliest")
            .load()
        )
        summary = (
            df.groupBy("partition")
            .agg(f.count("*").alias("records"), f.sum(f.length("value")).alias("value_bytes"))
            .orderBy("partition")
        )
        summary.show()
        total = df.count()
        print(f"spark read {total} records of topic demo")
        if total < 2000:
            return 1
        return _offline_step(spark, f, summary.collect())
    finally:
        spark.stop()


def _offline_step(spark: Any, f: Any, live: list[Any]) -> int:
    """The same aggregate from node 1's files, once its ``committed`` files (written
    about once a second) cover what the cluster read saw."""
    from laminar_client import Client

    from laminar.segment.committed import read_committed

    with Client(SERVERS) as client:
        ends = client.list_offsets("demo", [0, 1, 2])
    directory = os.path.join(OFFLINE_NODE_DIR, "partitions", "demo")
    deadline = time.monotonic() + COMMITTED_WAIT_S
    while any(
        (read_committed(os.path.join(directory, str(p))) or 0) < ends[p].high_watermark
        for p in ends
    ):
        if time.monotonic() > deadline:
            print(f"offline step failed: {directory} committed files lag the cluster")
            return 1
        time.sleep(0.2)
    print(f'spark.read.format("laminar").option("path", "{OFFLINE_NODE_DIR}"): node 1\'s files')
    offline = (
        spark.read.format("laminar")
        .option("path", OFFLINE_NODE_DIR)
        .option("subscribe", "demo")
        .load()
        .groupBy("partition")
        .agg(f.count("*").alias("records"), f.sum(f.length("value")).alias("value_bytes"))
        .orderBy("partition")
    )
    offline.show()
    same = offline.collect() == live
    print("offline read matches the cluster read" if same else "offline read DIFFERS")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
