"""Keyed compaction on three real node processes (issue 34, point 3), over loopback.

A topic with ``cleanup_policy`` ``compact``, small segments and a low
``min_cleanable_dirty_ratio`` takes 5,000 updates of 100 keys, the last update of
ten keys a tombstone. Once every replica has applied a compaction command:

- every offset fetched from each node directly (raw gRPC Fetch, each node
  answering from its own replica) gives the same batch bytes on every node;
- a Consumer reads exactly one record per key, the newest (a tombstone for the
  deleted keys, kept for ``delete_retention_ms``), and the offsets have gaps.

Then a larger topic is compacted at a paced rate and a follower is killed with
SIGKILL as soon as its segments are being swapped (in the middle of the job); it
restarts, runs the command again, and serves the same bytes as the others for
every batch.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from laminar_client import Consumer

from laminar.records import encode_batch, iter_batches
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_alter_topic_processes import admin, produce
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    node_id,
    start_cluster,
    stopped_after,
    wait_leader,
    wait_topic_ready,
)

CONFIG = """
[host]
retention_check_ms = 200
compaction_bytes_per_s_max = 262144

[log]
segment_bytes_max = 4096
"""
TOPIC = "changelog"
LARGE = "changelog-large"
KEYS = 100
UPDATES = 5_000
PER_BATCH = 50
DELETED = 10
"""Keys k0..k9 end with a tombstone."""
DEADLINE_S = 60.0
DAY_MS = 86_400_000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(request, start_cluster(tmp_path, 3, node_config=CONFIG)) as cluster:
        yield cluster


def create_compact(cluster: ProcessCluster, name: str, *, min_lag_ms: int = 0) -> None:
    config = pb.TopicConfig(
        partitions=1,
        replication_factor=3,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.1,
        min_compaction_lag_ms=min_lag_ms,
    )
    admin(cluster, "CreateTopic", pb.CreateTopicRequest(name=name, config=config))
    wait_topic_ready(cluster, name, 1)


def updates() -> list[tuple[bytes, bytes | None]]:
    """5,000 updates of 100 keys; each of the first ten keys' last one a tombstone."""
    out: list[tuple[bytes, bytes | None]] = [
        (b"k%d" % (index % KEYS), b"k%d-v%d" % (index % KEYS, index)) for index in range(UPDATES)
    ]
    for index in range(UPDATES - KEYS, UPDATES - KEYS + DELETED):
        out[index] = (out[index][0], None)
    return out


def produce_keyed(
    cluster: ProcessCluster, topic: str, records: Sequence[tuple[bytes, bytes | None]]
) -> None:
    for start in range(0, len(records), PER_BATCH):
        chunk = records[start : start + PER_BATCH]
        batch = encode_batch(
            [value for _, value in chunk],
            keys=[key for key, _ in chunk],
            timestamps_ms=int(time.time() * 1000),
        )
        produce(cluster, topic, 0, batch)


def applied(node: NodeProcess, topic: str) -> list[int]:
    """The offsets of the compaction commands ``node`` logged as applied to ``topic``."""
    text = node.log_path.read_text(errors="replace")
    pattern = rf"keyed compaction applied {re.escape(topic)}/0 node=\S+ offset=(\d+)"
    return [int(found) for found in re.findall(pattern, text)]


def fetch_batches(cluster: ProcessCluster, node: NodeProcess, topic: str) -> list[bytes]:
    """Every batch ``node``'s own replica serves below its high watermark, raw."""
    api = cluster.stub(node)
    batches: list[bytes] = []
    offset = 0
    while True:
        answer = api.Fetch(
            pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=CLIENT_TIMEOUT_S
        )
        assert answer.served_by == node_id(node)
        if offset >= answer.high_watermark or not answer.batches:
            return batches
        data = answer.batches
        for position, header in iter_batches(data, verify=False):
            if header.next_offset <= offset:
                continue
            batches.append(bytes(data[position : position + header.length]))
            offset = header.next_offset


def same_everywhere(cluster: ProcessCluster, topic: str) -> bool:
    logs = [fetch_batches(cluster, node, topic) for node in cluster.nodes]
    return all(log == logs[0] for log in logs)


def fetch_at(cluster: ProcessCluster, node: NodeProcess, topic: str, offset: int) -> bytes:
    """The batch a Fetch at ``offset`` answers with first (the one holding it, or
    the next after a gap)."""
    answer = cluster.stub(node).Fetch(
        pb.FetchRequest(topic=topic, partition=0, offset=offset, max_bytes=1),
        timeout=CLIENT_TIMEOUT_S,
    )
    data = answer.batches
    for position, header in iter_batches(data, verify=False):
        if header.next_offset > offset:
            return bytes(data[position : position + header.length])
    raise AssertionError(f"{node_id(node)}: nothing at {offset}")


