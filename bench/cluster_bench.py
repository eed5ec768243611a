"""Benchmark of a 3-node broker cluster on loopback (real node processes).

Run: ``.venv/bin/python -m bench.cluster_bench [--quick] [--repeat N] [--no-fsync]
[--inflight N] [--phases NAME,...] [--profile DIR]``

Three nodes of ``python -m laminar.server node start --preset local`` run on
127.0.0.x (:class:`~laminar.testing.processes.ProcessCluster`); the bench process is
the one client. Records have 100-byte values; throughput batches hold 1,000 of them
and are encoded before timing starts.

* ``grpc_limit_mb_s``: the transport ceiling. A trivial grpc.aio server in its own
  process (set up as a node is: uvloop, :mod:`laminar.tuning`) answers a unary call
  carrying a request of exactly the size of one produce request with an 8-byte
  reply; the client is the produce client below.
  ``grpc_echo_p50_ms`` / ``_p99_ms``: the same call with a one-record-sized request,
  one at a time (what a round trip costs before the broker does anything).
* ``produce_rf1_records_s`` / ``produce_rf3_records_s``: one partition, one batch
  per ``Produce`` call, ``acks=all``, ``--inflight`` calls in flight on one grpc.aio
  channel to the leader; also as ``_mb_s`` (batch bytes, 10**6 per MB) and as a
  ratio to ``grpc_limit_mb_s``.
* ``fetch_records_s``: one consumer reading the RF 3 partition from offset 0
  (1,000,000 records; ``--quick`` reads fewer, see ``fetch_records``) from a
  follower, sequential ``Fetch`` calls of up to 4 MiB, advancing by the batch
  headers (records are not decoded: that is the consumer's cost, not the broker's).
* ``produce_p50_ms`` / ``produce_p99_ms``: one 100-byte record per ``Produce``,
  ``acks=all``, RF 3, sequential, to the leader; ``--repeat`` rounds of 2,000 calls
  (``--quick``: 500), and the median over rounds of each round's percentile (the
  rounds' spread: ``produce_p99_ms_min`` / ``_max``). Each round is followed by as
  many calls of the echo above with the same request: ``latency_echo_p99_ms`` is
  their p99 (median over rounds) and ``produce_p99_vs_echo`` the median of the
  rounds' produce/echo p99 ratios. They tell a slow broker from a slow stretch of
  the machine, whose speed drifts from second to second.
* ``failover_s``: SIGKILL the leader of a partition, then one ``Client.produce``
  (which follows ``NOT_LEADER`` hints and retries with backoff) until the first
  acknowledged write; the killed node is restarted and caught up between runs.
* ``write_gap_after_kill_s``: one writer thread per partition of a 6-partition RF 3
  topic keeps producing one-record batches (``acks=all``) through a client
  bootstrapped with every node, the victim listed first; the leader of partition 0
  is SIGKILLed; the figure is the longest time any partition went without an
  acknowledged write across the kill (median over ``--repeat`` kills; the victim is
  restarted and caught up between them). ``write_gap_after_isolate_s``: the same
  for a leader cut off from the other nodes (not from the client) by nft rules,
  inside a private network namespace of its own (:mod:`laminar.testing.chaos`);
  only as root with ``ip`` and ``nft``, else the figure is absent.
  ``write_gap_after_pause_s``: the same for a leader stopped with SIGSTOP for
  3.6 s (it answers nothing, its connections stay open). Targets <= 1.5 s for
  both: the client asks the other replicas for a new leader when a write has not
  been answered in 0.5 s (``Client(leader_check_s=...)``), instead of waiting out
  the 3 s attempt timeout.
* ``rolling_restart_write_gap_s``: a keyed, idempotent :class:`~laminar_client.Producer`
  (``acks=all``) sends ``--rolling-rate`` records/s (10,000) to a 6-partition RF 3
  topic while every node is restarted in turn by :func:`laminar_cli.rolling.rolling_restart`
  (maintenance, SIGTERM and start, catch-up, maintenance exit); the longest time any
  partition went without an acknowledged record, from the first restart on.
  ``rolling_restart_failed_records``: records whose delivery failed;
  ``rolling_restart_duplicates``: records read back more than once;
  ``rolling_restart_lost_records``: acknowledged records not read back;
  ``rolling_restart_s``: the whole rolling restart.
* ``maintenance_replicas_moved``: a cluster of its own whose nodes move replicas
  after a 2 s move grace and forget dead members after 3 s; a node put in
  maintenance is stopped for ``--maintenance-down-s`` (8 s) while records are
  written, then started; the partitions whose placement or voters lost it at any
  moment meanwhile (target 0). ``maintenance_catch_up_s``: from its start (it
  answers gRPC) until it holds every partition up to the leader's high watermark.
* ``write_gap_after_kill_s_lan``: ``write_gap_after_kill_s`` on a cluster of its own
  with the ``lan`` preset (failure detection in seconds, not tenths), one kill per
  ``--repeat``.
* ``shutdown_s_max``: at the end, every node is stopped with SIGTERM one after
  the other (the idle phase's 300 partitions are still there, so each hands over
  its leaderships); the longest time from signal to exit.
* ``idle_cpu_pct_per_node``: 3 topics x 100 partitions RF 3 created and led,
  nothing produced; each node process's utime+stime (``/proc/<pid>/stat``) over
  30 s (``--quick``: 10 s), as a percentage of one core, averaged over the nodes
  (``idle_cpu_pct_max_node``: the busiest). ``idle_cpu_pct_per_node_base`` is the
  same before the 300 partitions exist (the few bench partitions only).
  ``others_cpu_pct`` is what the rest of the machine used during that window: the
  figures are only as clean as the machine was quiet.

* ``produce_with_metrics_vs_without``: ``produce_rf3_records_s`` on a second
  cluster whose nodes serve ``--metrics`` and are scraped every second (each node
  by one scraper thread, as Prometheus would) over the same on the bench's cluster
  without metrics, in the same run: the two alternate ``--repeat`` times and the
  figure is the ratio of the medians (target >= 0.97; also
  ``produce_with_metrics_records_s`` / ``produce_without_metrics_records_s`` and
  ``metrics_scrape_ms_p50``, the scrapes' median time during the runs).

Throughput, latency and failover figures are medians of ``--repeat`` runs.
``--profile DIR`` runs the nodes under cProfile (a ``sitecustomize`` in DIR, dumps
at node exit) and prints each node's hottest functions; use it with ``--phases`` to
profile one figure. Prints a table, the targets missed, then one JSON object as the
last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import grpc
from laminar_client import Client

from laminar.errors import NotLeaderError, TopicExistsError, UnavailableError
from laminar.records import encode_batch, next_offset
from laminar.server.cli import run_loop
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.testing.scrape import get
from laminar.tuning import tune_allocator, tune_grpc, tune_numpy
from laminar.v1 import laminar_pb2 as pb

VALUE_BYTES = 100
RECORDS_PER_BATCH = 1000
DISTINCT_BATCHES = 32
FETCH_BYTES_MAX = 4 * 1024 * 1024
MESSAGE_BYTES_MAX = 64 * 1024 * 1024
PRODUCE_TIMEOUT_MS = 10_000
PRODUCE_METHOD = "/laminar.v1.Laminar/Produce"
ECHO_METHOD = "/bench.Echo/Push"
ECHO_REPLY = b"\x00" * 8
IDLE_TOPICS = 3
IDLE_PARTITIONS_PER_TOPIC = 100
PHASES = (
    "grpc",
    "produce",
    "fetch",
    "latency",
    "failover",
    "idle",
    "gap",
    "pause",
    "isolate",
    "rolling_restart",
    "maintenance",
    "gap_lan",
    "metrics",
    "shutdown",
)
GAP_PARTITIONS = 6

TARGETS: dict[str, tuple[str, float]] = {
    "produce_rf3_records_s": (">=", 300_000),
    "produce_rf1_records_s": (">=", 600_000),
    "fetch_records_s": (">=", 1_000_000),
    "produce_p99_ms": ("<=", 3),
    "failover_s": ("<=", 3),
    "write_gap_after_kill_s": ("<=", 2),
    "write_gap_after_isolate_s": ("<=", 1.5),
    "write_gap_after_pause_s": ("<=", 1.5),
    "rolling_restart_write_gap_s": ("<=", 0.2),
    "rolling_restart_failed_records": ("<=", 0),
    "rolling_restart_duplicates": ("<=", 0),
    "rolling_restart_lost_records": ("<=", 0),
    "maintenance_replicas_moved": ("<=", 0),
    "shutdown_s_max": ("<=", 5),
    "idle_cpu_pct_per_node": ("<=", 10),
    "produce_with_metrics_vs_without": (">=", 0.97),
}

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
]

# ----------------------------------------------------------------------------- payloads


def make_batches(count: int, records: int = RECORDS_PER_BATCH) -> list[bytes]:
    base = os.urandom(VALUE_BYTES * records + count)
    return [
        encode_batch(
            [base[i + VALUE_BYTES * r : i + VALUE_BYTES * (r + 1)] for r in range(records)],
            timestamps_ms=1_700_000_000_000 + i,
        )
        for i in range(count)
    ]


def produce_request(topic: str, batch: bytes) -> bytes:
    """A serialized ``ProduceRequest`` carrying one batch, ``acks=all``."""
    request = pb.ProduceRequest(
        topic=topic, partition=0, batches=[batch], acks=pb.ACKS_ALL, timeout_ms=PRODUCE_TIMEOUT_MS
    )
    return request.SerializeToString()


# ----------------------------------------------------------------------------- echo server


def serve_echo(address: str) -> None:
    """The transport ceiling's server: answers every request with 8 bytes.

    Set up as a node is: the same process tuning and event loop (uvloop).
    """
    tune_allocator()
    tune_grpc()
    tune_numpy()

    async def push(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return ECHO_REPLY

    async def run() -> None:
        server = grpc.aio.server(options=CHANNEL_OPTIONS)
        handler = grpc.unary_unary_rpc_method_handler(push)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Echo", {"Push": handler}),)
        )
        if server.add_insecure_port(address) == 0:
            raise SystemExit(f"cannot listen on {address}")
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        print("ready", flush=True)
        await stop.wait()
        await server.stop(0)

    run_loop(run())


@contextlib.contextmanager
def echo_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.cluster_bench", "--serve-echo", address],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != b"ready":
            raise RuntimeError("echo server did not start")
        yield address
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# ----------------------------------------------------------------------------- clients


async def pipelined_s(
    address: str,
    method: str,
    requests: list[bytes],
    count: int,
    inflight: int,
    channel_of: Callable[[str], grpc.aio.Channel] | None = None,
) -> float:
    """Seconds to complete ``count`` unary calls, ``inflight`` at a time, on one channel
    (``channel_of(address)``'s: a TLS one; plaintext by default)."""
    channel = (
        channel_of(address)
        if channel_of is not None
        else grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    )
    async with channel:
        call = channel.unary_unary(method)
        await call(requests[0], timeout=30)  # connect (and handshake) before timing
        next_index = 0

        async def worker() -> None:
            nonlocal next_index
            while next_index < count:
                index = next_index
                next_index += 1
                await call(requests[index % len(requests)], timeout=30)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        return time.perf_counter() - started


def sequential_ms(address: str, method: str, request: bytes, count: int) -> list[float]:
    """Round-trip times of ``count`` calls made one after another."""
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        call = channel.unary_unary(method)
        warm_up(call, request, count)
        return timed_calls(call, request, count)


def warm_up(call: grpc.UnaryUnaryMultiCallable, request: bytes, count: int) -> None:
    """Untimed calls before ``count`` timed ones: a tenth of them, at least 20."""
    timed_calls(call, request, max(20, count // 10))


def timed_calls(call: grpc.UnaryUnaryMultiCallable, request: bytes, count: int) -> list[float]:
    """Milliseconds of each of ``count`` sequential calls."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        call(request, timeout=10)
        times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def median_of(repeat: int, function: Callable[[], float]) -> float:
    return statistics.median(function() for _ in range(repeat))


def run_async(coroutine: Coroutine[Any, Any, float]) -> float:
    return asyncio.run(coroutine)


# ----------------------------------------------------------------------------- cluster


class Bench:
    """A 3-node cluster, its client and the helpers the phases share."""

    def __init__(self, cluster: ProcessCluster, extra_args: list[str] | None = None) -> None:
        self.cluster = cluster
        node = cluster.add_node(bootstrap=True, extra_args=extra_args)
        cluster.wait_ready(node)
        for _ in range(2):
            cluster.add_node(extra_args=extra_args)
        for node in cluster.nodes:
            cluster.wait_ready(node)
        wait_for(self._all_see_three, 60, "every node to see 3 alive members")
        self.client = Client([n.grpc for n in cluster.nodes], timeout_s=30, tls=cluster.client_tls)
        self.metadata_retries = 0

    def _all_see_three(self) -> bool:
        for node in self.cluster.nodes:
            response = self.cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
            if sum(1 for m in response.members if m.state == "alive") != 3:
                return False
        return True

    def node(self, node_id: str) -> NodeProcess:
        return next(n for n in self.cluster.nodes if n.node_id() == node_id)

    def partitions(self, node: NodeProcess, topics: list[str]) -> list[pb.PartitionInfo]:
        request = pb.MetadataRequest(topics=topics)
        response = self.cluster.stub(node).Metadata(request, timeout=5)
        return [p for t in response.topics for p in t.partitions]

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> None:
        self.create_topic_unsettled(name, partitions, replication_factor)
        self.wait_led([name], replication_factor)

    def create_topic_unsettled(self, name: str, partitions: int, replication_factor: int) -> None:
        """Create a topic, riding out a metadata leader that is still moving.

        The client follows ``NOT_LEADER`` hints, but right after a node restart two
        nodes may point at each other for a while; the bench retries for a minute.
        """
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.create_topic(name, partitions, replication_factor)
                return
            except TopicExistsError:
                return  # an earlier attempt committed
            except (NotLeaderError, UnavailableError):
                self.metadata_retries += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def wait_led(self, topics: list[str], replication_factor: int, timeout_s: float = 120) -> None:
        """Until every partition is settled: each of its replicas names placement's first
        replica as the leader and the voters are placement's replicas (no leadership
        transfer or reconfiguration is still to come)."""

        def settled() -> bool:
            seen: dict[tuple[str, int], list[tuple[str, tuple[str, ...], bool]]] = {}
            for node in self.cluster.nodes:
                if not node.running:
                    continue
                response = self.cluster.stub(node).Metadata(
                    pb.MetadataRequest(topics=topics), timeout=5
                )
                for topic in response.topics:
                    for info in topic.partitions:
                        if info.high_watermark < 0:
                            continue  # this node holds no replica
                        replicas = tuple(info.replicas)
                        good = (
                            len(replicas) == replication_factor
                            and info.leader == replicas[0]
                            and sorted(info.voters) == sorted(replicas)
                            and not info.learners
                        )
                        key = (topic.name, info.partition)
                        seen.setdefault(key, []).append((info.leader, replicas, good))
            expected = sum(
                t.config.partitions
                for t in self.client.metadata(refresh=True).topics.values()
                if t.name in topics
            )
            return len(seen) == expected and all(
                len(views) == replication_factor
                and all(good for _, _, good in views)
                and len({leader for leader, _, _ in views}) == 1
                for views in seen.values()
            )

        wait_for(settled, timeout_s, f"leaders of {', '.join(topics)} to settle")

    def leader(self, topic: str) -> NodeProcess:
        """The node that says it leads partition 0 of ``topic``."""
        found: list[NodeProcess] = []

        def ask() -> bool:
            found.clear()
            for node in self.cluster.nodes:
                if not node.running:
                    continue
                info = self.partitions(node, [topic])[0]
                if info.leader == node.node_id():
                    found.append(node)
            return len(found) == 1

        wait_for(ask, 30, f"one leader of {topic}/0")
        return found[0]

    def high_watermark(self, node: NodeProcess, topic: str, partition: int = 0) -> int:
        return int(self.partitions(node, [topic])[partition].high_watermark)

    def leader_of(self, topic: str, partition: int) -> NodeProcess:
        """The running node that says it leads ``topic/partition``."""
        found: list[NodeProcess] = []

        def ask() -> bool:
            found[:] = [
                node
                for node in self.cluster.nodes
                if node.running
                and self.partitions(node, [topic])[partition].leader == node.node_id()
            ]
            return len(found) == 1

        wait_for(ask, 30, f"one leader of {topic}/{partition}")
        return found[0]

    def close(self) -> None:
        self.client.close()


# ----------------------------------------------------------------------------- phases


def grpc_phase(
    results: dict[str, float], batches: list[bytes], sizes: Sizes, args: argparse.Namespace
) -> None:
    requests = [produce_request("rf3", b) for b in batches]
    small = produce_request("latency", make_batches(1, records=1)[0])
    with echo_server() as address:
        run_async(pipelined_s(address, ECHO_METHOD, requests, 50, args.inflight))  # warm up
        seconds = median_of(
            args.repeat,
            lambda: run_async(
                pipelined_s(address, ECHO_METHOD, requests, sizes.batches_per_run, args.inflight)
            ),
        )
        times = sequential_ms(address, ECHO_METHOD, small, sizes.latency_samples)
    results["grpc_limit_mb_s"] = sizes.batches_per_run * len(batches[0]) / seconds / 1e6
    results["grpc_echo_p50_ms"] = percentile(times, 0.50)
    results["grpc_echo_p99_ms"] = percentile(times, 0.99)


def produce_phase(
    bench: Bench,
    results: dict[str, float],
    batches: list[bytes],
    sizes: Sizes,
    args: argparse.Namespace,
) -> None:
    for factor in (1, 3):
        topic = f"rf{factor}"
        bench.create_topic(topic, 1, factor)
        requests = [produce_request(topic, b) for b in batches]
        address = bench.leader(topic).grpc
        run_async(pipelined_s(address, PRODUCE_METHOD, requests, 20, args.inflight))  # warm up
        seconds = median_of(
            args.repeat,
            lambda a=address, r=requests: run_async(
                pipelined_s(a, PRODUCE_METHOD, r, sizes.batches_per_run, args.inflight)
            ),
        )
        rate = sizes.batches_per_run * RECORDS_PER_BATCH / seconds
        results[f"produce_rf{factor}_records_s"] = rate
        results[f"produce_rf{factor}_mb_s"] = rate / RECORDS_PER_BATCH * len(batches[0]) / 1e6
        if "grpc_limit_mb_s" in results:
            results[f"produce_rf{factor}_vs_grpc"] = (
                results[f"produce_rf{factor}_mb_s"] / results["grpc_limit_mb_s"]
            )


def fetch_phase(
    bench: Bench,
    results: dict[str, float],
    batches: list[bytes],
    sizes: Sizes,
    args: argparse.Namespace,
) -> None:
    topic = "rf3"
    if "rf3" not in bench.client.metadata(refresh=True).topics:
        bench.create_topic(topic, 1, 3)
    leader = bench.leader(topic)
    missing = sizes.fetch_records - bench.high_watermark(leader, topic)
    if missing > 0:  # fill the partition (untimed)
        requests = [produce_request(topic, b) for b in batches]
        count = -(-missing // RECORDS_PER_BATCH)
        run_async(pipelined_s(leader.grpc, PRODUCE_METHOD, requests, count, args.inflight))
    follower = next(n for n in bench.cluster.nodes if n is not leader)
    wait_for(
        lambda: bench.high_watermark(follower, topic) >= sizes.fetch_records,
        60,
        "the follower's high watermark",
    )

    def once() -> float:
        offset = 0
        with grpc.insecure_channel(follower.grpc, options=CHANNEL_OPTIONS) as channel:
            fetch = channel.unary_unary(
                "/laminar.v1.Laminar/Fetch",
                request_serializer=pb.FetchRequest.SerializeToString,
                response_deserializer=pb.FetchResponse.FromString,
            )
            started = time.perf_counter()
            while offset < sizes.fetch_records:
                request = pb.FetchRequest(
                    topic=topic, partition=0, offset=offset, max_bytes=FETCH_BYTES_MAX
                )
                response = fetch(request, timeout=30)
                assert response.batches, f"empty fetch at {offset}"
                offset = next_offset(response.batches)
            return offset / (time.perf_counter() - started)

    results["fetch_records_s"] = median_of(args.repeat, once)
    results["fetch_records"] = sizes.fetch_records


def latency_phase(bench: Bench, results: dict[str, float], sizes: Sizes, repeat: int) -> None:
    bench.create_topic("latency", 1, 3)
    request = produce_request("latency", make_batches(1, records=1)[0])
    address = bench.leader("latency").grpc
    p50s, p99s, echo_p99s = [], [], []
    with (
        echo_server() as echo_address,
        grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel,
        grpc.insecure_channel(echo_address, options=CHANNEL_OPTIONS) as echo_channel,
    ):
        produce = channel.unary_unary(PRODUCE_METHOD)
        echo = echo_channel.unary_unary(ECHO_METHOD)
        warm_up(produce, request, sizes.latency_samples)
        warm_up(echo, request, sizes.latency_samples)
        for _ in range(repeat):
            times = timed_calls(produce, request, sizes.latency_samples)
            # The same calls to the echo server right after: what the machine gave a
            # bare gRPC round trip at about the same time (its speed drifts).
            echo_times = timed_calls(echo, request, sizes.latency_samples)
            p50s.append(percentile(times, 0.50))
            p99s.append(percentile(times, 0.99))
            echo_p99s.append(percentile(echo_times, 0.99))
    results["produce_p50_ms"] = statistics.median(p50s)
    results["produce_p99_ms"] = statistics.median(p99s)
    results["produce_p99_ms_min"] = min(p99s)
    results["produce_p99_ms_max"] = max(p99s)
    results["latency_echo_p99_ms"] = statistics.median(echo_p99s)
    results["produce_p99_vs_echo"] = statistics.median(
        produce / echo for produce, echo in zip(p99s, echo_p99s, strict=True)
    )


def failover_phase(bench: Bench, results: dict[str, float], args: argparse.Namespace) -> None:
    topic = "failover"
    bench.create_topic(topic, 1, 3)
    record = make_batches(1, records=1)[0]
    cluster = bench.cluster
    times = []
    for _ in range(args.repeat):
        bench.client.produce(topic, 0, record, acks="all")  # the client knows the leader
        victim = bench.leader(topic)
        killed_at = time.perf_counter()
        cluster.kill(victim)
        bench.client.produce(topic, 0, record, acks="all", timeout_s=60)
        times.append(time.perf_counter() - killed_at)
        results["failover_s"] = statistics.median(times)  # kept if a later round fails
        results["failover_max_s"] = max(times)
        results["failover_runs"] = len(times)
        cluster.start(victim)
        cluster.wait_ready(victim)
        wait_for(bench._all_see_three, 60, "the restarted node to be alive everywhere")
        leader = bench.leader(topic)
        wait_for(
            lambda v=victim, ld=leader: (
                bench.high_watermark(v, topic) >= bench.high_watermark(ld, topic)
            ),
            60,
            "the restarted node to catch up",
        )


class Writers:
    """One thread per partition producing one-record batches until stopped; the
    times (``time.monotonic``) of every acknowledged write, per partition."""

    def __init__(self, bootstrap: list[str], topic: str, partitions: int) -> None:
        self.client = Client(bootstrap, timeout_s=30)
        self.topic = topic
        self.acks: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, args=(p,), daemon=True) for p in range(partitions)
        ]
        self._record = make_batches(1, records=1)[0]

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        wait_for(lambda: all(self.acks.values()), 30, "every writer's first ack")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        self.client.close()

    def _write(self, partition: int) -> None:
        acks = self.acks[partition]
        while not self._stop.is_set():
            try:
                self.client.produce(self.topic, partition, self._record, acks="all")
            except Exception:  # the gap shows it; keep writing
                self.errors += 1
                continue
            acks.append(time.monotonic())

    def longest_gap_s(self, since: float) -> float:
        """The longest stretch without an ack on any partition, among the stretches
        that end after ``since`` (the fault), the one still open included."""
        now = time.monotonic()
        longest = 0.0
        for times in self.acks.values():
            stamps = list(times)
            before = [t for t in stamps if t <= since]
            after = [t for t in stamps if t > since]
            previous = before[-1] if before else since
            for stamp in [*after, now]:
                longest = max(longest, stamp - previous)
                previous = stamp
        return longest

    def wait_all_acked_after(self, moment: float, timeout_s: float) -> None:
        wait_for(
            lambda: all(times and times[-1] > moment for times in self.acks.values()),
            timeout_s,
            "every partition to take writes again",
        )


def gap_phase(bench: Bench, results: dict[str, float], args: argparse.Namespace) -> None:
    gaps = kill_gaps(bench, "gaps", args.repeat)
    results["write_gap_after_kill_s"] = statistics.median(gaps)
    results["write_gap_after_kill_max_s"] = max(gaps)


def kill_gaps(bench: Bench, topic: str, repeat: int) -> list[float]:
    """The longest write gap of ``repeat`` SIGKILLs of partition 0's leader."""
    bench.create_topic(topic, GAP_PARTITIONS, 3)
    cluster = bench.cluster
    gaps = []
    for _ in range(repeat):
        victim = bench.leader(topic)
        bootstrap = [victim.grpc] + [n.grpc for n in cluster.nodes if n is not victim]
        with Writers(bootstrap, topic, GAP_PARTITIONS) as writers:
            time.sleep(0.5)  # a steady stream before the fault
            killed_at = time.monotonic()
            cluster.kill(victim)
            writers.wait_all_acked_after(killed_at + 0.5, 60)
            time.sleep(0.5)
            gaps.append(writers.longest_gap_s(killed_at))
        cluster.start(victim)
        cluster.wait_ready(victim)
        wait_for(bench._all_see_three, 60, "the restarted node to be alive everywhere")
        bench.wait_led([topic], 3)
    return gaps


class KeyedLoad:
    """A keyed, idempotent producer (``acks=all``) sending ``rate`` records/s on a
    thread of its own, each value unique; the acknowledgement times per partition,
    and the failures."""

    def __init__(self, bootstrap: list[str], topic: str, partitions: int, rate: int) -> None:
        from laminar_client import Producer

        self.producer: Any = Producer(bootstrap, acks="all", delivery_timeout_s=60)
        self.topic = topic
        self.rate = rate
        self.acks: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self.acked = 0
        self.failed = 0
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KeyedLoad:
        self._thread.start()
        wait_for(lambda: all(self.acks.values()), 30, "every partition's first ack")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self.producer.flush()
        self.producer.close()

    def _done(self, metadata: Any, error: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            if error is not None:
                self.failed += 1
            else:
                self.acked += 1
                self.acks[metadata.partition].append(now)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                self.producer.send(
                    self.topic,
                    str(self.sent).encode(),
                    key=f"key-{self.sent % 1000}".encode(),
                    callback=self._done,
                )
                self.sent += 1
            time.sleep(0.005)

    def longest_gap_s(self, since: float, until: float) -> float:
        """The longest stretch without an ack on any partition that ends after
        ``since``, up to ``until``."""
        longest = 0.0
        with self._lock:
            stamps_by_partition = [list(times) for times in self.acks.values()]
        for stamps in stamps_by_partition:
            before = [t for t in stamps if t <= since]
            previous = before[-1] if before else since
            for stamp in [t for t in stamps if since < t <= until] + [until]:
                longest = max(longest, stamp - previous)
                previous = stamp
        return longest


def read_back(client: Client, topic: str, partitions: int) -> list[bytes]:
    """Every value of ``topic``, read from each partition's leader: a follower stops
    at its own high watermark, which may trail the leader's by a heartbeat."""
    leaders = {
        h.partition: h.leader for h in client.describe_cluster().partitions if h.topic == topic
    }
    values = []
    for partition in range(partitions):
        records = client.records(topic, partition, 0, replica=leaders.get(partition))
        values += [record.value or b"" for record in records]
    return values


def restart_node(cluster: ProcessCluster, node_id: str) -> None:
    """Stop a node with SIGTERM and start it again (what ``--command`` would do)."""
    node = next(n for n in cluster.nodes if f"node{n.index}" == node_id)
    cluster.terminate(node)
    cluster.start(node)
    cluster.wait_ready(node)


def rolling_restart_phase(
    bench: Bench, results: dict[str, float], args: argparse.Namespace
) -> None:
    from laminar_cli.rolling import rolling_restart

    topic = "rolling"
    bench.create_topic(topic, GAP_PARTITIONS, 3)
    cluster = bench.cluster
    with KeyedLoad(
        [n.grpc for n in cluster.nodes], topic, GAP_PARTITIONS, args.rolling_rate
    ) as load:
        time.sleep(1.0)  # a steady stream before the first restart
        started = time.monotonic()
        steps = rolling_restart(
            bench.client,
            lambda node_id: restart_node(cluster, node_id),
            step_timeout_s=120,
        )
        finished = time.monotonic()
        time.sleep(1.0)  # and after the last one
        results["rolling_restart_write_gap_s"] = load.longest_gap_s(started, finished)
        results["rolling_restart_s"] = finished - started
    results["rolling_restart_failed_records"] = load.failed
    values = read_back(bench.client, topic, GAP_PARTITIONS)
    results["rolling_restart_duplicates"] = len(values) - len(set(values))
    results["rolling_restart_lost_records"] = max(0, load.acked - len(set(values)))
    results["rolling_restart_records"] = load.acked
    results["rolling_restart_handover_s_max"] = max(step.handover_s for step in steps)
    wait_for(bench._all_see_three, 60, "every node alive after the rolling restart")


MAINTENANCE_CONFIG = """
replica_move_grace_ms = 2000
maintenance_grace_ms = 3600000

[membership]
gossip_to_dead_ms = 2000
reap_after_ms = 3000
"""


def maintenance_phase(results: dict[str, float], args: argparse.Namespace) -> None:
    """A cluster of its own with short graces (see the module docstring)."""
    topic = "maint"
    with (
        tempfile.TemporaryDirectory(prefix="laminar-bench-maintenance-") as root,
        ProcessCluster(Path(root), preset="local", fsync=args.fsync) as cluster,
    ):
        config = Path(root) / "node.toml"
        config.write_text(MAINTENANCE_CONFIG)
        bench = Bench(cluster, extra_args=["--config", str(config)])
        try:
            bench.create_topic(topic, GAP_PARTITIONS, 3)
            victim = bench.leader(topic)
            victim_id = victim.node_id()
            client = bench.client
            client.set_maintenance(victim_id, True)
            wait_for(
                lambda: all(h.leader != victim_id for h in client.describe_cluster().partitions),
                30,
                f"{victim_id} to hand over",
            )
            cluster.terminate(victim)
            stopped = time.monotonic()
            moved: set[int] = set()
            batch = make_batches(1, records=100)[0]
            while time.monotonic() - stopped < args.maintenance_down_s:
                for partition in range(GAP_PARTITIONS):
                    client.produce(topic, partition, batch)
                for health in client.describe_cluster().partitions:
                    if health.topic == topic and (
                        victim_id not in health.replicas or victim_id not in health.voters
                    ):
                        moved.add(health.partition)
                time.sleep(0.1)
            results["maintenance_replicas_moved"] = len(moved)
            cluster.start(victim)
            cluster.wait_ready(victim)
            back = time.monotonic()
            leaders = {
                p: bench.high_watermark(bench.leader_of(topic, p), topic, p)
                for p in range(GAP_PARTITIONS)
            }
            wait_for(
                lambda: all(
                    bench.high_watermark(victim, topic, p) >= leaders[p]
                    for p in range(GAP_PARTITIONS)
                ),
                120,
                f"{victim_id} to catch up",
            )
            results["maintenance_catch_up_s"] = time.monotonic() - back
            client.set_maintenance(victim_id, False)
        finally:
            bench.close()


def gap_lan_phase(results: dict[str, float], args: argparse.Namespace) -> None:
    """``write_gap_after_kill_s`` on a ``lan`` cluster of its own."""
    with (
        tempfile.TemporaryDirectory(prefix="laminar-bench-lan-") as root,
        ProcessCluster(Path(root), preset="lan", fsync=args.fsync) as cluster,
    ):
        bench = Bench(cluster)
        try:
            gaps = kill_gaps(bench, "gaps_lan", args.repeat)
            results["write_gap_after_kill_s_lan"] = statistics.median(gaps)
            results["write_gap_after_kill_max_s_lan"] = max(gaps)
        finally:
            bench.close()


PAUSE_S = 3.6
"""How long the pause phase stops the leader (SIGSTOP): longer than an election."""


def pause_phase(bench: Bench, results: dict[str, float], args: argparse.Namespace) -> None:
    """``write_gap_after_pause_s``: as ``gap``, the leader stopped (SIGSTOP) instead of
    killed, so its connections stay open and it answers nothing."""
    topic = "pauses"
    bench.create_topic(topic, GAP_PARTITIONS, 3)
    cluster = bench.cluster
    gaps = []
    for _ in range(args.repeat):
        victim = bench.leader(topic)
        assert victim.process is not None
        bootstrap = [victim.grpc] + [n.grpc for n in cluster.nodes if n is not victim]
        with Writers(bootstrap, topic, GAP_PARTITIONS) as writers:
            time.sleep(0.5)  # a steady stream before the fault
            paused_at = time.monotonic()
            victim.process.send_signal(signal.SIGSTOP)
            try:
                writers.wait_all_acked_after(paused_at + 0.5, 60)
                gaps.append(writers.longest_gap_s(paused_at))
                time.sleep(max(0.0, paused_at + PAUSE_S - time.monotonic()))
            finally:
                victim.process.send_signal(signal.SIGCONT)
            time.sleep(0.5)
        results["write_gap_after_pause_s"] = statistics.median(gaps)
        results["write_gap_after_pause_max_s"] = max(gaps)
        wait_for(bench._all_see_three, 60, "the paused node to be alive everywhere")
        bench.wait_led([topic], 3)


def isolate_phase(results: dict[str, float], args: argparse.Namespace) -> None:
    """``write_gap_after_isolate_s`` from a cluster in a network namespace of its own."""
    from laminar.testing import chaos

    reason = chaos.chaos_unsupported_reason()
    if reason is not None:
        print(f"# phase isolate skipped: {reason}", file=sys.stderr, flush=True)
        return
    name = f"laminar-bench-{os.getpid()}"
    with chaos.NetworkNamespace(name) as namespace:
        command = [sys.executable, "-m", "bench.cluster_bench", "--isolate-inside", name]
        command += ["--repeat", str(args.repeat)]
        output = subprocess.run(
            namespace.command(command), capture_output=True, text=True, timeout=900, check=True
        ).stdout
    inner = json.loads(output.strip().splitlines()[-1])
    results.update({key: float(value) for key, value in inner.items()})


def isolate_inside(namespace: str, repeat: int) -> dict[str, float]:
    """Inside the namespace: a cluster, writers, and nft cutting a leader off from the
    other nodes (not from the client, whose source address belongs to no node)."""
    from laminar.testing import chaos

    firewall = chaos.Firewall(namespace)
    results: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="laminar-isolate-bench-") as root,
        ProcessCluster(Path(root), preset="local", host_base=chaos.NODE_HOST_BASE) as cluster,
    ):
        bench = Bench(cluster)
        try:
            topic = "isolated"
            bench.create_topic(topic, GAP_PARTITIONS, 3)
            gaps = []
            for _ in range(repeat):
                victim = bench.leader(topic)
                others = tuple(n.host for n in cluster.nodes if n is not victim)
                bootstrap = [victim.grpc] + [n.grpc for n in cluster.nodes if n is not victim]
                with Writers(bootstrap, topic, GAP_PARTITIONS) as writers:
                    time.sleep(0.5)
                    cut_at = time.monotonic()
                    firewall.apply(chaos.Cut((victim.host,), others, closed=(victim.host,)))
                    try:
                        writers.wait_all_acked_after(cut_at + 0.5, 60)
                        time.sleep(0.5)
                        gaps.append(writers.longest_gap_s(cut_at))
                    finally:
                        firewall.apply(None)
                results["write_gap_after_isolate_s"] = statistics.median(gaps)
                results["write_gap_after_isolate_max_s"] = max(gaps)
                wait_for(bench._all_see_three, 60, "the healed node to be alive everywhere")
                bench.wait_led([topic], 3)
        finally:
            bench.close()
    return results


class Scraper:
    """One thread per address scraping ``/metrics`` every ``interval_s``; the
    duration of each scrape (ms)."""

    def __init__(self, addresses: list[str], interval_s: float) -> None:
        self.times_ms: list[float] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(address, interval_s), daemon=True)
            for address in addresses
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, address: str, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            started = time.perf_counter()
            status, _ = get(address, "/metrics", timeout_s=30)  # not parsed: not our cost
            assert status == 200, status
            self.times_ms.append((time.perf_counter() - started) * 1000)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(35)


