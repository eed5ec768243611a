"""Seeded consumer-group simulation; more seeds: ``python -m tests.groups.group_sim``."""

from __future__ import annotations

import pytest

from tests.groups.group_sim import run_seed

SEEDS = 200


@pytest.mark.parametrize("block", range(8))
def test_group_simulation_invariants(block: int) -> None:
    per_block = SEEDS // 8
    for seed in range(block * per_block, (block + 1) * per_block):
        result = run_seed(seed)
        assert result.violations == [], f"seed {seed}: {result.violations[:5]}"


def test_simulation_exercises_the_faults() -> None:
    results = [run_seed(seed) for seed in range(20)]
    assert sum(r.fenced_zombie_commits for r in results) > 0
    assert sum(r.lapsed_leases for r in results) > 0  # resumed members that gave up
    assert sum(r.failovers for r in results) > 0
    assert sum(r.commits for r in results) > 500


def test_same_seed_same_run() -> None:
    assert run_seed(3) == run_seed(3)


def test_simulation_exercises_snapshots() -> None:
    results = [run_seed(seed) for seed in range(20)]
    assert sum(r.snapshots_complete for r in results) > 20
    assert sum(r.snapshots_torn for r in results) > 0
    assert sum(r.rebuilt_from_snapshot for r in results) > 10
