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
(:meth:`_HostLiveness.may_lead`), it hands its leaderships to in-sync peers with
space (after ``disk_handover_delay_ms``, so that gossip has told them first and
they do not hand them straight back), it opens no new replica, and its logs
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
import heapq
import logging
import os
import random
import shutil
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from laminar.errors import (
    ConfigError,
    CorruptSegmentError,
    CorruptStateError,
    LaminarError,
    LogClosedError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    StorageError,
    StorageFullError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.ids import TopicPartition
from laminar.logfields import fields, partition_name
from laminar.records import parse_header
from laminar.replica.coalesce import Coalescer, PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import (
    LoopLag,
    NodeLiveness,
    ReplicaCore,
    StorageDamage,
    founding_state,
)
from laminar.replica.messages import (
    ConfigChanged,
    Outbound,
    ProduceReply,
    ProduceStatus,
    Ready,
    Removed,
    RoleChanged,
    TimeoutNow,
)
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.committed import (
    CommittedFileError,
    committed_path,
    read_committed,
    write_committed,
)
from laminar.segment.config import FsyncPolicy, LogConfig
from laminar.segment.files import SEGMENT_FILES_DEFAULT, SegmentFiles
from laminar.segment.layout import partition_directory, replica_directories
from laminar.segment.log import SegmentLog, SyncTicket, has_state, sync_filesystem
from laminar.segment.quarantine import DamageNote, set_aside
from laminar.segment.storage import LogStorage
from laminar.server import rules
from laminar.server.disk import (
    DiskStatus,
    DiskUsage,
    DiskWatch,
    check_thresholds,
    is_no_space,
    statvfs_usage,
    write_refusal,
)
from laminar.server.observability.histogram import FSYNC_BUCKETS_S, Histogram
from laminar.server.observability.history import LeadershipLog
from laminar.server.scrub import Scrubber
from laminar.server.tracing import ProduceTrace, Tracing

_LOG = logging.getLogger(__name__)

INLINE_FSYNC_MS_MAX = 2.0
"""A lone fsync runs on the event loop while recent fsync rounds averaged below this."""

PartitionKey = TopicPartition
Retention = tuple[int | None, int | None]
"""A partition's retention: ``(bytes, ms)`` kept per replica, None for no limit."""
LogFactory = Callable[[str, LogConfig], LogStorage]
"""Opens (or creates) the log of one replica in a directory: ``SegmentLog.open`` on a
node, a memory log in tests."""


@dataclass(frozen=True, slots=True)
class HostConfig:
    """Tunables of the replica host.

    ``produce_calls_max``: produce calls waiting for their answer on one replica at
    once; more are refused with ``UNAVAILABLE`` (counted as ``produce_refused``), so a
    flood of clients cannot grow the host's memory without bound. Independent of the
    core's ``pending_produce_max`` (``acks=all`` writes awaiting commit).
    ``fetch_waiters_max``: long-polling fetches waiting on one replica at once; more
    are answered at once, empty (counted as ``fetch_wait_refused``).
    ``queued_inputs_max``: inputs waiting for one busy replica's ``advance``; peer
    messages beyond it are dropped (consensus tolerates loss; counted as
    ``inputs_dropped``), local inputs (produce, targets) are always queued.
    ``storage_retry_ms`` / ``storage_retry_max_ms``: a replica fenced by a storage
    failure is reopened after ``storage_retry_ms``, doubling after each failed
    reopen up to ``storage_retry_max_ms``.
    ``fsync_threads``: threads running fsyncs of different partitions in parallel.
    ``retention_check_ms``: how often each replica's log is checked against its
    topic's retention (``retention_of``); what may go is dropped by the core,
    never past the high watermark.
    ``committed_save_ms``: how often the replicas whose high watermark moved get it
    written to their ``committed`` file (:mod:`laminar.segment.committed`), all
    in one job on the fsync threads; a clean close writes it too. It bounds how far
    offline readers of the files trail the commit point. Cost: one 24-byte write
    and a rename per changed replica per period, no fsync.
    ``segment_files_max``: sealed segment files the node keeps open while idle, for
    all its replicas together (:mod:`laminar.segment.files`). Each replica holds
    its active segment's file open; a sealed one is opened by the read that needs
    it and then cached, the least recently used being closed beyond this bound. So
    a node needs about one descriptor per replica plus this many plus its
    connections, however many segments its logs hold.
    ``internal_segment_bytes_max``: the segment size of internal topics (names
    starting with ``__``: ``__cluster``, ``__groups``) when smaller than the log
    config's. Their logs are bounded by snapshots, and the prefix a snapshot makes
    obsolete is deleted by whole segments: with 1 MiB segments a log holds at most
    about one segment more than the snapshots need (see ``docs/design.md``).
    ``snapshot_bytes_floor``: an internal log's leader writes a snapshot once the
    records appended since the last one exceed this and twice that snapshot's size
    (:func:`laminar.groups.replay.snapshot_due`): the floor keeps a small state
    from being snapshotted over and over; the log stays within a few times the
    state plus this plus a segment.
    ``disk_free_bytes_min`` / ``disk_free_percent_min``: the node's full-disk
    watermark, the larger of the two (bytes; percent of the data directory's
    filesystem; 0 turns either off). Below it the node is full
    (:mod:`laminar.server.disk`): it leads nothing, takes no new replicas, and
    reserves no segment blocks that would take free space below it; it returns to
    service once free space is above it by a tenth. Keep it above what the node
    writes between two checks at full speed plus a segment preallocation step
    (``LogConfig.preallocate_bytes_max``).
    ``disk_check_ms``: how often free space is measured (one ``statvfs``); a write
    that fails with ``ENOSPC`` makes the node full at once.
    ``disk_handover_delay_ms``: a node that turns full hands its leaderships over
    this long after it gossiped that it is full (at least two gossip intervals:
    50 ms in the ``local`` membership preset, 200 ms in ``lan``), so that the new
    leaders know not to hand them straight back; it still has the space above
    the watermark meanwhile.
    ``recovery_bytes_per_s``: how fast the replicas this node leads may send log
    data, all together, to replicas catching up as learners (one healing from
    damaged storage, or a new one placed here), as Redpanda's
    ``raft_learner_recovery_rate`` and CockroachDB's snapshot rate (32 MiB/s
    there too); 0: no limit. Catching up at full speed took the disk, CPU and
    links the partitions' own writes need (three nodes on one 2-core machine: a
    producer's p99 6x its idle p99 while a replica caught up at 244 MB/s, 2.1x at
    100 MiB/s, 1.2x at the default; ``bench/repair_bench.py``). A 1 GiB replica
    heals in about 33 s at the default; a node's replicas led by several nodes
    heal that much faster together.
    ``scrub_bytes_per_s``: the scrubber re-reads every replica's log at this rate,
    verifying every batch's checksums even where reads verified it before, and
    fences a replica whose disk rotted (:mod:`laminar.server.scrub`; 0 turns it
    off). The rate counts bytes plus a fixed cost per batch (4 KiB) and per call
    (64 KiB), so it bounds CPU: the default, 16 MiB/s, cost 0.3% of a core here
    (``bench/scrub_bench.py``, ``scrub_cpu_pct``: 1 GiB in 16 KiB batches; 0.35%
    with 1 KiB batches; target 2%) and re-reads a node holding 1 TiB in 18 hours
    (large batches) to 26 hours (16 KiB batches: 11.3 MiB/s read).
    ``scrub_pass_min_ms``: a scrub pass over the node's replicas starts at most this
    often (a node holding little data does not re-read it over and over).
    """

    produce_calls_max: int = 10_000
    fetch_waiters_max: int = 1_000
    queued_inputs_max: int = 10_000
    storage_retry_ms: int = 5_000
    storage_retry_max_ms: int = 60_000
    fsync_threads: int = 4
    retention_check_ms: int = 5_000
    committed_save_ms: int = 1_000
    segment_files_max: int = SEGMENT_FILES_DEFAULT
    internal_segment_bytes_max: int = 1 << 20
    snapshot_bytes_floor: int = 4 << 20
    disk_free_bytes_min: int = 256 << 20
    disk_free_percent_min: float = 1.0
    disk_check_ms: int = 500
    disk_handover_delay_ms: int = 400
    recovery_bytes_per_s: int = 32 << 20
    scrub_bytes_per_s: int = 16 << 20
    scrub_pass_min_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("produce_calls_max", "fetch_waiters_max", "queued_inputs_max"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if not 0 < self.storage_retry_ms <= self.storage_retry_max_ms:
            raise ConfigError("need 0 < storage_retry_ms <= storage_retry_max_ms")
        if self.fsync_threads < 1:
            raise ConfigError("fsync_threads must be >= 1")
        if self.retention_check_ms <= 0:
            raise ConfigError("retention_check_ms must be > 0")
        if self.committed_save_ms <= 0:
            raise ConfigError("committed_save_ms must be > 0")
        if self.segment_files_max < 0:
            raise ConfigError("segment_files_max must be >= 0")
        if self.internal_segment_bytes_max <= 0:
            raise ConfigError("internal_segment_bytes_max must be > 0")
        if self.snapshot_bytes_floor <= 0:
            raise ConfigError("snapshot_bytes_floor must be > 0")
        check_thresholds(self.disk_free_bytes_min, self.disk_free_percent_min, self.disk_check_ms)
        if self.disk_handover_delay_ms < 0:
            raise ConfigError("disk_handover_delay_ms must be >= 0")
        if self.recovery_bytes_per_s < 0:
            raise ConfigError("recovery_bytes_per_s must be >= 0")
        if self.scrub_bytes_per_s < 0 or self.scrub_pass_min_ms < 0:
            raise ConfigError("scrub_bytes_per_s and scrub_pass_min_ms must be >= 0")


@dataclass(frozen=True, slots=True)
class FencedReplica:
    """A replica taken out of service by a storage failure, until it is reopened."""

    key: PartitionKey
    reason: str
    since_ms: int
    durable_end: int
    """The log end at the last fsync that succeeded; a reopen truncates to it."""
    retry_at_ms: int
    attempts: int
    no_space: bool = False
    """Fenced because a write found no space: reopened once the disk has space again
    (not before ``retry_at_ms`` either), whatever the timer says."""


@dataclass(frozen=True, slots=True)
class DamagedReplica:
    """A replica whose storage was found damaged: what was lost and where the
    damaged files went. It heals (see the module docstring) and leaves this list
    once its group made it a voter again."""

    key: PartitionKey
    reason: str
    since_ms: int
    quarantine: str | None
    """The quarantine directory of the last damage (None: found by an earlier start)."""


DAMAGE_PASSES_MAX = 64
"""Damaged batches a replica's opening cuts before it gives up (each cut moves the
log end back, so a log of many damaged segments ends far sooner): a limit, not a
number anyone should reach."""


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class FetchResult:
    batches: bytes
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class _PendingProduce:
    """A produce call's batches, proposed on ``replica``, awaiting their replies."""

    replica: Replica
    request_ids: range
    futures: list[asyncio.Future[ProduceReply]]
    batches: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One replica's readable range ``[log_start_offset, high_watermark)`` and, when a
    time was asked, the first committed offset at or after it (None: none is)."""

    log_start_offset: int
    high_watermark: int
    offset_for_timestamp: int | None


_NO_WAKE = 2**62
_NEVER_MS = -(2**62)
_KEEPALIVE = PeerBundle((), ())
"""An empty bundle: tells the peer this node is alive and its loop turns."""


@dataclass(slots=True)
class Replica:
    """One partition replica on this node."""

    key: PartitionKey
    directory: str
    log: LogStorage
    core: ReplicaCore
    busy: bool = False
    queued: deque[Callable[[], object]] = field(default_factory=deque)
    watermark_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    calls: dict[int, asyncio.Future[ProduceReply]] = field(default_factory=dict)
    """Produce calls awaiting their answer, by request id."""
    leader_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    """Produce calls refused while the group had no usable leader, waiting for one
    (see :meth:`ReplicaHost._await_leader`)."""
    closed: bool = False
    wake_ms: int = _NO_WAKE
    """When the host's wake-up heap next ticks this replica (see ``_schedule``)."""
    committed_saved: int | None = None
    """The offset in the replica's ``committed`` file (as last written or read), or
    None when its log is not a :class:`SegmentLog` (no file is kept then)."""
    traces: list[ProduceTrace] = field(default_factory=list)
    """Traced produces waiting for the end of the round holding their proposal
    (only with tracing on; see :mod:`laminar.server.tracing`)."""


SYNCFS_BATCH_MIN = 4
"""A flush round syncing at least this many logs makes them durable with one
``syncfs`` of the data directory's filesystem instead of an fsync (or three, with a
state change) per log: when thousands of groups change configuration or elect at
once, per-log fsyncs queued on the pool for seconds and every round's messages
waited for them."""

FOUNDING_CHUNK = 256
"""Founding replicas created per job on the thread pool (one filesystem sync each):
small enough that the first partitions start while the rest are being written."""


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
        host_config: HostConfig | None = None,
        log_factory: LogFactory = SegmentLog.open,
        clock: Callable[[], float] | None = None,
        retention_of: Callable[[PartitionKey], Retention] = lambda key: (None, None),
        peer_alive: Callable[[str], bool] = lambda node_id: False,
        peer_dead: Callable[[str], bool] = lambda node_id: False,
        disk_usage: Callable[[], DiskUsage] | None = None,
        on_disk_full: Callable[[bool], None] | None = None,
    ) -> None:
        """``disk_usage``: the free space of the data directory's filesystem (default:
        ``statvfs`` of ``data_dir``; tests inject their own). ``on_disk_full``: told
        when the node turns full (True) or gets space back (False), to gossip it."""
        self.node_id = NodeId(node_id)
        self._data_dir = data_dir
        self._config = config
        self.config = host_config if host_config is not None else HostConfig()
        self._disk = DiskWatch(
            free_bytes_min=self.config.disk_free_bytes_min,
            free_percent_min=self.config.disk_free_percent_min,
            check_interval_ms=self.config.disk_check_ms,
            usage=disk_usage if disk_usage is not None else partial(statvfs_usage, data_dir),
        )
        self._on_disk_full = on_disk_full
        self._full_peers: frozenset[NodeId] = frozenset()
        self._full_nodes: frozenset[NodeId] = frozenset()
        """Nodes out of disk space: the peers gossip says are full, and this one when
        it is. Empty on a healthy cluster, so a produce checks nothing more."""
        self._maintenance: frozenset[NodeId] = frozenset()
        """Nodes in maintenance (the cluster metadata says so): they may not lead."""
        self._handover_due_ms = _NO_WAKE  # while full or in maintenance: next _hand_over
        self._segment_logs = log_factory == SegmentLog.open
        self._segment_files = SegmentFiles(
            self.config.segment_files_max, may_reserve=self._disk.may_reserve
        )
        """The node's cache of sealed segments' descriptors, shared by its logs."""
        self._log_factory: LogFactory = (
            partial(SegmentLog.open, files=self._segment_files)
            if self._segment_logs
            else log_factory
        )
        self._clock = clock  # seconds, monotonic; None: the event loop's
        self._retention_of = retention_of
        self._retention_due_ms = 0
        self._committed_due_ms = 0
        self._committed_saving: asyncio.Future[None] | None = None
        self._event_log = _EventLog()
        self.tracing: Tracing | None = None
        """Spans of each produce's replication (set by the node with tracing on)."""
        self._watermark_moved: set[PartitionKey] = set()
        """Replicas whose high watermark moved since the last committed-file pass
        (a pass looks at these only, not at every replica)."""
        # The core decides when to fsync (Ready.sync); the log itself never does.
        self._log_config = _without_fsync(log_config)
        self._internal_log_config = replace(
            self._log_config,
            segment_bytes_max=min(
                self._log_config.segment_bytes_max, self.config.internal_segment_bytes_max
            ),
        )
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
        self._wakes: list[tuple[int, int, PartitionKey]] = []
        """Heap of (wake time, sequence, key): the tick loop looks only at due
        replicas, so an idle (quiesced) replica costs nothing between its rare
        wake-ups, however many there are."""
        self._wake_sequence = 0
        self._tick_interval_ms = max(self._config.heartbeat_interval_ms // 2, 5)
        self._tick_waiter: asyncio.Future[None] | None = None
        self._sleep_until_ms = _NO_WAKE  # when the tick loop's current sleep ends
        self._pool = ThreadPoolExecutor(
            max_workers=self.config.fsync_threads, thread_name_prefix="fsync"
        )
        # Committed files are written by a thread of their own: thousands at once
        # (a failover moves every watermark) must never delay a flush round's sync.
        self._files_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="committed")
        self._request_ids = 0
        self._fsync_recent_ms = 0.0  # moving average of fsync rounds' duration
        self._targets: dict[PartitionKey, tuple[str, ...]] = {}
        self._fenced: dict[PartitionKey, FencedReplica] = {}
        self._damaged: dict[PartitionKey, DamagedReplica] = {}
        self._creating: set[PartitionKey] = set()
        self._liveness = _HostLiveness(self, peer_alive, peer_dead)
        self._closed = False
        self.counters: dict[str, int] = {
            "fsyncs": 0,
            "bundles_sent": 0,
            "keepalives_sent": 0,
            "flush_rounds": 0,
            "storage_failures": 0,
            "produce_refused": 0,
            "fetch_wait_refused": 0,
            "inputs_dropped": 0,
            "damaged_replicas": 0,
            "produce_refused_no_space": 0,
            "damage_found": 0,
            "elections": 0,
            "leaderships_gained": 0,
            "leader_changes": 0,
        }
        self.fsync_seconds = Histogram(FSYNC_BUCKETS_S)
        """How long each fsync round took (one fsync on the loop, several in parallel
        in the pool, or one ``syncfs``), for ``--metrics``."""
        self.leadership_log = LeadershipLog()
        """The newest leaders its replicas learnt of (the status page, ``NodeStatus``)."""
        self._scrubber = Scrubber(
            node_id,
            bytes_per_s=self.config.scrub_bytes_per_s,
            pass_min_ms=self.config.scrub_pass_min_ms,
            keys=self._replicas.keys,
            log_of=self._log_of,
            on_damage=self._damage_found,
            counters=self.counters,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open every replica found in the data directory and start ticking."""
        if self._disk.check(self._now()):  # a node started on a full disk
            self._disk_changed(self._now())
        for found in replica_directories(self._data_dir):
            if self._segment_logs and not has_state(found.directory):
                # A batch creation a crash interrupted before its sync: the
                # replica never acted; its founding is applied again later.
                _LOG.warning(
                    "removing replica %s/%d left half-created", found.topic, found.partition
                )
                shutil.rmtree(found.directory, ignore_errors=True)
                continue
            self.open_replica((found.topic, found.partition), None)
        self._ticker = asyncio.create_task(self._tick_loop(), name="replica-ticker")

    async def close(self, *, timeout_s: float = 5.0) -> None:
        """Close every replica; waits for a running flush round and the fsync
        threads at most about ``timeout_s`` (a stuck disk must not stop a shutdown)."""
        self._closed = True
        self._scrubber.close()  # a job under way stops after its current call
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._flush_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._flush_task, max(0.0, deadline - loop.time()))
        if self._committed_saving is not None:  # it must not rename over what follows
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._committed_saving, max(0.0, deadline - loop.time()))
        _write_committed_files(self._committed_changes())
        for replica in list(self._replicas.values()):
            _fail_calls(replica, UnavailableError("node shutting down"))
            self._close_replica(replica)
        self._files_pool.shutdown(wait=False, cancel_futures=True)
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

    # ------------------------------------------------------------------ replicas

    def replica_keys(self) -> list[PartitionKey]:
        return list(self._replicas)

    def get(self, key: PartitionKey) -> Replica | None:
        return self._replicas.get(key)

    def is_fenced(self, key: PartitionKey) -> bool:
        return key in self._fenced

    def fenced(self) -> list[FencedReplica]:
        """Replicas out of service after a storage failure, by key."""
        return [self._fenced[key] for key in sorted(self._fenced)]

    def damaged(self) -> list[DamagedReplica]:
        """Replicas healing from damaged storage, by key (those healed are dropped)."""
        found = []
        for key, replica in sorted(self._replicas.items()):
            if not replica.core.healing:
                self._damaged.pop(key, None)
                continue
            known = self._damaged.get(key)
            if known is None:  # found by an earlier start of the node
                known = self._damaged[key] = DamagedReplica(
                    key, "damaged storage found by an earlier start", self._now(), None
                )
            found.append(known)
        return found

    def accept_data_loss(self, key: PartitionKey) -> bool:
        """The operator's decision for a partition whose replicas are too damaged to
        elect a leader: this node's replica stops healing and votes with what it
        holds (acknowledged records the new leader lacks are lost). True when it
        was healing."""
        replica = self._replicas.get(key)
        if replica is None:
            return False
        target = self._targets.get(key, ())
        accepted = replica.core.accept_data_loss(tuple(NodeId(n) for n in target))
        if accepted:
            _LOG.warning(
                "replica %s/%d node=%s: data loss accepted by an operator: it votes again "
                "with its log up to %d",
                *key,
                self.node_id,
                replica.core.end_offset,
                extra=fields(key),
            )
            self._damaged.pop(key, None)
            self._mark(replica)
        return accepted

    def open_replica(
        self,
        key: PartitionKey,
        initial: GroupConfig | None,
        *,
        log: LogStorage | None = None,
        founding: bool = False,
    ) -> Replica:
        """Open (or create) the replica of ``key``; ``initial`` for founding replicas.

        ``log`` is an already opened log (a reopen after a storage failure, or one
        :meth:`open_founding` created with its founding state: ``founding``).
        """
        existing = self._replicas.get(key)
        if existing is not None:
            return existing
        topic, partition = key
        directory = partition_directory(self._data_dir, topic, partition)
        if log is None:
            log = self._open_log(key, directory)
        damage = StorageDamage()
        committed = -1
        if isinstance(log, SegmentLog):
            committed, lost = self._load_committed(key, directory, log)
            damage = StorageDamage(lost_entries=lost or log.damage_found is not None)
        core = self._make_core(key, log, initial, founding, damage)
        replica = Replica(key, directory, log, core)
        if isinstance(log, SegmentLog):
            replica.committed_saved = committed
            self._watermark_moved.add(key)  # the first pass writes it if it is missing
        self._replicas[key] = replica
        target = self._targets.get(key)
        if target is not None:
            core.set_target(tuple(NodeId(n) for n in target), self._now())
        self._mark(replica)
        _LOG.info(
            "replica open %s/%d end=%d",
            topic,
            partition,
            log.end_offset,
            extra=fields((topic, partition)),
        )
        return replica

    def _open_log(self, key: PartitionKey, directory: str) -> LogStorage:
        """Open ``key``'s log; damage its recovery cuts from the active segment is set
        aside first (with a SegmentLog: its ``damage_found`` says so)."""
        config = self._log_config_of(key)
        if not self._segment_logs:
            return self._log_factory(directory, config)

        def aside(error: CorruptSegmentError) -> None:
            self._set_aside_segment(key, error, [error.path], "log cut before this batch")

        return SegmentLog.open(directory, config, files=self._segment_files, set_aside=aside)

    def _make_core(
        self,
        key: PartitionKey,
        log: LogStorage,
        initial: GroupConfig | None,
        founding: bool,
        damage: StorageDamage,
    ) -> ReplicaCore:
        """The replica's core; damage found while it reads its log at start (a batch
        failing its checksums, a state file with no valid copy) is set aside, the
        log cut or the state dropped, and the core made again, told what was lost."""
        for _ in range(DAMAGE_PASSES_MAX):
            try:
                return ReplicaCore(
                    self.node_id,
                    log,
                    self._config,
                    now_ms=self._now(),
                    rng=random.Random(self._rng.random()),
                    initial=initial,
                    limits=self._log_config.limits,
                    founding=founding,
                    liveness=self._liveness,
                    damage=damage if damage.lost_entries or damage.lost_state else None,
                    name=partition_name(key),
                )
            except CorruptSegmentError as error:
                if not isinstance(log, SegmentLog):
                    raise
                later = [p for p in log.segment_paths_from(error.offset) if p.endswith(".log")]
                action = "log cut before this batch"
                if len(later) > 1:
                    action += f" ({len(later) - 1} later segments deleted, to be repaired)"
                self._set_aside_segment(key, error, [error.path], action)
                log.cut_damaged(error)
                damage = StorageDamage(True, damage.lost_state)
            except CorruptStateError as error:
                if not isinstance(log, SegmentLog):
                    raise
                note = DamageNote(
                    f"{key[0]}/{key[1]}", str(error), error.path, "state file replaced anew"
                )
                self._note_damage(
                    key, note, set_aside(self._data_dir, *key, note, move=[error.path])
                )
                log.discard_state()
                damage = StorageDamage(damage.lost_entries, True)
                initial, founding = None, False  # never found again: the group exists
        raise StorageError(f"{key[0]}/{key[1]}: more than {DAMAGE_PASSES_MAX} damaged batches")

    def _set_aside_segment(
        self, key: PartitionKey, error: CorruptSegmentError, paths: Sequence[str], action: str
    ) -> None:
        note = DamageNote.of_segment(f"{key[0]}/{key[1]}", error, action)
        excerpts = [(path, error.position if path == error.path else 0) for path in paths]
        self._note_damage(key, note, set_aside(self._data_dir, *key, note, excerpts=excerpts))

    def _note_damage(self, key: PartitionKey, note: DamageNote, directory: str | None) -> None:
        self.counters["damaged_replicas"] += 1
        where = f"{note.file} offset {note.offset}" if note.offset is not None else note.file
        reason = f"{note.reason} ({where}; {note.action})"
        self._damaged[key] = DamagedReplica(key, reason, self._now(), directory)
        _LOG.error(
            "replica %s/%d node=%s: damaged storage: %s; files set aside in %s; the replica "
            "heals from its peers",
            *key,
            self.node_id,
            reason,
            directory or "(nowhere: the quarantine could not be written)",
            extra=fields(key),
        )

    def _load_committed(
        self, key: PartitionKey, directory: str, log: SegmentLog
    ) -> tuple[int, bool]:
        """The replica's committed file (-1: none) and whether it says the log lost
        acknowledged entries (it records more than the log holds). A damaged file
        is set aside."""
        try:
            return _load_committed(directory, log.end_offset), False
        except _CommittedAboveError as above:
            note = DamageNote(
                f"{key[0]}/{key[1]}",
                f"the committed file records offset {above.committed}, the log ends at "
                f"{log.end_offset}: acknowledged entries are missing",
                above.path,
                "committed file set aside",
            )
        except CommittedFileError as error:
            note = DamageNote(
                f"{key[0]}/{key[1]}", str(error), committed_path(directory), "set aside"
            )
            self._note_damage(key, note, set_aside(self._data_dir, *key, note, move=[note.file]))
            return -1, False
        self._note_damage(key, note, set_aside(self._data_dir, *key, note, move=[note.file]))
        return -1, True

    def _log_config_of(self, key: PartitionKey) -> LogConfig:
        """The log config of ``key``'s replica (internal topics: smaller segments)."""
        return self._internal_log_config if key[0].startswith("__") else self._log_config

    def advance_start(self, key: PartitionKey, offset: int) -> None:
        """Ask ``key``'s core to drop its log below ``offset`` (a snapshot as of
        ``offset`` is applied: see :mod:`laminar.snapshots`), as retention does."""
        replica = self._replicas.get(key)
        if replica is not None and offset > replica.core.start_offset:
            self._input(replica, partial(replica.core.advance_start, offset, self._now()))

    def creating(self, key: PartitionKey) -> bool:
        """Whether :meth:`open_founding` is still creating ``key``'s replica."""
        return key in self._creating

    def reserve_founding(self, keys: Sequence[PartitionKey]) -> None:
        """Keys that :meth:`open_founding` will create: until then, messages for
        them are ignored instead of opening a plain replica. (A leader founded
        elsewhere may replicate before this node's creation runs, behind earlier
        creations; a plain replica would lack the founding configuration, which is
        in the founding state and not in the log, and could never campaign.)"""
        self._creating.update(keys)

    async def open_founding(self, groups: Sequence[tuple[PartitionKey, GroupConfig]]) -> None:
        """Create the founding replicas of new partitions (see the module docstring).

        Keys already open are skipped. Returns once every replica is open; a chunk
        whose creation fails is logged and its replicas left to be opened the plain
        way when their leader first replicates.
        """
        fresh = [(key, group) for key, group in groups if key not in self._replicas]
        if not self._segment_logs:  # memory logs: nothing to batch
            for key, group in fresh:
                self.open_replica(key, group)
            return
        self._creating.update(key for key, _ in fresh)
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
                        self._log_config_of(chunk[0][0]),
                        self._segment_files,
                    )
                except Exception as error:
                    _LOG.error("creating %d replicas failed: %s", len(chunk), error)
                    continue
                for (key, group), log in zip(chunk, logs, strict=True):
                    self._creating.discard(key)
                    if log is None:
                        continue
                    if self._closed or key in self._replicas:
                        with contextlib.suppress(Exception):
                            log.close()
                        continue
                    self.open_replica(key, group, log=log, founding=True)
                _LOG.info("created %d founding replicas (%s ...)", len(chunk), chunk[0][0])
        finally:
            self._creating.difference_update(key for key, _ in groups)  # reserved ones too

    def delete_replica(self, key: PartitionKey) -> None:
        """Close the replica and delete its data (topic deleted, or moved away)."""
        replica = self._replicas.get(key)
        if replica is None:
            if self._fenced.pop(key, None) is not None:
                topic, partition = key
                shutil.rmtree(partition_directory(self._data_dir, topic, partition), True)
            return
        self._close_replica(replica)
        shutil.rmtree(replica.directory, ignore_errors=True)
        with contextlib.suppress(OSError):  # the topic's directory, once it is empty
            os.rmdir(os.path.dirname(replica.directory))
        _LOG.info("replica deleted %s/%d", *key, extra=fields(key))

    def reopen_replica(self, key: PartitionKey) -> Replica | None:
        """Close the replica's core and open it again on the same log, data kept.

        For a replica its group removed while placement wants it back: a removed core
        ignores everything, while a fresh one rejoins when the leader adds it again,
        and catches up from where its log still matches the leader's.
        """
        replica = self._replicas.get(key)
        if replica is None:
            return None
        _LOG.info(
            "replica reopened %s/%d, log kept end=%d",
            *key,
            replica.log.end_offset,
            extra=fields(key),
        )
        _fail_calls(replica, UnavailableError(f"{key[0]}/{key[1]}: replica reopened"))
        self._close_replica(replica)
        return self.open_replica(key, None)

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

    def _input(
        self, replica: Replica, action: Callable[[], object], *, droppable: bool = False
    ) -> None:
        """Apply ``action`` to the replica's core now, or after its ``advance`` if busy.

        A ``droppable`` input (a peer message) is dropped when the replica's queue is
        full; consensus retransmits what matters.
        """
        if replica.closed:
            return
        if replica.busy:
            if droppable and len(replica.queued) >= self.config.queued_inputs_max:
                self.counters["inputs_dropped"] += 1
                return
            replica.queued.append(action)
        else:
            try:  # _apply, inlined: every input of the node passes here
                action()
            except (OSError, StorageError) as error:
                self._fence(replica, error)
                return
            self._mark(replica)

    def _apply(self, replica: Replica, action: Callable[[], object]) -> None:
        """Run an input on the core; a storage failure fences the replica."""
        try:
            action()
        except (OSError, StorageError) as error:
            self._fence(replica, error)

    def _schedule(self, replica: Replica) -> None:
        """Make sure the heap holds the replica's next wake-up (after any input).

        Only an earlier wake-up is pushed; a later one is found when the earlier
        entry comes due and the core says it is not due yet (lazy deletion).
        """
        wake_ms = replica.core.next_wake_ms()
        if wake_ms < replica.wake_ms:
            replica.wake_ms = wake_ms
            self._wake_sequence += 1
            heapq.heappush(self._wakes, (wake_ms, self._wake_sequence, replica.key))
            if wake_ms < self._sleep_until_ms - self._tick_interval_ms:
                waiter = self._tick_waiter  # in a long sleep: end it
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    def _mark(self, replica: Replica) -> None:
        self._schedule(replica)
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
        self._liveness.heard[NodeId(source)] = now
        for item, message in bundle.items():
            key = _partition_key(item)
            replica = self._replicas.get(key)
            if replica is None:
                if (
                    self._closed
                    or key in self._fenced
                    or key in self._creating
                    or self._disk.full  # takes no new replicas
                    or not self._accept_replica(key)
                ):
                    continue
                # A leader added us to the group: learn everything from its log.
                replica = self.open_replica(key, None)
            self._input(
                replica, partial(replica.core.step, NodeId(source), message, now), droppable=True
            )

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

    def peer_returned(self, node_id: str) -> None:
        """Membership says ``node_id`` is alive again: wake the quiesced groups
        this node leads that count it as a peer (see ``ReplicaCore.peer_returned``)."""
        now = self._now()
        peer = NodeId(node_id)
        for replica in list(self._replicas.values()):
            core = replica.core
            if core.role is Role.LEADER and core.quiesced:
                self._input(replica, partial(core.peer_returned, peer, now))

    def hint_leader_dead(self, node_id: str) -> None:
        now = self._now()
        for replica in list(self._replicas.values()):
            core = replica.core
            if core.led_by(node_id):
                self._input(replica, partial(core.hint_leader_dead, now))

    def transfer_leadership(self, key: PartitionKey, target: NodeId) -> None:
        """Ask the replica of ``key``, if it leads, to hand leadership to ``target``."""
        replica = self._replicas.get(key)
        if replica is not None and replica.core.role is Role.LEADER:
            now = self._now()
            self._input(replica, partial(replica.core.transfer_leadership, target, now))

    def _count_role_change(self, key: PartitionKey, event: RoleChanged) -> None:
        """Elections started here (a replica became candidate), leaderships gained,
        and leaders learnt of (any replica here saw a new leader; also noted in the
        leadership log)."""
        counters = self.counters
        if event.role is Role.CANDIDATE:
            counters["elections"] += 1
        elif event.role is Role.LEADER:
            counters["leaderships_gained"] += 1
        if event.leader is not None:
            counters["leader_changes"] += 1
            self.leadership_log.note(self._now(), key[0], key[1], str(event.leader), event.term)

    def leader_usable(self, key: PartitionKey) -> bool:
        """Whether the group of this node's replica of ``key`` has a leader a client
        could be sent to (this node leading counts), as far as this node knows."""
        replica = self._replicas.get(key)
        if replica is None or replica.closed or replica.core.removed:
            return False
        return replica.core.leader is not None and not self._leader_unusable(replica)

    def leads(self, key: PartitionKey) -> bool:
        replica = self._replicas.get(key)
        return replica is not None and replica.core.role is Role.LEADER

    def _admit(self, key: PartitionKey, calls: int) -> Replica:
        """The serving replica of ``key``, if it has room for ``calls`` more produce
        calls (``produce_calls_max``); else the error to answer."""
        replica = self._serving(key)
        if self._full_nodes:
            self._refuse_without_space(replica)
        if len(replica.calls) + calls > self.config.produce_calls_max:
            self.counters["produce_refused"] += 1
            raise UnavailableError(
                f"{len(replica.calls)} produce calls already wait on {key[0]}/{key[1]}; retry later"
            )
        return replica

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
        replica = self._admit(key, 1)
        reply = await self._propose_one(replica, batch, acks, timeout_s)
        if reply.status is ProduceStatus.NOT_LEADER and self._leader_unusable(replica):
            # An election is under way: answer with its outcome, not a refusal the
            # client would retry blindly (with backoff) until it learns of it.
            remaining = timeout_s - (loop.time() - started)
            if await self._await_leader(replica, remaining):
                replica = self._admit(key, 1)
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
        now = self._now()
        self._input(replica, lambda: replica.core.propose(request_id, batch, acks, now))
        self._produce_round(loop)
        # A bare timer: a third of asyncio.timeout's cost (7 µs less per write here).
        timer = loop.call_later(timeout_s, _time_out, future, timeout_s)
        try:
            return await future
        finally:
            timer.cancel()
            replica.calls.pop(request_id, None)

    def _leader_unusable(self, replica: Replica) -> bool:
        """The group has no leader a client could be sent to: none known, or one on
        a node membership declared dead or this node has not heard from for the
        minimum election timeout (keepalives come four times as often): an
        election is due or under way."""
        core = replica.core
        leader = core.leader
        if replica.closed or core.removed or leader == self.node_id:
            return False  # a removed replica has no election to wait for
        if leader is None or self._liveness.peer_dead(leader):
            return True
        silence = self._now() - self._liveness.peer_heard_ms(leader)
        return silence > self._config.election_timeout_min_ms

    async def _await_leader(self, replica: Replica, timeout_s: float) -> bool:
        """Wait (at most three quarters of ``timeout_s``, and four maximum election
        timeouts) until the group has a usable leader; whether it has one now."""
        wait_s = min(0.75 * timeout_s, 4 * self._config.election_timeout_max_ms / 1000)
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
        return not self._leader_unusable(replica)

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
            and (replica := self._replicas.get(requests[index][0])) is not None
            and self._leader_unusable(replica)
        ]
        if electing:
            remaining = max(0.0, deadline - loop.time())
            await asyncio.gather(
                *(self._await_leader(self._replicas[requests[i][0]], remaining) for i in electing)
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
        replica = self._admit(key, len(batches))
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
        now = self._now()
        self._input(replica, lambda: replica.core.propose_batches(request_ids, batches, acks, now))
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
        replica = self._serving(key)
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
            self._serving(key)  # fenced meanwhile: say so
            raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} was closed")
        try:
            data = core.read(offset, max_bytes) if offset < core.high_watermark else b""
        except (OSError, CorruptSegmentError) as error:
            self._read_failed(replica, error, "fetch")
            self._serving(key)  # raises: out of service, retriable (another replica serves)
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
        replica = self._serving(key)
        core = replica.core
        high_watermark = core.high_watermark
        found = None
        if timestamp_ms is not None and core.start_offset < high_watermark:
            try:
                offset = replica.log.offset_for_timestamp(timestamp_ms)
            except (OSError, CorruptSegmentError) as error:
                self._read_failed(replica, error, "timestamp lookup")
                self._serving(key)  # raises, as for a fetch
                raise
            if offset is not None and offset < high_watermark:
                assert offset >= core.start_offset, (offset, core.start_offset)
                found = offset
        return PartitionOffsets(core.start_offset, high_watermark, found)

    def _serving(self, key: PartitionKey) -> Replica:
        """The open replica of ``key``, or the error that explains why there is none."""
        replica = self._replicas.get(key)
        if replica is not None:
            return replica
        fenced = self._fenced.get(key)
        if fenced is not None:
            raise UnavailableError(
                f"the replica of {key[0]}/{key[1]} on {self.node_id} is out of service after "
                f"a storage failure ({fenced.reason}); another replica leads"
            )
        raise UnknownTopicOrPartitionError(f"{key[0]}/{key[1]} has no replica on this node")

    # ------------------------------------------------------------------ retention

    def _apply_retention(self, now: int) -> None:
        """Ask each replica's core to drop what its topic's retention lets go."""
        wall_ms = int(time.time() * 1000)  # record timestamps are wall-clock
        for replica in list(self._replicas.values()):
            retention_bytes, retention_ms = self._retention_of(replica.key)
            if retention_bytes is None and retention_ms is None:
                continue
            try:
                offset = replica.log.retention_offset(wall_ms, retention_bytes, retention_ms)
            except (OSError, StorageError) as error:
                self._fence(replica, error)
                continue
            if offset > replica.core.start_offset:
                self._input(replica, partial(replica.core.advance_start, offset, now))

    # ------------------------------------------------------------------ storage failures

    def _fence(self, replica: Replica, error: BaseException) -> None:
        """Take ``replica`` out of service after a storage failure (module docstring)."""
        if replica.closed:
            return
        key = replica.key
        now = self._now()
        self.counters["storage_failures"] += 1
        previous = self._fenced.get(key)
        attempts = previous.attempts if previous is not None else 0
        reason = f"{type(error).__name__}: {error}"
        no_space = is_no_space(error)
        _LOG.error(
            "replica fenced %s/%d node=%s: storage failure (%s); out of service, reopening "
            "%s from the last durable offset %d",
            *key,
            self.node_id,
            reason,
            "once the disk has space" if no_space else f"in {self.config.storage_retry_ms} ms",
            replica.core.durable_end,
            extra=fields(key),
        )
        self._fenced[key] = FencedReplica(
            key,
            reason,
            now,
            replica.core.durable_end,
            now + self.config.storage_retry_ms,
            attempts,
            no_space,
        )
        self._hand_off_fenced_leadership(replica)
        _fail_calls(
            replica,
            StorageError(
                f"{key[0]}/{key[1]}: the leader's storage failed ({reason}); the write was "
                "not acknowledged and may or may not be committed by the new leader"
            ),
        )
        self._close_replica(replica)
        if no_space and self._disk.note_no_space(now):  # the replica is closed by now
            self._disk_changed(now)

    def _reopen_fenced(self, now: int) -> None:
        for key, fenced in list(self._fenced.items()):
            if fenced.retry_at_ms > now or self._closed or (fenced.no_space and self._disk.full):
                continue
            topic, partition = key
            directory = partition_directory(self._data_dir, topic, partition)
            log: LogStorage | None = None
            try:
                log = self._open_log(key, directory)
                if log.end_offset > fenced.durable_end >= log.start_offset:
                    log.truncate_suffix(fenced.durable_end)
                log.sync()
                # Damage found when the core reads the log is set aside and healed
                # (open_replica); anything else keeps the replica fenced.
                self.open_replica(key, None, log=log)
            except Exception as error:  # still failing: try again later
                if log is not None:
                    with contextlib.suppress(Exception):
                        log.close()
                attempts = fenced.attempts + 1
                delay_ms = min(
                    self.config.storage_retry_max_ms, self.config.storage_retry_ms << attempts
                )
                no_space = is_no_space(error)
                self._fenced[key] = replace(
                    fenced, retry_at_ms=now + delay_ms, attempts=attempts, no_space=no_space
                )
                _LOG.error(
                    "replica %s/%d still fenced: reopen failed: %s", *key, error, extra=fields(key)
                )
                if no_space and self._disk.note_no_space(now):
                    self._disk_changed(now)
                continue
            del self._fenced[key]
            _LOG.warning(
                "replica reopened %s/%d after a storage failure: end=%d (was fenced %d ms)",
                *key,
                log.end_offset,
                now - fenced.since_ms,
                extra=fields(key),
            )

    def _hand_off_fenced_leadership(self, replica: Replica) -> None:
        """A leader being fenced tells its most caught-up voter with space to campaign
        now (``TimeoutNow``): its followers would otherwise wait for it for many
        election timeouts, since its node keeps talking to theirs. Any voter may be
        elected safely; one behind the others just loses, and the group elects
        another after an election timeout."""
        core = replica.core
        if core.role is not Role.LEADER or core.group_config is None:
            return
        voters = [
            str(voter)
            for voter in core.group_config.voters
            if voter not in self._full_nodes
            and voter not in self._maintenance
            and not self._liveness.peer_dead(voter)
        ]
        matches = {str(peer): offset for peer, offset in core.match_offsets().items()}
        successor = rules.shutdown_successor(self.node_id, voters, matches)
        if successor is None:
            return
        _LOG.info(
            "replica %s/%d: fenced leader hands over to %s",
            *replica.key,
            successor,
            extra=fields(replica.key, term=core.term, peer=successor),
        )
        coalescer = Coalescer()
        coalescer.add(replica.key, Outbound(NodeId(successor), TimeoutNow(core.term, self.node_id)))
        self._send_all(coalescer)

    # ------------------------------------------------------------------ full disk

    @property
    def disk_full(self) -> bool:
        """Whether this node's data directory is below its free-space watermark."""
        return self._disk.full

    def disk_status(self) -> DiskStatus:
        """Free space as last measured, the watermark, and the state."""
        return self._disk.status()

    def full_nodes(self) -> frozenset[str]:
        """The nodes out of disk space: this one when it is full, and the peers gossip
        says are (see :meth:`set_full_peers`)."""
        return frozenset(str(node) for node in self._full_nodes)

    def set_full_peers(self, nodes: Iterable[str]) -> None:
        """The peers gossip says are out of disk space."""
        self._full_peers = frozenset(NodeId(node) for node in nodes if node != self.node_id)
        self._note_full_nodes()

    def _note_full_nodes(self) -> None:
        nodes = set(self._full_peers)
        if self._disk.full:
            nodes.add(self.node_id)
        self._full_nodes = frozenset(nodes)

    def _disk_changed(self, now: int) -> None:
        """The node turned full, or got space back (see the module docstring)."""
        status = self._disk.status()
        self._note_full_nodes()
        if status.full:
            _LOG.warning(
                "node %s disk full: %d bytes free of %d, watermark %d; handing over "
                "leaderships in %d ms, taking no new replicas",
                self.node_id,
                status.free_bytes,
                status.total_bytes,
                status.watermark_bytes,
                self.config.disk_handover_delay_ms,
            )
            self._handover_due_ms = now + self.config.disk_handover_delay_ms
        else:
            _LOG.warning(
                "node %s disk has space again: %d bytes free of %d, watermark %d; back in service",
                self.node_id,
                status.free_bytes,
                status.total_bytes,
                status.watermark_bytes,
            )
            if not self.in_maintenance:
                self._handover_due_ms = _NO_WAKE
            for key, fenced in list(self._fenced.items()):
                if fenced.no_space:
                    self._fenced[key] = replace(fenced, retry_at_ms=min(fenced.retry_at_ms, now))
        if self._on_disk_full is not None:
            self._on_disk_full(status.full)

    # ------------------------------------------------------------------ maintenance

    @property
    def in_maintenance(self) -> bool:
        """Whether the cluster metadata puts this node in maintenance."""
        return self.node_id in self._maintenance

    def maintenance_nodes(self) -> frozenset[str]:
        return frozenset(str(node) for node in self._maintenance)

    def set_maintenance(self, nodes: Iterable[str]) -> None:
        """The nodes in maintenance, as the cluster metadata last said (see the
        module docstring). This node entering it hands its leaderships over
        ``disk_handover_delay_ms`` from now, then again every ``disk_check_ms`` while
        some remain; leaving it lets its cores lead again."""
        before = self.in_maintenance
        self._maintenance = frozenset(NodeId(node) for node in nodes)
        if self.in_maintenance == before:
            return
        if self.in_maintenance:
            _LOG.warning(
                "node %s in maintenance: handing over leaderships in %d ms, leading nothing",
                self.node_id,
                self.config.disk_handover_delay_ms,
            )
            self._handover_due_ms = min(
                self._handover_due_ms, self._now() + self.config.disk_handover_delay_ms
            )
            waiter = self._tick_waiter  # the tick loop may be in a long sleep: end it
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        else:
            _LOG.warning("node %s out of maintenance: may lead again", self.node_id)
            if not self._disk.full:
                self._handover_due_ms = _NO_WAKE

    def _hand_over_leaderships(self, now: int) -> None:
        """(While full or in maintenance.) Hand each leadership of this node to the
        in-sync voter that may lead whose log matches furthest; a group with none
        keeps this leader (a full one writes into the space left above the
        watermark, and a write that finds none fences the replica, which hands over
        then)."""
        barred = self._full_nodes | self._maintenance
        for replica in list(self._replicas.values()):
            core = replica.core
            if core.role is not Role.LEADER or core.transferring_to is not None:
                continue
            candidates = [
                str(voter)
                for voter in core.in_sync_voters(now)
                if voter not in barred and not self._liveness.peer_dead(voter)
            ]
            matches = {str(peer): offset for peer, offset in core.match_offsets().items()}
            successor = rules.shutdown_successor(self.node_id, candidates, matches)
            if successor is not None:
                self._input(replica, partial(core.transfer_leadership, NodeId(successor), now))

    def _refuse_without_space(self, replica: Replica) -> None:
        """Raise :class:`StorageFullError` when too few of the group's voters have
        disk space for a write to commit (a majority is needed)."""
        config = replica.core.group_config
        if config is None:
            return
        full_voters = write_refusal(config.voters, self._full_nodes)
        if full_voters is None:
            return
        self.counters["produce_refused_no_space"] += 1
        topic, partition = replica.key
        raise StorageFullError(
            f"{topic}/{partition}: {len(full_voters)} of its {len(config.voters)} replicas "
            f"are on nodes out of disk space ({', '.join(full_voters)}), so no write can "
            "commit; the write was not taken. It succeeds once space is freed.",
            tuple(str(node) for node in full_voters),
        )

    # ------------------------------------------------------------------ damage (scrubbing)

    def _log_of(self, key: PartitionKey) -> LogStorage | None:
        replica = self._replicas.get(key)
        return replica.log if replica is not None else None

    def _damage_found(
        self, key: PartitionKey, log: LogStorage, error: BaseException, source: str
    ) -> None:
        """Damage in ``log`` found by ``source`` (the scrubber, a read, a consumer's
        report): one line saying where, then the replica is fenced (out of service;
        its group elects and serves from another replica; reopened later). Ignored
        when the replica is gone or has another log by now."""
        replica = self._replicas.get(key)
        if replica is None or replica.log is not log or replica.closed:
            return
        self.counters["damage_found"] += 1
        if isinstance(error, CorruptSegmentError):
            where = f"file={error.path} offset={error.offset} position={error.position}"
            reason = error.reason
        else:
            where, reason = "file=? offset=?", f"{type(error).__name__}: {error}"
        _LOG.error(
            "damage found replica=%s/%d node=%s source=%s %s reason=%s",
            *key,
            self.node_id,
            source,
            where,
            reason,
            extra=fields(key),
        )
        self._fence(replica, error)

    def _read_failed(self, replica: Replica, error: BaseException, source: str) -> None:
        """A read of ``replica``'s log failed: corrupt data is never served, the
        replica is fenced like after any storage failure."""
        if isinstance(error, CorruptSegmentError):
            self._damage_found(replica.key, replica.log, error, source)
        else:
            self._fence(replica, error)

    def _has_ready(self, replica: Replica) -> bool:
        """``replica.core.has_ready()``, where a leader reads its log for the appends
        it sends: a read that fails fences the replica (then False)."""
        try:
            return replica.core.has_ready()
        except (OSError, StorageError) as error:
            self._read_failed(replica, error, "replication read")
            return False

    async def check_reported(self, key: PartitionKey, offset: int) -> CorruptSegmentError | None:
        """A consumer reports that the batch holding ``offset``, fetched from this
        node's replica of ``key``, failed its checksum: read it from disk and verify
        it (on the scrub thread); damage fences the replica. Raises like
        :meth:`fetch` when the replica is missing or out of service, and
        :class:`OffsetOutOfRangeError` for an offset outside its log."""
        replica = self._serving(key)
        log = replica.log
        if not isinstance(log, SegmentLog):
            return None  # a memory log (tests): nothing on disk to rot
        try:
            damage = await self._scrubber.check(log, offset)
        except LogClosedError:
            self._serving(key)  # fenced meanwhile: says so
            raise UnavailableError(f"{key[0]}/{key[1]}: the replica was closed") from None
        if damage is not None:
            self._damage_found(key, log, damage, "consumer report")
        return damage

    # ------------------------------------------------------------------ the loop

    async def _tick_loop(self) -> None:
        """Tick due replicas, send keepalives, run the periodic jobs.

        The loop sleeps until the next thing is due (at least ``interval_ms``, half
        a heartbeat interval, between passes): an idle node whose groups are all
        quiesced wakes only for keepalives and the periodic jobs, not 20–40 times a
        second. An input that makes a replica due sooner ends a long sleep
        (:meth:`_schedule`). Every pass that ends on its timer measures how late it
        ran: the event loop's lag (see :class:`_HostLiveness`).
        """
        interval_ms = self._tick_interval_ms
        loop = asyncio.get_running_loop()
        while not self._closed:
            now = self._now()
            until = max(now + interval_ms, self._next_due_ms())
            waiter = loop.create_future()
            self._tick_waiter, self._sleep_until_ms = waiter, until
            timer = loop.call_later((until - now) / 1000, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._tick_waiter, self._sleep_until_ms = None, _NO_WAKE
            now = self._now()
            if now >= until:
                self._liveness.note_lag(now - until, now)  # before any timer acts on it
            self._tick_due(now)
            self._event_log.note_time(now)
            self._send_keepalives(now)
            if self._disk.due(now) and self._disk.check(now):
                self._disk_changed(now)
            if now >= self._handover_due_ms:
                self._handover_due_ms = now + self.config.disk_check_ms
                self._hand_over_leaderships(now)
            if self._fenced:
                self._reopen_fenced(now)
            if now >= self._retention_due_ms:
                self._retention_due_ms = now + self.config.retention_check_ms
                self._apply_retention(now)
            if now >= self._committed_due_ms:
                self._committed_due_ms = now + self.config.committed_save_ms
                self._save_committed()
            self._scrubber.tick(now)

    def _next_due_ms(self) -> int:
        """When the tick loop next has something to do."""
        due = min(
            self._retention_due_ms,
            self._committed_due_ms,
            self._liveness.keepalive_due_ms,
            self._disk.due_ms,
            self._handover_due_ms,
        )
        if self._wakes:
            due = min(due, self._wakes[0][0])
        full = self._disk.full
        for fenced in self._fenced.values():
            if not (fenced.no_space and full):  # those wait for a disk check
                due = min(due, fenced.retry_at_ms)
        return due

    def _tick_due(self, now: int) -> None:
        """Tick the replicas whose wake-up time has come (popped from the heap)."""
        wakes = self._wakes
        while wakes and wakes[0][0] <= now:
            wake_ms, _, key = heapq.heappop(wakes)
            replica = self._replicas.get(key)
            if replica is None or replica.wake_ms != wake_ms:
                continue  # gone, or a stale entry (an earlier one was pushed since)
            replica.wake_ms = _NO_WAKE
            if replica.core.next_wake_ms() <= now:
                self._input(replica, partial(replica.core.tick, now))
                if replica.busy:  # queued: scheduled again once it is applied
                    continue
            self._schedule(replica)

    # ------------------------------------------------------------------ committed files

    def _committed_changes(self) -> list[tuple[str, int]]:
        """``(directory, high watermark)`` of the replicas whose watermark moved past
        their ``committed`` file's value; notes the new values as written."""
        changes: list[tuple[str, int]] = []
        moved, self._watermark_moved = self._watermark_moved, set()
        for key in moved:
            replica = self._replicas.get(key)
            if replica is None:
                continue
            saved = replica.committed_saved
            if saved is None or replica.closed:
                continue
            high_watermark = replica.core.high_watermark
            if high_watermark > saved:
                replica.committed_saved = high_watermark
                changes.append((replica.directory, high_watermark))
        return changes

    def _save_committed(self) -> None:
        """Write the moved high watermarks in one job on the thread pool (a few
        thousand files take tens of ms: not on the loop). Skipped while the previous
        job runs: the next period takes its replicas too."""
        if self._committed_saving is not None and not self._committed_saving.done():
            return
        changes = self._committed_changes()
        if changes:
            loop = asyncio.get_running_loop()
            self._committed_saving = loop.run_in_executor(
                self._files_pool, _write_committed_files, changes
            )

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
        """Fsync the logs of ``replicas`` in parallel in the thread pool; from
        :data:`SYNCFS_BATCH_MIN` segment logs on, one ``syncfs`` for all of them."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        logs = [replica.log for replica in replicas]
        segment_logs = [log for log in logs if isinstance(log, SegmentLog)]
        if len(segment_logs) == len(logs) and len(logs) >= SYNCFS_BATCH_MIN:
            results = await loop.run_in_executor(
                self._pool, _sync_together, self._data_dir, segment_logs
            )
        else:
            results = await asyncio.gather(
                *(loop.run_in_executor(self._pool, log.sync) for log in logs),
                return_exceptions=True,
            )
        self._note_fsync_time(started)
        return list(results)

    def _note_fsync_time(self, started: float) -> None:
        elapsed_s = time.perf_counter() - started
        self.fsync_seconds.observe(elapsed_s)
        elapsed_ms = elapsed_s * 1000
        self._fsync_recent_ms += (elapsed_ms - self._fsync_recent_ms) / 4

    def _send_all(self, coalescer: Coalescer) -> None:
        sent = self._liveness.sent
        now = self._now()
        for destination, bundle in coalescer.drain().items():
            self.counters["bundles_sent"] += 1
            sent[destination] = now
            self._send(destination, bundle)

    def _send_keepalives(self, now: int) -> None:
        """An empty bundle to every live peer this node exchanges with and sent
        nothing to for a keepalive interval: node-level liveness (see
        :class:`_HostLiveness`) must not depend on some group being busy. A few
        frames a second per peer, however many groups are quiesced."""
        liveness = self._liveness
        interval = liveness.keepalive_ms
        liveness.keepalive_due_ms = now + interval
        for peer in set(liveness.heard) | set(liveness.sent):
            if now - liveness.sent.get(peer, _NEVER_MS) >= interval and liveness.peer_alive(peer):
                liveness.sent[peer] = now
                self.counters["keepalives_sent"] += 1
                self._send(peer, _KEEPALIVE)

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
            if self._has_ready(replica):
                try:  # a leader reads its log for the appends it sends
                    ready = replica.core.ready()
                except (OSError, StorageError) as error:
                    self._read_failed(replica, error, "replication read")
                    continue
                replica.busy = True
                readies.append((replica, ready))
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
        """A failed fsync fences its replica (nothing of the round is acknowledged);
        what succeeded becomes durable when the round's ``advance`` runs."""
        self.counters["fsyncs"] += len(syncs)
        for replica, result in zip(syncs, results, strict=True):
            if isinstance(result, BaseException):
                self._fence(replica, result)

    def _finish_round(self, readies: list[tuple[Replica, Ready]]) -> None:
        """The durable part of a round: messages, replies, events, then ``advance``."""
        coalescer = Coalescer()
        removed: list[Replica] = []
        for replica, _ in readies:
            if replica.closed:  # fenced (or deleted) during the round: nothing of it goes
                readies = [(r, ready) for r, ready in readies if not r.closed]
                break
        for replica, ready in readies:
            coalescer.add_all(replica.key, ready.messages)
            for reply in ready.replies:
                future = replica.calls.get(reply.request_id)
                if future is not None and not future.done():
                    future.set_result(reply)
            if ready.high_watermark > ready.committed_from:
                self._watermark_moved.add(replica.key)
                for waiter in replica.watermark_waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                replica.watermark_waiters.clear()
                if self._on_committed is not None:
                    self._on_committed(replica.key, ready.committed_from, ready.high_watermark)
            for event in ready.events:
                self._event_log.note(replica.key, event, self._now())
                if isinstance(event, RoleChanged):
                    self._count_role_change(replica.key, event)
                if (
                    replica.leader_waiters
                    and isinstance(event, RoleChanged)
                    and not self._leader_unusable(replica)
                ):
                    for waiter in replica.leader_waiters:
                        _resolve(waiter)
                if isinstance(event, Removed):
                    removed.append(replica)
        self._send_all(coalescer)
        for replica, ready in readies:
            try:
                replica.core.advance(ready)
            except (OSError, StorageError) as error:
                self._fence(replica, error)
            replica.busy = False
            if replica.traces:
                replica.traces = [trace for trace in replica.traces if not trace.round_done()]
            while replica.queued and not replica.closed:
                self._apply(replica, replica.queued.popleft())
            if replica.closed:
                continue
            self._schedule(replica)
            # advance() (a commit) or the queued inputs may have made more work.
            if self._has_ready(replica):
                self._dirty[replica.key] = replica
        for replica in removed:
            if self._on_removed is not None:
                self._on_removed(replica.key)


class _CommittedAboveError(Exception):
    """The committed file records more than the log holds."""

    def __init__(self, path: str, committed: int) -> None:
        super().__init__(path)
        self.path = path
        self.committed = committed


def _load_committed(directory: str, log_end: int) -> int:
    """The value of ``directory``'s committed file, for a log ending at ``log_end``;
    -1 when there is none (so that the first save writes even a watermark of 0).

    Raises :class:`_CommittedAboveError` when the file records more than the log holds
    (the replica lost entries it acknowledged: a crash that lost unsynced appends,
    or damage), and :class:`CommittedFileError` for a damaged file. A file that
    cannot be read counts as absent; the next save replaces it.
    """
    try:
        saved = read_committed(directory)
    except OSError as error:
        _LOG.warning("ignoring committed file dir=%s error=%s", directory, error)
        return -1
    if saved is None:
        return -1
    if saved > log_end:
        raise _CommittedAboveError(committed_path(directory), saved)
    return saved


def _write_committed_files(changes: list[tuple[str, int]]) -> None:
    """Write each ``(directory, offset)``'s committed file; a failure is logged and
    costs only freshness (a deleted replica's directory is gone, a disk fails)."""
    for directory, offset in changes:
        try:
            write_committed(directory, offset)
        except OSError as error:
            _LOG.debug("committed file not written dir=%s error=%s", directory, error)


class _EventLog:
    """Logs the replicas' events (role and configuration changes, removals)
    readably at any scale: each one at INFO while there are few, and beyond
    ``lines_max`` in an interval of ``interval_ms`` one summary line per interval
    (how many of each kind, and of how many partitions) with the rest at DEBUG. A
    node failure changes the roles of thousands of groups at once; one line each
    buried everything else in the log."""

    def __init__(self, interval_ms: int = 1_000, lines_max: int = 20) -> None:
        self._interval_ms = interval_ms
        self._lines_max = lines_max
        self._started_ms = 0
        self._shown = 0
        self._hidden: dict[str, int] = {}
        self._hidden_keys: set[PartitionKey] = set()

    def note(self, key: PartitionKey, event: object, now_ms: int) -> None:
        if now_ms - self._started_ms >= self._interval_ms:
            self.flush(now_ms)
        if self._shown < self._lines_max:
            self._shown += 1
            _LOG.info("replica %s/%d: %s", *key, event, extra=_event_fields(key, event))
            return
        _LOG.debug("replica %s/%d: %s", *key, event, extra=_event_fields(key, event))
        kind = _event_kind(event)
        self._hidden[kind] = self._hidden.get(kind, 0) + 1
        self._hidden_keys.add(key)

    def note_time(self, now_ms: int) -> None:
        """(Every tick.) End the interval when its time is up."""
        if self._hidden and now_ms - self._started_ms >= self._interval_ms:
            self.flush(now_ms)

    def flush(self, now_ms: int) -> None:
        """Summarise the interval that ends (if anything was left unshown)."""
        if self._hidden:
            total = sum(self._hidden.values())
            kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self._hidden.items()))
            _LOG.info(
                "replica events: %d more in %d partitions in the last %.1f s (%s); "
                "one line each at DEBUG",
                total,
                len(self._hidden_keys),
                (now_ms - self._started_ms) / 1000,
                kinds,
            )
        self._started_ms = now_ms
        self._shown = 0
        self._hidden = {}
        self._hidden_keys = set()


