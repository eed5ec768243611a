"""Keyed compaction through the replica driver: memory logs, a hand-turned clock,
and a hand-delivered network between drivers (no event loop).

The leader's driver decides (on the retention tick), its core appends the command,
and every replica's driver applies it once committed: rolls its active segment
when it begins below E, compacts the sealed segments below E, and reports it done.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from laminar.errors import ConfigError, ZstdVersionError
from laminar.records import (
    decode_records,
    encode_batch,
    encode_control_batch,
    iter_batches,
    parse_header,
)
from laminar.replica.coalesce import PeerBundle
from laminar.replica.compaction_control import CompactionRule, Decision, Run, compaction_point
from laminar.replica.config import ReplicaConfig
from laminar.replica.messages import Ready
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.compaction import CompactCommand
from laminar.segment.config import LogConfig
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import LogStorage
from laminar.server.compactor import (
    SCAN_BYTES_PER_CHECK,
    CompactionCancelledError,
    DirtyScan,
    Pacer,
    log_view,
    run_command,
)
from laminar.server.driver import HostConfig, JobDone, ReplicaDriver, Standalone
from laminar.server.placement_keeper import TopicSettings
from laminar.testing.replica_sim import SimReplica, memory_driver, sim_host_config

KEY = ("t", 0)
CHECK_MS = 1_000
COMPACT = TopicSettings(
    retention_bytes=None,
    retention_ms=None,
    cleanup_policy="compact",
    delete_retention_ms=0,
    min_compaction_lag_ms=0,
    max_compaction_lag_ms=-1,
    min_cleanable_dirty_ratio=0.5,
)


class _Owner(Standalone):
    def __init__(self, settings: TopicSettings | None) -> None:
        self.settings = settings

    def settings_of(self, key: tuple[str, int]) -> TopicSettings | None:
        return self.settings

    def peer_alive(self, node_id: str) -> bool:
        return True


class _Net:
    """Drivers of one group's nodes, their bundles delivered by hand."""

    def __init__(
        self,
        nodes: tuple[str, ...],
        *,
        settings: TopicSettings | None = COMPACT,
        segment_batches: dict[str, int] | None = None,
        run_job: Callable[[Callable[[], int], JobDone], None] | None = None,
    ) -> None:
        self.now_ms = 0
        self.wire: deque[tuple[str, str, PeerBundle]] = deque()
        self.cut: set[str] = set()
        """Nodes cut off: their bundles, both ways, are lost."""
        self.owner = _Owner(settings)
        self.logs: dict[str, MemoryLog] = {}
        self.drivers: dict[str, ReplicaDriver[SimReplica]] = {}
        host_config = dataclasses.replace(sim_host_config(), retention_check_ms=CHECK_MS)
        for node in nodes:
            batches = (segment_batches or {}).get(node, 4)
            self.drivers[node] = self._driver(node, host_config, batches, run_job)
        group = GroupConfig(tuple(NodeId(n) for n in nodes))
        for driver in self.drivers.values():
            driver.open_replica(KEY, group)

    def _driver(
        self,
        node: str,
        host_config: HostConfig,
        segment_batches: int,
        run_job: Callable[[Callable[[], int], JobDone], None] | None,
    ) -> ReplicaDriver[SimReplica]:
        net = self

        class Shell:
            def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
                net.wire.append((node, peer, bundle))

            def flush_wanted(self) -> None:
                pass

            def wake_early(self) -> None:
                pass

            def carried_out(self, replica: SimReplica, ready: Ready, leader_found: bool) -> None:
                pass

            def replica_closed(self, replica: SimReplica, error: Exception | None) -> None:
                pass

        def open_log(directory: str, config: LogConfig) -> LogStorage:
            log = self.logs[node] = MemoryLog(fsync=False, segment_batches_max=segment_batches)
            return log

        driver = memory_driver(
            node,
            ReplicaConfig.simulation(),
            owner=self.owner,
            shell=Shell(),
            clock=lambda: self.now_ms,
            rng=random.Random(node),
            host_config=host_config,
            log_factory=open_log,
        )
        if run_job is not None:
            driver._run_job = run_job
        return driver

    def replica(self, node: str) -> SimReplica:
        replica = self.drivers[node].get(KEY)
        assert replica is not None
        return replica

    def leader(self) -> SimReplica:
        (leader,) = [
            driver.get(KEY)
            for driver in self.drivers.values()
            if driver.get(KEY) is not None and driver.get(KEY).core.role is Role.LEADER  # type: ignore[union-attr]
        ]
        assert leader is not None
        return leader

    def settle(self) -> None:
        for _ in range(10_000):
            for driver in self.drivers.values():
                while driver.dirty:
                    round_ = driver.begin_round()
                    if round_ is not None:
                        for replica in round_.syncs:
                            replica.log.sync()
                        driver.complete(round_, [None] * len(round_.syncs), 0.0)
            if not self.wire:
                return
            source, destination, bundle = self.wire.popleft()
            if source not in self.cut and destination not in self.cut:
                self.drivers[destination].on_bundle(source, bundle)
        raise AssertionError("the network did not go quiet")

    def run_for(self, duration_ms: int, step_ms: int = 10) -> None:
        end = self.now_ms + duration_ms
        while self.now_ms < end:
            self.now_ms += step_ms
            for driver in self.drivers.values():
                driver.tick(self.now_ms, 0)
            self.settle()

    def produce(self, values: list[tuple[bytes, bytes | None]]) -> None:
        """One batch per (key, value), acks=all, each committed before the next."""
        for index, (key, value) in enumerate(values):
            leader = self.leader()
            driver = self.drivers[str(leader.core.node_id)]
            batch = encode_batch([value], keys=[key], timestamps_ms=self.now_ms)
            driver.propose(leader, index, batch, Acks.ALL)
            self.settle()


