"""A SparkSession started in a process that used Laminar clients (issue 27, point 10).

The order has to be a fresh interpreter's (a process has one SparkSession, and the
directory's shared one started long ago), so ``spark_after_client.py`` runs in a
child process and reports what it saw. The child's environment has no
``GRPC_ENABLE_FORK_SUPPORT``: what turns gRPC's fork handlers off must be the
library's import (``laminar.grpc_fork``), not this test's process, whose import of
Laminar set the variable.
"""

from __future__ import annotations

import os

import pytest

from laminar.grpc_fork import FORK_SUPPORT_VARIABLE
from laminar.testing.processes import ProcessCluster
from tests.spark.conftest import run_module


@pytest.mark.slow  # make test-slow: two Spark sessions in a subprocess, about 20 s
def test_spark_after_clients_then_clients_after_spark(cluster: ProcessCluster) -> None:
    servers = ",".join(node.grpc for node in cluster.nodes)
    env = {k: v for k, v in os.environ.items() if k != FORK_SUPPORT_VARIABLE}
    result = run_module("tests.spark.spark_after_client", servers, env=env)
    assert result["forks_died"] == 0, f"{result['forks_died']} of {result['forks']} died"
    assert result["consumed"] == 120
    assert set(result["read"]) == {"before", "after", "before and more"}
    for case, rows in result["read"].items():
        assert rows == result["produced"][case], case
    assert len(result["read"]["before and more"]) == 140
