"""A Spark standalone cluster (Master, Worker, executors in JVMs of their own, Python
workers on this interpreter) and a real 3-node Laminar cluster, for the whole
directory. Marker ``spark_cluster``: not in ``make test``; ``make
test-spark-cluster`` (and ``.ci/run``) runs it.

Skipped, like ``tests/spark``, when pyspark, pyarrow or java is missing. The
session is the process's one SparkSession, so this directory runs in a pytest
process of its own (``tests/spark`` starts a local one).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.conftest import cluster, make_session
from tests.spark_cluster.standalone import StandaloneSpark, start_standalone

__all__ = ["cluster"]  # the Laminar cluster fixture of tests/spark, shared

EXECUTORS = 2
"""Executors of the test session, one core each; the Connect server's application
gets one more, so the Worker offers three slots (on two cores: slots, not cores)."""


@pytest.fixture(scope="session")
def standalone() -> Iterator[StandaloneSpark]:
    spark = start_standalone(worker_cores=EXECUTORS + 1, worker_memory="2g")
    try:
        yield spark
    finally:
        spark.close()


@pytest.fixture(scope="session")
def spark(standalone: StandaloneSpark) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        pytest.fail(f"a SparkSession ({active.sparkContext.master}) already runs here")
    session = make_session(
        standalone.master_url,
        "laminar-spark-cluster-tests",
        {
            "spark.executor.cores": "1",
            "spark.cores.max": str(EXECUTORS),
            "spark.executor.memory": "512m",
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        },
        register=True,
    )
    try:
        yield session
    finally:
        session.stop()
