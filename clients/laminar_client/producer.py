"""The batching, pipelining producer: :class:`Producer` (sync) and :class:`AsyncProducer`.

How a record travels
--------------------
``send`` serializes the key and value, picks the partition
(:mod:`laminar_client.partitioner`), and appends the record to that partition's
open batch — plain list appends under one lock, in the caller's thread, with no
event-loop hop, no thread-pool hop and no future per record: the returned
:class:`DeliveryFuture` is a two-field handle on its batch. A batch is sealed when
the next record would take it past ``batch_bytes_max``, or ``linger_s`` after its
first record, or by ``flush``.

One asyncio task (the producer's *core*) takes sealed batches in order, encodes
each once (columnar, :func:`laminar.records.encode_batch`) and sends it to the
partition's leader; up to ``max_in_flight`` batches per partition are in flight.
The order, the sequence numbers and the retries of each partition's batches are
decided by a sans-IO :class:`~laminar_client._sender.PartitionSender` (its docstring
has the rules that keep records in order and written once under retries and
leader changes). :class:`AsyncProducer` runs the core on the caller's event loop;
:class:`Producer` runs it on one private loop thread, woken once per batch.

Memory and time bounds
----------------------
``buffer_bytes_max`` bounds the bytes of records taken and not yet acknowledged or
failed; a full buffer blocks ``send`` up to ``max_block_s``, then raises
:class:`~laminar.errors.BufferFullError` (the record is not taken).
``delivery_timeout_s`` bounds the time from ``send`` to the outcome: a record not
acknowledged by then fails with :class:`~laminar.errors.DeliveryTimeoutError`.
Every record's future ends acknowledged or with an error; nothing is dropped
without one (records still buffered at ``close`` fail with
:class:`~laminar.errors.ClientClosedError`, and a producer left with unflushed
records at interpreter exit logs a warning).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, assert_never, cast

from google.protobuf.message import Message
from typing_extensions import TypeVar

from laminar.errors import (
    BatchLimitError,
    BufferFullError,
    ClientClosedError,
    InvalidInputError,
    LaminarError,
    LeaderMovedError,
    NoAnswerError,
    NotLeaderError,
    OutOfOrderSequenceError,
    RetriableError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import error_from_detail
from laminar.records import (
    DEFAULT_LIMITS,
    Compression,
    Header,
    encode_batch,
    with_producer_fields,
)
from laminar.v1 import laminar_pb2 as pb
from laminar_client._aio import AsyncTransport, LoopThread, Unimplemented
from laminar_client._sender import MAX_IN_FLIGHT_LIMIT, PartitionSender, State
from laminar_client._steps import Steps, drive, drive_async
from laminar_client.client import ACKS, UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.metadata import ClusterMetadata
from laminar_client.metadata_cache import LEADER_CHECK_INTERVAL_S, leader_moved_error
from laminar_client.metrics import (
    ProducerMetrics,
    TopicSent,
    error_name,
)
from laminar_client.metrics_registry import Registrations, register_metrics
from laminar_client.partitioner import StickyPartitioner, key_partition
from laminar_client.retry import RetryPolicy
from laminar_client.sequencing import Verdict, random_producer_id
from laminar_client.serializers import Serializer
from laminar_client.tls import TlsOptions
from laminar_client.types import AcksMode

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "AsyncProducer",
    "Callback",
    "DeliveryFuture",
    "Producer",
    "ProducerConfig",
    "RecordMetadata",
]

_LOG = logging.getLogger(__name__)
_K = TypeVar("_K", default=bytes)  # without serializers, keys and values are bytes
_V = TypeVar("_V", default=bytes)
_M = TypeVar("_M", bound=Message)

_RECORD_OVERHEAD_BYTES = 16
"""Bytes a record costs in a batch beyond its key, value and headers (timestamp and
two lengths), counted against ``batch_bytes_max`` and ``buffer_bytes_max``."""
_RESPONSE_MARGIN_S = 0.5
ELECTION_RETRY_MAX_S = 0.25
"""The longest wait before asking again for a partition whose leader is unknown or
gone (the retry policy's exponential backoff, capped lower than for other errors:
a node holds such a write until the election ends)."""
REFRESH_INTERVAL_MIN_S = 0.1
"""The producer refreshes metadata (when an error made it stale) at most this often:
during a failover every failed batch marks it stale, and refreshing for each one
in turn let through ~60 batches a second."""


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """A producer's settings (the keyword arguments of :class:`Producer`).

    - ``acks``: ``"all"`` (a majority stored the batch; the default, and what
      idempotence needs), ``"leader"`` or ``"none"``.
    - ``idempotent``: stamp batches with a producer id and sequences, so that retries
      never duplicate or reorder records (needs ``acks="all"``).
    - ``linger_s``: how long a batch waits for more records after its first one
      (Kafka's ``linger.ms``, in seconds like every duration here: 0.005 is 5 ms;
      0 sends each batch as soon as the core sees it).
    - ``batch_bytes_max``: a batch is sealed before it would pass this many bytes
      (a single larger record goes alone); keyless records switch partition after
      about this many bytes.
    - ``buffer_bytes_max``: bytes of records taken and not yet acknowledged or failed.
    - ``max_in_flight``: batches per partition in flight, at most 5.
    - ``compression``: ``Compression.NONE`` or ``Compression.ZSTD``, per batch.
    - ``delivery_timeout_s``: from ``send`` to the record's outcome, retries included.
    - ``max_block_s``: how long ``send`` waits for buffer room (or for a topic's
      metadata) before it raises.
    - ``attempt_timeout_s``: the deadline of one produce RPC.
    """

    acks: AcksMode = "all"
    idempotent: bool = True
    linger_s: float = 0.005
    batch_bytes_max: int = 1024 * 1024
    buffer_bytes_max: int = 32 * 1024 * 1024
    max_in_flight: int = MAX_IN_FLIGHT_LIMIT
    compression: Compression = Compression.NONE
    delivery_timeout_s: float = 120.0
    max_block_s: float = 60.0
    attempt_timeout_s: float = 3.0

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise InvalidInputError(f"acks must be one of {sorted(ACKS)}, got {self.acks!r}")
        if self.idempotent and self.acks != "all":
            raise InvalidInputError(
                "an idempotent producer needs acks='all' (pass idempotent=False for "
                "acks='leader' or 'none')"
            )
        if not 0 <= self.linger_s <= 60:
            raise InvalidInputError("linger_s must be in [0, 60]")
        limit = DEFAULT_LIMITS.batch_bytes_max
        if not 1024 <= self.batch_bytes_max <= limit:
            raise InvalidInputError(f"batch_bytes_max must be in [1024, {limit}]")
        if self.buffer_bytes_max < self.batch_bytes_max:
            raise InvalidInputError("buffer_bytes_max must be >= batch_bytes_max")
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT_LIMIT:
            raise InvalidInputError(
                f"max_in_flight must be in [1, {MAX_IN_FLIGHT_LIMIT}] (the broker keeps "
                f"the last {MAX_IN_FLIGHT_LIMIT} batches of each producer)"
            )
        if not isinstance(self.compression, Compression):
            raise InvalidInputError("compression must be a laminar.records.Compression")
        for name in ("delivery_timeout_s", "attempt_timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(f"{name} must be > 0")
        if self.max_block_s < 0:
            raise InvalidInputError("max_block_s must be >= 0")
        if self.delivery_timeout_s < self.linger_s + self.attempt_timeout_s:
            raise InvalidInputError(
                "delivery_timeout_s must be at least linger_s + attempt_timeout_s"
            )


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written (``offset`` -1 with ``acks="none"``,
    and in a failed record's callback)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


Callback = Callable[[RecordMetadata, BaseException | None], None]
"""``callback(metadata, None)`` on success, ``callback(metadata, error)`` on failure
(then ``metadata.offset`` is -1; topic, partition and timestamp say which record);
run on the producer's event loop (its own thread for :class:`Producer`) before
``flush`` returns: keep it short."""


# ----------------------------------------------------------------------------- batches


class _Batch:
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
        on_done: Callable[[_Batch], None],
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
        if waiters:
            running = _running_loop()
            for waiter in waiters:
                loop = waiter.get_loop()
                if loop is running:
                    _set_waiter(waiter)
                else:
                    loop.call_soon_threadsafe(_set_waiter, waiter)

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

    def __init__(self, batch: _Batch, index: int) -> None:
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


class _Accumulator:
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
        self.open: dict[tuple[str, int], _Batch] = {}
        self.sealed: deque[_Batch] = deque()
        self.unfinished: dict[int, _Batch] = {}
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
            batch = _Batch(
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

    def take(self, now_s: float, *, everything: bool = False) -> tuple[list[_Batch], float | None]:
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

    def _batch_done(self, batch: _Batch) -> None:
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
        for waiter in waiters:
            loop = waiter.get_loop()
            if loop is _running_loop():
                _set_waiter(waiter)
            else:
                loop.call_soon_threadsafe(_set_waiter, waiter)

    def close(self) -> None:
        """Take no more records; wake every ``send`` waiting for room (it raises)."""
        with self.lock:
            self.closed = True
            self.space.notify_all()
            waiters, self.async_space_waiters = self.async_space_waiters, []
        for waiter in waiters:
            loop = waiter.get_loop()
            if loop is _running_loop():
                _set_waiter(waiter)
            else:
                loop.call_soon_threadsafe(_set_waiter, waiter)

    def seal_all(self) -> list[_Batch]:
        """Seal every open batch; the batches not finished yet (for ``flush``)."""
        with self.lock:
            self.sealed.extend(self.open.values())
            self.open.clear()
            return list(self.unfinished.values())


# ----------------------------------------------------------------------------- core


class _Core:
    """The asyncio engine: takes sealed batches, sends them, resolves them."""

    def __init__(
        self,
        client: Client,
        accumulator: _Accumulator,
        config: ProducerConfig,
        retry: RetryPolicy,
        rng: random.Random,
    ) -> None:
        self._client = client
        self._acc = accumulator
        self._config = config
        self._retry = retry
        self._rng = rng
        self._acks = ACKS[config.acks]
        self._transport = AsyncTransport(call_metadata=client.call_metadata, tls=client.tls)
        self._senders: dict[tuple[str, int], PartitionSender[_Batch]] = {}
        self._active: dict[tuple[str, int], PartitionSender[_Batch]] = {}
        self._attempts: set[asyncio.Task[None]] = set()
        self._refreshing: asyncio.Future[ClusterMetadata] | None = None  # the one under way
        self._deferred: list[tuple[PartitionSender[_Batch], _Batch]] = []
        """Batches waiting for one metadata refresh before they are sent (in order)."""
        self._waker: asyncio.Future[None] | None = None
        self._woken = False
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._flush_all = False
        self.counters = {
            "batches_sent": 0,
            "multi_partition_requests": 0,
            "attempts_failed": 0,
            "restamps": 0,
            "retries": 0,
        }
        self.attempt_errors: dict[str, int] = {}
        """Failed attempts (one per batch) by :func:`~laminar_client.metrics.error_name`."""
        self._many = True  # whether nodes take ProduceMany (else one partition a request)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="laminar-producer")

    def wake(self) -> None:
        """Look at the accumulator and the senders again (on the core's loop)."""
        self._woken = True
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    def flush_soon(self) -> None:
        self._flush_all = True
        self.wake()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._woken = False
            now_s = time.monotonic()
            everything, self._flush_all = self._flush_all or self._closing, False
            sealed, next_s = self._acc.take(now_s, everything=everything)
            for batch in sealed:
                tp = (batch.topic, batch.partition)
                sender = self._senders.get(tp)
                if sender is None:
                    sender = self._new_sender()
                    self._senders[tp] = sender
                sender.enqueue(batch)
                self._active[tp] = sender
            outgoing: list[tuple[PartitionSender[_Batch], _Batch]] = []
            for tp, sender in list(self._active.items()):
                sender.expire(now_s)
                outgoing.extend((sender, batch) for batch in sender.to_send())
                deadline_s = sender.next_deadline_s()
                if deadline_s is not None and (next_s is None or deadline_s < next_s):
                    next_s = deadline_s
                if sender.idle:
                    del self._active[tp]
            if outgoing:
                self._dispatch(outgoing)
            if self._closing and not self._active and not self._acc.unfinished:
                return
            if self._woken:
                continue
            self._waker = loop.create_future()
            timer = None
            if next_s is not None:
                timer = loop.call_later(max(0.0, next_s - time.monotonic()), self.wake)
            try:
                await self._waker
            finally:
                self._waker = None
                if timer is not None:
                    timer.cancel()

    def _new_sender(self) -> PartitionSender[_Batch]:
        new_id = None
        if self._config.idempotent:
            rng = self._rng

            def new_id() -> int:
                return random_producer_id(rng)

        return PartitionSender[_Batch](
            max_in_flight=self._config.max_in_flight, new_producer_id=new_id
        )

    def _dispatch(self, outgoing: list[tuple[PartitionSender[_Batch], _Batch]]) -> None:
        """Send ``outgoing``: the batches bound for one node go in one ``ProduceMany``
        request when there are several (their leaders known now, no backoff pending),
        at most one batch per partition in a request; a partition's later batches go
        in later requests, started after, so that they arrive in order. The others
        go alone, each routing itself."""
        if self._deferred:  # behind batches waiting for a refresh: keep the order
            self._deferred.extend(outgoing)
            return
        if not (self._many and len(outgoing) > 1):
            for item in outgoing:
                self._spawn(*item)
            return
        cache = self._client.cache
        if not cache.fresh() and not cache.refreshed_within(REFRESH_INTERVAL_MIN_S):
            # One refresh for all of them, then grouped by leader (each routing
            # itself would refresh once per batch and send one request each: a
            # failover of thousands of partitions was throttled by refreshes).
            self._deferred.extend(outgoing)
            task = asyncio.get_running_loop().create_task(self._dispatch_after_refresh())
            self._attempts.add(task)
            task.add_done_callback(self._attempts.discard)
            return
        self._dispatch_grouped(outgoing)

    async def _dispatch_after_refresh(self) -> None:
        """Refresh the metadata once, then send what was deferred meanwhile."""
        try:
            deadline_s = min(batch.deadline_s for _, batch in self._deferred)
            with contextlib.suppress(LaminarError):  # each batch then routes itself
                await self._refresh(max(0.001, deadline_s - time.monotonic()))
        except asyncio.CancelledError:
            outgoing, self._deferred = self._deferred, []
            for sender, batch in outgoing:
                if batch.state is State.SENDING:
                    sender.failed(batch, ClientClosedError("producer closed before sending"))
            raise
        outgoing, self._deferred = self._deferred, []
        self._dispatch_grouped(outgoing)

    async def _refresh(self, timeout_s: float) -> None:
        """Refresh the metadata in a thread, one refresh at a time for the whole
        producer: every caller meanwhile waits for the one under way. (Each in a
        thread of its own, the callers queued for the executor's few threads and
        each refreshed again when its turn came: about 60 batches a second went out
        during a failover.)"""
        refreshing = self._refreshing
        if refreshing is None or refreshing.done():
            refreshing = asyncio.ensure_future(
                asyncio.to_thread(self._client.cache.refresh, timeout_s)
            )
            self._refreshing = refreshing
        await asyncio.shield(refreshing)

    def _dispatch_grouped(self, outgoing: list[tuple[PartitionSender[_Batch], _Batch]]) -> None:
        by_partition: dict[tuple[str, int], list[tuple[PartitionSender[_Batch], _Batch]]] = {}
        for item in outgoing:
            by_partition.setdefault((item[1].topic, item[1].partition), []).append(item)
        rounds: dict[tuple[int, str], list[tuple[PartitionSender[_Batch], _Batch]]] = {}
        for items in by_partition.values():
            addresses = [self._known_target(batch) for _, batch in items]
            if any(address is None for address in addresses):
                for item in items:  # in order, each routing itself
                    self._spawn(*item)
                continue
            for index, (item, address) in enumerate(zip(items, addresses, strict=True)):
                assert address is not None
                rounds.setdefault((index, address), []).append(item)
        loop = asyncio.get_running_loop()
        for (_, address), items in sorted(rounds.items()):
            if len(items) == 1:
                self._spawn(*items[0])
                continue
            task = loop.create_task(self._attempt_many(address, items))
            self._attempts.add(task)
            task.add_done_callback(self._attempts.discard)

    def _known_target(self, batch: _Batch) -> str | None:
        """Where ``batch`` goes, from the cache as it is (None: let it route itself)."""
        if batch.backoff_s > 0:
            return None
        try:
            targets = self._client.cache.write_targets(
                batch.topic, batch.partition, 0.0, refresh=False
            )
        except LaminarError:
            return None
        return targets[batch.retries % len(targets)]

    async def _attempt_many(
        self, address: str, items: list[tuple[PartitionSender[_Batch], _Batch]]
    ) -> None:
        """One ``ProduceMany`` to ``address`` for several partitions' batches; each
        partition's answer is handled as if it had been sent alone."""
        try:
            deadline_s = min(batch.deadline_s for _, batch in items)
            attempt_s = max(
                min(self._config.attempt_timeout_s, deadline_s - time.monotonic()), 0.001
            )
            server_s = max(attempt_s - _RESPONSE_MARGIN_S, attempt_s / 2)
            request = pb.ProduceManyRequest(
                partitions=[
                    pb.PartitionBatches(
                        topic=batch.topic, partition=batch.partition, batches=(_encoded(batch),)
                    )
                    for _, batch in items
                ],
                acks=self._acks,
                timeout_ms=max(1, int(server_s * 1000)),
            )
            self.counters["batches_sent"] += len(items)
            self.counters["multi_partition_requests"] += 1
            response = await self._watched(
                address,
                "ProduceMany",
                request,
                pb.ProduceManyResponse,
                attempt_s,
                [(batch.topic, batch.partition) for _, batch in items],
            )
        except asyncio.CancelledError:
            for sender, batch in items:
                if batch.state is State.SENDING:
                    sender.failed(batch, ClientClosedError("producer closed during the attempt"))
            raise
        except Unimplemented:
            # A node that predates ProduceMany: send one partition per request.
            self._many = False
            for sender, batch in items:
                batch.state = State.RETRY
                sender.failed(batch, UnavailableError(f"{address} has no ProduceMany"))
                batch.backoff_s = 0.0
        except Exception as error:
            self.counters["attempts_failed"] += 1
            for sender, batch in items:
                self._after_failure(sender, batch, address, error)
        else:
            self._client.cache.node_answered(address)
            for (sender, batch), answer in zip(items, response.partitions, strict=False):
                if answer.HasField("error"):
                    self.counters["attempts_failed"] += 1
                    self._after_failure(sender, batch, address, error_from_detail(answer.error))
                else:
                    offsets = answer.base_offsets
                    sender.acked(batch, offsets[0] if offsets else -1)
            for sender, batch in items[len(response.partitions) :]:  # a short answer
                self._after_failure(
                    sender, batch, address, UnavailableError("no answer for this partition")
                )
        self.counters["restamps"] = sum(s.restamps for s in self._senders.values())
        self.wake()

    def _spawn(self, sender: PartitionSender[_Batch], batch: _Batch) -> None:
        task = asyncio.get_running_loop().create_task(self._attempt(sender, batch))
        self._attempts.add(task)
        task.add_done_callback(self._attempts.discard)

    async def _attempt(self, sender: PartitionSender[_Batch], batch: _Batch) -> None:
        address: str | None = None
        try:
            if batch.backoff_s > 0:
                await asyncio.sleep(min(batch.backoff_s, batch.deadline_s - time.monotonic()))
            if time.monotonic() >= batch.deadline_s:  # a backoff may not outlast it
                batch.state = State.RETRY
                sender.expire(time.monotonic())
                self.wake()
                return
            address = await self._target(batch)
            attempt_s = min(self._config.attempt_timeout_s, batch.deadline_s - time.monotonic())
            attempt_s = max(attempt_s, 0.001)
            server_s = max(attempt_s - _RESPONSE_MARGIN_S, attempt_s / 2)
            assert batch.encoded is not None
            request = pb.ProduceRequest(
                topic=batch.topic,
                partition=batch.partition,
                batches=(batch.encoded,),
                acks=self._acks,
                timeout_ms=max(1, int(server_s * 1000)),
            )
            self.counters["batches_sent"] += 1
            response = await self._watched(
                address,
                "Produce",
                request,
                pb.ProduceResponse,
                attempt_s,
                [(batch.topic, batch.partition)],
            )
        except asyncio.CancelledError:
            if batch.state is State.SENDING:
                sender.failed(batch, ClientClosedError("producer closed during the attempt"))
            raise
        except Exception as error:
            self.counters["attempts_failed"] += 1
            self._after_failure(sender, batch, address, error)
        else:
            self._client.cache.node_answered(address)
            offsets = response.base_offsets
            sender.acked(batch, offsets[0] if offsets else -1)
        self.counters["restamps"] = sum(s.restamps for s in self._senders.values())
        self.wake()

    async def _watched(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_M],
        attempt_s: float,
        keys: list[tuple[str, int]],
    ) -> _M:
        """A write to the leader of ``keys`` at ``address``; while it has not been
        answered after the client's ``leader_check_s``, abandoned
        (:class:`LeaderMovedError`) as soon as the other replicas name a new leader
        (:meth:`laminar_client.Client._watched_call` for the synchronous client)."""
        call = self._transport.call(address, method, request, response_type, timeout_s=attempt_s)
        check_s = self._client.leader_check_s
        if check_s is None or attempt_s <= check_s:
            return await call
        pending = asyncio.ensure_future(call)
        try:
            ends_at = time.monotonic() + attempt_s
            wait_s = check_s
            while True:
                done, _ = await asyncio.wait({pending}, timeout=wait_s)
                if done:
                    return pending.result()
                remaining_s = ends_at - time.monotonic()
                wait_s = LEADER_CHECK_INTERVAL_S
                if remaining_s <= 0:
                    continue  # gRPC's own deadline ends the call
                moved = await asyncio.to_thread(
                    self._client.cache.leader_moved, keys, address, min(remaining_s, 1.0)
                )
                if moved is not None:
                    raise leader_moved_error(address, method, moved, keys)
        finally:
            if not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    async def _target(self, batch: _Batch) -> str:
        cache = self._client.cache
        if not cache.fresh() and not cache.refreshed_within(REFRESH_INTERVAL_MIN_S):
            await self._refresh(max(0.001, batch.deadline_s - time.monotonic()))
        targets = cache.write_targets(batch.topic, batch.partition, 0.0, refresh=False)
        return targets[batch.retries % len(targets)]

    def _after_failure(
        self, sender: PartitionSender[_Batch], batch: _Batch, address: str | None, error: Exception
    ) -> None:
        """Tell the cache what ``error`` says about the node, then the sender."""
        name = error_name(error)
        self.attempt_errors[name] = self.attempt_errors.get(name, 0) + 1
        cache = self._client.cache
        now_s = time.monotonic()
        redirect = False
        electing = False
        if isinstance(error, UnknownTopicOrPartitionError):
            if batch.unknown_since_s is None:
                batch.unknown_since_s = now_s
            cache.invalidate()
            if now_s - batch.unknown_since_s < UNKNOWN_TOPIC_WAIT_S:
                error = UnavailableError(str(error))  # a topic created a moment ago
        elif isinstance(error, NotLeaderError) and address is not None:
            cache.node_answered(address)
            hint = error.leader_address
            if hint and hint != address and cache.hint_usable(error.leader_id, hint):
                cache.hint_leader(batch.topic, batch.partition, hint)
                redirect = True
            else:
                cache.drop_hints_to(address)
                cache.invalidate()
                # No leader to go to: an election. A node holds a write while its
                # group elects (it answers with the winner), so asking again soon
                # costs little; backing off up to a second made the batches of a
                # failed node's partitions wait that long after the election.
                electing = True
        elif isinstance(error, LeaderMovedError):
            # Abandoned for a new leader the refreshed metadata names: go there now.
            # Nothing against the node (it may be a replica holding the write
            # through an election): it is not skipped.
            redirect = True
        elif isinstance(error, NoAnswerError) and address is not None:
            cache.node_failed(address)
            redirect = batch.retries == 0
        elif isinstance(error, OutOfOrderSequenceError):
            redirect = True  # the answer is about the order, not the node
        elif isinstance(error, RetriableError):
            if address is not None:
                cache.node_answered(address)
                cache.drop_hints_to(address)
            cache.invalidate()
        kind = sender.failed(batch, error)
        if kind is not Verdict.FATAL:
            if redirect:
                batch.backoff_s = 0.0
            elif electing:
                backoff_s = self._retry.backoff_ms(batch.retries, self._rng) / 1000
                batch.backoff_s = min(ELECTION_RETRY_MAX_S, backoff_s)
            else:
                batch.backoff_s = self._retry.backoff_ms(batch.retries, self._rng) / 1000
            batch.retries += 1
            self.counters["retries"] += 1

    async def close(self, timeout_s: float | None) -> None:
        """Refuse new records, send what is buffered and wait up to ``timeout_s``;
        then stop and fail what is left with ``ClientClosedError``."""
        self._acc.close()
        self._closing = True
        self.wake()
        task = self._task
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
            if not task.done():  # stop it first: it must not start more attempts
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        error = ClientClosedError("producer closed before the record was delivered")
        for sender in self._senders.values():
            sender.fail_all(error)
        while self._attempts:
            for attempt in list(self._attempts):
                attempt.cancel()
            await asyncio.gather(*self._attempts, return_exceptions=True)
        with self._acc.lock:
            leftovers = list(self._acc.unfinished.values())
        for batch in leftovers:  # still open or sealed, never given to a sender
            batch.fail(error)  # (a no-op for one already resolved)
        await self._transport.close()


