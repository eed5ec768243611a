"""The replica host in one process: single-voter groups on real logs, no network.

Each test is a coroutine run by ``asyncio.run``; waits are on conditions with
deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from laminar.errors import NotLeaderError, RequestTimeoutError
from laminar.records import (
    decode_records,
    encode_batch,
    iter_batches,
    next_offset,
    with_leader_fields,
)
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.messages import AppendRequest, AppendResponse, Heartbeat, RoleChanged
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.log import SegmentLog
from laminar.server import driver as driver_module
from laminar.server import host as host_module
from laminar.server.driver import Standalone
from laminar.server.host import Replica, ReplicaHost
from tests.segment.support import open_files_under
from tests.server.aio import bounded, wait_until

DEADLINE_S = 10.0
KEY = ("events", 0)


run = bounded(DEADLINE_S * 3)


async def leading_host(tmp_path: Path) -> tuple[ReplicaHost, Replica]:
    host = ReplicaHost("n1", str(tmp_path), ReplicaConfig.local(), LogConfig(), send=_no_peers)
    await host.start()
    replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while replica.core.role is not Role.LEADER:
        assert loop.time() < deadline, "the single voter never became leader"
        await asyncio.sleep(0.01)
    return host, replica


class _DeadPeers(Standalone):
    """A host whose membership declared the nodes in ``dead`` dead."""

    def __init__(self, dead: set[str]) -> None:
        self._dead = dead

    def peer_dead(self, node_id: str) -> bool:
        return node_id in self._dead


def _no_peers(node: str, bundle: object) -> None:
    raise AssertionError("a single-voter group sends nothing")


def batch(value: bytes) -> bytes:
    return encode_batch([value], timestamps_ms=1)


@run
async def test_produce_then_fetch(tmp_path: Path) -> None:
    host, _ = await leading_host(tmp_path)
    try:
        first = await host.produce(KEY, batch(b"a"), Acks.ALL, 5)
        second = await host.produce(KEY, batch(b"b"), Acks.ALL, 5)
        assert second.base_offset == first.base_offset + 1
        fetched = await host.fetch(KEY, first.base_offset, 1 << 20, 0)
        assert next_offset(fetched.batches) == second.base_offset + 1
        assert fetched.high_watermark == second.base_offset + 1
    finally:
        await host.close()


@run
async def test_a_lone_fast_fsync_runs_on_the_loop_and_a_slow_disk_moves_it_off(
    tmp_path: Path,
) -> None:
    host, replica = await leading_host(tmp_path)
    threads: list[str] = []
    delay_s = 0.0

    def recording_sync() -> None:
        # A disk of known speed, whatever this machine's: instant, then 20 ms.
        threads.append(threading.current_thread().name)
        if delay_s:
            time.sleep(delay_s)

    replica.log.sync = recording_sync  # type: ignore[method-assign]
    try:
        for number in range(20):  # the average forgets the start-up fsyncs
            await host.produce(KEY, batch(b"fast %d" % number), Acks.ALL, 5)
        assert threads[-1] == threading.current_thread().name
        delay_s = 0.02
        for number in range(4):
            await host.produce(KEY, batch(b"slow %d" % number), Acks.ALL, 5)
        assert threads[-1].startswith("fsync")  # later fsyncs left the loop
    finally:
        await host.close()


@run
async def test_a_produce_that_outlives_its_timeout_fails_and_may_still_commit(
    tmp_path: Path,
) -> None:
    host, replica = await leading_host(tmp_path)
    release = threading.Event()
    real_sync = replica.log.sync

    def stuck_sync() -> None:
        release.wait(DEADLINE_S)
        real_sync()

    replica.log.sync = stuck_sync  # type: ignore[method-assign]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver_module, "INLINE_FSYNC_MS_MAX", 0.0)  # keep the loop free
        try:
            late_offset = replica.log.end_offset
            with pytest.raises(RequestTimeoutError, match="may still commit"):
                await host.produce(KEY, batch(b"late"), Acks.ALL, 0.2)
            release.set()
            after = await host.produce(KEY, batch(b"next"), Acks.ALL, 5)
            assert after.base_offset == late_offset + 1  # the timed-out write came first
        finally:
            release.set()
            await host.close()


@run
async def test_a_produce_to_many_stuck_partitions_times_out_once_not_once_per_partition(
    tmp_path: Path,
) -> None:
    host, first = await leading_host(tmp_path)
    keys = [KEY, ("events", 1), ("events", 2)]
    replicas = [first] + [host.open_replica(key, GroupConfig((NodeId("n1"),))) for key in keys[1:]]
    await wait_until(
        lambda: all(r.core.role is Role.LEADER for r in replicas), "leaders", timeout_s=DEADLINE_S
    )
    release = threading.Event()
    for replica in replicas:
        real_sync = replica.log.sync

        def stuck_sync(real_sync: Any = real_sync) -> None:
            release.wait(DEADLINE_S)
            real_sync()

        replica.log.sync = stuck_sync  # type: ignore[method-assign]
    timeout_s = 0.4
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver_module, "INLINE_FSYNC_MS_MAX", 0.0)  # keep the loop free
        try:
            started = time.monotonic()
            outcomes = await host.produce_many(
                [(key, [batch(b"stuck")]) for key in keys], Acks.ALL, timeout_s
            )
            elapsed = time.monotonic() - started
            assert all(isinstance(outcome, RequestTimeoutError) for outcome in outcomes)
            assert "0.4 s" in str(outcomes[-1])
            # One deadline for the request: waiting for each partition with its own
            # timeout took 3 x 0.4 s, past the client's deadline for the answer.
            assert elapsed < 2 * timeout_s
        finally:
            release.set()
            await host.close()


@run
async def test_a_produce_during_an_election_waits_for_its_outcome_and_names_the_winner(
    tmp_path: Path,
) -> None:
    dead: set[str] = set()
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        LogConfig(),
        send=lambda node, bundle: None,
        owner=_DeadPeers(dead),
    )
    await host.start()
    try:
        group = GroupConfig((NodeId("n0"), NodeId("n1"), NodeId("n2")))
        replica = host.open_replica(KEY, group)
        await wait_until(lambda: replica.core.leader == "n0", "n0 known", timeout_s=DEADLINE_S)
        host.on_bundle("n0", driver_module.KEEPALIVE)  # n0's node is heard from
        with pytest.raises(NotLeaderError) as refused:  # a live leader: refused at once
            await host.produce(KEY, batch(b"a"), Acks.ALL, 5)
        assert refused.value.leader_id == "n0"
        dead.add("n0")  # membership declares the leader dead: an election follows
        loop = asyncio.get_running_loop()
        started = loop.time()
        produce = asyncio.ensure_future(host.produce(KEY, batch(b"b"), Acks.ALL, 5))
        await asyncio.sleep(0.05)
        assert not produce.done()  # no blind refusal: it waits for the outcome
        winner = Heartbeat(term=2, leader=NodeId("n2"), commit_offset=0)
        host.on_bundle("n2", PeerBundle(((KEY, winner),), ()))
        host.flush_now()
        with pytest.raises(NotLeaderError) as redirected:
            await produce
        assert redirected.value.leader_id == "n2"  # the client goes there at once
        assert loop.time() - started < 1.0
    finally:
        await host.close()


@run
async def test_a_follower_acknowledges_an_append_when_told_the_read_is_delivered(
    tmp_path: Path,
) -> None:
    # The transport calls flush_now after delivering a read's bundles: the round an
    # append needs (append, fsync, acknowledge) runs then and there, not after a
    # pass of the event loop: one hop less per write.
    sent: list[tuple[str, PeerBundle]] = []
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        LogConfig(),
        send=lambda node, bundle: sent.append((node, bundle)),
    )
    await host.start()
    try:
        replica = host.open_replica(KEY, GroupConfig((NodeId("n0"), NodeId("n1"))))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while host._flush_task is not None and not host._flush_task.done():
            assert loop.time() < deadline, "the opening round never finished"
            await asyncio.sleep(0.001)
        request = AppendRequest(
            term=1,
            leader=NodeId("n0"),
            prev_end_offset=0,
            prev_term=-1,
            batches=with_leader_fields(batch(b"a"), 0, 1),
            end_offset=1,
            commit_offset=0,
        )
        host.on_bundle("n0", PeerBundle((), ((KEY, request),)))
        assert sent == []  # bundles of the same read would share the round
        host.flush_now()
        answers = [
            message
            for node, bundle in sent
            for _, message in bundle.messages
            if node == "n0" and isinstance(message, AppendResponse)
        ]
        assert [(a.success, a.match_offset) for a in answers] == [(True, 1)]
        assert replica.log.end_offset == 1
    finally:
        await host.close()


@run
async def test_concurrent_produce_calls_share_one_fsync(tmp_path: Path) -> None:
    # A lone produce runs its round at once; calls made together wait for the
    # queued round and are synced together (group commit).
    host, _ = await leading_host(tmp_path)
    try:
        await host.produce(KEY, batch(b"warm"), Acks.ALL, 5)
        before = host.counters["fsyncs"]
        results = await asyncio.gather(
            *(host.produce(KEY, batch(b"%d" % n), Acks.ALL, 5) for n in range(8))
        )
        assert sorted(r.base_offset for r in results) == list(
            range(results[0].base_offset, results[0].base_offset + 8)
        )
        assert host.counters["fsyncs"] - before <= 2
    finally:
        await host.close()


@run
async def test_the_tick_loop_looks_only_at_replicas_that_are_due(tmp_path: Path) -> None:
    """Thousands of idle replicas must cost nothing per tick: the host keeps a heap
    of wake-up times instead of asking every core at every tick (issue 17)."""
    config = ReplicaConfig(
        election_timeout_min_ms=60_000,
        election_timeout_max_ms=120_000,
        heartbeat_interval_ms=50,
        replica_lag_max_ms=60_000,
    )
    host = ReplicaHost("n1", str(tmp_path), config, LogConfig(), send=lambda node, bundle: None)
    await host.start()
    core_class = driver_module.ReplicaCore
    original = core_class.next_wake_ms
    asked = passes = 0

    def counting(core: driver_module.ReplicaCore) -> int:
        nonlocal asked
        asked += 1
        return original(core)

    tick_due = host._driver._tick_due

    def counting_pass(now: int) -> None:
        nonlocal passes
        passes += 1
        tick_due(now)

    try:
        group = GroupConfig((NodeId("n2"), NodeId("n1"), NodeId("n3")))
        for partition in range(200):  # followers of n2, which never speaks: a minute's wait
            host.open_replica(("idle", partition), group)

        def settled() -> bool:  # every replica opened, nothing left to flush
            flushing = host._flush_task is not None and not host._flush_task.done()
            roles = {replica.core.role for replica in host._driver.replicas.values()}
            return not host._driver.dirty and not flushing and roles == {Role.FOLLOWER}

        await wait_until(settled, "the opening rounds", timeout_s=DEADLINE_S)
        core_class.next_wake_ms = counting  # type: ignore[method-assign]
        host._driver._tick_due = counting_pass  # type: ignore[method-assign]
        await wait_until(lambda: passes >= 10, "ten passes of the loop", timeout_s=DEADLINE_S)
        assert asked == 0  # the old loop asked all 200 cores at each of the 10 passes
    finally:
        core_class.next_wake_ms = original  # type: ignore[method-assign]
        await host.close()


@run
async def test_founding_replicas_are_created_in_batches_with_one_sync_and_no_election(
    tmp_path: Path,
) -> None:
    """Creating many partitions must not block the loop on three fsyncs each: the
    founding replicas are written without fsync and made durable by one filesystem
    sync per chunk; the first voter leads term 1 at once (issue 17)."""
    host = ReplicaHost("n1", str(tmp_path), ReplicaConfig.local(), LogConfig(), send=_ignore)
    await host.start()
    creating = threading.local()
    fsyncs_while_creating = 0
    filesystem_syncs = 0
    original_fsync, original_create = os.fsync, SegmentLog.create_unsynced
    original_sync, original_job = host_module.sync_filesystem, host_module._create_founding_logs

    def counting_fsync(descriptor: int) -> None:
        nonlocal fsyncs_while_creating
        if getattr(creating, "active", False):
            fsyncs_while_creating += 1
        original_fsync(descriptor)

    def marked_create(
        directory: str, state: bytes, config: LogConfig | None = None, **options: Any
    ) -> SegmentLog:
        creating.active = True
        try:
            return original_create(directory, state, config, **options)
        finally:
            creating.active = False

    def counting_sync(path: str) -> None:
        nonlocal filesystem_syncs
        if getattr(creating, "job", False):
            filesystem_syncs += 1
        original_sync(path)

    def marked_job(*args: Any) -> Any:
        creating.job = True
        try:
            return original_job(*args)
        finally:
            creating.job = False

    lead = GroupConfig((NodeId("n1"), NodeId("n2"), NodeId("n3")))
    follow = GroupConfig((NodeId("n2"), NodeId("n1"), NodeId("n3")))
    groups = [(("many", p), lead if p % 2 == 0 else follow) for p in range(300)]
    os.fsync = counting_fsync  # type: ignore[assignment]
    SegmentLog.create_unsynced = marked_create  # type: ignore[method-assign,assignment]
    host_module.sync_filesystem = counting_sync  # type: ignore[assignment]
    host_module._create_founding_logs = marked_job  # type: ignore[assignment]
    try:
        await host.open_founding(groups)
    finally:
        os.fsync = original_fsync  # type: ignore[assignment]
        SegmentLog.create_unsynced = original_create  # type: ignore[method-assign]
        host_module.sync_filesystem = original_sync  # type: ignore[assignment]
        host_module._create_founding_logs = original_job  # type: ignore[assignment]
    try:
        assert len(host.replica_keys()) == 300
        assert fsyncs_while_creating == 0  # made durable by one sync per chunk instead
        assert filesystem_syncs == 2  # 256 + 44
        for (key, group), index in zip(groups, range(300), strict=True):
            core = host.get(key).core  # type: ignore[union-attr]
            assert core.term == 1 and core.leader == group.voters[0], index
            assert core.role is (Role.LEADER if group is lead else Role.FOLLOWER)
    finally:
        await host.close()
    # Reopened from disk the replicas keep term 1 but found nothing again: a
    # restarted term-1 leader is a follower until an election.
    again = ReplicaHost("n1", str(tmp_path), ReplicaConfig.local(), LogConfig(), send=_ignore)
    await again.start()
    try:
        cores = [again.get(key).core for key, _ in groups]  # type: ignore[union-attr]
        assert all(core.term == 1 and core.role is not Role.LEADER for core in cores)
    finally:
        await again.close()


def _ignore(node: str, bundle: object) -> None:
    """Peers that never answer."""


def test_role_changes_of_many_groups_are_summarised_not_logged_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = driver_module._EventLog(interval_ms=1_000, lines_max=20)
    caplog.set_level(logging.INFO, logger=host_module.__name__)
    for partition in range(3_000):  # a node failure: every group changes role at once
        role = Role.LEADER if partition % 3 else Role.FOLLOWER
        log.note(("events", partition), RoleChanged(role, 2, NodeId("n1")), now_ms=10_000)
    log.note_time(10_500)  # the interval is not over: nothing more yet
    assert len(caplog.records) == 20
    log.note_time(11_000)
    assert len(caplog.records) == 21
    summary = caplog.records[-1].getMessage()
    assert "2980 more in 2980 partitions" in summary
    assert "became leader 1987" in summary and "became follower 993" in summary
    log.note(("events", 0), RoleChanged(Role.LEADER, 3, NodeId("n1")), now_ms=11_100)
    assert "events/0" in caplog.records[-1].getMessage()  # a quiet time: one line again


@run
async def test_a_reserved_founding_replica_is_not_opened_plain_by_an_early_append(
    tmp_path: Path,
) -> None:
    # A leader founded on another node may replicate before this node's creation of
    # the partition runs (behind earlier creations). A replica opened from that
    # append would lack the founding configuration (it is in the founding state,
    # not in the log) and could never campaign.
    host = ReplicaHost(
        "n1", str(tmp_path), ReplicaConfig.local(), LogConfig(), send=lambda n, b: None
    )
    await host.start()
    try:
        group = GroupConfig((NodeId("n0"), NodeId("n1"), NodeId("n2")))
        host.reserve_founding([KEY])
        early = Heartbeat(term=1, leader=NodeId("n0"), commit_offset=0)
        host.on_bundle("n0", PeerBundle(((KEY, early),), ()))
        assert host.get(KEY) is None  # ignored: the leader sends again
        await host.open_founding([(KEY, group)])
        replica = host.get(KEY)
        assert replica is not None
        assert replica.core.group_config == group  # it can campaign when n0 dies
        host.on_bundle("n0", PeerBundle(((("events", 1), early),), ()))
        assert host.get(("events", 1)) is not None  # not reserved: opened as before
    finally:
        await host.close()


@run
async def test_sealed_segment_files_of_all_replicas_share_one_bounded_cache(
    tmp_path: Path,
) -> None:
    """A node holds one descriptor per replica (its active segment) plus at most
    ``segment_files_max`` idle sealed-segment files, however many segments its logs
    hold and reads touch (issue 17: file descriptors bounded)."""
    log_config = LogConfig(segment_bytes_max=1024, preallocate_bytes_max=0)
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        log_config,
        send=_no_peers,
        host_config=host_module.HostConfig(segment_files_max=1),
    )
    await host.start()
    keys = [("events", partition) for partition in range(3)]
    try:
        replicas = [host.open_replica(key, GroupConfig((NodeId("n1"),))) for key in keys]
        await wait_until(
            lambda: all(replica.core.role is Role.LEADER for replica in replicas),
            "every single voter leads",
            timeout_s=DEADLINE_S,
        )
        for key in keys:
            for index in range(30):
                await host.produce(key, batch(bytes([index]) * 200), Acks.ALL, 5)
        for replica in replicas:
            assert isinstance(replica.log, SegmentLog) and replica.log.segment_count >= 5
        for _ in range(2):
            for key in keys:
                offset, values = 0, []
                while len(values) < 30:
                    fetched = await host.fetch(key, offset, 600, 0)
                    assert fetched.batches, (key, offset)
                    for position, header in iter_batches(fetched.batches):
                        if not header.is_control:  # the leader's first entry
                            data = fetched.batches[position : position + header.length]
                            values.extend(record.value[0] for record in decode_records(data))
                    offset = next_offset(fetched.batches)
                assert values == list(range(30))
                assert len(open_files_under(tmp_path)) <= len(keys) + 1
    finally:
        await host.close()
    assert open_files_under(tmp_path) == []
