"""Placement benchmark: full build, incremental join/leave, disruption and balance.

Run from the repository root::

    .venv/bin/python -m bench.placement_bench [--runs N]

Prints a table of medians over ``--runs`` repetitions (the machine is small and
noisy, so a single run says little), then one JSON object as the last line.
Targets: full_s_10k_x_100 <= 2, incremental_*_ms_10k_x_100 <= 50,
moved_fraction_join_vs_ideal <= 1.1, leader_share_max_error_pp <= 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from laminar.placement import AssignmentTable, PlacementMember, diff, partition_key

PARTITION_COUNT = 10_000
MEMBER_COUNT = 100
ZONE_COUNT = 5
REPLICA_COUNT = 3
LEADER_PARTITION_COUNT = 100_000
LEADER_WEIGHTS = (1.0, 1.0, 2.0, 4.0, 8.0)


def _keys(count: int) -> list[str]:
    return [partition_key(f"topic-{index % 20}", index // 20) for index in range(count)]


def _members() -> list[PlacementMember]:
    return [
        PlacementMember(f"node-{index:03d}", 1.0, f"zone-{index % ZONE_COUNT}")
        for index in range(MEMBER_COUNT)
    ]


def _seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _one_run() -> dict[str, float]:
    keys = _keys(PARTITION_COUNT)
    members = _members()
    started = time.perf_counter()
    table = AssignmentTable.build(keys, members, REPLICA_COUNT)
    full_s = time.perf_counter() - started

    joiner = PlacementMember(f"node-{MEMBER_COUNT:03d}", 1.0, "zone-0")
    started = time.perf_counter()
    joined = table.with_member(joiner)
    join_ms = 1000.0 * (time.perf_counter() - started)
    leave_ms = 1000.0 * _seconds(lambda: table.without_member("node-042"))

    moved_slots = sum(len(move.added) for move in diff(table, joined))
    ideal_slots = REPLICA_COUNT * PARTITION_COUNT / (MEMBER_COUNT + 1)

    leader_members = [
        PlacementMember(f"node-{index}", weight, f"zone-{index}")
        for index, weight in enumerate(LEADER_WEIGHTS)
    ]
    leader_table = AssignmentTable.build(_keys(LEADER_PARTITION_COUNT), leader_members, 1)
    leader_counts = leader_table.leader_counts()
    leader_error_pp = max(
        abs(
            100.0 * leader_counts[member.node_id] / LEADER_PARTITION_COUNT
            - 100.0 * member.weight / sum(LEADER_WEIGHTS)
        )
        for member in leader_members
    )
    return {
        "full_s_10k_x_100": full_s,
        "incremental_join_ms_10k_x_100": join_ms,
        "incremental_leave_ms_10k_x_100": leave_ms,
        "moved_fraction_join_vs_ideal": moved_slots / ideal_slots,
        "leader_share_max_error_pp": leader_error_pp,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="repetitions; medians are reported")
    arguments = parser.parse_args()
    runs = [_one_run() for _ in range(max(1, arguments.runs))]
    medians = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
    targets = {
        "full_s_10k_x_100": 2.0,
        "incremental_join_ms_10k_x_100": 50.0,
        "incremental_leave_ms_10k_x_100": 50.0,
        "moved_fraction_join_vs_ideal": 1.1,
        "leader_share_max_error_pp": 1.0,
    }
    print(f"placement benchmark: median of {len(runs)} runs")
    print(f"{'metric':<45} {'median':>10} {'min':>10} {'max':>10} {'target':>8}")
    for name, median in medians.items():
        values = [run[name] for run in runs]
        target = f"<= {targets[name]:g}" if name in targets else "-"
        print(f"{name:<45} {median:>10.4f} {min(values):>10.4f} {max(values):>10.4f} {target:>8}")
    print(json.dumps({name: round(value, 4) for name, value in medians.items()}))


if __name__ == "__main__":
    main()
