"""The producer's core: the asyncio engine that takes sealed batches from the
:class:`~laminar_client._accumulator.Accumulator` in order, encodes each once, sends
it to its partition's leader (up to ``max_in_flight`` per partition, ordered and
retried by a :class:`~laminar_client._sender.PartitionSender` each) and resolves it.
It runs on the producer's event loop (a :class:`Producer`'s loop thread, or the
application's loop for :class:`AsyncProducer`; :mod:`laminar_client.producer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from google.protobuf.message import Message
from typing_extensions import TypeVar

from laminar.errors import (
    ClientClosedError,
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
from laminar.v1 import laminar_pb2 as pb
from laminar_client._accumulator import Accumulator, ProducerBatch
from laminar_client._aio import AsyncTransport, Unimplemented
from laminar_client._producer_config import ProducerConfig
from laminar_client._sender import PartitionSender, State
from laminar_client.client import ACKS, UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.metadata import ClusterMetadata
from laminar_client.metadata_cache import LEADER_CHECK_INTERVAL_S, leader_moved_error
from laminar_client.metrics import error_name
from laminar_client.retry import RetryPolicy
from laminar_client.sequencing import Verdict, random_producer_id

# The producer's logger, as before the core had a module of its own.
_LOG = logging.getLogger("laminar_client.producer")
_M = TypeVar("_M", bound=Message)

_RESPONSE_MARGIN_S = 0.5
ELECTION_RETRY_MAX_S = 0.25
"""The longest wait before asking again for a partition whose leader is unknown or
gone (the retry policy's exponential backoff, capped lower than for other errors:
a node holds such a write until the election ends)."""
REFRESH_INTERVAL_MIN_S = 0.1
"""The producer refreshes metadata (when an error made it stale) at most this often:
during a failover every failed batch marks it stale, and refreshing for each one
in turn let through ~60 batches a second."""


class ProducerCore:
    """The asyncio engine: takes sealed batches, sends them, resolves them."""

    def __init__(
        self,
        client: Client,
        accumulator: Accumulator,
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
        self._senders: dict[tuple[str, int], PartitionSender[ProducerBatch]] = {}
        self._active: dict[tuple[str, int], PartitionSender[ProducerBatch]] = {}
        self._attempts: set[asyncio.Task[None]] = set()
        self._refreshing: asyncio.Future[ClusterMetadata] | None = None  # the one under way
        self._deferred: list[tuple[PartitionSender[ProducerBatch], ProducerBatch]] = []
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
            outgoing: list[tuple[PartitionSender[ProducerBatch], ProducerBatch]] = []
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

    def _new_sender(self) -> PartitionSender[ProducerBatch]:
        new_id = None
        if self._config.idempotent:
            rng = self._rng

            def new_id() -> int:
                return random_producer_id(rng)

        return PartitionSender[ProducerBatch](
            max_in_flight=self._config.max_in_flight, new_producer_id=new_id
        )

    def _dispatch(
        self, outgoing: list[tuple[PartitionSender[ProducerBatch], ProducerBatch]]
    ) -> None:
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

    def _dispatch_grouped(
        self, outgoing: list[tuple[PartitionSender[ProducerBatch], ProducerBatch]]
    ) -> None:
        by_partition: dict[
            tuple[str, int], list[tuple[PartitionSender[ProducerBatch], ProducerBatch]]
        ] = {}
        for item in outgoing:
            by_partition.setdefault((item[1].topic, item[1].partition), []).append(item)
        rounds: dict[
            tuple[int, str], list[tuple[PartitionSender[ProducerBatch], ProducerBatch]]
        ] = {}
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

    def _known_target(self, batch: ProducerBatch) -> str | None:
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
        self, address: str, items: list[tuple[PartitionSender[ProducerBatch], ProducerBatch]]
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

    def _spawn(self, sender: PartitionSender[ProducerBatch], batch: ProducerBatch) -> None:
        task = asyncio.get_running_loop().create_task(self._attempt(sender, batch))
        self._attempts.add(task)
        task.add_done_callback(self._attempts.discard)

    async def _attempt(self, sender: PartitionSender[ProducerBatch], batch: ProducerBatch) -> None:
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

    async def _target(self, batch: ProducerBatch) -> str:
        cache = self._client.cache
        if not cache.fresh() and not cache.refreshed_within(REFRESH_INTERVAL_MIN_S):
            await self._refresh(max(0.001, batch.deadline_s - time.monotonic()))
        targets = cache.write_targets(batch.topic, batch.partition, 0.0, refresh=False)
        return targets[batch.retries % len(targets)]

    def _after_failure(
        self,
        sender: PartitionSender[ProducerBatch],
        batch: ProducerBatch,
        address: str | None,
        error: Exception,
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


def _encoded(batch: ProducerBatch) -> bytes:
    encoded = batch.encoded
    assert encoded is not None, "a batch is encoded when it is first stamped"
    return encoded
