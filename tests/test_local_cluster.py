"""``scripts/local_cluster.sh start N --secure`` as a user runs it: one command gives a
secured cluster (TLS, encrypted gossip, authorization) and the lines to export; the
``laminar`` command works with them, and is refused without the CA or without the
admin's token; node 0 serves its metrics on 127.0.0.1:7300. The script's ports are
fixed (127.0.0.1:7000/7100/7200/7300): skipped when
something already listens there (a developer's own local cluster)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "local_cluster.sh"


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    if any(_port_taken(port) for port in (7100, 7200, 7300)):
        pytest.skip("something listens on 127.0.0.1:7100, :7200 or :7300 (a local cluster?)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMINAR_")}
    env |= {"LAMINAR_CLUSTER_DIR": str(tmp_path / "cluster"), "LAMINAR_PYTHON": sys.executable}
    try:
        started = subprocess.run(
            ["bash", str(SCRIPT), "start", "1", "--secure"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in started.stdout.splitlines()
            if line.startswith("export ")
        )
        yield env | exports
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, cwd=ROOT, timeout=60, check=False)


def _laminar(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laminar.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_start_secure_gives_a_secured_cluster_and_its_exports(
    secure_cluster: dict[str, str],
) -> None:
    env = secure_cluster
    assert set(env) >= {"LAMINAR_BOOTSTRAP", "LAMINAR_TLS_CA", "LAMINAR_TOKEN"}
    assert Path(env["LAMINAR_TLS_CA"]).is_absolute()
    done = _laminar(env, "topic", "create", "t", "--replication-factor", "1")
    assert done.returncode == 0, done.stderr
    # Without the CA: refused at the TLS handshake, one line.
    plain = _laminar(env | {"LAMINAR_TLS_CA": ""}, "--timeout", "5", "topic", "list")
    assert plain.returncode == 1
    assert plain.stderr.startswith("laminar: error: TLS handshake failed")
    assert plain.stderr.count("\n") == 1
    # Metrics are on: node 0 serves them on 127.0.0.1:7300, ready.
    from laminar.testing.scrape import ready, scrape

    assert ready("127.0.0.1:7300") == (True, "ready")
    assert scrape("127.0.0.1:7300").value("laminar_members", state="alive") == 1
    # Without the admin's token: anonymous, and the ACLs allow it nothing.
    anonymous = _laminar(env | {"LAMINAR_TOKEN": ""}, "topic", "create", "u")
    assert anonymous.returncode == 1
    assert "User:ANONYMOUS may not create" in anonymous.stderr
