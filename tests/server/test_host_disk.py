"""A full disk in the replica host (issue 28): the watermark, the handover, the
typed refusal, ENOSPC, and the return to service without a restart.

Three hosts of one group in one process, wired in memory (no sockets), on real
segment logs; each host's free space comes from a fake the test sets, and a log
factory can make appends fail with ``ENOSPC``. Gossip is played by the test: a host
that turns full tells the others (``set_full_peers``), as the node's membership
does. Waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.errors import StorageError, StorageFullError
from laminar.records import encode_batch
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import GROUP_SILENCE_MAX_TIMEOUTS
from laminar.replica.types import Acks, GroupConfig, NodeId
from laminar.segment.config import LogConfig
from laminar.segment.log import SegmentLog
from laminar.segment.storage import LogStorage
from laminar.server.disk import DiskUsage
from laminar.server.driver import Standalone
from laminar.server.host import HostConfig, ReplicaHost
from tests.server import aio
from tests.server.aio import bounded
from tests.server.test_host_storage import values

DEADLINE_S = 10.0
KEY = ("events", 0)
MIB = 1 << 20
WATERMARK = 10 * MIB
CONFIG = HostConfig(
    storage_retry_ms=50,
    storage_retry_max_ms=200,
    disk_free_bytes_min=WATERMARK,
    disk_free_percent_min=0.0,
    disk_check_ms=20,
    disk_handover_delay_ms=0,  # the test's gossip is instant
)
REPLICA = ReplicaConfig.local()

run = bounded(DEADLINE_S * 4)


async def wait_until(condition: Callable[[], object], what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S)


def batch(value: bytes) -> bytes:
    return encode_batch([value], timestamps_ms=1)


class _Gossip(Standalone):
    """Host ``name`` of ``cluster``: every peer alive (keepalives flow, as between
    live nodes); its disk turning full or not is gossiped to every host."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self._cluster = cluster
        self._name = name

    def peer_alive(self, node_id: str) -> bool:
        return True

    def disk_full_changed(self, full: bool) -> None:
        self._cluster._gossip(self._name, full)


