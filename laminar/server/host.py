"""The replica host: drives every partition replica of a node on the event loop.

Each replica is a :class:`~laminar.replica.core.ReplicaCore` over a
:class:`~laminar.segment.log.SegmentLog` in ``<data>/<topic>/<partition>/``. All
cores run on the asyncio loop's thread; the one slow step of the shell contract,
``fsync``, runs in a thread pool (a lone fast one inline, see ``_start_round``). A
*flush round* (:meth:`ReplicaHost.flush_now`) carries out the contract for all
dirty replicas together, so the messages of every partition produced in one round
leave as one coalesced bundle per peer::

    take a Ready from every replica with work  (the replica is now "busy")
    fsync the logs of those whose Ready says so (in parallel threads)
    send every message (coalesced per peer), answer produce calls, wake fetches
    advance() each core; apply inputs that arrived while it was busy

An input (a peer message, a produce, a tick) that reaches a busy replica waits in a
small per-replica queue until its ``advance``: no input ever lands between a
core's ``ready()`` and ``advance()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from laminar.errors import (
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import parse_header
from laminar.replica.coalesce import Coalescer, PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore
from laminar.replica.messages import ProduceReply, ProduceStatus, Ready, Removed
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import FsyncPolicy, LogConfig
from laminar.segment.log import SegmentLog

_LOG = logging.getLogger(__name__)

INLINE_FSYNC_MS_MAX = 2.0
"""A lone fsync runs on the event loop while recent fsync rounds averaged below this."""

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: bytes
    high_watermark: int
    log_start_offset: int


@dataclass(slots=True)
class Replica:
    """One partition replica on this node."""

    key: PartitionKey
    directory: str
    log: SegmentLog
    core: ReplicaCore
    busy: bool = False
    queued: deque[Callable[[], object]] = field(default_factory=deque)
    watermark_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    closed: bool = False


def partition_directory(data_dir: str, topic: str, partition: int) -> str:
    return os.path.join(data_dir, "partitions", topic, str(partition))


class ReplicaHost:
    """Every replica of one node, and the loop that drives them."""

    def __init__(
        self,
        node_id: str,
        data_dir: str,
        config: ReplicaConfig,
        log_config: LogConfig,
        *,
        send: Callable[[str, PeerBundle], None],
        fsync: bool = True,
        accept_replica: Callable[[PartitionKey], bool] = lambda key: True,
        on_committed: Callable[[PartitionKey, int, int], None] | None = None,
        on_removed: Callable[[PartitionKey], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = NodeId(node_id)
        self._data_dir = data_dir
        self._config = config
        # The core decides when to fsync (Ready.sync); the log itself never does.
        self._log_config = _without_fsync(log_config)
        self._send = send
        self._fsync = fsync
        self._accept_replica = accept_replica
        self._on_committed = on_committed
        self._on_removed = on_removed
        self._rng = rng or random.Random()
        self._replicas: dict[PartitionKey, Replica] = {}
        self._dirty: dict[PartitionKey, Replica] = {}
        self._flush_task: asyncio.Task[None] | None = None
        self._flush_scheduled = False  # flush_now is queued on the loop
        self._produce_pass = False  # a produce call ran its round in this loop pass
        self._ticker: asyncio.Task[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fsync")
        self._request_ids = 0
        self._fsync_recent_ms = 0.0  # moving average of fsync rounds' duration
        self._pending: dict[int, asyncio.Future[ProduceReply]] = {}
        self._targets: dict[PartitionKey, tuple[str, ...]] = {}
        self._closed = False
        self.counters: dict[str, int] = {"fsyncs": 0, "bundles_sent": 0, "flush_rounds": 0}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every replica found in the data directory and start ticking."""
        root = os.path.join(self._data_dir, "partitions")
        if os.path.isdir(root):
            for topic in sorted(os.listdir(root)):
                topic_dir = os.path.join(root, topic)
                for name in sorted(os.listdir(topic_dir)):
                    if name.isdigit():
                        self.open_replica((topic, int(name)), None)
        self._ticker = asyncio.create_task(self._tick_loop(), name="replica-ticker")

    async def close(self) -> None:
        self._closed = True
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._flush_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._flush_task, 5)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(UnavailableError("node shutting down"))
        for replica in list(self._replicas.values()):
            self._close_replica(replica)
        self._pool.shutdown(wait=True)

    def _now(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    # ------------------------------------------------------------------ replicas

    def keys(self) -> list[PartitionKey]:
        return list(self._replicas)

    def get(self, key: PartitionKey) -> Replica | None:
        return self._replicas.get(key)

    def open_replica(self, key: PartitionKey, initial: GroupConfig | None) -> Replica:
        """Open (or create) the replica of ``key``; ``initial`` for founding replicas."""
        existing = self._replicas.get(key)
        if existing is not None:
            return existing
        topic, partition = key
        directory = partition_directory(self._data_dir, topic, partition)
        log = SegmentLog.open(directory, self._log_config)
        core = ReplicaCore(
            self.node_id,
            log,
            self._config,
            now_ms=self._now(),
            rng=random.Random(self._rng.random()),
            initial=initial,
            limits=self._log_config.limits,
        )
        replica = Replica(key, directory, log, core)
        self._replicas[key] = replica
        target = self._targets.get(key)
        if target is not None:
            core.set_target(tuple(NodeId(n) for n in target), self._now())
        self._mark(replica)
        _LOG.info("replica open %s/%d end=%d", topic, partition, log.end_offset)
        return replica

    def delete_replica(self, key: PartitionKey) -> None:
        """Close the replica and delete its data (topic deleted, or moved away)."""
        replica = self._replicas.get(key)
        if replica is None:
            return
        self._close_replica(replica)
        shutil.rmtree(replica.directory, ignore_errors=True)
        with contextlib.suppress(OSError):  # the topic's directory, once it is empty
            os.rmdir(os.path.dirname(replica.directory))
        _LOG.info("replica deleted %s/%d", *key)

    def _close_replica(self, replica: Replica) -> None:
        replica.closed = True
        self._replicas.pop(replica.key, None)
        self._dirty.pop(replica.key, None)
        for waiter in replica.watermark_waiters:
            if not waiter.done():
                waiter.set_result(None)
        with contextlib.suppress(Exception):
            replica.log.close()

    # ------------------------------------------------------------------ inputs

    def _input(self, replica: Replica, action: Callable[[], object]) -> None:
        if replica.closed:
            return
        if replica.busy:
            replica.queued.append(action)
        else:
            action()
            self._mark(replica)

    def _mark(self, replica: Replica) -> None:
        self._dirty[replica.key] = replica
        if self._flush_scheduled or (self._flush_task is not None and not self._flush_task.done()):
            return  # a flush is already on its way; it takes this replica too
        self._flush_scheduled = True
        asyncio.get_running_loop().call_soon(self.flush_now)

    def _end_produce_pass(self) -> None:
        self._produce_pass = False

    def flush_now(self) -> None:
        """Run the flush rounds the dirty replicas need here and now.

        Inputs only mark their replica and queue this on the loop, so that every
        input of one pass of the loop shares a round (and its fsyncs: group commit).
        The transport calls it directly once it has delivered one read's bundles, and
        the first produce call of a loop pass does too: that takes a pass of the
        event loop off each hop of a write (produce -> appends out, append ->
        acknowledgement out, acknowledgement -> reply). A round whose fsync goes to
        the thread pool is finished by a task, with any rounds after it.
        """
        self._flush_scheduled = False
        if not self._dirty or (self._flush_task is not None and not self._flush_task.done()):
            return  # nothing to do, or the running task takes the dirty replicas
        try:
            while self._dirty:
                pending = self._start_round()
                if pending is not None:
                    self._flush_task = asyncio.get_running_loop().create_task(self._flush(pending))
                    return
        except Exception:  # pragma: no cover - a bug; keep the node alive and loud
            _LOG.exception("replica flush failed")
            raise

    def on_bundle(self, source: str, bundle: PeerBundle) -> None:
        """Peer messages arrived (called by the transport)."""
        now = self._now()
        for item, message in bundle.items():
            key = _partition_key(item)
            replica = self._replicas.get(key)
            if replica is None:
                if self._closed or not self._accept_replica(key):
                    continue
                # A leader added us to the group: learn everything from its log.
                replica = self.open_replica(key, None)
            self._input(replica, partial(replica.core.step, NodeId(source), message, now))

    def set_target(self, key: PartitionKey, target: tuple[str, ...]) -> None:
        """Placement's replica list for ``key`` (the leader reconfigures towards it)."""
        if self._targets.get(key) == target:
            return
        self._targets[key] = target
        replica = self._replicas.get(key)
        if replica is not None:
            nodes = tuple(NodeId(n) for n in target)
            now = self._now()
            self._input(replica, lambda: replica.core.set_target(nodes, now))

    def hint_leader_dead(self, node_id: str) -> None:
        now = self._now()
        for replica in list(self._replicas.values()):
            if replica.core.leader == node_id:
                self._input(replica, partial(replica.core.hint_leader_dead, now))

    def transfer_all_leadership(self) -> int:
        """Hand every leadership to another voter (graceful shutdown); returns how many."""
        now = self._now()
        count = 0
        for replica in list(self._replicas.values()):
            core = replica.core
            config = core.group_config
            if core.role is not Role.LEADER or config is None:
                continue
            matches = core.match_offsets()
            others = sorted(
                (n for n in config.voters if n != self.node_id),
                key=lambda n: -matches.get(n, -1),
            )
            if others:
                target = others[0]
                self._input(replica, partial(core.transfer_leadership, target, now))
                count += 1
        return count

    def leader_count(self) -> int:
        return sum(1 for r in self._replicas.values() if r.core.role is Role.LEADER)

    async def produce(
        self, key: PartitionKey, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        """Append one batch through this node's replica, which must lead."""
        replica = self._replicas.get(key)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} has no replica on this node")
        self._request_ids += 1
        request_id = self._request_ids
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ProduceReply] = loop.create_future()
        self._pending[request_id] = future
        now = self._now()
        self._input(replica, lambda: replica.core.propose(request_id, batch, acks, now))
        if not self._produce_pass:
            # The first produce call of this pass of the loop runs its round now; the
            # calls after it in the same pass share the queued round (group commit).
            self._produce_pass = True
            loop.call_soon(self._end_produce_pass)
            self.flush_now()
        # A bare timer: a third of asyncio.timeout's cost (7 µs less per write here).
        timer = loop.call_later(timeout_s, _time_out, future, timeout_s)
        try:
            reply = await future
        finally:
            timer.cancel()
            self._pending.pop(request_id, None)
        return _result(reply, batch)

    async def fetch(
        self, key: PartitionKey, offset: int, max_bytes: int, max_wait_s: float
    ) -> FetchResult:
        """Committed batches from ``offset``; waits up to ``max_wait_s`` for new data."""
        replica = self._replicas.get(key)
        if replica is None:
            raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} has no replica on this node")
        core = replica.core
        if offset < core.start_offset:
            raise OffsetOutOfRangeError(offset, core.start_offset, core.high_watermark)
        if offset >= core.high_watermark and max_wait_s > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max_wait_s
            while offset >= core.high_watermark and not replica.closed:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                waiter: asyncio.Future[None] = loop.create_future()
                replica.watermark_waiters.append(waiter)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, remaining)
        if replica.closed:
            raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} was closed")
        data = core.read(offset, max_bytes) if offset < core.high_watermark else b""
        return FetchResult(data, core.high_watermark, core.start_offset)

    # ------------------------------------------------------------------ the loop

    async def _tick_loop(self) -> None:
        interval = max(self._config.heartbeat_interval_ms // 2, 5) / 1000
        while not self._closed:
            await asyncio.sleep(interval)
            now = self._now()
            for replica in list(self._replicas.values()):
                if replica.core.next_wake_ms() <= now:
                    self._input(replica, partial(replica.core.tick, now))

    async def _flush(self, pending: Coroutine[Any, Any, None]) -> None:
        """Finish a round whose fsyncs went to the pool, then the rounds after it."""
        try:
            await pending
            while self._dirty:
                rest = self._start_round()
                if rest is not None:
                    await rest
        except Exception:  # pragma: no cover - a bug; keep the node alive and loud
            _LOG.exception("replica flush failed")
            raise

    def _sync_inline(self, replica: Replica) -> object:
        """Fsync one log on the loop itself; None or the exception raised."""
        started = time.perf_counter()
        try:
            replica.log.sync()
            result: object = None
        except Exception as error:
            result = error
        self._note_fsync_time(started)
        return result

    async def _sync_pool(self, replicas: list[Replica]) -> list[object]:
        """Fsync the logs of ``replicas`` in parallel in the thread pool."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(
            *(loop.run_in_executor(self._pool, replica.log.sync) for replica in replicas),
            return_exceptions=True,
        )
        self._note_fsync_time(started)
        return list(results)

    def _note_fsync_time(self, started: float) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._fsync_recent_ms += (elapsed_ms - self._fsync_recent_ms) / 4

    def _send_all(self, coalescer: Coalescer) -> None:
        for destination, bundle in coalescer.drain().items():
            self.counters["bundles_sent"] += 1
            self._send(destination, bundle)

    def _start_round(self) -> Coroutine[Any, Any, None] | None:
        """One flush round: take every dirty replica's ``Ready`` and carry it out.

        Several logs to sync are synced in parallel in the thread pool; then the
        round is finished by the returned coroutine. A single one is synced on the
        loop itself while recent fsyncs have been fast: handing it to a thread and
        back costs two thread wake-ups (≈0.2 ms of CPU and latency here), more than a
        fast fsync blocks the loop. A slow disk sends the next fsyncs to the pool,
        so that a stalled disk blocks one partition, not the node. Returns None when
        the round is done.
        """
        self.counters["flush_rounds"] += 1
        batch = list(self._dirty.values())
        self._dirty.clear()
        readies: list[tuple[Replica, Ready]] = []
        for replica in batch:
            if replica.closed or replica.busy:
                continue
            if replica.core.has_ready():
                replica.busy = True
                readies.append((replica, replica.core.ready()))
        if not readies:
            return None
        # A leader's appends and heartbeats leave before its own fsync (Raft §10.2.1).
        early = Coalescer()
        for replica, ready in readies:
            early.add_all(replica.key, ready.early_messages)
        self._send_all(early)
        syncs = [replica for replica, ready in readies if ready.sync]
        if syncs and self._fsync:
            if len(syncs) == 1 and self._fsync_recent_ms < INLINE_FSYNC_MS_MAX:
                self._synced(syncs, [self._sync_inline(syncs[0])])
            else:
                return self._finish_after_pool(readies, syncs)
        self._finish_round(readies)
        return None

    async def _finish_after_pool(
        self, readies: list[tuple[Replica, Ready]], syncs: list[Replica]
    ) -> None:
        self._synced(syncs, await self._sync_pool(syncs))
        self._finish_round(readies)

    def _synced(self, syncs: list[Replica], results: list[object]) -> None:
        self.counters["fsyncs"] += len(syncs)
        for replica, result in zip(syncs, results, strict=True):
            if isinstance(result, BaseException):
                _LOG.error("fsync failed for %s/%d: %s", *replica.key, result)

    def _finish_round(self, readies: list[tuple[Replica, Ready]]) -> None:
        """The durable part of a round: messages, replies, events, then ``advance``."""
        coalescer = Coalescer()
        removed: list[Replica] = []
        for replica, ready in readies:
            coalescer.add_all(replica.key, ready.messages)
            for reply in ready.replies:
                future = self._pending.get(reply.request_id)
                if future is not None and not future.done():
                    future.set_result(reply)
            if ready.high_watermark > ready.committed_from:
                for waiter in replica.watermark_waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                replica.watermark_waiters.clear()
                if self._on_committed is not None:
                    self._on_committed(replica.key, ready.committed_from, ready.high_watermark)
            for event in ready.events:
                _LOG.info("replica %s/%d: %s", *replica.key, event)
                if isinstance(event, Removed):
                    removed.append(replica)
        self._send_all(coalescer)
        for replica, ready in readies:
            replica.core.advance(ready)
            replica.busy = False
            while replica.queued:
                replica.queued.popleft()()
            # advance() (a commit) or the queued inputs may have made more work.
            if not replica.closed and replica.core.has_ready():
                self._dirty[replica.key] = replica
        for replica in removed:
            if self._on_removed is not None:
                self._on_removed(replica.key)


def _time_out(future: asyncio.Future[ProduceReply], timeout_s: float) -> None:
    if not future.done():
        future.set_exception(
            RequestTimeoutError(f"no answer within {timeout_s:.1f} s; the write may still commit")
        )


def _partition_key(item: object) -> PartitionKey:
    assert isinstance(item, tuple) and len(item) == 2, item
    topic, partition = item
    assert isinstance(topic, str) and isinstance(partition, int)
    return topic, partition


def _without_fsync(config: LogConfig) -> LogConfig:
    return replace(config, fsync_policy=FsyncPolicy.NEVER, retention_ms=None, retention_bytes=None)


def _result(reply: ProduceReply, batch: bytes) -> ProduceResult:
    status = reply.status
    if status is ProduceStatus.OK:
        return ProduceResult(reply.base_offset, duplicate=False)
    if status is ProduceStatus.DUPLICATE:
        return ProduceResult(reply.base_offset, duplicate=True)
    if status is ProduceStatus.NOT_LEADER:
        raise NotLeaderError(reply.leader_hint, None)  # the service adds the address
    if status is ProduceStatus.UNAVAILABLE:
        raise UnavailableError(reply.detail or "unavailable")
    if status is ProduceStatus.OUT_OF_ORDER_SEQUENCE:
        header = parse_header(batch)
        raise OutOfOrderSequenceError(
            header.producer_id, header.base_sequence, reply.expected_sequence
        )
    raise RecordFormatError(reply.detail or "invalid batch")
