"""The status page (``GET /`` of ``--metrics``) of a live 3-node cluster, read in
headless Chromium (issue 32, part 4).

The page is loaded fresh for each look (``chromium --dump-dom``: its script fetches
``/status.json``, which the serving node builds from every node's ``NodeStatus``
answer) and its DOM read through its ``data-`` attributes: every member alive,
each partition with its leader, produce rates from the samples, a group (named to
inject HTML if the page did not escape) with its lag; then a SIGKILL of a node,
and the page must show it dead and its partitions under-replicated, with the
leadership changes that followed. A screenshot goes to
``artifacts/status-page.png`` at the repository root (kept by CI).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from laminar_client import Client

from laminar.records import encode_batch
from laminar.testing.browser import Dom, chromium, dump_dom, screenshot
from laminar.testing.processes import ProcessCluster, wait_for
from laminar.testing.scrape import get
from tests.server.test_cluster import (
    CLIENT_TIMEOUT_S,
    create_topic,
    node_id,
    start_cluster,
    stopped_after,
)

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed")

TOPIC = "paged"
PARTITIONS = 3
GROUP = '<img src=x onerror="document.title=1">'
RECORDS = 200
DEADLINE_S = 30.0
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
SAMPLE_INTERVAL_MS = 500


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(
        request,
        start_cluster(
            tmp_path / "cluster",
            3,
            metrics=True,
            node_config=f"[metrics]\nsample_interval_ms = {SAMPLE_INTERVAL_MS}\n",
        ),
    ) as cluster:
        yield cluster


def page(url: str) -> Dom:
    return Dom(dump_dom(url, budget_ms=1_000))


def test_the_page_follows_a_node_failure(cluster: ProcessCluster) -> None:
    addresses = [node.grpc for node in cluster.nodes]
    with Client(addresses, timeout_s=CLIENT_TIMEOUT_S) as client:
        create_topic(cluster, client, TOPIC, PARTITIONS, 3)
        for index in range(RECORDS // 10):
            client.produce(TOPIC, index % PARTITIONS, encode_batch([b"v%d" % index] * 10))
        client.reset_offsets(GROUP, {(TOPIC, 0): 0})
    url = f"http://{cluster.nodes[0].metrics}/"
    status, body = get(cluster.nodes[0].metrics, "/")
    assert status == 200 and body.startswith("<!doctype html>")

    def settled() -> bool:
        dom = page(url)
        members = [m.attributes for m in dom.find("data-member")]
        rows = [p for p in dom.find("data-partition") if p.attributes["data-partition"][0] != "_"]
        rates = dom.find("data-rates")
        found[:] = [dom]
        return (
            len(members) == 3
            and all(m["data-state"] == "alive" and m["data-answered"] == "true" for m in members)
            and len(rows) == PARTITIONS
            and not any(row.attributes["data-under-replicated"] == "true" for row in rows)
            and sum(float(r.attributes["data-produce-max"]) for r in rates) > 0
            and len(dom.find("data-group", GROUP)) == 1
        )

    found: list[Dom] = []
    wait_for(settled, DEADLINE_S, "the page to show the cluster settled, rates and the group")
    dom = found[0]
    nodes = {node_id(node) for node in cluster.nodes}
    for index in range(PARTITIONS):
        assert dom.one("data-partition", f"{TOPIC}/{index}").attributes["data-leader"] in nodes
    # The group's lag: partition 0's high watermark (its records and the leader's
    # no-op) minus the committed offset 0, as the page shows them.
    head = dom.one("data-partition", f"{TOPIC}/0").attributes["data-high-watermark"]
    group = dom.one("data-group", GROUP)
    assert int(group.attributes["data-lag"]) == int(head) >= RECORDS // PARTITIONS
    assert GROUP in group.content  # shown as text
    assert not [e for e in dom.elements if e.tag == "img"]  # not as markup
    assert "data-error" not in dom.one("id", "updated").attributes

    victim = cluster.nodes[2]
    cluster.kill(victim)

    def shows_the_failure() -> bool:
        dom = page(url)
        member = dom.find("data-member", node_id(victim))
        rows = [
            p
            for p in dom.find("data-partition")
            if p.attributes["data-partition"].startswith(TOPIC)
        ]
        return (
            len(member) == 1
            and member[0].attributes["data-state"] == "dead"
            and len(rows) == PARTITIONS
            and all(row.attributes["data-under-replicated"] == "true" for row in rows)
        )

    wait_for(shows_the_failure, DEADLINE_S, f"{node_id(victim)} dead and {TOPIC} under-replicated")
    dom = page(url)
    assert dom.one("data-member", node_id(victim)).attributes["data-answered"] == "false"
    assert dom.find("data-change")  # the elections after the kill, at least
    screenshot(url, ARTIFACTS / "status-page.png", budget_ms=1_000)
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000
