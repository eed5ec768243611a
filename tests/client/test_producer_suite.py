"""One suite for both producer facades: every test is written once and runs against
:class:`Producer` and :class:`AsyncProducer` (the issue: "sync and async pass one
shared suite").

The ``facade`` fixture is parametrized over ``sync`` and ``async`` and makes
producers behind one blocking adapter (:class:`SyncAdapter`, :class:`AsyncAdapter`):
``send`` returns a handle with ``result`` / ``exception`` / ``done`` /
``add_callback``; ``send_and_wait``, ``flush``, ``close``, ``with`` and the
``buffered_bytes`` / ``counters`` properties read the same for both. The async
adapter runs one event loop in a helper thread for the fixture's lifetime, creates
each :class:`AsyncProducer` inside it, and submits every call with
``asyncio.run_coroutine_threadsafe``; its handle awaits the :class:`DeliveryFuture`
on that loop. The loop thread is stopped (after checking that the closed producers
left no task behind) at teardown.

The cluster, the harness and the helpers come from ``test_producer`` and
``fake_server``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import pytest
from laminar_client import Client
from laminar_client.partitioner import key_partition
from laminar_client.producer import (
    AsyncProducer,
    Callback,
    DeliveryFuture,
    Producer,
    ProducerConfig,
    RecordMetadata,
)
from laminar_client.serializers import json_serializer, str_serializer

from laminar.errors import (
    BatchLimitError,
    BufferFullError,
    ClientClosedError,
    DeliveryTimeoutError,
    InvalidInputError,
    NotLeaderError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import Compression, Header
from tests.client.fake_server import FakeCluster
from tests.client.test_producer import (
    FAST,
    OVERHEAD,
    Harness,
    add_topic,
    h,  # noqa: F401  (the fixture, used through `facade`)
    stored,
    stored_values,
    wait_for,
)

KINDS = ["sync", "async"]
CALL_TIMEOUT_S = 10.0  # a call on the helper loop that takes longer has hung
_T = TypeVar("_T")


# ----------------------------------------------------------------------------- adapters


class Handle(Protocol):
    """What a test reads of one send's outcome (a :class:`DeliveryFuture` for sync)."""

    def result(self, timeout_s: float | None = None) -> RecordMetadata: ...

    def exception(self, timeout_s: float | None = None) -> BaseException | None: ...

    def done(self) -> bool: ...

    def add_callback(self, callback: Callback) -> None: ...


