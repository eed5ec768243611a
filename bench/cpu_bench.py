"""CPU time per produce request, per node (issue 33, point 8): what a request costs,
measured in CPU rather than in wall throughput, which a busy 2-core machine blurs.

Run: ``.venv/bin/python -m bench.cpu_bench [--quick] [--repeat N] [--requests N]
[--inflight N] [--no-fsync] [--nodes-from DIR] [--profile DIR]``

Three nodes of ``python -m laminar.server node start --preset local`` on 127.0.0.x
(:class:`~laminar.testing.processes.ProcessCluster`), one topic of one partition,
replication factor 3. The workload is cluster_bench's produce phase: batches of
1,000 records of 100 bytes, encoded before timing, one batch per ``Produce`` call,
``acks=all``, ``--inflight`` calls (8) in flight on one grpc.aio channel to the
leader. After 100 untimed calls, each of ``--repeat`` runs (5; ``--quick`` 3) sends
``--requests`` calls (1,000; ``--quick`` 300) and reads, before and after, each node
process's CPU (the sum of its threads' time on a CPU, ``/proc/<pid>/task/*/schedstat``,
in ns: ``/proc/<pid>/stat``'s 10 ms ticks would resolve only 10 µs a request over
1,000 requests) and the bench process's own (``time.process_time``: the client,
its gRPC threads included).

Figures (medians over the runs; each run's value is printed too):

* ``cpu_us_per_request_leader``: the leader's CPU over the run / requests, in µs.
* ``cpu_us_per_request_leader_loop``: the part of it on the leader's main thread,
  its event loop (the serial part: gRPC's and the fsync pool's threads are the rest).
* ``cpu_us_per_request_follower``: the same for a follower (the mean of the two).
* ``cpu_us_per_request_client``: the bench process's CPU / requests.
* ``cpu_us_per_request_nodes``: the three nodes' sum.
* ``..._net``: the leader and follower figures less what the node spends idle over
  as long a time (``idle_cpu_pct_leader`` / ``_follower``: each node's CPU over
  ``--idle-s`` seconds (3) with nothing produced, before the runs): the request's
  own cost, the timers' and gossip's taken out.
* ``produce_records_s``: the wall-clock rate of the runs, for reference only.
* ``others_cpu_pct``: what the rest of the machine used during the runs, in % of
  one core: the figures are CPU, not time, but a loaded machine still costs cache
  misses and migrations.

``--nodes-from DIR`` runs the node processes from another checkout (``PYTHONPATH``
and working directory ``DIR``; this bench, its client and the venv's packages stay
this checkout's), e.g. ``git worktree add /tmp/old <commit>``. ``--baseline DIR``
starts a second cluster whose nodes run from ``DIR`` (``.``: this checkout) and
alternates the runs between the two (A B, B A, A B, ...), so that both see the machine in the same
state; each figure is then printed for both (``_baseline``), with the median of
the runs' ratios: ``cpu_leader_vs_baseline``, ``cpu_leader_loop_vs_baseline``,
``cpu_follower_vs_baseline``, ``cpu_nodes_vs_baseline``,
``produce_records_s_vs_baseline`` and ``cpu_client_vs_baseline`` (the same client
code on both: how much the figures move by themselves). ``--profile DIR``
runs the nodes under cProfile (cluster_bench's ``sitecustomize``, timed by each
thread's CPU clock: a call blocked in ``fdatasync`` counts its CPU, not its wait);
each node dumps ``node-<pid>.prof`` in DIR (the baseline's in ``DIR/baseline``) at
exit, and the leader's hottest functions are printed with their calls and CPU per
request, then, with ``--baseline``, the functions whose CPU per request differs
most between the two leaders (profiling inflates the CPU figures several times:
compare profiles with profiles).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeAlias

import grpc

from bench.cluster_bench import (
    DISTINCT_BATCHES,
    PRODUCE_METHOD,
    RECORDS_PER_BATCH,
    SITECUSTOMIZE,
    Bench,
    _cpu_ticks,
    _machine_busy_ticks,
    environment,
    make_batches,
    pipelined_s,
    produce_request,
)
from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb

TOPIC = "cpu"
PROFILE_ON_CPU = SITECUSTOMIZE.replace(
    "_profile = cProfile.Profile()",
    "import time\n    _profile = cProfile.Profile(time.thread_time)",
)
"""cluster_bench's profiler on each thread's CPU clock: a call blocked in fdatasync
or in the selector counts what it spent on a CPU, not its wall time."""
assert PROFILE_ON_CPU != SITECUSTOMIZE
WARM_UP_REQUESTS = 100
Row: TypeAlias = tuple[float, float, float]
"""A function's calls, tottime and cumtime (µs) per request."""
TICKS_S = os.sysconf("SC_CLK_TCK")