# ----------------------------------------------------------------------------- effects
#
# What Producer and AsyncProducer do besides ``send`` is written once, as steps
# (_ProducerBase's ``_*_steps`` generators, laminar_client._steps): a step yields
# one of these wherever the facades act differently, and each facade carries it out
# its own way (``_perform``).


@dataclass(frozen=True, slots=True)
class _OnLoop:
    """Have the core call ``function()`` (Producer: soon, on its loop thread)."""

    function: Callable[[], object]


@dataclass(frozen=True, slots=True)
class _Settled:
    """Wait until each of ``batches`` is settled (``TimeoutError`` after ``timeout_s``)."""

    batches: Sequence[_Batch]
    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """Wait for ``future``'s record: its metadata, or its error raised."""

    future: DeliveryFuture


@dataclass(frozen=True, slots=True)
class _CloseCore:
    """Stop the core within ``timeout_s`` (Producer: and its loop thread)."""

    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class _CloseClient:
    """Close the producer's own client (AsyncProducer: in a worker thread)."""


_Effect = _OnLoop | _Settled | _Outcome | _CloseCore | _CloseClient


# ----------------------------------------------------------------------------- facades


class _ProducerBase(Generic[_K, _V]):
    """What both facades share: settings, serializers, partition counts."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | Client,
        *,
        key_serializer: Serializer[_K] | None = None,
        value_serializer: Serializer[_V] | None = None,
        acks: AcksMode = "all",
        idempotent: bool = True,
        linger_s: float = 0.005,
        batch_bytes_max: int = 1024 * 1024,
        buffer_bytes_max: int = 32 * 1024 * 1024,
        max_in_flight: int = MAX_IN_FLIGHT_LIMIT,
        compression: Compression = Compression.NONE,
        delivery_timeout_s: float = 120.0,
        max_block_s: float = 60.0,
        attempt_timeout_s: float = 3.0,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> None:
        config = ProducerConfig(
            acks=acks,
            idempotent=idempotent,
            linger_s=linger_s,
            batch_bytes_max=batch_bytes_max,
            buffer_bytes_max=buffer_bytes_max,
            max_in_flight=max_in_flight,
            compression=compression,
            delivery_timeout_s=delivery_timeout_s,
            max_block_s=max_block_s,
            attempt_timeout_s=attempt_timeout_s,
        )
        self.config = config
        self._client, self._owns_client = Client.shared_or_new(
            bootstrap, config.attempt_timeout_s, tls=tls, token=token
        )
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._rng = rng if rng is not None else random.Random()
        self._acc = _Accumulator(config, self._rng)
        self._core = _Core(self._client, self._acc, config, retry or self._client.retry, self._rng)
        self._partition_counts: dict[str, int] = {}  # as of metadata _counts_generation
        self._counts_generation = self._client.cache.generation
        self._record_bytes_max = min(config.buffer_bytes_max, DEFAULT_LIMITS.batch_bytes_max // 2)
        self._closed = False
        self._registrations = Registrations()
        self._exit_warning = _ExitWarning(self)
        self._exit_warning.register()
        self._start_core()

    def _start_core(self) -> None:
        """Start the core where the facade runs it (called last by ``__init__``)."""
        raise NotImplementedError

    @property
    def client(self) -> Client:
        """The :class:`~laminar_client.Client` this producer routes with (admin calls too)."""
        return self._client

    @property
    def buffered_bytes(self) -> int:
        """Bytes of records taken and not yet acknowledged or failed."""
        return self._acc.buffered

    @property
    def counters(self) -> dict[str, int]:
        """Batches sent (attempts), attempts that failed, multi-partition requests,
        restamps (new producer ids) and retries; :meth:`metrics` has more."""
        return dict(self._core.counters)

    def metrics(self) -> ProducerMetrics:
        """What this producer delivered and how (see
        :class:`~laminar_client.metrics.ProducerMetrics`, field by field). Cheap: it
        copies counters kept per batch; callable from any thread."""
        acc = self._acc
        core = self._core
        with acc.lock:
            topics = {
                topic: TopicSent(records=s[0], bytes=s[1], batches=s[2])
                for topic, s in acc.sent.items()
            }
            records_failed = dict(acc.records_failed)
            buffered = acc.buffered
            in_flight = sum(1 for b in acc.unfinished.values() if b.state is State.SENDING)
        counters = dict(core.counters)
        return ProducerMetrics(
            topics=topics,
            records_sent=sum(t.records for t in topics.values()),
            bytes_sent=sum(t.bytes for t in topics.values()),
            batches_sent=sum(t.batches for t in topics.values()),
            attempts=counters["batches_sent"],
            retries=counters["retries"],
            attempt_errors=dict(core.attempt_errors),
            records_failed=records_failed,
            restamps=counters["restamps"],
            batches_in_flight=in_flight,
            buffer_bytes=buffered,
            buffer_bytes_max=self.config.buffer_bytes_max,
        )

    def register_metrics(self, registry: CollectorRegistry, *, client_id: str) -> None:
        """Export :meth:`metrics` to the ``prometheus_client`` ``registry`` (read at
        each scrape, as ``laminar_client_producer_*`` families labelled
        ``client_id``; ``docs/client.md``, "Metrics"), until the producer closes.
        ``client_id`` tells this producer's series from others in the registry (a
        name the application chooses: letters, digits, ``._:@/-``). Needs
        ``prometheus_client`` (``pip install 'laminar[metrics]'``)."""
        register_metrics(self, self._registrations, registry, client_id)

    def _encode(
        self, value: _V | None, key: _K | None, headers: Sequence[Header]
    ) -> tuple[bytes | None, bytes | None, int]:
        """Serialized value and key, and the record's size in the buffer."""
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if value is None:
            data = None
        elif self._value_serializer is not None:
            data = self._value_serializer(value)
        elif type(value) is bytes:
            data = cast(bytes, value)
        else:
            raise InvalidInputError(
                f"value must be bytes (or give a value_serializer), not {type(value).__name__}"
            )
        if key is None:
            key_data = None
        elif self._key_serializer is not None:
            key_data = self._key_serializer(key)
        elif type(key) is bytes:
            key_data = cast(bytes, key)
        else:
            raise InvalidInputError(
                f"key must be bytes (or give a key_serializer), not {type(key).__name__}"
            )
        size = _RECORD_OVERHEAD_BYTES
        if data is not None:
            size += len(data)
        if key_data is not None:
            size += len(key_data)
        if headers:
            size += _headers_size(headers)
        if size > self._record_bytes_max:
            raise BatchLimitError(
                f"a record of {size} bytes exceeds the most one record may take "
                f"({self._record_bytes_max} bytes: half the broker's batch limit, at most "
                "buffer_bytes_max)"
            )
        return data, key_data, size

    def _partitions_of(self, topic: str) -> int | None:
        """The topic's partition count known without I/O: from this producer's copy,
        re-read from the cache's snapshot after each metadata refresh (a topic
        deleted and created again may have another count)."""
        cache = self._client.cache
        if cache.generation != self._counts_generation:
            self._counts_generation = cache.generation
            self._partition_counts.clear()
            snapshot = cache.held()
            if snapshot is not None:
                for name, found in snapshot.topics.items():
                    self._partition_counts[name] = found.config.partitions
        return self._partition_counts.get(topic)

    def _check_partition(self, topic: str, partition: int | None, partitions: int) -> None:
        if partition is not None and not 0 <= partition < partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{partitions - 1}, not {partition}"
            )

    def _load_partition_count(self, topic: str, timeout_s: float) -> int:
        """:meth:`_fetch_partition_count`; ``ClientClosedError`` if the producer was
        closed meanwhile (its client may have been closed under the call)."""
        try:
            count = self._fetch_partition_count(topic, timeout_s)
        except Exception as error:
            if self._closed:
                raise ClientClosedError("the producer is closed") from error
            raise
        if self._closed:
            raise ClientClosedError("the producer is closed")
        return count

    def _fetch_partition_count(self, topic: str, timeout_s: float) -> int:
        """The topic's partition count from metadata (blocking, up to ``timeout_s``
        for the metadata itself; a topic missing from it is looked for again for up to
        ``UNKNOWN_TOPIC_WAIT_S``, as it may still be spreading)."""
        started_s = time.monotonic()
        deadline_s = started_s + min(timeout_s, UNKNOWN_TOPIC_WAIT_S)
        refresh = False
        while True:
            remaining_s = started_s + timeout_s - time.monotonic()
            snapshot = self._client.metadata(refresh=refresh, timeout_s=max(0.001, remaining_s))
            found = snapshot.topics.get(topic)
            if found is not None:
                count = found.config.partitions
                self._partition_counts[topic] = count
                return count
            if time.monotonic() >= deadline_s:
                raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
            refresh = True
            time.sleep(0.05)

    # -- the steps both facades drive (laminar_client._steps), and their shared parts.
    # ``send`` is not a step: it runs once per record, where driving a generator (or
    # even one more call) costs a measurable part of its time; the two sends share
    # only their slow path (_room_wait_s) and the helpers above.

    def _room_wait_s(self, deadline_s: float) -> float:
        """How long ``send`` may still wait for room in the buffer; raises when the
        producer closed, or :class:`BufferFullError` when ``max_block_s`` is over."""
        if self._acc.closed:
            raise ClientClosedError("the producer is closed")
        remaining_s = deadline_s - time.monotonic()
        if remaining_s <= 0:
            raise BufferFullError(
                f"the producer's buffer ({self.config.buffer_bytes_max} bytes) stayed "
                f"full for max_block_s={self.config.max_block_s}"
            )
        return remaining_s

    def _acknowledged_steps(self, future: DeliveryFuture) -> Steps[_Effect, RecordMetadata]:
        """``send_and_wait`` after its ``send``: no linger, then the outcome."""
        yield _OnLoop(self._core.flush_soon)
        metadata: RecordMetadata = yield _Outcome(future)
        return metadata

    def _flush_steps(self, timeout_s: float | None) -> Steps[_Effect, None]:
        pending = self._acc.seal_all()
        yield _OnLoop(self._core.wake)
        yield _Settled(pending, timeout_s)

    def _close_steps(self, timeout_s: float | None) -> Steps[_Effect, None]:
        if self._closed:
            return
        self._closed = True
        self._exit_warning.unregister()
        self._registrations.close()
        try:
            yield _CloseCore(timeout_s)
        finally:
            if self._owns_client:
                yield _CloseClient()