class EventLoopThread:
    """One asyncio loop in a daemon thread; ``call`` runs a coroutine there and blocks
    for its result (an ``AssertionError`` if it hangs past ``CALL_TIMEOUT_S``)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="suite-loop", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float = CALL_TIMEOUT_S) -> _T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError
                raise
            future.cancel()
            raise AssertionError(f"a call on the event loop hung for {timeout_s} s") from None

    def leftover_tasks(self) -> list[str]:
        async def others() -> list[str]:
            current = asyncio.current_task()
            return [repr(t) for t in asyncio.all_tasks() if t is not current]

        return self.call(others())

    def stop(self) -> None:
        if self.thread.is_alive():
            try:
                self.call(self.loop.shutdown_default_executor(), 5.0)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(5.0)
        assert not self.thread.is_alive(), "the helper event loop did not stop"
        self.loop.close()


async def _outcome(
    future: DeliveryFuture, timeout_s: float | None
) -> tuple[RecordMetadata | None, BaseException | None]:
    """Await ``future`` (``TimeoutError`` after ``timeout_s``): its metadata or error."""
    try:
        async with asyncio.timeout(timeout_s):
            return await future, None
    except TimeoutError:
        raise TimeoutError(f"record not delivered within {timeout_s} s") from None
    except Exception as error:
        return None, error


class AsyncHandle:
    """A :class:`DeliveryFuture` of an :class:`AsyncProducer`, awaited on its loop."""

    def __init__(self, future: DeliveryFuture, runner: EventLoopThread) -> None:
        self.future = future
        self._runner = runner

    def result(self, timeout_s: float | None = None) -> RecordMetadata:
        metadata, error = self._runner.call(_outcome(self.future, timeout_s))
        if error is not None:
            raise error
        assert metadata is not None
        return metadata

    def exception(self, timeout_s: float | None = None) -> BaseException | None:
        return self._runner.call(_outcome(self.future, timeout_s))[1]

    def done(self) -> bool:
        return self.future.done()

    def add_callback(self, callback: Callback) -> None:
        self.future.add_callback(callback)


class ProducerAdapter:
    """The blocking surface both facades are tested through."""

    kind: str
    producer: Producer[Any, Any] | AsyncProducer[Any, Any]

    @property
    def config(self) -> ProducerConfig:
        return self.producer.config

    @property
    def buffered_bytes(self) -> int:
        return self.producer.buffered_bytes

    @property
    def counters(self) -> dict[str, int]:
        return self.producer.counters

    def send(self, topic: str, value: Any, **kwargs: Any) -> Handle:
        raise NotImplementedError

    def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        raise NotImplementedError

    def flush(self, timeout_s: float | None = None) -> None:
        raise NotImplementedError

    def close(self, timeout_s: float | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> ProducerAdapter:
        raise NotImplementedError

    def __exit__(self, *exc_info: Any) -> None:
        raise NotImplementedError


class SyncAdapter(ProducerAdapter):
    kind = "sync"
    producer: Producer[Any, Any]

    def __init__(self, producer: Producer[Any, Any]) -> None:
        self.producer = producer

    def send(self, topic: str, value: Any, **kwargs: Any) -> Handle:
        return self.producer.send(topic, value, **kwargs)

    def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        return self.producer.send_and_wait(topic, value, **kwargs)

    def flush(self, timeout_s: float | None = None) -> None:
        self.producer.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.close(timeout_s)

    def __enter__(self) -> ProducerAdapter:
        assert self.producer.__enter__() is self.producer
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.producer.__exit__(*exc_info)


class AsyncAdapter(ProducerAdapter):
    kind = "async"
    producer: AsyncProducer[Any, Any]

    def __init__(self, producer: AsyncProducer[Any, Any], runner: EventLoopThread) -> None:
        self.producer = producer
        self.runner = runner

    def send(self, topic: str, value: Any, **kwargs: Any) -> Handle:
        future = self.runner.call(self.producer.send(topic, value, **kwargs))
        return AsyncHandle(future, self.runner)

    def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> RecordMetadata:
        return self.runner.call(self.producer.send_and_wait(topic, value, **kwargs))

    def flush(self, timeout_s: float | None = None) -> None:
        self.runner.call(self.producer.flush(timeout_s))

    def close(self, timeout_s: float | None = None) -> None:
        self.runner.call(self.producer.close(timeout_s))

    def __enter__(self) -> ProducerAdapter:  # what `async with` calls, on the loop
        assert self.runner.call(self.producer.__aenter__()) is self.producer
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.runner.call(self.producer.__aexit__(*exc_info))


class Facade:
    """Makes producers of one kind on the harness's cluster (the harness's defaults:
    a fast retry policy, a seeded rng, 1 ms linger) and closes them at the end."""

    def __init__(self, kind: str, harness: Harness) -> None:
        self.kind = kind
        self.h = harness
        self.cluster: FakeCluster = harness.cluster
        self.runner = EventLoopThread() if kind == "async" else None
        self.adapters: list[ProducerAdapter] = []

    def producer(self, bootstrap: str | Client | None = None, **kwargs: Any) -> ProducerAdapter:
        """A producer on the cluster (``bootstrap``: another address, or a shared
        :class:`Client`)."""
        kwargs.setdefault("retry", FAST)
        kwargs.setdefault("rng", random.Random(7))
        kwargs.setdefault("linger_s", 0.001)
        target = self.cluster.bootstrap if bootstrap is None else bootstrap
        adapter: ProducerAdapter
        if self.runner is None:
            if bootstrap is None:
                sync = self.h.producer(**kwargs)  # the harness closes it
            else:
                sync = Producer(target, **kwargs)
                self.h.producers.append(sync)
            adapter = SyncAdapter(sync)
        else:

            async def create() -> AsyncProducer[Any, Any]:
                return AsyncProducer(target, **kwargs)  # inside the running loop

            adapter = AsyncAdapter(self.runner.call(create()), self.runner)
        self.adapters.append(adapter)
        return adapter

    def close(self) -> None:
        self.h.release.set()
        runner = self.runner
        if runner is None:
            return
        try:
            for adapter in self.adapters:
                adapter.close(timeout_s=2.0)
            leftovers = runner.leftover_tasks()
            assert not leftovers, f"closed AsyncProducers left tasks running: {leftovers}"
        finally:
            runner.stop()


@pytest.fixture(params=KINDS)
def facade(request: pytest.FixtureRequest, h: Harness) -> Iterator[Facade]:  # noqa: F811
    made = Facade(request.param, h)
    try:
        yield made
    finally:
        made.close()


def elapsed_since(start_s: float) -> float:
    return time.monotonic() - start_s


def wait_drained(producer: ProducerAdapter) -> None:
    """``buffered_bytes`` back to 0 once every record is done. Not asserted at once
    after ``flush`` or ``result``: the sync facade may still be finishing the last
    batch then (see ``test_flush_returns_after_the_callbacks_and_the_buffer_is_back``)."""
    wait_for(lambda: producer.buffered_bytes == 0, 1.0)


# ----------------------------------------------------------------------------- delivery


def test_every_record_is_stored_where_its_metadata_says(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 3)
    producer = facade.producer(batch_bytes_max=1024, linger_s=0.002)
    sent: list[tuple[Handle, dict[str, Any], bytes]] = []
    for i in range(120):
        kwargs: dict[str, Any] = {}
        if i % 4 == 0:  # an explicit partition wins over the key
            kwargs.update(partition=i % 3, key=b"pk-%d" % i)
        elif i % 4 == 1:
            kwargs["key"] = b"key-%d" % (i % 10)
        if i % 3 == 0:
            kwargs["headers"] = [("i", b"%d" % i), ("kind", facade.kind.encode())]
        if i % 2:
            kwargs["timestamp_ms"] = 1_700_000_000_000 + i
        value = b"value-%d" % i + b"." * (i % 40)
        sent.append((producer.send("t", value, **kwargs), kwargs, value))
    before_s = int(time.time() * 1000)
    producer.flush(timeout_s=5)
    assert all(handle.done() for handle, _, _ in sent)
    wait_drained(producer)
    records = stored(facade.cluster, "t")
    assert len(records) == len(sent)  # nothing written twice
    places = set()
    for handle, kwargs, value in sent:
        metadata = handle.result(0)
        assert handle.exception(0) is None
        assert metadata.topic == "t"
        if "partition" in kwargs:
            assert metadata.partition == kwargs["partition"]
        elif "key" in kwargs:
            assert metadata.partition == key_partition(kwargs["key"], 3)
        record = records[(metadata.partition, metadata.offset)]
        assert record.value == value
        assert record.key == kwargs.get("key")
        assert record.headers == tuple(kwargs.get("headers", ()))
        assert record.timestamp_ms == metadata.timestamp_ms
        if "timestamp_ms" in kwargs:
            assert metadata.timestamp_ms == kwargs["timestamp_ms"]
        else:  # stamped at send time
            assert before_s - 10_000 < metadata.timestamp_ms <= before_s
        places.add((metadata.partition, metadata.offset))
    assert len(places) == len(sent)
    # Per partition, offsets follow the send order.
    for partition in range(3):
        metadatas = [handle.result(0) for handle, _, _ in sent]
        offsets = [m.offset for m in metadatas if m.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_a_tombstone_and_an_empty_value_are_delivered(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    producer = facade.producer()
    tombstone = producer.send("t", None, key=b"gone")
    empty = producer.send("t", b"", key=b"empty")
    producer.flush(timeout_s=5)
    records = stored(facade.cluster, "t")
    assert records[(0, tombstone.result(0).offset)].value is None
    assert records[(0, empty.result(0).offset)].value == b""


def test_keyed_records_land_on_their_key_partition(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 7)
    producer = facade.producer()
    keys = [b"user-%d" % i for i in range(150)]
    handles = [producer.send("t", key, key=key) for key in keys]
    producer.flush(timeout_s=5)
    for key, handle in zip(keys, handles, strict=True):
        assert handle.result(0).partition == key_partition(key, 7)
    records = stored(facade.cluster, "t")
    assert len(records) == len(keys)
    for (partition, _), record in records.items():
        assert record.key is not None and record.value == record.key
        assert partition == key_partition(record.key, 7)


def test_keyless_records_stick_to_one_partition_per_batch(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 4)
    producer = facade.producer(batch_bytes_max=1024, linger_s=1.0)
    handles = [producer.send("t", b"v" * 84) for _ in range(12)]  # 100 bytes each
    producer.flush(timeout_s=5)
    partitions = [handle.result(0).partition for handle in handles]
    assert len(set(partitions[:11])) == 1  # 1100 bytes: the 12th switches
    assert partitions[11] != partitions[0]
    first = partitions[0]
    assert stored_values(facade.cluster, "t", first) == [b"v" * 84] * 11


# ----------------------------------------------------------------------------- callbacks


def test_callbacks_run_once_each_with_the_metadata(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t", 2)
    producer = facade.producer(batch_bytes_max=1024)
    calls: list[tuple[int, RecordMetadata, BaseException | None, threading.Thread]] = []
    lock = threading.Lock()

    def callback(index: int) -> Callback:
        def run(metadata: RecordMetadata, error: BaseException | None) -> None:
            with lock:
                calls.append((index, metadata, error, threading.current_thread()))
            if index == 3:
                raise RuntimeError("a callback that raises is only logged")

        return run

    handles = []
    for i in range(60):
        if i % 2:  # through send(callback=...) and through add_callback
            handles.append(producer.send("t", b"%d" % i, key=b"k%d" % i, callback=callback(i)))
        else:
            handle = producer.send("t", b"%d" % i, key=b"k%d" % i)
            handle.add_callback(callback(i))
            handles.append(handle)
    producer.flush(timeout_s=5)
    # (Promised before flush returns: test_flush_returns_after_the_callbacks_...)
    wait_for(lambda: len(calls) >= 60, 1.0)
    with lock:
        assert sorted(index for index, _, _, _ in calls) == list(range(60))
        for index, metadata, error, thread in calls:
            assert error is None
            assert metadata == handles[index].result(0)
            assert thread is not threading.current_thread()  # the producer's loop
    # A callback added once the record is done runs at once, in the caller's thread.
    late: list[Any] = []
    handles[0].add_callback(lambda m, e: late.append((m, e, threading.current_thread())))
    assert late == [(handles[0].result(0), None, threading.current_thread())]
    producer.close(timeout_s=2)
    assert len(calls) == 60  # still once each


def test_a_failed_record_calls_back_with_offset_minus_one_and_its_error(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t")
    facade.cluster.fail_next("n0", "Produce", InvalidInputError("refused by the broker"))
    producer = facade.producer(linger_s=0.05)
    calls: list[tuple[int, RecordMetadata, BaseException | None]] = []
    lock = threading.Lock()

    def callback(index: int) -> Callback:
        def run(metadata: RecordMetadata, error: BaseException | None) -> None:
            with lock:
                calls.append((index, metadata, error))

        return run

    handles = [
        producer.send("t", b"x", timestamp_ms=1000, callback=callback(0)),
        producer.send("t", b"y", timestamp_ms=2000, callback=callback(1)),
    ]
    producer.flush(timeout_s=5)
    wait_for(lambda: len(calls) >= 2, 1.0)
    with lock:
        assert sorted(index for index, _, _ in calls) == [0, 1]
        for index, metadata, error in calls:
            assert metadata == RecordMetadata("t", 0, -1, (1000, 2000)[index])
            assert isinstance(error, InvalidInputError)
            assert handles[index].exception(0) is error
    with pytest.raises(InvalidInputError):
        handles[0].result(0)
    wait_drained(producer)
    assert stored(facade.cluster, "t") == {}
    # The producer goes on: the next record is delivered.
    assert producer.send_and_wait("t", b"z").offset == 0
    assert len(calls) == 2


# ----------------------------------------------------------------------------- flush, close


def test_flush_delivers_everything_without_waiting_for_linger(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 3)
    producer = facade.producer(linger_s=5.0)
    producer.flush(timeout_s=1)  # nothing pending: returns at once
    handles = [producer.send("t", b"%d" % i) for i in range(50)]
    handles += [producer.send("t", b"p%d" % i, partition=i % 3) for i in range(30)]
    assert not any(handle.done() for handle in handles)  # lingering
    start_s = time.monotonic()
    producer.flush(timeout_s=5)
    assert elapsed_since(start_s) < 1.5
    assert all(handle.done() for handle in handles)
    wait_drained(producer)
    records = stored(facade.cluster, "t")
    assert len(records) == len(handles)
    for index, handle in enumerate(handles):
        metadata = handle.result(0)
        expected = b"%d" % index if index < 50 else b"p%d" % (index - 50)
        assert records[(metadata.partition, metadata.offset)].value == expected


def test_flush_raises_timeout_while_the_leader_hangs(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    facade.h.hang(times=1)
    producer = facade.producer(linger_s=0.0, attempt_timeout_s=5.0, delivery_timeout_s=10.0)
    handle = producer.send("t", b"a")
    start_s = time.monotonic()
    with pytest.raises(TimeoutError):
        producer.flush(timeout_s=0.2)
    assert 0.2 <= elapsed_since(start_s) < 0.8
    assert not handle.done()  # the record is still pending, not failed
    with pytest.raises(TimeoutError):
        handle.result(0.01)
    facade.h.release.set()
    producer.flush(timeout_s=5)
    assert handle.result(0).offset == 0
    assert stored_values(facade.cluster, "t") == [b"a"]


def test_flush_returns_after_the_callbacks_and_the_buffer_is_back(facade: Facade) -> None:
    """The Callback contract: callbacks run "before ``flush`` returns"; and once every
    record is done, none is buffered."""
    add_topic(facade.cluster, "t")
    producer = facade.producer(linger_s=0.0)
    entered, finished, never = threading.Event(), threading.Event(), threading.Event()

    def slow_callback(metadata: RecordMetadata, error: BaseException | None) -> None:
        entered.set()
        never.wait(0.3)  # a callback that takes 0.3 s
        finished.set()

    producer.send("t", b"x", callback=slow_callback)
    wait_for(entered.is_set, 2.0)  # acknowledged; its callback is running
    producer.flush(timeout_s=2)
    assert finished.is_set(), "flush returned while a callback was still running"
    assert producer.buffered_bytes == 0


def test_the_context_manager_flushes_on_exit(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    start_s = time.monotonic()
    with facade.producer(linger_s=2.0) as producer:
        handles = [producer.send("t", b"%d" % i) for i in range(50)]
        assert not any(handle.done() for handle in handles)  # still lingering
    assert elapsed_since(start_s) < 1.5  # exit did not wait for linger
    assert all(handle.done() for handle in handles)
    assert [handle.result(0).offset for handle in handles] == list(range(50))
    assert stored_values(facade.cluster, "t") == [b"%d" % i for i in range(50)]
    assert producer.buffered_bytes == 0
    with pytest.raises(ClientClosedError):
        producer.send("t", b"late")


def test_send_and_wait_does_not_wait_for_linger(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 2)
    producer = facade.producer(linger_s=20.0, delivery_timeout_s=30)
    start_s = time.monotonic()
    first = producer.send_and_wait("t", b"a", partition=1)
    headers: Sequence[Header] = [("h", b"1")]
    second = producer.send_and_wait(
        "t", b"b", key=b"k", partition=1, headers=headers, timestamp_ms=123
    )
    assert elapsed_since(start_s) < 1.5
    assert (first.topic, first.partition, first.offset) == ("t", 1, 0)
    assert (second.partition, second.offset, second.timestamp_ms) == (1, 1, 123)
    record = stored(facade.cluster, "t")[(1, 1)]
    assert (record.key, record.value, record.headers) == (b"k", b"b", (("h", b"1"),))
    assert stored_values(facade.cluster, "t", 1) == [b"a", b"b"]


def test_close_fails_pending_records_against_a_hanging_leader_in_time(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t")
    facade.h.hang()
    producer = facade.producer(linger_s=0.0, attempt_timeout_s=5.0, delivery_timeout_s=10.0)
    in_attempt = producer.send("t", b"a")
    wait_for(lambda: facade.h.produce_calls() >= 1, 2.0)
    queued = producer.send("t", b"b", timestamp_ms=77)  # waits for the first ack
    calls: list[tuple[RecordMetadata, BaseException | None]] = []
    queued.add_callback(lambda metadata, error: calls.append((metadata, error)))
    start_s = time.monotonic()
    producer.close(timeout_s=0.3)
    assert 0.3 <= elapsed_since(start_s) < 1.3
    for handle in (in_attempt, queued):
        assert handle.done()
        assert isinstance(handle.exception(0), ClientClosedError)
        with pytest.raises(ClientClosedError):
            handle.result(0)
    assert len(calls) == 1
    metadata, error = calls[0]
    assert metadata == RecordMetadata("t", 0, -1, 77)
    assert isinstance(error, ClientClosedError)
    assert producer.buffered_bytes == 0
    producer.close()  # idempotent
    assert len(calls) == 1


def test_send_after_close_raises_client_closed(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    producer = facade.producer()
    producer.send_and_wait("t", b"before")
    producer.close(timeout_s=2)
    with pytest.raises(ClientClosedError):
        producer.send("t", b"after")
    with pytest.raises(ClientClosedError):
        producer.send_and_wait("t", b"after", key=b"k")
    assert producer.buffered_bytes == 0
    producer.close(timeout_s=2)  # idempotent
    producer.flush(timeout_s=1)  # nothing pending
    assert stored_values(facade.cluster, "t") == [b"before"]


# ----------------------------------------------------------------------------- serializers


def test_serializer_errors_are_raised_by_send_itself(facade: Facade) -> None:
    add_topic(facade.cluster, "t")

    def picky(value: str) -> bytes:
        if value == "bad":
            raise ValueError("picky refuses 'bad'")
        return value.encode()

    producer = facade.producer(key_serializer=picky, value_serializer=json_serializer)
    with pytest.raises(InvalidInputError):
        producer.send("t", {1, 2})  # a set is not JSON
    with pytest.raises(InvalidInputError):
        producer.send_and_wait("t", {1, 2})
    with pytest.raises(ValueError, match="picky"):
        producer.send("t", {"ok": 1}, key="bad")
    assert producer.buffered_bytes == 0
    metadata = producer.send_and_wait("t", {"ok": 1}, key="good")
    record = stored(facade.cluster, "t")[(0, metadata.offset)]
    assert (record.key, record.value) == (b"good", b'{"ok":1}')
    plain = facade.producer()  # without serializers, keys and values must be bytes
    with pytest.raises(InvalidInputError, match="value must be bytes"):
        plain.send("t", "text")
    with pytest.raises(InvalidInputError, match="key must be bytes"):
        plain.send("t", b"v", key="k")
    with pytest.raises(InvalidInputError, match="headers"):
        plain.send("t", b"v", headers=[("h", "text")])
    assert plain.buffered_bytes == 0
    text = facade.producer(value_serializer=str_serializer)
    assert text.send_and_wait("t", "héllo").offset == 1
    assert stored_values(facade.cluster, "t") == [b'{"ok":1}', "héllo".encode()]


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    "failure",
    [
        NotLeaderError(None, None),
        UnavailableError("no quorum"),
        ("after", UnavailableError("answer lost after the write")),
    ],
    ids=["not-leader", "unavailable", "written-then-failed"],
)
def test_a_failure_amid_pipelined_batches_keeps_every_record_once_in_order(
    facade: Facade, failure: Any
) -> None:
    add_topic(facade.cluster, "t")
    harness = facade.h
    # The first produce call is held until every record is queued, so that the
    # following batches go out pipelined; the second call fails.
    facade.cluster.fail_next("n0", "Produce", harness.release, failure)
    producer = facade.producer(batch_bytes_max=1024, linger_s=0.0, attempt_timeout_s=2.0)
    values = [b"%03d" % i + b"." * 300 for i in range(60)]
    handles = [producer.send("t", value) for value in values]
    wait_for(lambda: harness.produce_calls() >= 1, 2.0)
    harness.release.set()
    producer.flush(timeout_s=5)
    assert [handle.result(0).offset for handle in handles] == list(range(60))
    assert stored_values(facade.cluster, "t") == values
    assert producer.counters["attempts_failed"] >= 1
    assert producer.counters["batches_sent"] >= 60 // 3 + 1
    wait_drained(producer)


def test_a_full_buffer_blocks_send_then_raises_without_taking_the_record(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t")
    facade.h.hang()
    producer = facade.producer(
        batch_bytes_max=1024,
        buffer_bytes_max=1024,
        max_block_s=0.3,
        linger_s=0.0,
        attempt_timeout_s=5.0,
        delivery_timeout_s=10.0,
    )
    first = producer.send("t", b"a" * 400)
    producer.send("t", b"b" * 400)
    wait_for(lambda: facade.h.produce_calls() >= 1, 2.0)  # the first batch hangs
    before = producer.buffered_bytes
    assert before == 2 * (400 + OVERHEAD)
    calls: list[Any] = []
    start_s = time.monotonic()
    with pytest.raises(BufferFullError):
        producer.send("t", b"c" * 400, callback=lambda m, e: calls.append(e))
    assert 0.3 <= elapsed_since(start_s) < 0.8
    assert producer.buffered_bytes == before
    assert not first.done()
    facade.h.release.set()
    producer.flush(timeout_s=5)
    assert stored_values(facade.cluster, "t") == [b"a" * 400, b"b" * 400]  # c not taken
    assert calls == []  # nor called back
    wait_drained(producer)
    assert producer.send_and_wait("t", b"c" * 400).offset == 2  # room again


def test_a_failing_leader_fails_records_at_the_delivery_timeout(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    facade.cluster.fail_next("n0", "Produce", *[UnavailableError("no quorum")] * 5000)
    producer = facade.producer(linger_s=0.0, attempt_timeout_s=0.2, delivery_timeout_s=0.5)
    calls: list[tuple[RecordMetadata, BaseException | None]] = []
    start_s = time.monotonic()
    handles = [
        producer.send("t", b"x", callback=lambda m, e: calls.append((m, e))),
        producer.send("t", b"y"),
    ]
    errors = [handle.exception(3.0) for handle in handles]
    elapsed_s = elapsed_since(start_s)
    for error in errors:
        assert isinstance(error, DeliveryTimeoutError), error
    assert errors[0].sent  # type: ignore[union-attr]
    assert 0.5 <= elapsed_s < 1.2
    assert facade.h.produce_calls() > 3  # it kept retrying until then
    assert stored(facade.cluster, "t") == {}
    wait_drained(producer)
    with pytest.raises(DeliveryTimeoutError):
        handles[0].result(0)
    wait_for(lambda: len(calls) >= 1, 1.0)
    assert len(calls) == 1 and calls[0][0].offset == -1 and calls[0][1] is errors[0]


def test_send_refuses_what_cannot_be_taken_before_taking_it(facade: Facade) -> None:
    add_topic(facade.cluster, "t", 3)
    producer = facade.producer(buffer_bytes_max=2048, batch_bytes_max=1024, max_block_s=0.2)
    for partition in (3, -1):
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("t", b"v", partition=partition)
    with pytest.raises(BatchLimitError):
        producer.send("t", b"x" * 2048)
    start_s = time.monotonic()
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("missing", b"v")
    assert elapsed_since(start_s) < 1.5
    assert producer.buffered_bytes == 0
    assert facade.h.produce_calls() == 0
    # The largest record that fits is taken (alone in its batch).
    assert producer.send("t", b"x" * (2048 - OVERHEAD), partition=2).result(5).offset == 0


def test_compressed_batches_round_trip(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    producer = facade.producer(compression=Compression.ZSTD, batch_bytes_max=4096)
    values = [b"%04d" % i + b"z" * 200 for i in range(100)]
    handles = [producer.send("t", value, key=b"k") for value in values]
    producer.flush(timeout_s=5)
    assert [handle.result(0).offset for handle in handles] == list(range(100))
    assert stored_values(facade.cluster, "t") == values


# ----------------------------------------------------------------------------- close races


def test_a_send_fetching_metadata_while_close_runs_does_not_take_the_record(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t")
    # A shared client (the producer does not close it), whose first Metadata hangs.
    client = Client(facade.cluster.bootstrap, metadata_timeout_s=5.0, attempt_timeout_s=5.0)
    try:
        for node in facade.cluster.nodes:
            facade.h.hang(node, "Metadata", times=1)
        producer = facade.producer(client, linger_s=0.0, delivery_timeout_s=10.0)
        calls: list[BaseException | None] = []
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            sending = pool.submit(producer.send, "t", b"x", callback=lambda m, e: calls.append(e))
            wait_for(lambda: facade.cluster.calls_to("Metadata"), 2.0)  # send waits
            producer.close(timeout_s=0.2)
            assert not sending.done()
            facade.h.release.set()  # the metadata answers once the producer is closed
            try:
                handle = sending.result(3.0)
            except ClientClosedError:
                assert calls == []  # refused: not taken, not called back
            else:  # taken: it must then fail like every record pending at close
                assert isinstance(handle.exception(0.3), ClientClosedError)
                wait_for(lambda: calls, 1.0)
                assert len(calls) == 1 and isinstance(calls[0], ClientClosedError)
        wait_drained(producer)
    finally:
        client.close()


def test_a_send_fetching_metadata_while_close_runs_raises_client_closed(
    facade: Facade,
) -> None:
    add_topic(facade.cluster, "t")
    for node in facade.cluster.nodes:
        facade.h.hang(node, "Metadata", times=1)
    producer = facade.producer(linger_s=0.0)  # owns its client
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sending = pool.submit(producer.send, "t", b"x")
        wait_for(lambda: facade.cluster.calls_to("Metadata"), 2.0)  # send waits
        producer.close(timeout_s=0.2)
        facade.h.release.set()
        with pytest.raises(ClientClosedError):
            sending.result(3.0)
    assert producer.buffered_bytes == 0


def _blocked_senders(adapter: ProducerAdapter) -> int:
    """How many sends wait for buffer room (the accumulator's waiters; for the sync
    facade, the waiters of its ``threading.Condition``)."""
    acc = adapter.producer._acc
    with acc.lock:
        if isinstance(adapter, AsyncAdapter):
            return sum(not waiter.done() for waiter in acc.async_space_waiters)
        return len(acc.space._waiters)  # type: ignore[attr-defined]


def test_a_send_blocked_on_a_full_buffer_does_not_outlive_close(facade: Facade) -> None:
    add_topic(facade.cluster, "t")
    facade.h.hang()
    producer = facade.producer(
        batch_bytes_max=1024,
        buffer_bytes_max=1024,
        max_block_s=5.0,
        linger_s=0.0,
        attempt_timeout_s=5.0,
        delivery_timeout_s=10.0,
    )
    producer.send("t", b"a" * 400)
    producer.send("t", b"b" * 400)
    wait_for(lambda: facade.h.produce_calls() >= 1, 2.0)  # a hangs at the leader
    calls: list[BaseException | None] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        blocked = pool.submit(producer.send, "t", b"c" * 400, callback=lambda m, e: calls.append(e))
        wait_for(lambda: _blocked_senders(producer) == 1, 2.0)  # c waits for room
        producer.close(timeout_s=0.2)
        try:
            handle = blocked.result(2.0)
        except ClientClosedError:
            assert calls == []  # refused: not taken, not called back
        else:  # taken: it must then fail like every record pending at close
            assert isinstance(handle.exception(0.3), ClientClosedError)
            assert len(calls) == 1 and isinstance(calls[0], ClientClosedError)
    assert producer.buffered_bytes == 0  # after close, at once