def _batches(log: LogStorage, start: int = 0) -> list[bytes]:
    """Every batch of ``log`` from ``start`` on, raw."""
    out: list[bytes] = []
    offset = max(start, log.start_offset)
    while offset < log.end_offset:
        data = log.read(offset, 1 << 20)
        for position, header in iter_batches(data, verify=False):
            out.append(bytes(data[position : position + header.length]))
            offset = header.next_offset
    return out


def _records(log: LogStorage, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of the data records below ``end``."""
    found = []
    for batch in _batches(log):
        header = parse_header(batch)
        if header.is_control or header.base_offset >= end:
            continue
        for record in decode_records(batch):
            found.append((record.offset, record.key, record.value))
    return found


def _commands(net: _Net, node: str) -> list[tuple[int, CompactCommand]]:
    core = net.replica(node).core
    return [(offset, CompactCommand.from_value(value)) for offset, value in core.compact_commands]


def _keyed(count: int, keys: int) -> list[tuple[bytes, bytes | None]]:
    return [(b"k%d" % (i % keys), b"v%d" % i) for i in range(count)]


def test_a_single_replica_compacts_below_the_agreed_end_and_keeps_the_newest_of_each_key() -> None:
    net = _Net(("a",))
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(CHECK_MS + 100)
    replica = net.replica("a")
    driver = net.drivers["a"]
    assert driver.counters["compactions_proposed"] == 1
    assert driver.counters["compactions_applied"] == 1
    ((offset, command),) = _commands(net, "a")
    assert replica.core.compacted_through == offset
    # E stopped at the active segment's base at decision time, a batch boundary.
    assert 0 < command.end <= offset
    below = _records(replica.log, command.end)
    keys = [key for _, key, _ in below]
    assert len(keys) == len(set(keys)), below  # one record per key below E
    raw = _keyed(30, 3)
    for _, key, value in below:
        newest = max(i for i, (k, _) in enumerate(raw) if k == key and i + 1 < command.end)
        assert value == raw[newest][1]
    # Nothing at or above E changed: the records there are all still present.
    above = [r for b in _batches(replica.log) for r in decode_records(b)
             if not parse_header(b).is_control and r.offset >= command.end]  # fmt: skip
    assert len(above) == 30 + 1 - command.end  # offsets 1..30 hold the records


def test_no_command_below_the_ratio_and_a_next_one_once_enough_is_dirty() -> None:
    net = _Net(("a",))
    net.run_for(500)
    net.produce(_keyed(30, 30))  # distinct keys: the first command removes nothing
    net.run_for(CHECK_MS + 100)
    assert net.drivers["a"].counters["compactions_applied"] == 1
    # One more sealed segment (4 batches) against 28 clean ones: below the ratio.
    net.produce(_keyed(4, 30))
    net.run_for(CHECK_MS + 100)
    assert net.drivers["a"].counters["compactions_proposed"] == 1
    net.produce(_keyed(40, 30))  # now the dirty part outweighs the clean one
    net.run_for(CHECK_MS + 100)
    assert net.drivers["a"].counters["compactions_proposed"] == 2
    (_, first), (_, second) = _commands(net, "a")
    assert second.end > first.end


def test_the_minimum_lag_keeps_young_records_out_of_the_range() -> None:
    young = dataclasses.replace(COMPACT, min_compaction_lag_ms=60_000)
    net = _Net(("a",), settings=young)
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(3 * CHECK_MS)
    assert net.drivers["a"].counters["compactions_proposed"] == 0


def test_the_maximum_lag_counts_from_the_oldest_record_of_a_sealed_segment() -> None:
    lagging = dataclasses.replace(COMPACT, max_compaction_lag_ms=5_000,
                                  min_cleanable_dirty_ratio=0.9)  # fmt: skip
    net = _Net(("a",), settings=lagging)
    driver = net.drivers["a"]
    net.run_for(500)
    net.produce(_keyed(30, 30))
    net.run_for(6_000)  # the first command (the ratio: nothing clean yet)
    assert driver.counters["compactions_applied"] == 1
    old_ms, old = net.now_ms, net.replica("a").log.end_offset
    net.produce([(b"old", b"v")])  # rolls the segment the first command stopped at
    net.run_for(CHECK_MS)  # which the maximum lag takes now, up to the old record
    assert driver.counters["compactions_applied"] == 2 and _commands(net, "a")[-1][1].end == old
    net.run_for(3_000 - CHECK_MS)
    net.produce(_keyed(8, 30))  # newer records after it, in its segment and the next
    log = net.replica("a").log
    (segment,) = [base for base, end in log.sealed_segments() if base <= old < end]
    summary = log.segment_summary(segment)
    assert (summary.oldest_timestamp_ms, summary.newest_timestamp_ms) == (old_ms, old_ms + 3_000)
    net.run_for(old_ms + 5_000 - net.now_ms)
    assert driver.counters["compactions_proposed"] == 2  # below the ratio, within the lag
    # Due once the old record is 5 s old, not once its segment's newest is.
    net.run_for(CHECK_MS + 100)
    assert driver.counters["compactions_proposed"] == 3
    assert _commands(net, "a")[-1][1].end > old


def test_a_non_compact_topic_is_never_compacted() -> None:
    net = _Net(("a",), settings=dataclasses.replace(COMPACT, cleanup_policy="delete"))
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(3 * CHECK_MS)
    assert net.drivers["a"].counters["compactions_proposed"] == 0
    assert net.replica("a").core.compact_commands == ()


def test_compaction_is_prepared_once_and_only_for_a_compact_topic() -> None:
    """The host's hook (it imports pyarrow, keyed compaction's key map, on its
    compaction thread) runs at the first check that finds a replica of a compact
    topic, once: a node without one never loads it."""
    net = _Net(("a",), settings=dataclasses.replace(COMPACT, cleanup_policy="delete"))
    prepared: list[str] = []
    net.drivers["a"]._prepare_compaction = lambda: prepared.append("key map")
    net.run_for(3 * CHECK_MS)
    assert prepared == []
    net.owner.settings = COMPACT  # the topic altered to compact
    net.run_for(3 * CHECK_MS)
    assert prepared == ["key map"]


def test_a_newer_command_supersedes_a_queued_one() -> None:
    jobs: list[tuple[Callable[[], int], JobDone]] = []
    net = _Net(("a",), settings=None, run_job=lambda job, done: jobs.append((job, done)))
    net.run_for(500)
    net.produce(_keyed(20, 2))
    replica = net.replica("a")
    core = replica.core
    for end in (5, 9, 13):
        value = CompactCommand(end, 0, codec=0).to_value()
        net.drivers["a"].input(replica, partial(core.propose_compact, value, net.now_ms))
        net.settle()
    first, _, third = [offset for offset, _ in core.compact_commands]
    assert len(jobs) == 1  # the first runs; the second was queued, then superseded
    job, done = jobs.pop()
    done(job())
    net.settle()
    assert core.compacted_through == first
    assert len(jobs) == 1
    job, done = jobs.pop()
    done(job())
    net.settle()
    assert core.compacted_through == third
    assert jobs == []


def caplog_fenced(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        "replica fenced t/0" in r.getMessage() and "simulated read failure" in r.getMessage()
        for r in caplog.records
    )


def test_a_failed_compaction_fences_the_replica(caplog: pytest.LogCaptureFixture) -> None:
    def failing(job: Callable[[], int], done: JobDone) -> None:
        done(OSError(5, "simulated read failure"))

    net = _Net(("a",), run_job=failing)
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(CHECK_MS + 100)
    assert net.drivers["a"].counters["storage_failures"] >= 1
    assert caplog_fenced(caplog)


def test_a_replica_with_another_libzstd_leaves_the_command_unapplied_unfenced() -> None:
    def other_zstd(job: Callable[[], int], done: JobDone) -> None:
        done(ZstdVersionError("1.0.0", "9.9.9"))

    net = _Net(("a",), run_job=other_zstd)
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(CHECK_MS + 100)
    driver = net.drivers["a"]
    assert driver.counters["compactions_refused"] == 1
    assert not driver.is_fenced(KEY) and driver.counters["storage_failures"] == 0
    assert net.replica("a").core.compacted_through == -1


def test_three_replicas_with_different_segments_serve_the_same_batches() -> None:
    net = _Net(("a", "b", "c"), segment_batches={"a": 3, "b": 4, "c": 7})
    net.run_for(2_000)
    values: list[tuple[bytes, bytes | None]] = _keyed(60, 5)
    values[40] = (b"k0", None)  # a tombstone
    net.produce(values)
    net.run_for(2 * CHECK_MS + 500)
    applied = [net.drivers[n].counters["compactions_applied"] for n in "abc"]
    assert all(count >= 1 for count in applied), applied
    done = {net.replica(n).core.compacted_through for n in "abc"}
    assert len(done) == 1 and done != {-1}
    logs = [_batches(net.replica(n).log) for n in "abc"]
    assert logs[0] == logs[1] == logs[2]
    # And something was removed (the logs have gaps now); no control batch was.
    offsets = [parse_header(b).base_offset for b in logs[0]]
    assert len(offsets) < net.replica("a").log.end_offset
    controls = [b for b in logs[0] if parse_header(b).is_control]
    assert len(controls) == 1 + len(_commands(net, "a"))  # the term's noop, the commands
    # Elections and log matching work over the gaps: another replica leads, the
    # group goes on, and the logs stay alike.
    old_leader = net.leader()
    successor = next(n for n in "abc" if NodeId(n) != old_leader.core.node_id)
    net.drivers[str(old_leader.core.node_id)].transfer_leadership(KEY, NodeId(successor))
    net.run_for(1_000)
    assert net.leader().core.node_id == NodeId(successor)
    net.produce(_keyed(20, 5))
    net.run_for(2 * CHECK_MS + 500)
    logs = [_batches(net.replica(n).log) for n in "abc"]
    assert logs[0] == logs[1] == logs[2]
    assert len({net.replica(n).core.high_watermark for n in "abc"}) == 1


def test_a_follower_away_gets_no_deleted_key_back() -> None:
    """A follower cut off before a key's tombstone catches up later from a leader
    that compacted meanwhile. Without holding T down to its match offset, the
    leader's log it fetches has the tombstone removed (T passed it), and the
    follower's own older record of that key, which only the tombstone superseded,
    survives its compaction by the same commands: the deleted key comes back on
    that one replica, which serves other bytes than the others for its offset."""
    net = _Net(("a", "b", "c"), segment_batches={"a": 3, "b": 4, "c": 2})
    net.run_for(1_000)
    leader = str(net.leader().core.node_id)
    away = next(n for n in "abc" if n != leader)
    net.produce([(b"gone", b"old"), *_keyed(6, 3)])
    net.run_for(CHECK_MS + 100)
    net.cut.add(away)
    net.produce([(b"gone", None), *_keyed(12, 3)])
    net.run_for(CHECK_MS + 100)
    net.produce(_keyed(12, 3))
    net.run_for(2 * CHECK_MS + 100)
    net.produce(_keyed(12, 3))
    net.run_for(2 * CHECK_MS + 100)
    net.cut.clear()
    net.run_for(3 * CHECK_MS)
    net.produce(_keyed(12, 3))
    net.run_for(3 * CHECK_MS)
    logs = {n: _batches(net.replica(n).log) for n in "abc"}
    assert len({net.replica(n).core.compacted_through for n in "abc"}) == 1
    end = min(net.replica(n).core.high_watermark for n in "abc")
    kept = [(o, v) for o, k, v in _records(net.replica(away).log, end) if k == b"gone"]
    assert b"old" not in [v for _, v in kept], kept
    assert logs[away] == logs[leader]


def test_tombstones_end_never_goes_back() -> None:
    """A new leader that does not know a cut-off follower's match offset holds T
    down to 0, but never below the previous command's T: a replica that skips a
    queued command, or reruns only the newest after a restart, compacts by the
    newest alone, which must remove every tombstone the earlier one did (without
    this, the simulator's seed 127 had two replicas differ by one tombstone)."""
    net = _Net(("a", "b", "c"))
    net.run_for(1_000)
    for _ in range(3):
        net.produce([(b"gone", None), *_keyed(12, 3)])
        net.run_for(CHECK_MS + 100)
    leader = str(net.leader().core.node_id)
    previous = _commands(net, leader)[-1][1]
    assert previous.tombstones_end > 0
    successor, away = [n for n in "abc" if n != leader]
    net.cut.add(away)
    net.drivers[leader].transfer_leadership(KEY, NodeId(successor))
    net.run_for(500)
    assert str(net.leader().core.node_id) == successor
    net.produce(_keyed(24, 3))
    net.run_for(CHECK_MS + 100)
    command = _commands(net, successor)[-1][1]
    assert command.end > previous.end  # a command of the new leader's
    assert command.tombstones_end >= previous.tombstones_end


@pytest.mark.parametrize("segment_batches", [2, 5])
def test_a_learner_added_after_compaction_catches_up_from_the_gapped_log(
    segment_batches: int,
) -> None:
    net = _Net(("a",), segment_batches={"a": segment_batches})
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(CHECK_MS + 100)
    assert net.drivers["a"].counters["compactions_applied"] == 1
    # A second node joins: placement's target adds it as a learner, then a voter.
    net.drivers["b"] = net._driver(
        "b", dataclasses.replace(sim_host_config(), retention_check_ms=CHECK_MS), 4, None
    )
    net.drivers["a"].set_target(KEY, ("a", "b"))
    net.run_for(3_000)
    replica_b = net.replica("b")
    assert NodeId("b") in net.replica("a").core.group_config.voters  # type: ignore[union-attr]
    assert _batches(replica_b.log) == _batches(net.replica("a").log)


def test_the_pacer_holds_a_job_to_its_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = Pacer(1_000_000, sleep=sleep, clock=lambda: now[0])
    pacer.pace(500_000)  # half a second's worth at once: it waits for it
    assert slept == [pytest.approx(0.5)]
    now[0] += 2.0  # the job was slow on its own: no more waiting
    pacer.pace(1_000_000)
    assert len(slept) == 1
    Pacer(0, sleep=sleep).pace(10**12)  # 0: no limit
    assert len(slept) == 1


def test_a_job_stops_between_steps_once_its_replica_closes() -> None:
    log = MemoryLog(fsync=False, segment_batches_max=2)
    for index in range(10):
        batch = encode_batch([b"v"], keys=[b"k%d" % (index % 2)])
        log.append(batch, term=1)
    log.roll()
    with pytest.raises(CompactionCancelledError):
        run_command(log, CompactCommand(10, 0, codec=0), memory_bytes_max=1 << 20,
                    cancelled=lambda: True)  # fmt: skip
    kept = run_command(log, CompactCommand(10, 0, codec=0), memory_bytes_max=1 << 20)
    assert [parse_header(b).base_offset for b in _batches(log)] == [8, 9]
    assert kept == sum(len(b) for b in _batches(log))


class _CountedReads:
    """Counts a log's ``read`` calls."""

    def __init__(self, log: MemoryLog) -> None:
        self.count = 0
        original = log.read

        def counting(offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
            self.count += 1
            return original(offset, max_bytes, upper_offset=upper_offset)

        log.read = counting  # type: ignore[method-assign]


def test_the_decision_reads_only_a_segment_the_dirty_range_begins_inside_a_step_per_check() -> None:
    log = MemoryLog(fsync=False, segment_batches_max=100)
    batch = encode_batch([b"v" * 1000], keys=[b"k"], timestamps_ms=7)
    for _ in range(250):
        log.append(batch, term=1)
    scan = DirtyScan.at(50)  # the last command ended inside the sealed [0, 100)
    first = log_view(log, scan, high_watermark=250, clean_bytes=0, bytes_max=len(batch) * 10)
    assert first.active_base == 200
    assert 50 < scan.scanned_to < 100  # a step, not the rest of the segment
    checks = 1
    while scan.scanned_to < 100:
        log_view(log, scan, high_watermark=250, clean_bytes=0, bytes_max=len(batch) * 10)
        checks += 1
        assert checks < 100
    # The check that finished [50, 100) took the sealed [100, 200) whole, unread.
    assert scan.scanned_to == 200
    assert checks == 5
    assert scan.runs[0].base_offset == 50 and scan.runs[-1] == Run(100, 200, 7, 7, 100 * len(batch))
    assert sum(run.size_bytes for run in scan.runs) == 150 * len(batch)
    reads = _CountedReads(log)
    again = log_view(log, scan, high_watermark=150, clean_bytes=0)
    assert again.runs == scan.runs and reads.count == 0  # nothing more; the limit is the rule's
    # A high watermark inside a sealed segment: the segment is read up to it.
    scan = DirtyScan.at(0)
    log_view(log, scan, high_watermark=150, clean_bytes=0)
    assert scan.runs == [Run(0, 100, 7, 7, 100 * len(batch)), Run(100, 150, 7, 7, 50 * len(batch))]
    assert reads.count == 1
    log_view(log, scan, high_watermark=250, clean_bytes=0)
    assert scan.runs[-1] == Run(150, 200, 7, 7, 50 * len(batch)) and scan.scanned_to == 200


def test_a_run_s_oldest_record_is_its_data_batches_whether_read_or_summarised() -> None:
    # A control batch carries the leader's monotonic clock (1 here), no record time.
    log = MemoryLog(fsync=False, segment_batches_max=4)
    log.append(encode_control_batch(b"noop", b"", 1), term=1)
    for stamp in (50, 20, 40, 60):  # the last one in the next (active) segment
        log.append(encode_batch([b"v"], keys=[b"k"], timestamps_ms=stamp), term=1)
    whole = log_view(log, DirtyScan.at(0), high_watermark=5, clean_bytes=0)
    read = log_view(log, DirtyScan.at(0), high_watermark=3, clean_bytes=0)  # inside it
    ((segment,), (part,)) = whole.runs, read.runs
    assert (segment.oldest_timestamp_ms, segment.newest_timestamp_ms) == (20, 50)
    assert (part.base_offset, part.next_offset, part.oldest_timestamp_ms) == (0, 3, 20)
    controls = MemoryLog(fsync=False, segment_batches_max=1)
    controls.append(encode_control_batch(b"noop", b"", 1), term=1)
    controls.append(encode_batch([b"v"], keys=[b"k"], timestamps_ms=50), term=1)
    ((only,),) = [log_view(controls, DirtyScan.at(0), high_watermark=2, clean_bytes=0).runs]
    assert only == Run(0, 1, None, 1, only.size_bytes)


def test_a_backlog_of_many_sealed_segments_is_taken_in_one_check_without_a_read() -> None:
    # 200 sealed segments of 2 batches of 8 KiB: 3.2 MiB, beyond a check's read budget.
    log = MemoryLog(fsync=False, segment_batches_max=2)
    for index in range(401):
        log.append(encode_batch([b"v" * 8192], keys=[b"k%d" % (index % 7)],
                                timestamps_ms=1_000 + index), term=1)  # fmt: skip
    assert len(log.sealed_segments()) == 200
    reads = _CountedReads(log)
    scan = DirtyScan.at(0)
    view = log_view(log, scan, high_watermark=401, clean_bytes=0)
    assert reads.count == 0
    assert view.active_base == 400 and len(view.runs) == 200
    size = view.runs[0].size_bytes
    assert view.runs[:2] == [Run(0, 2, 1_000, 1_001, size), Run(2, 4, 1_002, 1_003, size)]
    assert sum(run.size_bytes for run in view.runs) > 3 * SCAN_BYTES_PER_CHECK
    rule = CompactionRule(0.5, 0, -1, 0)
    assert compaction_point(view, rule, [], 10_000) == Decision(400, 0, "ratio")
    # The minimum lag stops E before the first segment holding a young record (the
    # whole segment, its older batch included: conservative).
    young = CompactionRule(0.5, 10_000 - 1_250, -1, 0)  # records stamped after 1_250 are young
    assert compaction_point(view, young, [], 10_000) == Decision(250, 0, "ratio")


def test_a_leader_with_a_dirty_backlog_of_200_segments_compacts_it_with_one_command() -> None:
    net = _Net(("a",), segment_batches={"a": 2})
    net.run_for(500)
    net.produce([(b"k%d" % (i % 7), b"v" * 8192) for i in range(400)])  # 3.2 MiB
    assert len(net.replica("a").log.sealed_segments()) >= 200
    net.run_for(CHECK_MS + 100)
    driver = net.drivers["a"]
    assert driver.counters["compactions_proposed"] == 1
    assert driver.counters["compactions_applied"] == 1
    ((_, command),) = _commands(net, "a")
    assert command.end >= 400  # every sealed segment below the active one, not 1 MiB of them
    keys = [key for _, key, _ in _records(net.replica("a").log, command.end)]
    assert sorted(keys) == sorted({b"k%d" % i for i in range(7)})


def test_a_segment_whose_every_offset_is_superseded_is_emptied_without_a_read() -> None:
    log = MemoryLog(fsync=False, segment_batches_max=2)
    for _ in range(10):
        log.append(encode_batch([b"v"], keys=[b"k"]), term=1)
    log.roll()
    reads: list[int] = []
    original = log.read_segment

    def counting(base: int) -> Iterator[bytes]:
        reads.append(base)
        return original(base)

    log.read_segment = counting  # type: ignore[method-assign]
    run_command(log, CompactCommand(10, 0, codec=0), memory_bytes_max=1 << 20)
    assert [parse_header(b).base_offset for b in _batches(log)] == [9]
    assert reads == [0, 2, 4, 6, 8, 8]  # one pass over the range, one rewrite


def test_compaction_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="compaction_memory_bytes_max must be >= 1048576"):
        HostConfig(compaction_memory_bytes_max=(1 << 20) - 1)
    with pytest.raises(ConfigError, match="compaction_bytes_per_s_max must be >= 0"):
        HostConfig(compaction_bytes_per_s_max=-1)
    assert HostConfig(compaction_bytes_per_s_max=0).compaction_bytes_per_s_max == 0  # no limit


def test_a_replica_reopened_while_its_job_runs_opens_again_once_the_job_stops() -> None:
    jobs: list[tuple[Callable[[], int], JobDone]] = []
    net = _Net(("a",), run_job=lambda job, done: jobs.append((job, done)))
    net.run_for(500)
    net.produce(_keyed(30, 3))
    net.run_for(CHECK_MS + 100)
    ((job, done),) = jobs
    driver = net.drivers["a"]
    assert driver.reopen_replica(KEY) is None  # not a second log on its files yet
    assert driver.get(KEY) is None
    outcome: int | BaseException
    try:
        outcome = job()
    except CompactionCancelledError as error:  # it saw its replica closed
        outcome = error
    assert isinstance(outcome, CompactionCancelledError)
    done(outcome)
    assert driver.get(KEY) is not None  # reopened now
