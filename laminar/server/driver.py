"""The replica driver: every decision of a node's replica host, synchronous.

:class:`ReplicaDriver` holds what :class:`~laminar.server.host.ReplicaHost` used to
decide on the event loop (issue 33): which replicas are open, fenced, damaged or
being created; the flush rounds that carry out the cores' ``Ready`` contract; the
per-replica input queue; the wake-up heap and the periodic pass (keepalives, the
disk check, hand-overs, reopening fenced replicas, retention); the node-level
liveness every core shares; admission of produce calls; keyed compaction (the
leader's decision on the retention tick, every replica's application of the
agreed commands: :mod:`laminar.replica.compaction_control`,
:mod:`laminar.server.compactor`). It does no I/O of its own beyond what its
injected parts do (a compaction job runs on the shell's ``run_job``), and it never
waits:

* a clock (``clock``: ms, monotonic) and a wall clock (``wall_clock_ms``, record
  timestamps for retention), and a seeded ``rng``;
* a log factory (:data:`LogFactory`): the segment log on a node, the simulators'
  :class:`~laminar.segment.memory.MemoryLog`;
* a :class:`DriverShell`: the shell that runs it, which sends bundles to peers
  (the packet transport), runs the flush rounds it asks for, wakes its tick loop
  early, and answers the callers waiting on a replica (produce calls, fetches);
* a :class:`HostOwner`: what the node around the host tells it and is told
  (placement's say on new replicas, membership, retention, commits, removals,
  the disk turning full).

The asyncio shell (:class:`~laminar.server.host.ReplicaHost`) and both simulators
(:mod:`laminar.testing.replica_sim`, :mod:`laminar.testing.scale_sim`) drive the
same driver, so a seed that fails in a simulator replays the production code
path: only the timing of the fsyncs and of the tick loop is the shell's.

A flush round::

    begin_round()     take a Ready from every dirty replica (it is now "busy"),
                      send the leaders' early messages; the Round lists the logs
                      to sync and whether one alone may sync inline
    (the shell syncs: inline, on a thread pool, or in simulated time)
    complete(round, results, elapsed_s)
                      a failed sync fences its replica; then messages, replies,
                      events; advance() each core; apply the inputs queued while
                      it was busy

An input (a peer message, a produce, a tick) that reaches a busy replica waits in
its queue (``HostConfig.queued_inputs_max``; peer messages beyond it are dropped)
until the ``advance``: no input lands between a core's ``ready()`` and
``advance()``. The module docstring of :mod:`laminar.server.host` describes storage
failures (fencing), the full disk, maintenance and damaged storage, which this
module decides.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import random
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Generic, Protocol, TypeVar

from laminar.errors import (
    ConfigError,
    CorruptBatchError,
    CorruptSegmentError,
    CorruptStateError,
    StorageError,
    StorageFullError,
    UnavailableError,
    UnknownTopicOrPartitionError,
    ZstdVersionError,
)
from laminar.ids import TopicPartition
from laminar.logfields import fields, partition_name
from laminar.records import libzstd_version
from laminar.replica.coalesce import Coalescer, PeerBundle
from laminar.replica.compaction_control import CompactionRule, compaction_point, prune_history
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import LoopLag, NodeLiveness, ReplicaCore, StorageDamage
from laminar.replica.messages import (
    Compact,
    ConfigChanged,
    Outbound,
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
from laminar.segment.compaction import CompactCommand
from laminar.segment.config import FsyncPolicy, LogConfig
from laminar.segment.files import SEGMENT_FILES_DEFAULT, SegmentFiles
from laminar.segment.layout import partition_directory, replica_directories
from laminar.segment.log import SegmentLog, has_state
from laminar.segment.quarantine import DamageNote, set_aside
from laminar.segment.storage import LogStorage
from laminar.server import rules
from laminar.server.compactor import (
    CompactionCancelledError,
    DirtyScan,
    Pacer,
    log_view,
    run_command,
    segments_below,
)
from laminar.server.disk import (
    DiskStatus,
    DiskUsage,
    DiskWatch,
    check_thresholds,
    is_no_space,
    write_refusal,
)
from laminar.server.observability.histogram import FSYNC_BUCKETS_S, Histogram
from laminar.server.observability.history import LeadershipLog

_LOG = logging.getLogger("laminar.server.host")  # the host's lines, as before the split

INLINE_FSYNC_MS_MAX = 2.0
"""A lone fsync runs on the event loop while recent fsync rounds averaged below this."""

PartitionKey = TopicPartition
Retention = tuple[int | None, int | None]
"""A partition's retention: ``(bytes, ms)`` kept per replica, None for no limit."""
JobDone = Callable[[int | BaseException], None]
JobRunner = Callable[[Callable[[], int], JobDone], None]
"""Runs a keyed compaction job (it returns the bytes it kept, or raises) and then
calls ``done`` with the outcome *on the driver's thread*: the host's compaction
thread and ``call_soon_threadsafe``; inline in the simulators and unit tests."""
LogFactory = Callable[[str, LogConfig], LogStorage]
"""Opens (or creates) the log of one replica in a directory: ``SegmentLog.open`` on a
node, a memory log in tests and simulators."""


COMPACTION_MEMORY_BYTES_MIN = 1 << 20


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
    ``compaction_bytes_per_s_max``: keyed compaction (topics whose
    ``cleanup_policy`` has ``compact``) reads its input at most this fast, all
    passes counted, on its own thread (one per node), so that it leaves the disk
    and CPU to the partitions' writes; 0: no limit. Every replica compacts the
    range its leader's command names (agreed through the log), so a slow node
    only applies it later.
    ``compaction_memory_bytes_max``: the most memory one keyed compaction's key map
    may take (at least 1 MiB). A range whose keys do not fit is compacted in
    several passes over it (each pass keeps the keys of one hash bucket), with the
    same result.
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
    compaction_bytes_per_s_max: int = 64 << 20
    compaction_memory_bytes_max: int = 64 << 20

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
        if self.compaction_bytes_per_s_max < 0:
            raise ConfigError("compaction_bytes_per_s_max must be >= 0")
        if self.compaction_memory_bytes_max < COMPACTION_MEMORY_BYTES_MIN:
            raise ConfigError(
                f"compaction_memory_bytes_max must be >= {COMPACTION_MEMORY_BYTES_MIN} (1 MiB)"
            )


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
class PartitionOffsets:
    """One replica's readable range ``[log_start_offset, high_watermark)`` and, when a
    time was asked, the first committed offset at or after it (None: none is)."""

    log_start_offset: int
    high_watermark: int
    offset_for_timestamp: int | None


NO_WAKE_MS = 2**62
"""A time that never comes (no wake-up wanted)."""
_NEVER_MS = -(2**62)
KEEPALIVE = PeerBundle((), ())
"""An empty bundle: tells the peer this node is alive and its loop turns."""


