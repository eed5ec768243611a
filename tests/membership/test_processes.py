"""Real membership processes on 127.0.0.x (loopback only), with the ``local()`` preset.

Each node is ``python -m laminar.membership``; its JSON event lines on stdout give
every node's view. The test waits on conditions with deadlines, never fixed sleeps,
and the fixture kills whatever is still running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

CLUSTER_KEY = "process-test-key"
DEADLINE_S = 20.0
# 127.0.0.x addresses from here on; distinct per test run so that a lingering
# process of an earlier run cannot join (it would also need the cluster key).
ADDRESS_BASE = 40 + os.getpid() % 150


class Node:
    """One membership process and the view it printed."""

    def __init__(self, name: str, process: subprocess.Popen[str], log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self.address: str | None = None
        self.view: dict[str, str] = {}
        """Member node id → last state this node printed for it."""
        self.stopped = False


class ProcessCluster:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.nodes: dict[str, Node] = {}

    def start(self, name: str, index: int, seeds: list[str]) -> Node:
        log_path = self._directory / f"{name}.log"
        command = [
            sys.executable,
            "-m",
            "laminar.membership",
            "--node-id",
            name,
            "--bind",
            f"127.0.0.{ADDRESS_BASE + index}:0",
            "--grpc-address",
            f"127.0.0.{ADDRESS_BASE + index}:9000",
            "--zone",
            f"zone-{index % 3}",
            "--seeds",
            ",".join(seeds),
            "--preset",
            "local",
            "--cluster-key",
            CLUSTER_KEY,
        ]
        with log_path.open("w") as log:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        node = Node(name, process, log_path)
        self.nodes[name] = node
        assert process.stdout is not None
        thread = threading.Thread(target=self._read, args=(node, process.stdout), daemon=True)
        thread.start()
        self._threads.append(thread)
        self.wait(lambda: node.address is not None, f"{name} started")
        return node

    def _read(self, node: Node, stream: IO[str]) -> None:
        for line in stream:
            record = json.loads(line)
            with self._changed:
                if record["event"] == "started":
                    node.address = record["address"]
                elif record["event"] == "member":
                    node.view[record["node_id"]] = record["state"]
                elif record["event"] == "stopped":
                    node.stopped = True
                self._changed.notify_all()

    def wait(
        self, condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S
    ) -> None:
        """Wait until ``condition`` holds (checked on every printed line)."""
        deadline = time.monotonic() + deadline_s
        with self._changed:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    views = {name: node.view for name, node in self.nodes.items()}
                    pytest.fail(f"timed out waiting for {what}; views: {views}")
                self._changed.wait(min(remaining, 0.5))

    def sees_all(self, observers: list[str], subject: str, state: str) -> Callable[[], bool]:
        """Every observer but the subject itself shows ``subject`` in ``state``."""
        others = [observer for observer in observers if observer != subject]
        return lambda: all(self.nodes[o].view.get(subject) == state for o in others)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.process.poll() is None:
                node.process.kill()
        for node in self.nodes.values():
            node.process.wait(timeout=10)
            if node.process.stdout is not None:
                node.process.stdout.close()
        for thread in self._threads:
            thread.join(timeout=5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    processes = ProcessCluster(tmp_path)
    try:
        yield processes
    finally:
        processes.stop_all()


def test_kill_leave_and_join_with_real_processes(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    names = [f"node{index}" for index in range(1, 6)]
    first = cluster.start(names[0], 1, [])
    assert first.address is not None
    for index, name in enumerate(names[1:], start=2):
        cluster.start(name, index, [first.address])
    for name in names:
        cluster.wait(cluster.sees_all(names, name, "alive"), f"everyone sees {name} alive")

    # SIGKILL: every survivor declares the node dead.
    victim = cluster.nodes["node3"]
    survivors = [name for name in names if name != victim.name]
    killed_at = time.monotonic()
    victim.process.send_signal(signal.SIGKILL)
    cluster.wait(cluster.sees_all(survivors, victim.name, "dead"), "node3 dead everywhere")
    detect_s = time.monotonic() - killed_at
    with capsys.disabled():
        print(f"\nlocal(): SIGKILL to last survivor marking dead: {detect_s:.2f} s")
    assert victim.process.wait(timeout=5) == -signal.SIGKILL

    # SIGTERM: a graceful leave, seen as "left" (not "dead"), and exit status 0.
    leaver = cluster.nodes["node4"]
    survivors = [name for name in survivors if name != leaver.name]
    leaver.process.send_signal(signal.SIGTERM)
    cluster.wait(cluster.sees_all(survivors, leaver.name, "left"), "node4 left everywhere")
    assert leaver.process.wait(timeout=10) == 0
    assert leaver.stopped

    # A new node joins through one seed (not the first node) and everyone sees it.
    seed = cluster.nodes["node5"]
    assert seed.address is not None
    newcomer = cluster.start("node6", 6, [seed.address])
    everyone = [*survivors, newcomer.name]
    for name in everyone:
        cluster.wait(cluster.sees_all(everyone, name, "alive"), f"everyone sees {name} alive")
    # Like memberlist, a newcomer does not adopt members it only hears of as gone.
    assert newcomer.view.get("node3") in (None, "dead")
    assert newcomer.view.get("node4") in (None, "left")
    for name in survivors:
        assert cluster.nodes[name].process.poll() is None, f"{name} exited"


def run_cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "laminar.membership", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def test_help_documents_every_option() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for option in (
        "--node-id",
        "--bind",
        "--grpc-address",
        "--seeds",
        "--weight",
        "--zone",
        "--metadata",
        "--preset",
        "--cluster-key",
        "--incarnation",
        "--log-level",
    ):
        assert option in result.stdout, option
    assert "SIGTERM" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--bind", "127.0.0.1:0", "--cluster-key", "k"], "--node-id"),
        (["--node-id", "a", "--bind", "nowhere", "--cluster-key", "k"], "host:port"),
        (["--node-id", "a", "--bind", "127.0.0.1:0"], "cluster key"),
        (
            ["--node-id", "a", "--bind", "127.0.0.1:0", "--cluster-key", "k", "--weight", "-1"],
            "weight",
        ),
        (
            ["--node-id", "a", "--bind", "127.0.0.1:0", "--cluster-key", "k", "--seeds", "x"],
            "host:port",
        ),
        (
            ["--node-id", "a", "--bind", "127.0.0.1:0", "--cluster-key", "k", "--preset", "wan"],
            "preset",
        ),
        (
            ["--node-id", "a", "--bind", "127.0.0.1:0", "--cluster-key", "k", "--metadata", "x"],
            "KEY=VALUE",
        ),
        (["--node-id", "a", "--bind", "192.0.2.1:7000", "--cluster-key", "k"], "cannot bind"),
    ],
)
def test_bad_input_is_a_clean_error(arguments: list[str], message: str) -> None:
    environment_free = {k: v for k, v in os.environ.items() if k != "LAMINAR_CLUSTER_KEY"}
    command = [sys.executable, "-m", "laminar.membership", *arguments]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=30, check=False, env=environment_free
    )
    assert result.returncode in (1, 2)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
