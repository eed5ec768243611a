"""Seed sweeps of the replication simulation.

    .venv/bin/python -m tests.sim.replica --seeds 10000 [--start 0] [--damage] [--no-heal]
    .venv/bin/python -m tests.sim.replica --seeds 200 --compaction  # compaction in every seed
    .venv/bin/python -m tests.sim.replica --replay 1234 [--trace]

A sweep prints every failing seed with its first violations, then a summary line;
the exit status is 1 when any seed failed. ``--replay`` runs one seed again (the
same seed always gives the same run) and, with ``--trace``, prints its event trace.
"""

from __future__ import annotations

import argparse
import sys
import time

from laminar.testing import replica_sim
from laminar.testing.replica_sim import CompactionStats, SeedOptions, run_seed
from laminar.testing.sim import Simulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim.replica", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--replay", type=int, help="run only this seed")
    parser.add_argument("--trace", action="store_true", help="with --replay: print the trace")
    parser.add_argument(
        "--no-faults", action="store_true", help="no random faults (reconfiguration only)"
    )
    parser.add_argument(
        "--damage",
        action="store_true",
        help="disk damage in every seed not reconfigured (default: half of those)",
    )
    parser.add_argument(
        "--no-heal",
        action="store_true",
        help="do not tell the cores about damage (the repair rule off: expect lost records)",
    )
    compaction = parser.add_mutually_exclusive_group()
    compaction.add_argument(
        "--compaction",
        action="store_true",
        help="keyed compaction in every seed (default: half of them, by the seed)",
    )
    compaction.add_argument("--no-compaction", action="store_true", help="no keyed compaction")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    options = SeedOptions(
        faults=not args.no_faults,
        damage=True if args.damage else None,
        heal=not args.no_heal,
        compaction=True if args.compaction else False if args.no_compaction else None,
    )
    if args.replay is not None:
        return _replay(args.replay, options, trace=args.trace)
    failed = compacting = applied = 0
    stats = CompactionStats()
    started = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed, options)
        compacting += result.compaction
        applied += result.compactions_applied
        stats.add(result.compaction_stats)
        if result.violations:
            failed += 1
            print(f"seed {seed} FAILED: {result.violations[:3]}", flush=True)
    elapsed = time.perf_counter() - started
    print(
        f"{args.seeds} seeds from {args.start}: {failed} failed, {elapsed:.1f} s "
        f"({args.seeds / elapsed * 60:.0f} seeds/min)"
    )
    if compacting:
        print(
            f"keyed compaction in {compacting} seeds: {applied} commands applied "
            f"(all replicas), {stats.jobs} jobs, {stats.passes} passes "
            f"({stats.multi_pass_jobs} jobs in several, at most {stats.passes_max}), "
            f"{stats.crashes_mid_compaction} crashes mid-job "
            f"({stats.swaps_before_crash} segments swapped before them), "
            f"{stats.extra_triggers} extra commands"
        )
    return 1 if failed else 0


def _replay(seed: int, options: SeedOptions, *, trace: bool) -> int:
    if trace:
        original = Simulator._record

        def record(simulator: Simulator, line: str) -> None:
            print(f"{simulator.now_ms:>7} {line}")
            original(simulator, line)

        replica_sim.Simulator._record = record  # type: ignore[method-assign]
    result = run_seed(seed, options)
    print(
        f"seed {seed}: {len(result.violations)} violations, acked {result.acked}, "
        f"reads {result.reads}, elections {result.elections}, trace {result.trace_hash}"
    )
    if result.compaction:
        print(
            f"  keyed compaction: {result.compactions_applied} applied, {result.compaction_stats}"
        )
    for violation in result.violations:
        print(f"  {violation}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
