"""A full disk on a real node (issue 28): a tmpfs data directory, a steady producer,
a filler file. Used by ``tests/disk_full`` (marker ``disk_full``) and
``bench/repair_bench.py``; needs root (it mounts a tmpfs).

Theory of operation. :func:`disk_full_run` starts three node processes
(:class:`~laminar.testing.processes.ProcessCluster`) whose third has its data
directory on a small tmpfs the run mounts (:func:`mounted_tmpfs`, unmounted
whatever happens) and a watermark of :data:`WATERMARK_BYTES`; creates a topic
(replication factor 3) and picks a partition that node leads; and has a
:class:`~laminar.testing.load.PacedWriter` (a :class:`~laminar_client.Producer`, acks=all) write to
that partition every :data:`SEND_INTERVAL_S`, recording each acknowledgement.
Then two fills, each followed by freeing the space:

* ``watermark``: a filler file takes free space down to half the watermark;
  the node turns full at its next check and hands its leaderships over;
* ``no_space``: the filler takes every free byte, so that appends fail with
  ``ENOSPC`` (as in the issue's trial) unless the watermark acts first.

For each fill a :class:`Phase` records the longest time without an acknowledged
write from the fill until the space is freed :data:`FULL_WINDOW_S` later, when the
node said it was full (its ``DescribeCluster``), whether ``Client.describe_cluster``
showed it, and after the filler is deleted, when the node had space again and when
it led its partition again with no replica out of service (placement's preferred
leader, so it returns by itself). At the end every replica of the partition is read
and checked against the acknowledgements (:func:`laminar.testing.chaos.check`:
nothing acknowledged may be lost). The run waits on conditions with deadlines and
stops every process it started.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from laminar_client import Client

from laminar.server.disk import statvfs_usage
from laminar.testing.chaos import Findings, check, read_replica
from laminar.testing.load import PacedWriter
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb

TMPFS_BYTES = 40 << 20
"""Size of the full node's data directory (the issue's trial had 40 MB)."""
WATERMARK_BYTES = 8 << 20
"""That node's ``--disk-free-bytes-min``."""
TOPIC = "disk-full"
PARTITIONS = 12
"""Enough that the tmpfs node is the preferred leader of one (placement spreads them)."""
VALUE_BYTES = 1000
SEND_INTERVAL_S = 0.005
"""The steady writer sends one record this often (about 200 KB/s)."""
FULL_WINDOW_S = 5.0
"""How long the disk stays full before the filler is deleted."""
WAIT_S = 60.0
"""The longest wait for any condition of the run."""
FILLS = (("watermark", WATERMARK_BYTES // 2), ("no_space", 0))
"""Each fill's name and the free space it leaves (0: none at all)."""


def tmpfs_unsupported_reason() -> str | None:
    """Why this machine cannot run :func:`disk_full_run`, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "a full-disk run mounts a Linux tmpfs"
    if os.geteuid() != 0:
        return "a full-disk run mounts a tmpfs: it needs root"
    missing = [tool for tool in ("mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"a full-disk run needs {' and '.join(missing)}"
    return None


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``path`` (made if missing) for the
    block; unmounted after it, lazily if something still holds it."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "laminar-disk-full", path],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", path], check=False, capture_output=True)


def fill(directory: Path, leave_bytes: int) -> Path:
    """Write ``directory/filler`` until the filesystem has at most ``leave_bytes``
    free (0: until a write fails with ``ENOSPC``); its path."""
    path = directory / "filler"
    chunk = b"\xa5" * (1 << 20)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            free = statvfs_usage(str(directory)).free_bytes
            size = len(chunk) if leave_bytes == 0 else min(len(chunk), free - leave_bytes)
            if size <= 0:
                return path
            try:
                os.write(descriptor, chunk[:size])
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                if len(chunk) <= 4096:
                    return path
                chunk = chunk[: len(chunk) // 16]  # the last pages, in smaller writes
    finally:
        os.close(descriptor)


@dataclass(frozen=True, slots=True)
class Phase:
    """One fill of the node's disk and its freeing (see the module docstring)."""

    name: str
    write_gap_s: float
    """The longest time without an acknowledged write, from the fill to the freeing."""
    full_after_s: float
    """From the fill until the node said it was full."""
    status_showed_full: bool
    """``Client.describe_cluster`` (``laminar cluster status``) showed it full."""
    leader_while_full: str
    fenced_while_full: int
    """Replicas the node fenced for want of space (log lines) in this phase."""
    space_back_s: float
    """From deleting the filler until the node said it had space again."""
    back_in_service_s: float
    """From deleting the filler until it led the partition again, no replica fenced."""


@dataclass
class DiskFullRun:
    node: str
    """The node whose data directory filled."""
    partition: int
    phases: list[Phase]
    acked: int
    errors: dict[str, int]
    error_examples: list[str]
    findings: Findings

    def phase(self, name: str) -> Phase:
        return next(phase for phase in self.phases if phase.name == name)


def disk_full_run(root: Path) -> DiskFullRun:
    """The whole run (see the module docstring) under ``root``, which it leaves
    unmounted; raises when a condition is not met within :data:`WAIT_S`."""
    with (
        mounted_tmpfs(root / "node2", TMPFS_BYTES),
        ProcessCluster(root, preset="local") as cluster,
    ):
        bootstrap = _start(cluster)
        full = cluster.nodes[2]
        node_id = full.node_id()
        with Client(bootstrap) as client:
            partition = _partition_led_by(client, node_id)
            writer = PacedWriter(
                bootstrap,
                TOPIC,
                partition,
                interval_s=SEND_INTERVAL_S,
                value=lambda sequence: b"%09d" % sequence + b"." * VALUE_BYTES,
            )
            writer.start()
            try:
                started_s = time.monotonic()
                wait_for(lambda: writer.last_ack_s() > started_s, WAIT_S, "the first writes")
                phases = [
                    _fill_and_free(cluster, client, writer, full, partition, name, leave)
                    for name, leave in FILLS
                ]
            finally:
                writer.stop()
            reads = [read_replica(client, TOPIC, partition, node.grpc) for node in cluster.nodes]
        findings = check(writer.acks, writer.sent, {partition: reads})
        return DiskFullRun(
            node_id,
            partition,
            phases,
            len(writer.acks),
            dict(writer.errors),
            writer.error_examples,
            findings,
        )


def _start(cluster: ProcessCluster) -> list[str]:
    """Three nodes, the third with the small watermark, all seeing each other."""
    watermark = ["--disk-free-bytes-min", str(WATERMARK_BYTES), "--disk-free-percent-min", "0"]
    cluster.wait_ready(cluster.add_node(bootstrap=True))
    cluster.wait_ready(cluster.add_node())
    cluster.wait_ready(cluster.add_node(extra_args=watermark))
    wait_for(cluster.all_see_each_other, WAIT_S, "every node to see 3 alive members")
    return [node.grpc for node in cluster.nodes]


def _partition_led_by(client: Client, node_id: str) -> int:
    """Create the topic; the partition ``node_id`` leads once every one is led."""
    client.create_topic(TOPIC, PARTITIONS, 3)
    led: list[int] = []

    def all_led() -> bool:
        topic = client.metadata(refresh=True).topics[TOPIC]  # KeyError: not applied there yet
        if not all(p.leader and len(p.voters) == 3 for p in topic.partitions):
            return False
        led[:] = [p.partition for p in topic.partitions if p.leader == node_id]
        return True

    wait_for(all_led, WAIT_S, f"every partition of {TOPIC} to have a leader and 3 voters")
    if not led:
        raise RuntimeError(f"placement made {node_id} the leader of none of {PARTITIONS}")
    return led[0]


def _fill_and_free(
    cluster: ProcessCluster,
    client: Client,
    writer: PacedWriter,
    node: NodeProcess,
    partition: int,
    name: str,
    leave_bytes: int,
) -> Phase:
    stub = cluster.stub(node)

    def disk() -> pb.NodeDisk:
        answer: pb.DescribeClusterResponse = stub.DescribeCluster(
            pb.DescribeClusterRequest(), timeout=5
        )
        return answer.disk

    def leader() -> str | None:
        return client.metadata(refresh=True).topics[TOPIC].partitions[partition].leader

    fenced_before = _fenced_lines(node)
    filled_s = time.monotonic()
    filler = fill(node.data_dir, leave_bytes)
    wait_for(lambda: disk().full, WAIT_S, f"{node.node_id()} to say its disk is full")
    full_after_s = time.monotonic() - filled_s
    status = client.describe_cluster()
    showed = any(d.node_id == node.node_id() and d.full for d in status.disks)
    wait_for(lambda: leader() not in (None, node.node_id()), WAIT_S, "a leader with disk space")
    # An observation window, not a wait for something: the writes go on meanwhile.
    time.sleep(max(0.0, filled_s + FULL_WINDOW_S - time.monotonic()))
    leader_while_full = leader() or "-"
    freed_s = time.monotonic()
    write_gap_s = writer.gap_s(filled_s, freed_s)
    fenced = _fenced_lines(node) - fenced_before
    filler.unlink()
    wait_for(lambda: not disk().full, WAIT_S, f"{node.node_id()} to have space again")
    space_back_s = time.monotonic() - freed_s

    def in_service() -> bool:
        answer = stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
        led = [p for p in answer.partitions if (p.topic, p.partition) == (TOPIC, partition)]
        return not answer.fenced and bool(led) and not led[0].under_replicated

    wait_for(in_service, WAIT_S, f"{node.node_id()} to lead {TOPIC}/{partition} again")
    return Phase(
        name,
        write_gap_s,
        full_after_s,
        showed,
        leader_while_full,
        fenced,
        space_back_s,
        time.monotonic() - freed_s,
    )


def _fenced_lines(node: NodeProcess) -> int:
    with contextlib.suppress(OSError):
        return len(re.findall(r"replica fenced ", node.log_path.read_text(errors="replace")))
    return 0