@dataclass(slots=True)
class Replica:
    """One partition replica on this node, as the driver tracks it. A shell that
    keeps more per replica (the host: its waiting callers) subclasses it."""

    key: PartitionKey
    directory: str
    log: LogStorage
    core: ReplicaCore
    busy: bool = False
    """Between its core's ``ready()`` and ``advance()`` (a flush round under way)."""
    queued: deque[Callable[[], object]] = field(default_factory=deque)
    """Inputs that arrived while busy, applied after the ``advance``."""
    closed: bool = False
    wake_ms: int = NO_WAKE_MS
    """When the wake-up heap next ticks this replica (see ``_schedule``)."""
    committed_saved: int | None = None
    """The offset in the replica's ``committed`` file (as last written or read), or
    None when its log is not a :class:`SegmentLog` (no file is kept then)."""
    compact_queued: Compact | None = None
    """The newest committed keyed compaction command not run yet (a newer one
    supersedes it: the engine is confluent)."""
    compacting: bool = False
    """A keyed compaction job runs on this replica's log."""
    clean_bytes: int = 0
    """The bytes below the last command's end after it ran here (0: unknown), for
    the leader's dirty ratio."""
    dirty_scan: DirtyScan | None = None
    """What the leader's decision has read of the dirty range so far."""

    def calls_waiting(self) -> int:
        """Produce calls waiting for their answer on this replica (admission)."""
        return 0


R = TypeVar("R", bound=Replica)
R_contra = TypeVar("R_contra", bound=Replica, contravariant=True)
ReplicaFactory = Callable[[PartitionKey, str, LogStorage, ReplicaCore], R]
"""Makes the shell's record of a replica being opened (``Replica`` or a subclass)."""


SYNCFS_BATCH_MIN = 4
"""A flush round syncing at least this many logs makes them durable with one
``syncfs`` of the data directory's filesystem instead of an fsync (or three, with a
state change) per log: when thousands of groups change configuration or elect at
once, per-log fsyncs queued on the pool for seconds and every round's messages
waited for them."""


@dataclass(frozen=True, slots=True)
class Round(Generic[R]):
    """A flush round under way: the Readies taken, and the replicas whose logs the
    shell must sync before :meth:`ReplicaDriver.complete` (empty: none)."""

    readies: list[tuple[R, Ready]]
    syncs: list[R]
    inline: bool
    """One log to sync and recent syncs were fast: sync it on the loop itself
    (handing it to a thread and back costs two thread wake-ups, ≈0.2 ms here,
    more than a fast fsync blocks the loop); else on the thread pool, so that a
    stalled disk blocks its partitions, not the node."""


class TopicSettings(Protocol):
    """What the driver reads of a topic's cleanup settings
    (:class:`laminar.server.placement_keeper.TopicSettings`; a protocol here, so
    that the driver imports nothing of the node's)."""

    @property
    def compact(self) -> bool: ...
    @property
    def delete_retention_ms(self) -> int: ...
    @property
    def min_compaction_lag_ms(self) -> int: ...
    @property
    def max_compaction_lag_ms(self) -> int: ...
    @property
    def min_cleanable_dirty_ratio(self) -> float: ...


class HostOwner(Protocol):
    """What the node around the host tells it and is told: one small interface
    instead of a callback each (issue 33, point 3)."""

    def accept_replica(self, key: PartitionKey) -> bool:
        """Whether a leader may add a replica of ``key`` here (placement's say)."""
        ...

    def replica_committed(
        self, key: PartitionKey, committed_from: int, high_watermark: int
    ) -> None:
        """``key``'s high watermark moved from ``committed_from`` to ``high_watermark``."""
        ...

    def replica_removed(self, key: PartitionKey) -> None:
        """``key``'s group removed this node's replica."""
        ...

    def retention_of(self, key: PartitionKey) -> Retention:
        """``key``'s topic retention ``(bytes, ms)``; None for no limit."""
        ...

    def settings_of(self, key: PartitionKey) -> TopicSettings | None:
        """``key``'s topic cleanup settings (retention and keyed compaction); None for
        a partition no topic has (internal logs)."""
        ...

    def peer_alive(self, node_id: str) -> bool:
        """Membership says ``node_id`` is alive."""
        ...

    def peer_dead(self, node_id: str) -> bool:
        """Membership declared ``node_id`` dead."""
        ...

    def disk_full_changed(self, full: bool) -> None:
        """This node turned full (True) or has space again (False): gossip it."""
        ...


class Standalone:
    """The :class:`HostOwner` of a host with no node around it (tests, tools): it
    takes every replica, keeps everything, knows of no peer's liveness, and
    listens to nothing. Subclass it to answer differently."""

    def accept_replica(self, key: PartitionKey) -> bool:
        return True

    def replica_committed(
        self, key: PartitionKey, committed_from: int, high_watermark: int
    ) -> None:
        pass

    def replica_removed(self, key: PartitionKey) -> None:
        pass

    def retention_of(self, key: PartitionKey) -> Retention:
        return None, None

    def settings_of(self, key: PartitionKey) -> TopicSettings | None:
        return None

    def peer_alive(self, node_id: str) -> bool:
        return False

    def peer_dead(self, node_id: str) -> bool:
        return False

    def disk_full_changed(self, full: bool) -> None:
        pass


class DriverShell(Protocol[R_contra]):
    """What the driver asks of the shell that runs it."""

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        """The packet transport: one coalesced bundle to ``peer``."""
        ...

    def flush_wanted(self) -> None:
        """A replica has work: run :meth:`ReplicaDriver.begin_round` soon (the host
        once per pass of its event loop, so that the inputs of one pass share a
        round and its fsyncs)."""
        ...

    def wake_early(self) -> None:
        """Something is due before the tick loop's current sleep ends: end it."""
        ...

    def carried_out(self, replica: R_contra, ready: Ready, leader_found: bool) -> None:
        """``ready`` of ``replica`` is being carried out (its sync, if any, done):
        answer the produce calls its replies name, wake the fetches when its high
        watermark moved; ``leader_found``: a role changed and the group has a
        usable leader now (callers waiting for an election may go on)."""
        ...

    def replica_closed(self, replica: R_contra, error: Exception | None) -> None:
        """``replica`` was closed; fail its waiting produce calls with ``error``
        (None: leave them to their timeout) and wake its waiting fetches."""
        ...


