"""The Spark benchmark's smoke run (a benchmark nobody runs rots). In this tier, not
in ``make test``: the bench starts a JVM of its own (``spark.stop()`` at its end would
end the session the Spark tests share), about 40 s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.spark_cluster


def test_spark_bench_runs_at_its_smallest() -> None:
    argv = [sys.executable, "-m", "bench.spark_bench", "--repeat", "1", "--records", "20000"]
    done = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("cluster_read_rows_s", "offline_read_rows_s", "write_rows_s"):
        assert figures[name] > 0
