"""Topics that live, on real node processes (issue 34, points 1 and 2).

Three nodes with small segments and a fast retention check (a ``--config`` file).
One cluster runs the whole story, through the raw gRPC stub:

- a replication-factor change from 1 to 3 moves replicas one node at a time (every
  ``config`` control batch of the partition's log differs from the one before by
  one node), and the records produced before the move are readable on every node;
- partitions added (2 → 4) get leaders and take records, and a node restarted
  afterwards does not found them again;
- a retention change reaches every replica without a restart: old segments go.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from laminar_client import Client

from laminar.errors import RetriableError
from laminar.grpc_errors import error_from_rpc
from laminar.records import DEFAULT_LIMITS, encode_batch, iter_batches
from laminar.replica.confchange import config_in
from laminar.replica.types import GroupConfig
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    SETTLE_S,
    metadata_leader,
    node_id,
    start_cluster,
    stopped_after,
    values_on,
    wait_leader,
    wait_topic_ready,
)

CONFIG = """
[host]
retention_check_ms = 200

[log]
segment_bytes_max = 4096
"""
TOPIC = "live"
AGED = "aged"
HOUR_MS = 3_600_000


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(request, start_cluster(tmp_path, 3, node_config=CONFIG)) as cluster:
        yield cluster


def admin(cluster: ProcessCluster, method: str, request: object) -> object:
    """An admin call to the metadata leader, retried while it is elsewhere or busy."""
    answers: list[object] = []

    def once() -> bool:
        stub = cluster.stub(metadata_leader(cluster))
        try:
            answers.append(getattr(stub, method)(request, timeout=CLIENT_TIMEOUT_S))
        except grpc.RpcError as error:
            if isinstance(error_from_rpc(error), RetriableError):
                return False
            raise
        return True

    wait_for(once, SETTLE_S, f"{method} to be answered")
    return answers[-1]


def leader_info(cluster: ProcessCluster, topic: str, partition: int) -> pb.PartitionInfo | None:
    """The partition as its leader reports it (voters, learners), if one does."""
    for node in cluster.nodes:
        if not node.running:
            continue
        answer = cluster.stub(node).Metadata(pb.MetadataRequest(topics=[topic]), timeout=2)
        partitions = answer.topics[0].partitions
        if partition < len(partitions) and partitions[partition].leader == answer.node_id:
            return partitions[partition]
    return None


def configs_on_disk(node: NodeProcess, topic: str, partition: int) -> list[GroupConfig]:
    """The ``config`` control batches of the node's replica, in log order."""
    configs = []
    for path in node.segment_files(topic, partition):
        data = path.read_bytes()
        for position, header in iter_batches(data, verify=False):
            batch = data[position : position + header.length]
            config = config_in(header, batch, DEFAULT_LIMITS)
            if config is not None:
                configs.append(config)
    return configs


def changed_nodes(before: GroupConfig, after: GroupConfig) -> set[str]:
    """The nodes whose role (voter, learner, none) differs between two configs."""

    def roles(config: GroupConfig) -> set[tuple[str, str]]:
        return {(n, "voter") for n in config.voters} | {(n, "learner") for n in config.learners}

    return {node for node, _ in roles(before) ^ roles(after)}


def produce(cluster: ProcessCluster, topic: str, partition: int, batch: bytes) -> None:
    """One batch through the partition's leader (acks=all)."""
    leader = wait_leader(cluster, topic, partition)
    request = pb.ProduceRequest(topic=topic, partition=partition, batches=[batch])
    cluster.stub(leader).Produce(request, timeout=CLIENT_TIMEOUT_S)


