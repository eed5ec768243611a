"""The consumer's fetch engine: the asyncio core that fetches each assigned
partition, the inbox its answers wait in, and the chunks they arrive as.

:class:`FetchCore` runs on the consumer's event loop (a :class:`Consumer`'s loop
thread, or the application's loop for :class:`AsyncConsumer`): one fetch loop per
assigned, unpaused partition, replica choice, resets, backoff and corruption reports.
:class:`Inbox` is where its answers (:class:`Chunk`) wait for the application's
thread, which verifies and decodes them (:func:`verified`). How records arrive, from
the application's side: :mod:`laminar_client.consumer`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from laminar.errors import (
    InvalidInputError,
    LaminarError,
    NoAnswerError,
    OffsetOutOfRangeError,
    RecordFormatError,
    RetriableError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import BatchHeader, iter_batches, verify_batch
from laminar.v1 import laminar_pb2 as pb
from laminar_client._aio import AsyncTransport
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.metrics import LatencyRecorder, error_name
from laminar_client.retry import RetryPolicy
from laminar_client.types import OffsetReset, TopicPartition

# The consumer's logger, as before the engine had a module of its own: an application
# that tunes "laminar_client.consumer" still hears of failed fetches and corruption.
_LOG = logging.getLogger("laminar_client.consumer")

_AVOID_S = 1.0
"""How long a replica that answered a fetch with an error (or whose log ends before
the position) is left for the others."""
_REPORTS_MAX = 16
"""Corruption reports to nodes under way at once; more are only logged."""


# ----------------------------------------------------------------------------- chunks


class Chunk:
    """One fetch answer for one partition, as the inbox holds it."""

    __slots__ = (
        "data",
        "epoch",
        "error",
        "high_watermark",
        "nbytes",
        "next_offset",
        "offset_min",
        "source",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        epoch: int,
        data: bytes,
        offset_min: int,
        next_offset: int,
        high_watermark: int,
        error: LaminarError | None = None,
        source: str = "",
    ) -> None:
        self.tp = tp
        self.epoch = epoch
        self.data = data
        self.offset_min = offset_min
        self.next_offset = next_offset
        self.high_watermark = high_watermark
        self.nbytes = len(data)
        self.error = error
        self.source = source  # the address of the replica that served it


class CorruptChunkError(Exception):
    """A batch of a fetch answer failed verification (raised on the application's
    thread, handled by the consumer's ``_Reader._corrupted``)."""

    def __init__(self, offset: int, error: RecordFormatError) -> None:
        super().__init__(str(error))
        self.offset = offset
        """Where the failing batch starts (the offset after the good batches before
        it, or the chunk's first offset): the partition reads again from there."""
        self.error = error


def verified(chunk: Chunk, stop_offset: int | None = None) -> list[tuple[int, BatchHeader]]:
    """The whole batches of a fetch answer (up to the one holding ``stop_offset``),
    header and payload checksums verified: ``(position, header)`` each; raises
    :class:`CorruptChunkError` at the first that fails."""
    batches: list[tuple[int, BatchHeader]] = []
    data = chunk.data
    size = len(data)
    position = 0
    offset = chunk.offset_min
    try:
        while position < size and (stop_offset is None or offset < stop_offset):
            header = verify_batch(data, position)
            batches.append((position, header))
            position += header.length
            offset = header.next_offset
    except RecordFormatError as error:
        raise CorruptChunkError(offset, error) from None
    return batches


# ----------------------------------------------------------------------------- core


@dataclass(eq=False)
class PartitionState:
    """The core's state of one assigned partition."""

    tp: TopicPartition
    fetch_offset: int | None  # None: to be reset
    epoch: int = 0
    paused: bool = False
    high_watermark: int = -1
    log_start: int = -1
    resolved: int | None = None  # where it started (after a reset, or a seek)
    replica: str | None = None
    avoid: dict[str, float] | None = None  # replica -> until when it is left alone
    task: asyncio.Task[None] | None = None
    retries: int = 0
    halted: bool = False  # an error was handed to the application: stop until a seek
    unknown_since_s: float | None = None
    corrupt_at: int = -1  # the offset of a batch the replicas in corrupt_from served corrupt
    corrupt_from: set[str] | None = None


class Inbox:
    """Fetch answers waiting for the application, in arrival order.

    Written by the core's loop, read by the application (its thread, or the same
    loop for :class:`AsyncConsumer`); one lock.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.chunks: deque[Chunk] = deque()
        self.async_waiters: list[asyncio.Future[None]] = []
        self.closed = False

    def put(self, chunk: Chunk) -> None:
        with self.lock:
            self.chunks.append(chunk)
            self.ready.notify()
            waiters, self.async_waiters = self.async_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def take_locked(self, paused: Callable[[TopicPartition], bool]) -> Chunk | None:
        """The first chunk of a partition that is not paused (lock held)."""
        for index, chunk in enumerate(self.chunks):
            if not paused(chunk.tp):
                del self.chunks[index]
                return chunk
        return None

    def drop(self, tp: TopicPartition) -> int:
        """Remove ``tp``'s chunks; the bytes they held."""
        with self.lock:
            kept = [c for c in self.chunks if c.tp != tp]
            freed = sum(c.nbytes for c in self.chunks if c.tp == tp)
            self.chunks = deque(kept)
        return freed

    def wake_all(self) -> None:
        with self.lock:
            self.ready.notify_all()
            waiters, self.async_waiters = self.async_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class FetchCore:
    """The asyncio side: one fetch loop per assigned, unpaused partition."""

    def __init__(
        self,
        client: Client,
        inbox: Inbox,
        *,
        fetch_bytes_max: int,
        fetch_wait_s: float,
        prefetch_bytes_max: int,
        auto_offset_reset: OffsetReset,
        client_zone: str | None,
        attempt_timeout_s: float,
        retry: RetryPolicy,
        rng: random.Random,
    ) -> None:
        self._client = client
        self._inbox = inbox
        self._fetch_bytes_max = fetch_bytes_max
        self._fetch_wait_ms = round(fetch_wait_s * 1000)
        self._prefetch_bytes_max = prefetch_bytes_max
        self._reset = auto_offset_reset
        self._zone = client_zone
        self._attempt_timeout_s = attempt_timeout_s
        self._retry = retry
        self._rng = rng
        self._transport = AsyncTransport(call_metadata=client.call_metadata, tls=client.tls)
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.buffered = 0
        self._room: asyncio.Event | None = None
        self.counters = {
            "fetches": 0,
            "fetch_errors": 0,
            "replica_switches": 0,
            "corrupt_batches": 0,
            "bytes_fetched": 0,
        }
        self.fetch_errors: dict[str, int] = {}
        """Failed fetches by :func:`~laminar_client.metrics.error_name`."""
        self.fetch_latency = LatencyRecorder()
        self._reports: set[asyncio.Task[None]] = set()

    # -- commands (on the loop)

    def assign(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        for tp in list(self.partitions):
            if tp not in offsets:
                self._stop(self.partitions.pop(tp))
                self.release(self._inbox.drop(tp))
        for tp, offset in offsets.items():
            state = self.partitions.get(tp)
            if state is None:
                state = PartitionState(tp, offset, resolved=offset)
                self.partitions[tp] = state
                self._start(state)
            elif offset is not None:
                self.seek(tp, offset)

    def seek(self, tp: TopicPartition, offset: int | None) -> None:
        state = self._state(tp)
        self._stop(state)
        state.epoch += 1
        state.fetch_offset = offset
        state.resolved = offset
        state.halted = False
        state.unknown_since_s = None
        state.corrupt_from = None
        self.release(self._inbox.drop(tp))
        self._start(state)

    def pause(self, tp: TopicPartition, offset: int | None) -> None:
        """Stop fetching ``tp`` and forget what was fetched ahead (so that a paused
        partition holds no prefetch room): on resume it reads again from ``offset``
        (the application's position; None: where it was going to start)."""
        state = self._state(tp)
        state.paused = True
        self._stop(state)
        state.epoch += 1
        if offset is not None:
            state.fetch_offset = offset
        self.release(self._inbox.drop(tp))

    def resume(self, tp: TopicPartition) -> None:
        state = self._state(tp)
        if state.paused:
            state.paused = False
            if state.task is None or state.task.done():
                self._start(state)
            self._inbox.wake_all()

    def release(self, nbytes: int) -> None:
        """The application took ``nbytes`` out of the inbox."""
        self.buffered -= nbytes
        if self._room is not None and self.buffered < self._prefetch_bytes_max:
            self._room.set()

    async def close(self) -> None:
        for state in self.partitions.values():
            self._stop(state)
        for report in self._reports:
            report.cancel()
        tasks = [s.task for s in self.partitions.values() if s.task is not None]
        tasks += self._reports
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._transport.close()

    # -- internals

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self.partitions.get(tp)
        if state is None:
            raise InvalidInputError(f"{tp[0]}/{tp[1]} is not assigned to this consumer")
        return state

    def _start(self, state: PartitionState) -> None:
        loop = asyncio.get_running_loop()
        state.task = loop.create_task(self._fetch_loop(state), name=f"fetch {state.tp}")

    def _stop(self, state: PartitionState) -> None:
        if state.task is not None and not state.task.done():
            state.task.cancel()
        state.task = None

    async def _wait_room(self) -> None:
        while (
            self.buffered > 0 and self.buffered + self._fetch_bytes_max > self._prefetch_bytes_max
        ):
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

    async def _fetch_loop(self, state: PartitionState) -> None:
        tp = state.tp
        while not _paused(state):
            await self._wait_room()
            if _paused(state):
                return
            epoch = state.epoch
            address: str | None = None
            try:
                if state.fetch_offset is None:
                    state.fetch_offset = await self._reset_offset(tp)
                    if epoch != state.epoch:
                        continue
                    state.resolved = state.fetch_offset
                offset = state.fetch_offset
                address = await self._replica(state)
                request = pb.FetchRequest(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=offset,
                    max_bytes=self._fetch_bytes_max,
                    max_wait_ms=self._fetch_wait_ms,
                )
                self.counters["fetches"] += 1
                started_s = time.monotonic()
                response = await self._transport.call(
                    address,
                    "Fetch",
                    request,
                    pb.FetchResponse,
                    timeout_s=self._attempt_timeout_s + self._fetch_wait_ms / 1000,
                )
                self.fetch_latency.observe(time.monotonic() - started_s)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.counters["fetch_errors"] += 1
                name = error_name(error)
                self.fetch_errors[name] = self.fetch_errors.get(name, 0) + 1
                if epoch == state.epoch:
                    await self._after_failure(state, address, error)
                continue
            self._client.cache.node_answered(address)
            state.retries = 0
            if epoch != state.epoch:
                continue  # seeked meanwhile
            state.high_watermark = response.high_watermark
            state.log_start = response.log_start_offset
            data = response.batches
            if not data:
                if response.high_watermark > offset:
                    # Nothing below the high watermark from ``offset`` on: a gap keyed
                    # compaction left at the end of a compacted range. The position
                    # moves past it (an empty chunk), instead of fetching it again.
                    state.fetch_offset = response.high_watermark
                    self._inbox.put(
                        Chunk(
                            tp,
                            epoch,
                            b"",
                            offset,
                            response.high_watermark,
                            response.high_watermark,
                            None,
                            address,
                        )
                    )
                continue
            self.counters["bytes_fetched"] += len(data)
            try:
                next_offset = _next_offset(data, offset)
            except CorruptChunkError as corrupt:  # a damaged batch header: drop the answer
                assert address is not None
                if self._note_corrupt(state, address, corrupt.offset, corrupt.error):
                    self._halt(state, corrupt.error)
                continue  # the same offset again, from another replica
            state.fetch_offset = next_offset
            self.buffered += len(data)
            self._inbox.put(
                Chunk(tp, epoch, data, offset, next_offset, response.high_watermark, None, address)
            )

    async def _reset_offset(self, tp: TopicPartition) -> int:
        offsets = await asyncio.to_thread(self._client.list_offsets, tp.topic, [tp.partition])
        found = offsets[tp.partition]
        if self._reset == "latest":
            return found.high_watermark
        return found.log_start_offset

    async def _replica(self, state: PartitionState) -> str:
        cache = self._client.cache
        tp = state.tp
        if not cache.fresh():
            await asyncio.to_thread(cache.refresh, self._client.timeout_s, (tp.topic, tp.partition))
        current = state.replica
        if current is not None and not cache.skipped(current) and not self._avoided(state, current):
            return current
        snapshot = cache.held()
        if snapshot is None:
            raise UnavailableError("no metadata yet")
        candidates = cache.read_targets(tp.topic, tp.partition, 0.0, refresh=False)
        now_s = time.monotonic()
        fresh = [a for a in candidates if not self._avoided(state, a, now_s)] or candidates
        if self._zone is not None:
            zones = {m.grpc_address: m.zone for m in snapshot.members.values()}
            near = [a for a in fresh if zones.get(a) == self._zone]
            fresh = near or fresh
        choice = self._rng.choice(fresh)
        if current is not None and choice != current:
            self.counters["replica_switches"] += 1
        state.replica = choice
        return choice

    def _avoided(self, state: PartitionState, address: str, now_s: float | None = None) -> bool:
        """Whether ``address`` is left alone for this partition (it answered with an
        error, or its log ends before the position, a moment ago)."""
        if not state.avoid:
            return False
        until = state.avoid.get(address)
        return until is not None and until > (time.monotonic() if now_s is None else now_s)

    async def _after_failure(
        self, state: PartitionState, address: str | None, error: Exception
    ) -> None:
        cache = self._client.cache
        tp = state.tp
        if isinstance(error, OffsetOutOfRangeError) and address is not None:
            cache.node_answered(address)
            offset = state.fetch_offset if state.fetch_offset is not None else 0
            if offset > error.end_offset >= 0 and not self._avoid_all(state, address):
                # This replica is behind the position: read from another one meanwhile.
                state.replica = None
                await self._backoff(state)
                return
            self._out_of_range(state, offset, error)
            return
        if isinstance(error, UnknownTopicOrPartitionError):
            now_s = time.monotonic()
            if state.unknown_since_s is None:
                state.unknown_since_s = now_s
            if now_s - state.unknown_since_s >= UNKNOWN_TOPIC_WAIT_S:
                self._halt(state, error)  # the topic or partition does not exist
                return
        if isinstance(error, NoAnswerError) and address is not None:
            cache.node_failed(address)
            state.replica = None
            if state.retries == 0:
                state.retries += 1
                return  # another replica at once
        elif isinstance(error, RetriableError | UnknownTopicOrPartitionError):
            # The replica answered, but cannot serve now (fenced, not hosting it any
            # more, no quorum): another one, and fresh metadata.
            if address is not None:
                cache.node_answered(address)
                self._avoid_all(state, address)
            state.replica = None
            cache.invalidate()
        elif isinstance(error, LaminarError):
            # Not retriable there (a corrupt segment on that replica, an invalid
            # request): another replica; once every one failed so, the application
            # gets the error (the partition then waits for a seek).
            _LOG.warning("%s/%d: fetch failed: %s", tp.topic, tp.partition, error)
            state.replica = None
            if address is None or self._avoid_all(state, address):
                self._halt(state, error)
                return
        await self._backoff(state)

    def _avoid_all(self, state: PartitionState, address: str) -> bool:
        """Leave ``address`` alone for a moment; whether every live replica of the
        partition is left alone now."""
        now_s = time.monotonic()
        if state.avoid is None:
            state.avoid = {}
        state.avoid[address] = now_s + _AVOID_S
        try:
            replicas = self._client.cache.read_targets(
                state.tp.topic, state.tp.partition, 0.0, refresh=False
            )
        except LaminarError:
            return False
        return all(self._avoided(state, replica, now_s) for replica in replicas)

    def corrupt(
        self,
        tp: TopicPartition,
        epoch: int,
        address: str,
        offset: int,
        error: RecordFormatError,
    ) -> None:
        """The application found that a fetch answer ``address`` served holds a batch
        failing verification at ``offset`` (the records before it were good, and are
        handed out): drop what was fetched ahead and read again from ``offset``, from
        another replica; once every replica served it corrupt, hand ``error`` to the
        application instead."""
        state = self.partitions.get(tp)
        if state is None or state.epoch != epoch:
            return  # seeked, paused or unassigned meanwhile: nothing to read again
        everywhere = self._note_corrupt(state, address, offset, error)
        self._stop(state)
        state.epoch += 1
        state.fetch_offset = offset
        self.release(self._inbox.drop(tp))
        if everywhere:
            self._halt(state, error)
        else:
            self._start(state)

    def _note_corrupt(
        self, state: PartitionState, address: str, offset: int, error: RecordFormatError
    ) -> bool:
        """``address`` served the batch at ``offset`` corrupt: log, count and report it,
        and leave that replica for another; whether every replica served it so."""
        tp = state.tp
        self.counters["corrupt_batches"] += 1
        _LOG.warning(
            "%s/%d: the replica at %s served a corrupt batch at offset %d (%s); "
            "reading it from another replica and reporting it",
            tp.topic,
            tp.partition,
            address,
            offset,
            error,
        )
        self._report(address, tp, offset)
        if state.corrupt_from is None or state.corrupt_at != offset:
            state.corrupt_at, state.corrupt_from = offset, set()
        state.corrupt_from.add(address)
        self._avoid_all(state, address)
        state.replica = None
        everywhere = self._corrupt_everywhere(state, state.corrupt_from)
        if everywhere:
            _LOG.error(
                "%s/%d: every replica served the batch at offset %d corrupt: %s",
                tp.topic,
                tp.partition,
                offset,
                error,
            )
        return everywhere

    def _corrupt_everywhere(self, state: PartitionState, corrupt_from: set[str]) -> bool:
        """Whether every live replica of the partition is in ``corrupt_from``."""
        try:
            replicas = self._client.cache.read_targets(
                state.tp.topic, state.tp.partition, 0.0, refresh=False
            )
        except LaminarError:
            return False
        return all(replica in corrupt_from for replica in replicas)

    def _report(self, address: str, tp: TopicPartition, offset: int) -> None:
        """Tell the node at ``address`` (in the background) that it served the batch
        at ``offset`` corrupt."""
        if len(self._reports) >= _REPORTS_MAX:
            _LOG.info("%s/%d: too many reports under way; not reporting %s", *tp, address)
            return
        task = asyncio.get_running_loop().create_task(self._send_report(address, tp, offset))
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    async def _send_report(self, address: str, tp: TopicPartition, offset: int) -> None:
        request = pb.ReportCorruptionRequest(topic=tp.topic, partition=tp.partition, offset=offset)
        try:
            response = await self._transport.call(
                address,
                "ReportCorruption",
                request,
                pb.ReportCorruptionResponse,
                timeout_s=self._attempt_timeout_s,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            _LOG.info("%s/%d: reporting offset %d to %s failed: %s", *tp, offset, address, error)
            return
        if response.damaged:
            _LOG.warning(
                "%s/%d: the node at %s found its stored batch at offset %d damaged (%s); "
                "its replica is out of service",
                *tp,
                address,
                offset,
                response.reason,
            )
        else:
            _LOG.info(
                "%s/%d: the node at %s found its stored batch at offset %d intact",
                *tp,
                address,
                offset,
            )

    def _out_of_range(
        self, state: PartitionState, offset: int, error: OffsetOutOfRangeError
    ) -> None:
        """The position is outside the partition's log: apply ``auto_offset_reset``."""
        tp = state.tp
        if self._reset == "error":
            self._halt(state, error)
            return
        where = "below the log start" if offset < error.start_offset else "past the end"
        _LOG.warning(
            "%s/%d: offset %d is %s of [%d, %d]; resetting to %s",
            tp.topic,
            tp.partition,
            offset,
            where,
            error.start_offset,
            error.end_offset,
            self._reset,
        )
        state.avoid = None
        state.fetch_offset = None

    def _halt(self, state: PartitionState, error: LaminarError) -> None:
        """Hand ``error`` to the application; the partition waits for a seek."""
        offset = state.fetch_offset if state.fetch_offset is not None else -1
        self._inbox.put(Chunk(state.tp, state.epoch, b"", offset, offset, -1, error))
        state.halted = True

    async def _backoff(self, state: PartitionState) -> None:
        delay_s = self._retry.backoff_ms(state.retries, self._rng) / 1000
        state.retries += 1
        await asyncio.sleep(delay_s)


def _paused(state: PartitionState) -> bool:
    # A function, so that type checkers re-read the fields after an await.
    return state.paused or state.halted


def _next_offset(data: bytes, offset: int) -> int:
    """The offset after the last batch of a fetch answer (never before ``offset``);
    the headers' checksums are verified (:class:`CorruptChunkError` if one fails)."""
    last = 0
    try:
        for _, header in iter_batches(data, verify=False):
            last = header.next_offset
    except RecordFormatError as error:
        raise CorruptChunkError(max(last, offset), error) from None
    return max(last, offset)