def _event_fields(key: PartitionKey, event: object) -> dict[str, object]:
    """A replica event's log fields: the partition, the term of a role change or a
    removal, and the leader a role change names (``peer``)."""
    if isinstance(event, RoleChanged):
        return fields(key, term=event.term, peer=event.leader)
    if isinstance(event, Removed):
        return fields(key, term=event.term)
    return fields(key)


def _event_kind(event: object) -> str:
    if isinstance(event, RoleChanged):
        return f"became {event.role.value}"
    if isinstance(event, ConfigChanged):
        return "configuration changed"
    return type(event).__name__


class _HostLiveness(NodeLiveness):
    """The node-level liveness every core of the host shares (see
    :class:`~laminar.replica.core.NodeLiveness`): frames from each peer, the event
    loop's lag, and membership."""

    def __init__(
        self,
        host: ReplicaHost,
        peer_alive: Callable[[str], bool],
        peer_dead: Callable[[str], bool],
    ) -> None:
        self.heard: dict[NodeId, int] = {}
        self.sent: dict[NodeId, int] = {}
        # An idle peer link carries an empty bundle this often, so that a peer hears
        # the node well within the shortest election timeout.
        self.keepalive_ms = max(1, host._config.election_timeout_min_ms // 4)
        self.keepalive_due_ms = 0  # the next pass of _send_keepalives
        self._peer_alive = peer_alive
        self._peer_dead = peer_dead
        # A lag this long makes the node's timers untrustworthy: a quarter of the
        # shortest election timeout.
        self.lag = LoopLag(host._config.election_timeout_min_ms / 4)
        self._clock = host.now_ms
        self._disk = host._disk
        self._host = host
        self.recovery = TokenBucket(host.config.recovery_bytes_per_s, RECOVERY_BURST_S)

    def note_lag(self, lag_ms: int, now_ms: int) -> None:
        self.lag.note(lag_ms, now_ms)

    def peer_heard_ms(self, peer: NodeId) -> int:
        return self.heard.get(peer, _NEVER_MS)

    def slowness(self) -> float:
        return self.lag.slowness(self._clock())

    def peer_alive(self, peer: NodeId) -> bool:
        return self._peer_alive(str(peer))

    def peer_dead(self, peer: NodeId) -> bool:
        return self._peer_dead(str(peer))

    def may_lead(self) -> bool:
        return not self._disk.full and not self._host.in_maintenance

    def recovery_grant(self) -> int:
        return self.recovery.available(time.monotonic())

    def recovery_spend(self, count: int) -> None:
        self.recovery.spend(count)


RECOVERY_BURST_S = 0.25
"""The recovery budget a node may spend at once: a quarter second of its rate, more
than a leader's heartbeat interval (when a leader out of budget sends on)."""


class TokenBucket:
    """Bytes per second with a burst of ``burst_s`` of them; ``rate`` 0: no limit.
    :meth:`spend` may take more than is available (a batch larger than the
    grant): the debt delays the next grants."""

    def __init__(self, rate: int, burst_s: float) -> None:
        self.rate = rate
        self.capacity = rate * burst_s
        self._tokens = self.capacity
        self._at = time.monotonic()

    def available(self, now: float) -> int:
        if self.rate == 0:
            return 1 << 62
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return max(0, int(self._tokens))

    def spend(self, count: int) -> None:
        if self.rate:
            self._tokens -= count


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
