"""Shared hooks for the server tests: remember each phase's report on the test item.

Fixtures that own node processes read ``item.report_call`` in their teardown to
print the tail of every node log when the test failed (pytest shows it under
"Captured stdout teardown").
"""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