def node_ticks(nodes: list[NodeProcess]) -> list[int]:
    """Each node process's CPU so far (utime + stime, all threads), in clock ticks."""
    return [_cpu_ticks(pid) for pid in pids_of(nodes)]


def node_cpu_ns(nodes: list[NodeProcess]) -> list[int]:
    """Each node process's CPU so far, in ns: the sum of its threads' time on a CPU
    (``/proc/<pid>/task/*/schedstat``; a thread that ended meanwhile is missing)."""
    return [_threads_cpu_ns(pid) for pid in pids_of(nodes)]


def pids_of(nodes: list[NodeProcess]) -> list[int]:
    pids = [node.process.pid for node in nodes if node.process is not None and node.running]
    assert len(pids) == len(nodes), "a node is not running"
    return pids


def loop_cpu_ns(node: NodeProcess) -> int:
    """The CPU of a node's main thread (its event loop: the serial part), in ns."""
    pid = pids_of([node])[0]
    with open(f"/proc/{pid}/task/{pid}/schedstat", encoding="ascii") as file:
        return int(file.read().split()[0])


def _threads_cpu_ns(pid: int) -> int:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as file,
        ):
            total += int(file.read().split()[0])
    return total


def idle_cpu_pct(nodes: list[NodeProcess], seconds: float) -> list[float]:
    """Each node's CPU over ``seconds`` of doing nothing asked, in % of one core."""
    before = node_ticks(nodes)
    started = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - started
    after = node_ticks(nodes)
    return [(a - b) / TICKS_S / elapsed * 100 for a, b in zip(after, before, strict=True)]


def one_run(
    nodes: list[NodeProcess], address: str, requests: list[bytes], count: int, inflight: int
) -> dict[str, float]:
    """CPU of each node and of this process over ``count`` pipelined produce calls."""
    machine_before = _machine_busy_ticks()
    before, before_ns = node_ticks(nodes), node_cpu_ns(nodes)
    loop_before_ns = loop_cpu_ns(nodes[0])
    client_before = time.process_time()
    seconds = asyncio.run(pipelined_s(address, PRODUCE_METHOD, requests, count, inflight))
    client_s = time.process_time() - client_before
    used_ns = [a - b for a, b in zip(node_cpu_ns(nodes), before_ns, strict=True)]
    loop_ns = loop_cpu_ns(nodes[0]) - loop_before_ns
    used = [a - b for a, b in zip(node_ticks(nodes), before, strict=True)]
    machine = _machine_busy_ticks() - machine_before - sum(used) - client_s * TICKS_S
    per_node_us = [ns / 1e3 / count for ns in used_ns]
    return {
        "seconds": seconds,
        "leader_us": per_node_us[0],
        "leader_loop_us": loop_ns / 1e3 / count,
        "follower_us": statistics.mean(per_node_us[1:]),
        "client_us": client_s / count * 1e6,
        "others_cpu_pct": max(0.0, machine) / TICKS_S / seconds * 100,
    }


@contextlib.contextmanager
def node_environment(nodes_from: Path | None, profile: Path | None) -> Iterator[Path | None]:
    """``PYTHONPATH`` for the node processes (the profiler's ``sitecustomize``, then
    the other checkout), set in this process's environment for as long as the
    cluster starts nodes; the nodes' working directory (None: this one's)."""
    paths = []
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "sitecustomize.py").write_text(PROFILE_ON_CPU)
        paths.append(str(profile))
    if nodes_from is not None:
        paths.append(str(nodes_from))
    with environment(
        PYTHONPATH=os.pathsep.join(paths) if paths else None,
        LAMINAR_BENCH_PROFILE_DIR=str(profile) if profile is not None else None,
    ):
        # python -m puts the working directory first on sys.path: the other
        # checkout's, or a profiled node would import this checkout's laminar.
        yield nodes_from if nodes_from is not None else None


def create_topic(bench: Bench) -> None:
    """The bench's topic, asked of each node in turn until one (the metadata leader)
    creates it; every setting explicit, as older nodes (``--nodes-from``) want."""
    config = pb.TopicConfig(partitions=1, replication_factor=3, retention_bytes=-1, retention_ms=-1)
    request = pb.CreateTopicRequest(name=TOPIC, config=config)

    def created() -> bool:
        for node in bench.cluster.nodes:
            with contextlib.suppress(grpc.RpcError):  # not the metadata leader: the next
                bench.cluster.stub(node).CreateTopic(request, timeout=15)
                return True
        return False

    wait_for(created, 60, f"topic {TOPIC} created")
    bench.wait_led([TOPIC], 3)


