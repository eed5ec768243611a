"""Benchmark of the PySpark integration: reads and writes through ``format("laminar")``.

Run: ``.venv/bin/python -m bench.spark_bench [--quick] [--repeat N] [--records N]``

Three nodes (``--preset local``, fsync on) run on 127.0.0.x; Spark runs in this
process with ``local[2]`` (two task slots on the two cores the nodes share). The
topic has 6 partitions, replication factor 3, and ``--records`` records (default
2,000,000; ``--quick`` 300,000) of 100-byte values, written by one ``Producer``.
Every figure is rows per second, the median of ``--repeat`` runs (default 3), each
run one Spark job computing ``count(*)`` and ``sum(length(value))`` over the rows:

* ``arrow_ceiling_rows_s``: a trivial Python data source in the same session whose
  6 tasks yield pre-built Arrow batches of the reader's schema (10,000 rows each)
  until they have yielded as many rows as the topic holds: what the Python data
  source path itself costs here, the ceiling of any Python reader.
* ``cluster_read_rows_s``: ``spark.read.format("laminar")`` over the whole topic
  from the live cluster; ``cluster_read_vs_ceiling`` is its ratio to the ceiling.
* ``offline_read_rows_s``: the same rows read by the offline reader from one node's
  data directory (``option("path", ...)``); ``offline_read_vs_ceiling``.
* ``parquet_read_rows_s``: the same rows written once as Parquet (snappy) and read
  with ``spark.read.parquet``: what a user would compare with.
* ``write_rows_s``: ``df.write.format("laminar")`` of the rows (a DataFrame of
  ``value`` cached in memory first) into a new topic of 6 partitions, RF 3,
  ``acks=all``; the time of the whole write job.

Prints a table (each figure with its runs), the targets missed, then one JSON
object as the last line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from laminar_client import Client, Producer

from bench import client_bench
from bench.client_bench import start_cluster
from bench.report import missed_targets, print_report, run_main
from laminar.testing.processes import ProcessCluster, wait_for
from laminar.tuning import tune_numpy

VALUE_BYTES = 100
PARTITIONS = 6
TOPIC = "bench"
CEILING_BATCH_ROWS = 10_000

TARGETS: dict[str, tuple[str, float]] = {
    "cluster_read_vs_ceiling": (">=", 0.6),
    "offline_read_vs_ceiling": (">=", 0.7),
    "cluster_read_rows_s": (">=", 1_500_000),
    "write_rows_s": (">=", 400_000),
}


# ----------------------------------------------------------------------------- cluster


def create_topic(client: Client, name: str) -> None:
    client_bench.create_topic(client, name, PARTITIONS)


def fill(servers: list[str], records: int) -> None:
    """``records`` 100-byte values, round robin over the partitions: random hex
    digits, so they compress about 2:1 as real payloads do (identical values would
    let zstd make every batch nearly empty)."""
    with Producer(servers) as producer:
        send = producer.send
        for i in range(records):
            send(TOPIC, os.urandom(VALUE_BYTES // 2).hex().encode(), partition=i % PARTITIONS)
        producer.flush()


# ----------------------------------------------------------------------------- spark


def make_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("laminar-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from laminar_spark import LaminarDataSource

    session.dataSource.register(LaminarDataSource)
    session.dataSource.register(ceiling_source(session))
    return session


def ceiling_source(session: Any) -> type:
    """A data source yielding pre-built Arrow batches of the reader's schema.

    Options: ``rows`` (in all) and ``tasks``. Defined here, so cloudpickle ships the
    class by value to the Python workers.
    """
    from laminar_spark import spark_schema
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType

    class _Part(InputPartition):
        def __init__(self, index: int, rows: int) -> None:
            self.index = index
            self.rows = rows

    class CeilingReader(DataSourceReader):
        def __init__(self, rows: int, tasks: int) -> None:
            self.rows = rows
            self.tasks = tasks

        def partitions(self) -> list[InputPartition]:
            share, extra = divmod(self.rows, self.tasks)
            return [_Part(i, share + (1 if i < extra else 0)) for i in range(self.tasks)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa
            from laminar_client.arrow import arrow_schema

            assert isinstance(partition, _Part)
            schema = arrow_schema()

            def batch(n: int, first: int) -> Any:
                values = pa.array([b"v" * VALUE_BYTES] * n, pa.binary())
                return pa.RecordBatch.from_arrays(
                    [
                        pa.nulls(n, pa.binary()),
                        values,
                        pa.array(["bench"] * n, pa.string()),
                        pa.array([partition.index] * n, pa.int32()),
                        pa.array(range(first, first + n), pa.int64()),
                        pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                        pa.array([0] * n, pa.int32()),
                    ],
                    schema=schema,
                )

            full = batch(CEILING_BATCH_ROWS, 0)
            left = partition.rows
            while left >= CEILING_BATCH_ROWS:
                yield full
                left -= CEILING_BATCH_ROWS
            if left:
                yield batch(left, 0)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "laminar_bench_ceiling"

        def schema(self) -> StructType:
            return spark_schema()

        def reader(self, schema: StructType) -> DataSourceReader:
            return CeilingReader(int(self.options["rows"]), int(self.options["tasks"]))

    return CeilingSource


def timed_scan(load: Callable[[], Any], expected: int) -> float:
    """Rows/s of one job computing count(*) and sum(length(value)) over ``load()``."""
    from pyspark.sql import functions as f

    started = time.perf_counter()
    row = load().agg(f.count("*").alias("n"), f.sum(f.length("value")).alias("b")).collect()[0]
    elapsed = time.perf_counter() - started
    if row["n"] != expected or row["b"] != expected * VALUE_BYTES:
        raise SystemExit(f"wrong result: {row['n']} rows, {row['b']} bytes; expected {expected}")
    return expected / elapsed


# ----------------------------------------------------------------------------- figures


def measure(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, list[float]]]:
    results: dict[str, float] = {}
    spreads: dict[str, list[float]] = {}
    records = args.records
    # Either order works since laminar.grpc_fork turns gRPC's fork handlers off (with
    # them on, a JVM launched after a channel existed died twice here:
    # JAVA_GATEWAY_EXITED).
    spark = make_session()
    with (
        tempfile.TemporaryDirectory(prefix="laminar-spark-bench-") as root,
        ProcessCluster(Path(root) / "cluster", preset="local") as cluster,
    ):
        servers = start_cluster(cluster)
        with Client(servers) as client:
            create_topic(client, TOPIC)
        fill(servers, records)
        try:
            joined = ",".join(servers)

            def cluster_df() -> Any:
                return (
                    spark.read.format("laminar")
                    .option("servers", joined)
                    .option("subscribe", TOPIC)
                    .load()
                )

            def ceiling_df() -> Any:
                return (
                    spark.read.format("laminar_bench_ceiling")
                    .option("rows", str(records))
                    .option("tasks", str(PARTITIONS))
                    .load()
                )

            # The offline reader over node 0's data directory (every partition has
            # a replica on each node), once its committed files cover every record.
            data_dir = str(cluster.nodes[0].data_dir)

            def offline_df() -> Any:
                return spark.read.format("laminar").option("path", data_dir).load()

            timed_scan(ceiling_df, records)  # warm up the JVM and the Python workers
            timed_scan(cluster_df, records)
            wait_for(
                lambda: offline_df().count() == records,
                60,
                "the offline reader to see every committed record",
            )
            figures: list[tuple[str, Callable[[], float]]] = [
                ("arrow_ceiling_rows_s", lambda: timed_scan(ceiling_df, records)),
                ("cluster_read_rows_s", lambda: timed_scan(cluster_df, records)),
                ("offline_read_rows_s", lambda: timed_scan(offline_df, records)),
            ]
            # Interleave the runs, so that the machine's drift touches every figure alike.
            for _ in range(args.repeat):
                for name, run in figures:
                    spreads.setdefault(name, []).append(run())

            parquet = Path(root) / "bench.parquet"
            cluster_df().write.parquet(str(parquet))
            spreads["parquet_read_rows_s"] = [
                timed_scan(lambda: spark.read.parquet(str(parquet)), records)
                for _ in range(args.repeat)
            ]
            spreads.update(write_figures(spark, joined, records, args.repeat))
        finally:
            spark.stop()
    for name, runs in spreads.items():
        results[name] = statistics.median(runs)
    ceiling = results["arrow_ceiling_rows_s"]
    results["cluster_read_vs_ceiling"] = results["cluster_read_rows_s"] / ceiling
    results["offline_read_vs_ceiling"] = results["offline_read_rows_s"] / ceiling
    return results, spreads


def write_figures(spark: Any, servers: str, records: int, repeat: int) -> dict[str, list[float]]:
    """``df.write.format("laminar")`` of ``records`` 100-byte values into new topics."""
    from pyspark.sql import functions as f

    frame = (
        spark.range(records, numPartitions=PARTITIONS)
        # 100 hex digits per row, all different: they compress about 2:1.
        .select(f.substring(f.sha2(f.col("id").cast("string"), 512), 1, VALUE_BYTES).alias("value"))
        .cache()
    )
    frame.count()
    runs = []
    with Client(servers.split(",")) as client:
        for run in range(repeat):
            topic = f"bench-write-{run}"
            create_topic(client, topic)
            started = time.perf_counter()
            frame.write.format("laminar").option("servers", servers).option("topic", topic).mode(
                "append"
            ).save()
            runs.append(records / (time.perf_counter() - started))
            # Each record once: read back (high watermarks also count the leaders'
            # control batches).
            written = (
                spark.read.format("laminar")
                .option("servers", servers)
                .option("subscribe", topic)
                .load()
                .count()
            )
            if written != records:
                raise SystemExit(f"write: {written} records in {topic}, expected {records}")
    frame.unpersist()
    return {"write_rows_s": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300,000 records")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--records", type=int, help="records in the topic")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SystemExit("spark_bench needs java (Spark 4 runs on Java 17)")
    args.records = args.records or (300_000 if args.quick else 2_000_000)
    tune_numpy()
    results, spreads = measure(args)
    missed = missed_targets(results, TARGETS, unmeasured=True)
    print_report(results, missed=missed, runs=spreads, digits=2)


if __name__ == "__main__":
    run_main(main)