def test_alter_and_add_partitions_on_a_live_cluster(cluster: ProcessCluster) -> None:
    nodes = [node_id(node) for node in cluster.nodes]
    admin(
        cluster,
        "CreateTopic",
        pb.CreateTopicRequest(
            name=TOPIC, config=pb.TopicConfig(partitions=2, replication_factor=1)
        ),
    )
    wait_topic_ready(cluster, TOPIC, 2)
    before = {p: [f"before-{p}-{i}".encode() for i in range(20)] for p in range(2)}
    for partition, values in before.items():
        for start in range(0, len(values), 5):
            produce(cluster, TOPIC, partition, encode_batch(values[start : start + 5]))

    # 1 → 3 replicas: moved one node at a time; the records are everywhere.
    answer = admin(
        cluster,
        "AlterTopic",
        pb.AlterTopicRequest(name=TOPIC, set=pb.TopicConfig(replication_factor=3)),
    )
    assert isinstance(answer, pb.AlterTopicResponse)
    assert (answer.previous.config.replication_factor, answer.topic.config.replication_factor) == (
        1,
        3,
    )
    for partition in range(2):
        wait_for(
            lambda p=partition: (  # type: ignore[misc]
                (info := leader_info(cluster, TOPIC, p)) is not None
                and len(info.voters) == 3
                and not info.learners
            ),
            SETTLE_S,
            f"{TOPIC}/{partition} to have 3 voters",
        )
        leader = wait_leader(cluster, TOPIC, partition)
        configs = configs_on_disk(leader, TOPIC, partition)
        assert len(configs) >= 4, configs  # the founding one, then a learner and a promotion each
        for earlier, later in itertools.pairwise(configs):
            assert len(changed_nodes(earlier, later)) == 1, (earlier, later)
        assert set(configs[-1].voters) == set(nodes)
    with Client([n.grpc for n in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S) as client:
        for partition, values in before.items():
            for replica in nodes:
                wait_for(
                    lambda p=partition, r=replica, v=values: values_on(client, TOPIC, p, r) == v,  # type: ignore[misc]
                    SETTLE_S,
                    f"{replica} to serve {TOPIC}/{partition}",
                )

    # 2 → 4 partitions: founded, led, writable; a restart does not found them again.
    grown = admin(cluster, "CreatePartitions", pb.CreatePartitionsRequest(name=TOPIC, to=4))
    assert isinstance(grown, pb.CreatePartitionsResponse)
    assert (grown.previous, grown.topic.config.partitions) == (2, 4)
    wait_topic_ready(cluster, TOPIC, 4)
    for partition in (2, 3):
        produce(cluster, TOPIC, partition, encode_batch([f"new-{partition}".encode()]))
    restarted = cluster.nodes[1]  # a founder of both (3 replicas on 3 nodes)
    founding = re.compile(f"founding [0-9]+ replicas of topic {TOPIC} ")
    assert founding.search(restarted.log_path.read_text(errors="replace"))
    log_from = restarted.log_path.stat().st_size
    # SIGKILL: a graceful stop would also take it out of every group and back
    # (a learner again), which is another story than the founding guard.
    cluster.kill(restarted)
    cluster.start(restarted)
    cluster.wait_ready(restarted)

    def knows_four_partitions() -> bool:
        answer = cluster.stub(restarted).Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=2)
        return len(answer.topics[0].partitions) == 4

    wait_for(knows_four_partitions, SETTLE_S, "the restarted node to apply the catalogue")
    after_restart = restarted.log_path.read_bytes()[log_from:].decode(errors="replace")
    assert f"topic {TOPIC} partitions added" in after_restart  # the applier replayed it
    assert founding.search(after_restart) is None
    with Client([n.grpc for n in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S) as client:
        for partition in (2, 3):
            wait_for(
                lambda p=partition: (
                    values_on(client, TOPIC, p, node_id(restarted))  # type: ignore[misc]
                    == [f"new-{p}".encode()]
                ),
                SETTLE_S,
                f"the restarted node to serve {TOPIC}/{partition}",
            )

    # Retention altered: old segments go on every replica, no restart.
    admin(
        cluster,
        "CreateTopic",
        pb.CreateTopicRequest(name=AGED, config=pb.TopicConfig(partitions=1, replication_factor=3)),
    )
    wait_topic_ready(cluster, AGED, 1)
    old_ms = int(time.time() * 1000) - HOUR_MS
    for index in range(12):
        values = [bytes([index]) * 1000] * 2
        produce(cluster, AGED, 0, encode_batch(values, timestamps_ms=old_ms + index))
    wait_for(
        lambda: all(len(node.segment_files(AGED, 0)) >= 4 for node in cluster.nodes),
        SETTLE_S,
        "every replica to hold several segments",
    )
    admin(
        cluster,
        "AlterTopic",
        pb.AlterTopicRequest(name=AGED, set=pb.TopicConfig(retention_ms=60_000)),
    )
    wait_for(
        lambda: all(
            (files := node.segment_files(AGED, 0)) and int(files[0].stem) > 0
            for node in cluster.nodes
        ),
        SETTLE_S,
        "every replica to delete its old segments",
    )
