"""Spark Connect: a ``SparkConnectServer`` application on the standalone cluster (the
connect jar ships with PySpark) and a client in another process
(``connect_read.py``) that registers the data source through its
``SparkSession.builder.remote`` session and reads. The class travels pickled by
reference, so the server's Python workers import ``laminar_spark``: they run this
interpreter, where Laminar is installed.

Needs the Connect client's packages (``pip install 'laminar[spark-connect]'``;
``make test-spark-cluster`` installs them); skipped without them.
"""

from __future__ import annotations

import pytest

from laminar.testing.processes import ProcessCluster
from tests.spark.conftest import fill_topic, jsonable, run_module
from tests.spark.test_writer import servers_of
from tests.spark_cluster.standalone import StandaloneSpark

pytestmark = pytest.mark.spark_cluster


def test_connect_client_reads_through_the_registered_source(
    standalone: StandaloneSpark, cluster: ProcessCluster
) -> None:
    for module in ("pandas", "grpc_status", "google.rpc"):
        pytest.importorskip(module, reason="the Spark Connect client needs it")
    address = standalone.start_connect_server(
        {"spark.executor.cores": "1", "spark.cores.max": "1", "spark.executor.memory": "512m"}
    )
    servers = servers_of(cluster)
    rows = fill_topic(servers, "connect-read", 2, 2_000)
    result = run_module("tests.spark_cluster.connect_read", address, servers, "connect-read")
    assert result["session"] == "pyspark.sql.connect.session"
    assert result["rows"] == jsonable(rows)
