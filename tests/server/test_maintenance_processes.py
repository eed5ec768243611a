"""Maintenance mode on real node processes (issue 30, part 4).

A node in maintenance hands its leaderships over and leads nothing, and while it is
stopped (gracefully: it gossips that it left) its replicas stay for longer than
the move grace and longer than gossip remembers it (``reap_after_ms``); when it
returns it catches up from where it was, and ``exit`` gives it its preferred
leadership back. The graces are short here (move grace 2 s, reap 3 s) so that
the stop outlasts both in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from laminar_client import Client, PartitionHealth

from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    create_topic,
    node_id,
    produce_values,
    stopped_after,
    wait_leader,
    wait_settled,
    wait_values,
)

MOVE_GRACE_MS = 2_000
REAP_AFTER_MS = 3_000
CONFIG = f"""
replica_move_grace_ms = {MOVE_GRACE_MS}
maintenance_grace_ms = 3600000

[membership]
gossip_to_dead_ms = 2000
reap_after_ms = {REAP_AFTER_MS}
"""
TOPIC = "maint"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    config = tmp_path / "node.toml"
    config.write_text(CONFIG)
    with stopped_after(request, ProcessCluster(tmp_path / "cluster", preset="local")) as cluster:
        first = cluster.add_node(bootstrap=True, extra_args=["--config", str(config)])
        cluster.wait_ready(first)
        for _ in range(2):
            cluster.add_node(extra_args=["--config", str(config)])
        for node in cluster.nodes:
            cluster.wait_ready(node)
        wait_settled(cluster)
        yield cluster


def healths(client: Client) -> dict[int, PartitionHealth]:
    return {h.partition: h for h in client.describe_cluster().partitions if h.topic == TOPIC}


@pytest.mark.slow  # make test-slow: a stop past the move grace, about 12 s
def test_a_node_in_maintenance_keeps_its_replicas_through_a_long_stop(
    cluster: ProcessCluster,
) -> None:
    with Client([n.grpc for n in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S) as client:
        create_topic(cluster, client, TOPIC, PARTITIONS, 3)
        before = {p: [f"before-{p}-{i}".encode() for i in range(30)] for p in range(PARTITIONS)}
        for partition, values in before.items():
            produce_values(client, TOPIC, partition, values)
        # The victim leads partition 0 as its preferred leader (first in placement).
        wait_for(
            lambda: (
                all(
                    h.leader == h.replicas[0] and not h.under_replicated
                    for h in healths(client).values()
                )
                and len(healths(client)) == PARTITIONS
            ),
            30,
            "every partition led by its preferred leader, in sync",
        )
        victim = next(n for n in cluster.nodes if node_id(n) == healths(client)[0].leader)
        victim_id = node_id(victim)

        assert client.set_maintenance(victim_id, True) == (victim_id,)
        wait_for(
            lambda: all(h.leader not in (None, victim_id) for h in healths(client).values()),
            20,
            f"{victim_id} to hand over every leadership",
        )
        assert client.describe_cluster().maintenance == (victim_id,)

        cluster.terminate(victim)  # graceful: it gossips that it left
        stopped_at = time.monotonic()
        during = {p: [f"during-{p}-{i}".encode() for i in range(30)] for p in range(PARTITIONS)}
        for partition, values in during.items():
            produce_values(client, TOPIC, partition, values)
        # Past the move grace and past gossip's reaping, no replica moves: the victim
        # stays in placement and in every group.
        outlast_s = (MOVE_GRACE_MS + REAP_AFTER_MS) / 1000 + 3
        checks = 0
        replanned = False
        while time.monotonic() - stopped_at < outlast_s:
            if not replanned and time.monotonic() - stopped_at > REAP_AFTER_MS / 1000 + 1:
                # A catalogue change makes every node recompute placement past the
                # move grace: it must still count the victim.
                client.create_topic("replan", 1, 1)
                replanned = True
            for partition, health in healths(client).items():
                assert victim_id in health.replicas, (partition, health)
                assert victim_id in health.voters, (partition, health)
            checks += 1
            time.sleep(0.2)  # polling an invariant through the window, not waiting
        assert checks > 5 and replanned
        assert client.describe_cluster().maintenance == (victim_id,)  # held while down

        cluster.start(victim)
        cluster.wait_ready(victim)
        caught_up_from = time.monotonic()
        for partition in range(PARTITIONS):
            wait_values(client, TOPIC, partition, victim_id, before[partition] + during[partition])
        caught_up_s = time.monotonic() - caught_up_from
        # Back, still in maintenance: it leads nothing.
        assert all(h.leader != victim_id for h in healths(client).values())
        assert client.describe_cluster().maintenance == (victim_id,)

        assert client.set_maintenance(victim_id, False) == ()
        assert wait_leader(cluster, TOPIC, 0, timeout_s=30) is not None
        wait_for(
            lambda: healths(client)[0].leader == victim_id,
            30,
            f"{victim_id} to lead partition 0 again (its preferred leadership)",
        )
        assert client.describe_cluster().maintenance == ()
        print(f"maintenance catch-up {caught_up_s:.2f} s")
