"""The Producer and Consumer against real node processes (issue 14).

One 3-node cluster (``local()`` preset) per test that kills a node; nothing sleeps
for a fixed time; every process is stopped in a ``finally``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from laminar_client import (
    AsyncConsumer,
    AsyncProducer,
    Client,
    Consumer,
    DeliveryFuture,
    Producer,
    key_partition,
)

from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import CLIENT_TIMEOUT_S, SETTLE_S, start_cluster, wait_leader

TOPIC = "orders"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    cluster = start_cluster(tmp_path, 3)
    try:
        with Client([n.grpc for n in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S) as client:
            client.create_topic(TOPIC, PARTITIONS, 3)
        for partition in range(PARTITIONS):
            wait_leader(cluster, TOPIC, partition)
        yield cluster
    finally:
        cluster.close()


def bootstrap(cluster: ProcessCluster) -> list[str]:
    return [n.grpc for n in cluster.nodes]


def read_all(cluster: ProcessCluster, expected: int) -> dict[int, list[bytes]]:
    """Every data record of the topic, per partition in offset order."""
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    with Consumer(bootstrap(cluster)) as consumer:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        for count, record in enumerate(consumer.records(timeout_s=10), start=1):
            assert record.value is not None
            values[record.partition].append(record.value)
            if count >= expected:
                break
    return values


def test_producer_survives_a_leader_kill_without_loss_duplicate_or_reorder(
    cluster: ProcessCluster,
) -> None:
    """Keyed records written through the Producer while the leader of partition 0 is
    SIGKILLed: every acknowledged record is stored once, and each key's records are
    in send order."""
    keys = [f"key-{i}".encode() for i in range(30)]
    futures: list[tuple[bytes, int, DeliveryFuture]] = []
    counters: dict[str, int] = {}
    stop = threading.Event()
    victim = wait_leader(cluster, TOPIC, 0)

    def write() -> None:
        with Producer(bootstrap(cluster), linger_s=0.002, delivery_timeout_s=60) as producer:
            sequence = 0
            while not stop.is_set() or sequence < 3_000:
                key = keys[sequence % len(keys)]
                value = b"%s:%08d" % (key, sequence)
                futures.append((key, sequence, producer.send(TOPIC, value, key=key)))
                sequence += 1
                if sequence % 200 == 0:
                    time.sleep(0.01)  # a steady stream across the kill, not one burst
            producer.flush()
            counters.update(producer.counters)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_for(lambda: len(futures) > 1_000, SETTLE_S, "writes before the kill")
        cluster.kill(victim)
        wait_for(lambda: wait_leader(cluster, TOPIC, 0) is not victim, SETTLE_S, "a new leader")
        count_at_election = len(futures)
        wait_for(lambda: len(futures) > count_at_election + 1_000, SETTLE_S, "writes after")
    finally:
        stop.set()
        writer.join(120)
    assert not writer.is_alive()
    assert counters["attempts_failed"] > 0, "the kill should have failed some attempts"
    for key, _, future in futures:
        metadata = future.result(timeout=0)
        assert metadata.partition == key_partition(key, PARTITIONS)
    stored = read_all(cluster, len(futures))
    assert sum(map(len, stored.values())) == len(futures)
    seen: dict[bytes, int] = {}
    for partition, values in stored.items():
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        for value in values:
            key, sequence = value.split(b":")
            assert int(sequence) > seen.get(key, -1), f"{key!r} out of order"
            seen[key] = int(sequence)


def test_async_producer_and_consumer_round_trip(cluster: ProcessCluster) -> None:
    """AsyncProducer writes, AsyncConsumer reads the same records in order, with
    positions and lag as documented."""
    count = 5_000

    async def run() -> None:
        async with AsyncProducer(bootstrap(cluster), value_serializer=str.encode) as producer:
            futures = [await producer.send(TOPIC, f"v{i}", partition=1) for i in range(count)]
            await producer.flush()
            offsets = [(await future).offset for future in futures]
        assert offsets == sorted(offsets) and len(set(offsets)) == count
        async with AsyncConsumer(bootstrap(cluster), value_deserializer=bytes.decode) as consumer:
            await consumer.assign({(TOPIC, 1): offsets[0]})
            got = []
            async for record in consumer.records(timeout_s=10):
                got.append(record.value)
                if len(got) == count:
                    break
            assert got == [f"v{i}" for i in range(count)]
            assert consumer.position((TOPIC, 1)) == offsets[-1] + 1
            assert (await consumer.lag())[(TOPIC, 1)] == 0

    asyncio.run(run())


@pytest.mark.parametrize("page", ["README.md", "docs/client.md"])
def test_the_readme_example_runs(cluster: ProcessCluster, page: str) -> None:
    """The first Python example of the README and of the client guide, against this
    cluster (so they cannot rot)."""
    text = (Path(__file__).parents[2] / page).read_text()
    source = text.split("```python\n", 1)[1].split("```", 1)[0]
    source = source.replace('"127.0.0.1:7100"', repr(bootstrap(cluster)))
    topic = f"orders-{Path(page).stem.lower()}"
    with Client(bootstrap(cluster)) as client:
        client.create_topic(topic, 6, 3)
    source = source.replace('"orders"', repr(topic))
    exec(compile(source, page, "exec"), {})


def test_keyed_records_over_many_partitions_share_requests(cluster: ProcessCluster) -> None:
    """Batches of several partitions led by one node go in one ProduceMany request;
    every record lands once, on its key's partition, in send order per key."""
    with Client(bootstrap(cluster)) as client:
        client.create_topic("wide", 12, 3)
    for partition in range(12):
        wait_leader(cluster, "wide", partition)
    keys = [b"k%d" % i for i in range(60)]
    with Producer(bootstrap(cluster)) as producer:
        futures = [
            (key, producer.send("wide", b"%s:%06d" % (key, i), key=key))
            for i in range(6_000)
            for key in (keys[i % len(keys)],)
        ]
        producer.flush()
        counters = producer.counters
    assert counters["multi_partition_requests"] > 0  # (a redirect or two is routing)
    by_key: dict[bytes, list[int]] = {}
    for key, future in futures:
        metadata = future.result(timeout=0)
        assert metadata.partition == key_partition(key, 12)
        by_key.setdefault(key, []).append(metadata.offset)
    for offsets in by_key.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    with Consumer(bootstrap(cluster)) as consumer:
        consumer.assign([("wide", p) for p in range(12)])
        records = consumer.records(timeout_s=10)
        values = [next(records).value for _ in range(6_000)]
    assert len(values) == 6_000 and len(set(values)) == 6_000