class Cluster:
    """Three hosts of one group, each with a fake free-space figure (plenty at
    first) and appends that fail with ENOSPC while its name is in ``no_space``."""

    def __init__(self, root: Path, names: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
        self.free_bytes = {name: 100 * MIB for name in names}
        self.no_space: set[str] = set()
        self.full: set[str] = set()  # what "gossip" says
        self.hosts: dict[str, ReplicaHost] = {}
        for name in names:
            self.hosts[name] = ReplicaHost(
                name,
                str(root / name),
                REPLICA,
                LogConfig(),
                send=functools.partial(self._send, name),
                host_config=CONFIG,
                log_factory=functools.partial(self._open_log, name),
                owner=_Gossip(self, name),
                disk_usage=functools.partial(self._usage, name),
            )

    def _usage(self, name: str) -> DiskUsage:
        return DiskUsage(self.free_bytes[name], 100 * MIB)

    def _gossip(self, name: str, full: bool) -> None:
        (self.full.add if full else self.full.discard)(name)
        for host in self.hosts.values():
            host.set_full_peers(self.full)

    def _open_log(self, name: str, directory: str, config: LogConfig) -> LogStorage:
        log = SegmentLog.open(directory, config)
        appends = {"append": log.append, "append_stamped": log.append_stamped}

        def failing(method: str, *args: object, **kwargs: object) -> int:
            if name in self.no_space:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return appends[method](*args, **kwargs)  # type: ignore[operator, no-any-return]

        log.append = functools.partial(failing, "append")  # type: ignore[method-assign]
        log.append_stamped = functools.partial(failing, "append_stamped")  # type: ignore[method-assign]
        return log

    def _send(self, source: str, destination: str, bundle: PeerBundle) -> None:
        target = self.hosts[destination]
        asyncio.get_running_loop().call_soon(target.on_bundle, source, bundle)

    async def start(self, voters: tuple[str, ...] | None = None) -> None:
        group = GroupConfig(tuple(NodeId(n) for n in (voters or tuple(self.hosts))))
        for name, host in self.hosts.items():
            await host.start()
            if NodeId(name) in group.voters:
                host.open_replica(KEY, group)
        founder = group.voters[0]
        await wait_until(lambda: self.leader() == founder, f"{founder}, the founder, to lead")

    def leader(self) -> str | None:
        for name, host in self.hosts.items():
            if host.leads(KEY):
                return name
        return None

    async def produce(self, value: bytes) -> int:
        """Through whichever host leads now (waiting for one)."""
        await wait_until(self.leader, "a leader")
        name = self.leader()
        assert name is not None
        result = await self.hosts[name].produce(KEY, batch(value), Acks.ALL, 5)
        return result.base_offset

    def read_all(self, name: str, end: int) -> list[bytes]:
        replica = self.hosts[name].get(KEY)
        assert replica is not None
        return values(functools.partial(replica.core.read, max_bytes=1 << 20), end)

    async def close(self) -> None:
        for host in self.hosts.values():
            await host.close()


@run
async def test_a_leader_below_the_watermark_hands_over_keeps_following_and_returns(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start()
    try:
        written = [b"before"]
        await cluster.produce(b"before")
        n1 = cluster.hosts["n1"]
        cluster.free_bytes["n1"] = WATERMARK - 1
        await wait_until(lambda: n1.disk_full, "n1 to find its disk full")
        assert cluster.full == {"n1"}
        await wait_until(lambda: cluster.leader() not in (None, "n1"), "a leader with space")
        for index in range(5):
            written.append(b"while full %d" % index)
            end = await cluster.produce(written[-1]) + 1
        replica = n1.get(KEY)
        assert replica is not None and not n1.fenced()
        await wait_until(lambda: replica.core.high_watermark >= end, "n1 to keep following")
        # Handed the leadership back while full, n1 does not take it.
        leader_host = cluster.hosts[cluster.leader() or ""]
        leading = leader_host.get(KEY)
        assert leading is not None
        leader_host.transfer_leadership(KEY, NodeId("n1"))
        await wait_until(lambda: leading.core.transferring_to == "n1", "the transfer to start")
        await wait_until(lambda: leading.core.transferring_to is None, "the transfer to end")
        assert cluster.leader() != "n1"

        cluster.free_bytes["n1"] = WATERMARK + WATERMARK // 10  # above it by a tenth
        await wait_until(lambda: not n1.disk_full, "n1 back in service")
        assert cluster.full == set()
        leader = cluster.hosts[cluster.leader() or ""]
        leader.transfer_leadership(KEY, NodeId("n1"))
        await wait_until(lambda: cluster.leader() == "n1", "n1 to take a leadership again")
        written.append(b"after")
        end = await cluster.produce(b"after") + 1
        assert cluster.read_all("n1", end) == written
    finally:
        await cluster.close()


@run
async def test_a_write_without_a_majority_with_space_is_refused_at_once(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start()
    try:
        await cluster.produce(b"before")
        for name in ("n2", "n3"):
            cluster.free_bytes[name] = 0
        await wait_until(lambda: cluster.full == {"n2", "n3"}, "n2 and n3 to be full")
        loop = asyncio.get_running_loop()
        for name in ("n1", "n2"):  # the leader, and a follower
            started = loop.time()
            with pytest.raises(StorageFullError, match="2 of its 3 replicas") as refused:
                await cluster.hosts[name].produce(KEY, batch(b"refused"), Acks.ALL, 5)
            assert loop.time() - started < 1.0  # at once, not after the timeout
            assert refused.value.nodes == ("n2", "n3")
        assert cluster.hosts["n1"].counters["produce_refused_no_space"] == 1
        cluster.free_bytes["n3"] = 50 * MIB
        await wait_until(lambda: cluster.full == {"n2"}, "n3 to have space again")
        end = await cluster.produce(b"after") + 1
        assert cluster.read_all("n1", end) == [b"before", b"after"]
    finally:
        await cluster.close()


@run
async def test_a_leader_out_of_space_hands_over_at_once_and_reopens_when_space_returns(
    tmp_path: Path,
) -> None:
    """ENOSPC while the watermark said nothing: the leader's replica is fenced, tells
    a follower to campaign at once (its node keeps talking, so the followers would
    otherwise wait GROUP_SILENCE_MAX_TIMEOUTS election timeouts), and is reopened
    when space returns, not on the storage-retry timer."""
    cluster = Cluster(tmp_path)
    await cluster.start()
    try:
        written = [b"before"]
        await cluster.produce(b"before")
        n1 = cluster.hosts["n1"]
        cluster.no_space.add("n1")
        loop = asyncio.get_running_loop()
        with pytest.raises(StorageError, match="No space left"):
            await n1.produce(KEY, batch(b"refused"), Acks.ALL, 5)
        failed_at = loop.time()
        assert n1.disk_full and [f.no_space for f in n1.fenced()] == [True]
        await wait_until(lambda: cluster.leader() not in (None, "n1"), "a new leader")
        assert loop.time() - failed_at < 2.0
        silence_s = GROUP_SILENCE_MAX_TIMEOUTS * REPLICA.election_timeout_max_ms / 1000
        assert silence_s > 2.0  # what the followers would have waited
        for index in range(3):
            written.append(b"while fenced %d" % index)
            end = await cluster.produce(written[-1]) + 1
        # Far past storage_retry_ms, yet not reopened: the disk has no more space.
        await wait_until(
            lambda: loop.time() - failed_at > 4 * CONFIG.storage_retry_max_ms / 1000,
            "time well past the storage retry",
        )
        assert [f.attempts for f in n1.fenced()] == [0] and n1.get(KEY) is None
        assert n1.counters["storage_failures"] == 1  # no reopen, so no fence again

        cluster.no_space.clear()
        cluster.free_bytes["n1"] += MIB  # an operator freed some space
        await wait_until(lambda: not n1.fenced(), "the reopen once space is back")
        assert not n1.disk_full
        await wait_until(
            lambda: (r := n1.get(KEY)) is not None and r.core.high_watermark >= end,
            "the reopened replica to catch up",
        )
        assert cluster.read_all("n1", end) == written
    finally:
        await cluster.close()


@run
async def test_a_full_node_opens_no_new_replica_until_it_has_space(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ("n1", "n2"))
    cluster.free_bytes["n2"] = 0  # full from the start
    await cluster.start(voters=("n1",))
    try:
        n1, n2 = cluster.hosts["n1"], cluster.hosts["n2"]
        assert n2.disk_full
        end = await cluster.produce(b"x") + 1
        n1.set_target(KEY, ("n1", "n2"))  # the leader adds n2, which ignores it
        sent = n1.counters["bundles_sent"]
        await wait_until(lambda: n1.counters["bundles_sent"] > sent + 10, "appends to n2")
        assert n2.get(KEY) is None
        cluster.free_bytes["n2"] = 50 * MIB
        await wait_until(lambda: n2.get(KEY) is not None, "n2 to take its replica")
        await wait_until(
            lambda: (r := n2.get(KEY)) is not None and r.core.high_watermark >= end,
            "n2 to catch up",
        )
    finally:
        await cluster.close()


@run
async def test_a_leader_in_maintenance_hands_over_refuses_leadership_and_keeps_counting(
    tmp_path: Path,
) -> None:
    """Maintenance (issue 30) takes the full-disk path for leadership, not for writes:
    the node hands over and takes no leadership back, yet its acknowledgements still
    count (a write with the other voter stopped commits with it)."""
    cluster = Cluster(tmp_path)
    await cluster.start()
    try:
        written = [b"before"]
        await cluster.produce(b"before")
        n1 = cluster.hosts["n1"]
        for host in cluster.hosts.values():  # what the cluster metadata tells every node
            host.set_maintenance(["n1"])
        assert n1.in_maintenance and not cluster.hosts["n2"].in_maintenance
        await wait_until(lambda: cluster.leader() not in (None, "n1"), "n1 to hand over")
        leader_host = cluster.hosts[cluster.leader() or ""]
        leading = leader_host.get(KEY)
        assert leading is not None
        leader_host.transfer_leadership(KEY, NodeId("n1"))
        await wait_until(lambda: leading.core.transferring_to == "n1", "the transfer to start")
        await wait_until(lambda: leading.core.transferring_to is None, "the transfer to end")
        assert cluster.leader() != "n1"
        # The third voter stops: the leader and n1 still make a majority.
        third = next(n for n in ("n2", "n3") if n != cluster.leader())
        await cluster.hosts[third].close()
        written.append(b"with n1")
        end = await cluster.produce(b"with n1") + 1
        replica = n1.get(KEY)
        assert replica is not None
        await wait_until(lambda: replica.core.high_watermark >= end, "n1 to learn the commit")
        assert cluster.read_all("n1", end) == written

        for name, host in cluster.hosts.items():
            if name != third:
                host.set_maintenance([])
        assert not n1.in_maintenance
        leader_host.transfer_leadership(KEY, NodeId("n1"))
        await wait_until(lambda: cluster.leader() == "n1", "n1 to lead again after exit")
    finally:
        for host in cluster.hosts.values():
            with contextlib.suppress(Exception):
                await host.close()
