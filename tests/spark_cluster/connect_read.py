"""A Spark Connect client in a process of its own, run by ``test_connect.py``.

``python -m tests.spark_cluster.connect_read sc://HOST:PORT SERVERS TOPIC`` opens a
session with ``SparkSession.builder.remote``, registers ``LaminarDataSource``
through it, reads ``TOPIC`` with headers and prints one JSON object: the session's
module and the rows (bytes as hex). Its own process because a process that opened a
Connect session turns later ``SparkSession.builder`` calls into Connect ones
(``SPARK_CONNECT_MODE_ENABLED``), and the tier's classic session lives in pytest's.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    address, servers, topic = sys.argv[1:4]
    from laminar_spark import LaminarDataSource
    from pyspark.sql import SparkSession

    from tests.spark.conftest import jsonable
    from tests.spark.test_reader import read

    session = SparkSession.builder.remote(address).getOrCreate()
    try:
        session.dataSource.register(LaminarDataSource)
        rows = read(session, servers, headers=True, subscribe=topic)
        kind = type(session).__module__
    finally:
        session.stop()
    print(json.dumps({"session": kind, "rows": jsonable(rows)}))


if __name__ == "__main__":
    main()
