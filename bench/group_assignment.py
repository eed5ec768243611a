"""Figures of the consumer-group target assignment (laminar.groups.assignment).

    .venv/bin/python -m bench.group_assignment [--groups 1000] [--partitions 60]

Prints, over many random group ids (members named like real member ids):

- ``join_moved_fraction``: partitions whose owner changes when a 4th member joins a
  group of 3, as a fraction of all partitions (ideal 1/4), mean and max; also the
  ratio mean / ideal (issue 16's target: <= 1.1). Computed as the group state
  does (the new target from the previous one, "sticky") and, for comparison,
  from the member set alone ("stateless");
- ``leave_extra_moved``: on a member leaving a group of 4, partitions that move
  although the leaver did not hold them (ideal 0), mean and max, both ways;
- ``skew``: max - min partitions per member at equal weights over 1..12 members and
  1..200 partitions (must be <= 1);
- ``assign_ms``: time of one assignment for a few group sizes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from laminar.groups.assignment import AssignmentMember, target_assignment


def _members(rng: random.Random, count: int) -> list[AssignmentMember]:
    return [AssignmentMember(f"member-{rng.getrandbits(64):016x}") for _ in range(count)]


def join_moved(groups: int, partition_count: int, seed: int, *, sticky: bool) -> list[float]:
    """Moved fraction when a 4th member joins 3, one value per random group id."""
    rng = random.Random(seed)
    partitions = [("orders", index) for index in range(partition_count)]
    fractions = []
    for _ in range(groups):
        group_id = f"group-{rng.getrandbits(64):016x}"
        members = _members(rng, 4)
        before = target_assignment(group_id, members[:3], partitions)
        after = target_assignment(group_id, members, partitions, before if sticky else None)
        moved = sum(before[partition] != after[partition] for partition in partitions)
        fractions.append(moved / partition_count)
    return fractions


def leave_extra_moved(groups: int, partition_count: int, seed: int, *, sticky: bool) -> list[int]:
    """Partitions not held by a leaving member that still move, one value per group."""
    rng = random.Random(seed)
    partitions = [("orders", index) for index in range(partition_count)]
    extras = []
    for _ in range(groups):
        group_id = f"group-{rng.getrandbits(64):016x}"
        members = _members(rng, 4)
        leaver = members[rng.randrange(4)]
        before = target_assignment(group_id, members, partitions)
        rest = [m for m in members if m != leaver]
        after = target_assignment(group_id, rest, partitions, before if sticky else None)
        extras.append(
            sum(
                before[partition] != leaver.key and before[partition] != after[partition]
                for partition in partitions
            )
        )
    return extras


def max_skew(seed: int) -> int:
    """Largest (max - min) load at equal weights over many small groups."""
    rng = random.Random(seed)
    worst = 0
    for member_count in range(1, 13):
        for partition_count in range(1, 201, 7):
            members = _members(rng, member_count)
            assignment = target_assignment(
                "skew", members, [("t", i) for i in range(partition_count)]
            )
            loads = [list(assignment.values()).count(member.key) for member in members]
            worst = max(worst, max(loads) - min(loads))
    return worst


def assign_ms(member_count: int, partition_count: int, seed: int) -> float:
    rng = random.Random(seed)
    members = _members(rng, member_count)
    started = time.perf_counter()
    target_assignment("timing", members, [("t", i) for i in range(partition_count)])
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.group_assignment")
    parser.add_argument("--groups", type=int, default=1000, help="random group ids (1000)")
    parser.add_argument("--partitions", type=int, default=60, help="partitions (60)")
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args(argv)
    for sticky in (True, False):
        how = "sticky" if sticky else "stateless"
        fractions = join_moved(args.groups, args.partitions, args.seed, sticky=sticky)
        mean = statistics.fmean(fractions)
        p99 = sorted(fractions)[int(0.99 * (len(fractions) - 1))]
        print(
            f"join_moved_fraction ({how}) 3->4 over {args.partitions} partitions, "
            f"{args.groups} groups: mean {mean:.4f} ({mean / 0.25:.3f}x ideal 0.25), "
            f"max {max(fractions):.4f}, p99 {p99:.4f}"
        )
        extras = leave_extra_moved(args.groups, args.partitions, args.seed, sticky=sticky)
        print(
            f"leave_extra_moved ({how}) 4->3: mean {statistics.fmean(extras):.2f} partitions "
            f"({statistics.fmean(extras) / args.partitions:.4f} of all), max {max(extras)}"
        )
    print(f"skew at equal weights (1-12 members, 1-200 partitions): max {max_skew(args.seed)}")
    for member_count, partition_count in ((4, 60), (16, 1000), (64, 4000), (100, 10_000)):
        print(
            f"assign_ms members={member_count} partitions={partition_count}: "
            f"{assign_ms(member_count, partition_count, args.seed):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
