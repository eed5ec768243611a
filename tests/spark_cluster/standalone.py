"""A Spark standalone cluster from the pip-installed PySpark, on loopback.

:func:`start_standalone` runs a Master and one Worker (``spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each in a session of
its own, on free ports of 127.0.0.1 (``SPARK_LOCAL_IP`` too, so the executors the
Worker starts bind there), with logs and the Worker's directory under a temporary
directory; it returns when the Master's JSON status shows the Worker alive.
:meth:`StandaloneSpark.start_connect_server` adds a Spark Connect server (its
``SparkConnectServer`` application on the same Master). Every JVM and Python
process the Worker and the server start descends from a process started here:
:meth:`StandaloneSpark.close` finds them all (``/proc``), signals their process
groups (SIGTERM, then SIGKILL after a deadline) and removes the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from laminar.testing.processes import free_port, wait_for

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15


def spark_home() -> Path:
    """The pip-installed PySpark's directory, which holds ``bin``, ``sbin`` and ``jars``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneSpark:
    root: Path
    master_url: str
    master_ui_port: int
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        """What every JVM here runs with: loopback, this interpreter for Python
        workers, logs and work under ``root``."""
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_HOSTNAME="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_WORKER_DIR=str(self.root / "work"),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            # A port taken meanwhile fails the start instead of moving to the next
            # port, where another test run's master could be listening.
            SPARK_MASTER_OPTS="-Dspark.port.maxRetries=0",
            SPARK_WORKER_OPTS="-Dspark.port.maxRetries=0",
        )
        return env

    def launch(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        process = subprocess.Popen(
            command,
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes.append((name, process))
        return process

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.root / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def status(self) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as answer:
            status: dict[str, object] = json.load(answer)
            return status

    def wait_running(self, name: str, condition: object, what: str) -> None:
        """``wait_for(condition)``, failing at once with the log if ``name`` exits."""
        process = dict(self.processes)[name]

        def check() -> object:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited {process.returncode}:\n{self.log_tail(name)}")
            return condition()  # type: ignore[operator]

        try:
            wait_for(check, START_TIMEOUT_S, what)
        except TimeoutError as error:
            raise TimeoutError(f"{error}\n{self.log_tail(name)}") from None

    def start_connect_server(self, conf: dict[str, str]) -> str:
        """A Spark Connect server on this cluster; its ``sc://`` address."""
        port = free_port()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
            **conf,
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            "laminar-connect-server",
            "--master",
            self.master_url,
        ]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        self.launch("connect", command)
        self.wait_running("connect", lambda: _accepts(port), "the Spark Connect server")
        return f"sc://127.0.0.1:{port}"

    def close(self) -> None:
        """Stop every process started here and all their descendants, then remove
        the directory. Descendants are listed before anything is signalled: once an
        executor is gone its Python daemons would be reparented and lost."""
        pids = set()
        for _, process in self.processes:
            pids |= {process.pid, *_descendants(process.pid)}
        groups = {group for group in map(_process_group, pids) if group not in (None, 0)}
        groups.discard(os.getpgrp())
        _signal_all(groups, pids, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            for _, process in self.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.05)
            time.sleep(0.05)
        _signal_all(groups, pids, signal.SIGKILL)
        for _, process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_TIMEOUT_S)
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def start_standalone(*, worker_cores: int, worker_memory: str) -> StandaloneSpark:
    """A Master and one Worker with ``worker_cores`` cores (slots: they may exceed
    the machine's) and ``worker_memory`` for executors."""
    root = Path(tempfile.mkdtemp(prefix="laminar-spark-standalone-"))
    port, ui_port = free_port(), free_port()
    spark = StandaloneSpark(root, f"spark://127.0.0.1:{port}", ui_port)
    spark_class = str(spark_home() / "bin" / "spark-class")
    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(ui_port)]
        spark.launch("master", [spark_class, *master])
        spark.wait_running(
            "master", lambda: spark.status()["url"] == spark.master_url, "the Spark master"
        )
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1"]
        worker += ["--port", str(free_port()), "--webui-port", str(free_port())]
        worker += ["--cores", str(worker_cores), "--memory", worker_memory]
        worker += ["--work-dir", str(root / "work"), spark.master_url]
        spark.launch("worker", [spark_class, *worker])
        spark.wait_running(
            "worker", lambda: spark.status().get("aliveworkers") == 1, "the Spark worker"
        )
    except BaseException:
        spark.close()
        raise
    return spark


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry))
    return children


def _descendants(pid: int) -> set[int]:
    children = _children()
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited


def _signal_all(groups: set[int], pids: set[int], signum: signal.Signals) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
