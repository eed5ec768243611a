"""Damage found while a node runs: the scrubber, reads and consumer reports fence the
replica (issue 28, point 4).

One process, real segment logs; bit rot is one flipped bit in a segment file under
a running replica. Waits are on conditions with deadlines; the scrub rate is set
high so that a pass takes milliseconds.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.errors import (
    CorruptSegmentError,
    OffsetOutOfRangeError,
    StorageError,
    UnavailableError,
)
from laminar.records import encode_batch
from laminar.replica.config import ReplicaConfig
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.layout import partition_directory
from laminar.segment.log import SegmentLog
from laminar.segment.storage import LogStorage
from laminar.server.host import HostConfig, ReplicaHost
from laminar.server.scrub import ScrubItem, charged_bytes, scrub_logs
from tests.segment.support import flip
from tests.server import aio
from tests.server.aio import bounded
from tests.server.test_host_storage import Cluster

DEADLINE_S = 10.0
KEY = ("events", 0)
LOG_CONFIG = LogConfig(segment_bytes_max=16 << 10, retention_ms=None)
FAST_SCRUB = HostConfig(scrub_bytes_per_s=256 << 20, scrub_pass_min_ms=0, storage_retry_ms=60_000)
NO_SCRUB = HostConfig(scrub_bytes_per_s=0, storage_retry_ms=60_000)

run = bounded(DEADLINE_S * 3)


async def wait_until(condition: Callable[[], object], what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S)


async def leading_host(root: Path, config: HostConfig) -> ReplicaHost:
    host = ReplicaHost(
        "n1",
        str(root),
        ReplicaConfig.local(),
        LOG_CONFIG,
        send=lambda node, bundle: None,
        host_config=config,
    )
    await host.start()
    replica = host.get(KEY) or host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
    await wait_until(lambda: replica.core.role is Role.LEADER, "a leader")
    return host


async def fill(host: ReplicaHost, batches: int) -> list[int]:
    """Produce ``batches`` batches of ~1 KiB (several sealed segments); base offsets."""
    now_ms = int(time.time() * 1000)
    offsets = []
    for index in range(batches):
        values = [b"%04d" % index + bytes(200)] * 5
        result = await host.produce(KEY, encode_batch(values, timestamps_ms=now_ms), Acks.ALL, 5)
        offsets.append(result.base_offset)
    return offsets


def sealed_segment(root: Path, index: int = 1) -> Path:
    directory = Path(partition_directory(str(root), *KEY))
    files = sorted(directory.glob("*.log"))
    assert len(files) > index + 1, "not enough sealed segments"
    return files[index]


@run
async def test_the_scrubber_finds_a_flipped_byte_and_fences_the_replica(tmp_path: Path) -> None:
    host = await leading_host(tmp_path, FAST_SCRUB)
    try:
        await fill(host, 60)
        # Clean passes find nothing (and restart after each pass).
        passes = host.counters["scrub_passes"]
        await wait_until(lambda: host.counters["scrub_passes"] >= passes + 2, "two passes")
        assert host.counters["damage_found"] == 0 and not host.fenced()
        assert host.counters["scrub_bytes"] >= 60 * 1000

        victim = sealed_segment(tmp_path)
        flip(victim, os.path.getsize(victim) // 2)
        await wait_until(lambda: host.is_fenced(KEY), "the scrubber to fence the replica")
        assert host.counters["damage_found"] == 1
        assert str(victim) in host.fenced()[0].reason
        assert "CorruptSegmentError" in host.fenced()[0].reason
        with pytest.raises(UnavailableError, match="out of service"):
            await host.fetch(KEY, 0, 1 << 20, 0)
    finally:
        await host.close()


@run
async def test_scrubbing_keeps_to_its_rate_and_survives_deleted_replicas(tmp_path: Path) -> None:
    rate = 2 << 20
    host = await leading_host(tmp_path, HostConfig(scrub_bytes_per_s=rate, scrub_pass_min_ms=0))
    other = ("other", 0)
    try:
        replica = host.open_replica(other, GroupConfig((NodeId("n1"),)))
        await wait_until(lambda: replica.core.role is Role.LEADER, "a second leader")
        await fill(host, 60)
        for _ in range(30):
            await host.produce(other, encode_batch([bytes(1000)] * 5), Acks.ALL, 5)
        passes = host.counters["scrub_passes"]
        await wait_until(lambda: host.counters["scrub_passes"] > passes, "a pass to end")
        started_s = time.monotonic()
        bytes_before = host.counters["scrub_bytes"]
        batches_before = host.counters["scrub_batches"]
        passes = host.counters["scrub_passes"]
        await wait_until(lambda: host.counters["scrub_passes"] >= passes + 2, "two passes")
        host.delete_replica(other)  # deleted between (or during) jobs
        await wait_until(lambda: host.counters["scrub_passes"] >= passes + 4, "two more")
        elapsed_s = time.monotonic() - started_s
        scrubbed = host.counters["scrub_bytes"] - bytes_before
        batches = host.counters["scrub_batches"] - batches_before
        # Passes 2 to 4 of the window ended inside it (a pass is counted when the next
        # one starts); the first may have ended, in one job, before the counters above
        # were read (a CI run counted 214 batches against 4 * 60).
        assert scrubbed > 3 * 60 * 1000 and batches >= 3 * 60
        # Not faster than the rate, which charges per batch (and per call) too; the
        # slack is for the job under way at either end of the window.
        charged = charged_bytes(scrubbed, batches, 0)
        assert charged / elapsed_s <= rate * 1.5
        assert host.counters["damage_found"] == 0 and not host.fenced()
    finally:
        await host.close()


@run
async def test_a_fetch_that_meets_corruption_fences_the_replica_and_is_retriable(
    tmp_path: Path,
) -> None:
    host = await leading_host(tmp_path, NO_SCRUB)
    try:
        await fill(host, 60)
        victim = sealed_segment(tmp_path)
        victim_base = int(victim.name.split(".")[0])
        flip(victim, 40)  # in the header of the segment's first batch
        assert (await host.fetch(KEY, 0, 1 << 20, 0)).batches  # elsewhere: served
        # Inside the batch: the read parses its header to find it, and fails.
        with pytest.raises(UnavailableError, match="out of service"):
            await host.fetch(KEY, victim_base + 1, 1 << 20, 0)
        assert host.is_fenced(KEY) and host.counters["damage_found"] == 1
        assert "bad batch header" in host.fenced()[0].reason
    finally:
        await host.close()


def test_a_reported_batch_is_verified_on_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    asyncio.run(asyncio.wait_for(_reported_batch(tmp_path, caplog), DEADLINE_S * 3))


async def _reported_batch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = await leading_host(tmp_path, NO_SCRUB)
    try:
        offsets = await fill(host, 60)
        victim = sealed_segment(tmp_path)
        victim_base = int(victim.name.split(".")[0])
        assert await host.check_reported(KEY, victim_base + 2) is None  # intact: kept
        assert not host.fenced()
        with pytest.raises(OffsetOutOfRangeError):
            await host.check_reported(KEY, offsets[-1] + 5)
        flip(victim, 100)
        with caplog.at_level(logging.ERROR, logger="laminar.server.host"):
            damage = await host.check_reported(KEY, victim_base + 2)
        assert isinstance(damage, CorruptSegmentError) and damage.offset == victim_base
        assert host.is_fenced(KEY) and host.counters["damage_found"] == 1
        lines = [r.getMessage() for r in caplog.records if "damage found" in r.getMessage()]
        assert len(lines) == 1
        assert f"file={victim} offset={victim_base}" in lines[0]
        assert "replica=events/0" in lines[0] and "source=consumer report" in lines[0]
        with pytest.raises(UnavailableError):
            await host.check_reported(KEY, victim_base)
    finally:
        await host.close()


class CorruptReads:
    """A log factory whose logs' reads raise CorruptSegmentError once their
    directory is in ``failing``."""

    def __init__(self) -> None:
        self.failing: set[str] = set()

    def open(self, directory: str, config: LogConfig) -> LogStorage:
        log = SegmentLog.open(directory, config)
        real_read = log.read

        def read(offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
            if any(directory.startswith(root) for root in self.failing):
                raise CorruptSegmentError(f"{directory}/x.log", offset, 0, "injected")
            return real_read(offset, max_bytes, upper_offset=upper_offset)

        log.read = read  # type: ignore[method-assign]
        return log


@run
async def test_a_leader_whose_replication_read_meets_corruption_is_fenced(tmp_path: Path) -> None:
    disks = CorruptReads()
    cluster = Cluster(tmp_path, disks, NO_SCRUB)  # fenced replicas stay fenced
    await cluster.start()
    try:
        await wait_until(cluster.leader, "a leader")
        leader = cluster.leader()
        assert leader is not None
        await leader.produce(KEY, encode_batch([b"one"]), Acks.ALL, 5)
        name = leader.node_id
        disks.failing.add(str(tmp_path / name))
        # The leader appends, then reads the batch back to send it: that read fails.
        produce = asyncio.ensure_future(leader.produce(KEY, encode_batch([b"two"]), Acks.ALL, 5))
        await wait_until(lambda: leader.is_fenced(KEY), "the leader to fence itself")
        with pytest.raises(Exception):  # noqa: B017 - refused or unknown outcome, either way
            await produce
        assert leader.counters["damage_found"] == 1
        await wait_until(
            lambda: (new := cluster.leader()) is not None and new is not leader, "a new leader"
        )
        new_leader = cluster.leader()
        assert new_leader is not None
        result = await new_leader.produce(KEY, encode_batch([b"three"]), Acks.ALL, 5)
        assert result.base_offset >= 1
    finally:
        await cluster.close()


class FailingLog:
    """Stands in for a SegmentLog whose reads fail with ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def scrub(self, cursor: object, max_bytes: int) -> object:
        raise self.error


