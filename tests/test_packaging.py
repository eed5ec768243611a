"""What a client-only install needs: the modules ``import laminar_client`` loads, and
``laminar node start``'s message when the server's dependencies are missing.

The wheel installed into fresh venvs (``laminar[client]`` alone, ``[server,spark]``) is
tested in ``tests/dist`` (marker ``dist``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from laminar import cli
from laminar.server import cli as server_cli

CLIENT_MUST_NOT_LOAD = (
    "laminar.server",
    "laminar.segment",
    "laminar.replica",
    "laminar.membership",
    "laminar_spark",
    "pyspark",
    "pyarrow",
    "numpy",
    "uvloop",
    "prometheus_client",
)
"""The server's packages, Spark and Arrow (and numpy, which only the Arrow conversion
and large columnar decodes need: imported on first use), and prometheus_client (the
``metrics`` extra: imported by ``register_metrics`` only)."""


def loaded_modules(statement: str, cwd: Path) -> set[str]:
    """The modules in ``sys.modules`` after ``statement``, in a fresh interpreter."""
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    output = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(output))


def under(modules: set[str], package: str) -> set[str]:
    return {name for name in modules if name == package or name.startswith(package + ".")}


def test_import_laminar_client_loads_no_server_spark_or_arrow(tmp_path: Path) -> None:
    modules = loaded_modules("import laminar_client", tmp_path)
    assert "laminar_client.producer" in modules and "laminar_client.consumer" in modules
    loaded = {package: sorted(under(modules, package)) for package in CLIENT_MUST_NOT_LOAD}
    assert {package: found for package, found in loaded.items() if found} == {}


def test_the_spark_connector_loads_no_server(tmp_path: Path) -> None:
    """``laminar[spark]`` without ``[server]`` is enough: no module of the connector
    (the offline reader included: it needs only the segment format) loads the node or
    what only the ``server`` extra installs."""
    modules = loaded_modules(
        "import pyspark_laminar, laminar_spark.offline, laminar_spark.reader, "
        "laminar_spark.stream, laminar_spark.writer, laminar_spark.producing",
        tmp_path,
    )
    assert "pyspark" in modules and "laminar_spark.offline" in modules
    assert sorted(under(modules, "laminar.server") | under(modules, "uvloop")) == []


def test_the_client_commands_load_no_server(tmp_path: Path) -> None:
    """``laminar_cli``, with its whole parser built, loads no node module: only the
    console script, ``laminar.cli``, adds the server's ``node`` commands."""
    modules = loaded_modules("from laminar_cli.app import build_parser\nbuild_parser()", tmp_path)
    assert "laminar_cli.cluster" in modules and "laminar_client" in modules
    assert sorted(under(modules, "laminar.server") | under(modules, "laminar_spark")) == []


def test_the_arrow_conversion_still_loads_numpy_when_asked(tmp_path: Path) -> None:
    """The lazy import is where it is used: ``to_arrow`` still gets numpy and pyarrow."""
    modules = loaded_modules(
        "import laminar_client\nfrom laminar_client.arrow import arrow_schema\narrow_schema()",
        tmp_path,
    )
    assert "numpy" in modules and "pyarrow" in modules


def test_node_start_without_the_server_dependencies_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(server_cli, "SERVER_MODULES", ("grpc", "no_such_module_for_the_test"))
    code = cli.main(["node", "start", "--data-dir", str(tmp_path), "--preset", "local"])
    assert code == 2
    error = capsys.readouterr().err
    assert error.strip().splitlines() == [
        "laminar node: a node needs the server's dependencies, not installed here "
        "(no_such_module_for_the_test): pip install 'laminar[server]'"
    ]
    assert not any(tmp_path.iterdir())  # it stopped before touching the data dir
