"""TLS against plaintext (issue 31): ``python -m bench.tls_bench [--quick]``.

One run starts two 3-node clusters of real node processes on loopback, one
plaintext and one with TLS on every port (``ProcessCluster(tls=True)``: mutual TLS
between nodes, client certificates required), and measures each the same way,
alternating between them ``--repeat`` times (medians) so that the machine's drift
hits both alike:

- ``tls_produce_rf3_vs_plain``: pipelined produce (``--inflight`` calls of 1,000
  records of 100 bytes) to the leader of a partition of replication factor 3,
  TLS records/s over plaintext records/s (target >= 0.8);
- ``tls_produce_p99_vs_plain``: p99 of one-record ``acks=all`` produce calls made
  one after another, TLS over plaintext (target <= 1.3);
- ``tls_fetch_vs_plain``: records/s reading a partition from a follower (target
  >= 0.8);
- ``cert_rotation_failed_rpcs``: records a Producer (acks=all) failed plus fetch
  errors of a Consumer while every node's certificate is replaced twice and the CA
  bundle once (target 0).

The last line is the figures as JSON; the one before, the targets missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc
from laminar_client import Client, Consumer, Producer, RecordMetadata

from bench.cluster_bench import (
    CHANNEL_OPTIONS,
    FETCH_BYTES_MAX,
    PRODUCE_METHOD,
    RECORDS_PER_BATCH,
    Bench,
    make_batches,
    percentile,
    pipelined_s,
    produce_request,
    timed_calls,
    warm_up,
)
from laminar.records import next_offset
from laminar.security import certs
from laminar.testing.processes import ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb

TARGETS: dict[str, tuple[str, float]] = {
    "tls_produce_rf3_vs_plain": (">=", 0.8),
    "tls_produce_p99_vs_plain": ("<=", 1.3),
    "tls_fetch_vs_plain": (">=", 0.8),
    "cert_rotation_failed_rpcs": ("<=", 0),
}


def aio_channel(cluster: ProcessCluster, address: str) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``address``, TLS with the client certificate when the
    cluster runs TLS."""
    tls = cluster.client_tls
    if tls is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    credentials = grpc.ssl_channel_credentials(
        Path(tls.ca_file).read_bytes(),
        Path(tls.key_file).read_bytes(),
        Path(tls.cert_file).read_bytes(),
    )
    return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)


class Side:
    """One cluster (plaintext or TLS) and its figures."""

    def __init__(self, root: Path, *, tls: bool, fsync: bool) -> None:
        self.cluster = ProcessCluster(root, preset="local", fsync=fsync, tls=tls)
        self.bench = Bench(self.cluster)
        self.produce_records_s: list[float] = []
        self.p99_ms: list[float] = []
        self.fetch_records_s: list[float] = []
        self.bench.create_topic("rf3", 1, 3)
        self.bench.create_topic("latency", 1, 3)

    def produce(self, batches: list[bytes], count: int, inflight: int) -> None:
        requests = [produce_request("rf3", batch) for batch in batches]
        address = self.bench.leader("rf3").grpc
        channel_of = partial(aio_channel, self.cluster)
        seconds = asyncio.run(
            pipelined_s(address, PRODUCE_METHOD, requests, count, inflight, channel_of)
        )
        self.produce_records_s.append(count * RECORDS_PER_BATCH / seconds)

    def latency(self, samples: int) -> None:
        request = produce_request("latency", make_batches(1, records=1)[0])
        address = self.bench.leader("latency").grpc
        with self.cluster.channel(address, CHANNEL_OPTIONS) as channel:
            call = channel.unary_unary(PRODUCE_METHOD)
            warm_up(call, request, samples)
            self.p99_ms.append(percentile(timed_calls(call, request, samples), 0.99))

    def fetch(self, records: int) -> None:
        leader = self.bench.leader("rf3")
        follower = next(node for node in self.cluster.nodes if node is not leader)
        wait_for(
            lambda: self.bench.high_watermark(follower, "rf3") >= records,
            60,
            "the follower's high watermark",
        )
        with self.cluster.channel(follower.grpc, CHANNEL_OPTIONS) as channel:
            fetch = channel.unary_unary(
                "/laminar.v1.Laminar/Fetch",
                request_serializer=pb.FetchRequest.SerializeToString,
                response_deserializer=pb.FetchResponse.FromString,
            )
            fetch(pb.FetchRequest(topic="rf3", partition=0, offset=0, max_bytes=1), timeout=30)
            offset = 0
            started = time.perf_counter()
            while offset < records:
                request = pb.FetchRequest(
                    topic="rf3", partition=0, offset=offset, max_bytes=FETCH_BYTES_MAX
                )
                response = fetch(request, timeout=30)
                assert response.batches, f"empty fetch at {offset}"
                offset = next_offset(response.batches)
            self.fetch_records_s.append(offset / (time.perf_counter() - started))

    def close(self) -> None:
        self.bench.close()
        self.cluster.close()


