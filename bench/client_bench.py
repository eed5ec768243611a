"""Benchmark of the client: Producer and Consumer against 3 local nodes, with peers.

Run: ``.venv/bin/python -m bench.client_bench [--quick] [--repeat N] [--records N]
[--no-peers]``

Three nodes (``--preset local``, fsync on) run on 127.0.0.x
(:class:`~laminar.testing.processes.ProcessCluster`); this process is the one
client. Values are 100 bytes, the topic has 3 partitions (one leader per node, the
sticky partitioner moving between them) with replication factor 3, ``acks="all"``,
idempotence on, every other setting the default. Each figure is the median of
``--repeat`` runs in this one process:

* ``producer_send_records_s``: ``Producer.send()`` one record per call,
  ``--records`` of them, timed until ``flush()`` returns (every record
  acknowledged). ``async_producer_send_records_s``: the same with
  ``await AsyncProducer.send()`` per record, then ``await flush()``.
* ``producer_send_p99_ms``: a fixed offered load of 10,000 records/s (the
  sending thread sleeps about 1 ms, then sends the records due by then; 3 s,
  ``--quick`` 1 s) and the p99 of each record's latency from its ``send`` to its
  delivery callback.
* ``consumer_iter_records_s``: a ``Consumer`` assigned the 3 partitions from the
  start reads 2,000,000 records (``--quick``: 300,000), one ``ConsumerRecord``
  per iteration. ``consumer_arrow_rows_s``: the same records through
  ``batches()`` and ``to_arrow()``.

``--no-fsync-latency`` adds ``producer_send_p99_ms_no_fsync``: the latency run on
three more nodes started with ``--no-fsync``, which acknowledge once a majority
holds the batch in memory, as JetStream's default does.

Peers, in the same run (``bench/peers.py``; ``make bench-peers`` installs them, as
root): NATS JetStream R3 and Redis Streams, with ``--peer-records`` messages.
``*_vs_jetstream_r3`` and ``*_vs_redis`` say how many times Laminar is ahead: the
ratio of records/s for throughput, the peer's p99 over Laminar's for latency
(above 1 is better in both). Without the peers the bench says why and skips them.

Prints a table, the targets missed, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from laminar_client import AsyncProducer, Client, Consumer, Producer, RecordMetadata

from bench import peers, report
from bench.report import print_report, run_main
from laminar.testing.processes import ProcessCluster, wait_for
from laminar.tuning import tune_numpy

VALUE_BYTES = 100
TOPIC = "bench"
PARTITIONS = 3
OFFERED_RATE_S = 10_000

TARGETS: dict[str, tuple[str, float]] = {
    "producer_send_records_s": (">=", 400_000),
    "async_producer_send_records_s": (">=", 400_000),
    "consumer_iter_records_s": (">=", 1_000_000),
    "consumer_arrow_rows_s": (">=", 3_000_000),
    "producer_send_p99_ms": ("<=", 10),
}
# Laminar's figure -> (the peers' figure, whether higher is better)
PEER_FIGURES: dict[str, tuple[str, bool]] = {
    "producer_send_records_s": ("send_records_s", True),
    "async_producer_send_records_s": ("send_records_s", True),
    "producer_send_p99_ms": ("send_p99_ms", False),
    "producer_send_p99_ms_no_fsync": ("send_p99_ms", False),
    "consumer_iter_records_s": ("consume_records_s", True),
    "consumer_arrow_rows_s": ("consume_records_s", True),
}


# ----------------------------------------------------------------------------- cluster


def start_cluster(cluster: ProcessCluster) -> list[str]:
    """Three nodes, every one seeing the others alive; their gRPC addresses."""
    first = cluster.add_node(bootstrap=True)
    cluster.wait_ready(first)
    for _ in range(2):
        cluster.add_node()
    for node in cluster.nodes:
        cluster.wait_ready(node)
    wait_for(cluster.all_see_each_other, 60, "every node to see 3 alive members")
    return [node.grpc for node in cluster.nodes]


def create_topic(client: Client, name: str, partitions: int = PARTITIONS) -> None:
    """Create ``name`` (RF 3) and wait until every partition is led with 3 voters."""
    client.create_topic(name, partitions, 3)

    def led() -> bool:
        topic = client.metadata(refresh=True).topics[name]
        return all(p.leader and len(p.voters) == 3 for p in topic.partitions)

    wait_for(led, 60, f"every partition of {name} to have a leader and 3 voters")


# ----------------------------------------------------------------------------- producer


PRODUCER_OPTIONS: dict[str, float] = {}
"""Settings given to every producer (``--linger-s``); empty: the defaults."""


def producer_send(bootstrap: list[str], records: int) -> float:
    """Records/s through Producer.send(), until every record is acknowledged."""
    value = b"v" * VALUE_BYTES
    with Producer(bootstrap, **PRODUCER_OPTIONS) as producer:
        producer.send_and_wait(TOPIC, value)  # metadata and connections before timing
        send = producer.send
        started = time.perf_counter()
        for _ in range(records):
            send(TOPIC, value)
        producer.flush()
        elapsed = time.perf_counter() - started
    return records / elapsed


def async_producer_send(bootstrap: list[str], records: int) -> float:
    """Records/s through ``await AsyncProducer.send()``, until all are acknowledged."""
    value = b"v" * VALUE_BYTES

    async def run() -> float:
        async with AsyncProducer(bootstrap, **PRODUCER_OPTIONS) as producer:
            await producer.send_and_wait(TOPIC, value)
            send = producer.send
            started = time.perf_counter()
            for _ in range(records):
                await send(TOPIC, value)
            await producer.flush()
            return records / (time.perf_counter() - started)

    return asyncio.run(run())


def producer_latency_p99_ms(bootstrap: list[str], seconds: float) -> float:
    """p99 of send -> delivery callback at OFFERED_RATE_S records/s."""
    value = b"v" * VALUE_BYTES
    count = int(OFFERED_RATE_S * seconds)
    sent_at = [0.0] * count
    acked_at = [0.0] * count
    done = threading.Event()
    remaining = [count]
    lock = threading.Lock()

    def callback_for(index: int) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def callback(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            acked_at[index] = time.perf_counter() if error is None else float("nan")
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return callback

    with Producer(bootstrap, **PRODUCER_OPTIONS) as producer:
        producer.send_and_wait(TOPIC, value)
        interval_s = 1 / OFFERED_RATE_S
        started = time.perf_counter()
        index = 0
        while index < count:
            # Sleep about a millisecond, then send what is due: a busy wait would
            # hold the GIL that the producer's loop thread needs.
            now = time.perf_counter()
            due = min(count, int((now - started) / interval_s) + 1)
            while index < due:
                sent_at[index] = time.perf_counter()
                producer.send(TOPIC, value, callback=callback_for(index))
                index += 1
            time.sleep(0.001)
        if not done.wait(60):
            raise TimeoutError("records not acknowledged within 60 s")
    latencies = sorted((a - s) * 1000 for s, a in zip(sent_at, acked_at, strict=True))
    if any(latency != latency for latency in latencies):
        raise RuntimeError("a record failed in the latency run")
    return latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]


# ----------------------------------------------------------------------------- consumer


def consumer_iter(bootstrap: list[str], records: int) -> float:
    """Records/s iterating ConsumerRecord objects from the start."""
    with Consumer(bootstrap) as consumer:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        read = 0
        started = time.perf_counter()
        for _record in consumer.records(timeout_s=10):
            read += 1
            if read >= records:
                break
        elapsed = time.perf_counter() - started
    if read < records:
        raise RuntimeError(f"read {read} of {records} records")
    return read / elapsed


def consumer_arrow(bootstrap: list[str], records: int) -> float:
    """Rows/s through batches() + to_arrow() from the start."""
    with Consumer(bootstrap) as consumer:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        rows = 0
        started = time.perf_counter()
        for batch in consumer.batches(timeout_s=10):
            rows += batch.to_arrow().num_rows
            if rows >= records:
                break
        elapsed = time.perf_counter() - started
    if rows < records:
        raise RuntimeError(f"read {rows} of {records} rows")
    return rows / elapsed


# ----------------------------------------------------------------------------- main


def median_of(repeat: int, function: Callable[[], float]) -> tuple[float, list[float]]:
    runs = [function() for _ in range(repeat)]
    return statistics.median(runs), runs


def laminar_figures(args: argparse.Namespace) -> tuple[dict[str, float], dict[str, list[float]]]:
    results: dict[str, float] = {}
    spreads: dict[str, list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="laminar-client-bench-") as root,
        ProcessCluster(Path(root), preset="local") as cluster,
    ):
        bootstrap = start_cluster(cluster)
        with Client(bootstrap) as client:
            create_topic(client, TOPIC)
        phases: list[tuple[str, Callable[[], float]]] = [
            ("producer_send_records_s", lambda: producer_send(bootstrap, args.records)),
            (
                "async_producer_send_records_s",
                lambda: async_producer_send(bootstrap, args.records),
            ),
            ("producer_send_p99_ms", lambda: producer_latency_p99_ms(bootstrap, args.seconds)),
        ]
        for name, function in phases:
            results[name], spreads[name] = median_of(args.repeat, function)
        with Client(bootstrap) as client:
            written = sum(
                o.high_watermark for o in client.list_offsets(TOPIC, range(PARTITIONS)).values()
            )
        # Enough records to read back (the high watermarks count a few control
        # batches, leader no-ops and configuration changes, too).
        wanted = args.read_records + 100
        if written < wanted:
            producer_send(bootstrap, wanted - written)
        for name, function in [
            ("consumer_iter_records_s", lambda: consumer_iter(bootstrap, args.read_records)),
            ("consumer_arrow_rows_s", lambda: consumer_arrow(bootstrap, args.read_records)),
        ]:
            results[name], spreads[name] = median_of(args.repeat, function)
    if args.no_fsync_latency:
        # The same latency run on nodes that acknowledge without fsync: the
        # durability of JetStream's default (acknowledged once a quorum holds the
        # message in its page cache), to compare like with like.
        name = "producer_send_p99_ms_no_fsync"
        with (
            tempfile.TemporaryDirectory(prefix="laminar-client-bench-") as root,
            ProcessCluster(Path(root), preset="local", fsync=False) as cluster,
        ):
            bootstrap = start_cluster(cluster)
            with Client(bootstrap) as client:
                create_topic(client, TOPIC)
            results[name], spreads[name] = median_of(
                args.repeat, lambda: producer_latency_p99_ms(bootstrap, args.seconds)
            )
    return results, spreads


def peer_figures(args: argparse.Namespace, results: dict[str, float]) -> list[str]:
    """Run the available peers; add their figures and the ratios; the skip notes."""
    notes: list[str] = []
    runners = {"jetstream_r3": peers.jetstream_r3, "redis": peers.redis_streams}
    for name, reason in peers.available().items():
        if reason is not None:
            notes.append(f"{name}: skipped: {reason}")
            continue
        figures = peers.median_figures(
            runners[name],
            args.repeat,
            records=args.peer_records,
            value_bytes=VALUE_BYTES,
            offered_rate_s=OFFERED_RATE_S,
        )
        notes.append(f"{name}: {figures.notes}")
        for field in ("send_records_s", "send_p99_ms", "consume_records_s"):
            results[f"{name}_{field}"] = getattr(figures, field)
        for ours, (theirs, higher_better) in PEER_FIGURES.items():
            if ours not in results:
                continue
            peer_value = getattr(figures, theirs)
            ratio = results[ours] / peer_value if higher_better else peer_value / results[ours]
            results[f"{ours}_vs_{name}"] = ratio
    return notes


def missed_targets(results: dict[str, float]) -> list[str]:
    missed = report.missed_targets(results, TARGETS)
    missed += [
        f"{name} {value:.2f} (target > 1: ahead of the peer)"
        for name, value in results.items()
        if "_vs_" in name and value <= 1
    ]
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and seconds")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--records", type=int, help="records per producer run")
    parser.add_argument("--peer-records", type=int, help="messages per peer run")
    parser.add_argument("--no-peers", action="store_true", help="skip NATS and Redis")
    parser.add_argument(
        "--no-fsync-latency",
        action="store_true",
        help="also measure the latency on nodes without fsync (JetStream's durability)",
    )
    parser.add_argument(
        "--linger-s", type=float, help="the producers' linger_s (default: the Producer's)"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.records = args.records or (100_000 if args.quick else 500_000)
    args.read_records = 300_000 if args.quick else 2_000_000
    args.seconds = 1.0 if args.quick else 3.0
    args.peer_records = args.peer_records or (50_000 if args.quick else 200_000)
    tune_numpy()
    if args.linger_s is not None:
        PRODUCER_OPTIONS["linger_s"] = args.linger_s

    results, spreads = laminar_figures(args)
    notes = [] if args.no_peers else peer_figures(args, results)

    print_report(results, missed=missed_targets(results), runs=spreads, notes=notes, digits=2)


if __name__ == "__main__":
    run_main(main)
