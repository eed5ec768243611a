"""The demo's Spark step: read topic ``demo`` from the local cluster with PySpark.

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

SERVERS = "127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102"


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
        return 0 if total >= 2000 else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
