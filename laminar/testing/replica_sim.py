"""Replication cores in the deterministic simulator, with a workload and checkers.

:class:`ReplicaSimNode` hosts several partitions' :class:`ReplicaCore` objects on one
simulated node through the production :class:`~laminar.server.driver.ReplicaDriver`
(the host's decisions: flush rounds, fencing, the input queue, the tick pass,
node-level liveness and keepalives), over :class:`MemoryLog` storage that loses
unsynced batches when the node crashes. The node is the driver's shell in
simulated time: every call ends with the flush rounds its inputs made due, the
tick pass runs when the driver asks, and a slow disk holds a round's syncs for
``SimDisk.sync_delay_ms``. A seed that fails replays the production code path.
:class:`ProducerClient` nodes produce unique values with ``acks=all`` and
idempotent retries; reads from random replicas run as timed actions. A
:class:`History` checks safety as the run goes:

* at most one leader per term and partition;
* every replica's high watermark only moves forward (per incarnation);
* below the high watermark, every replica holds the same batch at each offset;
* reads return only committed data, below the reader's high watermark, that never
  changes afterwards;
* every acknowledged value sits at exactly one offset, the one it was acknowledged
  with, in the final log.

Disk damage (``SeedOptions.damage``): a crashed node's replica loses the end of its
log from a random batch on (entries it may have acknowledged) and/or its state
file (term and vote), as the shell leaves it after setting damaged files aside,
and restarts *healing* (:class:`~laminar.replica.core.StorageDamage`). At most one
replica of a partition is damaged or healing at a time (a majority damaged waits
for an operator). With ``SeedOptions.heal`` False the damage is not told to the
core, which then votes with what is left: the checkers find lost acknowledged
records (see ``tests/sim/test_replica_sim.py``).

Keyed compaction (``SeedOptions.compaction``; half the seeds by default): the
partitions are a compact topic (settings drawn per seed, via the driver's owner),
the producers write keyed records of a few keys, some of them tombstones, each
node's logs roll every few batches (a count per node) and each node's key map holds
a few keys or plenty (several passes over a range, or one). Commands come from the
driver's own rule on its retention tick, and from random extra commands a leader
proposes with E at any batch boundary up to its high watermark; a fault makes a
node die before its next few segment swaps (in the middle of a job: the segments
swapped stay, the command runs again after the restart). The checker then compares
records, not batches, at each offset (a compacted batch holds a subset of the
original's), and asserts:

* every two replicas that applied the same commands (none half done) hold the same
  batch bytes for every offset both hold below both high watermarks, all along the
  run; at the end every final voter has applied every command, so all are equal;
* at the end each final voter holds exactly what the rule keeps of the log as it
  was (:func:`survives`): the newest record of each key below E, a tombstone until
  T passes it, everything from E on; so nothing acknowledged is lost but what the
  rule removes.

:func:`run_seed` builds a random fault schedule for a seed, runs it, lets the
cluster heal, checks liveness, and returns the violations (empty when correct).
The same seed always replays the same run (``trace_hash``).
"""

from __future__ import annotations

import errno
import random
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import msgpack

from laminar.errors import LaminarError, UnknownTopicOrPartitionError
from laminar.records import (
    decode_records,
    encode_batch,
    iter_batches,
    libzstd_version,
    parse_header,
)
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore, StorageDamage
from laminar.replica.messages import (
    ConfigChanged,
    ProduceReply,
    ProduceStatus,
    Ready,
    Removed,
    RoleChanged,
)
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.compaction import COMPACT_KIND, KEY_ENTRY_BYTES, CompactCommand
from laminar.segment.config import LogConfig
from laminar.segment.memory import SEGMENT_BATCHES_DEFAULT, MemoryLog
from laminar.segment.storage import Buffer, LogStorage
from laminar.server.disk import DiskUsage
from laminar.server.driver import (
    NO_WAKE_MS,
    DriverLiveness,
    DriverShell,
    HostConfig,
    HostOwner,
    JobDone,
    LogFactory,
    Replica,
    ReplicaDriver,
    Round,
    Standalone,
    tombstones_end_for,
)
from laminar.server.placement_keeper import TopicSettings
from laminar.testing.sim import Envelope, LinkConfig, Simulator, Step


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    partition: int
    request_id: int
    batch: bytes
    acks: Acks


@dataclass(frozen=True, slots=True)
class ProduceResult:
    partition: int
    reply: ProduceReply


