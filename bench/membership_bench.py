"""Benchmark of SWIM + Lifeguard membership in the deterministic simulator.

Run: ``.venv/bin/python -m bench.membership_bench [--quick] [--seeds N]
[--only {sizes,false-dead}] [--sizes N,N,...]``

Every figure uses the ``lan()`` preset and is taken over ``--seeds`` seeds (20 by
default); times are simulated seconds. The simulated network delays each packet
by 1-5 ms. Per seed and cluster size n:

* a converged cluster of n nodes runs for 2 s (start-up gossip settles), then
  ``msgs_per_member_s`` counts every packet and push-pull stream sent in the next
  3 s, divided by n and by the window;
* one random node changes its weight: ``disseminate`` is the time until every
  other member has seen the update;
* another random node crashes: ``detect`` is the time until every live member
  has marked it dead.

``false_dead_per_node_hour``: n = 50 with 5% uniform packet loss in both
directions, and every 30 s one random member is paused for 1-2 s (as by SIGSTOP);
every "dead" verdict is false since nobody crashes. Counted as distinct
(member, incarnation) verdicts, divided by node-hours; once with Lifeguard and
once without (``_no_lifeguard``). Each seed simulates one hour (``--quick``: 60 s).

``--quick`` skips n = 1000 and finishes in well under 40 s. ``--only`` runs just
the per-size figures or just the false-dead figures; ``--sizes`` overrides the
cluster sizes. Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from laminar.membership import config as presets
from laminar.membership.config import MembershipConfig
from laminar.membership.core import MembershipCore, Output
from laminar.membership.member import EventKind, MemberEvent, NodeId
from laminar.testing.membership_sim import build_cluster, schedule_pauses, sim_address
from laminar.testing.sim import LinkConfig, Simulator

WARM_UP_MS = 2000
MESSAGE_WINDOW_MS = 3000
PHASE_DEADLINE_MS = 180_000
FALSE_DEAD_NODES = 50
FALSE_DEAD_LOSS = 0.05
PAUSE_EVERY_MS = 30_000
PAUSE_MIN_MS = 1000
PAUSE_MAX_MS = 2000


@dataclass
class Watcher:
    """Counts, per subject, which observers emitted a given event kind."""

    observers: dict[tuple[EventKind, NodeId], set[str]] = field(default_factory=dict)
    dead_verdicts: set[tuple[NodeId, int]] = field(default_factory=set)

    def __call__(self, observer: str, event: MemberEvent) -> None:
        key = (event.kind, event.member.node_id)
        self.observers.setdefault(key, set()).add(observer)
        if event.kind is EventKind.DEAD:
            self.dead_verdicts.add((event.member.node_id, event.member.incarnation))

    def count(self, kind: EventKind, subject: NodeId) -> int:
        return len(self.observers.get((kind, subject), ()))


@dataclass(frozen=True)
class Trial:
    msgs_per_member_s: float
    disseminate_s: float
    detect_s: float


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wait_for(simulator: Simulator, condition: Callable[[], bool], what: str) -> float:
    """Run until ``condition``; the simulated seconds it took."""
    started_ms = simulator.now_ms
    if not simulator.run_for(PHASE_DEADLINE_MS, condition):
        raise RuntimeError(f"seed {simulator.seed}: {what} not done in {PHASE_DEADLINE_MS} ms")
    return (simulator.now_ms - started_ms) / 1000


def run_trial(config: MembershipConfig, size: int, seed: int) -> Trial:
    watcher = Watcher()
    simulator = Simulator(seed)
    nodes = build_cluster(
        simulator, config, size, converged=True, on_event=watcher, trace_events=False
    )
    choice = random.Random(seed)
    updated, crashed = choice.sample(range(size), 2)

    simulator.run_for(WARM_UP_MS)
    sent_before = simulator.counters.sent
    simulator.run_for(MESSAGE_WINDOW_MS)
    sent = simulator.counters.sent - sent_before
    msgs_per_member_s = sent / size / (MESSAGE_WINDOW_MS / 1000)

    def change_weight(core: MembershipCore, now_ms: int) -> Output:
        return core.update_local(now_ms, weight=2.0)

    subject = NodeId(sim_address(updated))
    simulator.invoke(nodes[updated].address, nodes[updated].run_command(change_weight))
    disseminate_s = wait_for(
        simulator,
        lambda: watcher.count(EventKind.UPDATED, subject) >= size,  # itself included
        "dissemination",
    )

    victim = NodeId(sim_address(crashed))
    simulator.crash(nodes[crashed].address)
    detect_s = wait_for(
        simulator, lambda: watcher.count(EventKind.DEAD, victim) >= size - 1, "detection"
    )
    assert watcher.dead_verdicts == {(victim, 0)}, watcher.dead_verdicts
    return Trial(msgs_per_member_s, disseminate_s, detect_s)


def bench_size(config: MembershipConfig, size: int, seeds: int) -> dict[str, float]:
    trials = [run_trial(config, size, seed) for seed in range(1, seeds + 1)]
    detect = [trial.detect_s for trial in trials]
    disseminate = [trial.disseminate_s for trial in trials]
    return {
        f"detect_p50_s_n{size}": percentile(detect, 0.50),
        f"detect_p99_s_n{size}": percentile(detect, 0.99),
        f"disseminate_p50_s_n{size}": percentile(disseminate, 0.50),
        f"disseminate_p99_s_n{size}": percentile(disseminate, 0.99),
        f"msgs_per_member_s_n{size}": statistics.fmean(t.msgs_per_member_s for t in trials),
    }


def false_dead_verdicts(config: MembershipConfig, seed: int, duration_ms: int) -> int:
    watcher = Watcher()
    simulator = Simulator(seed, default_link=LinkConfig(loss=FALSE_DEAD_LOSS))
    nodes = build_cluster(
        simulator, config, FALSE_DEAD_NODES, converged=True, on_event=watcher, trace_events=False
    )
    schedule_pauses(
        simulator,
        nodes,
        random.Random(seed),
        until_ms=duration_ms,
        every_ms=PAUSE_EVERY_MS,
        pause_min_ms=PAUSE_MIN_MS,
        pause_max_ms=PAUSE_MAX_MS,
    )
    simulator.run_until(duration_ms)
    return len(watcher.dead_verdicts)


def bench_false_dead(seeds: int, duration_ms: int) -> dict[str, float]:
    node_hours = FALSE_DEAD_NODES * duration_ms / 3_600_000 * seeds
    results: dict[str, float] = {}
    for suffix, lifeguard in (("", True), ("_no_lifeguard", False)):
        config = replace(presets.lan(), lifeguard_enabled=lifeguard)
        verdicts = sum(
            false_dead_verdicts(config, seed, duration_ms) for seed in range(1, seeds + 1)
        )
        results[f"false_dead_per_node_hour{suffix}"] = verdicts / node_hours
    results["false_dead_node_hours"] = node_hours
    return results


def progress(what: str, started: float) -> None:
    print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip n=1000, short runs (< 40 s)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds per figure (default 20)")
    parser.add_argument(
        "--only", choices=("sizes", "false-dead"), help="run only this part of the benchmark"
    )
    parser.add_argument(
        "--sizes", help="comma-separated cluster sizes (default 10,100,1000; --quick 10,100)"
    )
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error("--seeds must be >= 1")
    sizes: tuple[int, ...] = (10, 100) if args.quick else (10, 100, 1000)
    if args.sizes:
        try:
            sizes = tuple(int(size) for size in args.sizes.split(","))
        except ValueError:
            parser.error("--sizes must be comma-separated integers")
        if any(size < 3 for size in sizes):
            parser.error("--sizes must be >= 3")

    started = time.perf_counter()
    config = presets.lan()
    results: dict[str, float] = {}
    if args.only != "false-dead":
        for size in sizes:
            results.update(bench_size(config, size, args.seeds))
            progress(f"n={size} done", started)
        if 10 in sizes and 1000 in sizes:
            results["msgs_n1000_vs_n10"] = (
                results["msgs_per_member_s_n1000"] / results["msgs_per_member_s_n10"]
            )
    if args.only != "sizes":
        results.update(bench_false_dead(args.seeds, 60_000 if args.quick else 3_600_000))
        progress("false dead done", started)
    results["seeds"] = args.seeds
    results["elapsed_s"] = time.perf_counter() - started

    width = max(len(key) for key in results)
    print(f"{'figure':<{width}}  value")
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.3f}")
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
