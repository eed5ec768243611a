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

Where it lives
--------------
This module holds the facades and what they share; the settings are in
:mod:`laminar_client._producer_config`, the batches, delivery futures and the
accumulator in :mod:`laminar_client._accumulator`, the asyncio core in
:mod:`laminar_client._producer_core`, and :class:`RecordMetadata` in the leaf
:mod:`laminar_client.types` (each re-exported here).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, assert_never, cast

from typing_extensions import TypeVar

from laminar.errors import (
    BatchLimitError,
    BufferFullError,
    ClientClosedError,
    InvalidInputError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import DEFAULT_LIMITS, Compression, Header
from laminar_client._accumulator import Accumulator, DeliveryFuture, ProducerBatch
from laminar_client._aio import LoopThread
from laminar_client._producer_config import ProducerConfig
from laminar_client._producer_core import ProducerCore
from laminar_client._sender import MAX_IN_FLIGHT_LIMIT, State
from laminar_client._steps import Steps, drive, drive_async
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.metrics import ProducerMetrics, TopicSent
from laminar_client.metrics_registry import Registrations, register_metrics
from laminar_client.partitioner import moved_key_fraction
from laminar_client.retry import RetryPolicy
from laminar_client.serializers import Serializer
from laminar_client.tls import TlsOptions
from laminar_client.types import AcksMode, Callback, RecordMetadata

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

_RECORD_OVERHEAD_BYTES = 16
"""Bytes a record costs in a batch beyond its key, value and headers (timestamp and
two lengths), counted against ``batch_bytes_max`` and ``buffer_bytes_max``."""


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

    batches: Sequence[ProducerBatch]
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
        self._acc = Accumulator(config, self._rng)
        self._core = ProducerCore(
            self._client, self._acc, config, retry or self._client.retry, self._rng
        )
        self._partition_counts: dict[str, int] = {}  # as of metadata _counts_generation
        self._counts_generation = self._client.cache.generation
        # The count each topic was last written with (a grown one is warned of once).
        self._counts_used: dict[str, int] = {}
        self._count_changes = 0
        self._counts_lock = threading.Lock()
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
            partition_count_changes=self._count_changes,
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
        deleted and created again may have another count; a grown one is noted by
        :meth:`_use_count`)."""
        cache = self._client.cache
        if cache.generation != self._counts_generation:
            self._counts_generation = cache.generation
            self._partition_counts.clear()
        count = self._partition_counts.get(topic)
        if count is None:
            snapshot = cache.held()
            found = snapshot.topics.get(topic) if snapshot is not None else None
            if found is None:
                return None
            count = self._use_count(topic, found.config.partitions)
        return count

    def _use_count(self, topic: str, count: int) -> int:
        """Take ``count`` as the topic's partition count from now on. When it grew
        since this producer last used the topic, keyed records map by a new modulo:
        log that once (WARNING) and count it (``partition_count_changes``). Records
        already taken keep the partition they were given."""
        with self._counts_lock:
            self._partition_counts[topic] = count
            before = self._counts_used.get(topic)
            self._counts_used[topic] = count
            if before is None or count <= before:
                return count  # new to this producer, or the topic was re-created smaller
            self._count_changes += 1
        _LOG.warning(
            "topic %s grew %d\u2192%d partitions: keyed records now map by modulo %d; "
            "about %.0f%% of keys move (records already sent keep their partition)",
            topic,
            before,
            count,
            count,
            float(moved_key_fraction(before, count)) * 100,
        )
        return count

    def _check_partition(self, topic: str, partition: int, partitions: int) -> int:
        """The topic's partition count once it holds ``partition``: a partition beyond
        the count known is looked for again in fresh metadata for up to
        ``UNKNOWN_TOPIC_WAIT_S`` (and ``max_block_s``), as it may have just been
        added (``create_partitions``) and not have reached every node yet."""
        if partition < 0:
            raise UnknownTopicOrPartitionError(f"partition must be >= 0, got {partition}")
        if partition < partitions:
            return partitions
        timeout_s = self.config.max_block_s
        deadline_s = time.monotonic() + min(timeout_s, UNKNOWN_TOPIC_WAIT_S)
        while True:
            remaining_s = deadline_s - time.monotonic()
            if remaining_s <= 0:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has partitions 0..{partitions - 1}, not {partition}"
                )
            time.sleep(min(0.05, remaining_s))
            snapshot = self._client.metadata(refresh=True, timeout_s=max(0.001, remaining_s))
            found = snapshot.topics.get(topic)
            if found is None:
                raise UnknownTopicOrPartitionError(f"no topic {topic!r}")
            partitions = self._use_count(topic, found.config.partitions)
            if partition < partitions:
                return partitions

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
            try:
                snapshot = self._client.metadata(refresh=refresh, timeout_s=max(0.001, remaining_s))
            except UnavailableError as error:
                if not refresh or time.monotonic() < deadline_s:
                    raise
                # Missing, then looked for again until the time ran out (a look begun
                # at the very end has no time to answer): the topic is unknown.
                raise UnknownTopicOrPartitionError(f"no topic {topic!r}") from error
            found = snapshot.topics.get(topic)
            if found is not None:
                return self._use_count(topic, found.config.partitions)
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
        if partition is not None and not 0 <= partition < partitions:
            partitions = self._check_partition(topic, partition, partitions)
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
        if partition is not None and not 0 <= partition < partitions:
            partitions = await asyncio.to_thread(
                self._check_partition, topic, partition, partitions
            )
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


def _wait_all(batches: Sequence[ProducerBatch], timeout_s: float | None) -> None:
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
