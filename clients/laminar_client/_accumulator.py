"""The producer's accumulator: the records ``send`` takes, grouped into one open
batch per partition (:class:`ProducerBatch`), sealed in order for the core, and the
buffer's bytes; and :class:`DeliveryFuture`, a record's handle on its batch.

Used from the caller's threads (``send`` appends under one lock, with no event-loop
hop) and the core's loop (it takes sealed batches and resolves them). How a record
travels, from the application's side: :mod:`laminar_client.producer`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any

from laminar.errors import ClientClosedError
from laminar.records import Compression, Header, encode_batch, with_producer_fields
from laminar_client._producer_config import ProducerConfig
from laminar_client._sender import State
from laminar_client.metrics import error_name
from laminar_client.partitioner import StickyPartitioner, key_partition
from laminar_client.types import Callback, RecordMetadata

# The producer's logger, as before the accumulator had a module of its own.
_LOG = logging.getLogger("laminar_client.producer")


# ----------------------------------------------------------------------------- batches


class ProducerBatch:
    """One partition's records, from the first ``send`` to the outcome.

    Open (records appended under the accumulator's lock), then sealed and handed to
    the core, which stamps, sends and finally resolves it. Implements the
    :class:`~laminar_client._sender.Batch` protocol.
    """

    __slots__ = (
        "_callbacks",
        "_event",
        "_events_lock",
        "_on_done",
        "_waiters",
        "backoff_s",
        "base_offset",
        "base_sequence",
        "bytes",
        "compression",
        "created_s",
        "deadline_s",
        "done",
        "encoded",
        "encoded_bytes",
        "error",
        "headers",
        "keys",
        "partition",
        "producer_id",
        "retries",
        "sent",
        "settled",
        "state",
        "timestamps",
        "topic",
        "unknown_since_s",
        "values",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        now_s: float,
        delivery_timeout_s: float,
        compression: Compression,
        on_done: Callable[[ProducerBatch], None],
        events_lock: threading.Lock,
    ) -> None:
        """``events_lock``: the producer's lock over its batches' callbacks, waiters
        and events (see :meth:`_finish`); ``on_done`` is called once resolved."""
        self.topic = topic
        self.partition = partition
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Sequence[Header]] | None = None
        self.timestamps: list[int] = []
        self.bytes = 0
        self.created_s = now_s
        self.deadline_s = now_s + delivery_timeout_s
        self.compression = compression
        self.state = State.QUEUED
        self.producer_id = -1
        self.base_sequence = -1
        self.sent = False
        self.encoded: bytes | None = None
        self.encoded_bytes = 0  # kept after ``encoded`` is let go, for the metrics
        self.retries = 0
        self.backoff_s = 0.0
        self.unknown_since_s: float | None = None
        self.done = False  # resolved (the outcome is set; callbacks may still run)
        self.settled = False  # and everything after it ran: waiters may wake
        self.base_offset = -1
        self.error: BaseException | None = None
        self._event: threading.Event | None = None
        self._callbacks: list[tuple[int, Callback]] | None = None
        self._waiters: list[asyncio.Future[None]] | None = None
        self._on_done = on_done
        self._events_lock = events_lock

    @property
    def record_count(self) -> int:
        return len(self.timestamps)

    # -- the sender's protocol

    def stamp(self, producer_id: int, base_sequence: int) -> None:
        self.producer_id = producer_id
        self.base_sequence = base_sequence
        if self.encoded is None:
            self.encoded = encode_batch(
                self.values,
                keys=self.keys,
                timestamps_ms=self.timestamps,
                headers=self.headers,
                compression=self.compression,
                producer_id=producer_id,
                base_sequence=base_sequence,
            )
            self.encoded_bytes = len(self.encoded)
        elif producer_id >= 0:
            self.encoded = with_producer_fields(self.encoded, producer_id, base_sequence)

    def succeed(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._finish()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    # -- outcome

    def _finish(self) -> None:
        """Resolve the batch once: ``done`` first, then the callbacks, then the
        buffer's bytes go back, and only then (``settled``) do waiters wake, so that
        ``flush`` and ``result`` return after all of it. Callbacks, waiters and the
        event are taken under the producer's ``events_lock``, so that one registered
        from another thread at the same moment is either taken here or sees the flag."""
        if self.done:
            return
        self.done = True
        self.values = []  # the records' memory goes back now; futures keep the batch
        self.keys = self.headers = None
        self.encoded = None
        with self._events_lock:
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for index, callback in callbacks:
                self._run_callback(index, callback)
        self._on_done(self)
        with self._events_lock:
            self.settled = True
            event = self._event
            waiters, self._waiters = self._waiters, None
        if event is not None:
            event.set()
        _wake(waiters)

    def metadata(self, index: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        return RecordMetadata(self.topic, self.partition, offset, self.timestamps[index])

    def add_callback(self, index: int, callback: Callback) -> None:
        with self._events_lock:
            if not self.done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((index, callback))
                return
        self._run_callback(index, callback)

    def _run_callback(self, index: int, callback: Callback) -> None:
        try:
            callback(self.metadata(index), self.error)
        except Exception:
            _LOG.exception("a delivery callback raised")

    def wait(self, timeout_s: float | None) -> bool:
        """Block until settled (True) or ``timeout_s`` passed (False); Ctrl-C
        interrupts."""
        with self._events_lock:
            if self.settled:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout_s)

    def waiter(self) -> asyncio.Future[None]:
        """A future on the running loop, done when the batch is settled."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._events_lock:
            if not self.settled:
                if self._waiters is None:
                    self._waiters = []
                self._waiters.append(future)
                return future
        future.set_result(None)
        return future


def _wake(waiters: list[asyncio.Future[None]] | None) -> None:
    """Set each waiter's result on its own loop: at once on the running one, else
    through ``call_soon_threadsafe`` (a waiter may sit on any caller's loop)."""
    if not waiters:
        return
    running = _running_loop()
    for waiter in waiters:
        loop = waiter.get_loop()
        if loop is running:
            _set_waiter(waiter)
        else:
            loop.call_soon_threadsafe(_set_waiter, waiter)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _set_waiter(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class DeliveryFuture:
    """The outcome of one ``send``: a :class:`RecordMetadata`, or the error.

    ``result(timeout)`` blocks (seconds, as ``concurrent.futures.Future.result``;
    Ctrl-C interrupts it); ``await future`` waits without blocking; ``add_callback``
    runs a function on completion. It is a handle
    on the record's batch, not a future per record: creating it costs two fields.
    """

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        """Whether the record was acknowledged or failed (and its callbacks ran)."""
        return self._batch.settled

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged; raises its error if it failed, or
        ``TimeoutError`` if neither happened within ``timeout`` seconds (None: wait
        for ever), as ``concurrent.futures.Future.result``."""
        batch = self._batch
        if not batch.settled and not batch.wait(timeout):
            raise TimeoutError(f"record not delivered within {timeout} s")
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self._index)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error the record failed with, or None once acknowledged (``timeout``
        as :meth:`result`)."""
        batch = self._batch
        if not batch.settled and not batch.wait(timeout):
            raise TimeoutError(f"record not delivered within {timeout} s")
        return batch.error

    def add_callback(self, callback: Callback) -> None:
        """Call ``callback(metadata, error)`` once the outcome is known (at once if it is)."""
        self._batch.add_callback(self._index, callback)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.settled:
            yield from batch.waiter().__await__()
        if batch.error is not None:
            raise batch.error
        return batch.metadata(self._index)

    def __repr__(self) -> str:
        batch = self._batch
        state = "pending" if not batch.settled else ("failed" if batch.error else "done")
        return f"<DeliveryFuture {batch.topic}/{batch.partition} {state}>"


# ----------------------------------------------------------------------------- accumulator


class Accumulator:
    """Open batches per partition, sealed batches in order, and the buffer's bytes.

    Used from the caller's threads (``append``) and the core's loop (``take``,
    completion); one lock guards it all.
    """

    def __init__(
        self,
        config: ProducerConfig,
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.clock = clock
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)
        self.events_lock = threading.Lock()
        """Guards every batch's callbacks, waiters and event (held for a few field
        reads and writes, never while a callback runs; apart from ``lock``, which
        ``send`` takes for each record)."""
        self.sticky = StickyPartitioner(config.batch_bytes_max, rng)
        self.open: dict[tuple[str, int], ProducerBatch] = {}
        self.sealed: deque[ProducerBatch] = deque()
        self.unfinished: dict[int, ProducerBatch] = {}
        self.buffered = 0
        self.async_space_waiters: list[asyncio.Future[None]] = []
        self.closed = False
        # What was delivered, counted as each batch is resolved (for metrics()):
        # per topic [records, encoded bytes, batches] acknowledged, and the records
        # that failed by error name.
        self.sent: dict[str, list[int]] = {}
        self.records_failed: dict[str, int] = {}

    def append_locked(
        self,
        topic: str,
        partition: int | None,
        partitions: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
        size: int,
    ) -> tuple[DeliveryFuture, bool]:
        """Add a record (the lock held, room checked); its future, and whether the
        core must look (a batch was started or sealed). A closed accumulator refuses
        it (``ClientClosedError``)."""
        if self.closed:
            raise ClientClosedError("the producer is closed")
        if partition is None:
            partition = (
                self.sticky.partition(topic, partitions, size)
                if key is None
                else key_partition(key, partitions)
            )
        tp = (topic, partition)
        batch = self.open.get(tp)
        wake = False
        if batch is not None and batch.bytes + size > self.config.batch_bytes_max:
            self.sealed.append(batch)
            del self.open[tp]
            batch = None
        if batch is None:
            config = self.config
            batch = ProducerBatch(
                topic,
                partition,
                self.clock(),
                config.delivery_timeout_s,
                config.compression,
                self._batch_done,
                self.events_lock,
            )
            self.open[tp] = batch
            self.unfinished[id(batch)] = batch
            wake = True
        index = len(batch.timestamps)
        batch.values.append(value)
        batch.timestamps.append(timestamp_ms)
        if key is not None or batch.keys is not None:
            if batch.keys is None:
                batch.keys = [None] * index
            batch.keys.append(key)
        if headers or batch.headers is not None:
            if batch.headers is None:
                batch.headers = [()] * index
            batch.headers.append(headers)
        batch.bytes += size
        self.buffered += size
        return DeliveryFuture(batch, index), wake

    def take(
        self, now_s: float, *, everything: bool = False
    ) -> tuple[list[ProducerBatch], float | None]:
        """Sealed batches, in order, after sealing those that lingered long enough
        (all with ``everything``); and when the next open batch will have."""
        linger_s = self.config.linger_s
        next_s: float | None = None
        with self.lock:
            for tp, batch in list(self.open.items()):
                due_s = batch.created_s + linger_s
                if everything or due_s <= now_s:
                    self.sealed.append(batch)
                    del self.open[tp]
                elif next_s is None or due_s < next_s:
                    next_s = due_s
            taken = list(self.sealed)
            self.sealed.clear()
        return taken, next_s

    def _batch_done(self, batch: ProducerBatch) -> None:
        with self.lock:
            self.unfinished.pop(id(batch), None)
            self.buffered -= batch.bytes
            if batch.error is None:
                sent = self.sent.get(batch.topic)
                if sent is None:
                    sent = self.sent[batch.topic] = [0, 0, 0]
                sent[0] += batch.record_count
                sent[1] += batch.encoded_bytes
                sent[2] += 1
            else:
                name = error_name(batch.error)
                self.records_failed[name] = self.records_failed.get(name, 0) + batch.record_count
            self.space.notify_all()
            waiters, self.async_space_waiters = self.async_space_waiters, []
        _wake(waiters)

    def close(self) -> None:
        """Take no more records; wake every ``send`` waiting for room (it raises)."""
        with self.lock:
            self.closed = True
            self.space.notify_all()
            waiters, self.async_space_waiters = self.async_space_waiters, []
        _wake(waiters)

    def seal_all(self) -> list[ProducerBatch]:
        """Seal every open batch; the batches not finished yet (for ``flush``)."""
        with self.lock:
            self.sealed.extend(self.open.values())
            self.open.clear()
            return list(self.unfinished.values())
