"""Scale scenarios of the replication simulation: thousands of groups on a few nodes.

    .venv/bin/python -m tests.sim.scale --groups 3000 --scenario crash --seeds 3
    .venv/bin/python -m tests.sim.scale --scenario overload --liveness both
    .venv/bin/python -m tests.sim.scale --scenario all --groups 1000

Prints each run's figures (see ``ScaleResult`` in ``laminar.testing.scale_sim``):
settle time, elections (per group and per group whose leader the fault took),
time until every group took a write again, the nodes' loop lag and slowness. The
exit status is 1 when a run broke safety or missed a bound. The overload scenario
runs with node-level liveness and without it (``--liveness both``, its default),
to show what the node-level signals change.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from laminar.testing.scale_sim import SCENARIOS, ScaleOptions, ScaleResult, run_scenario


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.sim.scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="crash")
    parser.add_argument("--groups", type=int, default=3_000, help="groups (default 3000)")
    parser.add_argument("--nodes", type=int, default=3, help="nodes (default 3)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds (default 1)")
    parser.add_argument("--start", type=int, default=1, help="first seed (default 1)")
    parser.add_argument(
        "--liveness",
        choices=("node", "group", "both"),
        help="node-level liveness, group-only, or both (default: both for overload)",
    )
    parser.add_argument("--write-rate", type=float, default=200.0, help="writes/s (200)")
    parser.add_argument("--grace-ms", type=int, default=10_000, help="move grace (10000)")
    parser.add_argument("--pause-ms", type=int, default=4_000, help="pause length (4000)")
    parser.add_argument("--hog-factor", type=float, default=8.0, help="CPU slow-down (8)")
    parser.add_argument("--hog-ms", type=int, default=6_000, help="CPU hog length (6000)")
    parser.add_argument("--hog-one", action="store_true", help="hog one node, not all")
    parser.add_argument("--rejoin", action="store_true", help="crash: restart the node")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.groups < 1:
        parser.error("--seeds and --groups must be at least 1")
    options = ScaleOptions(
        groups=args.groups,
        nodes=args.nodes,
        write_rate=args.write_rate,
        move_grace_ms=args.grace_ms,
        pause_ms=args.pause_ms,
        hog_factor=args.hog_factor,
        hog_ms=args.hog_ms,
        hog_all=not args.hog_one,
        rejoin=args.rejoin,
    )
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    failed = 0
    for scenario in scenarios:
        liveness = args.liveness or ("both" if scenario == "overload" else "node")
        modes = (True, False) if liveness == "both" else (liveness == "node",)
        for seed in range(args.start, args.start + args.seeds):
            for node_liveness in modes:
                result = run_scenario(scenario, seed, replace(options, node_liveness=node_liveness))
                print("\n".join(result.lines()), flush=True)
                failed += _failed(result)
    return 1 if failed else 0


def _failed(result: ScaleResult) -> bool:
    return bool(result.violations or (result.failures and result.node_liveness))


if __name__ == "__main__":
    sys.exit(main())
