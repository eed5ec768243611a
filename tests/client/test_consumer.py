"""`Consumer` and `AsyncConsumer` against the in-process fake cluster.

One behaviour suite, written once: the ``consumer`` fixture is parametrized over
``"sync"`` and ``"async"`` and hands out a `Facade` with the same blocking
operations for both. The async facade runs its `AsyncConsumer` on an event loop in
a helper thread and submits each operation to it as a coroutine, so a test reads
the same either way, including operations made while an iteration is suspended
(`Facade.stream`). Records are appended to the fake's logs directly (`append`), so
a test controls batch boundaries, control batches and the log start.

Nothing waits for a fixed time to let something happen: `wait_until` polls a
condition against a deadline. A few tests check that something does *not* happen
(no records of a paused partition) by reading with a short idle timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from laminar_client import (
    AsyncConsumer,
    ClientClosedError,
    Consumer,
    ConsumerBatch,
    ConsumerRecord,
    RetryPolicy,
    TopicPartition,
)

from laminar.errors import (
    ChecksumMismatchError,
    InvalidInputError,
    OffsetOutOfRangeError,
    StorageError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import (
    Compression,
    Header,
    encode_batch,
    encode_control_batch,
    with_leader_fields,
)
from tests.client.fake_server import FakeCluster

FAST = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=5, attempts_max=20)
OP_TIMEOUT_S = 5.0  # bound on any one facade operation (a hung one fails the test)
READ_TIMEOUT_S = 1.5  # bound on a read that expects records
QUIET_S = 0.25  # idle timeout of a read that expects no record
TOPIC = "t"
TP0 = TopicPartition(TOPIC, 0)
TP1 = TopicPartition(TOPIC, 1)
TP2 = TopicPartition(TOPIC, 2)


# ----------------------------------------------------------------------------- helpers


def wait_until(condition: Callable[[], object], timeout_s: float = 2.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.005)


def append(
    cluster: FakeCluster,
    tp: tuple[str, int],
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamps_ms: Sequence[int] | int = 0,
    headers: Sequence[Sequence[Header]] | None = None,
    compression: Compression = Compression.NONE,
) -> int:
    """Store one batch at the end of ``tp``'s log (as a leader would); its base offset."""
    raw = encode_batch(
        values, keys=keys, timestamps_ms=timestamps_ms, headers=headers, compression=compression
    )
    return _store(cluster, tp, raw, len(values))


def append_control(cluster: FakeCluster, tp: tuple[str, int]) -> int:
    return _store(cluster, tp, encode_control_batch(b"commit", b"", 0), 1)


def _store(cluster: FakeCluster, tp: tuple[str, int], raw: bytes, count: int) -> int:
    with cluster.lock:
        part = cluster.partition(*tp)
        base = part.end_offset
        part.batches.append(with_leader_fields(raw, base, 1))
        part.end_offset += count
        cluster.changed.notify_all()
    return base


def append_values(cluster: FakeCluster, tp: tuple[str, int], count: int, start: int = 0) -> int:
    """``count`` records ``b"<partition>-<i>"`` with timestamps ``1000 * i`` (i from
    ``start``), as one batch."""
    values = [b"%d-%d" % (tp[1], i) for i in range(start, start + count)]
    stamps = [1000 * i for i in range(start, start + count)]
    return append(cluster, tp, values, timestamps_ms=stamps)


def offsets(records: Sequence[ConsumerRecord[Any, Any]], tp: tuple[str, int]) -> list[int]:
    return [r.offset for r in records if (r.topic, r.partition) == tuple(tp)]


def fetch_calls(cluster: FakeCluster) -> list[tuple[str, int, int]]:
    """Every Fetch the fake saw: node, partition, offset."""
    with cluster.lock:
        return [
            (node, request.partition, request.offset)  # type: ignore[attr-defined]
            for node, method, request in cluster.calls
            if method == "Fetch"
        ]


# ----------------------------------------------------------------------------- facades


class Stream:
    """An iteration of ``records()`` or ``batches()`` driven one item at a time (other
    operations can run while it is suspended)."""

    def __init__(self, next_: Callable[[], Any], close: Callable[[], None]) -> None:
        self._next = next_
        self.close = close

    def next(self) -> Any:
        """The next record or batch; None once the iteration ended (idle timeout)."""
        return self._next()

    def take(self, count: int) -> list[Any]:
        got = []
        while len(got) < count and (record := self.next()) is not None:
            got.append(record)
        return got


