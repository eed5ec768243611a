"""The test tiers (tests/tiers.py) and their guard (tests/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import TierViolationError
from tests.tiers import PROCESS_DIRECTORIES, PROCESS_MODULES, SIM_DIRECTORIES, tier_of

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_module_and_directory_exists() -> None:
    for path in sorted(PROCESS_MODULES | PROCESS_DIRECTORIES | SIM_DIRECTORIES):
        assert (ROOT / path).exists(), f"tests/tiers.py names {path}, which is gone"


def test_tier_of_follows_directories_names_and_the_table() -> None:
    assert tier_of("tests/sim/test_replica_sim.py") == "sim"
    assert tier_of("tests/spark/test_reader.py") == "process"
    assert tier_of("tests/server/test_node_inprocess.py") == "process"
    assert tier_of("tests/client/test_groups_processes.py") == "process"
    assert tier_of("tests/test_cli.py") == "process"
    assert tier_of("tests/segment/test_log.py") == "unit"
    assert tier_of("tests/test_tiers.py") == "unit"


def test_this_test_is_in_the_unit_tier(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("process") is None


def test_a_unit_test_that_starts_a_process_fails(request: pytest.FixtureRequest) -> None:
    with pytest.raises(TierViolationError, match="is a unit test but starts a child process"):
        subprocess.run(["true"], check=False)
    assert len(request.node.tier_violations) == 1  # the guard fails the test at teardown
    request.node.tier_violations.clear()  # (this one meant to do it)


def test_a_unit_test_that_starts_a_node_fails(request: pytest.FixtureRequest) -> None:
    from laminar.server.node import Node

    with pytest.raises(TierViolationError, match="is a unit test but starts a Node"):
        Node()  # type: ignore[call-arg]
    request.node.tier_violations.clear()


@pytest.mark.process
def test_a_process_test_may_start_a_process() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0
