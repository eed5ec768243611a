"""Protocol versions on real node processes (issue 30, part 4): adjacent versions
interoperate, a node two versions older is refused with a clear log line and a
``cluster status`` entry.

The test hook ``LAMINAR_TEST_PROTOCOL_VERSION`` makes a node speak (and gossip)
another version: the cluster runs at 3, one node joins at 2 (accepted: it holds a
replica and serves what was written) and one at 1 (refused by the nodes at 3, given
no replicas; the node at 2 still accepts it, as adjacent).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from laminar_client import Client

from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    create_topic,
    produce_values,
    stopped_after,
    wait_values,
)

HOOK = "LAMINAR_TEST_PROTOCOL_VERSION"


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(request, ProcessCluster(tmp_path / "cluster", preset="local")) as cluster:
        yield cluster


def test_an_adjacent_version_is_accepted_and_one_two_versions_older_refused(
    cluster: ProcessCluster,
) -> None:
    first = cluster.add_node(bootstrap=True, env={HOOK: "3"})
    cluster.wait_ready(first)
    second = cluster.add_node(env={HOOK: "3"})
    adjacent = cluster.add_node(env={HOOK: "2"})
    for node in (second, adjacent):
        cluster.wait_ready(node)
    with Client([n.grpc for n in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S) as client:
        wait_for(
            lambda: sum(m.state == "alive" for m in client.describe_cluster().members) == 3,
            30,
            "three members alive",
        )
        create_topic(cluster, client, "versions", 1, 3)
        values = [f"v{i}".encode() for i in range(20)]
        produce_values(client, "versions", 0, values)
        wait_values(client, "versions", 0, "node2", values)  # the node at version 2
        assert client.describe_cluster().incompatible_peers == ()

        old = cluster.add_node(env={HOOK: "1"})
        cluster.wait_ready(old)

        def refusals() -> set[tuple[str, str, int]]:
            return {
                (p.node_id, p.peer_id, p.protocol_version)
                for p in client.describe_cluster().incompatible_peers
            }

        # Every node at 3 refuses it; it refuses them (they are too new for it); the
        # node at 2 and it accept each other.
        wanted = {("node0", "node3", 1), ("node1", "node3", 1)}
        wait_for(lambda: wanted <= refusals(), 30, "the nodes at 3 to refuse node3")
        assert not any(refuser == "node2" for refuser, _, _ in refusals())
        status = client.describe_cluster()
        entry = next(p for p in status.incompatible_peers if p.node_id == "node0")
        assert entry.reason == (
            "protocol version 1 is too old for this node's 3 (adjacent versions interoperate)"
        )
        log = first.log_path.read_text(errors="replace")
        assert "incompatible peer node=node0 peer=node3" in log
        assert "protocol version 1 is too old for this node's 3" in log
        # It holds no replica: placement leaves it out, the partition stays on 0-2.
        health = next(h for h in status.partitions if h.topic == "versions")
        assert "node3" not in health.replicas and not health.under_replicated
        produce_values(client, "versions", 0, [b"after"])
        wait_values(client, "versions", 0, "node2", [*values, b"after"])