def _headers_size(headers: Sequence[Header]) -> int:
    size = 0
    for pair in headers:
        if len(pair) != 2 or not isinstance(pair[0], str) or type(pair[1]) is not bytes:
            raise InvalidInputError("headers must be (str, bytes) pairs")
        size += len(pair[0]) + len(pair[1]) + 4
    return size


class Producer(_ProducerBase[_K, _V]):
    """A synchronous producer: ``send`` returns at once with a :class:`DeliveryFuture`.

    ``bootstrap``: one ``host:port``, a comma-separated list, a list, or a
    :class:`~laminar_client.Client` to share. Settings: see :class:`ProducerConfig`.
    ``key_serializer`` / ``value_serializer``: see :mod:`laminar_client.serializers`
    (without one, keys and values must be ``bytes``). Thread-safe. Use it as a
    context manager, which flushes and closes, or call :meth:`close`.

    Batches are sent by the core on one private event-loop thread; delivery
    callbacks run there.
    """

    def _start_core(self) -> None:
        self._thread = LoopThread("laminar-producer")
        self._thread.run(self._start())

    async def _start(self) -> None:
        self._core.start()

    def send(
        self,
        topic: str,
        value: _V | None,
        *,
        key: _K | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
        callback: Callback | None = None,
    ) -> DeliveryFuture:
        """Take a record for ``topic``; its :class:`DeliveryFuture`.

        The partition is ``partition`` if given, else the key's
        (:func:`~laminar_client.partitioner.key_partition`), else the topic's sticky
        partition. ``timestamp_ms`` defaults to now. Blocks only while the buffer is
        full (up to ``max_block_s``, then :class:`~laminar.errors.BufferFullError`)
        or while the topic's metadata is first fetched.
        """
        # Per record: straight-line code, no step to drive (see _ProducerBase._room_wait_s).
        data, key_data, size = self._encode(value, key, headers)
        partitions = self._partitions_of(topic)
        if partitions is None:
            partitions = self._load_partition_count(topic, self.config.max_block_s)
        if partition is not None:
            self._check_partition(topic, partition, partitions)
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        acc = self._acc
        with acc.lock:
            if acc.buffered + size > self.config.buffer_bytes_max:
                self._wait_for_room(size)
            future, wake = acc.append_locked(
                topic, partition, partitions, key_data, data, headers, stamp, size
            )
        if wake:
            self._thread.call_soon(self._core.wake)
        if callback is not None:
            future.add_callback(callback)
        return future

    def _wait_for_room(self, size: int) -> None:
        """Wait (the accumulator's lock held) until ``size`` bytes fit."""
        acc = self._acc
        if self._thread.in_loop_thread:
            raise BufferFullError("the buffer is full and send was called from a callback")
        deadline_s = time.monotonic() + self.config.max_block_s
        self._thread.call_soon(self._core.flush_soon)  # full buffer: don't wait for linger
        while acc.buffered + size > self.config.buffer_bytes_max:
            acc.space.wait(self._room_wait_s(deadline_s))

    def send_and_wait(
        self,
        topic: str,
        value: _V | None,
        *,
        key: _K | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's acknowledgement."""
        future = self.send(
            topic, value, key=key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
        )
        return drive(self._acknowledged_steps(future), self._perform)

    def flush(self, timeout_s: float | None = None) -> None:
        """Send every buffered record now and wait until each sent before this call
        is acknowledged or failed (``TimeoutError`` after ``timeout_s``). Per-record
        errors stay in their futures."""
        drive(self._flush_steps(timeout_s), self._perform)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush (up to ``timeout_s``), then stop; records still pending fail with
        :class:`~laminar.errors.ClientClosedError`. Idempotent."""
        drive(self._close_steps(timeout_s), self._perform)

    def __enter__(self) -> Producer[_K, _V]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _perform(self, effect: _Effect) -> Any:
        """Carry out a step's effect in the caller's thread."""
        match effect:
            case _OnLoop(function):
                self._thread.call_soon(function)
                return None
            case _Settled(batches, timeout_s):
                _wait_all(batches, timeout_s)
                return None
            case _Outcome(future):
                return future.result()
            case _CloseCore(timeout_s):
                try:
                    self._thread.run(self._core.close(timeout_s))
                finally:
                    self._thread.close()
                return None
            case _CloseClient():
                self._client.close()
                return None
            case _:
                assert_never(effect)


class AsyncProducer(_ProducerBase[_K, _V]):
    """The asyncio producer: the same surface as :class:`Producer`, as coroutines,
    on the running event loop (``send`` awaits only buffer room and first metadata).

    Create it inside a running loop; use ``async with``, or ``await close()``.
    """

    def _start_core(self) -> None:
        self._loop = asyncio.get_running_loop()  # created inside a running loop
        self._core.start()

    async def send(
        self,
        topic: str,
        value: _V | None,
        *,
        key: _K | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
        callback: Callback | None = None,
    ) -> DeliveryFuture:
        """Take a record (see :meth:`Producer.send`); ``await`` the returned future
        for its acknowledgement. Awaiting ``send`` itself waits only for buffer room
        and, for a new topic, its metadata."""
        # Per record: straight-line code, no step to drive (see _ProducerBase._room_wait_s).
        data, key_data, size = self._encode(value, key, headers)
        partitions = self._partitions_of(topic)
        if partitions is None:
            partitions = await asyncio.to_thread(
                self._load_partition_count, topic, self.config.max_block_s
            )
        if partition is not None:
            self._check_partition(topic, partition, partitions)
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        acc = self._acc
        if acc.buffered + size > self.config.buffer_bytes_max:
            await self._wait_for_room(size)
        with acc.lock:
            future, wake = acc.append_locked(
                topic, partition, partitions, key_data, data, headers, stamp, size
            )
        if wake:
            self._core.wake()
        if callback is not None:
            future.add_callback(callback)
        return future

    async def _wait_for_room(self, size: int) -> None:
        acc = self._acc
        deadline_s = time.monotonic() + self.config.max_block_s
        self._core.flush_soon()
        while acc.buffered + size > self.config.buffer_bytes_max:
            remaining_s = self._room_wait_s(deadline_s)
            waiter: asyncio.Future[None] = self._loop.create_future()
            with acc.lock:
                if acc.buffered + size <= self.config.buffer_bytes_max:
                    return
                acc.async_space_waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, remaining_s)

    async def send_and_wait(
        self,
        topic: str,
        value: _V | None,
        *,
        key: _K | None = None,
        partition: int | None = None,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """:meth:`send`, then await the record's acknowledgement."""
        future = await self.send(
            topic, value, key=key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
        )
        return await drive_async(self._acknowledged_steps(future), self._perform)

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send every buffered record now and wait until each sent before this call
        is acknowledged or failed (``TimeoutError`` after ``timeout_s``)."""
        await drive_async(self._flush_steps(timeout_s), self._perform)

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush (up to ``timeout_s``), then stop; records still pending fail with
        :class:`~laminar.errors.ClientClosedError`. Idempotent."""
        await drive_async(self._close_steps(timeout_s), self._perform)

    async def __aenter__(self) -> AsyncProducer[_K, _V]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _perform(self, effect: _Effect) -> Any:
        """Carry out a step's effect on the running event loop."""
        match effect:
            case _OnLoop(function):
                function()
                return None
            case _Settled(batches, timeout_s):
                waiters = [batch.waiter() for batch in batches if not batch.settled]
                if waiters:
                    await asyncio.wait_for(asyncio.gather(*waiters), timeout_s)
                return None
            case _Outcome(future):
                return await future
            case _CloseCore(timeout_s):
                await self._core.close(timeout_s)
                return None
            case _CloseClient():
                await asyncio.to_thread(self._client.close)
                return None
            case _:
                assert_never(effect)


def _encoded(batch: _Batch) -> bytes:
    encoded = batch.encoded
    assert encoded is not None, "a batch is encoded when it is first stamped"
    return encoded


def _wait_all(batches: Sequence[_Batch], timeout_s: float | None) -> None:
    deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
    for batch in batches:
        remaining_s = None if deadline_s is None else max(0.0, deadline_s - time.monotonic())
        if not batch.wait(remaining_s):
            raise TimeoutError(f"flush did not finish within {timeout_s} s")


class _ExitWarning:
    """A producer's promise that records it still holds at interpreter exit are not
    lost silently: registered with :mod:`atexit` when the producer is made, it logs
    a warning then if the producer was not closed and has batches not delivered.
    ``close`` unregisters it; so does the producer's garbage collection (it holds
    the producer weakly: a producer dropped without ``close`` is not kept alive)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: _ProducerBase[Any, Any]) -> None:
        self._producer = weakref.ref(producer)

    def register(self) -> None:
        producer = self._producer()
        assert producer is not None, "registered by the producer's __init__"
        atexit.register(self)
        weakref.finalize(producer, atexit.unregister, self).atexit = False

    def unregister(self) -> None:
        atexit.unregister(self)

    def __call__(self) -> None:
        producer = self._producer()
        if producer is None or producer._closed:
            return
        acc = producer._acc
        if acc.unfinished:
            _LOG.warning(
                "a laminar producer was not closed: %d batches (%d bytes) were never "
                "delivered; call flush() or close(), or use it as a context manager",
                len(acc.unfinished),
                acc.buffered,
            )