def metrics_phase(
    bench: Bench,
    results: dict[str, float],
    batches: list[bytes],
    sizes: Sizes,
    args: argparse.Namespace,
) -> None:
    """``produce_with_metrics_vs_without`` (module docstring)."""
    topic = "metrics_rf3"

    def rate(on: Bench) -> float:
        requests = [produce_request(topic, b) for b in batches]
        address = on.leader(topic).grpc
        seconds = run_async(
            pipelined_s(address, PRODUCE_METHOD, requests, sizes.batches_per_run, args.inflight)
        )
        return sizes.batches_per_run * RECORDS_PER_BATCH / seconds

    bench.create_topic(topic, 1, 3)
    with (
        tempfile.TemporaryDirectory(prefix="laminar-metrics-bench-") as root,
        ProcessCluster(Path(root), preset="local", fsync=args.fsync, metrics=True) as cluster,
    ):
        metered = Bench(cluster)
        scraper = Scraper([node.metrics for node in cluster.nodes], interval_s=1.0)
        try:
            metered.create_topic(topic, 1, 3)
            rate(bench), rate(metered)  # warm up both
            without, with_metrics = [], []
            for _ in range(args.repeat):
                without.append(rate(bench))
                with_metrics.append(rate(metered))
        finally:
            scraper.stop()
            metered.close()
    results["produce_without_metrics_records_s"] = statistics.median(without)
    results["produce_with_metrics_records_s"] = statistics.median(with_metrics)
    results["produce_with_metrics_vs_without"] = statistics.median(
        with_metrics
    ) / statistics.median(without)
    if scraper.times_ms:
        results["metrics_scrape_ms_p50"] = statistics.median(scraper.times_ms)