def rotation_failures(side: Side, rotations: int) -> int:
    """Failed records and fetch errors of a Producer and a Consumer running while
    every node's certificate is replaced ``rotations`` times, then the CA bundle
    (old + new CA) and certificates of the new CA."""
    cluster = side.cluster
    topic = "rotation"
    side.bench.create_topic(topic, 3, 3)
    failed: list[BaseException] = []
    acked = [0]
    stop = threading.Event()
    lock = threading.Lock()
    fetch_errors = [0]

    def done(metadata: RecordMetadata, error: BaseException | None) -> None:
        with lock:
            if error is None:
                acked[0] += 1
            else:
                failed.append(error)

    def produce(client: Client) -> None:
        with Producer(client, acks="all", delivery_timeout_s=30) as producer:
            number = 0
            while not stop.is_set():
                producer.send(topic, b"record %d" % number, callback=done)
                number += 1
                if number % 100 == 0:
                    producer.flush()
            producer.flush()

    def consume(client: Client) -> None:
        consumer: Consumer[bytes, bytes] = Consumer(client, fetch_wait_s=0.2)
        with consumer:
            consumer.assign({(topic, p): 0 for p in range(3)})
            while not stop.is_set():
                for _ in consumer.records(0.2):
                    if stop.is_set():
                        break
            fetch_errors[0] = consumer.counters["fetch_errors"]

    def generation_everywhere(generation: int) -> Callable[[], bool]:
        marker = f"TLS files reloaded generation={generation}"
        return lambda: all(marker in node.log_path.read_text() for node in cluster.nodes)

    def progress(count: int) -> Callable[[], bool]:
        return lambda: acked[0] >= count

    with Client([n.grpc for n in cluster.nodes], tls=cluster.client_tls) as client:
        threads = [
            threading.Thread(target=produce, args=(client,)),
            threading.Thread(target=consume, args=(client,)),
        ]
        for thread in threads:
            thread.start()
        try:
            generation = 1
            wait_for(progress(1000), 60, "records acknowledged")
            for _ in range(rotations):
                for node in cluster.nodes:
                    cluster.issue_node_cert(node)
                generation += 1
                wait_for(generation_everywhere(generation), 60, "every node to reload")
                wait_for(progress(acked[0] + 1000), 60, "records acknowledged")
            new_ca = certs.make_ca("Laminar bench CA 2")
            cluster.rotate_ca([cluster.ca.cert, new_ca.cert])
            generation += 1
            wait_for(generation_everywhere(generation), 60, "every node to reload")
            for node in cluster.nodes:
                cluster.issue_node_cert(node, ca=new_ca)
            generation += 1
            wait_for(generation_everywhere(generation), 60, "every node to reload")
            wait_for(progress(acked[0] + 1000), 60, "records acknowledged")
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
    return len(failed) + fetch_errors[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches, records, samples")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per figure")
    parser.add_argument("--inflight", type=int, default=8, help="produce calls in flight")
    parser.add_argument("--no-fsync", dest="fsync", action="store_false", help="skip fsync")
    args = parser.parse_args()
    if args.repeat < 1 or args.inflight < 1:
        parser.error("--repeat and --inflight must be at least 1")
    batches_per_run = 60 if args.quick else 300
    samples = 300 if args.quick else 2000
    batches = make_batches(32)
    results: dict[str, float] = {"loadavg_1m_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="laminar-tls-bench-") as root:
        sides = [
            Side(Path(root) / "plain", tls=False, fsync=args.fsync),
            Side(Path(root) / "tls", tls=True, fsync=args.fsync),
        ]
        try:
            for _ in range(args.repeat):
                for side in sides:
                    side.produce(batches, batches_per_run, args.inflight)
                for side in sides:
                    side.latency(samples)
            fetch_records = batches_per_run * RECORDS_PER_BATCH
            for _ in range(args.repeat):
                for side in sides:
                    side.fetch(fetch_records)
            plain, secure = sides
            for name, figures in (
                ("produce_rf3_records_s", "produce_records_s"),
                ("produce_p99_ms", "p99_ms"),
                ("fetch_records_s", "fetch_records_s"),
            ):
                results[f"plain_{name}"] = statistics.median(getattr(plain, figures))
                results[f"tls_{name}"] = statistics.median(getattr(secure, figures))
            results["tls_produce_rf3_vs_plain"] = (
                results["tls_produce_rf3_records_s"] / results["plain_produce_rf3_records_s"]
            )
            results["tls_produce_p99_vs_plain"] = (
                results["tls_produce_p99_ms"] / results["plain_produce_p99_ms"]
            )
            results["tls_fetch_vs_plain"] = (
                results["tls_fetch_records_s"] / results["plain_fetch_records_s"]
            )
            plain.close()
            results["cert_rotation_failed_rpcs"] = rotation_failures(secure, 1 if args.quick else 2)
        finally:
            for side in sides:
                side.close()
    width = max(map(len, results))
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.3f}")
    missed = [
        f"{key} {results[key]:,.3f} (target {relation} {target})"
        for key, (relation, target) in TARGETS.items()
        if not (results[key] >= target if relation == ">=" else results[key] <= target)
    ]
    print("targets missed: " + ("; ".join(missed) if missed else "none"))
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
