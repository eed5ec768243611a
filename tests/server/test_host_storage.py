"""Storage failures in the replica host: a failed fsync is never acknowledged.

One process, real segment logs whose ``sync`` can be told to fail, hosts wired to
each other in memory (no sockets). Waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.errors import StorageError, UnavailableError
from laminar.records import decode_records, encode_batch, iter_batches
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.log import SegmentLog
from laminar.segment.storage import LogStorage
from laminar.server import driver as driver_module
from laminar.server.host import HostConfig, ReplicaHost
from tests.server import aio
from tests.server.aio import bounded

DEADLINE_S = 10.0
KEY = ("events", 0)
FAST_RETRY = HostConfig(storage_retry_ms=50, storage_retry_max_ms=200)


run = bounded(DEADLINE_S * 3)


class Disks:
    """A log factory whose logs fail ``sync`` while their directory is in ``failing``."""

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.failed_syncs = 0

    def open(self, directory: str, config: LogConfig) -> LogStorage:
        log = SegmentLog.open(directory, config)
        real_sync = log.sync

        def sync() -> None:
            if any(directory.startswith(root) for root in self.failing):
                self.failed_syncs += 1
                raise OSError(5, "Input/output error (injected)")
            real_sync()

        log.sync = sync  # type: ignore[method-assign]
        return log


async def wait_until(condition: Callable[[], object], what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S)


def values(read: Callable[[int], bytes], end: int) -> list[bytes]:
    """The data records' values below ``end``; ``read(offset)`` returns whole batches
    from ``offset`` and stops at a segment boundary, so this loops."""
    found = []
    offset = 0
    while offset < end:
        data = read(offset)
        assert data, f"nothing to read at {offset}"
        for position, header in iter_batches(data):
            if not header.is_control:
                batch = data[position : position + header.length]
                found.extend(record.value or b"" for record in decode_records(batch))
            offset = header.next_offset
    return found


def batch(value: bytes) -> bytes:
    return encode_batch([value], timestamps_ms=1)


async def single_host(root: Path, disks: Disks) -> ReplicaHost:
    host = ReplicaHost(
        "n1",
        str(root),
        ReplicaConfig.local(),
        LogConfig(),
        send=lambda node, bundle: None,
        host_config=FAST_RETRY,
        log_factory=disks.open,
    )
    await host.start()
    return host


@run
async def test_a_failed_fsync_fences_the_leader_and_a_reopen_drops_the_unsynced_tail(
    tmp_path: Path,
) -> None:
    disks = Disks()
    host = await single_host(tmp_path, disks)
    try:
        replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
        await wait_until(lambda: replica.core.role is Role.LEADER, "a leader")
        first = await host.produce(KEY, batch(b"kept"), Acks.ALL, 5)
        disks.failing.add(str(tmp_path))
        with pytest.raises(StorageError, match="not acknowledged"):
            await host.produce(KEY, batch(b"lost"), Acks.ALL, 5)
        assert [f.key for f in host.fenced()] == [KEY]
        assert host.fenced()[0].durable_end == first.base_offset + 1
        with pytest.raises(UnavailableError, match="out of service"):
            await host.produce(KEY, batch(b"refused"), Acks.ALL, 5)
        with pytest.raises(UnavailableError, match="out of service"):
            await host.fetch(KEY, 0, 1 << 20, 0)
        assert host.counters["storage_failures"] == 1

        disks.failing.clear()  # the disk is back: the host reopens the replica
        await wait_until(lambda: not host.fenced(), "the reopen")
        reopened = host.get(KEY)
        assert reopened is not None and reopened is not replica
        await wait_until(lambda: reopened.core.role is Role.LEADER, "leadership again")
        after = await host.produce(KEY, batch(b"after"), Acks.ALL, 5)
        read = functools.partial(reopened.core.read, max_bytes=1 << 20)
        assert values(read, after.base_offset + 1) == [b"kept", b"after"]
    finally:
        await host.close()


@run
async def test_a_reopen_that_fails_again_keeps_the_replica_fenced(tmp_path: Path) -> None:
    disks = Disks()
    host = await single_host(tmp_path, disks)
    try:
        replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
        await wait_until(lambda: replica.core.role is Role.LEADER, "a leader")
        disks.failing.add(str(tmp_path))
        with pytest.raises(StorageError):
            await host.produce(KEY, batch(b"lost"), Acks.ALL, 5)
        await wait_until(lambda: host.fenced()[0].attempts >= 2, "two failed reopens")
        assert host.get(KEY) is None
    finally:
        await host.close()


class Cluster:
    """Three hosts of one group in one process; bundles go through the event loop."""

    def __init__(self, root: Path, disks: Disks, host_config: HostConfig = FAST_RETRY) -> None:
        self.hosts: dict[str, ReplicaHost] = {}
        for name in ("n1", "n2", "n3"):
            self.hosts[name] = ReplicaHost(
                name,
                str(root / name),
                ReplicaConfig.local(),
                LogConfig(),
                send=functools.partial(self._send, name),
                host_config=host_config,
                log_factory=disks.open,
            )

    def _send(self, source: str, destination: str, bundle: PeerBundle) -> None:
        target = self.hosts[destination]
        asyncio.get_running_loop().call_soon(target.on_bundle, source, bundle)

    async def start(self) -> None:
        voters = GroupConfig(tuple(NodeId(n) for n in self.hosts))
        for host in self.hosts.values():
            await host.start()
            host.open_replica(KEY, voters)

    def leader(self) -> ReplicaHost | None:
        for host in self.hosts.values():
            replica = host.get(KEY)
            if replica is not None and replica.core.role is Role.LEADER:
                return host
        return None

    async def close(self) -> None:
        for host in self.hosts.values():
            await host.close()


@run
async def test_a_follower_whose_fsync_fails_does_not_acknowledge_and_later_catches_up(
    tmp_path: Path,
) -> None:
    disks = Disks()
    cluster = Cluster(tmp_path, disks)
    await cluster.start()
    try:
        await wait_until(cluster.leader, "a leader")
        leader = cluster.leader()
        assert leader is not None
        await leader.produce(KEY, batch(b"one"), Acks.ALL, 5)
        followers = [name for name, host in cluster.hosts.items() if host is not leader]
        broken = cluster.hosts[followers[0]]
        disks.failing.add(str(tmp_path / followers[0]))
        # The group still commits with the other follower; the broken one never says
        # it holds what it could not sync.
        result = await leader.produce(KEY, batch(b"two"), Acks.ALL, 5)
        await wait_until(broken.fenced, "the follower to fence itself")
        leader_replica = leader.get(KEY)
        assert leader_replica is not None
        matches = leader_replica.core.match_offsets()
        assert matches.get(NodeId(followers[0]), -1) <= result.base_offset
        disks.failing.clear()
        await wait_until(lambda: not broken.fenced(), "the follower's reopen")
        end = result.base_offset + 1
        await wait_until(
            lambda: (r := broken.get(KEY)) is not None and r.core.high_watermark >= end,
            "the reopened follower to catch up",
        )
        replica = broken.get(KEY)
        assert replica is not None
        read = functools.partial(replica.core.read, max_bytes=1 << 20)
        assert values(read, end) == [b"one", b"two"]
    finally:
        await cluster.close()


@run
async def test_produce_calls_and_long_polls_beyond_their_limits_are_refused_and_counted(
    tmp_path: Path,
) -> None:
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        LogConfig(),
        send=lambda node, bundle: None,
        host_config=HostConfig(produce_calls_max=1, fetch_waiters_max=1),
    )
    await host.start()
    try:
        replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
        await wait_until(lambda: replica.core.role is Role.LEADER, "a leader")
        # Two produce calls at once (fsyncs in the pool, so the first waits): the
        # second is over the limit.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(driver_module, "INLINE_FSYNC_MS_MAX", 0.0)
            results = await asyncio.gather(
                host.produce(KEY, batch(b"a"), Acks.ALL, 5),
                host.produce(KEY, batch(b"b"), Acks.ALL, 5),
                return_exceptions=True,
            )
        assert isinstance(results[1], UnavailableError), results
        assert host.counters["produce_refused"] == 1
        assert not isinstance(results[0], BaseException)
        # Two long-polls at the end: the second is answered at once, empty.
        end = replica.core.high_watermark
        waiting = asyncio.ensure_future(host.fetch(KEY, end, 1 << 20, 5))
        await wait_until(lambda: replica.watermark_waiters, "the first long-poll to wait")
        second = await asyncio.wait_for(host.fetch(KEY, end, 1 << 20, 5), 1)
        assert second.batches == b"" and host.counters["fetch_wait_refused"] == 1
        await host.produce(KEY, batch(b"c"), Acks.ALL, 5)
        first = await asyncio.wait_for(waiting, 5)
        assert first.batches  # the first waited and got the new batch
    finally:
        await host.close()
