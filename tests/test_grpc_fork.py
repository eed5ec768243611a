"""laminar.grpc_fork: gRPC's fork handlers are off once Laminar is imported.

The end-to-end proof (a SparkSession started after clients were used) is
``tests/spark/test_spark_after_client.py``; these check the rule and the import order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from laminar.grpc_fork import (
    FORK_SUPPORT_VARIABLE,
    GRPC_CORE_MODULE,
    turn_off_grpc_fork_handlers,
)


def test_unset_becomes_false_without_a_warning() -> None:
    environ: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert turn_off_grpc_fork_handlers(environ, {}) is True
    assert environ == {FORK_SUPPORT_VARIABLE: "false"}


@pytest.mark.parametrize("value", ["true", "1", "false", ""])
def test_a_value_the_user_set_is_kept(value: str) -> None:
    environ = {FORK_SUPPORT_VARIABLE: value}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert turn_off_grpc_fork_handlers(environ, {GRPC_CORE_MODULE: object()}) is False
    assert environ == {FORK_SUPPORT_VARIABLE: value}


def test_grpc_imported_first_is_too_late_and_says_so() -> None:
    environ: dict[str, str] = {}
    with pytest.warns(RuntimeWarning, match="grpc was imported before laminar"):
        assert turn_off_grpc_fork_handlers(environ, {GRPC_CORE_MODULE: object()}) is True
    assert environ == {FORK_SUPPORT_VARIABLE: "false"}


def test_importing_the_client_turns_them_off_before_grpc_is_imported() -> None:
    """A fresh interpreter, as an application starts: ``import laminar_client`` must
    reach ``laminar``'s import before any of its modules imports grpc (``-W error``
    turns the too-late warning into a failure)."""
    env = {k: v for k, v in os.environ.items() if k != FORK_SUPPORT_VARIABLE}
    script = (
        "import os, sys; import laminar_client; "
        f"print(os.environ[{FORK_SUPPORT_VARIABLE!r}], {GRPC_CORE_MODULE!r} in sys.modules)"
    )
    child = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["false", "True"]