class History:
    """What happened, checked as it happens. ``violations`` empty means correct."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.leaders: dict[tuple[int, int], str] = {}
        self.committed: dict[int, dict[int, tuple[int, int, int]]] = {}
        self.watermarks: dict[tuple[str, int, int], int] = {}
        self.acked: dict[int, dict[bytes, int]] = {}
        self.acked_batches: dict[int, dict[int, int]] = {}  # offset -> payload checksum
        self.reads = 0
        self.elections: list[tuple[int, int, str, int]] = []  # (partition, term, node, time)
        self.compact = False
        """Keyed compaction runs (:meth:`check_committed` then compares records, not
        batches: a compacted batch holds a subset of the original's records)."""
        self.records: dict[int, dict[int, Record]] = {}
        """(Keyed compaction.) Every committed record seen, by offset: the log as it
        was before any compaction (what each compacted replica is checked against)."""
        self.acked_records: dict[int, dict[int, tuple[bytes | None, bytes | None]]] = {}
        """(Keyed compaction.) Acknowledged records by offset: (key, value)."""
        self.commands: dict[int, dict[int, CompactCommand]] = {}
        """(Keyed compaction.) Committed compact commands by the offset of their batch."""

    def violation(self, text: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(text)

    def became_leader(self, partition: int, term: int, node: str, now_ms: int) -> None:
        known = self.leaders.setdefault((partition, term), node)
        if known != node:
            self.violation(f"p{partition}: two leaders in term {term}: {known} and {node}")
        self.elections.append((partition, term, node, now_ms))

    def watermark(self, node: str, incarnation: int, partition: int, value: int) -> None:
        key = (node, incarnation, partition)
        previous = self.watermarks.get(key, -1)
        if value < previous:
            self.violation(f"p{partition}: {node} high watermark went back {previous}->{value}")
        self.watermarks[key] = value

    def check_acknowledged(
        self, label: str, partition: int, data: bytes, start_offset: int
    ) -> None:
        """Every value acknowledged in ``partition`` sits once, at its offset, in
        ``data`` (its leader's log from ``start_offset``; values below it went by
        retention). ``label`` names the partition in violations."""
        positions: dict[bytes, list[int]] = {}
        if data:
            for position, header in iter_batches(data):
                if header.is_control:
                    continue
                for record in decode_records(data[position : position + header.length]):
                    assert record.value is not None
                    positions.setdefault(record.value, []).append(record.offset)
        for value, offsets in positions.items():
            if len(offsets) > 1:
                self.violation(f"{label}: {value!r} written at offsets {offsets}")
        for value, offset in self.acked.get(partition, {}).items():
            found = positions.get(value)
            if found is None and offset < start_offset:
                continue  # retention deleted it
            if found is None:
                self.violation(f"{label}: acknowledged {value!r}@{offset} lost")
            elif offset not in found:
                self.violation(f"{label}: {value!r} acked at {offset}, is at {found}")

    def check_committed(self, node: str, partition: int, data: bytes) -> None:
        """Batches a replica holds below its high watermark: all replicas must agree.

        Batch by batch: committed prefixes are contiguous chains of batches from the
        log start, so two that differ first differ at a batch with the same base
        offset, where the (end, term, payload checksum) comparison catches it.
        """
        committed = self.committed.setdefault(partition, {})
        for position, header in iter_batches(data, verify=False):
            if self.compact and not header.is_control:
                self._check_records(node, partition, data[position : position + header.length])
                continue
            seen = (header.next_offset, header.term, header.payload_checksum)
            known = committed.setdefault(header.base_offset, seen)
            acked = self.acked_batches.get(partition, {}).get(header.base_offset)
            if acked is not None and acked != header.payload_checksum:
                self.violation(
                    f"p{partition}: {node} commits another batch at acknowledged offset "
                    f"{header.base_offset}"
                )
            if known != seen:
                self.violation(
                    f"p{partition}: {node} holds batch {seen} at committed offset "
                    f"{header.base_offset}, another replica {known}"
                )
            if self.compact and known == seen:
                self._note_command(partition, header.base_offset, data[position:])

    def _check_records(self, node: str, partition: int, batch: bytes) -> None:
        """(Keyed compaction.) A committed data batch, compacted or not: each of its
        records is the one every replica holds at that offset, and the acknowledged
        one if a client was told so."""
        records = self.records.setdefault(partition, {})
        acked = self.acked_records.get(partition, {})
        term = parse_header(batch).term
        for record in decode_records(batch):
            seen = Record(_bytes_or_none(record.key), _bytes_or_none(record.value), term)
            known = records.setdefault(record.offset, seen)
            if known != seen:
                self.violation(
                    f"p{partition}: {node} holds {seen} at committed offset {record.offset}, "
                    f"another replica {known}"
                )
            wanted = acked.get(record.offset)
            if wanted is not None and wanted != (seen.key, seen.value):
                self.violation(
                    f"p{partition}: {node} commits another record at acknowledged offset "
                    f"{record.offset}"
                )

    def _note_command(self, partition: int, offset: int, data: bytes) -> None:
        if offset in self.commands.get(partition, {}):
            return
        records = decode_records(data[: parse_header(data).length])
        if records[0].key is None or bytes(records[0].key) != COMPACT_KIND:
            return
        value = records[0].value
        assert value is not None
        self.commands.setdefault(partition, {})[offset] = CompactCommand.from_value(bytes(value))

    def ack(
        self,
        partition: int,
        value: bytes,
        offset: int,
        checksum: int,
        record: tuple[bytes | None, bytes | None] | None = None,
    ) -> None:
        """A client got an acknowledgement for the batch with ``checksum`` at ``offset``
        (``value``: a label unique to it; ``record``: its one record's key and value,
        with keyed compaction).

        From now on, the committed batch at ``offset`` must be this one, on every
        replica: checked here against what is known, and in :meth:`check_committed`
        as replicas commit.
        """
        acked = self.acked.setdefault(partition, {})
        known = acked.setdefault(value, offset)
        if known != offset:
            self.violation(f"p{partition}: {value!r} acknowledged at {known} and at {offset}")
        if record is not None:
            self.acked_records.setdefault(partition, {})[offset] = record
            held = self.records.get(partition, {}).get(offset)
            if held is not None and (held.key, held.value) != record:
                self.violation(
                    f"p{partition}: acknowledged record at {offset} is not the committed one"
                )
            return
        self.acked_batches.setdefault(partition, {})[offset] = checksum
        committed = self.committed.get(partition, {}).get(offset)
        if committed is not None and committed[2] != checksum:
            self.violation(f"p{partition}: acknowledged batch at {offset} is not the committed one")


@dataclass(frozen=True, slots=True)
class Record:
    """(Keyed compaction.) A record as the checker knows it."""

    key: bytes | None
    value: bytes | None  # None: a tombstone
    term: int


def _bytes_or_none(data: object) -> bytes | None:
    return None if data is None else bytes(data)  # type: ignore[call-overload]


def survives(
    offset: int, record: Record, command: CompactCommand | None, later: dict[bytes, list[int]]
) -> bool:
    """Whether the raw record at ``offset`` survives ``command`` (None: no command
    applied), by the rule (docs: "Keyed compaction"): at or after E, or without a
    key, it stays; below E it stays if no record of its key is in (offset, E), and a
    tombstone only at or after T. ``later``: each key's offsets, ascending."""
    if command is None or offset >= command.end or record.key is None:
        return True
    offsets = later[record.key]
    index = bisect_right(offsets, offset)
    if index < len(offsets) and offsets[index] < command.end:
        return False
    return record.value is not None or offset >= command.tombstones_end


_LOCAL = "<local>"
TOPIC = "sim"
"""The topic of the simulated partitions: replica ``p`` is ``(TOPIC, p)`` to the driver."""

_PLENTY = DiskUsage(1 << 40, 1 << 40)


def sim_host_config() -> HostConfig:
    """The host settings of the simulated nodes: production's, with an input queue
    small enough that a slow disk fills it (a busy replica's peer messages are
    dropped), a few produce calls per replica at most (the clients' retries reach
    it), and a fenced replica reopened within the run."""
    return HostConfig(
        queued_inputs_max=8,
        produce_calls_max=4,
        storage_retry_ms=300,
        storage_retry_max_ms=2_000,
        disk_free_bytes_min=0,
        disk_free_percent_min=0.0,
    )


@dataclass
class SimDisk:
    """A node's disk as the fault schedule leaves it (the faults of the real shell:
    a failed fsync fences its replica, a slow one keeps its replicas busy)."""

    sync_delay_ms: int = 0
    """How long each flush round's syncs take (a slow disk); 0: no time."""
    failing_syncs: int = 0
    """The next this-many syncs fail (``EIO``)."""
    crash_in_swaps: int | None = None
    """(Keyed compaction.) The node crashes before its this-many-th next segment
    swap (0: before the next one): in the middle of a compaction job."""
    swaps: int = 0
    """Segment swaps done (keyed compaction)."""
    segment_reads: list[int] = field(default_factory=list)
    """The segments read whole (their bases), since the current job began."""
    rewrite_reads: int = 0
    """Of those, the reads of a segment's rewrite (the read just before its swap)."""


class MidCompactionCrashError(Exception):
    """The simulated process dies in the middle of a compaction job."""


class SimLog(MemoryLog):
    """A memory log on a simulated node's disk: its syncs fail while the disk says
    so (the flush rounds' and a reopen's alike); a compaction job's segment swap
    dies when the disk's ``crash_in_swaps`` comes due."""

    def __init__(self, disk: SimDisk, segment_batches_max: int = SEGMENT_BATCHES_DEFAULT) -> None:
        super().__init__(fsync=False, segment_batches_max=segment_batches_max)
        self.disk = disk

    def replace_segment(
        self, base: int, batches: Iterable[Buffer], *, sync_directory: bool = True
    ) -> None:
        disk = self.disk
        if disk.crash_in_swaps is not None:
            if disk.crash_in_swaps <= 0:
                disk.crash_in_swaps = None
                raise MidCompactionCrashError(f"crash before swapping segment {base}")
            disk.crash_in_swaps -= 1
        if disk.segment_reads and disk.segment_reads[-1] == base:
            disk.rewrite_reads += 1
        super().replace_segment(base, batches, sync_directory=sync_directory)
        disk.swaps += 1

    def read_segment(self, base: int) -> Iterator[bytes]:
        self.disk.segment_reads.append(base)
        return super().read_segment(base)

    def sync(self) -> None:
        if self.disk.failing_syncs > 0:
            self.disk.failing_syncs -= 1
            raise OSError(errno.EIO, "simulated fsync failure")
        super().sync()

    def crash(self) -> SimLog:
        survivor = SimLog(self.disk, self._segment_batches_max)
        vars(survivor).update(vars(super().crash()))
        survivor.disk = self.disk
        return survivor

    def reopened(self) -> SimLog:
        """The same log opened again after a clean close: everything kept (the page
        cache holds what was not synced)."""
        log = SimLog(self.disk, self._segment_batches_max)
        vars(log).update(vars(self))
        vars(log)["_closed"] = False
        return log


@dataclass(slots=True)
class SimReplica(Replica):
    """A replica of a simulated node, with the produce calls waiting on it."""

    calls: dict[int, str] = field(default_factory=dict)
    """Request id -> the client's address (``_LOCAL``: a test's own call)."""

    def calls_waiting(self) -> int:
        return len(self.calls)


def memory_driver(
    node_id: str,
    config: ReplicaConfig,
    *,
    owner: HostOwner,
    shell: DriverShell[SimReplica],
    clock: Callable[[], int],
    rng: random.Random,
    host_config: HostConfig,
    log_factory: LogFactory,
    liveness: Callable[[ReplicaDriver[SimReplica], HostOwner], DriverLiveness] | None = None,
    run_job: Callable[[Callable[[], int], JobDone], None] | None = None,
) -> ReplicaDriver[SimReplica]:
    """The driver of a simulated node: memory logs from ``log_factory``, plenty of
    disk space, the simulated clock (wall clock included); keyed compaction jobs
    run inline unless ``run_job`` says otherwise."""
    return ReplicaDriver(
        node_id,
        f"/sim/{node_id}",  # never touched: the logs are in memory
        config,
        LogConfig(),
        owner=owner,
        shell=shell,
        make_replica=SimReplica,
        clock=clock,
        wall_clock_ms=clock,
        disk_usage=lambda: _PLENTY,
        rng=rng,
        host_config=host_config,
        log_factory=log_factory,
        liveness=liveness,
        run_job=run_job,
    )


class _Membership(Standalone):
    """What membership told a simulated node (the cluster's oracle stands in for
    SWIM): every peer alive until declared dead; the topic's settings (keyed
    compaction) as the catalogue would."""

    def __init__(self, settings: TopicSettings | None = None) -> None:
        self.dead: set[str] = set()
        self.settings = settings

    def settings_of(self, key: tuple[str, int]) -> TopicSettings | None:
        return self.settings

    def peer_alive(self, node_id: str) -> bool:
        return node_id not in self.dead

    def peer_dead(self, node_id: str) -> bool:
        return node_id in self.dead


class ReplicaSimNode:
    """A node hosting replicas of several partitions, driven by the simulator through
    the production :class:`~laminar.server.driver.ReplicaDriver` (the shell around
    it here runs the flush rounds and the tick pass in simulated time)."""

    def __init__(
        self,
        node_id: str,
        groups: dict[int, GroupConfig],
        config: ReplicaConfig,
        history: History,
        rng: random.Random,
        host_config: HostConfig | None = None,
    ) -> None:
        self._id = NodeId(node_id)
        self._groups = groups  # founding configurations of the partitions it starts with
        self._config = config
        self._host_config = host_config if host_config is not None else sim_host_config()
        self._history = history
        self._rng = rng
        self.storages: dict[int, SimLog] = {}
        self.targets: dict[int, tuple[NodeId, ...]] = {}
        self.incarnation = 0
        self.damaged: dict[int, StorageDamage] = {}
        # Partitions whose state file this node lost, until its replica healed: the
        # commands it applied are forgotten (it applies them again), not undone.
        self.lost_state: set[int] = set()
        """Damage done while crashed, for the cores made at the next restart."""
        self.heal = True
        """Tell the cores about damage (False: they vote with what is left)."""
        self.disk = SimDisk()
        self.local_replies: list[ProduceReply] = []
        self.counters: dict[str, int] = {}
        """The drivers' counters, summed over this node's incarnations so far
        (:meth:`counter` adds the running one)."""
        self._driver: ReplicaDriver[SimReplica] | None = None
        self._membership = _Membership()
        self._now_ms = 0
        self._outbox: list[Envelope] = []
        self._trace: list[str] = []
        self._pending: tuple[Round[SimReplica], int, int] | None = None
        """A round whose syncs take time: (round, started, done at)."""
        self._sleep_until_ms = NO_WAKE_MS
        self._woken = False
        self._reopens: dict[int, int] = {}  # partition -> times its replica was closed
        self.segment_batches_max = SEGMENT_BATCHES_DEFAULT
        """Its logs roll every this-many batches (keyed compaction: differs per node)."""
        self.settings: TopicSettings | None = None
        """The topic's settings (keyed compaction); None: the standalone default."""
        self.crash_wanted: Callable[[], None] = lambda: None
        """Crash this node at once (a compaction job died with the process)."""
        self.compaction_stats = CompactionStats()

    @property
    def address(self) -> str:
        return self._id

    @property
    def driver(self) -> ReplicaDriver[SimReplica]:
        assert self._driver is not None, f"{self._id} is down"
        return self._driver

    @property
    def cores(self) -> dict[int, ReplicaCore]:
        """The open replicas' cores, by partition (none while crashed)."""
        if self._driver is None:
            return {}
        return {key[1]: replica.core for key, replica in self._driver.replicas.items()}

    def replica_of(self, partition: int) -> SimReplica | None:
        """This node's open replica of ``partition`` (None while crashed)."""
        return None if self._driver is None else self._driver.get((TOPIC, partition))

    def counter(self, name: str) -> int:
        running = self._driver.counters.get(name, 0) if self._driver is not None else 0
        return self.counters.get(name, 0) + running

    # ---------------------------------------------------------------- lifecycle

    def start(self, now_ms: int) -> Step:
        self._now_ms = now_ms
        driver = self._new_driver()
        for partition, group in self._groups.items():
            driver.open_replica((TOPIC, partition), group)
        return self._step()

    def _new_driver(self) -> ReplicaDriver[SimReplica]:
        self._membership = _Membership(self.settings)
        self._driver = memory_driver(
            self._id,
            self._config,
            owner=self._host_owner(),
            shell=self,
            clock=self._clock,
            rng=self._rng,
            host_config=self._host_config,
            log_factory=self._open_log,
            run_job=self._run_job,
        )
        self._sleep_until_ms = self._now_ms  # the tick loop's first pass
        self._woken = False
        return self._driver

    def _host_owner(self) -> HostOwner:
        """What the driver asks the node around it: here the membership oracle's
        word (:mod:`laminar.testing.node_sim` answers as a whole node does)."""
        return self._membership

    def _clock(self) -> int:
        return self._now_ms

    def _open_log(self, directory: str, config: LogConfig) -> LogStorage:
        partition = int(directory.rsplit("/", 1)[1])
        log = self.storages.get(partition)
        if log is None:
            log = SimLog(self.disk, self.segment_batches_max)
        elif self.driver.is_fenced((TOPIC, partition)):  # reopened: what the disk kept
            log = log.crash()
        self.storages[partition] = log
        return log

    def _run_job(self, job: Callable[[], int], done: JobDone) -> None:
        """Run a keyed compaction job inline (as the driver's default does), counting
        its passes; a crash the fault schedule put in its middle ends it there: the
        driver never hears back, the node dies (the segments swapped so far stay)."""
        disk, stats = self.disk, self.compaction_stats
        disk.segment_reads = []
        disk.rewrite_reads = 0
        swaps_before = disk.swaps
        outcome: int | BaseException
        try:
            outcome = job()
        except MidCompactionCrashError as crash:
            stats.crashes_mid_compaction += 1
            stats.swaps_before_crash += disk.swaps - swaps_before
            self._trace.append(f"{self._id} crashes in a compaction job: {crash}")
            self.crash_wanted()
            return
        except Exception as error:  # the driver decides what a failure means
            outcome = error
        reads = disk.segment_reads
        if reads:
            # Each pass reads every segment of the range once; the rewrite then reads
            # each segment it keeps just before swapping it.
            stats.jobs += 1
            passes = (len(reads) - disk.rewrite_reads) // len(set(reads))
            stats.passes += passes
            stats.passes_max = max(stats.passes_max, passes)
            stats.multi_pass_jobs += passes > 1
        done(outcome)

    def extra_compaction(self, partition: int, rng: random.Random, now_ms: int) -> Step:
        """If this node leads ``partition``: propose a compact command now, whatever
        the driver's rule says, with E at a random batch boundary from the last
        command's E up to the high watermark (past the active segment's base too: the
        replicas roll), T by the rule's horizon."""
        self._at(now_ms)
        replica = self.driver.get((TOPIC, partition))
        settings = self.settings
        if replica is None or settings is None or replica.closed:
            return self._step()
        core = replica.core
        if (
            core.role is not Role.LEADER
            or not core.term_committed
            or replica.compacting
            or replica.compact_queued is not None
            or (core.compact_commands and core.compact_commands[-1][0] > core.compacted_through)
        ):
            return self._step()
        commands = [CompactCommand.from_value(value) for _, value in core.compact_commands]
        dirty_from = max([core.start_offset] + [command.end for command in commands])
        if core.high_watermark <= dirty_from:
            return self._step()
        data = replica.log.read(dirty_from, 1 << 30, upper_offset=core.high_watermark)
        ends = [header.next_offset for _, header in iter_batches(data, verify=False)]
        if not ends:
            return self._step()
        end = rng.choice(ends)
        horizon = now_ms - settings.delete_retention_ms
        old = [command.end for command in commands if command.time_ms <= horizon]
        command = CompactCommand(
            end=end,
            tombstones_end=tombstones_end_for(core, min(old[-1], end) if old else 0),
            zstd=libzstd_version(),
            time_ms=now_ms,
        )
        value = command.to_value()
        self.compaction_stats.extra_triggers += 1
        self._trace.append(f"{self._id} p{partition} extra compaction to {end}")
        self.driver.input(replica, partial(core.propose_compact, value, now_ms))
        return self._step()

    def crash(self) -> None:
        if self._driver is not None:
            for name, value in self._driver.counters.items():
                self.counters[name] = self.counters.get(name, 0) + value
        self._driver = None
        self._pending = None
        self.storages = {partition: log.crash() for partition, log in self.storages.items()}

    def restart(self, now_ms: int) -> Step:
        self._now_ms = now_ms
        self.incarnation += 1
        driver = self._new_driver()
        for partition in sorted(self.storages):
            damage = self.damaged.pop(partition, None)
            if damage is not None and damage.lost_state:
                self.lost_state.add(partition)
            target = self.targets.get(partition)
            founding = self._groups.get(partition)
            if target is None and damage is not None and damage.lost_state and founding:
                # A node knows the placement of its replicas (the host sets it at open):
                # a replica whose state went with its founding configuration finds its
                # peers there.
                target = founding.voters
            if target is not None:
                driver.set_target((TOPIC, partition), tuple(target))
            driver.open_replica((TOPIC, partition), None, damage=damage if self.heal else None)
        return self._step()

    def damage(self, partition: int, rng: random.Random) -> str:
        """(While crashed.) Damage ``partition``'s storage: the end of its log from a
        random batch on, its state file, or both."""
        storage = self.storages[partition]
        lose_state = rng.random() < 0.4
        lose_entries = not lose_state or rng.random() < 0.5
        data = (
            storage.read(storage.start_offset, 1 << 30)
            if storage.end_offset > storage.start_offset
            else b""
        )
        batches = sum(1 for _ in iter_batches(data, verify=False))
        kept = rng.randint(0, batches) if lose_entries and batches else None
        storage.damage(batches_kept=kept, lose_state=lose_state)
        self.damaged[partition] = StorageDamage(
            lost_entries=kept is not None, lost_state=lose_state
        )
        return (
            f"{self._id} p{partition} damaged: kept {kept} of {batches} batches, "
            f"state lost {lose_state}"
        )

    def healing(self, partition: int) -> bool:
        """Whether this node's replica of ``partition`` is damaged or still healing
        (also while it is crashed: the state says so)."""
        if partition in self.damaged:
            return True
        core = self.cores.get(partition)
        if core is not None:
            return core.healing
        storage = self.storages.get(partition)
        if storage is None:
            return False
        if self._driver is not None and self._driver.is_fenced((TOPIC, partition)):
            storage = storage.crash()  # closed: read what the disk kept
        saved = storage.load_state()
        return saved is not None and msgpack.unpackb(saved).get("heal") is not None

    # ---------------------------------------------------------------- inputs

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        self._at(now_ms)
        driver = self.driver
        if isinstance(payload, PeerBundle):
            driver.on_bundle(source, payload)
        elif isinstance(payload, ProduceRequest):
            reply = self._propose(
                source, payload.partition, payload.request_id, payload.batch, payload.acks
            )
            if reply is not None:
                self._outbox.append(Envelope(source, ProduceResult(payload.partition, reply)))
        return self._step()

    def _propose(
        self, client: str, partition: int, request_id: int, batch: bytes, acks: Acks
    ) -> ProduceReply | None:
        """Admit and propose a produce call, as the host does; the refusal if any."""
        try:
            replica = self.driver.admit((TOPIC, partition), 1)
        except UnknownTopicOrPartitionError:
            return ProduceReply(request_id, ProduceStatus.NOT_LEADER)
        except LaminarError as error:  # fenced, too many calls waiting
            return ProduceReply(request_id, ProduceStatus.UNAVAILABLE, detail=str(error))
        replica.calls[request_id] = client
        self.driver.propose(replica, request_id, batch, acks)
        return None

    def tick(self, now_ms: int) -> Step:
        self._at(now_ms)
        driver = self.driver
        for partition, target in self.targets.items():
            driver.set_target((TOPIC, partition), tuple(target))  # set while paused
        until = self._sleep_until_ms
        if self._woken or now_ms >= until:
            driver.sleep_until_ms = NO_WAKE_MS
            driver.tick(now_ms, now_ms - until if now_ms >= until else None)
            self._sleep_until_ms = driver.sleep_until_ms = driver.sleep_until(now_ms)
            self._woken = False
        return self._step()

    def _at(self, now_ms: int) -> None:
        """The time is ``now_ms``: a round whose syncs are due by now completes."""
        self._now_ms = now_ms
        pending = self._pending
        if pending is not None and now_ms >= pending[2]:
            round_, started, _ = pending
            self._pending = None
            results = [self._sync(replica) for replica in round_.syncs]
            self.driver.complete(round_, results, (now_ms - started) / 1000)

    def propose(
        self, partition: int, request_id: int, batch: bytes, acks: Acks, now_ms: int
    ) -> Step:
        """A produce from a test, not over the network; replies land in ``local_replies``."""
        self._at(now_ms)
        reply = self._propose(_LOCAL, partition, request_id, batch, acks)
        if reply is not None:
            self.local_replies.append(reply)
        return self._step()

    def set_target(self, partition: int, target: Iterable[str], now_ms: int) -> Step:
        self._at(now_ms)
        replicas = tuple(NodeId(node) for node in target)
        self.targets[partition] = replicas
        self.driver.set_target((TOPIC, partition), replicas)
        return self._step()

    def accept_data_loss(self, partition: int, members: Iterable[str], now_ms: int) -> Step:
        """An operator accepts the data loss of this node's replica of ``partition``
        (placement's target for it: ``members``)."""
        self._at(now_ms)
        self.targets[partition] = tuple(NodeId(node) for node in members)
        self.driver.set_target((TOPIC, partition), self.targets[partition])
        self.driver.accept_data_loss((TOPIC, partition))
        return self._step()

    def advance_start(self, partition: int, fraction: float, now_ms: int) -> Step:
        """Retention on this replica: drop up to ``fraction`` of its committed log."""
        self._at(now_ms)
        replica = self.driver.get((TOPIC, partition))
        if replica is not None and not replica.core.removed:
            core = replica.core
            start, watermark = core.start_offset, core.high_watermark
            self.driver.advance_start(
                (TOPIC, partition), start + int((watermark - start) * fraction)
            )
            self._trace.append(f"{self._id} p{partition} start {core.start_offset}")
        return self._step()

    def peer_returned(self, peer: str, now_ms: int) -> Step:
        self._at(now_ms)
        self._membership.dead.discard(peer)
        self.driver.peer_returned(peer)
        return self._step()

    def hint_leader_dead(self, dead: str, now_ms: int) -> Step:
        self._at(now_ms)
        self._membership.dead.add(dead)
        self.driver.hint_leader_dead(dead)
        return self._step()

    # ---------------------------------------------------------------- the driver's shell

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        self._outbox.append(Envelope(peer, bundle))

    def flush_wanted(self) -> None:
        pass  # every call ends with the rounds its inputs need (_step)

    def wake_early(self) -> None:
        self._woken = True

    def carried_out(self, replica: SimReplica, ready: Ready, leader_found: bool) -> None:
        partition = replica.key[1]
        for reply in ready.replies:
            client = replica.calls.pop(reply.request_id, None)
            if client == _LOCAL:
                self.local_replies.append(reply)
            elif client is not None:
                self._outbox.append(Envelope(client, ProduceResult(partition, reply)))
        self._observe(partition, replica, ready)

    def replica_closed(self, replica: SimReplica, error: Exception | None) -> None:
        partition = replica.key[1]
        self._reopens[partition] = self._reopens.get(partition, 0) + 1
        self._trace.append(f"{self._id} p{partition} closed: {error}")
        if error is None:
            return
        for request_id, client in replica.calls.items():
            reply = ProduceReply(request_id, ProduceStatus.UNAVAILABLE, detail=str(error))
            if client == _LOCAL:
                self.local_replies.append(reply)
            else:
                self._outbox.append(Envelope(client, ProduceResult(partition, reply)))
        replica.calls.clear()

    # ---------------------------------------------------------------- outputs

    def _step(self) -> Step:
        """Run the flush rounds the inputs made due, and say what to send and when
        to call again."""
        self._flush()
        messages, self._outbox = self._outbox, []
        wake = self._now_ms if self._woken else self._sleep_until_ms
        if self._pending is not None:
            wake = min(wake, self._pending[2])
        trace, self._trace = self._trace, []
        return Step(messages, wake, trace)

    def _flush(self) -> None:
        """The host's flush rounds: one after the other while replicas are dirty; a
        round whose syncs take time (a slow disk) holds the next until it is done."""
        driver = self._driver
        while driver is not None and driver.dirty and self._pending is None:
            round_ = driver.begin_round()
            if round_ is None:
                continue
            if not round_.syncs:
                driver.complete(round_, (), None)
            elif self.disk.sync_delay_ms > 0:
                self._pending = (round_, self._now_ms, self._now_ms + self.disk.sync_delay_ms)
            else:
                driver.complete(round_, [self._sync(r) for r in round_.syncs], 0.0)

    def _sync(self, replica: SimReplica) -> object:
        """Sync one log: None, or the error (a failing disk's ``EIO``)."""
        try:
            replica.log.sync()
        except Exception as error:
            self._trace.append(f"{self._id} p{replica.key[1]} sync failed: {error}")
            return error
        return None

    def _observe(self, partition: int, replica: SimReplica, ready: Ready) -> None:
        history = self._history
        now_ms = self._now_ms
        for event in ready.events:
            if isinstance(event, RoleChanged):
                self._trace.append(f"{self._id} p{partition} {event.role} t{event.term}")
                if event.role is Role.LEADER:
                    history.became_leader(partition, event.term, self._id, now_ms)
            elif isinstance(event, ConfigChanged):
                self._trace.append(f"{self._id} p{partition} config@{event.offset} {event.config}")
            elif isinstance(event, Removed):
                self._trace.append(f"{self._id} p{partition} removed")
        # A reopened replica starts from its log's start again, like a restarted one.
        incarnation = self.incarnation * 1_000 + self._reopens.get(partition, 0)
        history.watermark(self._id, incarnation, partition, ready.high_watermark)
        storage = replica.log
        committed_from = max(ready.committed_from, storage.start_offset)  # a restarted log
        if ready.high_watermark > committed_from:
            data = storage.read(committed_from, 1 << 30, upper_offset=ready.high_watermark)
            history.check_committed(self._id, partition, data)

    def read_check(self, partition: int, rng: random.Random) -> None:
        """Read from a random offset below this replica's high watermark and check."""
        core = self.cores.get(partition)
        if core is None or core.removed:
            return
        watermark = core.high_watermark
        start = core.start_offset
        if watermark <= start:
            return
        offset = rng.randrange(start, watermark)
        data = core.read(offset, rng.choice((1, 200, 1 << 20)))
        self._history.reads += 1
        if not data:
            # Keyed compaction: a follower may hold the leader's compacted range past
            # its own high watermark, so that [offset, watermark) is a gap here.
            after = self.storages[partition].read(offset, 1)
            if after and parse_header(after).base_offset < watermark:
                self._history.violation(f"p{partition}: empty read at {offset} below {watermark}")
            return
        for _, header in iter_batches(data):
            if header.next_offset > watermark:
                self._history.violation(
                    f"p{partition}: read returned offsets up to {header.next_offset} above "
                    f"the high watermark {watermark}"
                )
        self._history.check_committed(self._id, partition, data)


@dataclass
class CompactionStats:
    """(Keyed compaction.) What one node's compaction jobs did."""

    jobs: int = 0
    passes: int = 0
    passes_max: int = 0
    multi_pass_jobs: int = 0
    crashes_mid_compaction: int = 0
    swaps_before_crash: int = 0
    extra_triggers: int = 0

    def add(self, other: CompactionStats) -> None:
        for name in vars(self):
            value = getattr(self, name)
            merged = (
                max(value, other.passes_max)
                if name == "passes_max"
                else value + getattr(other, name)
            )
            setattr(self, name, merged)


TOMBSTONE_SHARE = 0.15
"""(Keyed compaction.) The share of a keyed producer's records that are tombstones."""


class ProducerClient:
    """Produces unique values to one partition, one at a time, with idempotent retries."""

    def __init__(
        self,
        name: str,
        partition: int,
        producer_id: int,
        nodes: list[str],
        history: History,
        rng: random.Random,
        *,
        think_ms: int = 20,
        retry_ms: int = 400,
        keys: int = 0,
    ) -> None:
        """``keys``: 0, each value in a batch of its own without a key; else each
        record has one of this many keys, and some are tombstones (keyed compaction)."""
        self._name = name
        self._keys = keys
        self._record: tuple[bytes | None, bytes | None] | None = None
        self.partition = partition
        self._producer_id = producer_id
        self._nodes = nodes
        self._history = history
        self._rng = rng
        self._think_ms = think_ms
        self._retry_ms = retry_ms
        self.sequence = 0
        self.acked = 0
        self.enabled = True
        self._outstanding: tuple[int, bytes, bytes] | None = None  # sequence, value, batch
        self._attempts: dict[int, int] = {}  # request id -> sequence
        self._next_request = 0
        self._guess: str = rng.choice(nodes)
        self._next_action_ms = 0
        self.last_ack_ms = 0
        self._moved: dict[str, str] = {}
        """Node id -> its address, for a node that moved (what a client's metadata
        refresh tells it); the others' address is their id."""

    @property
    def address(self) -> str:
        return self._name

    def moved(self, node_id: str, address: str) -> None:
        """``node_id`` serves at ``address`` now (leader hints name node ids)."""
        old = self._moved.get(node_id, node_id)
        self._nodes = [address if node == old else node for node in self._nodes]
        self._moved[node_id] = address

    @property
    def idle(self) -> bool:
        return self._outstanding is None

    def start(self, now_ms: int) -> Step:
        self._next_action_ms = now_ms + self._think_ms
        return Step((), self._next_action_ms)

    def crash(self) -> None:  # clients do not crash
        pass

    def restart(self, now_ms: int) -> Step:
        return self.start(now_ms)

    def tick(self, now_ms: int) -> Step:
        if now_ms < self._next_action_ms:
            return Step((), self._next_action_ms)
        if self._outstanding is None:
            if not self.enabled:
                return Step((), None)
            value = f"{self._name}/{self.sequence}".encode()
            if self._keys:
                key = b"k%d" % self._rng.randrange(self._keys)
                record = None if self._rng.random() < TOMBSTONE_SHARE else value
                self._record = (key, record)
                batch = encode_batch(
                    [record],
                    keys=[key],
                    timestamps_ms=now_ms,
                    producer_id=self._producer_id,
                    base_sequence=self.sequence,
                )
            else:
                batch = encode_batch(
                    [value], producer_id=self._producer_id, base_sequence=self.sequence
                )
            self._outstanding = (self.sequence, value, batch)
        elif self._rng.random() < 0.5:
            self._guess = self._rng.choice(self._nodes)  # timed out: try elsewhere
        return self._send(now_ms)

    def _send(self, now_ms: int) -> Step:
        assert self._outstanding is not None
        sequence, _, batch = self._outstanding
        self._next_request += 1
        request_id = self._producer_id * 1_000_000 + self._next_request
        self._attempts[request_id] = sequence
        self._next_action_ms = now_ms + self._retry_ms
        request = ProduceRequest(self.partition, request_id, batch, Acks.ALL)
        return Step((Envelope(self._guess, request),), self._next_action_ms)

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        if not isinstance(payload, ProduceResult) or self._outstanding is None:
            return Step((), self._next_action_ms)
        reply = payload.reply
        sequence = self._attempts.pop(reply.request_id, None)
        current, value, _ = self._outstanding
        if sequence != current:
            return Step((), self._next_action_ms)
        status = reply.status
        if status in (ProduceStatus.OK, ProduceStatus.DUPLICATE):
            checksum = parse_header(self._outstanding[2]).payload_checksum
            self._history.ack(self.partition, value, reply.base_offset, checksum, self._record)
            self._outstanding = None
            self.sequence += 1
            self.acked += 1
            self.last_ack_ms = now_ms
            self._next_action_ms = now_ms + self._think_ms
            return Step((), self._next_action_ms)
        if status is ProduceStatus.NOT_LEADER:
            hint = reply.leader_hint
            if hint is not None and self._moved.get(hint, hint) != source:
                self._guess = self._moved.get(hint, hint)
                return self._send(now_ms)
            self._guess = self._rng.choice(self._nodes)
        elif status is not ProduceStatus.UNAVAILABLE:
            self._history.violation(f"{self._name}: unexpected {status} {reply.detail}")
        self._next_action_ms = now_ms + self._rng.randint(20, 100)
        return Step((), self._next_action_ms)


# ---------------------------------------------------------------------- one seed


@dataclass
class SeedOptions:
    nodes: int = 5
    partitions: int = 2
    replication: int = 3
    fault_ms: int = 8_000
    heal_bound_ms: int = 20_000
    faults: bool = True
    reconfigure: bool | None = None  # None: decided by the seed
    retention: bool | None = None  # None: decided by the seed (half of them)
    damage: bool | None = None  # None: decided by the seed (half); never when reconfigured
    disk_faults: bool | None = None  # None: decided by the seed (half)
    """Failed fsyncs (the replica is fenced, reopened later) and slow disks (its
    replicas stay busy: their input queues fill, produce calls wait)."""
    heal: bool = True  # False: damage is not told to the cores (shows what goes wrong)
    compaction: bool | None = None  # None: decided by the seed (half)
    """A compact topic with a keyed workload and tombstones; per-node segment sizes
    and key map budgets; the driver's rule plus random extra commands; crashes in
    the middle of compaction jobs. The checker compares records (not batches) and
    the replicas' bytes once they applied the same commands."""
    config: ReplicaConfig = field(default_factory=ReplicaConfig.simulation)
    host: HostConfig = field(default_factory=sim_host_config)


@dataclass
class SeedResult:
    seed: int
    violations: list[str]
    trace_hash: str
    acked: int
    reads: int
    elections: int
    simulated_ms: int
    reconfigured: bool
    fenced: int = 0
    """Replicas fenced by a storage failure (all nodes, all incarnations)."""
    inputs_dropped: int = 0
    """Peer messages dropped at a busy replica's full input queue."""
    produce_refused: int = 0
    """Produce calls refused: too many waiting on the replica already."""
    compaction: bool = False
    compactions_proposed: int = 0
    compactions_applied: int = 0
    """Commands applied, all replicas (a job a crash stopped is not counted)."""
    compaction_stats: CompactionStats = field(default_factory=CompactionStats)


class Cluster:
    """A simulated cluster: replica nodes, producer clients and the history."""

    def __init__(self, seed: int, options: SeedOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.sim = Simulator(seed, default_link=LinkConfig(0.0, 1, 5))
        self.history = History()
        self.node_ids = [f"n{index}" for index in range(options.nodes)]
        self.groups: dict[int, GroupConfig] = {}
        for partition in range(options.partitions):
            voters = self.rng.sample(self.node_ids, options.replication)
            self.groups[partition] = GroupConfig(tuple(NodeId(v) for v in voters))
        compaction = options.compaction
        self.compaction = (seed // 2) % 2 == 0 if compaction is None else compaction
        # Its own generator: the other draws of a seed stay as they were.
        compaction_rng = random.Random(f"{seed}/compaction")
        self.settings: TopicSettings | None = None
        if self.compaction:
            self.history.compact = True
            self.settings = TopicSettings(
                retention_bytes=None,
                retention_ms=None,
                cleanup_policy=compaction_rng.choice(("compact", "compact,delete")),
                delete_retention_ms=compaction_rng.choice((300, 1_500, 5_000)),
                min_compaction_lag_ms=compaction_rng.choice((0, 0, 200)),
                max_compaction_lag_ms=compaction_rng.choice((-1, 1_000)),
                min_cleanable_dirty_ratio=compaction_rng.choice((0.1, 0.3, 0.5)),
            )
        self.nodes: dict[str, ReplicaSimNode] = {}
        for node_id in self.node_ids:
            hosted = {p: g for p, g in self.groups.items() if node_id in g.voters}
            host = options.host
            if self.compaction:
                memory = compaction_rng.choice(KEY_MAP_BYTES_CHOICES)
                host = _compaction_host(host, memory)
            node = ReplicaSimNode(
                node_id,
                hosted,
                options.config,
                self.history,
                self.sim.node_rng(node_id),
                host,
            )
            if self.compaction:
                node.settings = self.settings
                node.segment_batches_max = compaction_rng.choice((2, 3, 5, 8))
                node.crash_wanted = partial(self._crash_now, node_id)
            self.nodes[node_id] = node
            self.sim.add_node(node)
        self.clients: list[ProducerClient] = []
        for partition in range(options.partitions):
            for index in range(2):
                name = f"c{partition}.{index}"
                client = ProducerClient(
                    name,
                    partition,
                    partition * 10 + index + 1,
                    self.node_ids,
                    self.history,
                    self.sim.node_rng(name),
                    keys=compaction_rng.choice((4, 12, 40)) if self.compaction else 0,
                )
                self.clients.append(client)
                self.sim.add_node(client)
        self.targets: dict[int, tuple[str, ...]] = {}
        self.dead_for_good: set[str] = set()
        damage = options.damage
        if damage is None:
            damage = seed % 2 == 0
        # Not with a reconfiguration: a replica dead for good and one healing are a
        # majority of three, which waits for an operator (accept_data_loss).
        self.damage = damage and not _reconfigures(seed, options)
        disk_faults = options.disk_faults
        self.disk_faults = seed % 4 in (1, 2) if disk_faults is None else disk_faults
        for node in self.nodes.values():
            node.heal = options.heal
        self.start_membership_oracle()

    # ---------------------------------------------------------------- actions

    def set_target(self, partition: int, target: tuple[str, ...]) -> None:
        self.targets[partition] = target
        self.sim.record(f"target p{partition} {target}")
        for node_id, node in self.nodes.items():
            node.targets[partition] = tuple(NodeId(t) for t in target)
            self.sim.invoke(node_id, _target_command(node, partition, target))

    def schedule_reads(self, until_ms: int, every_ms: int = 50) -> None:
        def read() -> None:
            up = [n for n in self.node_ids if self.sim.is_up(n)]
            if up:
                node = self.nodes[self.rng.choice(up)]
                node.read_check(self.rng.randrange(self.options.partitions), self.rng)
            if self.sim.now_ms + every_ms < until_ms:
                self.sim.at(self.sim.now_ms + every_ms, read)

        self.sim.at(self.sim.now_ms + every_ms, read)

    def start_membership_oracle(self, detect_ms: int = 1_000, every_ms: int = 200) -> None:
        """Stand in for SWIM: tell each node when another has been unreachable for
        ``detect_ms`` (crashed, paused, or across a partition), as a ``dead`` event
        would, so that quiesced followers elect a new leader; and when it is back,
        as an ``alive`` event after ``dead`` would (a quiesced leader wakes)."""
        since: dict[tuple[str, str], int] = {}
        told: set[tuple[str, str]] = set()

        def check() -> None:
            now = self.sim.now_ms
            for a in self.node_ids:
                if not self.sim.is_up(a):
                    continue
                for b in self.node_ids:
                    if a == b:
                        continue
                    pair = (a, b)
                    if _reachable(self.sim, a, b):
                        since.pop(pair, None)
                        if pair in told:  # alive again after dead: SWIM says so too
                            told.discard(pair)
                            self.sim.invoke(a, _returned_command(self.nodes[a], b))
                        continue
                    started = since.setdefault(pair, now)
                    if now - started >= detect_ms and pair not in told:
                        told.add(pair)
                        node = self.nodes[a]
                        self.sim.invoke(a, _hint_command(node, b))
            self.sim.at(now + every_ms, check)

        self.sim.at(self.sim.now_ms + every_ms, check)

    def _crash_now(self, node_id: str) -> None:
        """Crash ``node_id`` at once (next in the queue): its process died."""

        def crash() -> None:
            if not _is_crashed(self.sim, node_id):
                self.sim.crash(node_id)

        self.sim.at(self.sim.now_ms, crash)

    def schedule_compaction_checks(self, until_ms: int, every_ms: int = 300) -> None:
        """(Keyed compaction.) Now and then, every two replicas of a partition that
        applied the same commands hold the same bytes for every offset both hold."""

        def check() -> None:
            for partition in range(self.options.partitions):
                self.check_same_bytes(partition, final=False)
            if self.sim.now_ms + every_ms < until_ms:
                self.sim.at(self.sim.now_ms + every_ms, check)

        self.sim.at(self.sim.now_ms + every_ms, check)

    def _applied(self, partition: int) -> dict[str, tuple[int, SimReplica]]:
        """The replicas of ``partition`` (open, on nodes up) that are not in the
        middle of applying a command: node -> (offset of the last command applied,
        replica)."""
        commands = self.history.commands.get(partition, {})
        found: dict[str, tuple[int, SimReplica]] = {}
        for node_id, node in self.nodes.items():
            replica = node.replica_of(partition)
            if replica is None or replica.closed or replica.core.removed:
                continue
            core = replica.core
            # A command below the log start covers nothing the replica holds (the log
            # restarted past it, or retention removed its range): it counts as applied.
            through = max(core.compacted_through, replica.log.start_offset - 1)
            if partition in node.lost_state:
                if core.healing:
                    # Its log may hold a command's result that its lost state no longer
                    # counts as applied: compared once healed (it has applied every
                    # command again by then).
                    continue
                node.lost_state.discard(partition)
            if (
                replica.compacting
                or replica.compact_queued is not None
                or any(through < offset < core.high_watermark for offset in commands)
            ):
                continue  # a command committed here is not applied yet (or half)
            found[node_id] = (through, replica)
        return found

    def check_same_bytes(self, partition: int, *, final: bool) -> None:
        applied = self._applied(partition)
        history = self.history
        if final:
            commands = history.commands.get(partition, {})
            for member in self._final_voters(partition):
                core = self.nodes[member].cores.get(partition)
                if member not in applied and core is not None:
                    history.violation(
                        f"p{partition}: {member} has not applied every committed compact "
                        f"command at the end (through {core.compacted_through}, "
                        f"commands {sorted(commands)})"
                    )
        names = sorted(applied)
        for index, a in enumerate(names):
            for b in names[index + 1 :]:
                (through_a, replica_a), (through_b, replica_b) = applied[a], applied[b]
                if through_a != through_b:
                    continue
                _compare_bytes(history, partition, (a, replica_a), (b, replica_b))

    def _final_voters(self, partition: int) -> list[str]:
        leader = self.leader_of(partition)
        if leader is None or leader.group_config is None:
            return []
        return [str(m) for m in leader.group_config.voters if m not in self.dead_for_good]

    def check_compacted(self, partition: int) -> None:
        """(Keyed compaction, at the end.) Each final voter holds exactly the records
        the rule keeps of the log as it was, by the last command it applied: the
        newest record of every key below E, every tombstone at or after T, every
        record from E on; so nothing acknowledged is lost but what the rule removes."""
        history = self.history
        raw = history.records.get(partition, {})
        acked = history.acked_records.get(partition, {})
        later: dict[bytes, list[int]] = {}
        for offset in sorted(raw):
            key = raw[offset].key
            if key is not None:
                later.setdefault(key, []).append(offset)
        commands = history.commands.get(partition, {})
        for member in self._final_voters(partition):
            replica = self.nodes[member].replica_of(partition)
            if replica is None or replica.closed:
                continue
            core = replica.core
            applied = [commands[o] for o in commands if o <= core.compacted_through]
            # Commands applied in turn leave the log as one command would with the
            # largest E and the largest T (a tombstone removed stays removed).
            command = (
                CompactCommand(
                    end=max(c.end for c in applied),
                    tombstones_end=max(c.tombstones_end for c in applied),
                )
                if applied
                else None
            )
            start, watermark = core.start_offset, core.high_watermark
            held: set[int] = set()
            if watermark > start:
                data = replica.log.read(start, 1 << 30, upper_offset=watermark)
                for position, header in iter_batches(data, verify=False):
                    if not header.is_control:
                        batch = data[position : position + header.length]
                        held.update(record.offset for record in decode_records(batch))
            for offset, record in raw.items():
                if not start <= offset < watermark:
                    continue
                keep = survives(offset, record, command, later)
                if keep and offset not in held:
                    what = "tombstone" if record.value is None else "newest value"
                    if command is not None and offset >= command.end:
                        what = "record above E"
                    history.violation(
                        f"p{partition}: {member} lost the {what} of {record.key!r} at {offset}"
                        f"{' (acknowledged)' if offset in acked else ''}, command {command}"
                    )
                elif not keep and offset in held:
                    history.violation(
                        f"p{partition}: {member} keeps {record} at {offset}, which {command} "
                        "removes"
                    )

    def leader_of(self, partition: int) -> ReplicaCore | None:
        leaders = [
            core
            for node_id, node in self.nodes.items()
            if self.sim.is_up(node_id)
            and (core := node.cores.get(partition)) is not None
            and core.role is Role.LEADER
        ]
        return max(leaders, key=lambda core: core.term) if leaders else None

    def heal_all(self) -> None:
        sim = self.sim
        sim.heal()
        sim.set_default_link(LinkConfig(0.0, 1, 5))
        for node_id in self.node_ids:
            if node_id in self.dead_for_good:
                continue
            sim.resume(node_id)  # no-op unless paused
            disk = self.nodes[node_id].disk
            disk.sync_delay_ms = disk.failing_syncs = 0
            disk.crash_in_swaps = None
            if _is_crashed(sim, node_id):
                sim.restart(node_id)

    # ---------------------------------------------------------------- checks

    def settled(self, acked_before: dict[str, int]) -> bool:
        """Every partition has a leader, every client got a new ack, targets reached."""
        for client in self.clients:
            if client.acked <= acked_before[client.address] or not client.idle:
                return False
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if leader is None:
                return False
            target = self.targets.get(partition)
            config = leader.group_config
            if target is not None and (
                config is None or set(config.voters) != set(target) or config.learners
            ):
                return False
            if leader.high_watermark < leader.end_offset:
                return False
        return True

    def voters_caught_up(self) -> bool:
        """Every leader committed its whole log, and every live voter holds it."""
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if (
                leader is None
                or leader.group_config is None
                or leader.high_watermark < leader.end_offset
            ):
                return False
            for member in leader.group_config.voters:
                if member in self.dead_for_good:
                    continue
                core = self.nodes[member].cores.get(partition)
                if core is None or core.high_watermark < leader.high_watermark:
                    return False
            if self.compaction and not set(self._final_voters(partition)) <= set(
                self._applied(partition)
            ):
                return False
        return True

    def final_checks(self) -> None:
        history = self.history
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if leader is None:
                history.violation(f"p{partition}: no leader at the end")
                continue
            if self.compaction:
                self.check_same_bytes(partition, final=True)
                self.check_compacted(partition)
            else:
                data = leader.read(leader.start_offset, 1 << 30) if leader.high_watermark else b""
                history.check_acknowledged(f"p{partition}", partition, data, leader.start_offset)
            # Every member of the final configuration holds the committed log.
            config = leader.group_config
            assert config is not None
            for member in config.voters:
                if member in self.dead_for_good:
                    continue
                core = self.nodes[member].cores.get(partition)
                if core is None or core.high_watermark < leader.high_watermark:
                    seen = None if core is None else core.high_watermark
                    history.violation(
                        f"p{partition}: voter {member} at {seen}, leader at {leader.high_watermark}"
                    )


KEY_MAP_BYTES_CHOICES = (3 * KEY_ENTRY_BYTES, 8 * KEY_ENTRY_BYTES, 64 << 20)
"""(Keyed compaction.) Each node's key map budget: a few keys (several passes over
a range) or plenty (one pass)."""


def _compaction_host(host: HostConfig, memory_bytes_max: int) -> HostConfig:
    """``host`` with a retention check (the driver's compaction rule) every 250 ms
    and a key map of ``memory_bytes_max``: set past the 1 MiB floor a node accepts,
    so that the few keys of a simulated topic need several passes."""
    config = replace(host, retention_check_ms=250)
    object.__setattr__(config, "compaction_memory_bytes_max", memory_bytes_max)
    return config


def _compare_bytes(
    history: History, partition: int, a: tuple[str, SimReplica], b: tuple[str, SimReplica]
) -> None:
    """Two replicas that applied the same commands: the same batch bytes for every
    offset both hold below both high watermarks."""
    (name_a, replica_a), (name_b, replica_b) = a, b
    low = max(replica_a.log.start_offset, replica_b.log.start_offset)
    high = min(replica_a.core.high_watermark, replica_b.core.high_watermark)
    if high <= low:
        return
    batches_a = _batches_in(replica_a.log, low, high)
    batches_b = _batches_in(replica_b.log, low, high)
    if batches_a != batches_b:
        differ = min(
            base
            for base in set(batches_a) | set(batches_b)
            if batches_a.get(base) != batches_b.get(base)
        )
        history.violation(
            f"p{partition}: {name_a} and {name_b} applied the same commands "
            f"(through {replica_a.core.compacted_through}) and hold different bytes at "
            f"offset {differ} (range {low}..{high})"
        )


def _batches_in(log: LogStorage, low: int, high: int) -> dict[int, bytes]:
    data = log.read(low, 1 << 30, upper_offset=high)
    return {
        header.base_offset: bytes(data[position : position + header.length])
        for position, header in iter_batches(data, verify=False)
        if header.base_offset >= low and header.next_offset <= high
    }


def _target_command(
    node: ReplicaSimNode, partition: int, target: tuple[str, ...]
) -> Callable[[int], Step]:
    def command(now_ms: int) -> Step:
        return node.set_target(partition, target, now_ms)

    return command


def _returned_command(node: ReplicaSimNode, peer: str) -> Callable[[int], Step]:
    def command(now_ms: int) -> Step:
        return node.peer_returned(peer, now_ms)

    return command


def _hint_command(node: ReplicaSimNode, dead: str) -> Callable[[int], Step]:
    def command(now_ms: int) -> Step:
        return node.hint_leader_dead(dead, now_ms)

    return command


def _reachable(sim: Simulator, a: str, b: str) -> bool:
    """Whether ``a`` can hear from ``b`` now (``b`` up, same side of any partition)."""
    if not sim.is_up(b):
        return False
    groups = sim._groups
    return groups is None or groups.get(a, -1) == groups.get(b, -1)


def _is_crashed(sim: Simulator, address: str) -> bool:
    return sim._slots[address].status == 2


def _random_faults(cluster: Cluster, start_ms: int, end_ms: int) -> None:
    """Schedule random faults in ``[start_ms, end_ms)``."""
    rng = cluster.rng
    sim = cluster.sim
    time = start_ms
    while True:
        time += rng.randint(200, 1500)
        if time >= end_ms:
            break
        kinds: tuple[str, ...] = ("crash", "crash", "restart", "partition", "heal", "pause", "loss")
        if cluster.damage:
            kinds += ("damage", "damage")
        if cluster.disk_faults:
            kinds += ("fsync_fail", "slow_disk")
        if cluster.compaction:
            kinds += ("compaction_crash", "compaction_crash")
        kind = rng.choice(kinds)
        sim.at(time, _fault_action(cluster, kind, rng.random()))


def _fault_action(cluster: Cluster, kind: str, draw: float) -> Callable[[], None]:
    sim = cluster.sim
    rng = random.Random(draw)
    candidates = [n for n in cluster.node_ids if n not in cluster.dead_for_good]

    def act() -> None:
        if kind == "crash":
            up = [n for n in candidates if sim.is_up(n)]
            if up:
                sim.crash(rng.choice(up))
        elif kind == "restart":
            down = [n for n in candidates if _is_crashed(sim, n)]
            if down:
                sim.restart(rng.choice(down))
        elif kind == "partition":
            everyone = cluster.node_ids + [client.address for client in cluster.clients]
            rng.shuffle(everyone)
            cut = rng.randint(1, len(everyone) - 1)
            sim.partition([everyone[:cut], everyone[cut:]])
        elif kind == "heal":
            sim.heal()
        elif kind == "pause":
            up = [n for n in candidates if sim.is_up(n)]
            if up:
                victim = rng.choice(up)
                sim.pause(victim)
                sim.at(sim.now_ms + rng.randint(100, 2000), lambda: sim.resume(victim))
        elif kind == "damage":
            _damage(cluster, candidates, rng)
        elif kind == "fsync_fail":
            node = cluster.nodes[rng.choice(candidates)]
            node.disk.failing_syncs += rng.randint(1, 3)
            sim.record(f"{node.address} fails its next {node.disk.failing_syncs} syncs")
        elif kind == "slow_disk":
            _slow_disk(cluster, rng.choice(candidates), rng)
        elif kind == "compaction_crash":
            node = cluster.nodes[rng.choice(candidates)]
            node.disk.crash_in_swaps = rng.randint(0, 3)
            sim.record(f"{node.address} crashes before its {node.disk.crash_in_swaps}th next swap")
        else:
            loss = rng.choice((0.0, 0.05, 0.2, 0.5))
            sim.set_default_link(LinkConfig(loss, 1, rng.choice((5, 20, 100))))

    return act


def _slow_disk(cluster: Cluster, node_id: str, rng: random.Random) -> None:
    """``node_id``'s syncs take long for a while (a disk stalling): its flush rounds
    hold their replicas busy, their inputs queue (peer messages dropped beyond the
    queue), produce calls wait."""
    sim = cluster.sim
    disk = cluster.nodes[node_id].disk
    disk.sync_delay_ms = rng.choice((20, 100, 400, 1_000))
    sim.record(f"{node_id} disk slow: {disk.sync_delay_ms} ms per round")

    def recover() -> None:
        disk.sync_delay_ms = 0

    sim.at(sim.now_ms + rng.randint(300, 3_000), recover)


def _damage(cluster: Cluster, candidates: list[str], rng: random.Random) -> None:
    """Crash a node (if up) and damage one of its replicas, unless a replica of that
    partition is damaged or healing already; it restarts later (a restart fault, or
    the final heal)."""
    sim = cluster.sim
    node_id = rng.choice(candidates)
    node = cluster.nodes[node_id]
    partitions = [
        p
        for p in sorted(node.storages)
        if not any(other.healing(p) for other in cluster.nodes.values())
    ]
    if not partitions:
        return
    if not _is_crashed(sim, node_id):
        sim.resume(node_id)
        sim.crash(node_id)
    sim.record(node.damage(rng.choice(partitions), rng))


def _schedule_retention(cluster: Cluster, start_ms: int, end_ms: int) -> None:
    """Now and then a random replica drops part of its committed log (retention), so
    that followers that were away must restart their logs at the leader's start."""
    rng = cluster.rng
    time = start_ms
    while True:
        time += rng.randint(300, 1500)
        if time >= end_ms:
            break
        node_id = rng.choice(cluster.node_ids)
        partition = rng.randrange(cluster.options.partitions)
        fraction = rng.random()
        node = cluster.nodes[node_id]

        def command(
            now_ms: int, node: ReplicaSimNode = node, p: int = partition, f: float = fraction
        ) -> Step:
            return node.advance_start(p, f, now_ms)

        cluster.sim.at(time, partial(cluster.sim.invoke, node_id, command))


def _schedule_extra_compactions(cluster: Cluster, start_ms: int, end_ms: int) -> None:
    """(Keyed compaction.) Now and then the leader of a random partition proposes a
    command whatever the driver's rule says (:meth:`ReplicaSimNode.extra_compaction`)."""
    rng = cluster.rng
    time = start_ms
    while True:
        time += rng.randint(200, 1_200)
        if time >= end_ms:
            break
        partition = rng.randrange(cluster.options.partitions)
        draw = rng.random()

        def act(p: int = partition, draw: float = draw) -> None:
            for node_id, node in cluster.nodes.items():
                core = node.cores.get(p)
                if core is not None and core.role is Role.LEADER:
                    command = partial(_extra_command, node, p, random.Random(draw))
                    cluster.sim.invoke(node_id, command)

        cluster.sim.at(time, act)


def _extra_command(node: ReplicaSimNode, partition: int, rng: random.Random, now_ms: int) -> Step:
    return node.extra_compaction(partition, rng, now_ms)


def _schedule_reconfiguration(cluster: Cluster, at_ms: int) -> None:
    """Replace a (permanently dead) replica, add a node, or drain one."""
    rng = cluster.rng
    partition = rng.randrange(cluster.options.partitions)
    voters = [str(v) for v in cluster.groups[partition].voters]
    spares = [n for n in cluster.node_ids if n not in voters]
    kind = rng.choice(("replace_dead", "add", "drain"))
    if kind == "replace_dead" and spares:
        victim = rng.choice(voters)
        target = tuple(spares[0] if v == victim else v for v in voters)

        def replace() -> None:
            cluster.dead_for_good.add(victim)
            if cluster.sim.is_up(victim) or not _is_crashed(cluster.sim, victim):
                cluster.sim.crash(victim)
            cluster.set_target(partition, target)

        cluster.sim.at(at_ms, replace)
    elif kind == "add" and spares:
        target = (*voters, spares[0])
        cluster.sim.at(at_ms, lambda: cluster.set_target(partition, target))
    else:
        target = tuple(voters[1:]) + ((spares[0],) if spares else ())
        if len(target) < 1:
            return
        cluster.sim.at(at_ms, lambda: cluster.set_target(partition, target))


def run_seed(seed: int, options: SeedOptions | None = None) -> SeedResult:
    """Run one seed; an exception inside a core is reported as a violation."""
    options = options or SeedOptions()
    cluster = Cluster(seed, options)
    try:
        reconfigured = _run(cluster)
    except Exception as error:  # a failed assertion in a core is a finding, not a crash
        cluster.history.violation(f"exception at {cluster.sim.now_ms} ms: {error!r}")
        reconfigured = False
    stats = CompactionStats()
    for node in cluster.nodes.values():
        stats.add(node.compaction_stats)
    return SeedResult(
        seed=seed,
        violations=cluster.history.violations,
        trace_hash=cluster.sim.trace_hash(),
        acked=sum(client.acked for client in cluster.clients),
        reads=cluster.history.reads,
        elections=len(cluster.history.elections),
        simulated_ms=cluster.sim.now_ms,
        reconfigured=reconfigured,
        fenced=sum(node.counter("storage_failures") for node in cluster.nodes.values()),
        inputs_dropped=sum(node.counter("inputs_dropped") for node in cluster.nodes.values()),
        produce_refused=sum(node.counter("produce_refused") for node in cluster.nodes.values()),
        compaction=cluster.compaction,
        compactions_proposed=sum(
            node.counter("compactions_proposed") for node in cluster.nodes.values()
        ),
        compactions_applied=sum(
            node.counter("compactions_applied") for node in cluster.nodes.values()
        ),
        compaction_stats=stats,
    )


def _reconfigures(seed: int, options: SeedOptions) -> bool:
    if options.reconfigure is None:
        return seed % 3 == 0
    return options.reconfigure


def _run(cluster: Cluster) -> bool:
    options = cluster.options
    seed = cluster.seed
    sim = cluster.sim
    reconfigure = _reconfigures(seed, options)
    warmup_ms = 1_500
    fault_end = warmup_ms + options.fault_ms
    cluster.schedule_reads(fault_end + options.heal_bound_ms)
    if options.faults:
        _random_faults(cluster, warmup_ms, fault_end)
    if reconfigure:
        _schedule_reconfiguration(cluster, cluster.rng.randint(warmup_ms, fault_end))
    retention = options.retention
    if retention is None:
        retention = seed % 2 == 1
    if retention:
        _schedule_retention(cluster, warmup_ms, fault_end)
    if cluster.compaction:
        cluster.schedule_compaction_checks(fault_end + options.heal_bound_ms)
        _schedule_extra_compactions(cluster, warmup_ms, fault_end)
    sim.run_until(fault_end)
    cluster.heal_all()
    sim.record("healed")
    acked_before = {client.address: client.acked for client in cluster.clients}
    if not sim.run_for(options.heal_bound_ms, lambda: cluster.settled(acked_before)):
        states = {
            p: (
                (leader.node_id, leader.term, leader.group_config)
                if (leader := cluster.leader_of(p))
                else None
            )
            for p in range(options.partitions)
        }
        cluster.history.violation(
            f"liveness: not settled {options.heal_bound_ms} ms after healing; "
            f"leaders {states}, targets {cluster.targets}, "
            f"clients {[(c.address, c.acked, c.idle) for c in cluster.clients]}"
        )
    for client in cluster.clients:
        client.enabled = False
    # Let outstanding writes finish and followers learn the final commit.
    sim.run_for(1_000, lambda: all(client.idle for client in cluster.clients))
    # Voters that were cut off catch up within a bound (part of liveness).
    sim.run_for(5_000, cluster.voters_caught_up)
    cluster.final_checks()
    return reconfigure
