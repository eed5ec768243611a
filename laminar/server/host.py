"""The replica host: drives every partition replica of a node on the event loop.

The decisions below are the :class:`~laminar.server.driver.ReplicaDriver`'s, a
synchronous class the simulators drive too; :class:`ReplicaHost` is its asyncio
shell (the tick loop, the thread pools, the callers' futures).

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

Storage failures. A failed ``fsync`` (or any storage error while the core works)
*fences* the replica: nothing of that round that depended on durability leaves
(follower acknowledgements, replies, votes), its pending produce calls fail with
:class:`~laminar.errors.StorageError`, and the replica is closed, so it neither
leads, votes nor serves: the group elects another leader. After
``HostConfig.storage_retry_ms`` the host reopens it: the log is recovered from
disk and truncated to the end of the last fsync that succeeded (Linux may drop the
dirty pages of a failed fsync while still serving them from the page cache, so
nothing written after that point can be trusted), and the replica rejoins its
group as a follower. :meth:`ReplicaHost.fenced` lists fenced replicas for
``cluster status``. A fenced leader first tells its most caught-up peer with space
to campaign at once (``TimeoutNow``), so that its group need not wait for it to be
missed (its node keeps talking, so followers would wait many election timeouts).

A full disk (issue 28; the rules in :mod:`laminar.server.disk`). The host checks
its data directory's free space every ``disk_check_ms``; below the watermark (or
after a write failed with ``ENOSPC``) the node is *full*: its cores may not lead
(:meth:`~laminar.server.driver.DriverLiveness.may_lead`), it hands its leaderships
to in-sync peers with space (after ``disk_handover_delay_ms``, so that gossip has
told them first and they do not hand them straight back), it opens no new replica, and its logs
reserve no blocks that would take free space below the watermark. A replica whose
write fails for want of space is fenced until space returns, not on a timer. A
write to a partition without a majority of replicas on nodes with space is refused
at once with :class:`~laminar.errors.StorageFullError` (peers' state comes from
gossip, :meth:`ReplicaHost.set_full_peers`). Once a check finds space again, the
node leads and takes replicas again, and reopens the replicas fenced for want of
space, without a restart.

Maintenance (``laminar cluster maintenance enter NODE``; the state is in the
cluster metadata, :meth:`ReplicaHost.set_maintenance`). A node in maintenance may
not lead either, and hands its leaderships to in-sync peers on the same schedule
as a full node (``disk_handover_delay_ms`` after it learnt it, so that its peers
have applied the same metadata and do not hand them straight back), but it keeps
taking replicas and writes count it as usual: it is about to stop, not short of
space.

Damaged storage. Damage found when a replica is opened (a batch failing its
checksums anywhere in the log: the active segment's recovery, or the core's
reading of the whole log at start; a state file with no valid copy; an unreadable
committed file) costs that replica alone, never the node: the damaged files are
copied or moved to ``<data>/quarantine/`` with a note (:mod:`laminar.segment.quarantine`),
the log keeps its valid prefix, a lost state file is replaced, and the core is
told what was lost (:class:`~laminar.replica.core.StorageDamage`): it heals from
its peers as a non-voter (see the core's "Damaged storage"). So does a replica
whose committed file says more than its log holds (it lost acknowledged entries).
:meth:`ReplicaHost.damaged` lists the replicas healing, for ``cluster status``;
:meth:`ReplicaHost.accept_data_loss` is the operator's way out when too many
replicas of a partition are damaged for it to elect a leader.

Creating many replicas. :meth:`ReplicaHost.open_founding` creates the founding
replicas of new partitions in chunks of :data:`FOUNDING_CHUNK` on the thread pool:
each log and its founding state are written without an fsync, then one
``syncfs`` makes the chunk durable, and only then do their cores start (as the
term-1 leader or its followers, with no election). Opening one replica the plain
way costs three fsyncs, about 5 ms on this machine: 3,000 of them blocked the
event loop for 15 s, long enough for every other group on the node to time out.
Messages for a replica still being created are dropped (the leader retransmits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from laminar.errors import (
    CorruptSegmentError,
    LaminarError,
    LogClosedError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import parse_header
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import founding_state
from laminar.replica.messages import ProduceReply, ProduceStatus, Ready
from laminar.replica.types import Acks, GroupConfig, NodeId
from laminar.segment.compaction import key_map_kind
from laminar.segment.config import LogConfig
from laminar.segment.files import SegmentFiles
from laminar.segment.layout import partition_directory
from laminar.segment.log import SegmentLog, SyncTicket, sync_filesystem
from laminar.segment.storage import LogStorage
from laminar.server.compactor import Pacer
from laminar.server.disk import DiskStatus, DiskUsage, statvfs_usage
from laminar.server.driver import (
    SYNCFS_BATCH_MIN,
    DamagedReplica,
    FencedReplica,
    HostConfig,
    HostOwner,
    JobDone,
    LogFactory,
    PartitionKey,
    PartitionOffsets,
    ReplicaDriver,
    Retention,
    Round,
    Standalone,
    write_committed_files,
)
from laminar.server.driver import Replica as DriverReplica
from laminar.server.observability.histogram import Histogram
from laminar.server.observability.history import LeadershipLog
from laminar.server.scrub import Scrubber
from laminar.server.tasks import cancel_and_wait
from laminar.server.tracing import ProduceTrace, Tracing

__all__ = [
    "FOUNDING_CHUNK",
    "DamagedReplica",
    "FencedReplica",
    "FetchResult",
    "HostConfig",
    "HostOwner",
    "LogFactory",
    "PartitionKey",
    "PartitionOffsets",
    "ProduceResult",
    "Replica",
    "ReplicaHost",
    "Retention",
    "Standalone",
    "partition_directory",
]

_LOG = logging.getLogger(__name__)


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
class Replica(DriverReplica):
    """One partition replica on this node, with the callers waiting on it."""

    watermark_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    calls: dict[int, asyncio.Future[ProduceReply]] = field(default_factory=dict)
    """Produce calls awaiting their answer, by request id."""
    leader_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    """Produce calls refused while the group had no usable leader, waiting for one
    (see :meth:`ReplicaHost._await_leader`)."""
    traces: list[ProduceTrace] = field(default_factory=list)
    """Traced produces waiting for the end of the round holding their proposal
    (only with tracing on; see :mod:`laminar.server.tracing`)."""

    def calls_waiting(self) -> int:
        return len(self.calls)


@dataclass(frozen=True, slots=True)
class _PendingProduce:
    """A produce call's batches, proposed on ``replica``, awaiting their replies."""

    replica: Replica
    request_ids: range
    futures: list[asyncio.Future[ProduceReply]]
    batches: Sequence[bytes]