class ReplicaDriver(Generic[R]):
    """Every replica of one node, and every decision about them (module docstring)."""

    def __init__(
        self,
        node_id: str,
        data_dir: str,
        config: ReplicaConfig,
        log_config: LogConfig,
        *,
        owner: HostOwner,
        shell: DriverShell[R],
        make_replica: ReplicaFactory[R],
        clock: Callable[[], int],
        wall_clock_ms: Callable[[], int],
        disk_usage: Callable[[], DiskUsage],
        rng: random.Random,
        host_config: HostConfig,
        log_factory: LogFactory | None = None,
        fsync: bool = True,
        liveness: Callable[[ReplicaDriver[R], HostOwner], DriverLiveness] | None = None,
        run_job: JobRunner | None = None,
        compaction_pacer: Callable[[], Pacer] | None = None,
        prepare_compaction: Callable[[], None] | None = None,
    ) -> None:
        """``clock``: the monotonic clock of the cores and fencing times, in ms.
        ``log_factory``: None for segment logs in ``data_dir`` (a node), else the
        factory every replica's log comes from (no files: no committed file, no
        damage handling, no founding in batches). ``fsync``: False skips every sync
        (tests on tmpfs). ``liveness``: makes the node-level liveness the cores share
        (None: :class:`DriverLiveness`; the scale simulator's baseline withholds
        the node-level signals). ``run_job``: runs keyed compaction jobs (None: inline,
        at once); ``compaction_pacer``: a new job's pacer (None: unpaced);
        ``prepare_compaction``: called once, at the first retention tick that finds
        a replica of a compact topic here (the host imports the key map's pyarrow
        then, on its compaction thread, rather than at start or in the first job)."""
        self.node_id = NodeId(node_id)
        self.data_dir = data_dir
        self._config = config
        self.config = host_config
        self._owner = owner
        self._shell = shell
        self._make_replica = make_replica
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._rng = rng
        self._fsync = fsync
        self.disk = DiskWatch(
            free_bytes_min=host_config.disk_free_bytes_min,
            free_percent_min=host_config.disk_free_percent_min,
            check_interval_ms=host_config.disk_check_ms,
            usage=disk_usage,
        )
        self._full_peers: frozenset[NodeId] = frozenset()
        self._full_nodes: frozenset[NodeId] = frozenset()
        """Nodes out of disk space: the peers gossip says are full, and this one when
        it is. Empty on a healthy cluster, so a produce checks nothing more."""
        self._maintenance: frozenset[NodeId] = frozenset()
        """Nodes in maintenance (the cluster metadata says so): they may not lead."""
        self._handover_due_ms = NO_WAKE_MS  # while full or in maintenance: next hand-over
        self.segment_logs = log_factory is None
        self.segment_files = SegmentFiles(
            host_config.segment_files_max, may_reserve=self.disk.may_reserve
        )
        """The node's cache of sealed segments' descriptors, shared by its logs."""
        self._log_factory: LogFactory = (
            partial(SegmentLog.open, files=self.segment_files)
            if log_factory is None
            else log_factory
        )
        self._retention_due_ms = 0
        self._committed_due_ms = 0
        self._event_log = _EventLog()
        self._watermark_moved: set[PartitionKey] = set()
        """Replicas whose high watermark moved since the last committed-file pass
        (a pass looks at these only, not at every replica)."""
        # The core decides when to fsync (Ready.sync); the log itself never does.
        self.log_config = _without_fsync(log_config)
        self._internal_log_config = replace(
            self.log_config,
            segment_bytes_max=min(
                self.log_config.segment_bytes_max, host_config.internal_segment_bytes_max
            ),
        )
        self.replicas: dict[PartitionKey, R] = {}
        self.dirty: dict[PartitionKey, R] = {}
        self._wakes: list[tuple[int, int, PartitionKey]] = []
        """Heap of (wake time, sequence, key): the tick pass looks only at due
        replicas, so an idle (quiesced) replica costs nothing between its rare
        wake-ups, however many there are."""
        self._wake_sequence = 0
        self.tick_interval_ms = max(config.heartbeat_interval_ms // 2, 5)
        self.sleep_until_ms = NO_WAKE_MS
        """When the shell's tick loop's current sleep ends (the shell sets it)."""
        self._fsync_recent_ms = 0.0  # moving average of fsync rounds' duration
        self._targets: dict[PartitionKey, tuple[str, ...]] = {}
        self._fenced: dict[PartitionKey, FencedReplica] = {}
        self._damaged: dict[PartitionKey, DamagedReplica] = {}
        self._creating: set[PartitionKey] = set()
        self._run_job: JobRunner = run_job or _run_inline
        self._compaction_pacer = compaction_pacer or (lambda: Pacer(0))
        self._prepare_compaction = prepare_compaction
        self._compacting: set[PartitionKey] = set()
        """Replicas whose log a compaction job holds (it may outlive the replica's
        closing: no reopen, no new replica and no deletion of its files until it is
        done)."""
        self._after_job: dict[PartitionKey, Callable[[], None]] = {}
        """What waits for a replica's compaction job to end (a deletion, a reopen)."""
        self.liveness = (liveness or DriverLiveness)(self, owner)
        self.closing = False
        """The shell is closing: no replica opens or reopens any more."""
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
            "compactions_proposed": 0,
            "compactions_applied": 0,
            "compactions_refused": 0,
        }
        self.fsync_seconds = Histogram(FSYNC_BUCKETS_S)
        """How long each fsync round took (one fsync on the loop, several in parallel
        in the pool, or one ``syncfs``), for ``--metrics``."""
        self.leadership_log = LeadershipLog()
        """The newest leaders its replicas learnt of (the status page, ``NodeStatus``)."""

    def now_ms(self) -> int:
        return self._clock()

    # ------------------------------------------------------------------ replicas

    def get(self, key: PartitionKey) -> R | None:
        return self.replicas.get(key)

    def is_fenced(self, key: PartitionKey) -> bool:
        return key in self._fenced

    def fenced(self) -> list[FencedReplica]:
        """Replicas out of service after a storage failure, by key."""
        return [self._fenced[key] for key in sorted(self._fenced)]

    def damaged(self) -> list[DamagedReplica]:
        """Replicas healing from damaged storage, by key (those healed are dropped)."""
        found = []
        for key, replica in sorted(self.replicas.items()):
            if not replica.core.healing:
                self._damaged.pop(key, None)
                continue
            known = self._damaged.get(key)
            if known is None:  # found by an earlier start of the node
                known = self._damaged[key] = DamagedReplica(
                    key, "damaged storage found by an earlier start", self._clock(), None
                )
            found.append(known)
        return found

    def accept_data_loss(self, key: PartitionKey) -> bool:
        """The operator's decision for a partition whose replicas are too damaged to
        elect a leader: this node's replica stops healing and votes with what it
        holds (acknowledged records the new leader lacks are lost). True when it
        was healing."""
        replica = self.replicas.get(key)
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

    def open_existing(self) -> None:
        """Open every replica found in the data directory (a node's start)."""
        if self.disk.check(self._clock()):  # a node started on a full disk
            self._disk_changed(self._clock())
        for found in replica_directories(self.data_dir):
            if self.segment_logs and not has_state(found.directory):
                # A batch creation a crash interrupted before its sync: the
                # replica never acted; its founding is applied again later.
                _LOG.warning(
                    "removing replica %s/%d left half-created", found.topic, found.partition
                )
                shutil.rmtree(found.directory, ignore_errors=True)
                continue
            self.open_replica((found.topic, found.partition), None)

    def open_replica(
        self,
        key: PartitionKey,
        initial: GroupConfig | None,
        *,
        log: LogStorage | None = None,
        founding: bool = False,
        damage: StorageDamage | None = None,
    ) -> R:
        """Open (or create) the replica of ``key``; ``initial`` for founding replicas.

        ``log`` is an already opened log (a reopen after a storage failure, or one
        the shell created with its founding state: ``founding``). ``damage``: what
        a shell without segment logs found lost (a simulator's damaged disk); a
        segment log's is found here.
        """
        existing = self.replicas.get(key)
        if existing is not None:
            return existing
        topic, partition = key
        directory = partition_directory(self.data_dir, topic, partition)
        if log is None:
            log = self._open_log(key, directory)
        damage = damage or StorageDamage()
        committed = -1
        if isinstance(log, SegmentLog):
            committed, lost = self._load_committed(key, directory, log)
            damage = StorageDamage(lost_entries=lost or log.damage_found is not None)
        core = self._make_core(key, log, initial, founding, damage)
        replica = self._make_replica(key, directory, log, core)
        if isinstance(log, SegmentLog):
            replica.committed_saved = committed
            self._watermark_moved.add(key)  # the first pass writes it if it is missing
        self.replicas[key] = replica
        target = self._targets.get(key)
        if target is not None:
            core.set_target(tuple(NodeId(n) for n in target), self._clock())
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
        config = self.log_config_of(key)
        if not self.segment_logs:
            return self._log_factory(directory, config)

        def aside(error: CorruptSegmentError) -> None:
            self._set_aside_segment(key, error, [error.path], "log cut before this batch")

        return SegmentLog.open(directory, config, files=self.segment_files, set_aside=aside)

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
                    now_ms=self._clock(),
                    rng=random.Random(self._rng.random()),
                    initial=initial,
                    limits=self.log_config.limits,
                    founding=founding,
                    liveness=self.liveness,
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
                    key, note, set_aside(self.data_dir, *key, note, move=[error.path])
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
        self._note_damage(key, note, set_aside(self.data_dir, *key, note, excerpts=excerpts))

    def _note_damage(self, key: PartitionKey, note: DamageNote, directory: str | None) -> None:
        self.counters["damaged_replicas"] += 1
        where = f"{note.file} offset {note.offset}" if note.offset is not None else note.file
        reason = f"{note.reason} ({where}; {note.action})"
        self._damaged[key] = DamagedReplica(key, reason, self._clock(), directory)
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
            self._note_damage(key, note, set_aside(self.data_dir, *key, note, move=[note.file]))
            return -1, False
        self._note_damage(key, note, set_aside(self.data_dir, *key, note, move=[note.file]))
        return -1, True

    def log_config_of(self, key: PartitionKey) -> LogConfig:
        """The log config of ``key``'s replica (internal topics: smaller segments)."""
        return self._internal_log_config if key[0].startswith("__") else self.log_config

    def advance_start(self, key: PartitionKey, offset: int) -> None:
        """Ask ``key``'s core to drop its log below ``offset`` (a snapshot as of
        ``offset`` is applied: see :mod:`laminar.snapshots`), as retention does."""
        replica = self.replicas.get(key)
        if replica is not None and offset > replica.core.start_offset:
            self.input(replica, partial(replica.core.advance_start, offset, self._clock()))

    def creating(self, key: PartitionKey) -> bool:
        """Whether the shell is still creating ``key``'s founding replica."""
        return key in self._creating

    def reserve_founding(self, keys: Iterable[PartitionKey]) -> None:
        """Keys whose founding replicas the shell will create: until then, messages
        for them are ignored instead of opening a plain replica. (A leader founded
        elsewhere may replicate before this node's creation runs, behind earlier
        creations; a plain replica would lack the founding configuration, which is
        in the founding state and not in the log, and could never campaign.)"""
        self._creating.update(keys)

    def founding_done(self, keys: Iterable[PartitionKey]) -> None:
        """The shell is done creating ``keys`` (opened, skipped, or failed)."""
        self._creating.difference_update(keys)

    def delete_replica(self, key: PartitionKey) -> None:
        """Close the replica and delete its data (topic deleted, or moved away)."""
        replica = self.replicas.get(key)
        if replica is None:
            if self._fenced.pop(key, None) is not None:
                _remove_replica_directory(partition_directory(self.data_dir, *key))
            return
        self.close_replica(replica, None)
        if key in self._compacting:  # its job stops at its next step: delete then
            self._after_job[key] = partial(_remove_replica_directory, replica.directory)
        else:
            _remove_replica_directory(replica.directory)
        _LOG.info("replica deleted %s/%d", *key, extra=fields(key))

    def reopen_replica(self, key: PartitionKey) -> R | None:
        """Close the replica's core and open it again on the same log, data kept.

        For a replica its group removed while placement wants it back: a removed core
        ignores everything, while a fresh one rejoins when the leader adds it again,
        and catches up from where its log still matches the leader's.
        """
        replica = self.replicas.get(key)
        if replica is None:
            return None
        _LOG.info(
            "replica reopened %s/%d, log kept end=%d",
            *key,
            replica.log.end_offset,
            extra=fields(key),
        )
        self.close_replica(replica, UnavailableError(f"{key[0]}/{key[1]}: replica reopened"))
        if key in self._compacting:  # a second log on its files only once the job stops
            self._after_job[key] = partial(self._reopen_after_job, key)
            return None
        return self.open_replica(key, None)

    def _reopen_after_job(self, key: PartitionKey) -> None:
        if key not in self.replicas and not self.closing:
            self.open_replica(key, None)

    def close_replica(self, replica: R, error: Exception | None) -> None:
        """Take ``replica`` out (its callers failed with ``error``) and close its log."""
        replica.closed = True
        self.replicas.pop(replica.key, None)
        self.dirty.pop(replica.key, None)
        self._shell.replica_closed(replica, error)
        with contextlib.suppress(Exception):
            replica.log.close()

    def close_all(self) -> None:
        """(The shell is closing.) Close every replica, its callers failed."""
        self.closing = True
        for replica in list(self.replicas.values()):
            self.close_replica(replica, UnavailableError("node shutting down"))

    # ------------------------------------------------------------------ inputs

    def input(self, replica: R, action: Callable[[], object], *, droppable: bool = False) -> None:
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
                self.fence(replica, error)
                return
            self._mark(replica)

    def _apply(self, replica: R, action: Callable[[], object]) -> None:
        """Run an input on the core; a storage failure fences the replica."""
        try:
            action()
        except (OSError, StorageError) as error:
            self.fence(replica, error)

    def _schedule(self, replica: R) -> None:
        """Make sure the heap holds the replica's next wake-up (after any input).

        Only an earlier wake-up is pushed; a later one is found when the earlier
        entry comes due and the core says it is not due yet (lazy deletion).
        """
        wake_ms = replica.core.next_wake_ms()
        if wake_ms < replica.wake_ms:
            replica.wake_ms = wake_ms
            self._wake_sequence += 1
            heapq.heappush(self._wakes, (wake_ms, self._wake_sequence, replica.key))
            if wake_ms < self.sleep_until_ms - self.tick_interval_ms:
                self._shell.wake_early()

    def _mark(self, replica: R) -> None:
        self._schedule(replica)
        self.dirty[replica.key] = replica
        self._shell.flush_wanted()

    def on_bundle(self, source: str, bundle: PeerBundle) -> None:
        """Peer messages arrived (from the transport)."""
        now = self._clock()
        self.liveness.heard[NodeId(source)] = now
        for item, message in bundle.items():
            key = _partition_key(item)
            replica = self.replicas.get(key)
            if replica is None:
                if (
                    self.closing
                    or key in self._fenced
                    or key in self._creating
                    or key in self._compacting  # the old log's job has not stopped yet
                    or self.disk.full  # takes no new replicas
                    or not self._owner.accept_replica(key)
                ):
                    continue
                # A leader added us to the group: learn everything from its log.
                replica = self.open_replica(key, None)
            self.input(
                replica, partial(replica.core.step, NodeId(source), message, now), droppable=True
            )

    def set_target(self, key: PartitionKey, target: tuple[str, ...]) -> None:
        """Placement's replica list for ``key`` (the leader reconfigures towards it)."""
        if self._targets.get(key) == target:
            return
        self._targets[key] = target
        replica = self.replicas.get(key)
        if replica is not None:
            nodes = tuple(NodeId(n) for n in target)
            now = self._clock()
            core = replica.core
            self.input(replica, lambda: core.set_target(nodes, now))

    def peer_returned(self, node_id: str) -> None:
        """Membership says ``node_id`` is alive again: wake the quiesced groups
        this node leads that count it as a peer (see ``ReplicaCore.peer_returned``)."""
        now = self._clock()
        peer = NodeId(node_id)
        for replica in list(self.replicas.values()):
            core = replica.core
            if core.role is Role.LEADER and core.quiesced:
                self.input(replica, partial(core.peer_returned, peer, now))

    def hint_leader_dead(self, node_id: str) -> None:
        now = self._clock()
        for replica in list(self.replicas.values()):
            core = replica.core
            if core.led_by(node_id):
                self.input(replica, partial(core.hint_leader_dead, now))

    def transfer_leadership(self, key: PartitionKey, target: NodeId) -> None:
        """Ask the replica of ``key``, if it leads, to hand leadership to ``target``."""
        replica = self.replicas.get(key)
        if replica is not None and replica.core.role is Role.LEADER:
            now = self._clock()
            self.input(replica, partial(replica.core.transfer_leadership, target, now))

    def propose(self, replica: R, request_id: int, batch: bytes, acks: Acks) -> None:
        """One produce call's batch, proposed on ``replica`` (admitted)."""
        now = self._clock()
        core = replica.core
        self.input(replica, lambda: core.propose(request_id, batch, acks, now))

    def propose_batches(
        self, replica: R, request_ids: range, batches: Sequence[bytes], acks: Acks
    ) -> None:
        """One request's batches, all or none, proposed on ``replica`` (admitted)."""
        now = self._clock()
        core = replica.core
        self.input(replica, lambda: core.propose_batches(request_ids, batches, acks, now))

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
            self.leadership_log.note(self._clock(), key[0], key[1], str(event.leader), event.term)

    def leader_usable(self, key: PartitionKey) -> bool:
        """Whether the group of this node's replica of ``key`` has a leader a client
        could be sent to (this node leading counts), as far as this node knows."""
        replica = self.replicas.get(key)
        if replica is None or replica.closed or replica.core.removed:
            return False
        return replica.core.leader is not None and not self.leader_unusable(replica)

    def leads(self, key: PartitionKey) -> bool:
        replica = self.replicas.get(key)
        return replica is not None and replica.core.role is Role.LEADER

    def admit(self, key: PartitionKey, calls: int) -> R:
        """The serving replica of ``key``, if it has room for ``calls`` more produce
        calls (``produce_calls_max``); else the error to answer."""
        replica = self.serving(key)
        if self._full_nodes:
            self._refuse_without_space(replica)
        waiting = replica.calls_waiting()
        if waiting + calls > self.config.produce_calls_max:
            self.counters["produce_refused"] += 1
            raise UnavailableError(
                f"{waiting} produce calls already wait on {key[0]}/{key[1]}; retry later"
            )
        return replica

    def leader_unusable(self, replica: R) -> bool:
        """The group has no leader a client could be sent to: none known, or one on
        a node membership declared dead or this node has not heard from for the
        minimum election timeout (keepalives come four times as often): an
        election is due or under way (the shell waits for its outcome)."""
        core = replica.core
        leader = core.leader
        if replica.closed or core.removed or leader == self.node_id:
            return False  # a removed replica has no election to wait for
        if leader is None or self.liveness.peer_dead(leader):
            return True
        silence = self._clock() - self.liveness.peer_heard_ms(leader)
        return silence > self._config.election_timeout_min_ms

    def waiting_for_leader_ms(self, timeout_ms: float) -> float:
        """How long a produce call refused during an election waits for its outcome:
        three quarters of its ``timeout_ms``, at most four maximum election timeouts."""
        return min(0.75 * timeout_ms, 4.0 * self._config.election_timeout_max_ms)

    def list_offsets(self, key: PartitionKey, timestamp_ms: int | None) -> PartitionOffsets:
        """See :meth:`laminar.server.host.ReplicaHost.list_offsets`."""
        replica = self.serving(key)
        core = replica.core
        high_watermark = core.high_watermark
        found = None
        if timestamp_ms is not None and core.start_offset < high_watermark:
            try:
                offset = replica.log.offset_for_timestamp(timestamp_ms)
            except (OSError, CorruptSegmentError) as error:
                self.read_failed(replica, error, "timestamp lookup")
                self.serving(key)  # raises, as for a fetch
                raise
            if offset is not None and offset < high_watermark:
                assert offset >= core.start_offset, (offset, core.start_offset)
                found = offset
        return PartitionOffsets(core.start_offset, high_watermark, found)

    def serving(self, key: PartitionKey) -> R:
        """The open replica of ``key``, or the error that explains why there is none."""
        replica = self.replicas.get(key)
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
        wall_ms = self._wall_clock_ms()  # record timestamps are wall-clock
        for replica in list(self.replicas.values()):
            retention_bytes, retention_ms = self._owner.retention_of(replica.key)
            if (retention_bytes is None and retention_ms is None) or replica.compacting:
                continue  # (a compaction job rewrites segments retention would delete)
            try:
                offset = replica.log.retention_offset(wall_ms, retention_bytes, retention_ms)
            except (OSError, StorageError) as error:
                self.fence(replica, error)
                continue
            if offset > replica.core.start_offset:
                self.input(replica, partial(replica.core.advance_start, offset, now))

    # ------------------------------------------------------------------ keyed compaction

    def _check_compaction(self, now: int) -> None:
        """The retention tick's keyed compaction pass: each replica of a compact
        topic prunes the commands its decisions no longer need; a leader decides
        whether to propose the next one (:func:`compaction_point`); a queued
        command that had to wait starts."""
        wall_ms = self._wall_clock_ms()
        for replica in list(self.replicas.values()):
            if replica.compact_queued is not None and not replica.compacting:
                self._start_compaction(replica)
            settings = self._owner.settings_of(replica.key)
            if settings is None or not settings.compact or replica.closed:
                continue
            if self._prepare_compaction is not None:
                prepare, self._prepare_compaction = self._prepare_compaction, None
                prepare()
            try:
                self._maybe_propose_compaction(replica, settings, now, wall_ms)
            except (OSError, StorageError) as error:
                self.read_failed(replica, error, "keyed compaction check")

    def _history(self, replica: R, settings: TopicSettings, wall_ms: int) -> list[tuple[int, int]]:
        """``(end, time_ms)`` of the commands in the replica's log that its next
        decision's T may come from; the others are pruned from its core."""
        decoded: list[tuple[int, int, int]] = []
        for offset, value in replica.core.compact_commands:
            try:
                command = CompactCommand.from_value(value)
            except CorruptBatchError:
                continue  # (given to the driver and refused there: see _start_compaction)
            decoded.append((offset, command.end, command.time_ms))
        kept = prune_history([(end, time_ms) for _, end, time_ms in decoded], wall_ms,
                             settings.delete_retention_ms)  # fmt: skip
        if len(kept) < len(decoded):
            first_kept = decoded[len(decoded) - len(kept)][0]
            replica.core.prune_compact_commands(first_kept)
        return kept

    def _maybe_propose_compaction(
        self, replica: R, settings: TopicSettings, now: int, wall_ms: int
    ) -> None:
        core = replica.core
        history = self._history(replica, settings, wall_ms)
        if core.role is not Role.LEADER or not core.term_committed:
            return
        commands = core.compact_commands
        if (
            replica.compacting
            or replica.compact_queued is not None
            or (commands and commands[-1][0] > core.compacted_through)
        ):
            return  # one command at a time: the last one has not run here yet
        dirty_from = history[-1][0] if history else core.start_offset
        scan = replica.dirty_scan
        if scan is None or scan.dirty_from != dirty_from:
            scan = replica.dirty_scan = DirtyScan.at(dirty_from)
        view = log_view(
            replica.log, scan, high_watermark=core.high_watermark, clean_bytes=replica.clean_bytes
        )
        rule = CompactionRule(
            settings.min_cleanable_dirty_ratio,
            settings.min_compaction_lag_ms,
            settings.max_compaction_lag_ms,
            settings.delete_retention_ms,
        )
        decision = compaction_point(view, rule, history, wall_ms)
        if decision is None:
            return
        command = CompactCommand(
            end=decision.end,
            tombstones_end=tombstones_end_for(core, decision.tombstones_end),
            zstd=libzstd_version(),  # trimmed zstd batches are re-encoded by this version
            time_ms=wall_ms,
        )
        value = command.to_value()
        self.input(replica, partial(self._propose_compaction, replica, value, decision.reason))

    def _propose_compaction(self, replica: R, value: bytes, reason: str) -> None:
        offset = replica.core.propose_compact(value, self._clock())
        if offset is not None:
            self.counters["compactions_proposed"] += 1
            _LOG.info(
                "keyed compaction proposed %s/%d node=%s offset=%d reason=%s",
                *replica.key,
                self.node_id,
                offset,
                reason,
                extra=fields(replica.key),
            )

    def _queue_compaction(self, replica: R, command: Compact) -> None:
        """A committed command: run it now, or after the job under way (a newer one
        supersedes a queued one: compacting by it gives the same bytes)."""
        replica.compact_queued = command
        if not replica.compacting and not replica.closed:
            self._start_compaction(replica)

    def _start_compaction(self, replica: R) -> None:
        """Begin the queued command: roll the active segment if it starts below E
        (only sealed segments change), then run the job off the event loop. Waits
        (for the next check) while a segment below E reaches past the high
        watermark: a truncation could reopen it."""
        queued = replica.compact_queued
        if queued is None or replica.compacting or replica.busy or replica.closed:
            return
        key, core, log = replica.key, replica.core, replica.log
        try:
            command = CompactCommand.from_value(queued.value)
        except CorruptBatchError as error:
            _LOG.error(
                "keyed compaction refused %s/%d node=%s offset=%d: %s (not applied; "
                "a node of a later version must apply it)",
                *key,
                self.node_id,
                queued.offset,
                error,
                extra=fields(key),
            )
            replica.compact_queued = None
            self.counters["compactions_refused"] += 1
            return
        try:
            sealed = log.sealed_segments()
            active_base = sealed[-1][1] if sealed else log.start_offset
            if active_base < command.end and log.end_offset > active_base:
                log.roll()
            if any(end > core.high_watermark for _, end in segments_below(log, command.end)):
                return  # the check retries
        except (OSError, StorageError) as error:
            self.fence(replica, error)
            return
        replica.compact_queued = None
        replica.compacting = True
        self._compacting.add(key)
        pacer = self._compaction_pacer()
        memory = self.config.compaction_memory_bytes_max
        temp_dir = replica.directory if self.segment_logs else None  # a large bitmap's file

        def job() -> int:
            return run_command(
                log,
                command,
                memory_bytes_max=memory,
                pacer=pacer,
                cancelled=lambda: replica.closed,
                temp_dir=temp_dir,
            )

        self._run_job(job, partial(self._compaction_done, replica, queued.offset, command))

    def _compaction_done(
        self, replica: R, offset: int, command: CompactCommand, outcome: int | BaseException
    ) -> None:
        replica.compacting = False
        self._compacting.discard(replica.key)
        after = self._after_job.pop(replica.key, None)
        if after is not None:
            after()
        if replica.closed:
            return
        if isinstance(outcome, BaseException):
            if isinstance(outcome, CompactionCancelledError):
                return
            if isinstance(outcome, ZstdVersionError):
                # Another libzstd than the leader's would write other bytes: this
                # replica leaves the command unapplied (it serves the range as it
                # was) rather than differ; every node must run the same zstandard.
                self.counters["compactions_refused"] += 1
                _LOG.error(
                    "keyed compaction refused %s/%d node=%s offset=%d: %s",
                    *replica.key,
                    self.node_id,
                    offset,
                    outcome,
                    extra=fields(replica.key),
                )
                return
            self.read_failed(replica, outcome, "keyed compaction")
            return
        self.counters["compactions_applied"] += 1
        replica.clean_bytes = outcome
        _LOG.info(
            "keyed compaction applied %s/%d node=%s offset=%d end=%d kept_bytes=%d",
            *replica.key,
            self.node_id,
            offset,
            command.end,
            outcome,
            extra=fields(replica.key),
        )
        self.input(replica, partial(replica.core.compaction_done, offset))
        if replica.compact_queued is not None:
            self._start_compaction(replica)

    # ------------------------------------------------------------------ storage failures

    def fence(self, replica: R, error: BaseException) -> None:
        """Take ``replica`` out of service after a storage failure (see the host)."""
        if replica.closed:
            return
        key = replica.key
        now = self._clock()
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
        self.close_replica(
            replica,
            StorageError(
                f"{key[0]}/{key[1]}: the leader's storage failed ({reason}); the write was "
                "not acknowledged and may or may not be committed by the new leader"
            ),
        )
        if no_space and self.disk.note_no_space(now):  # the replica is closed by now
            self._disk_changed(now)

    def _reopen_fenced(self, now: int) -> None:
        for key, fenced in list(self._fenced.items()):
            if fenced.retry_at_ms > now or self.closing or (fenced.no_space and self.disk.full):
                continue
            if key in self._compacting:
                continue  # its old log's compaction job stops first
            topic, partition = key
            directory = partition_directory(self.data_dir, topic, partition)
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
                if no_space and self.disk.note_no_space(now):
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

    def _hand_off_fenced_leadership(self, replica: R) -> None:
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
            and not self.liveness.peer_dead(voter)
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
        return self.disk.full

    def disk_status(self) -> DiskStatus:
        """Free space as last measured, the watermark, and the state."""
        return self.disk.status()

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
        if self.disk.full:
            nodes.add(self.node_id)
        self._full_nodes = frozenset(nodes)

    def _disk_changed(self, now: int) -> None:
        """The node turned full, or got space back (see the host's docstring)."""
        status = self.disk.status()
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
                self._handover_due_ms = NO_WAKE_MS
            for key, fenced in list(self._fenced.items()):
                if fenced.no_space:
                    self._fenced[key] = replace(fenced, retry_at_ms=min(fenced.retry_at_ms, now))
        self._owner.disk_full_changed(status.full)

    # ------------------------------------------------------------------ maintenance

    @property
    def in_maintenance(self) -> bool:
        """Whether the cluster metadata puts this node in maintenance."""
        return self.node_id in self._maintenance

    def maintenance_nodes(self) -> frozenset[str]:
        return frozenset(str(node) for node in self._maintenance)

    def set_maintenance(self, nodes: Iterable[str]) -> None:
        """The nodes in maintenance, as the cluster metadata last said (see the
        host's docstring). This node entering it hands its leaderships over
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
                self._handover_due_ms, self._clock() + self.config.disk_handover_delay_ms
            )
            self._shell.wake_early()  # the tick loop may be in a long sleep
        else:
            _LOG.warning("node %s out of maintenance: may lead again", self.node_id)
            if not self.disk.full:
                self._handover_due_ms = NO_WAKE_MS

    def _hand_over_leaderships(self, now: int) -> None:
        """(While full or in maintenance.) Hand each leadership of this node to the
        in-sync voter that may lead whose log matches furthest; a group with none
        keeps this leader (a full one writes into the space left above the
        watermark, and a write that finds none fences the replica, which hands over
        then)."""
        barred = self._full_nodes | self._maintenance
        for replica in list(self.replicas.values()):
            core = replica.core
            if core.role is not Role.LEADER or core.transferring_to is not None:
                continue
            candidates = [
                str(voter)
                for voter in core.in_sync_voters(now)
                if voter not in barred and not self.liveness.peer_dead(voter)
            ]
            matches = {str(peer): offset for peer, offset in core.match_offsets().items()}
            successor = rules.shutdown_successor(self.node_id, candidates, matches)
            if successor is not None:
                self.input(replica, partial(core.transfer_leadership, NodeId(successor), now))

    def _refuse_without_space(self, replica: R) -> None:
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

    # ------------------------------------------------------------------ damage

    def log_of(self, key: PartitionKey) -> LogStorage | None:
        replica = self.replicas.get(key)
        return replica.log if replica is not None else None

    def damage_found(
        self, key: PartitionKey, log: LogStorage, error: BaseException, source: str
    ) -> None:
        """Damage in ``log`` found by ``source`` (the scrubber, a read, a consumer's
        report): one line saying where, then the replica is fenced (out of service;
        its group elects and serves from another replica; reopened later). Ignored
        when the replica is gone or has another log by now."""
        replica = self.replicas.get(key)
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
        self.fence(replica, error)

    def read_failed(self, replica: R, error: BaseException, source: str) -> None:
        """A read of ``replica``'s log failed: corrupt data is never served, the
        replica is fenced like after any storage failure."""
        if isinstance(error, CorruptSegmentError):
            self.damage_found(replica.key, replica.log, error, source)
        else:
            self.fence(replica, error)

    def _has_ready(self, replica: R) -> bool:
        """``replica.core.has_ready()``, where a leader reads its log for the appends
        it sends: a read that fails fences the replica (then False)."""
        try:
            return replica.core.has_ready()
        except (OSError, StorageError) as error:
            self.read_failed(replica, error, "replication read")
            return False

    # ------------------------------------------------------------------ the tick pass

    def tick(self, now: int, lag_ms: int | None) -> int:
        """The tick loop's pass: tick due replicas, send keepalives, run the periodic
        jobs. ``lag_ms``: how late the pass runs when its sleep ended on its timer
        (None: woken early), the event loop's lag (see :class:`DriverLiveness`).
        Returns how many replicas it ticked (a simulator's CPU cost)."""
        if lag_ms is not None:
            self.liveness.note_lag(lag_ms, now)  # before any timer acts on it
        ticked = self._tick_due(now)
        self._event_log.note_time(now)
        self._send_keepalives(now)
        if self.disk.due(now) and self.disk.check(now):
            self._disk_changed(now)
        if now >= self._handover_due_ms:
            self._handover_due_ms = now + self.config.disk_check_ms
            self._hand_over_leaderships(now)
        if self._fenced:
            self._reopen_fenced(now)
        if now >= self._retention_due_ms:
            self._retention_due_ms = now + self.config.retention_check_ms
            self._apply_retention(now)
            self._check_compaction(now)
        return ticked

    def sleep_until(self, now: int) -> int:
        """When the tick loop's next pass is due: the next thing to do, at least a
        tick interval (half a heartbeat interval) from ``now``."""
        return max(now + self.tick_interval_ms, self._next_due_ms())

    def _next_due_ms(self) -> int:
        due = min(
            self._retention_due_ms,
            self._committed_due_ms,
            self.liveness.keepalive_due_ms,
            self.disk.due_ms,
            self._handover_due_ms,
        )
        if self._wakes:
            due = min(due, self._wakes[0][0])
        full = self.disk.full
        for fenced in self._fenced.values():
            if not (fenced.no_space and full):  # those wait for a disk check
                due = min(due, fenced.retry_at_ms)
        return due

    def _tick_due(self, now: int) -> int:
        """Tick the replicas whose wake-up time has come (popped from the heap); how
        many it ticked."""
        wakes = self._wakes
        ticked = 0
        while wakes and wakes[0][0] <= now:
            wake_ms, _, key = heapq.heappop(wakes)
            replica = self.replicas.get(key)
            if replica is None or replica.wake_ms != wake_ms:
                continue  # gone, or a stale entry (an earlier one was pushed since)
            replica.wake_ms = NO_WAKE_MS
            if replica.core.next_wake_ms() <= now:
                ticked += 1
                self.input(replica, partial(replica.core.tick, now))
                if replica.busy:  # queued: scheduled again once it is applied
                    continue
            self._schedule(replica)
        return ticked

    # ------------------------------------------------------------------ committed files

    def committed_save_due(self, now: int) -> bool:
        """Whether the periodic committed-file pass is due (then it is due again
        ``committed_save_ms`` later)."""
        if now < self._committed_due_ms:
            return False
        self._committed_due_ms = now + self.config.committed_save_ms
        return True

    def committed_changes(self) -> list[tuple[str, int]]:
        """``(directory, high watermark)`` of the replicas whose watermark moved past
        their ``committed`` file's value; notes the new values as written."""
        changes: list[tuple[str, int]] = []
        moved, self._watermark_moved = self._watermark_moved, set()
        for key in moved:
            replica = self.replicas.get(key)
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

    # ------------------------------------------------------------------ flush rounds

    def _send_all(self, coalescer: Coalescer) -> None:
        sent = self.liveness.sent
        now = self._clock()
        for destination, bundle in coalescer.drain().items():
            self.counters["bundles_sent"] += 1
            sent[destination] = now
            self._shell.send_bundle(destination, bundle)

    def _send_keepalives(self, now: int) -> None:
        """An empty bundle to every live peer this node exchanges with and sent
        nothing to for a keepalive interval: node-level liveness (see
        :class:`DriverLiveness`) must not depend on some group being busy. A few
        frames a second per peer, however many groups are quiesced."""
        liveness = self.liveness
        interval = liveness.keepalive_ms
        liveness.keepalive_due_ms = now + interval
        # In a defined order (heard first, then sent): the sends' order is a simulator's
        # trace, and a set's order could differ between runs.
        for peer in dict.fromkeys([*liveness.heard, *liveness.sent]):
            if now - liveness.sent.get(peer, _NEVER_MS) >= interval and liveness.peer_alive(peer):
                liveness.sent[peer] = now
                self.counters["keepalives_sent"] += 1
                self._shell.send_bundle(peer, KEEPALIVE)

    def begin_round(self) -> Round[R] | None:
        """Start a flush round: take every dirty replica's ``Ready`` (it is busy until
        :meth:`complete`) and send the leaders' early messages. None: no replica had
        work. The shell syncs ``Round.syncs`` (see :attr:`Round.inline`), then calls
        :meth:`complete`."""
        self.counters["flush_rounds"] += 1
        batch = list(self.dirty.values())
        self.dirty.clear()
        readies: list[tuple[R, Ready]] = []
        for replica in batch:
            if replica.closed or replica.busy:
                continue
            if self._has_ready(replica):
                try:  # a leader reads its log for the appends it sends
                    ready = replica.core.ready()
                except (OSError, StorageError) as error:
                    self.read_failed(replica, error, "replication read")
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
        syncs = [replica for replica, ready in readies if ready.sync] if self._fsync else []
        inline = len(syncs) == 1 and self._fsync_recent_ms < INLINE_FSYNC_MS_MAX
        return Round(readies, syncs, inline)

    def complete(
        self, round_: Round[R], sync_results: Sequence[object], sync_elapsed_s: float | None
    ) -> None:
        """Finish a round: ``sync_results`` has None or the error for each of
        ``round_.syncs`` (a failed sync fences its replica: nothing of its round is
        acknowledged), ``sync_elapsed_s`` how long the syncs took (None: none ran);
        then the messages, replies and events, and ``advance()`` each core."""
        if round_.syncs:
            if sync_elapsed_s is not None:
                self._note_fsync_time(sync_elapsed_s)
            self.counters["fsyncs"] += len(round_.syncs)
            for replica, result in zip(round_.syncs, sync_results, strict=True):
                if isinstance(result, BaseException):
                    self.fence(replica, result)
        self._finish_round(round_.readies)

    def _note_fsync_time(self, elapsed_s: float) -> None:
        self.fsync_seconds.observe(elapsed_s)
        elapsed_ms = elapsed_s * 1000
        self._fsync_recent_ms += (elapsed_ms - self._fsync_recent_ms) / 4

    def _finish_round(self, readies: list[tuple[R, Ready]]) -> None:
        """The durable part of a round: messages, replies, events, then ``advance``."""
        coalescer = Coalescer()
        removed: list[R] = []
        compacts: list[tuple[R, Compact]] = []
        for replica, _ in readies:
            if replica.closed:  # fenced (or deleted) during the round: nothing of it goes
                readies = [(r, ready) for r, ready in readies if not r.closed]
                break
        shell, owner = self._shell, self._owner
        for replica, ready in readies:
            coalescer.add_all(replica.key, ready.messages)
            if ready.high_watermark > ready.committed_from:
                self._watermark_moved.add(replica.key)
                owner.replica_committed(replica.key, ready.committed_from, ready.high_watermark)
            leader_found = False
            for event in ready.events:
                self._event_log.note(replica.key, event, self._clock())
                if isinstance(event, RoleChanged):
                    self._count_role_change(replica.key, event)
                    leader_found = leader_found or not self.leader_unusable(replica)
                elif isinstance(event, Removed):
                    removed.append(replica)
                elif isinstance(event, Compact):
                    compacts.append((replica, event))
            shell.carried_out(replica, ready, leader_found)
        self._send_all(coalescer)
        for replica, ready in readies:
            try:
                replica.core.advance(ready)
            except (OSError, StorageError) as error:
                self.fence(replica, error)
            replica.busy = False
            while replica.queued and not replica.closed:
                self._apply(replica, replica.queued.popleft())
            if replica.closed:
                continue
            self._schedule(replica)
            # advance() (a commit) or the queued inputs may have made more work.
            if self._has_ready(replica):
                self.dirty[replica.key] = replica
        for replica in removed:
            owner.replica_removed(replica.key)
        for replica, command in compacts:
            self._queue_compaction(replica, command)
        for replica, ready in readies:  # a command waiting for the watermark to pass
            if replica.compact_queued is not None and ready.high_watermark > ready.committed_from:
                self._start_compaction(replica)


def _remove_replica_directory(directory: str) -> None:
    """Delete a replica's directory, and its topic's once that is empty."""
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(directory))


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