def shutdown_phase(bench: Bench, results: dict[str, float]) -> None:
    """SIGTERM each node in turn; the longest time from the signal to its exit."""
    times = []
    for node in bench.cluster.nodes:
        if not node.running:
            continue
        started = time.monotonic()
        bench.cluster.terminate(node, timeout_s=60)
        times.append(time.monotonic() - started)
    results["shutdown_s_max"] = max(times)
    results["shutdown_s_median"] = statistics.median(times)


def idle_phase(bench: Bench, results: dict[str, float], sizes: Sizes) -> None:
    """CPU of idle nodes, before and after 300 partitions exist.

    The window starts once every partition has settled, or after ``settle_s`` if
    they have not (``idle_settled`` says which): a cluster that cannot settle
    300 partitions is measured as it is.
    """
    base = node_cpu_pct(bench.cluster, sizes.idle_s / 3)
    results["idle_cpu_pct_per_node_base"] = statistics.mean(base[0])
    topics = [f"idle{index}" for index in range(IDLE_TOPICS)]
    started = time.perf_counter()
    for topic in topics:
        bench.create_topic_unsettled(topic, IDLE_PARTITIONS_PER_TOPIC, 3)
    try:
        bench.wait_led(topics, 3, timeout_s=sizes.settle_s)
        results["idle_settled"] = 1
        results["idle_settle_s"] = time.perf_counter() - started
    except TimeoutError:
        results["idle_settled"] = 0
    per_node, others = node_cpu_pct(bench.cluster, sizes.idle_s)
    results["idle_cpu_pct_per_node"] = statistics.mean(per_node)
    results["idle_cpu_pct_max_node"] = max(per_node)
    results["others_cpu_pct"] = others


