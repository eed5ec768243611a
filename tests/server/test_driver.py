"""The replica driver on its own: no event loop, a hand-turned clock, memory logs.

What the host decides, checked where it is decided: a flush round's sync failing
fences the replica before anything of the round is carried out, its waiting
callers are failed, and the tick pass reopens it from what its disk kept.
"""

from __future__ import annotations

import random

from laminar.errors import StorageError
from laminar.records import encode_batch
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.messages import Ready
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.storage import LogStorage
from laminar.server.driver import ReplicaDriver, Standalone
from laminar.testing.replica_sim import (
    SimDisk,
    SimLog,
    SimReplica,
    memory_driver,
    sim_host_config,
)

KEY = ("t", 0)


class _Shell:
    """Records what the driver asks of its shell."""

    def __init__(self) -> None:
        self.carried: list[tuple[int, ...]] = []  # request ids answered, per Ready
        self.closed: list[Exception | None] = []

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        raise AssertionError(f"a single voter sends nothing ({peer})")

    def flush_wanted(self) -> None:
        pass

    def wake_early(self) -> None:
        pass

    def carried_out(self, replica: SimReplica, ready: Ready, leader_found: bool) -> None:
        self.carried.append(tuple(reply.request_id for reply in ready.replies))

    def replica_closed(self, replica: SimReplica, error: Exception | None) -> None:
        self.closed.append(error)


class _Node:
    def __init__(self) -> None:
        self.now_ms = 0
        self.disk = SimDisk()
        self.logs: dict[str, SimLog] = {}
        self.shell = _Shell()
        self.driver = memory_driver(
            "n1",
            ReplicaConfig.simulation(),
            owner=Standalone(),
            shell=self.shell,
            clock=lambda: self.now_ms,
            rng=random.Random(1),
            host_config=sim_host_config(),
            log_factory=self._open_log,
        )

    def _open_log(self, directory: str, config: LogConfig) -> LogStorage:
        log = self.logs.get(directory)
        if log is not None and self.driver.is_fenced(KEY):
            log = log.crash()  # reopened: what the disk kept
        self.logs[directory] = log = log or SimLog(self.disk)
        return log

    def run_for(self, duration_ms: int) -> None:
        """Flush rounds (syncs at once) and tick passes until ``duration_ms`` passed."""
        driver: ReplicaDriver[SimReplica] = self.driver
        end = self.now_ms + duration_ms
        while True:
            while driver.dirty:
                round_ = driver.begin_round()
                if round_ is not None:
                    results = [_sync(replica.log) for replica in round_.syncs]
                    driver.complete(round_, results, 0.0 if results else None)
            if self.now_ms >= end:
                return
            self.now_ms = min(end, driver.sleep_until(self.now_ms))
            driver.tick(self.now_ms, 0)


def _sync(log: LogStorage) -> object:
    try:
        log.sync()
    except OSError as error:
        return error
    return None


def test_a_failed_sync_fences_the_replica_fails_its_callers_and_the_tick_pass_reopens_it() -> None:
    node = _Node()
    driver = node.driver
    replica = driver.open_replica(KEY, GroupConfig((NodeId("n1"),)))
    node.run_for(2_000)
    assert replica.core.role is Role.LEADER
    durable_end = replica.core.durable_end
    replica.calls[7] = "client"
    driver.propose(replica, 7, encode_batch([b"x"]), Acks.ALL)
    round_ = driver.begin_round()
    assert round_ is not None and round_.syncs == [replica] and round_.inline
    node.disk.failing_syncs = 1
    driver.complete(round_, [_sync(replica.log)], 0.001)
    assert driver.is_fenced(KEY) and driver.get(KEY) is None
    assert (7,) not in node.shell.carried  # nothing of the round was carried out
    (error,) = node.shell.closed
    assert isinstance(error, StorageError)
    (fenced,) = driver.fenced()
    assert fenced.durable_end == durable_end and "simulated fsync failure" in fenced.reason
    node.run_for(sim_host_config().storage_retry_ms + 100)
    reopened = driver.get(KEY)
    assert reopened is not None and not driver.is_fenced(KEY)
    assert reopened.log.end_offset == durable_end  # the unsynced append is gone
    node.run_for(2_000)
    assert reopened.core.role is Role.LEADER