FOUNDING_CHUNK = 256
"""Founding replicas created per job on the thread pool (one filesystem sync each):
small enough that the first partitions start while the rest are being written."""


class ReplicaHost:
    """Every replica of one node on the event loop: the asyncio shell of a
    :class:`~laminar.server.driver.ReplicaDriver`, which decides everything. The
    shell holds the tick loop, the thread pools (fsyncs, committed files, founding
    creations), the scrubber, and the futures of the callers waiting on a replica
    (produce calls, long-polling fetches, calls waiting out an election)."""

    def __init__(
        self,
        node_id: str,
        data_dir: str,
        config: ReplicaConfig,
        log_config: LogConfig,
        *,
        send: Callable[[str, PeerBundle], None],
        owner: HostOwner | None = None,
        fsync: bool = True,
        rng: random.Random | None = None,
        host_config: HostConfig | None = None,
        log_factory: LogFactory = SegmentLog.open,
        clock: Callable[[], float] | None = None,
        disk_usage: Callable[[], DiskUsage] | None = None,
    ) -> None:
        """``send``: the packet transport (one bundle to a peer). ``owner``: the node
        around the host (None: :class:`~laminar.server.driver.Standalone`, a host on
        its own). ``clock``: seconds, monotonic (None: the event loop's).
        ``disk_usage``: the free space of the data directory's filesystem (default:
        ``statvfs`` of ``data_dir``; tests inject their own)."""
        self.node_id = NodeId(node_id)
        self._data_dir = data_dir
        self.config = host_config if host_config is not None else HostConfig()
        self._send = send
        self._clock = clock  # seconds, monotonic; None: the event loop's
        self._driver: ReplicaDriver[Replica] = ReplicaDriver(
            node_id,
            data_dir,
            config,
            log_config,
            owner=owner if owner is not None else Standalone(),
            shell=self,
            make_replica=Replica,
            clock=self._now,
            wall_clock_ms=_wall_clock_ms,
            disk_usage=disk_usage if disk_usage is not None else partial(statvfs_usage, data_dir),
            rng=rng or random.Random(),
            host_config=self.config,
            log_factory=None if log_factory == SegmentLog.open else log_factory,
            fsync=fsync,
            run_job=self._run_compaction,
            compaction_pacer=partial(Pacer, self.config.compaction_bytes_per_s_max),
            prepare_compaction=self._prepare_compaction,
        )
        self.counters: dict[str, int] = self._driver.counters
        self.fsync_seconds: Histogram = self._driver.fsync_seconds
        """How long each fsync round took, for ``--metrics``."""
        self.leadership_log: LeadershipLog = self._driver.leadership_log
        """The newest leaders its replicas learnt of (the status page, ``NodeStatus``)."""
        self.tracing: Tracing | None = None
        """Spans of each produce's replication (set by the node with tracing on)."""
        self._committed_saving: asyncio.Future[None] | None = None
        self._flush_task: asyncio.Task[None] | None = None
        self._flush_scheduled = False  # flush_now is queued on the loop
        self._produce_pass = False  # a produce call ran its round in this loop pass
        self._ticker: asyncio.Task[None] | None = None
        self._tick_waiter: asyncio.Future[None] | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=self.config.fsync_threads, thread_name_prefix="fsync"
        )
        # Committed files are written by a thread of their own: thousands at once
        # (a failover moves every watermark) must never delay a flush round's sync.
        self._files_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="committed")
        # Keyed compaction jobs run one at a time on a thread of their own, paced at
        # compaction_bytes_per_s_max: never in the way of a flush round's fsyncs.
        self._compaction_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compaction")
        self._request_ids = 0
        self._closed = False
        self._scrubber = Scrubber(
            node_id,
            bytes_per_s=self.config.scrub_bytes_per_s,
            pass_min_ms=self.config.scrub_pass_min_ms,
            keys=self._driver.replicas.keys,
            log_of=self._driver.log_of,
            on_damage=self._driver.damage_found,
            counters=self.counters,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every replica found in the data directory and start ticking."""
        self._driver.open_existing()
        self._ticker = asyncio.create_task(self._tick_loop(), name="replica-ticker")

    async def close(self, *, timeout_s: float = 5.0) -> None:
        """Close every replica; waits for a running flush round and the fsync
        threads at most about ``timeout_s`` (a stuck disk must not stop a shutdown)."""
        self._closed = True
        self._driver.closing = True
        self._scrubber.close()  # a job under way stops after its current call
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await cancel_and_wait(self._ticker)
        if self._flush_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._flush_task, max(0.0, deadline - loop.time()))
        if self._committed_saving is not None:  # it must not rename over what follows
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._committed_saving, max(0.0, deadline - loop.time()))
        write_committed_files(self._driver.committed_changes())
        self._driver.close_all()
        self._files_pool.shutdown(wait=False, cancel_futures=True)
        self._compaction_pool.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(TimeoutError):
            remaining_s = max(0.0, deadline - loop.time())
            await asyncio.wait_for(asyncio.to_thread(self._pool.shutdown, True), remaining_s)

    def _now(self) -> int:
        clock = self._clock
        return int((clock() if clock is not None else asyncio.get_running_loop().time()) * 1000)

    def now_ms(self) -> int:
        """The host's clock (the one its cores and fencing times use), in ms."""
        return self._now()

    # ------------------------------------------------------------------ the driver's shell

    def _prepare_compaction(self) -> None:
        """(The driver's, once it holds a replica of a compact topic.) Import pyarrow
        (keyed compaction's key map) on the compaction thread now, not in the first
        job: loading its libraries holds the GIL for some 10-20 ms at a time, which
        a produce call would wait out, and a node without compact topics never
        loads it (some 40-60 MB)."""
        self._compaction_pool.submit(key_map_kind)

    def _run_compaction(self, job: Callable[[], int], done: JobDone) -> None:
        """(The driver's job runner.) Run a keyed compaction job on the compaction
        thread; ``done`` gets its outcome back on the event loop."""
        loop = asyncio.get_running_loop()

        def finished(future: Future[int]) -> None:
            if self._closed:
                return
            error = future.exception() if not future.cancelled() else UnavailableError("closed")
            done(error if error is not None else future.result())

        def back_on_the_loop(future: Future[int]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(finished, future)

        self._compaction_pool.submit(job).add_done_callback(back_on_the_loop)

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        self._send(peer, bundle)

    def flush_wanted(self) -> None:
        """(The driver.) A replica has work: run a flush round in this loop pass."""
        if self._flush_scheduled or (self._flush_task is not None and not self._flush_task.done()):
            return  # a flush is already on its way; it takes this replica too
        self._flush_scheduled = True
        asyncio.get_running_loop().call_soon(self.flush_now)

    def wake_early(self) -> None:
        """(The driver.) End the tick loop's sleep: something is due sooner."""
        waiter = self._tick_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def carried_out(self, replica: Replica, ready: Ready, leader_found: bool) -> None:
        """(The driver.) Answer the produce calls, wake the fetches and the calls
        waiting out an election."""
        for reply in ready.replies:
            future = replica.calls.get(reply.request_id)
            if future is not None and not future.done():
                future.set_result(reply)
        if ready.high_watermark > ready.committed_from:
            for waiter in replica.watermark_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            replica.watermark_waiters.clear()
        if leader_found and replica.leader_waiters:
            for waiter in replica.leader_waiters:
                _resolve(waiter)
        if replica.traces:
            replica.traces = [trace for trace in replica.traces if not trace.round_done()]

    def replica_closed(self, replica: Replica, error: Exception | None) -> None:
        """(The driver.) Fail the waiting produce calls with ``error``; wake fetches."""
        if error is not None:
            _fail_calls(replica, error)
        for waiter in replica.watermark_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------------ replicas

    def replica_keys(self) -> list[PartitionKey]:
        return list(self._driver.replicas)

    def get(self, key: PartitionKey) -> Replica | None:
        return self._driver.get(key)

    def is_fenced(self, key: PartitionKey) -> bool:
        return self._driver.is_fenced(key)

    def fenced(self) -> list[FencedReplica]:
        """Replicas out of service after a storage failure, by key."""
        return self._driver.fenced()

    def damaged(self) -> list[DamagedReplica]:
        """Replicas healing from damaged storage, by key (those healed are dropped)."""
        return self._driver.damaged()

    def accept_data_loss(self, key: PartitionKey) -> bool:
        """See :meth:`ReplicaDriver.accept_data_loss`."""
        return self._driver.accept_data_loss(key)

    def open_replica(
        self,
        key: PartitionKey,
        initial: GroupConfig | None,
        *,
        log: LogStorage | None = None,
        founding: bool = False,
    ) -> Replica:
        """Open (or create) the replica of ``key``; ``initial`` for founding replicas."""
        return self._driver.open_replica(key, initial, log=log, founding=founding)

    def advance_start(self, key: PartitionKey, offset: int) -> None:
        """Ask ``key``'s core to drop its log below ``offset`` (a snapshot as of
        ``offset`` is applied: see :mod:`laminar.snapshots`), as retention does."""
        self._driver.advance_start(key, offset)

    def creating(self, key: PartitionKey) -> bool:
        """Whether :meth:`open_founding` is still creating ``key``'s replica."""
        return self._driver.creating(key)

    def reserve_founding(self, keys: Sequence[PartitionKey]) -> None:
        """Keys that :meth:`open_founding` will create (see
        :meth:`ReplicaDriver.reserve_founding`)."""
        self._driver.reserve_founding(keys)

    async def open_founding(self, groups: Sequence[tuple[PartitionKey, GroupConfig]]) -> None:
        """Create the founding replicas of new partitions (see the module docstring).

        Keys already open are skipped. Returns once every replica is open; a chunk
        whose creation fails is logged and its replicas left to be opened the plain
        way when their leader first replicates.
        """
        driver = self._driver
        fresh = [(key, group) for key, group in groups if driver.get(key) is None]
        if not driver.segment_logs:  # memory logs: nothing to batch
            for key, group in fresh:
                driver.open_replica(key, group)
            return
        driver.reserve_founding(key for key, _ in fresh)
        loop = asyncio.get_running_loop()
        try:
            for start in range(0, len(fresh), FOUNDING_CHUNK):
                chunk = fresh[start : start + FOUNDING_CHUNK]
                items = [
                    (partition_directory(self._data_dir, *key), founding_state(group))
                    for key, group in chunk
                ]
                try:
                    logs = await loop.run_in_executor(
                        self._pool,
                        _create_founding_logs,
                        self._data_dir,
                        items,
                        driver.log_config_of(chunk[0][0]),
                        driver.segment_files,
                    )
                except Exception as error:
                    _LOG.error("creating %d replicas failed: %s", len(chunk), error)
                    continue
                for (key, group), log in zip(chunk, logs, strict=True):
                    driver.founding_done([key])
                    if log is None:
                        continue
                    if self._closed or driver.get(key) is not None:
                        with contextlib.suppress(Exception):
                            log.close()
                        continue
                    driver.open_replica(key, group, log=log, founding=True)
                _LOG.info("created %d founding replicas (%s ...)", len(chunk), chunk[0][0])
        finally:
            driver.founding_done(key for key, _ in groups)  # reserved ones too

    def delete_replica(self, key: PartitionKey) -> None:
        """Close the replica and delete its data (topic deleted, or moved away)."""
        self._driver.delete_replica(key)

    def reopen_replica(self, key: PartitionKey) -> Replica | None:
        """See :meth:`ReplicaDriver.reopen_replica`."""
        return self._driver.reopen_replica(key)

    # ------------------------------------------------------------------ inputs

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
        driver = self._driver
        if not driver.dirty or (self._flush_task is not None and not self._flush_task.done()):
            return  # nothing to do, or the running task takes the dirty replicas
        try:
            while driver.dirty:
                pending = self._start_round()
                if pending is not None:
                    self._flush_task = asyncio.get_running_loop().create_task(self._flush(pending))
                    return
        except Exception:  # pragma: no cover - a bug; keep the node alive and loud
            _LOG.exception("replica flush failed")
            raise

    def on_bundle(self, source: str, bundle: PeerBundle) -> None:
        """Peer messages arrived (called by the transport)."""
        self._driver.on_bundle(source, bundle)

    def set_target(self, key: PartitionKey, target: tuple[str, ...]) -> None:
        """Placement's replica list for ``key`` (the leader reconfigures towards it)."""
        self._driver.set_target(key, target)

    def peer_returned(self, node_id: str) -> None:
        """Membership says ``node_id`` is alive again (see ``ReplicaCore.peer_returned``)."""
        self._driver.peer_returned(node_id)

    def hint_leader_dead(self, node_id: str) -> None:
        self._driver.hint_leader_dead(node_id)

    def transfer_leadership(self, key: PartitionKey, target: NodeId) -> None:
        """Ask the replica of ``key``, if it leads, to hand leadership to ``target``."""
        self._driver.transfer_leadership(key, target)

    def leader_usable(self, key: PartitionKey) -> bool:
        """Whether the group of this node's replica of ``key`` has a leader a client
        could be sent to (this node leading counts), as far as this node knows."""
        return self._driver.leader_usable(key)

    def leads(self, key: PartitionKey) -> bool:
        return self._driver.leads(key)

    def _end_produce_pass(self) -> None:
        self._produce_pass = False

    def _produce_round(self, loop: asyncio.AbstractEventLoop) -> None:
        """The first produce call of this pass of the loop runs its round now; the
        calls after it in the same pass share the queued round (group commit)."""
        if not self._produce_pass:
            self._produce_pass = True
            loop.call_soon(self._end_produce_pass)
            self.flush_now()

    async def produce(
        self, key: PartitionKey, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        """Append one batch through this node's replica, which must lead.

        :meth:`produce_batches` for one batch, written out: it is every write's path.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        replica = self._driver.admit(key, 1)
        reply = await self._propose_one(replica, batch, acks, timeout_s)
        if reply.status is ProduceStatus.NOT_LEADER and self._driver.leader_unusable(replica):
            # An election is under way: answer with its outcome, not a refusal the
            # client would retry blindly (with backoff) until it learns of it.
            remaining = timeout_s - (loop.time() - started)
            if await self._await_leader(replica, remaining):
                replica = self._driver.admit(key, 1)
                reply = await self._propose_one(replica, batch, acks, remaining)
        return _result(reply, batch)

    async def _propose_one(
        self, replica: Replica, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceReply:
        self._request_ids += 1
        request_id = self._request_ids
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ProduceReply] = loop.create_future()
        replica.calls[request_id] = future
        if self.tracing is not None:
            self._trace(replica, [future], acks)
        self._driver.propose(replica, request_id, batch, acks)
        self._produce_round(loop)
        # A bare timer: a third of asyncio.timeout's cost (7 µs less per write here).
        timer = loop.call_later(timeout_s, _time_out, future, timeout_s)
        try:
            return await future
        finally:
            timer.cancel()
            replica.calls.pop(request_id, None)

    async def _await_leader(self, replica: Replica, timeout_s: float) -> bool:
        """Wait (at most three quarters of ``timeout_s``, and four maximum election
        timeouts) until the group has a usable leader; whether it has one now."""
        wait_s = self._driver.waiting_for_leader_ms(timeout_s * 1000) / 1000
        if wait_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        replica.leader_waiters.add(waiter)
        timer = loop.call_later(wait_s, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            replica.leader_waiters.discard(waiter)
        return not self._driver.leader_unusable(replica)

    def _trace(
        self, replica: Replica, futures: list[asyncio.Future[ProduceReply]], acks: Acks
    ) -> None:
        """Spans for a proposal about to be made on ``replica`` (tracing on): its round
        is the next one, or the one after the round under way."""
        assert self.tracing is not None
        trace = self.tracing.produce(
            replica.key,
            futures,
            acks=acks.value,
            term=replica.core.term,
            rounds=2 if replica.busy else 1,
        )
        replica.traces.append(trace)

    async def produce_batches(
        self, key: PartitionKey, batches: Sequence[bytes], acks: Acks, timeout_s: float
    ) -> list[ProduceResult]:
        """Append the batches of one request, all or none, through the leading replica."""
        pending = self._begin_produce(key, batches, acks)
        self._produce_round(asyncio.get_running_loop())
        return await self._await_produce(pending, timeout_s)

    async def produce_many(
        self,
        requests: Sequence[tuple[PartitionKey, Sequence[bytes]]],
        acks: Acks,
        timeout_s: float,
    ) -> list[list[ProduceResult] | LaminarError]:
        """Several partitions' batches (each partition all or none), in one round.

        Every partition's batches are proposed before this first waits, in the order
        given, so that they keep their place among the node's other produce calls
        (an idempotent producer's later batch must not overtake an earlier one).
        Per partition: its results, or the error that refused it.
        """
        begun: list[_PendingProduce | LaminarError] = []
        for key, batches in requests:
            try:
                begun.append(self._begin_produce(key, batches, acks))
            except LaminarError as error:
                begun.append(error)
        loop = asyncio.get_running_loop()
        self._produce_round(loop)
        # One deadline for the whole request: waiting for each partition in turn with
        # a timeout of its own made a request with many stuck partitions wait many
        # timeouts, past the client's deadline, losing the answers of the others.
        deadline = loop.time() + timeout_s
        outcomes: list[list[ProduceResult] | LaminarError] = []
        for item in begun:
            if isinstance(item, LaminarError):
                outcomes.append(item)
                continue
            try:
                remaining = max(0.0, deadline - loop.time())
                outcomes.append(await self._await_produce(item, remaining, timeout_s))
            except LaminarError as error:
                outcomes.append(error)
        # Partitions refused for want of a usable leader (an election under way):
        # wait for its outcome, then propose again (see produce()).
        electing = [
            index
            for index, outcome in enumerate(outcomes)
            if isinstance(outcome, NotLeaderError)
            and (replica := self._driver.replicas.get(requests[index][0])) is not None
            and self._driver.leader_unusable(replica)
        ]
        if electing:
            remaining = max(0.0, deadline - loop.time())
            await asyncio.gather(
                *(
                    self._await_leader(self._driver.replicas[requests[i][0]], remaining)
                    for i in electing
                )
            )
            again: list[tuple[int, _PendingProduce]] = []
            for index in electing:
                key, batches = requests[index]
                try:
                    again.append((index, self._begin_produce(key, batches, acks)))
                except LaminarError as error:
                    outcomes[index] = error
            self._produce_round(loop)
            for index, pending in again:
                try:
                    remaining = max(0.0, deadline - loop.time())
                    outcomes[index] = await self._await_produce(pending, remaining, timeout_s)
                except LaminarError as error:
                    outcomes[index] = error
        return outcomes

    def _begin_produce(
        self, key: PartitionKey, batches: Sequence[bytes], acks: Acks
    ) -> _PendingProduce:
        """Propose ``batches`` on the leading replica of ``key`` now (no waiting)."""
        replica = self._driver.admit(key, len(batches))
        loop = asyncio.get_running_loop()
        first_id = self._request_ids + 1
        self._request_ids += len(batches)
        request_ids = range(first_id, first_id + len(batches))
        futures: list[asyncio.Future[ProduceReply]] = []
        for request_id in request_ids:
            future: asyncio.Future[ProduceReply] = loop.create_future()
            replica.calls[request_id] = future
            futures.append(future)
        if self.tracing is not None:
            self._trace(replica, futures, acks)
        self._driver.propose_batches(replica, request_ids, batches, acks)
        return _PendingProduce(replica, request_ids, futures, batches)

    async def _await_produce(
        self, pending: _PendingProduce, timeout_s: float, request_timeout_s: float | None = None
    ) -> list[ProduceResult]:
        """Wait up to ``timeout_s`` for ``pending``'s replies (``request_timeout_s``:
        the whole request's timeout, for the error message)."""
        loop = asyncio.get_running_loop()
        said = timeout_s if request_timeout_s is None else request_timeout_s
        timers = [loop.call_later(timeout_s, _time_out, f, said) for f in pending.futures]
        try:
            answers = await asyncio.gather(*pending.futures, return_exceptions=True)
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
            replies = [answer for answer in answers if not isinstance(answer, BaseException)]
        finally:
            for timer in timers:
                timer.cancel()
            for request_id in pending.request_ids:
                pending.replica.calls.pop(request_id, None)
        return [
            _result(reply, batch) for reply, batch in zip(replies, pending.batches, strict=True)
        ]

    async def fetch(
        self, key: PartitionKey, offset: int, max_bytes: int, max_wait_s: float
    ) -> FetchResult:
        """Committed batches from ``offset``; waits up to ``max_wait_s`` for new data."""
        replica = self._driver.serving(key)
        core = replica.core
        if offset < core.start_offset or offset > core.end_offset:
            # Waiting is for offsets this replica will reach by appending; one past its
            # log end is a consumer's mistake (or a read meant for another replica).
            raise OffsetOutOfRangeError(offset, core.start_offset, core.high_watermark)
        if offset >= core.high_watermark and max_wait_s > 0:
            if len(replica.watermark_waiters) >= self.config.fetch_waiters_max:
                self.counters["fetch_wait_refused"] += 1
                max_wait_s = 0  # answer at once: the client polls again
            loop = asyncio.get_running_loop()
            deadline = loop.time() + max_wait_s
            while offset >= core.high_watermark and not replica.closed:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                waiter: asyncio.Future[None] = loop.create_future()
                replica.watermark_waiters.add(waiter)
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter, remaining)
                finally:
                    replica.watermark_waiters.discard(waiter)
        if replica.closed:
            self._driver.serving(key)  # fenced meanwhile: say so
            raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} was closed")
        try:
            data = core.read(offset, max_bytes) if offset < core.high_watermark else b""
        except (OSError, CorruptSegmentError) as error:
            self._driver.read_failed(replica, error, "fetch")
            self._driver.serving(key)  # raises: out of service, retriable (another replica serves)
            raise
        return FetchResult(data, core.high_watermark, core.start_offset)

    def list_offsets(self, key: PartitionKey, timestamp_ms: int | None) -> PartitionOffsets:
        """The local replica's log start offset and high watermark, leader or follower,
        and with ``timestamp_ms`` the first offset below the high watermark whose
        record timestamp is at least ``timestamp_ms``.

        The lookup is exact at record level, in offset order (timestamps need not
        grow): the log skips the batches whose ``max_timestamp_ms`` is below the time
        (the segment log's time index skips whole index intervals) and scans the
        record timestamps of the first batch that reaches it. The log knows nothing
        of the high watermark, so an answer at or above it (a record not committed
        yet) is None, like no answer at all. Raises like :meth:`fetch` when the
        replica is missing or fenced.
        """
        return self._driver.list_offsets(key, timestamp_ms)

    # ------------------------------------------------------------------ full disk, maintenance
    # (The driver decides; see its methods of the same names and the module docstring.)

    @property
    def disk_full(self) -> bool:
        return self._driver.disk_full

    def disk_status(self) -> DiskStatus:
        return self._driver.disk_status()

    def full_nodes(self) -> frozenset[str]:
        return self._driver.full_nodes()

    def set_full_peers(self, nodes: Iterable[str]) -> None:
        self._driver.set_full_peers(nodes)

    @property
    def in_maintenance(self) -> bool:
        return self._driver.in_maintenance

    def maintenance_nodes(self) -> frozenset[str]:
        return self._driver.maintenance_nodes()

    def set_maintenance(self, nodes: Iterable[str]) -> None:
        self._driver.set_maintenance(nodes)

    # ------------------------------------------------------------------ damage (scrubbing)

    async def check_reported(self, key: PartitionKey, offset: int) -> CorruptSegmentError | None:
        """A consumer reports that the batch holding ``offset``, fetched from this
        node's replica of ``key``, failed its checksum: read it from disk and verify
        it (on the scrub thread); damage fences the replica. Raises like
        :meth:`fetch` when the replica is missing or out of service, and
        :class:`OffsetOutOfRangeError` for an offset outside its log."""
        replica = self._driver.serving(key)
        log = replica.log
        if not isinstance(log, SegmentLog):
            return None  # a memory log (tests): nothing on disk to rot
        try:
            damage = await self._scrubber.check(log, offset)
        except LogClosedError:
            self._driver.serving(key)  # fenced meanwhile: says so
            raise UnavailableError(f"{key[0]}/{key[1]}: the replica was closed") from None
        if damage is not None:
            self._driver.damage_found(key, log, damage, "consumer report")
        return damage

    # ------------------------------------------------------------------ the loop

    async def _tick_loop(self) -> None:
        """Run the driver's tick pass: tick due replicas, send keepalives, run the
        periodic jobs; then the committed files and the scrubber.

        The loop sleeps until the next thing is due (at least half a heartbeat
        interval between passes): an idle node whose groups are all quiesced wakes
        only for keepalives and the periodic jobs, not 20–40 times a second. An
        input that makes a replica due sooner ends a long sleep
        (:meth:`wake_early`). Every pass that ends on its timer measures how late it
        ran: the event loop's lag (see :class:`~laminar.server.driver.DriverLiveness`).
        """
        driver = self._driver
        loop = asyncio.get_running_loop()
        while not self._closed:
            now = self._now()
            until = driver.sleep_until(now)
            waiter = loop.create_future()
            self._tick_waiter, driver.sleep_until_ms = waiter, until
            timer = loop.call_later((until - now) / 1000, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._tick_waiter, driver.sleep_until_ms = None, _NO_WAKE
            now = self._now()
            driver.tick(now, now - until if now >= until else None)
            if driver.committed_save_due(now):
                self._save_committed()
            self._scrubber.tick(now)

    def _save_committed(self) -> None:
        """Write the moved high watermarks in one job on the thread pool (a few
        thousand files take tens of ms: not on the loop). Skipped while the previous
        job runs: the next period takes its replicas too."""
        if self._committed_saving is not None and not self._committed_saving.done():
            return
        changes = self._driver.committed_changes()
        if changes:
            loop = asyncio.get_running_loop()
            self._committed_saving = loop.run_in_executor(
                self._files_pool, write_committed_files, changes
            )

    async def _flush(self, pending: Coroutine[Any, Any, None]) -> None:
        """Finish a round whose fsyncs went to the pool, then the rounds after it."""
        try:
            await pending
            while self._driver.dirty:
                rest = self._start_round()
                if rest is not None:
                    await rest
        except Exception:  # pragma: no cover - a bug; keep the node alive and loud
            _LOG.exception("replica flush failed")
            raise

    def _start_round(self) -> Coroutine[Any, Any, None] | None:
        """One flush round (:meth:`ReplicaDriver.begin_round`): its syncs inline or
        on the thread pool (then the returned coroutine finishes it). None when the
        round is done."""
        round_ = self._driver.begin_round()
        if round_ is None:
            return None
        if not round_.syncs:
            self._driver.complete(round_, (), None)
        elif round_.inline:
            started = time.perf_counter()
            result = _sync_one(round_.syncs[0].log)
            self._driver.complete(round_, (result,), time.perf_counter() - started)
        else:
            return self._finish_after_pool(round_)
        return None

    async def _finish_after_pool(self, round_: Round[Replica]) -> None:
        started = time.perf_counter()
        results = await self._sync_pool(round_.syncs)
        self._driver.complete(round_, results, time.perf_counter() - started)

    async def _sync_pool(self, replicas: list[Replica]) -> list[object]:
        """Fsync the logs of ``replicas`` in parallel in the thread pool; from
        :data:`SYNCFS_BATCH_MIN` segment logs on, one ``syncfs`` for all of them."""
        loop = asyncio.get_running_loop()
        logs = [replica.log for replica in replicas]
        segment_logs = [log for log in logs if isinstance(log, SegmentLog)]
        if len(segment_logs) == len(logs) and len(logs) >= SYNCFS_BATCH_MIN:
            return await loop.run_in_executor(
                self._pool, _sync_together, self._data_dir, segment_logs
            )
        results = await asyncio.gather(
            *(loop.run_in_executor(self._pool, log.sync) for log in logs),
            return_exceptions=True,
        )
        return list(results)


_NO_WAKE = 2**62


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _sync_one(log: LogStorage) -> object:
    """Fsync one log on the loop itself; None or the exception raised."""
    try:
        log.sync()
    except Exception as error:
        return error
    return None


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _sync_together(data_dir: str, logs: Sequence[SegmentLog]) -> list[object]:
    """(Thread pool.) Sync many logs with one filesystem sync; per log None or the
    error that makes it fail (a failed ``syncfs`` fails them all: nothing of the
    round can be trusted, as with a failed fsync)."""
    results: list[object] = []
    tickets: list[tuple[SegmentLog, SyncTicket]] = []
    for log in logs:
        try:
            tickets.append((log, log.begin_sync()))
            results.append(None)
        except Exception as error:
            results.append(error)
    try:
        sync_filesystem(data_dir)
    except OSError as error:
        return [error if result is None else result for result in results]
    for log, ticket in tickets:
        log.end_sync(ticket)
    return results


def _create_founding_logs(
    data_dir: str, items: Sequence[tuple[str, bytes]], config: LogConfig, files: SegmentFiles
) -> list[SegmentLog | None]:
    """(Thread pool.) Create logs with their founding state, then one filesystem
    sync for all of them. None for a directory that already exists (a replica
    fenced or being deleted: not founded twice)."""
    logs: list[SegmentLog | None] = []
    try:
        for directory, state in items:
            if os.path.exists(directory):
                logs.append(None)
                continue
            logs.append(SegmentLog.create_unsynced(directory, state, config, files=files))
        sync_filesystem(data_dir)
        for log in logs:
            if log is not None:
                log.created()
    except BaseException:
        for log in logs:
            if log is not None:
                with contextlib.suppress(Exception):
                    log.close()
        raise
    return logs


def _fail_calls(replica: Replica, error: Exception) -> None:
    for future in replica.calls.values():
        if not future.done():
            future.set_exception(error)
    replica.calls.clear()


def _time_out(future: asyncio.Future[ProduceReply], timeout_s: float) -> None:
    if not future.done():
        future.set_exception(
            RequestTimeoutError(f"no answer within {timeout_s:.1f} s; the write may still commit")
        )


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