def test_keyed_compaction_on_three_nodes(cluster: ProcessCluster) -> None:
    create_compact(cluster, TOPIC)
    records = updates()
    produce_keyed(cluster, TOPIC, records)
    # Records of another key push the updates out of the active segment (never
    # compacted) on every replica.
    produce_keyed(cluster, TOPIC, [(b"tail", b"x" * 400)] * (4 * PER_BATCH))
    newest: dict[bytes, bytes | None] = dict(records)

    def keys_once() -> bool:
        seen: dict[bytes, list[bytes | None]] = {}
        with Consumer([n.grpc for n in cluster.nodes]) as consumer:
            consumer.assign([(TOPIC, 0)])
            offsets = []
            for record in consumer.records(timeout_s=3):
                assert record.key is not None
                offsets.append(record.offset)
                if record.key != b"tail":
                    seen.setdefault(record.key, []).append(record.value)
                if record.key == b"tail" and record.value and len(offsets) > KEYS:
                    break
        keys_seen[0] = seen
        gaps[0] = any(b - a > 1 for a, b in itertools.pairwise(offsets))
        return all(len(values) == 1 for values in seen.values()) and len(seen) == KEYS

    keys_seen: list[dict[bytes, list[bytes | None]]] = [{}]
    gaps = [False]
    # The gaps wait for a command that covers a superseded "tail" batch too: one
    # decided while the first tail batch was the active segment covers the updates
    # alone, which survive at consecutive offsets (the last 100 updates).
    wait_for(
        lambda: all(applied(node, TOPIC) for node in cluster.nodes) and keys_once() and gaps[0],
        DEADLINE_S,
        "every replica to apply a compaction covering the updates and a tail batch",
    )
    # The Consumer read exactly the newest record of each key, tombstones included.
    assert {key: values[0] for key, values in keys_seen[0].items()} == newest
    assert sum(value is None for value in newest.values()) == DELETED
    assert gaps[0]

    # Every replica serves the same bytes for every offset (once all applied the
    # same commands: wait for that).
    wait_for(lambda: same_everywhere(cluster, TOPIC), DEADLINE_S, "equal batches on every node")
    leader = wait_leader(cluster, TOPIC, 0)
    end = cluster.stub(leader).Fetch(
        pb.FetchRequest(topic=TOPIC, partition=0, offset=0), timeout=CLIENT_TIMEOUT_S
    )
    high_watermark = end.high_watermark
    answers = {
        node_id(node): [fetch_at(cluster, node, TOPIC, o) for o in range(high_watermark)]
        for node in cluster.nodes
    }
    first, *others = answers.values()
    for other in others:
        assert other == first
    assert len(set(first)) < high_watermark // 10  # most offsets fall in gaps

    # A follower killed in the middle of a paced compaction of a larger topic. Its
    # minimum lag holds compaction off while it is written, then one paced job
    # compacts it all: jobs decided while the records came in could otherwise have
    # covered them all before the watch below began (CI saw that once).
    create_compact(cluster, LARGE, min_lag_ms=DAY_MS)
    big = [(b"key-%d" % (i % 1_000), bytes([i % 251]) * 40 + b"%d" % i) for i in range(12_000)]
    leader = wait_leader(cluster, LARGE, 0)
    victim = next(node for node in cluster.nodes if node is not leader)
    before = len(applied(victim, LARGE))
    produce_keyed(cluster, LARGE, big)
    produce_keyed(cluster, LARGE, [(b"tail", b"x" * 400)] * (4 * PER_BATCH))
    assert len(applied(victim, LARGE)) == before

    def inodes() -> dict[str, int]:
        found = {}
        for path in victim.segment_files(LARGE, 0):
            try:
                found[path.name] = os.stat(path).st_ino
            except FileNotFoundError:
                continue
        return found

    def swapping() -> bool:
        now = inodes()
        changed = [name for name, inode in now.items() if snapshot.get(name, inode) != inode]
        snapshot.update(now)
        return bool(changed) and len(applied(victim, LARGE)) == seen_applied[0]

    seen_applied = [before]
    snapshot = inodes()
    lag_off = pb.TopicConfig(min_compaction_lag_ms=0)
    admin(cluster, "AlterTopic", pb.AlterTopicRequest(name=LARGE, set=lag_off))
    wait_for(swapping, DEADLINE_S, "the victim to swap a segment in the job")
    cluster.kill(victim)
    assert len(applied(victim, LARGE)) == seen_applied[0]  # killed before the job ended
    cluster.start(victim)
    cluster.wait_ready(victim)
    wait_for(
        lambda: len(applied(victim, LARGE)) > seen_applied[0],
        DEADLINE_S,
        "the restarted victim to apply the command again",
    )
    wait_for(
        lambda: same_everywhere(cluster, LARGE),
        DEADLINE_S,
        "the restarted victim to serve the others' bytes",
    )
