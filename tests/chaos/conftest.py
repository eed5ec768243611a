"""Options of the chaos tests (``pytest -m chaos tests/chaos --duration 600 --chaos-seed N``).

The options are registered here, so the ``tests/chaos`` path must be on the command
line for pytest to know them. A run's pytest timeout grows with ``--duration``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DEFAULT_DURATION_S = 60.0
HERE = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos tests (tests/chaos, root only)")
    group.addoption(
        "--duration",
        type=float,
        default=DEFAULT_DURATION_S,
        help=f"seconds of faults in a chaos run (default {DEFAULT_DURATION_S:.0f})",
    )
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help="seed of the fault plan, to replay a run (default: random, printed)",
    )


def run_timeout_s(duration_s: float) -> float:
    """Bound on a whole run: start-up, faults (restarts make them run over), healing
    and settling deadlines, the final read."""
    return 1.5 * duration_s + 420


def chaos_duration_s(config: pytest.Config) -> float:
    return float(config.getoption("--duration", default=DEFAULT_DURATION_S))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timeout_s = run_timeout_s(chaos_duration_s(config)) + 60
    for item in items:
        if item.get_closest_marker("chaos") and HERE in item.path.parents:
            item.add_marker(pytest.mark.timeout(timeout_s))