class Facade:
    """The operations a test uses, blocking, the same for both consumers."""

    kind: str
    consumer: Any

    def _call(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    def assign(self, partitions: Any) -> None:
        self._call("assign", partitions)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        self._call("seek", tp, offset)

    def seek_to_beginning(self, *tps: tuple[str, int]) -> None:
        self._call("seek_to_beginning", *tps)

    def seek_to_end(self, *tps: tuple[str, int]) -> None:
        self._call("seek_to_end", *tps)

    def seek_to_time(self, timestamp_ms: int, *tps: tuple[str, int]) -> None:
        self._call("seek_to_time", timestamp_ms, *tps)

    def pause(self, *tps: tuple[str, int]) -> None:
        self._call("pause", *tps)

    def resume(self, *tps: tuple[str, int]) -> None:
        self._call("resume", *tps)

    def position(self, tp: tuple[str, int]) -> int:
        return int(self._call("position", tp))

    def lag(self) -> dict[TopicPartition, int]:
        return dict(self._call("lag"))

    def close(self) -> None:
        self._call("close")

    def read(self, count: int, timeout_s: float = READ_TIMEOUT_S) -> list[Any]:
        """Up to ``count`` records, ending early after ``timeout_s`` without one."""
        raise NotImplementedError

    def quiet(self, timeout_s: float = QUIET_S) -> list[Any]:
        """Whatever arrives before ``timeout_s`` without a record (expected: nothing)."""
        return self.read(1_000_000, timeout_s)

    def batches(
        self, count: int, max_records: int = 10_000, timeout_s: float = READ_TIMEOUT_S
    ) -> list[ConsumerBatch[Any, Any]]:
        """Batches until they hold ``count`` records (or ``timeout_s`` without one)."""
        raise NotImplementedError

    def stream(self, timeout_s: float = READ_TIMEOUT_S, max_records: int | None = None) -> Stream:
        """``records(timeout_s)``, or ``batches(max_records, timeout_s)`` when
        ``max_records`` is given, one item per `Stream.next` call."""
        raise NotImplementedError

    def read_forever(self) -> concurrent.futures.Future[list[Any]]:
        """Iterate ``records()`` (no timeout) in the background until it ends."""
        raise NotImplementedError

    def blocked(self) -> bool:
        """Whether a reader waits for records (white box: the inbox's waiters)."""
        raise NotImplementedError


class SyncFacade(Facade):
    kind = "sync"

    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        self.consumer = Consumer(bootstrap, **kwargs)

    def _call(self, name: str, *args: Any) -> Any:
        return getattr(self.consumer, name)(*args)

    def read(self, count: int, timeout_s: float = READ_TIMEOUT_S) -> list[Any]:
        got: list[Any] = []
        with contextlib.closing(self.consumer.records(timeout_s=timeout_s)) as records:
            for record in records:
                got.append(record)
                if len(got) >= count:
                    break
        return got

    def batches(
        self, count: int, max_records: int = 10_000, timeout_s: float = READ_TIMEOUT_S
    ) -> list[ConsumerBatch[Any, Any]]:
        got: list[ConsumerBatch[Any, Any]] = []
        total = 0
        iterator = self.consumer.batches(max_records, timeout_s=timeout_s)
        with contextlib.closing(iterator) as batches:
            for batch in batches:
                got.append(batch)
                total += len(batch)
                if total >= count:
                    break
        return got

    def stream(self, timeout_s: float = READ_TIMEOUT_S, max_records: int | None = None) -> Stream:
        items = (
            self.consumer.records(timeout_s=timeout_s)
            if max_records is None
            else self.consumer.batches(max_records, timeout_s=timeout_s)
        )
        return Stream(lambda: next(items, None), items.close)

    def read_forever(self) -> concurrent.futures.Future[list[Any]]:
        future: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(list(self.consumer.records()))
            except BaseException as error:
                future.set_exception(error)

        threading.Thread(target=run, daemon=True).start()
        return future

    def blocked(self) -> bool:
        return bool(self.consumer._inbox.ready._waiters)


class AsyncFacade(Facade):
    kind = "async"

    def __init__(self, loop: asyncio.AbstractEventLoop, bootstrap: str, **kwargs: Any) -> None:
        self._loop = loop

        async def make() -> AsyncConsumer[Any, Any]:
            return AsyncConsumer(bootstrap, **kwargs)

        self.consumer = self._run(make())

    def _run(self, coroutine: Any, timeout_s: float = OP_TIMEOUT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def _call(self, name: str, *args: Any) -> Any:
        async def call() -> Any:
            result = getattr(self.consumer, name)(*args)
            return await result if inspect.isawaitable(result) else result

        return self._run(call())

    def read(self, count: int, timeout_s: float = READ_TIMEOUT_S) -> list[Any]:
        async def read() -> list[Any]:
            got: list[Any] = []
            records = self.consumer.records(timeout_s=timeout_s)
            try:
                async for record in records:
                    got.append(record)
                    if len(got) >= count:
                        break
            finally:
                await records.aclose()
            return got

        return self._run(read(), OP_TIMEOUT_S + timeout_s)

    def batches(
        self, count: int, max_records: int = 10_000, timeout_s: float = READ_TIMEOUT_S
    ) -> list[ConsumerBatch[Any, Any]]:
        async def read() -> list[ConsumerBatch[Any, Any]]:
            got: list[ConsumerBatch[Any, Any]] = []
            total = 0
            batches = self.consumer.batches(max_records, timeout_s=timeout_s)
            try:
                async for batch in batches:
                    got.append(batch)
                    total += len(batch)
                    if total >= count:
                        break
            finally:
                await batches.aclose()
            return got

        return self._run(read(), OP_TIMEOUT_S + timeout_s)

    def stream(self, timeout_s: float = READ_TIMEOUT_S, max_records: int | None = None) -> Stream:
        async def start() -> Any:
            if max_records is None:
                return self.consumer.records(timeout_s=timeout_s)
            return self.consumer.batches(max_records, timeout_s=timeout_s)

        items = self._run(start())

        async def next_() -> Any:
            try:
                return await items.__anext__()
            except StopAsyncIteration:
                return None

        return Stream(
            lambda: self._run(next_(), OP_TIMEOUT_S + timeout_s),
            lambda: self._run(items.aclose()),
        )

    def read_forever(self) -> concurrent.futures.Future[list[Any]]:
        async def read() -> list[Any]:
            return [record async for record in self.consumer.records()]

        return asyncio.run_coroutine_threadsafe(read(), self._loop)

    def blocked(self) -> bool:
        return bool(self.consumer._inbox.async_waiters)


class LoopRunner:
    """An event loop running in a daemon thread (the async facade's home)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        async def drain() -> None:
            await self.loop.shutdown_asyncgens()
            await self.loop.shutdown_default_executor()

        asyncio.run_coroutine_threadsafe(drain(), self.loop).result(OP_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(OP_TIMEOUT_S)
        self.loop.close()


DEFAULTS: dict[str, Any] = {
    "fetch_wait_s": 0.05,
    "retry": FAST,
    "attempt_timeout_s": 1.0,
    "rng": None,  # replaced per consumer by a seeded Random
}


@pytest.fixture(params=["sync", "async"])
def consumer(
    request: pytest.FixtureRequest, cluster: FakeCluster
) -> Iterator[Callable[..., Facade]]:
    """A factory of consumers of the fake cluster, of the parametrized kind (each
    closed at the end of the test)."""
    runner = LoopRunner() if request.param == "async" else None
    opened: list[Facade] = []

    def open_(**kwargs: Any) -> Facade:
        settings = {**DEFAULTS, "rng": random.Random(len(opened) + 1), **kwargs}
        facade: Facade = (
            SyncFacade(cluster.bootstrap, **settings)
            if runner is None
            else AsyncFacade(runner.loop, cluster.bootstrap, **settings)
        )
        opened.append(facade)
        return facade

    try:
        yield open_
    finally:
        try:
            errors = []
            for facade in opened:
                try:
                    facade.close()
                except Exception as error:  # close the others all the same
                    errors.append(error)
            if errors:
                raise errors[0]
        finally:
            if runner is not None:
                runner.close()


# ----------------------------------------------------------------------------- reading


def test_reads_every_record_of_several_partitions(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=3)
    expected: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
    for tp in (TP0, TP1, TP2):
        records = []
        for first in (0, 3):
            values = [b"v%d-%d" % (tp.partition, i) for i in range(first, first + 3)]
            keys = [b"k%d" % i if i % 2 else None for i in range(first, first + 3)]
            stamps = [1_700_000_000_000 + 10 * i for i in range(first, first + 3)]
            headers: list[tuple[Header, ...]] = [
                (("trace", b"%d" % i), ("empty", b"")) if i == 4 else ()
                for i in range(first, first + 3)
            ]
            base = append(cluster, tp, values, keys=keys, timestamps_ms=stamps, headers=headers)
            records += [
                ConsumerRecord(TOPIC, tp.partition, base + i, stamps[i], keys[i], values[i], h)
                for i, h in enumerate(headers)
            ]
        expected[tp] = records
    reader = consumer()
    reader.assign([TP0, TP1, TP2])
    got = reader.read(18)
    assert len(got) == 18
    for tp in (TP0, TP1, TP2):
        assert [r for r in got if r.partition == tp.partition] == expected[tp]
    assert all(type(r) is ConsumerRecord for r in got)
    assert reader.quiet() == []
    assert reader.consumer.assignment() == {TP0, TP1, TP2}


def test_records_start_at_the_asked_offset_inside_a_batch(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)  # offsets 0-4, one batch
    append_values(cluster, TP0, 5, start=5)  # 5-9
    reader = consumer()
    reader.assign({TP0: 3})
    assert offsets(reader.read(7), TP0) == list(range(3, 10))
    assert reader.quiet() == []
    # The fetch at offset 3 got the whole first batch: it started at offset 0.
    assert (fetch_calls(cluster)[0][2]) == 3

    reader.seek(TP0, 7)
    batches = reader.batches(3, max_records=2)
    assert [(b.first_offset, b.next_offset) for b in batches] == [(7, 9), (9, 10)]
    assert [r.offset for b in batches for r in b.records()] == [7, 8, 9]
    assert [r.value for r in batches[0]] == [b"0-7", b"0-8"]


def test_batches_are_slices_of_at_most_max_records(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 10)
    append_control(cluster, TP0)  # offset 10
    append_values(cluster, TP0, 2, start=11)
    reader = consumer()
    reader.assign({TP0: 1})
    batches = reader.batches(11, max_records=4)
    assert [(b.topic, b.partition) for b in batches] == [(TOPIC, 0)] * 4
    assert [(b.first_offset, b.next_offset, len(b)) for b in batches] == [
        (1, 5, 4),
        (5, 9, 4),
        (9, 10, 1),
        (11, 13, 2),
    ]
    records = [r for b in batches for r in b]
    assert [r.offset for r in records] == [*range(1, 10), 11, 12]
    assert [r.timestamp_ms for r in records] == [1000 * o for o in [*range(1, 10), 11, 12]]
    assert reader.position(TP0) == 13
    assert reader.quiet() == []


def test_control_batches_are_skipped(cluster: FakeCluster, consumer: Callable[..., Facade]) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 2)  # 0-1
    append_control(cluster, TP0)  # 2
    append_values(cluster, TP0, 2, start=3)  # 3-4
    append_control(cluster, TP0)  # 5: the log ends with a control batch
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(4), TP0) == [0, 1, 3, 4]
    assert reader.quiet() == []
    assert reader.position(TP0) == 6  # past the trailing control batch
    append_control(cluster, TP0)  # 6: a fetch answer of control batches only

    def passed_it() -> bool:
        assert reader.read(1, timeout_s=0.05) == []
        return reader.position(TP0) == 7

    wait_until(passed_it, what="the position to pass the control batch")
    assert reader.lag() == {TP0: 0}


def _store_at(cluster: FakeCluster, tp: tuple[str, int], base: int, values: list[bytes]) -> None:
    """Store one batch at ``base`` (past a gap: keyed compaction removed records)."""
    with cluster.lock:
        part = cluster.partition(*tp)
        assert base >= part.end_offset
        raw = encode_batch(values, timestamps_ms=[1000 * (base + i) for i in range(len(values))])
        part.batches.append(with_leader_fields(raw, base, 1))
        part.end_offset = base + len(values)
        cluster.changed.notify_all()


def test_gaps_between_batches_are_read_through(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    """A compacted log: batches at 0-1, 5-7 and 12, and a gap at its end (the high
    watermark is 20, the last batch ends at 13). The position moves past every
    gap, the one at the end too, without fetching in a loop."""
    cluster.add_topic(TOPIC)
    _store_at(cluster, TP0, 0, [b"a", b"b"])
    _store_at(cluster, TP0, 5, [b"c", b"d", b"e"])
    _store_at(cluster, TP0, 12, [b"f"])
    with cluster.lock:
        cluster.partition(TOPIC, 0).end_offset = 20
    reader = consumer()
    reader.assign({TP0: 3})  # in a gap: the records from the batch after it
    got = reader.read(4)
    assert offsets(got, TP0) == [5, 6, 7, 12]
    assert [r.value for r in got] == [b"c", b"d", b"e", b"f"]

    def past_the_end_gap() -> bool:
        assert reader.read(1, timeout_s=0.05) == []
        return reader.position(TP0) == 20

    wait_until(past_the_end_gap, what="the position to pass the gap at the log end")
    assert reader.lag() == {TP0: 0}
    before = len(fetch_calls(cluster))
    assert reader.quiet() == []
    # At the end now: fetches wait for new data (a few per quiet period, not hundreds).
    assert len(fetch_calls(cluster)) - before < 20
    _store_at(cluster, TP0, 25, [b"g"])
    assert offsets(reader.read(1), TP0) == [25]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_auto_offset_reset(
    cluster: FakeCluster, consumer: Callable[..., Facade], reset: str
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    cluster.partition(TOPIC, 0).log_start = 2  # retention removed offsets 0-1
    reader = consumer(auto_offset_reset=reset)
    reader.assign([TP0])
    if reset == "earliest":
        assert offsets(reader.read(3), TP0) == [2, 3, 4]
    else:
        wait_until(lambda: reader.position(TP0) == 5, what="the reset to the end")
        assert reader.quiet() == []
        append_values(cluster, TP0, 2, start=5)
        assert offsets(reader.read(2), TP0) == [5, 6]
    assert reader.quiet() == []


def test_offset_below_log_start_with_error_raises_until_a_seek(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    cluster.partition(TOPIC, 0).log_start = 3
    reader = consumer(auto_offset_reset="error")
    reader.assign({TP0: 1})
    with pytest.raises(OffsetOutOfRangeError) as raised:
        reader.read(1)
    assert (raised.value.offset, raised.value.start_offset, raised.value.end_offset) == (1, 3, 5)
    assert reader.quiet() == []  # the partition waits for a seek
    reader.seek(TP0, 3)
    assert offsets(reader.read(2), TP0) == [3, 4]
    assert reader.position(TP0) == 5


def test_offset_below_log_start_with_earliest_resets(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    cluster.partition(TOPIC, 0).log_start = 3
    reader = consumer(auto_offset_reset="earliest")
    reader.assign({TP0: 1})
    assert offsets(reader.read(2), TP0) == [3, 4]
    assert reader.quiet() == []
    reader.seek(TP0, 0)  # a seek below the log start resets too
    assert offsets(reader.read(2), TP0) == [3, 4]


@pytest.mark.parametrize("reset", ["error", "earliest"])
def test_offset_past_the_end_of_every_replica(
    cluster: FakeCluster, consumer: Callable[..., Facade], reset: str
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 3)
    reader = consumer(auto_offset_reset=reset)
    reader.assign({TP0: 50})
    if reset == "error":
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(1)
        reader.seek(TP0, 1)
        assert offsets(reader.read(2), TP0) == [1, 2]
    else:
        assert offsets(reader.read(3), TP0) == [0, 1, 2]
    # Every replica was asked before the position was declared past the end.
    assert {node for node, _, offset in fetch_calls(cluster) if offset == 50} == {
        "n0",
        "n1",
        "n2",
    }


def test_unknown_partition_raises_to_the_reader(
    cluster: FakeCluster, consumer: Callable[..., Facade], monkeypatch: pytest.MonkeyPatch
) -> None:
    import laminar_client._fetcher  # the fetch engine reads the wait

    monkeypatch.setattr(laminar_client._fetcher, "UNKNOWN_TOPIC_WAIT_S", 0.2)
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 1)
    reader = consumer()
    reader.assign({TP0: 0, ("nope", 0): 0, (TOPIC, 5): 0})
    raised = []
    deadline = time.monotonic() + 1.5
    while len(raised) < 2 and time.monotonic() < deadline:
        try:
            reader.read(10, timeout_s=0.5)
        except UnknownTopicOrPartitionError as error:
            raised.append(error)
    assert len(raised) == 2  # one per unknown partition, then they wait for a seek
    assert reader.quiet() == []
    reader.seek(TP0, 0)  # the known partition reads on
    assert offsets(reader.read(1), TP0) == [0]


# ----------------------------------------------------------------------------- seeking


def test_seek_between_reads_and_backwards(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 10)
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(3), TP0) == [0, 1, 2]
    reader.seek(TP0, 7)
    assert reader.position(TP0) == 7
    assert offsets(reader.read(3), TP0) == [7, 8, 9]
    reader.seek(TP0, 2)
    assert offsets(reader.read(8), TP0) == list(range(2, 10))
    assert reader.quiet() == []


def test_seek_in_the_middle_of_an_iteration(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 10)
    reader = consumer()
    reader.assign([TP0])
    stream = reader.stream()
    try:
        assert [r.offset for r in stream.take(2)] == [0, 1]
        reader.seek(TP0, 7)  # while the iteration is suspended inside the chunk
        assert stream.next().offset == 7  # type: ignore[union-attr]
        reader.seek(TP0, 3)
        rest = stream.take(7)
    finally:
        stream.close()
    assert [r.offset for r in rest] == [3, 4, 5, 6, 7, 8, 9]
    assert reader.position(TP0) == 10
    assert reader.quiet() == []


def test_seek_to_beginning_and_end(cluster: FakeCluster, consumer: Callable[..., Facade]) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 5)
    append_values(cluster, TP1, 3)
    cluster.partition(TOPIC, 0).log_start = 2
    reader = consumer()
    reader.assign({TP0: 4, TP1: 0})
    assert len(reader.read(4)) == 4
    reader.seek_to_beginning(TP0)
    assert reader.position(TP0) == 2
    assert offsets(reader.read(3), TP0) == [2, 3, 4]

    reader.seek_to_beginning()  # every assigned partition
    got = reader.read(6)
    assert (offsets(got, TP0), offsets(got, TP1)) == ([2, 3, 4], [0, 1, 2])

    reader.seek_to_end()
    assert (reader.position(TP0), reader.position(TP1)) == (5, 3)
    assert reader.quiet() == []
    append_values(cluster, TP1, 1, start=3)
    assert [(r.partition, r.offset) for r in reader.read(1)] == [(1, 3)]
    assert reader.lag() == {TP0: 0, TP1: 0}


def test_seek_to_time(cluster: FakeCluster, consumer: Callable[..., Facade]) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 3)  # timestamps 0, 1000, 2000
    append_values(cluster, TP0, 3, start=3)  # 3000, 4000, 5000
    append(cluster, TP1, [b"a", b"b"], timestamps_ms=[2500, 9000])
    reader = consumer()
    reader.assign({TP0: 0, TP1: 0})
    reader.seek_to_time(2500, TP0)
    assert reader.position(TP0) == 3
    assert offsets(reader.read(5), TP0) == [3, 4, 5]  # and TP1's two, from offset 0

    reader.seek_to_time(5000)  # every assigned partition; ">=": 5000 itself counts
    assert (reader.position(TP0), reader.position(TP1)) == (5, 1)
    got = reader.read(2)
    assert [(r.partition, r.offset, r.timestamp_ms) for r in sorted(got)] == [
        (0, 5, 5000),
        (1, 1, 9000),
    ]

    reader.seek_to_time(10_000)  # no record that late: the end
    assert (reader.position(TP0), reader.position(TP1)) == (6, 2)
    assert reader.quiet() == []


# ----------------------------------------------------------------------------- pause


def test_pause_stops_one_partition_and_resume_brings_it_back(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 5)
    append_values(cluster, TP1, 5)
    reader = consumer()
    reader.assign([TP0, TP1])
    reader.pause(TP0)
    assert reader.consumer.paused() == {TP0}
    got = reader.read(10, timeout_s=QUIET_S)
    assert offsets(got, TP1) == [0, 1, 2, 3, 4]
    assert offsets(got, TP0) == []
    append_values(cluster, TP0, 2, start=5)
    append_values(cluster, TP1, 2, start=5)
    assert offsets(reader.read(2), TP1) == [5, 6]  # the other partition keeps flowing
    assert reader.quiet() == []

    reader.resume(TP0)
    assert reader.consumer.paused() == frozenset()
    assert offsets(reader.read(7), TP0) == list(range(7))
    assert reader.quiet() == []


def test_pause_in_the_middle_of_a_fetched_chunk(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 10)
    reader = consumer()
    reader.assign([TP0, TP1])
    stream = reader.stream()
    try:
        assert [r.offset for r in stream.take(3)] == [0, 1, 2]
        reader.pause(TP0)  # the iteration is suspended after offset 2 of a 10-record chunk
        assert reader.position(TP0) == 3
        append_values(cluster, TP1, 2)
        assert [(r.partition, r.offset) for r in stream.take(2)] == [(1, 0), (1, 1)]
        reader.resume(TP0)
        rest = stream.take(7)
    finally:
        stream.close()
    assert [(r.partition, r.offset) for r in rest] == [(0, o) for o in range(3, 10)]
    assert reader.position(TP0) == 10
    assert reader.quiet() == []


def test_pause_keeps_prefetched_records_for_resume(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 3)
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(3), TP0) == [0, 1, 2]
    append_values(cluster, TP0, 4, start=3)
    # The lag counts a fetch's high watermark: 4 once the new records were fetched
    # (they wait in the consumer, not handed out yet).
    wait_until(lambda: reader.lag() == {TP0: 4}, what="the records to be prefetched")
    reader.pause()
    assert reader.quiet() == []
    assert reader.position(TP0) == 3
    reader.resume()
    assert offsets(reader.read(4), TP0) == [3, 4, 5, 6]
    assert reader.quiet() == []


def test_reading_after_leaving_an_iteration_early_loses_nothing(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 10)
    reader = consumer()
    reader.assign([TP0])
    got = []
    for count in (3, 3, 3, 1):  # each read leaves the iteration inside the chunk
        got += reader.read(count)
    assert offsets(got, TP0) == list(range(10))
    assert reader.batches(1, timeout_s=QUIET_S) == []  # nothing left


def test_an_iteration_left_open_loses_nothing(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    """An iteration the application leaves without closing it (breaking out of an
    ``async for``, whose generator Python closes only later, or keeping a
    generator) skips and stalls nothing: the next iteration starts where it left,
    and closing the old one late changes nothing."""
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 10)
    reader = consumer()
    reader.assign([TP0])
    got: list[Any] = []
    left_open = []
    for count in (3, 2):
        stream = reader.stream()
        got += stream.take(count)
        left_open.append(stream)
        assert offsets(got, TP0) == list(range(len(got)))
    stream = reader.stream(max_records=2)
    got += [record for batch in stream.take(1) for record in batch.records()]
    left_open.append(stream)
    got += reader.read(3)
    assert offsets(got, TP0) == list(range(10))
    for stream in left_open:
        stream.close()
    assert reader.quiet() == []


def test_seek_while_paused_takes_effect_on_resume(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 6)
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(2), TP0) == [0, 1]  # the rest of the chunk is held
    reader.pause(TP0)
    reader.seek(TP0, 4)
    assert reader.quiet() == []
    assert reader.position(TP0) == 4
    reader.resume(TP0)
    assert offsets(reader.read(2), TP0) == [4, 5]
    assert reader.quiet() == []


def test_a_paused_partition_does_not_hold_up_the_others(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    rng = random.Random(5)
    for _ in range(20):
        append(cluster, TP0, [rng.randbytes(500)])  # ~600-byte batches
    reader = consumer(fetch_bytes_max=1024, prefetch_bytes_max=4096)
    reader.assign([TP0])
    core = reader.consumer._core  # white box: the bytes prefetched
    wait_until(lambda: core.buffered + 1024 > 4096, what="t/0's prefetch to fill")
    reader.pause(TP0)
    reader.assign([TP0, TP1])
    append_values(cluster, TP1, 3)
    assert offsets(reader.read(3, timeout_s=1.0), TP1) == [0, 1, 2]


@pytest.mark.parametrize("operation", ["pause-this", "pause-other", "seek-other"])
def test_batches_interrupted_by_pause_or_seek_lose_nothing(
    cluster: FakeCluster, consumer: Callable[..., Facade], operation: str
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 10)  # one fetch answer, handed out 2 records a batch
    reader = consumer()
    reader.assign([TP0, TP1])
    stream = reader.stream(timeout_s=0.5, max_records=2)
    try:
        first = stream.next()
        assert (first.partition, first.first_offset, first.next_offset) == (0, 0, 2)
        if operation == "pause-this":
            reader.pause(TP0)
        elif operation == "pause-other":
            reader.pause(TP1)
        else:
            reader.seek(TP1, 0)
        reader.resume()
        rest = [r.offset for batch in stream.take(4) for r in batch]
    finally:
        stream.close()
    rest += offsets(reader.read(8 - len(rest), timeout_s=0.5), TP0)
    assert rest == list(range(2, 10))


def test_reassign_keeps_the_positions_of_kept_partitions(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 6)
    append_values(cluster, TP1, 2)
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(3), TP0) == [0, 1, 2]
    reader.assign([TP0, TP1])  # t/0 keeps its position
    got = reader.read(5)
    assert (offsets(got, TP0), offsets(got, TP1)) == ([3, 4, 5], [0, 1])

    reader.seek(TP0, 1)
    assert offsets(reader.read(1), TP0) == [1]  # the rest of t/0's chunk is held...
    reader.assign([TP1])  # ...and dropped with t/0
    append_values(cluster, TP0, 1, start=6)
    assert reader.quiet() == []
    with pytest.raises(InvalidInputError):
        reader.position(TP0)
    with pytest.raises(InvalidInputError):
        reader.seek(TP0, 0)
    assert reader.lag() == {TP1: 0}

    reader.assign({TP0: 5, TP1: 1})  # back, at explicit offsets
    got = reader.read(3)
    assert (offsets(got, TP0), offsets(got, TP1)) == ([5, 6], [1])


# ----------------------------------------------------------------------------- positions


def test_position_and_lag(cluster: FakeCluster, consumer: Callable[..., Facade]) -> None:
    cluster.add_topic(TOPIC, partitions=2)
    append_values(cluster, TP0, 6)
    append_values(cluster, TP0, 4, start=6)
    reader = consumer()
    reader.assign({TP0: 0, TP1: 0})
    assert reader.position(TP0) == 0
    assert reader.lag() == {TP0: 10, TP1: 0}

    assert offsets(reader.read(4), TP0) == [0, 1, 2, 3]
    assert reader.position(TP0) == 4
    assert reader.lag()[TP0] == 6

    stream = reader.stream()
    try:
        assert [r.offset for r in stream.take(2)] == [4, 5]
        assert reader.position(TP0) == 6  # while suspended after offset 5
        assert reader.lag()[TP0] == 4
    finally:
        stream.close()
    assert reader.position(TP0) == 6
    assert offsets(reader.read(4), TP0) == [6, 7, 8, 9]
    assert reader.position(TP0) == 10
    assert reader.lag() == {TP0: 0, TP1: 0}


def test_position_of_a_partition_assigned_without_offset(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 4)
    cluster.partition(TOPIC, 0).log_start = 1
    reader = consumer()
    reader.assign([TP0])
    assert reader.position(TP0) in (-1, 1)  # -1 while the start is being resolved
    wait_until(lambda: reader.position(TP0) == 1, what="the start to resolve")
    assert reader.lag() == {TP0: 3}
    assert offsets(reader.read(3), TP0) == [1, 2, 3]
    assert reader.position(TP0) == 4


def test_deserializers_are_applied_and_none_stays_none(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    seen: list[object] = []

    def decode_key(data: bytes) -> str:
        seen.append(data)
        return data.decode()

    def decode_value(data: bytes) -> object:
        seen.append(data)
        return json.loads(data)

    cluster.add_topic(TOPIC)
    append(
        cluster,
        TP0,
        [b'{"n": 1}', None, b"[2]", None],
        keys=[b"a", None, b"", b"d"],
        headers=[[("h", b"x")], [], [], []],
    )
    reader = consumer(key_deserializer=decode_key, value_deserializer=decode_value)
    reader.assign([TP0])
    got = reader.read(4)
    assert [(r.key, r.value) for r in got] == [
        ("a", {"n": 1}),
        (None, None),
        ("", [2]),
        ("d", None),
    ]
    assert got[0].headers == (("h", b"x"),)  # headers are not deserialized
    assert None not in seen
    reader.seek(TP0, 0)
    (whole,) = reader.batches(4)
    assert [(r.key, r.value) for r in whole.records()] == [
        ("a", {"n": 1}),
        (None, None),
        ("", [2]),
        ("d", None),
    ]


# ----------------------------------------------------------------------------- replicas


def test_unavailable_replica_makes_the_consumer_read_from_another(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    # The first fetch fails wherever it goes, and n0 keeps failing.
    cluster.fail_next("n0", "Fetch", *[UnavailableError("out of service")] * 1000)
    cluster.fail_next("n1", "Fetch", UnavailableError("busy"))
    cluster.fail_next("n2", "Fetch", UnavailableError("busy"))
    reader = consumer()
    reader.assign([TP0])
    assert offsets(reader.read(5), TP0) == [0, 1, 2, 3, 4]
    append_values(cluster, TP0, 3, start=5)
    assert offsets(reader.read(3), TP0) == [5, 6, 7]
    assert reader.quiet() == []
    assert reader.consumer.counters["fetch_errors"] >= 1


@pytest.mark.parametrize(
    "error",
    [UnavailableError("replica out of service"), StorageError("disk failed")],
    ids=["unavailable", "storage"],
)
def test_failing_replica_in_the_client_zone_is_left_for_another(
    cluster: FakeCluster, consumer: Callable[..., Facade], error: Exception
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    cluster.fail_next("n0", "Fetch", *[error] * 10_000)  # n0 (zone z0) keeps failing
    reader = consumer(client_zone="z0")
    reader.assign([TP0])
    assert offsets(reader.read(5, timeout_s=1.0), TP0) == [0, 1, 2, 3, 4]


def test_a_persistent_non_retriable_fetch_error_reaches_the_reader(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, rf=1)  # one replica: no other to try
    append_values(cluster, TP0, 2)
    cluster.fail_next("n0", "Fetch", *[StorageError("disk failed")] * 10_000)
    reader = consumer()
    reader.assign([TP0])
    with pytest.raises(StorageError):
        reader.read(1, timeout_s=1.0)


def report_calls(cluster: FakeCluster) -> list[tuple[str, int, int]]:
    """Every ReportCorruption the fake saw: node, partition, offset."""
    with cluster.lock:
        return [
            (node, request.partition, request.offset)  # type: ignore[attr-defined]
            for node, method, request in cluster.calls
            if method == "ReportCorruption"
        ]


@pytest.mark.parametrize("how", ["records", "batches"])
def test_a_replica_serving_a_corrupt_batch_is_left_for_another_and_reported(
    cluster: FakeCluster,
    consumer: Callable[..., Facade],
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)  # 0-4
    append_values(cluster, TP0, 5, start=5)  # 5-9: n0 serves this batch corrupt
    append_values(cluster, TP0, 5, start=10)  # 10-14
    cluster.corrupt_on("n0", TOPIC, 0, 5)
    reader = consumer(client_zone="z0")  # n0 first
    reader.assign([TP0])
    with caplog.at_level(logging.WARNING, logger="laminar_client.consumer"):
        if how == "records":
            got = reader.read(15)
            assert [(r.offset, r.value) for r in got] == [(i, b"0-%d" % i) for i in range(15)]
        else:
            batches = reader.batches(15, max_records=100)
            assert [(b.first_offset, b.next_offset) for b in batches] == [(0, 5), (5, 10), (10, 15)]
            assert [r.value for b in batches for r in b] == [b"0-%d" % i for i in range(15)]
    assert reader.quiet() == []
    assert reader.position(TP0) == 15
    assert reader.consumer.counters["corrupt_batches"] == 1
    # The first fetch went to n0, the read again of offset 5 elsewhere.
    calls = fetch_calls(cluster)
    assert calls[0] == ("n0", 0, 0)
    assert next(node for node, _, offset in calls if offset == 5) in ("n1", "n2")
    wait_until(lambda: report_calls(cluster) == [("n0", 0, 5)], what="the report to n0")
    address = cluster.address_of("n0")
    assert any(
        r.levelno == logging.WARNING
        and address in r.getMessage()
        and "t/0" in r.getMessage()
        and "offset 5" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def test_a_corrupt_batch_header_is_read_from_another_replica(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    append_values(cluster, TP0, 5, start=5)
    cluster.corrupt_on("n0", TOPIC, 0, 5, byte=30)  # in the checksummed header
    reader = consumer(client_zone="z0")
    reader.assign([TP0])
    assert offsets(reader.read(10), TP0) == list(range(10))
    assert reader.quiet() == []
    assert reader.consumer.counters["corrupt_batches"] == 1
    wait_until(lambda: report_calls(cluster) == [("n0", 0, 5)], what="the report to n0")


def test_every_replica_serving_a_corrupt_batch_raises_to_the_application(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)  # 0-4
    append_values(cluster, TP0, 5, start=5)  # 5-9: corrupt everywhere
    append_values(cluster, TP0, 5, start=10)
    for node in ("n0", "n1", "n2"):
        cluster.corrupt_on(node, TOPIC, 0, 5)
    reader = consumer()
    reader.assign([TP0])
    stream = reader.stream()
    # The good records before the batch come first, then its error.
    assert [r.offset for r in stream.take(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(ChecksumMismatchError):
        stream.next()
    assert reader.position(TP0) == 5
    assert reader.consumer.counters["corrupt_batches"] == 3
    every_replica = [("n0", 0, 5), ("n1", 0, 5), ("n2", 0, 5)]
    wait_until(lambda: sorted(report_calls(cluster)) == every_replica, what="three reports")
    # Past it, reading goes on.
    reader.seek(TP0, 10)
    assert offsets(reader.read(5), TP0) == [10, 11, 12, 13, 14]


def test_stopped_replica_fails_over_without_loss_or_duplicate(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 5)
    reader = consumer(client_zone="z0")
    reader.assign([TP0])
    assert offsets(reader.read(5), TP0) == [0, 1, 2, 3, 4]
    assert {node for node, _, _ in fetch_calls(cluster)} == {"n0"}
    cluster.nodes["n0"].stop()  # connection refused from now on (its long poll cut)
    calls_before = len(fetch_calls(cluster))
    append_values(cluster, TP0, 5, start=5)
    assert offsets(reader.read(5), TP0) == [5, 6, 7, 8, 9]
    assert reader.quiet() == []
    # (n0 may still log a call its server had taken in before it stopped.)
    assert {node for node, _, _ in fetch_calls(cluster)[calls_before:]} & {"n1", "n2"}


def test_hanging_replica_fails_over_without_loss_or_duplicate(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    append_values(cluster, TP0, 3)
    hang = threading.Event()
    try:
        cluster.fail_next("n0", "Fetch", hang)  # n0's next fetch never answers
        reader = consumer(client_zone="z0", attempt_timeout_s=0.3)
        reader.assign([TP0])
        started = time.monotonic()
        assert offsets(reader.read(3), TP0) == [0, 1, 2]
        assert time.monotonic() - started < 1.5
        assert [node for node, _, _ in fetch_calls(cluster)][:1] == ["n0"]
        append_values(cluster, TP0, 2, start=3)
        assert offsets(reader.read(2), TP0) == [3, 4]
        assert reader.quiet() == []
        served = {node for node, _, _ in fetch_calls(cluster)[1:]}
        assert served and "n0" not in served
    finally:
        hang.set()


def test_client_zone_prefers_the_replica_in_that_zone(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    # Two replicas per partition: t/0 on n0, n1; t/1 on n1, n2; t/2 on n2, n0.
    cluster.add_topic(TOPIC, partitions=3, rf=2)
    for tp in (TP0, TP1, TP2):
        append_values(cluster, tp, 2)
    reader = consumer(client_zone="z1")  # n1's zone
    reader.assign([TP0, TP1, TP2])
    assert len(reader.read(6)) == 6
    append_values(cluster, TP0, 1, start=2)
    assert offsets(reader.read(1), TP0) == [2]
    calls = fetch_calls(cluster)
    assert {node for node, partition, _ in calls if partition in (0, 1)} == {"n1"}
    assert {node for node, partition, _ in calls if partition == 2} <= {"n0", "n2"}


def test_replicas_are_spread_without_client_zone(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC, partitions=3)
    for tp in (TP0, TP1, TP2):
        append_values(cluster, tp, 1)
    # Several consumers, each partition sticking to one replica chosen at random.
    for _ in range(4):
        reader = consumer()
        reader.assign([TP0, TP1, TP2])
        assert len(reader.read(3)) == 3
    assert len({node for node, _, _ in fetch_calls(cluster)}) >= 2


# ----------------------------------------------------------------------------- prefetch


def test_prefetch_is_bounded_by_prefetch_bytes_max(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    rng = random.Random(3)
    stored = [append(cluster, TP0, [rng.randbytes(500)]) for _ in range(40)]
    batch_bytes = len(cluster.partition(TOPIC, 0).batches[0])
    fetch_bytes, prefetch_bytes = 1024, 4096
    # A fetch answer holds one batch (two exceed fetch_bytes); the loop asks for
    # more while buffered + fetch_bytes <= prefetch_bytes.
    bound = (prefetch_bytes - fetch_bytes) // batch_bytes + 1
    reader = consumer(fetch_bytes_max=fetch_bytes, prefetch_bytes_max=prefetch_bytes)
    reader.assign([TP0])
    wait_until(lambda: len(fetch_calls(cluster)) >= bound, what="the prefetch to fill")
    # Give an unbounded prefetch the time to run ahead (it would fetch all 40).
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        assert len(fetch_calls(cluster)) <= bound
        time.sleep(0.01)

    stream = reader.stream()
    try:
        first = stream.take(10)
        # Reading frees room; the consumer stays at most `bound` fetches ahead.
        wait_until(lambda: len(fetch_calls(cluster)) >= 10 + 1)
        assert len(fetch_calls(cluster)) <= 10 + bound
        rest = stream.take(30)
    finally:
        stream.close()
    assert [r.offset for r in first + rest] == stored
    assert reader.quiet() == []


# ----------------------------------------------------------------------------- closing


def test_close_ends_a_blocked_iteration_promptly(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    reader = consumer(fetch_wait_s=5.0)  # a long poll in flight when closing
    reader.assign([TP0])
    pending = reader.read_forever()
    wait_until(reader.blocked, what="the reader to block")
    wait_until(lambda: fetch_calls(cluster), what="a long poll")
    started = time.monotonic()
    reader.close()
    with contextlib.suppress(ClientClosedError):  # either ends the iteration
        assert pending.result(timeout=1.0) == []
    assert time.monotonic() - started < 1.0
    with pytest.raises(ClientClosedError):
        reader.read(1)
    reader.close()  # idempotent


def test_operations_after_close_raise(
    cluster: FakeCluster, consumer: Callable[..., Facade]
) -> None:
    cluster.add_topic(TOPIC)
    reader = consumer()
    reader.assign([TP0])
    reader.close()
    with pytest.raises(ClientClosedError):
        reader.assign([TP0])
    with pytest.raises(ClientClosedError):
        reader.seek(TP0, 0)
    with pytest.raises(ClientClosedError):
        reader.batches(1)


def test_ctrl_c_interrupts_a_blocked_sync_iteration(cluster: FakeCluster) -> None:
    cluster.add_topic(TOPIC)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with Consumer(cluster.bootstrap, fetch_wait_s=0.05, retry=FAST) as reader:
        reader.assign([TP0])
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            fired = time.monotonic() + 0.1
            with pytest.raises(KeyboardInterrupt):
                for _ in reader.records():  # no timeout: waits for ever
                    pass
            assert time.monotonic() - fired < 0.25
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        # Still usable after the interrupt.
        append_values(cluster, TP0, 1)
        assert next(reader.records(timeout_s=READ_TIMEOUT_S)).offset == 0
