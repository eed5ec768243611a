"""Benchmark of the replication core and its simulator.

Run: ``.venv/bin/python -m bench.replica_sim_bench [--quick] [--repeat N]``

* ``seeds_per_min``: full fault-injection seeds (``tests.sim`` workload) per minute.
* ``election_p50_ms`` / ``election_p99_ms``: simulated time from the crash of a
  leader to a new leader whose no-op is committed (it accepts writes), with the
  default (``lan``) timing and no hint from membership; ``election_p99_vs_timeout``
  divides by the maximum election timeout.
* ``core_appends_s``: records per second through a leader and two followers' cores
  exchanging messages in memory (no simulator), 1,000-record batches of 100-byte
  values, ``acks=all``; what the consensus logic itself costs.

Throughput figures are medians of ``--repeat`` runs. Prints a table, then one JSON
object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import deque

from laminar.records import encode_batch
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore
from laminar.replica.messages import Outbound
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.memory import MemoryLog
from laminar.testing.replica_sim import Cluster, SeedOptions, run_seed

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100


def seeds_per_min(seeds: int) -> float:
    started = time.perf_counter()
    for seed in range(seeds):
        # Without keyed compaction (which the seeds decide for half of them now):
        # the figure stays comparable with earlier runs.
        result = run_seed(10_000 + seed, SeedOptions(compaction=False))
        assert not result.violations, (seed, result.violations)
    return seeds / (time.perf_counter() - started) * 60


def election_times_ms(runs: int) -> list[int]:
    """One leader crash per run, at a random moment of a steady 3-node group."""
    times = []
    config = ReplicaConfig.lan()
    for seed in range(runs):
        cluster = Cluster(
            seed, SeedOptions(nodes=3, partitions=1, faults=False, config=config, compaction=False)
        )
        sim = cluster.sim
        assert sim.run_for(30_000, lambda c=cluster: _stable_leader(c) is not None)
        sim.run_for(cluster.rng.randint(0, 2_000))
        leader = _stable_leader(cluster)
        assert leader is not None
        old = str(leader.node_id)
        sim.crash(old)
        crashed_at = sim.now_ms

        def elected(c: Cluster = cluster, old: str = old) -> bool:
            new = _stable_leader(c)
            return new is not None and new.node_id != old

        assert sim.run_for(60_000, elected), f"seed {seed}: no new leader"
        times.append(sim.now_ms - crashed_at)
    return times


def _stable_leader(cluster: Cluster) -> ReplicaCore | None:
    leader = cluster.leader_of(0)
    if leader is None or leader.high_watermark <= leader._term_start_offset:
        return None
    return leader


def core_appends_s(batches: list[bytes]) -> float:
    """Records/s committed by a leader and two followers passing messages directly."""
    nodes = (NodeId("a"), NodeId("b"), NodeId("c"))
    group = GroupConfig(nodes)
    config = ReplicaConfig.lan()
    storages = {node: MemoryLog(fsync=False) for node in nodes}
    cores = {
        node: ReplicaCore(
            node, storages[node], config, now_ms=0, rng=random.Random(index), initial=group
        )
        for index, node in enumerate(nodes)
    }
    wire: deque[tuple[NodeId, Outbound]] = deque()
    answered = 0

    def pump() -> None:
        nonlocal answered
        while True:
            for node, core in cores.items():
                while core.has_ready():
                    ready = core.ready()
                    if ready.sync:
                        storages[node].sync()
                    wire.extend((node, m) for m in ready.early_messages + ready.messages)
                    answered += len(ready.replies)
                    core.advance(ready)
            if not wire:
                return
            while wire:
                source, outbound = wire.popleft()
                cores[outbound.destination].step(source, outbound.message, now)

    # The first node of the founding configuration leads it from the start (term 1);
    # ticking it past an election timeout before any exchange made it step down
    # (check-quorum), which broke this bench unnoticed.
    now = 0
    pump()
    leader = cores[nodes[0]]
    assert leader.role is Role.LEADER
    started = time.perf_counter()
    window = 16  # produce requests in flight, like a pipelining client
    sent = 0
    while sent < len(batches):
        for batch in batches[sent : sent + window]:
            leader.propose(sent, batch, Acks.ALL, now)
            sent += 1
        pump()
    elapsed = time.perf_counter() - started
    assert answered == len(batches), answered
    assert leader.high_watermark == leader.end_offset
    return len(batches) * RECORDS_PER_BATCH / elapsed


def make_batches(count: int) -> list[bytes]:
    base = os.urandom(VALUE_BYTES * RECORDS_PER_BATCH + count)
    return [
        encode_batch(
            [
                base[i + VALUE_BYTES * r : i + VALUE_BYTES * (r + 1)]
                for r in range(RECORDS_PER_BATCH)
            ]
        )
        for i in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and batches")
    parser.add_argument("--repeat", type=int, default=3, help="runs per throughput figure")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    seeds = 20 if args.quick else 100
    elections = 100 if args.quick else 400
    batch_count = 500 if args.quick else 3000

    results: dict[str, float] = {}
    results["seeds_per_min"] = statistics.median(seeds_per_min(seeds) for _ in range(args.repeat))
    times = sorted(election_times_ms(elections))
    results["election_p50_ms"] = times[len(times) // 2]
    results["election_p99_ms"] = times[min(len(times) - 1, int(len(times) * 0.99))]
    results["election_p99_vs_timeout"] = (
        results["election_p99_ms"] / ReplicaConfig.lan().election_timeout_max_ms
    )
    batches = make_batches(batch_count)
    results["core_appends_s"] = statistics.median(
        core_appends_s(batches) for _ in range(args.repeat)
    )
    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.2f}")
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
