"""A replica repaired from its peers on real nodes (issue 28), under a steady
producer: how fast it heals and what it costs the writes. Used by
``bench/repair_bench.py`` (phase ``repair``) and its smoke test.

Theory of operation. :func:`repair_run` starts three node processes
(:class:`~laminar.testing.processes.ProcessCluster`, fsync on) with the leader's
learner budget ``[host] recovery_bytes_per_s`` set for the run; creates topic
:data:`TOPIC` (replication factor 3) and fills one partition that the victim,
node 2, does not lead with ``size_bytes`` of :data:`VALUE_BYTES` records; and
topic :data:`LOAD_TOPIC`, which a :class:`~laminar.testing.load.PacedWriter` writes to
:data:`LOAD_RATE` times a second (1 KB, acks=all, no linger), recording each
record's latency. After :data:`IDLE_WINDOW_S` of writes alone (the idle figure),
node 2 is killed (SIGKILL: a stopped node leaves the membership and placement
would move its replicas instead of healing them), one byte of its replica's
first segment is flipped (:data:`FLIP_POSITION`: the valid prefix is empty, so
the whole replica is repaired), and the node is restarted. It quarantines the
replica's damaged files, starts, and the replica catches up from the leader as a
learner. The run waits until the node lists no damaged replica and it is a voter
and in sync on every partition of both topics (healed), then compares the
victim's copy of the filled partition with the leader's, byte for byte (the
batches each serves, through ``Client.fetch(replica=...)``).

With ``victim_tmpfs`` (root only) the victim's data directory is a tmpfs: its
repair writes do not reach the disk the other two nodes write to, as on
machines of their own.

The run waits on conditions with deadlines and stops every process it started.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from laminar_client import Client, Producer

from laminar.records import next_offset
from laminar.testing.disk_full import mounted_tmpfs
from laminar.testing.load import PacedWriter
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb

TOPIC = "repair"
LOAD_TOPIC = "load"
PARTITIONS = 3
"""Of :data:`TOPIC`, so that one of them is led by a node other than the victim."""
VALUE_BYTES = 10_000
LOAD_VALUE_BYTES = 1000
LOAD_RATE = 200
"""Records a second the load writer sends."""
IDLE_WINDOW_S = 5.0
FLIP_POSITION = 200
"""The byte flipped in the victim's first segment: inside its first batch."""
WAIT_S = 60.0
"""The longest wait for any condition but the repair."""
HEAL_BYTES_PER_S_MIN = 1 << 20
"""The repair is given ``WAIT_S`` plus the time to repair at this speed."""
FETCH_BYTES = 4 << 20
REPAIR_WINDOW_MIN_S = 1.0
"""The producer's latency during a repair is taken over at least this long from
the restart (a small replica heals in less)."""


@dataclass(frozen=True, slots=True)
class RepairRun:
    size_bytes: int
    """What the damaged replica held, and the repair sent again."""
    recovery_bytes_per_s: int
    victim_tmpfs: bool
    fill_s: float
    """Writing the partition (three replicas, fsync on)."""
    restart_s: float
    """From the restart of the damaged node until it answered."""
    repair_s: float
    """From the node answering until it was healed (see the module docstring)."""
    quarantined: tuple[str, ...]
    """The files the node set aside."""
    p99_idle_s: float
    p99_repair_s: float
    load_samples: tuple[int, int]
    """Records behind each p99: (idle, repair)."""
    load_errors: dict[str, int]
    identical: bool
    """The repaired copy served exactly the leader's batches."""

    @property
    def repair_mb_s(self) -> float:
        return self.size_bytes / (1 << 20) / self.repair_s

    @property
    def p99_ratio(self) -> float:
        return self.p99_repair_s / self.p99_idle_s


