"""Benchmark of scale: thousands of partitions on 3 local nodes (issue 17).

Run: ``.venv/bin/python -m bench.scale_bench [--partitions 3000] [--preset local]
[--idle-s 20] [--no-failover]``

Three node processes (``--preset``, fsync on) on 127.0.0.x
(:class:`~laminar.testing.processes.ProcessCluster`); this process is the client.
One topic of ``--partitions`` partitions with replication factor 3 is created, so
every node holds ``--partitions`` replicas. Figures:

* ``settle_s_<N>``: from the create call until every partition has a leader, 3
  voters and no under-replicated flag (``DescribeCluster`` from every node,
  polled every half second: each description costs the nodes ~0.2 s).
* ``elections_per_partition_<N>``: the mean leader term over the partitions once
  settled (each election raises a group's term by one; a leader installed at
  creation holds term 1), and again after the idle period
  (``elections_per_partition_idle_<N>``).
* ``idle_cpu_pct_per_node_<N>``: the mean over the nodes of their CPU time (user +
  system, from ``/proc/<pid>/stat``) over ``--idle-s`` seconds starting 5 s after
  settling, as a percentage of one core; ``idle_cpu_pct_per_node_empty`` the same
  before the topic exists (the in-run baseline: gossip, keepalives, timers).
* ``rss_kb_per_replica``: (resident set after settling − before creating) / replicas
  per node, mean over the nodes; ``open_files_per_replica`` the same with the open
  file descriptors (``/proc/<pid>/fd``: one per segment file; the node raises its
  soft ``RLIMIT_NOFILE`` at start).
* ``role_change_log_lines``: lines about role changes in the busiest node's log
  since the create call: one per change while there are few, one summary line per
  second beyond 20 (readable logs at scale).
* ``failover_all_s_<N>``: SIGKILL of one node, then one record sent to every
  partition at once through the real :class:`~laminar_client.Producer`
  (``acks="all"``, default retries); the time from the kill until the last of them
  is acknowledged. The producer's metadata is warmed before the kill; the
  p50/p90/p99 of the acknowledgements are printed too.
* ``scrape_ms_<N>``: one ``/metrics`` scrape of a node holding ``N`` replicas with
  ``partition_series = none`` (the median of 5, after settling and the idle window);
  ``scrape_ms_leaders_<N>`` and ``scrape_ms_all_<N>`` the same on the nodes set to
  ``leaders`` and ``all`` (node 0 none, node 1 leaders, node 2 all).
  ``metrics_series_<N>`` (and ``_leaders``, ``_all``): the samples one scrape holds.

Targets (issue 17): settle ≤ 30 s, elections per partition ≤ 1.2, idle CPU ≤ 1 %,
failover ≤ 5 s; issue 32: scrape ≤ 50 ms (series off). Prints a table, the targets
missed, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from laminar_client import Client

from laminar.testing.processes import (
    NodeProcess,
    ProcessCluster,
    wait_for,
    write_every_partition_after_kill,
)
from laminar.testing.scrape import scrape

TOPIC = "scale"
SERIES_SETTINGS = ("none", "leaders", "all")
"""``[metrics] partition_series`` of node 0, 1 and 2."""
SCRAPES = 5
_TICKS_S = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_S


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as file:
        return int(file.read().split()[1]) * _PAGE_KB


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def pid_of(node: NodeProcess) -> int:
    assert node.process is not None
    return node.process.pid


def start_cluster(cluster: ProcessCluster, root: Path) -> list[str]:
    """Three nodes seeing each other, node ``i`` with ``partition_series`` set to
    :data:`SERIES_SETTINGS` ``[i]``; their gRPC addresses."""
    for index, setting in enumerate(SERIES_SETTINGS):
        path = root / f"metrics{index}.toml"
        path.write_text(f'[metrics]\npartition_series = "{setting}"\n', encoding="utf-8")
        node = cluster.add_node(bootstrap=index == 0, extra_args=["--config", str(path)])
        cluster.wait_ready(node)
    wait_for(cluster.all_see_each_other, 60, "every node to see 3 alive members")
    return [node.grpc for node in cluster.nodes]


def scrape_figures(cluster: ProcessCluster, n: int) -> dict[str, float]:
    """``scrape_ms`` and ``metrics_series`` of each node (module docstring)."""
    results: dict[str, float] = {}
    for node, setting in zip(cluster.nodes, SERIES_SETTINGS, strict=True):
        suffix = f"_{n}" if setting == "none" else f"_{setting}_{n}"
        times_ms = []
        for _ in range(SCRAPES):
            started = time.perf_counter()
            samples = scrape(node.metrics, timeout_s=30)
            times_ms.append((time.perf_counter() - started) * 1000)
        results[f"scrape_ms{suffix}"] = statistics.median(times_ms)
        results[f"metrics_series{suffix}"] = samples.series()
    return results


def settled(client: Client, partitions: int) -> tuple[bool, list[int]]:
    """Whether every partition is led, with 3 voters, fully in sync; and the terms."""
    description = client.describe_cluster(timeout_s=30)
    mine = [p for p in description.partitions if p.topic == TOPIC]
    terms = [p.term for p in mine if p.leader is not None]
    done = len(mine) == partitions and all(
        p.leader is not None and len(p.voters) == 3 and not p.under_replicated for p in mine
    )
    return done, terms


SETTLE_POLL_S = 0.5
"""Pause between two checks of the settling (the figure's resolution)."""


def idle_cpu(pids: list[int], seconds: float) -> float:
    """The nodes' mean CPU use over ``seconds``, in percent of one core."""
    before = [cpu_s(pid) for pid in pids]
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return statistics.fmean(
        100 * (cpu_s(pid) - used) / elapsed for pid, used in zip(pids, before, strict=True)
    )


def role_change_lines(node: NodeProcess, since_bytes: int) -> int:
    with open(node.log_path, "rb") as file:
        file.seek(since_bytes)
        return sum(1 for line in file if b"RoleChanged" in line or b"replica events:" in line)


def failover(
    cluster: ProcessCluster,
    bootstrap: list[str],
    partitions: int,
    victim: NodeProcess,
    timeout_s: float,
) -> tuple[float, int]:
    """Seconds from SIGKILL of ``victim`` until every partition acknowledged a write
    (inf when some were not within ``timeout_s``), and how many were."""
    survivors = [address for address in bootstrap if address != victim.grpc]
    writes = write_every_partition_after_kill(
        cluster, survivors, TOPIC, partitions, victim, delivery_timeout_s=timeout_s
    )
    acked, errors = writes.acked, writes.errors
    times = sorted(at - writes.killed_at for at in acked.values())
    if times:
        quantiles = {q: times[min(len(times) - 1, int(q * len(times)))] for q in (0.5, 0.9, 0.99)}
        print(
            "failover: acknowledged after "
            + ", ".join(f"p{int(q * 100)} {at:.2f} s" for q, at in quantiles.items())
            + f", last {times[-1]:.2f} s",
            flush=True,
        )
    if errors or len(acked) != partitions:
        print(f"failover: {len(acked)} of {partitions} acknowledged; errors: {errors[:2]}")
        return math.inf, len(acked)
    return times[-1], len(acked)


def run(args: argparse.Namespace) -> dict[str, float]:
    n = args.partitions
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as root:
        cluster = ProcessCluster(Path(root), preset=args.preset, metrics=True)
        try:
            bootstrap = start_cluster(cluster, Path(root))
            pids = [pid_of(node) for node in cluster.nodes]
            rss_before = [rss_kb(pid) for pid in pids]
            files_before = [open_files(pid) for pid in pids]
            log_offsets = [node.log_path.stat().st_size for node in cluster.nodes]
            results["idle_cpu_pct_per_node_empty"] = idle_cpu(pids, args.idle_s)
            with Client(bootstrap, timeout_s=60) as client:
                started = time.monotonic()
                client.create_topic(TOPIC, n, 3)
                terms: list[int] = []

                def all_settled() -> bool:
                    nonlocal terms
                    done, terms = settled(client, n)
                    if not done:  # a description of every partition costs the nodes
                        time.sleep(SETTLE_POLL_S)  # ~0.2 s: polled flat out, it slowed them
                    return done

                wait_for(all_settled, args.settle_timeout_s, f"{n} partitions to settle")
                results[f"settle_s_{n}"] = time.monotonic() - started
                results[f"elections_per_partition_{n}"] = statistics.fmean(terms)
                time.sleep(5)  # let the last groups quiesce
                cpu_before = [cpu_s(pid) for pid in pids]
                idle_started = time.monotonic()
                time.sleep(args.idle_s)
                elapsed = time.monotonic() - idle_started
                cpu_after = [cpu_s(pid) for pid in pids]
                per_node = [
                    100 * (after - before) / elapsed
                    for before, after in zip(cpu_before, cpu_after, strict=True)
                ]
                results[f"idle_cpu_pct_per_node_{n}"] = statistics.fmean(per_node)
                results["idle_cpu_pct_max_node"] = max(per_node)
                results["rss_kb_per_replica"] = statistics.fmean(
                    (rss_kb(pid) - before) / n for pid, before in zip(pids, rss_before, strict=True)
                )
                results["open_files_per_replica"] = statistics.fmean(
                    (open_files(pid) - before) / n
                    for pid, before in zip(pids, files_before, strict=True)
                )
                _, terms = settled(client, n)
                results[f"elections_per_partition_idle_{n}"] = statistics.fmean(terms)
            results.update(scrape_figures(cluster, n))
            results["role_change_log_lines"] = max(
                role_change_lines(node, offset)
                for node, offset in zip(cluster.nodes, log_offsets, strict=True)
            )
            report(results)
            if not args.no_failover:
                victim = cluster.nodes[-1]
                seconds, acked = failover(cluster, bootstrap, n, victim, args.failover_timeout_s)
                results[f"failover_all_s_{n}"] = seconds
                results["failover_acked"] = acked
        finally:
            cluster.close()
    return results


def report(results: dict[str, float]) -> None:
    """Print the figures so far (a long run shows its progress)."""
    width = max(len(name) for name in results)
    for name, value in results.items():
        print(f"{name:<{width}}  {value:.4g}", flush=True)


def missed_targets(results: dict[str, float], n: int) -> list[str]:
    targets = {
        f"settle_s_{n}": 30.0,
        f"elections_per_partition_{n}": 1.2,
        f"idle_cpu_pct_per_node_{n}": 1.0,
        f"failover_all_s_{n}": 5.0,
        f"scrape_ms_{n}": 50.0,
    }
    return [
        f"{name} = {results[name]:.3g} > {limit:g}"
        for name, limit in targets.items()
        if name in results and results[name] > limit
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__)
    parser.add_argument("--partitions", type=int, default=3000, help="partitions (3000)")
    parser.add_argument("--preset", default="local", choices=["local", "lan"])
    parser.add_argument("--idle-s", type=float, default=20.0, help="idle CPU window (20)")
    parser.add_argument("--settle-timeout-s", type=float, default=600.0)
    parser.add_argument("--no-failover", action="store_true", help="skip the SIGKILL part")
    parser.add_argument(
        "--failover-timeout-s", type=float, default=60.0, help="give up on a write after (60)"
    )
    args = parser.parse_args(argv)
    results = run(args)
    print("---")
    report(results)
    missed = missed_targets(results, args.partitions)
    print("targets missed: " + ("; ".join(missed) if missed else "none"))
    print(json.dumps({"preset": args.preset, "partitions": args.partitions, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
