"""The metrics collector against made-up snapshots, the request statistics, the HTTP
server's routes and limits, and ``/ready`` before and after the node is ready.

The HTTP tests run a real :class:`HttpServer` on a free loopback port; ``/ready`` is
asked of a :class:`MetricsEndpoint` whose node is a stand-in (only the attributes
:func:`readiness` reads) on an event loop of its own thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from laminar.errors import ConfigError, NotLeaderError, StorageError, UnavailableError
from laminar.grpc_errors import error_code_name
from laminar.server.disk import DiskStatus
from laminar.server.observability.collector import NodeCollector
from laminar.server.observability.config import MetricsConfig
from laminar.server.observability.endpoint import MetricsEndpoint
from laminar.server.observability.histogram import (
    REQUEST_SERIES_MAX,
    Histogram,
    RequestStats,
)
from laminar.server.observability.http import HttpServer, Response, text
from laminar.server.observability.snapshot import (
    GroupOffset,
    NodeSnapshot,
    PartitionSeries,
    Readiness,
)
from laminar.server.transport import TransportCounters
from laminar.testing.scrape import Samples, get, parse


def snapshot(**changes: Any) -> NodeSnapshot:
    stats = RequestStats()
    stats.observe("Produce", "OK", 0.002)
    stats.observe("Produce", "OK", 0.2)
    stats.observe("Produce", "NOT_LEADER", 0.0001)
    stats.produced_records, stats.produced_bytes = 12, 3400
    stats.fetched_records, stats.fetched_bytes = 7, 900
    fsync = Histogram((0.001, 0.01))
    fsync.observe(0.0005)
    fsync.observe(0.005)
    fsync.observe(5.0)
    values: dict[str, Any] = {
        "node_id": "n1",
        "version": "9.9.9",
        "protocol_version": 3,
        "replicas": 30,
        "partitions_led": 10,
        "under_replicated": 4,
        "leaderless": 2,
        "fenced": 1,
        "damaged": 0,
        "members": {"alive": 2, "dead": 1},
        "host_counters": {
            "produce_refused": 5,
            "fetch_wait_refused": 6,
            "inputs_dropped": 7,
            "produce_refused_no_space": 8,
            "elections": 3,
            "leaderships_gained": 2,
            "leader_changes": 9,
            "fsyncs": 40,
        },
        "service_counters": {"calls_refused": 11},
        "calls_in_progress": 1,
        "requests": stats.copy(),
        "fsync": fsync.copy(),
        "transport": TransportCounters(sent=100, dropped_full=2, rejected_cluster=1),
        "links": {"connected": 2, "backoff": 1},
        "gossip_counters": {"dropped_authentication": 4, "dropped_replay": 1, "probes": 50},
        "data_dir": "/data",
        "log_bytes": 123456,
        "disk": DiskStatus(free_bytes=1000, total_bytes=5000, watermark_bytes=100, full=False),
        "groups": {"stable": 2, "empty": 1},
        "committed_offsets": 6,
        "metadata_applied_offset": 77,
        "tls_expiry_s": None,
        "readiness": Readiness(False, "starting"),
    }
    values.update(changes)
    return NodeSnapshot(**values)


def exported(taken: NodeSnapshot) -> Samples:
    return parse(generate_latest(NodeCollector(lambda: taken)).decode())


def test_collector_exports_every_family_from_the_snapshot() -> None:
    samples = exported(snapshot())
    assert samples.value("laminar_build_info", version="9.9.9", protocol="3") == 1
    assert samples.value("laminar_ready") == 0
    assert samples.value("laminar_partitions_under_replicated") == 4
    assert samples.value("laminar_partitions_leaderless") == 2
    assert samples.value("laminar_partitions_fenced") == 1
    assert samples.value("laminar_partitions_led") == 10
    assert samples.value("laminar_members", state="alive") == 2
    assert samples.value("laminar_members", state="dead") == 1
    assert samples.value("laminar_members", state="suspect") == 0  # always there
    assert samples.value("laminar_elections_total") == 3
    assert samples.value("laminar_leaderships_gained_total") == 2
    assert samples.value("laminar_leader_changes_total") == 9
    assert samples.value("laminar_produced_records_total") == 12
    assert samples.value("laminar_produced_bytes_total") == 3400
    assert samples.value("laminar_fetched_records_total") == 7
    assert samples.value("laminar_fetched_bytes_total") == 900
    refused = {
        "produce_calls_max": 5,
        "fetch_waiters_max": 6,
        "queued_inputs_max": 7,
        "disk_full": 8,
        "calls_max": 11,
    }
    for reason, count in refused.items():
        assert samples.value("laminar_requests_refused_total", reason=reason) == count
    assert samples.value("laminar_peer_links", state="connected") == 2
    assert samples.value("laminar_peer_links", state="connecting") == 0
    assert samples.value("laminar_peer_frames_sent_total") == 100
    assert samples.value("laminar_peer_frames_dropped_total", reason="full") == 2
    assert samples.value("laminar_peer_frames_rejected_total", reason="cluster") == 1
    rejected = "laminar_gossip_packets_rejected_total"
    assert samples.value(rejected, reason="authentication") == 4
    assert samples.value(rejected, reason="replay") == 1
    assert samples.value(rejected, reason="malformed") == 0
    assert samples.total(rejected) == 5  # "probes" is not a rejection
    assert samples.value("laminar_groups", state="stable") == 2
    assert samples.value("laminar_group_committed_offsets") == 6
    assert samples.value("laminar_log_bytes", directory="/data") == 123456
    assert samples.value("laminar_disk_free_bytes", directory="/data") == 1000
    assert samples.value("laminar_metadata_applied_offset") == 77
    assert "laminar_tls_certificate_expiry_timestamp_seconds" not in samples.text


def test_request_latency_and_errors_by_rpc_and_code() -> None:
    samples = exported(snapshot())
    name = "laminar_request_duration_seconds"
    assert samples.value(f"{name}_count", rpc="Produce", code="OK") == 2
    assert samples.value(f"{name}_bucket", rpc="Produce", code="OK", le="0.0025") == 1
    assert samples.value(f"{name}_bucket", rpc="Produce", code="OK", le="0.25") == 2
    assert samples.value(f"{name}_bucket", rpc="Produce", code="OK", le="+Inf") == 2
    assert samples.value(f"{name}_sum", rpc="Produce", code="OK") == pytest.approx(0.202)
    assert samples.value("laminar_request_errors_total", rpc="Produce", code="NOT_LEADER") == 1
    assert samples.total("laminar_request_errors_total") == 1  # OK is not an error


def test_fsync_histogram_is_cumulative_with_an_inf_bucket() -> None:
    samples = exported(snapshot())
    name = "laminar_fsync_duration_seconds"
    assert samples.value(f"{name}_bucket", le="0.001") == 1
    assert samples.value(f"{name}_bucket", le="0.01") == 2
    assert samples.value(f"{name}_bucket", le="+Inf") == 3
    assert samples.value(f"{name}_count") == 3


def test_certificate_expiry_is_exported_with_tls() -> None:
    samples = exported(snapshot(tls_expiry_s=1_900_000_000.0))
    assert samples.value("laminar_tls_certificate_expiry_timestamp_seconds") == 1.9e9


def test_partition_series_only_when_the_snapshot_has_them() -> None:
    none = exported(snapshot())
    assert "laminar_partition_high_watermark" not in none.text
    assert "laminar_group_lag_records" not in none.text
    some = exported(
        snapshot(
            partition_series=(
                PartitionSeries("t", 0, True, 50, 10),
                PartitionSeries("t", 1, False, 7, 0),
            ),
            group_offsets=(GroupOffset("g", "t", 0, 45, 5), GroupOffset("g", "u", 0, 3, None)),
        )
    )
    assert some.value("laminar_partition_high_watermark", topic="t", partition="0") == 50
    assert some.value("laminar_partition_log_start_offset", topic="t", partition="0") == 10
    assert some.value("laminar_partition_high_watermark", topic="t", partition="1") == 7
    lag = "laminar_group_lag_records"
    assert some.value(lag, group="g", topic="t", partition="0") == 5
    assert some.value("laminar_group_committed_offset", group="g", topic="u", partition="0") == 3
    assert ("laminar_group_lag_records", frozenset({("group", "g"), ("topic", "u")})) not in (
        some.values
    )
    assert some.series() - none.series() == 2 * 2 + 2 + 1


def test_request_stats_bound_their_series() -> None:
    stats = RequestStats()
    for index in range(REQUEST_SERIES_MAX + 10):
        stats.observe(f"Rpc{index}", "OK", 0.001)
    assert len(stats.copy().latency) == REQUEST_SERIES_MAX


def test_error_code_names_follow_the_status_table() -> None:
    assert error_code_name(NotLeaderError("n2", None)) == "NOT_LEADER"
    assert error_code_name(UnavailableError("busy")) == "UNAVAILABLE"
    assert error_code_name(StorageError("disk")) == "STORAGE"


def test_metrics_config_checks_its_values() -> None:
    assert not MetricsConfig().enabled
    assert MetricsConfig(address="127.0.0.1:0").enabled
    with pytest.raises(ConfigError, match="partition_series"):
        MetricsConfig(partition_series="some")
    with pytest.raises(ConfigError, match="metrics address"):
        MetricsConfig(address="nowhere")
    with pytest.raises(ConfigError, match="requests_max"):
        MetricsConfig(requests_max=0)


# ---------------------------------------------------------------------- HTTP


@pytest.fixture
def server() -> Iterator[HttpServer]:
    http = HttpServer("127.0.0.1:0", requests_max=2, head_bytes_max=1024)
    http.route("/hello", lambda: text(HTTPStatus.OK, "hello"))
    http.start()
    try:
        yield http
    finally:
        http.close()


def address(http: HttpServer) -> str:
    return f"127.0.0.1:{http.port}"


def raw(http: HttpServer, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", http.port), timeout=10) as connection:
        connection.sendall(request)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_routes_answer_and_unknown_paths_are_404(server: HttpServer) -> None:
    assert get(address(server), "/hello") == (200, "hello\n")
    assert get(address(server), "/hello?x=1") == (200, "hello\n")
    status, body = get(address(server), "/nothing")
    assert status == 404 and body.count("\n") == 1


def test_head_answers_headers_without_a_body(server: HttpServer) -> None:
    answer = raw(server, b"HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200")
    assert b"Content-Length: 6" in head
    assert body == b""


def test_other_methods_are_refused_in_one_line(server: HttpServer) -> None:
    status, body = get(address(server), "/hello", method="POST")
    assert status == 501
    assert body.count("\n") == 1 and "<" not in body


def test_a_failing_route_is_one_line_500_without_traceback(server: HttpServer) -> None:
    def broken() -> Response:
        raise ValueError("secret internals")

    server.route("/broken", broken)
    status, body = get(address(server), "/broken")
    assert status == 500
    assert body == "internal error (see the node log)\n"


def test_a_request_head_past_the_limit_is_431(server: HttpServer) -> None:
    answer = raw(server, b"GET /hello HTTP/1.1\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 431")
    answer = raw(server, b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.0 431")


def test_requests_beyond_the_cap_get_503_at_once(server: HttpServer) -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow() -> Response:
        entered.release()
        release.wait(20)
        return text(HTTPStatus.OK, "slow")

    server.route("/slow", slow)
    results: list[tuple[int, str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(get(address(server), "/slow")))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for _ in threads:  # both slots taken
        assert entered.acquire(timeout=10)
    try:
        assert get(address(server), "/hello") == (503, "too many requests now\n")
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    assert results == [(200, "slow\n")] * 2
    assert get(address(server), "/hello") == (200, "hello\n")  # the slots came back


# ---------------------------------------------------------------------- /ready


class LoopThread:
    """An event loop on a thread of its own (the node's, for the endpoint)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, action: Any) -> Any:
        async def run() -> Any:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def fake_node(loop: LoopThread) -> SimpleNamespace:
    fenced: list[Any] = []
    return SimpleNamespace(
        stopping=False,
        ready=loop.call(asyncio.Event),
        metadata=SimpleNamespace(applied_offset=0),
        metadata_offset_seen=lambda: None,
        host=SimpleNamespace(fenced=lambda: list(fenced)),
        fenced=fenced,
    )


def test_ready_is_503_with_a_reason_until_the_node_is_ready() -> None:
    loop = LoopThread()
    endpoint = loop.call(lambda: MetricsEndpoint(MetricsConfig(address="127.0.0.1:0"), loop.loop))
    endpoint.server.start()
    at = f"127.0.0.1:{endpoint.port}"
    try:
        assert get(at, "/healthz") == (200, "ok\n")
        assert get(at, "/ready") == (503, '{"ready": false, "reason": "joining the cluster"}\n')
        status, _ = get(at, "/metrics")
        assert status == 503
        node = fake_node(loop)
        endpoint.attach(node)
        assert get(at, "/ready")[1] == '{"ready": false, "reason": "starting"}\n'
        loop.call(node.ready.set)
        assert "no node has answered" in get(at, "/ready")[1]
        node.metadata_offset_seen = lambda: 10
        node.metadata.applied_offset = 4
        assert get(at, "/ready") == (
            503,
            '{"ready": false, "reason": "metadata applied to offset 4 of 10"}\n',
        )
        node.metadata.applied_offset = 10
        node.fenced.append(SimpleNamespace(key=("t", 3)))
        assert get(at, "/ready") == (
            503,
            '{"ready": false, "reason": "1 fenced replica(s), e.g. t/3"}\n',
        )
        node.fenced.clear()
        assert get(at, "/ready") == (200, '{"ready": true, "reason": "ready"}\n')
        status, _ = get(at, "/ready", method="HEAD")
        assert status == 200
        node.stopping = True
        assert get(at, "/ready") == (503, '{"ready": false, "reason": "stopping"}\n')
    finally:
        endpoint.close()
        loop.close()


def test_ready_is_503_when_the_loop_does_not_answer() -> None:
    loop = LoopThread()
    config = dataclasses.replace(MetricsConfig(address="127.0.0.1:0"), scrape_timeout_ms=200)
    endpoint = loop.call(lambda: MetricsEndpoint(config, loop.loop))
    endpoint.server.start()
    node = fake_node(loop)
    loop.call(node.ready.set)
    endpoint.attach(node)
    blocked = threading.Event()
    loop.loop.call_soon_threadsafe(blocked.wait, 20)  # the loop busy
    try:
        status, body = get(f"127.0.0.1:{endpoint.port}", "/ready")
        assert status == 503 and "did not answer within 200 ms" in body
    finally:
        blocked.set()
        endpoint.close()
        loop.close()
