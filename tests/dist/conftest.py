"""The wheel as a user installs it (marker ``dist``: not in ``make test``; ``make
test-dist`` and ``.ci/run`` run it, in a few minutes).

Session fixtures build the sdist and, from it, the wheel (``python -m build``, as
``make dist``), install the wheel into fresh venvs outside the checkout (pip's cache
and the machine's pip configuration are reused), and start a 3-node cluster from the
``[server,spark]`` venv's ``laminar`` entry point, in a working directory outside the
checkout. Every process they start is stopped at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar.testing.processes import ProcessCluster
from tests.server.test_cluster import wait_settled

CHECKOUT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.dist)


def clip(text: str, chars: int = 3000) -> str:
    """The start and the end of a long output (a JVM stack can hide the message)."""
    if len(text) <= 2 * chars:
        return text
    return f"{text[:chars]}\n[...]\n{text[-chars:]}"


@dataclass(frozen=True)
class Venv:
    """A venv with the wheel installed, and a working directory outside the checkout."""

    root: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def laminar(self) -> Path:
        return self.root / "bin" / "laminar"

    def env(self) -> dict[str, str]:
        """This process's environment without what could point at the checkout or
        at the test's own venv; the venv first on PATH; Spark's workers on it too."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
        }
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYSPARK_PYTHON"] = str(self.python)
        env["PYSPARK_DRIVER_PYTHON"] = str(self.python)
        return env

    def run(
        self, *command: str | Path, timeout_s: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(part) for part in command],
            check=False,
            cwd=self.workdir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{command} exited {result.returncode}\nstdout:\n{clip(result.stdout)}"
                f"\nstderr:\n{clip(result.stderr)}"
            )
        return result


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build`` of the checkout: the sdist, then the wheel built from it (so
    that a file missing from the sdist fails here too)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(CHECKOUT)],
        check=True,
        capture_output=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    (found,) = out.glob("laminar-*.whl")
    assert len(list(out.glob("laminar-*.tar.gz"))) == 1
    return found


def make_venv(base: Path, wheel: Path, extras: str) -> Venv:
    root = base / "venv"
    workdir = base / "work"
    workdir.mkdir()
    # The venv module of this interpreter builds on its base interpreter, not on the
    # test's venv: nothing of the checkout's editable install is visible there.
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    venv = Venv(root, workdir)
    venv.run(
        venv.python,
        "-m",
        "pip",
        "install",
        "--quiet",
        f"{wheel}[{extras}]",
        timeout_s=INSTALL_TIMEOUT_S,
    )
    return venv


@pytest.fixture(scope="session")
def server_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    return make_venv(tmp_path_factory.mktemp("server-spark"), wheel, "server,spark")


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Venv:
    return make_venv(tmp_path_factory.mktemp("client"), wheel, "client")


@pytest.fixture(scope="session")
def installed_cluster(
    tmp_path_factory: pytest.TempPathFactory, server_venv: Venv
) -> Iterator[ProcessCluster]:
    """3 nodes started by the installed ``laminar`` entry point (``laminar node start
    ... --preset local``) on loopback, in the venv's working directory."""
    cluster = ProcessCluster(
        tmp_path_factory.mktemp("cluster"),
        preset="local",
        launcher=[str(server_venv.laminar)],
        cwd=server_venv.workdir,
        env=server_venv.env(),
    )
    try:
        first = cluster.add_node(bootstrap=True)
        cluster.wait_ready(first, timeout_s=60)
        for _ in range(2):
            cluster.add_node()
        for node in cluster.nodes:
            cluster.wait_ready(node, timeout_s=60)
        wait_settled(cluster)
        yield cluster
    except BaseException:
        for node in cluster.nodes:
            print(f"--- node{node.index} log tail\n{cluster.log_tail(node)}")
        raise
    finally:
        cluster.close()


def servers(cluster: ProcessCluster) -> str:
    return ",".join(node.grpc for node in cluster.nodes)