def node_cpu_pct(cluster: ProcessCluster, seconds: float) -> tuple[list[float], float]:
    """Each node's CPU over ``seconds`` (% of one core), and everything else's."""
    pids = [n.process.pid for n in cluster.nodes if n.process is not None and n.running]
    ticks_s = os.sysconf("SC_CLK_TCK")
    before = [_cpu_ticks(pid) for pid in pids]
    machine_before = _machine_busy_ticks()
    own_before = _cpu_ticks(os.getpid())
    started = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - started
    used = [_cpu_ticks(pid) - b for pid, b in zip(pids, before, strict=True)]
    machine = _machine_busy_ticks() - machine_before - sum(used)
    machine -= _cpu_ticks(os.getpid()) - own_before
    per_node = [u / ticks_s / elapsed * 100 for u in used]
    return per_node, machine / ticks_s / elapsed * 100


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _machine_busy_ticks() -> int:
    with open("/proc/stat", encoding="ascii") as file:
        values = [int(v) for v in file.readline().split()[1:]]
    return sum(values) - values[3] - values[4]  # all but idle and iowait


# ----------------------------------------------------------------------------- profiling

SITECUSTOMIZE = """\
import os
if os.environ.get("LAMINAR_BENCH_PROFILE_DIR"):
    import atexit, cProfile
    _profile = cProfile.Profile()
    _profile.enable()

    def _dump():
        _profile.disable()
        _profile.dump_stats(
            os.path.join(os.environ["LAMINAR_BENCH_PROFILE_DIR"], f"node-{os.getpid()}.prof")
        )

    atexit.register(_dump)
"""


