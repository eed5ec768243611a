"""Seed sweeps of the operator scenarios on whole simulated nodes (``test_node_sim``).

    .venv/bin/python -m tests.sim.node --seeds 100 [--start 0] [--lossy] [--scenario NAME]
    .venv/bin/python -m tests.sim.node --replay 25 --scenario rolling --lossy [--trace]

A sweep runs each scenario's test for every seed and prints every failing seed with
its assertion, then a summary line; the exit status is 1 when any seed failed.
``--replay`` runs one seed again (the same seed always gives the same run) and, with
``--trace``, prints the simulator's trace (member events, roles, configurations,
operator commands, crashes).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable

from laminar.testing.sim import LinkConfig, Simulator
from tests.sim.test_node_sim import (
    CLEAN,
    LOSSY,
    test_a_node_returning_at_a_new_address,
    test_drain_moves_replicas_away_one_member_at_a_time,
    test_maintenance_keeps_replicas_through_a_stop_past_the_move_grace,
    test_rolling_restart_moves_no_replica_and_keeps_every_partition_writable,
    test_without_maintenance_the_same_stop_moves_replicas_away,
)

SCENARIOS: dict[str, Callable[[int, LinkConfig], None]] = {
    "maintenance": test_maintenance_keeps_replicas_through_a_stop_past_the_move_grace,
    "rolling": test_rolling_restart_moves_no_replica_and_keeps_every_partition_writable,
    "control": lambda seed, _: test_without_maintenance_the_same_stop_moves_replicas_away(seed),
    "drain": lambda seed, _: test_drain_moves_replicas_away_one_member_at_a_time(seed),
    "new-address": lambda seed, _: test_a_node_returning_at_a_new_address(seed),
}
"""Scenario name -> its test (the last three run on a clean network only)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim.node", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=50, help="how many seeds (default 50)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="(default: all)"
    )
    parser.add_argument("--lossy", action="store_true", help="2%% loss, 1-20 ms delays")
    parser.add_argument("--replay", type=int, help="run only this seed")
    parser.add_argument("--trace", action="store_true", help="with --replay: print the trace")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    logging.disable(logging.CRITICAL)  # the nodes' own log lines: see --trace
    link = LOSSY if args.lossy else CLEAN
    names = args.scenario or sorted(SCENARIOS)
    if args.replay is not None:
        if args.trace:
            _print_trace()
        return max(_run(name, args.replay, link) for name in names)
    failed = 0
    started = time.perf_counter()
    for name in names:
        for seed in range(args.start, args.start + args.seeds):
            failed += _run(name, seed, link)
    elapsed = time.perf_counter() - started
    runs = len(names) * args.seeds
    print(f"{runs} runs ({', '.join(names)}): {failed} failed, {elapsed:.1f} s")
    return 1 if failed else 0


def _run(name: str, seed: int, link: LinkConfig) -> int:
    try:
        SCENARIOS[name](seed, link)
    except AssertionError as error:
        print(f"{name} seed {seed} FAILED: {str(error)[:300]}", flush=True)
        return 1
    return 0


def _print_trace() -> None:
    original = Simulator._record

    def record(simulator: Simulator, line: str) -> None:
        print(f"{simulator.now_ms:>7} {line}")
        original(simulator, line)

    Simulator._record = record  # type: ignore[method-assign]


if __name__ == "__main__":
    sys.exit(main())