def repair_run(
    root: Path, size_bytes: int, recovery_bytes_per_s: int, *, victim_tmpfs: bool = False
) -> RepairRun:
    """The whole run (see the module docstring) under ``root``; raises when a
    condition is not met in time."""
    config = root / "node.toml"
    config.write_text(f"[host]\nrecovery_bytes_per_s = {recovery_bytes_per_s}\n")
    extra = ["--config", str(config)]
    with contextlib.ExitStack() as stack:
        if victim_tmpfs:
            stack.enter_context(mounted_tmpfs(root / "node2", size_bytes * 2 + (512 << 20)))
        cluster = stack.enter_context(ProcessCluster(root, preset="local"))
        cluster.wait_ready(cluster.add_node(bootstrap=True, extra_args=extra))
        for _ in range(2):
            cluster.wait_ready(cluster.add_node(extra_args=extra))
        wait_for(cluster.all_see_each_other, WAIT_S, "every node to see 3 alive members")
        bootstrap = [node.grpc for node in cluster.nodes]
        victim = cluster.nodes[2]
        client = stack.enter_context(Client(bootstrap))
        partition, leader = _create(client, victim.node_id())
        fill_s = _fill(bootstrap, partition, size_bytes)
        wait_for(lambda: _healed(cluster, client, victim), WAIT_S, "every replica in sync")
        writer = PacedWriter(
            bootstrap,
            LOAD_TOPIC,
            interval_s=1 / LOAD_RATE,
            value=lambda _: b"l" * LOAD_VALUE_BYTES,
        )
        writer.start()
        try:
            idle_from = time.monotonic()
            wait_for(lambda: writer.p99_s(idle_from, time.monotonic())[1] > 0, WAIT_S, "writes")
            # An observation window, polled as the repair is (the polls cost the nodes
            # a little too): the writes go on meanwhile.
            wait_for(
                lambda: (
                    _healed(cluster, client, victim)
                    and time.monotonic() >= idle_from + IDLE_WINDOW_S
                ),
                WAIT_S,
                "the idle window",
            )
            idle_to = time.monotonic()
            cluster.kill(victim)
            _flip_first_segment(victim, partition)
            restarted = time.monotonic()
            cluster.start(victim)
            cluster.wait_ready(victim, WAIT_S)
            answered = time.monotonic()
            heal_wait_s = WAIT_S + size_bytes / HEAL_BYTES_PER_S_MIN
            wait_for(lambda: _healed(cluster, client, victim), heal_wait_s, "the repair")
            healed = time.monotonic()
            # A repair faster than the window (a small replica) is measured over the
            # window: the writes go on meanwhile.
            time.sleep(max(0.0, answered + REPAIR_WINDOW_MIN_S - time.monotonic()))
        finally:
            writer.stop()
        repaired = _digest(client, partition, victim.node_id())
        identical = repaired == _digest(client, partition, leader)
        quarantine = victim.quarantine_dir
        quarantined = tuple(sorted(p.name for p in quarantine.rglob("*") if p.is_file()))
        p99_idle, idle_count = writer.p99_s(idle_from, idle_to)
        p99_repair, repair_count = writer.p99_s(
            answered, max(healed, answered + REPAIR_WINDOW_MIN_S)
        )
        return RepairRun(
            size_bytes,
            recovery_bytes_per_s,
            victim_tmpfs,
            fill_s,
            answered - restarted,
            healed - answered,
            quarantined,
            p99_idle,
            p99_repair,
            (idle_count, repair_count),
            dict(writer.errors),
            identical,
        )
    raise AssertionError("unreachable")  # pragma: no cover - mypy: ExitStack may swallow


def _create(client: Client, victim: str) -> tuple[int, str]:
    """Both topics; a partition of :data:`TOPIC` the victim does not lead, and the
    node that leads it."""
    client.create_topic(TOPIC, PARTITIONS, 3)
    client.create_topic(LOAD_TOPIC, 1, 3)
    chosen: list[tuple[int, str]] = []

    def led() -> bool:
        metadata = client.metadata(refresh=True)
        topics = [metadata.topics.get(TOPIC), metadata.topics.get(LOAD_TOPIC)]
        for topic in topics:
            if not topic or not all(p.leader and len(p.voters) == 3 for p in topic.partitions):
                return False
        chosen[:] = [
            (p.partition, p.leader)
            for p in metadata.topics[TOPIC].partitions
            if p.leader is not None and p.leader != victim
        ]
        return bool(chosen)

    wait_for(led, WAIT_S, f"{TOPIC} and {LOAD_TOPIC} to have leaders and 3 voters")
    return chosen[0]


def _fill(bootstrap: list[str], partition: int, size_bytes: int) -> float:
    value = os.urandom(VALUE_BYTES)
    started = time.monotonic()
    with Producer(bootstrap, linger_s=0.02, delivery_timeout_s=WAIT_S) as producer:
        for _ in range(max(1, size_bytes // VALUE_BYTES)):
            producer.send(TOPIC, value, partition=partition)
        producer.flush(WAIT_S * 10)
    return time.monotonic() - started


def _flip_first_segment(node: NodeProcess, partition: int) -> None:
    first = node.segment_files(TOPIC, partition)[0]
    with open(first, "r+b") as file:
        file.seek(FLIP_POSITION)
        byte = file.read(1)
        file.seek(FLIP_POSITION)
        file.write(bytes([byte[0] ^ 0xFF]))


def _healed(cluster: ProcessCluster, client: Client, victim: NodeProcess) -> bool:
    """The victim lists no damaged replica and is a voter, in sync, everywhere."""
    own: pb.DescribeClusterResponse = cluster.stub(victim).DescribeCluster(
        pb.DescribeClusterRequest(), timeout=5
    )
    if own.damaged:
        return False
    node = victim.node_id()
    return all(
        node in health.voters and node in health.in_sync
        for health in client.describe_cluster().partitions
        if health.topic in (TOPIC, LOAD_TOPIC)
    )


def _digest(client: Client, partition: int, node: str) -> str:
    """A hash of every batch ``node``'s replica serves below its high watermark."""
    digest = hashlib.blake2b()
    for batches in _batches(client, partition, node):
        digest.update(batches)
    return digest.hexdigest()


def _batches(client: Client, partition: int, node: str) -> Iterator[bytes]:
    offset = 0
    while True:
        result = client.fetch(
            TOPIC, partition, offset, replica=node, max_bytes=FETCH_BYTES, timeout_s=10
        )
        if not result.batches:
            return
        yield result.batches
        offset = next_offset(result.batches)
        if offset >= result.high_watermark:
            return
