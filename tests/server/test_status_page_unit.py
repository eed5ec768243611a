"""``/status.json``'s builder against made-up ``NodeStatus`` answers, the history
rings, and the page's escaping in headless Chromium (issue 32, part 4)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from http import HTTPStatus

import pytest

from laminar.server.observability import status as status_module
from laminar.server.observability.history import CounterHistory, LeadershipLog
from laminar.server.observability.http import HttpServer, Response
from laminar.server.observability.page import CONTENT_SECURITY_POLICY, PAGE
from laminar.server.observability.status import StatusInput, build_status
from laminar.testing.browser import Dom, chromium, dump_dom
from laminar.testing.scrape import get
from laminar.v1 import laminar_pb2 as pb

HOSTILE = '<img src=x onerror="document.title=1">'
"""A group name (any bytes are allowed) that is markup if the page does not escape."""


def health(
    topic: str, partition: int, leader: str, term: int, hw: int, *, under: bool = False
) -> pb.PartitionHealth:
    return pb.PartitionHealth(
        topic=topic,
        partition=partition,
        leader=leader,
        replicas=["n1", "n2", "n3"],
        voters=["n1", "n2", "n3"],
        in_sync=[leader] if under else ["n1", "n2", "n3"],
        under_replicated=under,
        term=term,
        high_watermark=hw,
    )


def answer(node_id: str, **fields: object) -> pb.NodeStatusResponse:
    members = [
        pb.Member(node_id="n1", state="alive", grpc_address="127.0.0.1:1"),
        pb.Member(node_id="n2", state="alive", grpc_address="127.0.0.1:2"),
        pb.Member(node_id="n3", state="dead", grpc_address="127.0.0.1:3"),
    ]
    cluster = pb.DescribeClusterResponse(
        cluster_id="c1",
        node_id=node_id,
        members=members,
        partitions=fields.pop("partitions", []),  # type: ignore[arg-type]
        fenced=fields.pop("fenced", []),  # type: ignore[arg-type]
        disk=pb.NodeDisk(full=bool(fields.pop("disk_full", False))),
        maintenance=fields.pop("maintenance", []),  # type: ignore[arg-type]
    )
    return pb.NodeStatusResponse(cluster=cluster, sample_interval_ms=5000, **fields)  # type: ignore[arg-type]


def made_up() -> StatusInput:
    """n1 serves the page; n2 answers; n3 is dead (not asked)."""
    n1 = answer(
        "n1",
        partitions=[health("events", 0, "n1", 2, 100), health("__groups", 0, "n1", 1, 7)],
        samples=[
            pb.CounterSample(age_ms=10_000, produced_records=0, fetched_records=0),
            pb.CounterSample(age_ms=5_000, produced_records=500, fetched_records=50),
            pb.CounterSample(age_ms=0, produced_records=1500, fetched_records=50),
        ],
        leadership_changes=[
            pb.LeadershipChange(topic="events", partition=1, leader="n2", term=3, age_ms=9_000),
        ],
        maintenance=["n2"],
    )
    n2 = answer(
        "n2",
        partitions=[
            health("events", 1, "n2", 3, 40, under=True),
            health("events", 0, "n2", 1, 90),  # a stale claim: term 1 < n1's 2
        ],
        samples=[
            pb.CounterSample(age_ms=6_000, produced_records=900, fetched_records=0),
            pb.CounterSample(age_ms=1_000, produced_records=10, fetched_records=0),  # restarted
        ],
        leadership_changes=[
            pb.LeadershipChange(topic="events", partition=1, leader="n2", term=3, age_ms=9_500),
            pb.LeadershipChange(topic="events", partition=0, leader="n1", term=2, age_ms=20_000),
        ],
        groups=[
            pb.GroupStatus(
                group=HOSTILE,
                state="stable",
                member_count=2,
                committed=[
                    pb.GroupCommitted(topic="events", partition=0, committed_offset=60),
                    pb.GroupCommitted(topic="events", partition=1, committed_offset=40),
                    pb.GroupCommitted(topic="events", partition=2, committed_offset=0),
                ],
            )
        ],
        fenced=[pb.FencedReplica(topic="events", partition=1, reason="fsync", fenced_for_ms=1500)],
        disk_full=True,
    )
    catalogue = (
        ("__groups", (("n1", "n2", "n3"),)),
        ("events", (("n1", "n2", "n3"), ("n2", "n1", "n3"), ("n3", "n1", "n2"))),
    )
    return StatusInput(n1, {"n2": n2, "n3": "not asked: dead"}, catalogue)


def test_members_show_state_maintenance_disk_and_who_answered() -> None:
    members = {m["node_id"]: m for m in build_status(made_up())["members"]}
    assert [members[n]["state"] for n in ("n1", "n2", "n3")] == ["alive", "alive", "dead"]
    assert members["n1"]["serving"] and not members["n2"]["serving"]
    assert members["n2"]["maintenance"] and not members["n1"]["maintenance"]
    assert members["n2"]["disk_full"] is True and members["n1"]["disk_full"] is False
    assert members["n3"]["disk_full"] is None  # unknown: it did not answer
    assert members["n3"]["answered"] is False and members["n3"]["error"] == "not asked: dead"


def test_partitions_as_their_leaders_report_them() -> None:
    built = build_status(made_up())
    partitions = {p["id"]: p for p in built["partitions"]}
    # The higher term wins a double claim; the leader's high watermark is shown.
    assert partitions["events/0"]["leader"] == "n1"
    assert partitions["events/0"]["high_watermark"] == 100
    assert partitions["events/1"]["under_replicated"] is True
    # Nobody leads events/2: leaderless and under-replicated, with placement's replicas.
    assert partitions["events/2"] | {} == {
        "id": "events/2",
        "topic": "events",
        "partition": 2,
        "leader": None,
        "replicas": ["n3", "n1", "n2"],
        "in_sync": [],
        "high_watermark": None,
        "under_replicated": True,
        "term": None,
    }
    # Internal partitions only when under-replicated; all are counted.
    assert "__groups/0" not in partitions
    assert built["partitions_total"] == 4
    assert built["under_replicated"] == 2 and built["leaderless"] == 1
    # Under-replicated first, then by name.
    assert [p["id"] for p in built["partitions"]] == ["events/1", "events/2", "events/0"]


def test_partitions_are_capped_with_a_count_of_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_module, "PARTITIONS_SHOWN_MAX", 2)
    built = build_status(made_up())
    assert len(built["partitions"]) == 2 and built["partitions_more"] == 1


def test_rates_from_each_nodes_samples() -> None:
    rates = {r["node_id"]: r for r in build_status(made_up())["rates"]}
    assert rates["n1"]["points"] == [
        {"ago_s": 5.0, "produce": 100.0, "fetch": 10.0},
        {"ago_s": 0.0, "produce": 200.0, "fetch": 0.0},
    ]
    assert rates["n2"]["points"] == []  # its counters went down: a restart, not a rate
    assert rates["n3"] == {"node_id": "n3", "points": [], "error": "not asked: dead"}


def test_groups_with_their_lag_against_the_leaders_high_watermarks() -> None:
    [group] = build_status(made_up())["groups"]
    assert group == {
        "group": HOSTILE,
        "coordinator": "n2",
        "state": "stable",
        "members": 2,
        "partitions": 3,
        "lag_records": (100 - 60) + (40 - 40),
        "lag_max_records": 40,
        "lag_unknown": 1,  # events/2 has no leader to say its high watermark
    }


def test_fenced_replicas_and_leadership_changes_merged() -> None:
    built = build_status(made_up())
    assert built["fenced"] == [
        {"node_id": "n2", "topic": "events", "partition": 1, "reason": "fsync", "for_s": 1.5}
    ]
    assert built["damaged"] == [] and built["fenced_more"] == 0
    # Seen by two nodes, listed once, dated by the earliest sighting; newest first.
    assert [
        (c["id"], c["term"], c["ago_s"], c["seen_by"]) for c in built["leadership_changes"]
    ] == [
        ("events/1", 3, 9.5, ["n1", "n2"]),
        ("events/0", 2, 20.0, ["n2"]),
    ]


def test_leadership_changes_capped_at_50() -> None:
    many = [
        pb.LeadershipChange(topic="t", partition=index, leader="n1", term=1, age_ms=index)
        for index in range(80)
    ]
    built = build_status(StatusInput(answer("n1", leadership_changes=many), {}, ()))
    changes = built["leadership_changes"]
    assert len(changes) == 50 and changes[0]["partition"] == 0 and changes[-1]["partition"] == 49


def test_history_rings_are_bounded() -> None:
    history = CounterHistory(interval_ms=1_000, history_ms=10_000)
    for second in range(30):
        history.sample(second * 1000, second, 2 * second)
    samples = history.samples()
    assert len(samples) == 11 and samples[0].at_ms == 19_000 and samples[-1].fetched_records == 58
    log = LeadershipLog(changes_max=3)
    for term in range(5):
        log.note(term, "t", 0, "n1", term)
    assert [change.term for change in log.changes()] == [2, 3, 4]
    with pytest.raises(ValueError):
        CounterHistory(interval_ms=0)


def test_json_is_what_the_page_reads() -> None:
    text = json.dumps(build_status(made_up()))
    assert HOSTILE in json.loads(text)["groups"][0]["group"]


# ---------------------------------------------------------------- the page in Chromium


@pytest.fixture
def served() -> Iterator[str]:
    """The page and a made-up /status.json, on an HTTP server of the node's kind."""
    server = HttpServer("127.0.0.1:0")
    body = json.dumps(build_status(made_up())).encode()
    server.route(
        "/",
        lambda: Response(
            HTTPStatus.OK,
            PAGE,
            "text/html; charset=utf-8",
            (("Content-Security-Policy", CONTENT_SECURITY_POLICY),),
        ),
    )
    server.route("/status.json", lambda: Response(HTTPStatus.OK, body, "application/json"))
    server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        server.close()


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed")
def test_the_page_shows_names_as_text_never_as_markup(served: str) -> None:
    dom = Dom(dump_dom(f"http://{served}/", budget_ms=5_000))
    group = dom.one("data-group", HOSTILE)  # the attribute holds the name as it is
    assert HOSTILE in group.content
    assert group.attributes["data-lag"] == "40"
    assert not [element for element in dom.elements if element.tag == "img"]
    [title] = [element for element in dom.elements if element.tag == "title"]
    assert title.content == "Laminar status"
    # The script ran under the page's CSP (its hash is right): every section is drawn,
    # and it refreshed itself (every 2 s of the 5 s of virtual time).
    assert dom.one("data-member", "n3").attributes["data-state"] == "dead"
    assert dom.one("data-member", "n2").attributes["data-maintenance"] == "true"
    assert dom.one("data-member", "n2").attributes["data-disk-full"] == "true"
    assert dom.one("data-partition", "events/2").attributes["data-under-replicated"] == "true"
    assert dom.one("data-partition", "events/0").attributes["data-under-replicated"] == "false"
    assert dom.one("data-rates", "n1").attributes["data-produce-max"] == "200"
    assert dom.one("data-fenced", "n2/events/1")
    assert len(dom.find("data-change")) == 2
    assert int(dom.one("id", "updated").attributes["data-refreshes"]) >= 2


def test_the_page_is_served_with_its_policy(served: str) -> None:
    host, port = served.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        body = response.read().decode()
    finally:
        connection.close()
    assert response.status == 200 and body.startswith("<!doctype html>")
    assert response.getheader("Content-Type") == "text/html; charset=utf-8"
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    policy = response.getheader("Content-Security-Policy") or ""
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy
    assert "unsafe-inline" not in policy
    status, body = get(served, "/status.json")
    assert status == 200 and json.loads(body)["node_id"] == "n1"
