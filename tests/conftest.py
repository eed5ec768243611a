"""Test tiers (``tests/tiers.py``): each test gets one of ``unit``, ``sim``,
``process`` at collection, and a ``unit`` or ``sim`` test that starts a child process
or a node fails, so ``make test-fast`` stays in one process and fast."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.server import node as node_module  # imported before the guard patches
from tests.tiers import TIERS, tier_of

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        explicit = [name for name in TIERS if item.get_closest_marker(name) is not None]
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has more than one tier: {explicit}")
        if not explicit:
            path = Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
            item.add_marker(tier_of(path))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report on the item (``item.report_setup``, ``report_call``,
    ``report_teardown``): fixtures read them in teardown (a node fixture prints the
    node logs when the test failed)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


class TierViolationError(AssertionError):
    """A ``unit`` or ``sim`` test did what only a ``process`` test may."""


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("process") is not None:
        yield
        return
    tier = "sim" if request.node.get_closest_marker("sim") is not None else "unit"
    violations: list[str] = []
    request.node.tier_violations = violations  # tests/test_tiers.py checks the guard

    def refuse(what: str) -> TierViolationError:
        message = (
            f"{request.node.nodeid} is a {tier} test but {what}: mark it "
            "pytest.mark.process or list its module in tests/tiers.py PROCESS_MODULES"
        )
        violations.append(message)
        return TierViolationError(message)

    def execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> Any:
        raise refuse(f"starts a child process ({args!r})")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)

    def fork() -> int:
        raise refuse("forks")

    monkeypatch.setattr(os, "fork", fork)

    def node_init(self: Any, *args: Any, **kwargs: Any) -> None:
        raise refuse("starts a Node")

    monkeypatch.setattr(node_module.Node, "__init__", node_init)
    yield
    call = getattr(request.node, "report_call", None)
    if violations and (call is None or call.passed):  # else the test failed already
        pytest.fail(violations[0], pytrace=False)