def write_committed_files(changes: list[tuple[str, int]]) -> None:
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


class DriverLiveness(NodeLiveness):
    """The node-level liveness every core of the driver shares (see
    :class:`~laminar.replica.core.NodeLiveness`): frames from each peer, the event
    loop's lag, membership (from the owner), the disk and maintenance."""

    def __init__(self, driver: ReplicaDriver[R], owner: HostOwner) -> None:
        self.heard: dict[NodeId, int] = {}
        self.sent: dict[NodeId, int] = {}
        # An idle peer link carries an empty bundle this often, so that a peer hears
        # the node well within the shortest election timeout.
        self.keepalive_ms = max(1, driver._config.election_timeout_min_ms // 4)
        self.keepalive_due_ms = 0  # the next pass of _send_keepalives
        self._owner = owner
        # A lag this long makes the node's timers untrustworthy: a quarter of the
        # shortest election timeout.
        self.lag = LoopLag(driver._config.election_timeout_min_ms / 4)
        self._clock = driver.now_ms
        self._disk = driver.disk
        self._driver = driver
        self.recovery = TokenBucket(driver.config.recovery_bytes_per_s, RECOVERY_BURST_S)

    def note_lag(self, lag_ms: int, now_ms: int) -> None:
        self.lag.note(lag_ms, now_ms)

    def peer_heard_ms(self, peer: NodeId) -> int:
        return self.heard.get(peer, _NEVER_MS)

    def slowness(self) -> float:
        return self.lag.slowness(self._clock())

    def peer_alive(self, peer: NodeId) -> bool:
        return self._owner.peer_alive(str(peer))

    def peer_dead(self, peer: NodeId) -> bool:
        return self._owner.peer_dead(str(peer))

    def may_lead(self) -> bool:
        return not self._disk.full and not self._driver.in_maintenance

    def recovery_grant(self) -> int:
        return self.recovery.available(self._clock())

    def recovery_spend(self, count: int) -> None:
        self.recovery.spend(count)


RECOVERY_BURST_S = 0.25
"""The recovery budget a node may spend at once: a quarter second of its rate, more
than a leader's heartbeat interval (when a leader out of budget sends on)."""


class TokenBucket:
    """Bytes per second with a burst of ``burst_s`` of them; ``rate`` 0: no limit.
    :meth:`spend` may take more than is available (a batch larger than the
    grant): the debt delays the next grants. Time is the driver's clock, in ms."""

    def __init__(self, rate: int, burst_s: float) -> None:
        self.rate = rate
        self.capacity = rate * burst_s
        self._tokens = self.capacity
        self._at_ms: int | None = None  # full until first asked

    def available(self, now_ms: int) -> int:
        if self.rate == 0:
            return 1 << 62
        elapsed_s = 0.0 if self._at_ms is None else max(0, now_ms - self._at_ms) / 1000
        self._tokens = min(self.capacity, self._tokens + elapsed_s * self.rate)
        self._at_ms = now_ms
        return max(0, int(self._tokens))

    def spend(self, count: int) -> None:
        if self.rate:
            self._tokens -= count


def tombstones_end_for(core: ReplicaCore, tombstones_end: int) -> int:
    """``tombstones_end`` (T) held down to every peer's match offset (the leader's
    view), and never below the previous command's T. A peer whose log ends below T
    would fetch the range from T's command on with its tombstones removed, on top of
    its own older records: a record of its own that only a removed tombstone
    superseded would survive its compaction by the same command, there and nowhere
    else (a deleted key back on one replica). A peer that is away holds tombstones
    back until it caught up. The previous T held for every peer when it was decided
    (their logs keep what is committed), and a command must include the one before
    it: a replica that skips a queued command, or reruns only the newest after a
    restart, compacts by the newest alone."""
    bounded = max(0, min([tombstones_end, *core.match_offsets().values()]))
    commands = core.compact_commands
    if not commands:
        return bounded
    try:
        previous = CompactCommand.from_value(commands[-1][1]).tombstones_end
    except CorruptBatchError:
        return bounded
    return max(bounded, previous)


def _run_inline(job: Callable[[], int], done: JobDone) -> None:
    """A :data:`JobRunner` that runs the job at once, on the caller's thread."""
    try:
        outcome: int | BaseException = job()
    except Exception as error:  # the driver decides what a failure means
        outcome = error
    done(outcome)


def _partition_key(item: object) -> PartitionKey:
    assert isinstance(item, tuple) and len(item) == 2, item
    topic, partition = item
    assert isinstance(topic, str) and isinstance(partition, int)
    return topic, partition


def _without_fsync(config: LogConfig) -> LogConfig:
    return replace(config, fsync_policy=FsyncPolicy.NEVER, retention_ms=None, retention_bytes=None)
