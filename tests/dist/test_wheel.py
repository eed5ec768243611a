"""The installed wheel, used from outside the checkout: nodes from the ``laminar``
entry point, ``laminar_client`` in a ``[server,spark]`` venv and in a
``[client]``-only one, and ``spark.read.format("laminar")`` found by PySpark's
discovery (``pyspark_laminar``) without a register call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from laminar.testing.processes import ProcessCluster
from tests.dist.conftest import Venv, servers

SCRIPT = Path(__file__).with_name("installed_client.py")
RECORDS = 3_000


def run_client(venv: Venv, cluster: ProcessCluster, topic: str, *flags: str) -> dict[str, object]:
    """``installed_client.py``, copied out of the checkout, run by the venv's python."""
    script = shutil.copy(SCRIPT, venv.workdir / SCRIPT.name)
    result = venv.run(venv.python, script, servers(cluster), topic, str(RECORDS), *flags)
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def site_packages(venv: Venv) -> Path:
    (found,) = (venv.root / "lib").glob("python3*/site-packages")
    return found.resolve()


def test_wheel_holds_the_five_packages_and_the_entry_point(server_venv: Venv) -> None:
    site = site_packages(server_venv)
    packages = ("laminar", "laminar_client", "laminar_cli", "laminar_spark", "pyspark_laminar")
    for package in packages:
        assert (site / package / "__init__.py").is_file(), package
    for typed in ("laminar", "laminar_client", "laminar_cli", "laminar_spark"):
        assert (site / typed / "py.typed").is_file(), typed
    help_text = server_venv.run(server_venv.laminar, "node", "start", "--help").stdout
    assert "--preset" in help_text


def test_installed_nodes_serve_a_client_and_spark_without_register(
    server_venv: Venv, installed_cluster: ProcessCluster
) -> None:
    site = str(site_packages(server_venv))
    report = run_client(server_venv, installed_cluster, "wheel-spark", "--spark")
    assert report["consumed"] == RECORDS
    assert report["spark_read"] == RECORDS
    for module in ("laminar", "laminar_client", "pyspark_laminar"):
        assert str(report[module]).startswith(site), report
    status = server_venv.run(
        server_venv.laminar, "--bootstrap", servers(installed_cluster), "cluster", "status"
    ).stdout
    assert all(f"node{index}" in status for index in range(3)), status


def test_client_only_install_produces_and_consumes(
    client_venv: Venv, installed_cluster: ProcessCluster
) -> None:
    installed = client_venv.run(
        client_venv.python,
        "-c",
        "import importlib.util as u, json; print(json.dumps({name: u.find_spec(name) is not None"
        " for name in ('grpc_health', 'grpc_reflection', 'uvloop', 'pyspark', 'pyarrow')}))",
    ).stdout
    assert json.loads(installed) == dict.fromkeys(
        ("grpc_health", "grpc_reflection", "uvloop", "pyspark", "pyarrow"), False
    )
    report = run_client(client_venv, installed_cluster, "wheel-client")
    assert report["consumed"] == RECORDS
    assert str(report["laminar_client"]).startswith(str(site_packages(client_venv)))
    # The admin commands work there too; a node does not, and says what to install.
    topics = client_venv.run(
        client_venv.laminar, "--bootstrap", servers(installed_cluster), "topic", "list"
    ).stdout
    assert "wheel-client" in topics
    refused = client_venv.run(
        client_venv.laminar,
        "node",
        "start",
        "--data-dir",
        "data",
        "--preset",
        "local",
        check=False,
    )
    assert refused.returncode == 2
    assert "pip install 'laminar[server]'" in refused.stderr
    assert "Traceback" not in refused.stderr
