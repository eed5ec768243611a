"""``/metrics`` and ``/ready`` of three real node processes, checked against what
``DescribeCluster`` and a client saw (issue 32, part 1).

Each node serves HTTP on ``127.0.0.x:7300`` (``ProcessCluster(metrics=True)``). A
paced writer produces while the cluster is scraped: the records the nodes count as
produced are the records the writer got acknowledged; partitions under-replicated
follow DescribeCluster to N after a SIGKILL and back to 0 after the restart; the
members by state follow gossip; ``/ready`` answers 200 on settled nodes and again
on the restarted one. Waits are on conditions with deadlines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from laminar_client import Client

from laminar.testing.load import PacedWriter
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.testing.scrape import Samples, ready, scrape
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    create_topic,
    node_id,
    running,
    start_cluster,
    stopped_after,
)

TOPIC = "watched"
PARTITIONS = 4
DEADLINE_S = 60.0
RECORDS_MIN = 100


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(request, start_cluster(tmp_path / "cluster", 3, metrics=True)) as cluster:
        yield cluster


def describe(cluster: ProcessCluster, node: NodeProcess) -> pb.DescribeClusterResponse:
    return cluster.stub(node).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)


def under_replicated(cluster: ProcessCluster) -> tuple[int, int]:
    """Partitions under-replicated across the running nodes: (by DescribeCluster,
    by /metrics), each node counting those it leads."""
    described = scraped = 0
    for node in running(cluster):
        described += sum(1 for h in describe(cluster, node).partitions if h.under_replicated)
        scraped += int(scrape(node.metrics).value("laminar_partitions_under_replicated"))
    return described, scraped


def members_by_state(cluster: ProcessCluster, node: NodeProcess) -> tuple[dict[str, int], Samples]:
    counts: dict[str, int] = {}
    for member in describe(cluster, node).members:
        counts[member.state] = counts.get(member.state, 0) + 1
    return counts, scrape(node.metrics)


def agree_on_members(cluster: ProcessCluster, node: NodeProcess, state: str, count: int) -> bool:
    described, samples = members_by_state(cluster, node)
    return (
        described.get(state, 0) == count and samples.value("laminar_members", state=state) == count
    )


def test_metrics_follow_the_cluster_under_load(cluster: ProcessCluster) -> None:
    addresses = [node.grpc for node in cluster.nodes]
    with Client(addresses, timeout_s=CLIENT_TIMEOUT_S) as client:
        create_topic(cluster, client, TOPIC, PARTITIONS, 3)
    for node in cluster.nodes:
        # Ready once its metadata reached the cluster's offset (a create a moment ago
        # may still be on its way: "metadata applied to offset 9 of 10").
        wait_for(
            lambda node=node: ready(node.metrics) == (True, "ready"),  # type: ignore[misc]
            DEADLINE_S,
            f"node{node.index} ready",
        )
        samples = scrape(node.metrics)
        assert samples.value("laminar_ready") == 1
        assert samples.value("laminar_members", state="alive") == 3
        assert samples.value("laminar_peer_links", state="connected") == 2
        led = len(describe(cluster, node).partitions)
        assert samples.value("laminar_partitions_led") == led
    # Under load: what the nodes count as produced is what the writer got acknowledged.
    writer = PacedWriter(addresses, TOPIC, partition=1, interval_s=0.01)
    writer.start()
    try:
        wait_for(lambda: len(writer.acks) >= RECORDS_MIN, DEADLINE_S, f"{RECORDS_MIN} acks")
        scraped = [scrape(node.metrics) for node in cluster.nodes]  # scrapes under load
        assert sum(s.value("laminar_produced_records_total") for s in scraped) > 0
    finally:
        writer.stop()
    assert not writer.errors, writer.error_examples
    acked = len(writer.acks)
    totals = [scrape(node.metrics) for node in cluster.nodes]
    assert sum(s.value("laminar_produced_records_total") for s in totals) == acked
    assert sum(s.value("laminar_produced_bytes_total") for s in totals) > acked * 9
    calls = sum(
        s.total("laminar_request_duration_seconds_count", rpc=rpc)
        for s in totals
        for rpc in ("Produce", "ProduceMany")
    )
    assert calls >= 1
    for samples in totals:
        assert samples.value("laminar_fsync_duration_seconds_count") > 0
        assert samples.value("laminar_partitions_under_replicated") == 0
    assert under_replicated(cluster) == (0, 0)

    # A SIGKILL: the partitions the survivors lead are under-replicated, as
    # DescribeCluster says, and the victim is dead to both.
    victim = cluster.nodes[2]
    victim_id = node_id(victim)
    cluster.kill(victim)
    survivors = cluster.nodes[:2]

    def follows_the_kill() -> bool:
        described, scraped = under_replicated(cluster)
        return described == scraped and described >= PARTITIONS

    wait_for(follows_the_kill, DEADLINE_S, "under-replicated partitions after the kill")
    for node in survivors:
        wait_for(
            lambda node=node: agree_on_members(cluster, node, "dead", 1),  # type: ignore[misc]
            DEADLINE_S,
            f"{victim_id} dead in DescribeCluster and /metrics of node{node.index}",
        )
        assert scrape(node.metrics).value("laminar_peer_links", state="connected") <= 1
    elections = sum(s.value("laminar_elections_total") for s in map(scrape_at, survivors))
    gained = sum(s.value("laminar_leaderships_gained_total") for s in map(scrape_at, survivors))
    assert gained >= 1 and elections >= 0

    # The restart: back to 0 under-replicated, every member alive, ready again.
    cluster.start(victim)
    cluster.wait_ready(victim)
    wait_for(lambda: ready(victim.metrics)[0], DEADLINE_S, "the restarted node to be ready")
    wait_for(
        lambda: under_replicated(cluster) == (0, 0), DEADLINE_S, "no under-replicated partition"
    )
    for node in cluster.nodes:
        wait_for(
            lambda node=node: agree_on_members(cluster, node, "alive", 3),  # type: ignore[misc]
            DEADLINE_S,
            f"every member alive in DescribeCluster and /metrics of node{node.index}",
        )
        # Ready once its metadata reached the cluster's offset (a create a moment ago
        # may still be on its way: "metadata applied to offset 9 of 10").
        wait_for(
            lambda node=node: ready(node.metrics) == (True, "ready"),  # type: ignore[misc]
            DEADLINE_S,
            f"node{node.index} ready",
        )


def scrape_at(node: NodeProcess) -> Samples:
    return scrape(node.metrics)