def leader_profile(directory: Path, leader_pid: int, requests: int) -> dict[str, Row]:
    """The leader's profile per request: function -> (calls, tottime µs, cumtime µs),
    functions of one name in one file summed (two checkouts number lines apart)."""
    path = directory / f"node-{leader_pid}.prof"
    if not path.exists():
        print(f"no profile at {path}")
        return {}
    rows: dict[str, Row] = {}
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    for (file, _, name), (_, calls, tottime, cumtime, _) in stats.items():
        key = f"{Path(file).name}:{name}"
        old = rows.get(key, (0.0, 0.0, 0.0))
        rows[key] = (
            old[0] + calls / requests,
            old[1] + tottime / requests * 1e6,
            old[2] + cumtime / requests * 1e6,
        )
    return rows


def print_profile(title: str, rows: dict[str, Row], lines: int) -> None:
    """The hottest functions (tottime), with calls and µs per request."""
    print(f"\n--- {title}: per request (CPU of the thread it ran on) ---")
    print(f"{'calls/req':>10} {'tottime µs/req':>15} {'cumtime µs/req':>15}  function")
    for key, (calls, tottime, cumtime) in sorted(rows.items(), key=lambda r: -r[1][1])[:lines]:
        print(f"{calls:10.2f} {tottime:15.1f} {cumtime:15.1f}  {key}")


def print_profile_diff(rows: dict[str, Row], baseline: dict[str, Row], lines: int) -> None:
    """The functions whose tottime per request differs most from the baseline's."""
    print("\n--- leader profile minus the baseline's: per request ---")
    print(f"{'tottime µs':>11} {'calls/req':>10} {'baseline':>9}  function")
    zero = (0.0, 0.0, 0.0)
    differences = sorted(
        ((rows.get(k, zero), baseline.get(k, zero), k) for k in rows.keys() | baseline.keys()),
        key=lambda d: -abs(d[0][1] - d[1][1]),
    )
    for new, old, key in differences[:lines]:
        print(f"{new[1] - old[1]:+11.1f} {new[0]:10.2f} {old[0]:9.2f}  {key}")


class Side:
    """One cluster of the comparison: its nodes (the leader first), idle CPU, runs."""

    def __init__(
        self,
        stack: contextlib.ExitStack,
        root: Path,
        args: argparse.Namespace,
        nodes_from: Path | None,
        profile: Path | None,
    ) -> None:
        self.nodes_from = nodes_from
        self.profile = profile
        with node_environment(nodes_from, profile) as cwd:
            cluster = stack.enter_context(
                ProcessCluster(root, preset="local", fsync=args.fsync, cwd=cwd)
            )
            self.bench = Bench(cluster)
        stack.callback(self.bench.close)
        create_topic(self.bench)
        leader = self.bench.leader(TOPIC)
        self.nodes = [leader, *(n for n in cluster.nodes if n is not leader)]
        self.leader_pid = leader.process.pid if leader.process is not None else 0
        self.idle: list[float] = []
        self.runs: list[dict[str, float]] = []


