"""docs/migrating-from-kafka.md: every row's Laminar side, run against three real
node processes (one cluster for the module, a group per row).

Each row of the aiokafka and confluent-kafka tables has a function here named by
its number; :func:`test_every_row_has_its_test` keeps the two in step.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from laminar_client import (
    AsyncConsumer,
    AsyncProducer,
    Client,
    Consumer,
    FencedMemberError,
    InvalidInputError,
    Producer,
    RecordMetadata,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from laminar_client.serializers import json_deserializer

from laminar.testing.processes import ProcessCluster
from tests.server.test_cluster import CLIENT_TIMEOUT_S, start_cluster, wait_leader

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-kafka.md"
TOPIC = "mig"
PARTITIONS = 2
TP = TopicPartition(TOPIC, 0)
WAIT_S = 30.0
ROWS: dict[str, Callable[[str], None]] = {}


def row(*numbers: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(function: Callable[[str], None]) -> Callable[[str], None]:
        for number in numbers:
            ROWS[number] = function
        return function

    return register


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster: ProcessCluster = start_cluster(tmp_path_factory.mktemp("migrating"), 3)
    try:
        bootstrap = ",".join(node.grpc for node in cluster.nodes)
        with Client(bootstrap, timeout_s=CLIENT_TIMEOUT_S) as client:
            client.create_topic(TOPIC, PARTITIONS, 3)
        for partition in range(PARTITIONS):
            wait_leader(cluster, TOPIC, partition)
        with Producer(bootstrap) as producer:
            for n in range(20):
                producer.send(TOPIC, b'{"n": %d}' % n, key=b"k%d" % n, partition=n % PARTITIONS)
        yield bootstrap
    finally:
        cluster.close()


def doc_rows() -> set[str]:
    return set(re.findall(r"^\| ([AC]\d+) \|", DOC.read_text(), re.MULTILINE))


def run(coroutine: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coroutine())


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def read_some(consumer: Consumer[Any, Any], count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        for record in consumer.records(timeout_s=0.2):
            got.append(record)
            if len(got) >= count:
                break
    return got


async def read_some_async(consumer: AsyncConsumer[Any, Any], count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        async for record in consumer.records(timeout_s=0.2):
            got.append(record)
            if len(got) >= count:
                break
    return got


# ----------------------------------------------------------------------------- aiokafka


@row("A1", "A2", "A3", "A4")
def producer_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncProducer(servers) as p:
            metadata = await p.send_and_wait(TOPIC, b"a2", key=b"k")
            assert isinstance(metadata, RecordMetadata) and metadata.topic == TOPIC
            fut = await p.send(TOPIC, b"a3", partition=0)
            assert (await fut).partition == 0
            await p.flush()
        await p.close()  # idempotent after the block

    run(main)


@row("A5", "A6", "A8", "A10", "A22")
def consumer_async_group(servers: str) -> None:
    async def main() -> None:
        c: AsyncConsumer[bytes, bytes] = AsyncConsumer(servers, group="a5", topics=[TOPIC])
        try:
            records = await read_some_async(c, 3)
            first = records[0]
            assert (first.topic, first.timestamp_ms > 0, first.headers) == (TOPIC, True, ())
            assert first.offset >= 0 and first.value
            await c.subscribe(pattern="mi.*")  # another subscription: leave, join again
            assert len(await read_some_async(c, 1)) == 1
            await c.unsubscribe()
            assert c.assignment() == frozenset()
            await c.subscribe([TOPIC])
        finally:
            await c.close()

    run(main)


@row("A7")
def listener_async(servers: str) -> None:
    calls: list[str] = []

    async def on_revoked(partitions: list[TopicPartition]) -> None:
        calls.append("revoked")

    async def main() -> None:
        c: AsyncConsumer[bytes, bytes] = AsyncConsumer(
            servers,
            group="a7",
            topics=[TOPIC],
            on_assigned=lambda tps: calls.append("assigned"),
            on_revoked=on_revoked,
            on_lost=lambda tps: calls.append("lost"),
        )
        async with c:
            await read_some_async(c, 1)

    run(main)
    assert calls == ["assigned", "revoked"]


@row("A9")
def assign_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncConsumer(servers) as c:
            await c.assign([(TOPIC, 0)])
            assert c.assignment() == {TP}
        async with AsyncConsumer(servers, group="a9", topics=[TOPIC]) as member:
            with pytest.raises(InvalidInputError):
                await member.assign([(TOPIC, 0)])

    run(main)


@row("A11")
def getmany_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncConsumer(servers) as c:
            await c.assign([(TOPIC, 0)])
            async for batch in c.batches(max_records=5, timeout_s=WAIT_S):
                assert 0 < len(batch) <= 5 and batch.to_arrow().num_rows == len(batch)
                break

    run(main)


@row("A12", "A13")
def commit_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncConsumer(servers, group="a12", topics=[TOPIC], auto_commit=False) as c:
            await read_some_async(c, 2)
            # As commit_sync: positions taken before commit(), unresolved ones skipped.
            positions = {tp: c.position(tp) for tp in c.assignment()}
            await c.commit()
            committed = await c.committed(list(positions))
            resolved = {tp: p for tp, p in positions.items() if p >= 0}
            assert resolved and all(committed[tp] == p for tp, p in resolved.items())
            tp = sorted(c.assignment())[0]
            await c.commit({tp: c.position(tp)})
            assert (await c.committed([tp]))[tp] == c.position(tp)

    run(main)


@row("A14", "A15", "A16", "A17", "A18", "A19")
def positions_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncConsumer(servers) as c:
            await c.assign([(TOPIC, 0), (TOPIC, 1)])
            await c.seek(TP, 2)
            assert c.position(TP) == 2
            await c.seek_to_beginning(TP)
            await c.seek_to_end(TP)
            end = (await c.end_offsets([TP]))[TP]
            assert c.position(TP) == end and (await c.beginning_offsets([TP]))[TP] == 0
            await c.seek_to_time(0, TP)  # the first record (offset 0 is the leader's no-op)
            assert 0 <= c.position(TP) < end
            await c.pause(TP)
            assert c.paused() == {TP}
            await c.resume(TP)
            assert c.assignment() == {TP, TopicPartition(TOPIC, 1)}
            lag = await c.lag()
            assert lag[TP] == end - c.position(TP)

    run(main)


@row("A20", "A21")
def settings_async(servers: str) -> None:
    async def main() -> None:
        c: AsyncConsumer[Any, Any] = AsyncConsumer(
            servers,
            group="a20",
            topics=[TOPIC],
            auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_s=10,
            instance_id="i1",
            value_deserializer=json_deserializer,
        )
        async with c:
            record = (await read_some_async(c, 1))[0]
            assert set(record.value) == {"n"}

    run(main)


@row("A23")
def errors_async(servers: str) -> None:
    async def main() -> None:
        async with AsyncConsumer(servers, group="a23", topics=[TOPIC]) as c:
            await read_some_async(c, 1)
            with pytest.raises(FencedMemberError):
                await c.commit({TopicPartition("not-owned", 0): 1})
            with pytest.raises(InvalidInputError):
                await c.assign([(TOPIC, 0)])

    run(main)


# ----------------------------------------------------------------------------- confluent-kafka


@row("C1", "C2", "C3", "C20")
def producer_sync(servers: str) -> None:
    delivered: list[tuple[Any, Any]] = []
    done = threading.Event()

    def cb(metadata: Any, error: Any) -> None:
        delivered.append((metadata, error))
        done.set()

    with Producer(servers) as p:
        future = p.send(TOPIC, b"c2", key=b"k", partition=0, callback=cb)
        p.flush(timeout_s=10)
        assert future.result(timeout=5).partition == 0
    assert done.wait(WAIT_S) and delivered[0][1] is None


@row("C4", "C5", "C7", "C9", "C18")
def consumer_sync_group(servers: str) -> None:
    calls: list[str] = []
    c: Consumer[bytes, bytes] = Consumer(
        servers,
        group="c4",
        auto_offset_reset="earliest",
        on_assigned=lambda tps: calls.append("assigned"),
        on_revoked=lambda tps: calls.append("revoked"),
        on_lost=lambda tps: calls.append("lost"),
    )
    with c:
        c.subscribe([TOPIC])
        record = None
        deadline = time.monotonic() + WAIT_S
        while record is None:
            assert time.monotonic() < deadline
            record = next(iter(c.records(timeout_s=1.0)), None)
        assert (record.topic, record.partition in (0, 1), record.offset >= 0) == (TOPIC, True, True)
        assert (
            record.key is not None and record.value and record.timestamp_ms and not record.headers
        )
        c.unsubscribe()
        assert calls == ["assigned", "revoked"]
        c.subscribe([TOPIC])
        read_some(c, 1)
    assert calls == ["assigned", "revoked", "assigned", "revoked"]


@row("C6")
def pattern_sync(servers: str) -> None:
    with Consumer(servers, group="c6") as c:
        c.subscribe(pattern="mi.*")
        assert read_some(c, 1)[0].topic == TOPIC


@row("C8")
def consume_sync(servers: str) -> None:
    with Consumer(servers) as c:
        c.assign([(TOPIC, 0)])
        batch = next(iter(c.batches(max_records=500, timeout_s=WAIT_S)))
        assert 0 < len(batch) <= 500


@row("C10", "C11", "C12")
def commit_sync(servers: str) -> None:
    with Consumer(servers, group="c10", topics=[TOPIC], auto_commit=False) as c:
        read_some(c, 2)
        # The group may hand out more meanwhile (those are not committed), and a
        # partition not read yet may still be resolving its start (position -1).
        positions = {tp: c.position(tp) for tp in c.assignment()}
        c.commit()
        resolved = {tp: p for tp, p in positions.items() if p >= 0}
        assert resolved and all(c.committed([tp])[tp] == p for tp, p in resolved.items())
        tp = sorted(c.assignment())[0]
        position = c.position(tp)
        c.commit({tp: position})
        assert c.committed([tp]) == {tp: position}


@row("C13", "C14", "C15", "C16", "C17")
def positions_sync(servers: str) -> None:
    with Consumer(servers) as c:
        c.assign({(TOPIC, 0): 1})
        assert c.position(TP) == 1
        low, high = c.beginning_offsets([TP])[TP], c.end_offsets([TP])[TP]
        assert 0 == low < high
        c.seek_to_time(0, TP)  # the first record (offset 0 is the leader's no-op)
        assert low <= c.position(TP) < high
        c.seek(TP, 3)
        assert c.position((TOPIC, 0)) == 3
        c.pause(TP)
        assert c.paused() == {TP}
        c.resume(TP)
        assert c.assignment() == {TP}
        c.assign([])
        assert c.assignment() == frozenset()


@row("C19")
def admin_sync(servers: str) -> None:
    with Client(servers) as client:
        metadata = client.create_topic("mig-admin", 6, 3)
        assert len(metadata.partitions) == 6


@row("C21")
def unknown_topic_sync(servers: str) -> None:
    with Consumer(servers) as c:
        c.assign([("no-such-topic", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            for _ in c.records(timeout_s=WAIT_S):
                pass


# ----------------------------------------------------------------------------- the tests
# (last: the rows above register themselves when the module is read)


def test_every_row_has_its_test() -> None:
    assert doc_rows() == set(ROWS)


@pytest.mark.parametrize("number", sorted(ROWS, key=lambda n: (n[0], int(n[1:]))))
def test_row(servers: str, number: str) -> None:
    ROWS[number](servers)