@pytest.mark.parametrize(
    ("error", "damage"),
    [
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError(errno.EBADMSG, "Bad message"), True),
        (OSError(errno.EMFILE, "Too many open files"), False),
        (StorageError("cannot open segment file x: Too many open files"), False),
    ],
    ids=["eio", "ebadmsg", "emfile", "open-failed"],
)
def test_a_failed_scrub_read_is_damage_only_when_the_disk_says_so(
    error: BaseException, damage: bool
) -> None:
    log = FailingLog(error)
    item = ScrubItem(KEY, log, None)  # type: ignore[arg-type]
    (outcome,) = scrub_logs([item], 1 << 20, lambda: False)
    assert (outcome.damage is error) is damage
    assert (outcome.failure is error) is not damage


@run
async def test_damage_the_scrubber_finds_is_set_aside_when_the_replica_reopens(
    tmp_path: Path,
) -> None:
    """The fenced replica is reopened after ``storage_retry_ms``: the core's read of
    the log meets the damage, which is set aside with a note and the log cut before
    it (the node's tick loop goes on). A replica of one has nobody to heal from: it
    stays offline, listed as damaged, until an operator accepts the loss; then it
    leads again with the records before the damage."""
    config = HostConfig(scrub_bytes_per_s=256 << 20, scrub_pass_min_ms=0, storage_retry_ms=100)
    host = await leading_host(tmp_path, config)
    try:
        offsets = await fill(host, 60)
        victim = sealed_segment(tmp_path)
        flip(victim, os.path.getsize(victim) // 2)
        await wait_until(lambda: host.counters["damage_found"] >= 1, "the scrubber to find it")
        await wait_until(host.damaged, "the reopened replica to be listed as damaged")
        (damaged,) = host.damaged()
        assert damaged.key == KEY and str(victim) in damaged.reason
        assert damaged.quarantine is not None
        assert (Path(damaged.quarantine) / "note.json").exists()
        replica = host.get(KEY)
        assert replica is not None and replica.core.healing
        end = replica.core.end_offset
        assert offsets[0] < end < offsets[-1]  # the valid prefix is kept
        assert replica.core.role is not Role.LEADER  # its own vote does not count

        assert host.accept_data_loss(KEY)
        await wait_until(lambda: replica.core.role is Role.LEADER, "a leader again")
        assert not host.damaged()
        result = await host.produce(KEY, encode_batch([b"after"]), Acks.ALL, 5)
        assert result.base_offset >= end
    finally:
        await host.close()