def figures(side: Side, count: int, suffix: str) -> dict[str, list[float]]:
    """Each run's figures (module docstring), names ending in ``suffix``."""
    runs, idle = side.runs, side.idle
    runs_of = {
        "cpu_us_per_request_leader": [r["leader_us"] for r in runs],
        "cpu_us_per_request_leader_loop": [r["leader_loop_us"] for r in runs],
        "cpu_us_per_request_follower": [r["follower_us"] for r in runs],
        "cpu_us_per_request_client": [r["client_us"] for r in runs],
        "cpu_us_per_request_nodes": [r["leader_us"] + 2 * r["follower_us"] for r in runs],
        # Idle CPU over the run's length, per request: 1% of a core is 10 ms a second.
        "cpu_us_per_request_leader_net": [
            r["leader_us"] - idle[0] / 100 * r["seconds"] / count * 1e6 for r in runs
        ],
        "cpu_us_per_request_follower_net": [
            r["follower_us"] - statistics.mean(idle[1:]) / 100 * r["seconds"] / count * 1e6
            for r in runs
        ],
        "produce_records_s": [count * RECORDS_PER_BATCH / r["seconds"] for r in runs],
        "others_cpu_pct": [r["others_cpu_pct"] for r in runs],
        "idle_cpu_pct_leader": [idle[0]],
        "idle_cpu_pct_follower": [statistics.mean(idle[1:])],
    }
    return {name + suffix: values for name, values in runs_of.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs of 300 requests")
    parser.add_argument("--repeat", type=int, help="runs (default 5; --quick 3)")
    parser.add_argument("--requests", type=int, help="produce calls a run (1000; --quick 300)")
    parser.add_argument("--inflight", type=int, default=8, help="produce calls in flight")
    parser.add_argument("--idle-s", type=float, default=3.0, help="idle CPU window, seconds")
    parser.add_argument(
        "--no-fsync", dest="fsync", action="store_false", help="nodes skip fsync (unsafe)"
    )
    parser.add_argument(
        "--nodes-from", type=Path, metavar="DIR", help="run the nodes from this checkout"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="a second cluster with nodes from this checkout ('.': this one), runs alternating",
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="run nodes under cProfile")
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 5)
    count = args.requests or (300 if args.quick else 1000)
    if repeat < 1 or count < 1 or args.inflight < 1 or args.idle_s <= 0:
        parser.error("--repeat, --requests, --inflight and --idle-s must be positive")
    for checkout in (args.nodes_from, args.baseline):
        if checkout is not None and not (checkout / "laminar").is_dir():
            parser.error(f"{checkout}: no laminar package there")
    loaded = load_average()
    batches = make_batches(DISTINCT_BATCHES)
    requests = [produce_request(TOPIC, batch) for batch in batches]
    with (
        tempfile.TemporaryDirectory(prefix="laminar-cpu-bench-") as root,
        contextlib.ExitStack() as stack,
    ):
        sides = [Side(stack, Path(root) / "measured", args, args.nodes_from, args.profile)]
        if args.baseline is not None:
            baseline = None if args.baseline.resolve() == Path.cwd().resolve() else args.baseline
            profile = args.profile / "baseline" if args.profile is not None else None
            sides.append(Side(stack, Path(root) / "baseline", args, baseline, profile))
        for side in sides:
            side.idle = idle_cpu_pct(side.nodes, args.idle_s)
            leader = side.nodes[0].grpc
            asyncio.run(
                pipelined_s(leader, PRODUCE_METHOD, requests, WARM_UP_REQUESTS, args.inflight)
            )
        for index in range(repeat):
            # Alternating, both see the machine as it is now; the first of a pair in
            # turn (A B B A ...), or the one that always runs first takes any order
            # effect (a 3.5% bias in cpu_client_vs_baseline over 20 runs).
            for side in sides if index % 2 == 0 else sides[::-1]:
                side.runs.append(
                    one_run(side.nodes, side.nodes[0].grpc, requests, count, args.inflight)
                )
    if args.profile is not None:
        # Warm-up included: the profile covers the node's whole life.
        profiles = [
            leader_profile(side.profile, side.leader_pid, WARM_UP_REQUESTS + repeat * count)
            for side in sides
            if side.profile is not None
        ]
        for side, rows in zip(sides, profiles, strict=True):
            print_profile(f"leader profile, nodes from {side.nodes_from or '.'}", rows, 40)
        if len(profiles) == 2:
            print_profile_diff(profiles[0], profiles[1], 40)

    runs_of = figures(sides[0], count, "")
    if len(sides) == 2:
        runs_of.update(figures(sides[1], count, "_baseline"))
        pairs = {
            f"cpu_{name}_vs_baseline": f"cpu_us_per_request_{name}"
            for name in ("leader", "leader_loop", "follower", "nodes", "client")
        }
        pairs["produce_records_s_vs_baseline"] = "produce_records_s"
        for ratio, name in pairs.items():
            runs_of[ratio] = [
                a / b for a, b in zip(runs_of[name], runs_of[name + "_baseline"], strict=True)
            ]
    results = {name: statistics.median(values) for name, values in runs_of.items()}
    results["requests"] = count
    notes = [
        f"nodes from: {args.nodes_from or 'this checkout'}"
        + (f"; baseline nodes from: {args.baseline}" if args.baseline is not None else "")
        + f"; {repeat} runs of {count} requests, {args.inflight} in flight, "
        f"fsync {'on' if args.fsync else 'off'}",
        machine_note(loaded),
    ]
    print_report(results, missed=missed_targets(results, {}), runs=runs_of, notes=notes, digits=3)


if __name__ == "__main__":
    run_main(main)
