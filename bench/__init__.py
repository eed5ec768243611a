"""Benchmarks, each run as ``python -m bench.<name>`` (see each module's docstring).

A SIGTERM ends a benchmark as an exception in its main thread (``SystemExit``), so
its ``with`` blocks stop every node process they started: a smoke test that gives
up on a benchmark (tests/test_bench_smoke.py) terminates it and leaves nothing
running. The node processes live in sessions of their own, so they would not die
with the benchmark otherwise.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

import laminar  # noqa: F401  # before any bench imports grpc (laminar.grpc_fork)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    sys.exit(128 + signum)


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