@contextlib.contextmanager
def profiled_nodes(directory: Path | None) -> Iterator[None]:
    """Nodes started inside run under cProfile, dumping to ``directory`` at exit."""
    if directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = [str(directory), os.getcwd(), os.environ.get("PYTHONPATH", "")]
    with environment(
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
        LAMINAR_BENCH_PROFILE_DIR=str(directory),
    ):
        yield


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """This process's environment (inherited by the nodes it starts) with ``values``
    set (None: left as it is), each variable restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update({key: value for key, value in values.items() if value is not None})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def print_profiles(directory: Path, lines: int) -> None:
    for path in sorted(directory.glob("node-*.prof")):
        print(f"\n--- {path} (tottime) ---")
        stats = pstats.Stats(str(path))
        stats.sort_stats("tottime").print_stats(lines)


# ----------------------------------------------------------------------------- main


def run_phase(
    phase: str,
    bench: Bench,
    results: dict[str, float],
    batches: list[bytes],
    sizes: Sizes,
    args: argparse.Namespace,
    failures: list[str],
) -> None:
    """Run one cluster phase; a failure is reported and the next phases still run."""
    started = time.perf_counter()
    try:
        if phase == "produce":
            produce_phase(bench, results, batches, sizes, args)
        elif phase == "fetch":
            fetch_phase(bench, results, batches, sizes, args)
        elif phase == "latency":
            latency_phase(bench, results, sizes, args.repeat)
        elif phase == "failover":
            failover_phase(bench, results, args)
        elif phase == "gap":
            gap_phase(bench, results, args)
        elif phase == "pause":
            pause_phase(bench, results, args)
        elif phase == "isolate":
            isolate_phase(results, args)
        elif phase == "idle":
            idle_phase(bench, results, sizes)
        elif phase == "rolling_restart":
            rolling_restart_phase(bench, results, args)
        elif phase == "maintenance":
            maintenance_phase(results, args)
        elif phase == "gap_lan":
            gap_lan_phase(results, args)
        elif phase == "metrics":
            metrics_phase(bench, results, batches, sizes, args)
        elif phase == "shutdown":
            shutdown_phase(bench, results)
    except Exception as error:  # report, keep measuring the rest
        failures.append(f"{phase}: {type(error).__name__}: {error}")
        traceback.print_exc(file=sys.stderr)
        for node in bench.cluster.nodes:  # what the nodes said, before their dir goes
            print(f"# node{node.index} log:\n{bench.cluster.log_tail(node, 15)}", file=sys.stderr)
    print(f"# phase {phase}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)


class Sizes:
    def __init__(self, quick: bool) -> None:
        self.batches_per_run = 100 if quick else 300
        self.fetch_records = 200_000 if quick else 1_000_000
        self.latency_samples = 500 if quick else 2000
        self.idle_s = 10.0 if quick else 30.0
        self.settle_s = 45.0 if quick else 90.0


def missed_targets(results: dict[str, float]) -> list[str]:
    missed = []
    for key, (relation, target) in TARGETS.items():
        if key not in results:
            continue
        value = results[key]
        ok = value >= target if relation == ">=" else value <= target
        if not ok:
            missed.append(f"{key} {value:,.2f} (target {relation} {target:,})")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches, records and seconds")
    parser.add_argument("--repeat", type=int, default=3, help="runs per throughput figure")
    parser.add_argument("--inflight", type=int, default=8, help="produce calls in flight")
    parser.add_argument(
        "--no-fsync", dest="fsync", action="store_false", help="nodes skip fsync (unsafe)"
    )
    parser.add_argument(
        "--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}"
    )
    parser.add_argument("--profile", type=Path, metavar="DIR", help="run nodes under cProfile")
    parser.add_argument(
        "--rolling-rate", type=int, default=10_000, help="records/s during the rolling restart"
    )
    parser.add_argument(
        "--maintenance-down-s",
        type=float,
        default=8.0,
        help="how long the node in maintenance stays stopped (move grace 2 s, reap 3 s)",
    )
    parser.add_argument("--serve-echo", metavar="HOST:PORT", help=argparse.SUPPRESS)
    parser.add_argument("--isolate-inside", metavar="NETNS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_echo:
        serve_echo(args.serve_echo)
        return
    if args.isolate_inside:
        print(json.dumps(isolate_inside(args.isolate_inside, args.repeat)))
        return
    if args.repeat < 1 or args.inflight < 1:
        parser.error("--repeat and --inflight must be at least 1")
    phases = [p for p in args.phases.split(",") if p]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases: {', '.join(unknown)}")
    sizes = Sizes(args.quick)
    batches = make_batches(DISTINCT_BATCHES)

    results: dict[str, float] = {"loadavg_1m_at_start": os.getloadavg()[0]}
    failures: list[str] = []
    if "grpc" in phases:
        grpc_phase(results, batches, sizes, args)
    cluster_phases = [p for p in PHASES if p in phases and p != "grpc"]
    if cluster_phases:
        with (
            tempfile.TemporaryDirectory(prefix="laminar-cluster-bench-") as root,
            profiled_nodes(args.profile),
            ProcessCluster(Path(root), preset="local", fsync=args.fsync) as cluster,
        ):
            bench = Bench(cluster)
            try:
                for phase in cluster_phases:
                    run_phase(phase, bench, results, batches, sizes, args, failures)
            finally:
                if bench.metadata_retries:
                    results["create_topic_retries"] = bench.metadata_retries
                bench.close()
    if args.profile is not None:
        print_profiles(args.profile, 25)

    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.2f}")
    missed = missed_targets(results)
    for failure in failures:
        print(f"phase failed: {failure}")
    print("targets missed: " + ("; ".join(missed) if missed else "none"))
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
