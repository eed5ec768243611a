"""Integration tests: real broker node processes on loopback (issue 6).

Each cluster is a :class:`~laminar.testing.processes.ProcessCluster` of ``python -m
laminar.server node start`` processes on 127.0.0.x with the ``local()`` preset, with
data and logs under the test's own temporary directory. Nothing sleeps for a fixed
time: every step waits on a condition with a deadline, and every fixture stops its
processes in a ``finally``.

Read-only and self-contained checks share one module-scoped 3-node cluster (each
uses its own topic); tests that kill, restart, add or drain nodes get their own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from laminar_client import Client, IdempotentProducer, PartitionHealth

from laminar.errors import LaminarError, NotLeaderError, OffsetOutOfRangeError
from laminar.grpc_errors import ERROR_METADATA_KEY, error_from_rpc
from laminar.records import (
    BatchLimits,
    encode_batch,
    encode_control_batch,
    iter_batches,
)
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.batches import columns_beyond_payload

SETTLE_S = 30.0
"""Deadline for the cluster to converge after a change (joins, elections, moves)."""
CLIENT_TIMEOUT_S = 20.0


# --------------------------------------------------------------------------- helpers


def node_id(node: NodeProcess) -> str:
    return f"node{node.index}"


def running(cluster: ProcessCluster) -> list[NodeProcess]:
    return [node for node in cluster.nodes if node.running]


def start_cluster(root: Path, count: int, **options: Any) -> ProcessCluster:
    """``count`` nodes, every one seeing every other alive, metadata fully replicated;
    ``options`` go to :class:`ProcessCluster` (``metrics=True``, ``node_config``)."""
    cluster = ProcessCluster(root, **options)
    try:
        first = cluster.add_node(bootstrap=True)
        cluster.wait_ready(first)
        for _ in range(count - 1):
            cluster.add_node()
        for node in cluster.nodes:
            cluster.wait_ready(node)
        wait_settled(cluster)
    except BaseException:
        cluster.close()
        raise
    return cluster


def alive_members(cluster: ProcessCluster, node: NodeProcess) -> set[str]:
    response = cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
    return {member.node_id for member in response.members if member.state == "alive"}


def wait_settled(cluster: ProcessCluster, timeout_s: float = SETTLE_S) -> None:
    """Every running node sees exactly the running nodes alive, and ``__cluster/0``
    has a leader with ``min(3, eligible nodes)`` in-sync voters."""
    expected = {node_id(node) for node in running(cluster)}

    def members_agree() -> bool:
        return all(alive_members(cluster, node) == expected for node in running(cluster))

    wait_for(members_agree, timeout_s, f"every node to see {sorted(expected)} alive")

    def metadata_replicated() -> bool:
        for node in running(cluster):
            response = cluster.stub(node).DescribeCluster(pb.DescribeClusterRequest(), timeout=2)
            for health in response.partitions:
                if (health.topic, health.partition) == ("__cluster", 0):
                    eligible = sum(1 for m in response.members if m.weight > 0)
                    wanted = min(3, eligible)
                    return len(health.voters) == wanted and not health.under_replicated
        return False

    wait_for(metadata_replicated, timeout_s, "__cluster/0 to be fully replicated")


def own_leader(cluster: ProcessCluster, topic: str, partition: int) -> NodeProcess | None:
    """The running node that reports itself as the partition's leader, if exactly one does."""
    leaders = []
    for node in running(cluster):
        response = cluster.stub(node).Metadata(pb.MetadataRequest(topics=[topic]), timeout=2)
        info = response.topics[0].partitions[partition]
        if info.leader == response.node_id:
            leaders.append(node)
    return leaders[0] if len(leaders) == 1 else None


def wait_leader(
    cluster: ProcessCluster, topic: str, partition: int, timeout_s: float = SETTLE_S
) -> NodeProcess:
    found: list[NodeProcess] = []

    def one_leader() -> bool:
        leader = own_leader(cluster, topic, partition)
        if leader is not None:
            found.append(leader)
        return leader is not None

    wait_for(one_leader, timeout_s, f"one leader for {topic}/{partition}")
    return found[-1]


def metadata_leader(cluster: ProcessCluster) -> NodeProcess:
    """The node leading ``__cluster/0`` (where admin calls are decided)."""
    found: list[NodeProcess] = []

    def one_leader() -> bool:
        found[:] = [
            node
            for node in running(cluster)
            if any(
                (h.topic, h.partition) == ("__cluster", 0)
                for h in cluster.stub(node)
                .DescribeCluster(pb.DescribeClusterRequest(), timeout=2)
                .partitions
            )
        ]
        return len(found) == 1

    wait_for(one_leader, SETTLE_S, "one leader of __cluster/0")
    return found[0]


def wait_topic_ready(cluster: ProcessCluster, topic: str, partitions: int) -> None:
    """Every running node knows the topic, and each partition has one leader."""

    def known_everywhere() -> bool:
        for node in running(cluster):
            cluster.stub(node).Metadata(pb.MetadataRequest(topics=[topic]), timeout=2)
        return True

    wait_for(known_everywhere, SETTLE_S, f"every node to know topic {topic}")
    for partition in range(partitions):
        wait_leader(cluster, topic, partition)


def create_topic(
    cluster: ProcessCluster, client: Client, topic: str, partitions: int, factor: int
) -> None:
    client.create_topic(topic, partitions, factor)
    wait_topic_ready(cluster, topic, partitions)


def values_on(client: Client, topic: str, partition: int, replica: str) -> list[bytes]:
    """Every value readable on ``replica`` (up to its own high watermark), in order."""
    return [record.value or b"" for record in client.records(topic, partition, 0, replica=replica)]


def wait_values(
    client: Client,
    topic: str,
    partition: int,
    replica: str,
    expected: list[bytes],
    timeout_s: float = SETTLE_S,
) -> None:
    """Wait until ``replica`` serves exactly ``expected`` for the partition."""
    seen: list[list[bytes]] = [[]]

    def complete() -> bool:
        seen[0] = values_on(client, topic, partition, replica)
        return seen[0] == expected

    try:
        wait_for(complete, timeout_s, f"{replica} to serve {topic}/{partition}")
    except TimeoutError as error:
        raise AssertionError(
            f"{replica} serves {len(seen[0])} values of {topic}/{partition}, "
            f"expected {len(expected)}; first difference at "
            f"{_first_difference(seen[0], expected)}"
        ) from error


def _first_difference(actual: list[bytes], expected: list[bytes]) -> int:
    for index, (left, right) in enumerate(zip(actual, expected, strict=False)):
        if left != right:
            return index
    return min(len(actual), len(expected))


def produce_values(client: Client, topic: str, partition: int, values: list[bytes]) -> None:
    """Produce ``values`` in batches of ten, acks=all."""
    for start in range(0, len(values), 10):
        client.produce(topic, partition, encode_batch(values[start : start + 10]))


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def detail_code(error: grpc.RpcError) -> int | None:
    """The ``ErrorDetail.code`` in the trailing metadata, or None without one."""
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == ERROR_METADATA_KEY:
            detail = pb.ErrorDetail()
            detail.ParseFromString(value)
            return int(detail.code)
    return None


def print_logs_on_failure(request: pytest.FixtureRequest, cluster: ProcessCluster) -> None:
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    for node in cluster.nodes:
        print(f"----- {node.log_path} (last lines)")
        print(cluster.log_tail(node, 60))


@contextmanager
def stopped_after(
    request: pytest.FixtureRequest, cluster: ProcessCluster
) -> Iterator[ProcessCluster]:
    """A fixture's cluster for the test of ``request``: its nodes' logs printed if
    the test failed, then every node stopped."""
    try:
        yield cluster
    finally:
        print_logs_on_failure(request, cluster)
        cluster.close()


@pytest.fixture
def fresh(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FreshClusters]:
    """Start clusters of one's own: ``fresh.start(count)``; all stopped at teardown."""
    clusters = FreshClusters(tmp_path)
    try:
        yield clusters
    finally:
        for cluster in clusters.clusters:
            print_logs_on_failure(request, cluster)
        clusters.close()


@dataclass
class FreshClusters:
    root: Path
    clusters: list[ProcessCluster] = field(default_factory=list)
    clients: list[Client] = field(default_factory=list)

    def start(self, count: int) -> tuple[ProcessCluster, Client]:
        cluster = start_cluster(self.root / f"cluster{len(self.clusters)}", count)
        self.clusters.append(cluster)
        return cluster, self.client(cluster)

    def client(self, cluster: ProcessCluster) -> Client:
        client = Client([node.grpc for node in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for cluster in self.clusters:
            cluster.close()


@dataclass
class Shared:
    cluster: ProcessCluster
    client: Client


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """One 3-node cluster for the checks that neither kill nor move nodes."""
    cluster = start_cluster(tmp_path_factory.mktemp("shared"), 3)
    client = Client([node.grpc for node in cluster.nodes], timeout_s=CLIENT_TIMEOUT_S)
    try:
        yield Shared(cluster, client)
    finally:
        client.close()
        cluster.close()


def assert_all_serving(shared: Shared) -> None:
    """Every node is still running and answers; a fresh topic takes writes and reads."""
    for node in shared.cluster.nodes:
        assert node.running, f"node{node.index} died; see {node.log_path}"
        shared.cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=5)


# --------------------------------------------------------------------------- shared cluster


def test_produce_and_consume_across_three_nodes_rf3(shared: Shared) -> None:
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "basic", 3, 3)
    expected: dict[int, list[bytes]] = {}
    for partition in range(3):
        expected[partition] = [f"basic-{partition}-{i}".encode() for i in range(50)]
        produce_values(client, "basic", partition, expected[partition])
    snapshot = client.metadata(refresh=True)
    for partition in range(3):
        replicas = snapshot.replicas_of("basic", partition)
        assert sorted(replicas) == ["node0", "node1", "node2"]
        for replica in replicas:  # every replica holds and serves the whole log
            wait_values(client, "basic", partition, replica, expected[partition])
    # A reader that does not pin a replica gets the same records.
    leader = wait_leader(cluster, "basic", 0)
    records = list(client.records("basic", 0, 0, replica=node_id(leader)))
    assert [r.value for r in records] == expected[0]
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"


def test_produce_to_a_follower_redirects_to_the_leader(shared: Shared) -> None:
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "redirect", 1, 3)
    leader = wait_leader(cluster, "redirect", 0)
    follower = next(node for node in cluster.nodes if node is not leader)
    request = pb.ProduceRequest(
        topic="redirect", partition=0, batches=[encode_batch([b"raw"])], acks=pb.ACKS_ALL
    )
    error = rpc_error(lambda: cluster.stub(follower).Produce(request, timeout=10))
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert detail_code(error) == pb.NOT_LEADER
    typed = error_from_rpc(error)
    assert isinstance(typed, NotLeaderError)
    assert typed.leader_id == node_id(leader)
    assert typed.leader_address == leader.grpc
    # A client that only knows the follower follows the hint and gets the write in.
    with Client(follower.grpc, timeout_s=CLIENT_TIMEOUT_S) as only_follower:
        (offset,) = only_follower.produce("redirect", 0, encode_batch([b"via-follower"]))
    values = [
        (r.offset, r.value) for r in client.records("redirect", 0, 0, replica=node_id(leader))
    ]
    assert (offset, b"via-follower") in values
    assert b"raw" not in [value for _, value in values], "the refused write was not stored"


def test_consume_from_a_follower_stops_at_its_high_watermark(shared: Shared) -> None:
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "follow", 1, 3)
    leader = wait_leader(cluster, "follow", 0)
    follower = next(node for node in cluster.nodes if node is not leader)
    first = [f"f-{i}".encode() for i in range(30)]
    produce_values(client, "follow", 0, first)
    wait_values(client, "follow", 0, node_id(follower), first)
    result = client.fetch("follow", 0, 0, replica=node_id(follower))
    assert result.served_by == node_id(follower)
    # Nothing at or past the follower's own high watermark is served.
    for _, header in iter_batches(result.batches):
        assert header.next_offset <= result.high_watermark
    # A long-poll on the follower at its end is woken by a later write.
    end = result.high_watermark
    done: list[object] = []

    def long_poll() -> None:
        try:
            done.append(client.fetch("follow", 0, end, max_wait_s=10.0, replica=follower.grpc))
        except Exception as error:  # reported below
            done.append(error)

    poller = threading.Thread(target=long_poll)
    poller.start()
    client.produce("follow", 0, encode_batch([b"late"]))
    poller.join(15)
    assert not poller.is_alive()
    (polled,) = done
    assert not isinstance(polled, Exception), polled
    assert polled.served_by == node_id(follower)  # type: ignore[union-attr]
    assert [r.value for r in polled.records(end)] == [b"late"]  # type: ignore[union-attr]
    assert polled.high_watermark > end  # type: ignore[union-attr]


def test_delete_topic_removes_it_and_its_data_everywhere(shared: Shared) -> None:
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "doomed", 2, 3)
    for partition in range(2):
        produce_values(client, "doomed", partition, [b"x"] * 20)
    directories = [node.data_dir / "partitions" / "doomed" for node in cluster.nodes]
    for directory in directories:
        assert (directory / "0").is_dir() and (directory / "1").is_dir()
    client.delete_topic("doomed")
    # ListTopics is answered by any node from its applied catalogue, so the deletion
    # shows up there eventually (not necessarily in the very next call).
    wait_for(
        lambda: "doomed" not in [topic.name for topic in client.list_topics()],
        SETTLE_S,
        "the client's topic list to drop doomed",
    )

    def gone_everywhere() -> bool:
        for node in cluster.nodes:
            topics = cluster.stub(node).ListTopics(pb.ListTopicsRequest(), timeout=2).topics
            if "doomed" in [topic.name for topic in topics]:
                return False
        return True

    wait_for(gone_everywhere, SETTLE_S, "every node to forget topic doomed")
    wait_for(
        lambda: not any((d / "0").exists() or (d / "1").exists() for d in directories),
        SETTLE_S,
        "the partition data of doomed to be removed on every node",
    )
    request = pb.ProduceRequest(topic="doomed", partition=0, batches=[encode_batch([b"late"])])
    for node in cluster.nodes:
        error = rpc_error(lambda node=node: cluster.stub(node).Produce(request, timeout=5))
        assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        assert detail_code(error) == pb.UNKNOWN_TOPIC_OR_PARTITION
    # The same name can be created again, and starts empty.
    create_topic(cluster, client, "doomed", 1, 3)
    leader = wait_leader(cluster, "doomed", 0)
    assert values_on(client, "doomed", 0, node_id(leader)) == []
    client.delete_topic("doomed")


def test_delete_topic_leaves_no_topic_directory(shared: Shared) -> None:
    """Deleting a topic removes ``<data>/partitions/<topic>`` itself, not only the
    partition directories inside it (else every deleted topic leaves an empty
    directory behind on every node, forever)."""
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "emptied", 1, 3)
    client.produce("emptied", 0, encode_batch([b"x"]))
    directories = [node.data_dir / "partitions" / "emptied" for node in cluster.nodes]
    assert all((d / "0").is_dir() for d in directories)
    client.delete_topic("emptied")
    # The partition's directory goes first, then its topic's (a moment later).
    wait_for(
        lambda: not any(d.exists() for d in directories),
        SETTLE_S,
        "the topic directories of emptied to be removed, not only their partitions'",
    )


def test_malformed_and_oversized_requests_get_status_codes(shared: Shared) -> None:
    cluster, client = shared.cluster, shared.client
    create_topic(cluster, client, "strict", 1, 3)
    leader = wait_leader(cluster, "strict", 0)
    stub = cluster.stub(leader)
    good = [b"good-0"]
    produce_values(client, "strict", 0, good)
    before = client.fetch("strict", 0, 0, replica=node_id(leader)).high_watermark

    def produce(batches: list[bytes], **fields: object) -> grpc.RpcError:
        request = pb.ProduceRequest(topic="strict", partition=0, batches=batches, **fields)
        return rpc_error(lambda: stub.Produce(request, timeout=30))

    invalid = grpc.StatusCode.INVALID_ARGUMENT
    valid = encode_batch([b"v"])
    corrupt_payload = bytearray(valid)
    corrupt_payload[-1] ^= 0xFF
    corrupt_header = bytearray(valid)
    corrupt_header[20] ^= 0xFF
    bad_columns = columns_beyond_payload()
    cases: list[tuple[str, grpc.RpcError, grpc.StatusCode, int]] = [
        ("garbage bytes", produce([b"not a batch at all"]), invalid, pb.RECORD_FORMAT),
        ("header checksum", produce([bytes(corrupt_header)]), invalid, pb.RECORD_FORMAT),
        ("payload checksum", produce([bytes(corrupt_payload)]), invalid, pb.RECORD_FORMAT),
        ("trailing bytes", produce([valid + b"extra"]), invalid, pb.INVALID_INPUT),
        ("no batch", produce([]), invalid, pb.INVALID_INPUT),
        (
            "control batch",
            produce([encode_control_batch(b"config", b"{}", 0)]),
            invalid,
            pb.INVALID_INPUT,
        ),
        ("unknown acks", produce([valid], acks=7), invalid, pb.INVALID_INPUT),
        # A request is accepted or refused whole: the valid first batch is not stored.
        ("one bad of two", produce([valid, bytes(corrupt_payload)]), invalid, pb.RECORD_FORMAT),
        ("columns beyond the payload", produce([bad_columns]), invalid, pb.RECORD_FORMAT),
    ]
    for what, error, status, code in cases:
        assert error.code() == status, what  # type: ignore[attr-defined]
        assert detail_code(error) == code, what

    # A body that is not a protobuf message at all: a typed INVALID_ARGUMENT, not
    # grpcio's UNKNOWN with a Python exception name.
    channel = grpc.insecure_channel(leader.grpc)
    try:
        raw = channel.unary_unary("/laminar.v1.Laminar/Produce")
        error = rpc_error(lambda: raw(b"\xff\xff\xff\xff not protobuf", timeout=5))
    finally:
        channel.close()
    assert error.code() == invalid  # type: ignore[attr-defined]
    assert detail_code(error) == pb.INVALID_INPUT
    assert "Error" not in (error.details() or "").split(":")[0]  # type: ignore[attr-defined]

    # Oversized: a batch above the 16 MiB batch limit is refused by the broker as
    # BATCH_TOO_LARGE; a request above the 64 MiB message limit by gRPC itself. Both
    # are RESOURCE_EXHAUSTED, as the table in laminar/grpc_errors.py says.
    big_limits = BatchLimits(batch_bytes_max=32 * 1024 * 1024)
    too_big = encode_batch([b"x" * (17 * 1024 * 1024)], limits=big_limits)
    error = produce([too_big])
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert detail_code(error) == pb.BATCH_TOO_LARGE
    error = produce([encode_batch([b"y" * (15 * 1024 * 1024)])] * 5)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    error = produce([encode_batch([b"z"])] * 10_001)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    assert detail_code(error) == pb.BATCH_TOO_LARGE

    # Unknown topics and partitions.
    for topic, partition in (("no-such-topic", 0), ("strict", 1)):
        request = pb.ProduceRequest(topic=topic, partition=partition, batches=[valid])
        error = rpc_error(lambda request=request: stub.Produce(request, timeout=5))
        assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        assert detail_code(error) == pb.UNKNOWN_TOPIC_OR_PARTITION
        fetch = pb.FetchRequest(topic=topic, partition=partition, offset=0)
        error = rpc_error(lambda fetch=fetch: stub.Fetch(fetch, timeout=5))
        assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]

    # Bad fetch arguments.
    for fetch in (
        pb.FetchRequest(topic="strict", partition=0, offset=-1),
        pb.FetchRequest(topic="strict", partition=0, offset=0, max_bytes=2**31),
    ):
        error = rpc_error(lambda fetch=fetch: stub.Fetch(fetch, timeout=5))
        assert error.code() == invalid  # type: ignore[attr-defined]
        assert detail_code(error) == pb.INVALID_INPUT
    # Past the log end: out of range with the readable range (waiting at the end is
    # a long-poll, not an error).
    for offset in (2**63 - 1, before + 1_000):
        fetch = pb.FetchRequest(topic="strict", partition=0, offset=offset, max_wait_ms=50)
        error = rpc_error(lambda fetch=fetch: stub.Fetch(fetch, timeout=5))
        assert error.code() == grpc.StatusCode.OUT_OF_RANGE  # type: ignore[attr-defined]
        typed = error_from_rpc(error)
        assert isinstance(typed, OffsetOutOfRangeError)
        assert (typed.start_offset, typed.end_offset) == (0, before)
    at_end = pb.FetchRequest(topic="strict", partition=0, offset=before, max_wait_ms=50)
    assert stub.Fetch(at_end, timeout=5).batches == b""

    # Bad topic names and settings; an existing name (sent to the metadata leader,
    # which is where admin calls are decided).
    admin = metadata_leader(cluster)
    admin_stub = cluster.stub(admin)

    def create(
        name: str, partitions: int = 1, factor: int = 3, retention: int = -1
    ) -> grpc.RpcError:
        config = pb.TopicConfig(
            partitions=partitions,
            replication_factor=factor,
            retention_bytes=retention,
            retention_ms=-1,
        )
        request = pb.CreateTopicRequest(name=name, config=config)
        return rpc_error(lambda: admin_stub.CreateTopic(request, timeout=10))

    for name in ("", "bad/name", "..", "-x", "__internal", "a" * 201, "sp ace", "é"):
        error = create(name)
        assert error.code() == invalid, name  # type: ignore[attr-defined]
        assert detail_code(error) == pb.INVALID_TOPIC, name
    # A field set to 0 is refused, never a silent default (an unset one takes it).
    for partitions, factor, retention in (
        (10_001, 3, -1),
        (1, 8, -1),
        (1, 4, -1),
        (0, 3, -1),
        (1, 0, -1),
        (1, 3, 0),
        (1, 3, -2),
    ):
        error = create("settings", partitions, factor, retention)
        assert error.code() == invalid, (partitions, factor)  # type: ignore[attr-defined]
        assert detail_code(error) == pb.INVALID_TOPIC
    missing = pb.CreateTopicRequest(name="no-config")  # every field the cluster's default
    created = admin_stub.CreateTopic(missing, timeout=10).topic
    assert (created.config.partitions, created.config.replication_factor) == (1, 3)
    assert len(created.defaults) == 9  # every TopicConfig field
    error = create("strict")
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS  # type: ignore[attr-defined]
    error = rpc_error(
        lambda: admin_stub.DeleteTopic(pb.DeleteTopicRequest(name="missing"), timeout=10)
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    # A non-leader redirects admin calls with NOT_LEADER naming the metadata leader.
    other = next(node for node in cluster.nodes if node is not admin)
    error = rpc_error(
        lambda: cluster.stub(other).DeleteTopic(pb.DeleteTopicRequest(name="x"), timeout=10)
    )
    typed = error_from_rpc(error)
    assert isinstance(typed, NotLeaderError) and typed.leader_address == admin.grpc
    assert "settings" not in [topic.name for topic in client.list_topics()]

    # The cluster keeps serving, and none of the refused batches was stored.
    assert_all_serving(shared)
    after = [b"good-1", b"good-2"]
    produce_values(client, "strict", 0, after)
    wait_values(client, "strict", 0, node_id(leader), good + after)
    result = client.fetch("strict", 0, 0, replica=node_id(leader))
    assert result.high_watermark > before
    for node in cluster.nodes:
        wait_values(client, "strict", 0, node_id(node), good + after)


def laminar_command(*argv: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    """The ``laminar`` command as a user runs it, with ``LAMINAR_BOOTSTRAP`` set."""
    environment = {**os.environ, "LAMINAR_BOOTSTRAP": bootstrap}
    return subprocess.run(
        [sys.executable, "-m", "laminar.cli", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_topic_create_without_settings_takes_the_clusters_defaults(shared: Shared) -> None:
    bootstrap = ",".join(node.grpc for node in shared.cluster.nodes)
    done = laminar_command("topic", "create", "newcomer", bootstrap=bootstrap)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "created topic newcomer: partitions=1 (cluster default) "
        "replication_factor=3 (cluster default)"
    )
    done = laminar_command("topic", "describe", "newcomer", bootstrap=bootstrap)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:5] == [
        "topic newcomer:",
        "  partitions=1 (cluster default)",
        "  replication_factor=3 (cluster default)",
        "  retention_bytes=unlimited (cluster default)",
        "  retention_ms=unlimited (cluster default)",
    ]
    done = laminar_command(
        "topic", "create", "chosen", "--partitions", "2", "--retention-ms", "60000",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "created topic chosen: partitions=2 (topic) replication_factor=3 (cluster default)"
    )


def test_public_produce_to_the_metadata_partition_is_refused(shared: Shared) -> None:
    """``__cluster/0`` is readable through Fetch (metadata catch-up), but a client must
    not be able to append to it: its records are catalogue commands every node applies."""
    cluster = shared.cluster

    def metadata_offsets() -> dict[int, int]:
        return {
            node.index: cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=5).metadata_offset
            for node in cluster.nodes
        }

    # Earlier tests' topic changes may still be applying on some node.
    wait_for(
        lambda: len(set(metadata_offsets().values())) == 1,
        SETTLE_S,
        "every node to have applied the same metadata",
    )
    offsets_before = metadata_offsets()
    request = pb.ProduceRequest(
        topic="__cluster", partition=0, batches=[encode_batch([b"not a command"])]
    )
    errors: list[grpc.RpcError] = []
    for node in cluster.nodes:
        try:
            response = cluster.stub(node).Produce(request, timeout=10)
        except grpc.RpcError as error:
            errors.append(error)
            continue
        raise AssertionError(
            f"node{node.index} appended a client batch to __cluster/0 at offset "
            f"{list(response.base_offsets)}"
        )
    for error in errors:
        assert error.code() in (  # type: ignore[attr-defined]
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.PERMISSION_DENIED,
        ), error
    for node in cluster.nodes:
        response = cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=5)
        assert response.metadata_offset == offsets_before[node.index]


# --------------------------------------------------------------------------- own clusters


@dataclass
class ProduceLog:
    """What a producing thread did: acknowledged values with ack times, and values
    whose outcome is unknown (the send failed after its retries)."""

    acked: list[tuple[bytes, float]] = field(default_factory=list)
    uncertain: list[bytes] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def acked_after(self, moment: float) -> int:
        with self.lock:
            return sum(1 for _, at in self.acked if at > moment)


def produce_until(
    client: Client, topic: str, stop: threading.Event, log: ProduceLog, per_batch: int = 5
) -> None:
    """Send unique values with an idempotent producer, acks=all, until ``stop``."""
    producer = IdempotentProducer(client)
    sequence = 0
    while not stop.is_set():
        values = [f"{topic}-{sequence + i:07d}".encode() for i in range(per_batch)]
        sequence += per_batch
        try:
            producer.send(topic, 0, values, acks="all", timeout_s=CLIENT_TIMEOUT_S)
        except LaminarError as error:
            with log.lock:
                log.uncertain.extend(values)
                log.errors.append(f"{type(error).__name__}: {error}")
            continue
        now = time.monotonic()
        with log.lock:
            log.acked.extend((value, now) for value in values)


def test_sigkill_leader_during_idempotent_produce_loses_and_duplicates_nothing(
    fresh: FreshClusters,
) -> None:
    cluster, client = fresh.start(3)
    create_topic(cluster, client, "kill", 1, 3)
    stop = threading.Event()
    log = ProduceLog()
    thread = threading.Thread(target=produce_until, args=(client, "kill", stop, log))
    thread.start()
    try:
        wait_for(lambda: log.acked_count() >= 100, SETTLE_S, "100 acknowledged values")
        leader = wait_leader(cluster, "kill", 0)
        killed_at = time.monotonic()
        cluster.kill(leader)
        wait_for(lambda: log.acked_after(killed_at) >= 100, SETTLE_S, "writes to resume")
    finally:
        stop.set()
        thread.join(CLIENT_TIMEOUT_S + 5)
    assert not thread.is_alive()
    first_ack = min(at for _, at in log.acked if at > killed_at)
    failover_s = first_ack - killed_at
    print(f"\nfailover_s={failover_s:.3f} (SIGKILL of the leader -> first acknowledged write)")
    assert failover_s < 15, f"writes resumed only after {failover_s:.1f} s"

    new_leader = wait_leader(cluster, "kill", 0)
    assert new_leader is not leader
    acked = [value for value, _ in log.acked]
    read: list[bytes] = []

    def all_acked_readable() -> bool:
        read[:] = values_on(client, "kill", 0, node_id(new_leader))
        return set(acked) <= set(read)

    wait_for(all_acked_readable, SETTLE_S, "every acknowledged value to be readable")
    counts = Counter(read)
    duplicated = sorted(value for value, count in counts.items() if count > 1)
    assert not duplicated, f"{len(duplicated)} values stored twice, e.g. {duplicated[:5]}"
    unknown = set(read) - set(acked) - set(log.uncertain)
    assert not unknown, f"values nobody sent: {sorted(unknown)[:5]}"
    for node in running(cluster):
        wait_values(client, "kill", 0, node_id(node), read)


def test_restarted_node_catches_up(fresh: FreshClusters) -> None:
    cluster, client = fresh.start(3)
    create_topic(cluster, client, "restart", 2, 3)
    before = {p: [f"before-{p}-{i}".encode() for i in range(40)] for p in range(2)}
    for partition, values in before.items():
        produce_values(client, "restart", partition, values)
    victim = wait_leader(cluster, "restart", 0)
    cluster.kill(victim)
    during = {p: [f"during-{p}-{i}".encode() for i in range(40)] for p in range(2)}
    for partition, values in during.items():
        produce_values(client, "restart", partition, values)
    cluster.start(victim)
    cluster.wait_ready(victim)
    wait_settled(cluster)
    for partition in range(2):
        expected = before[partition] + during[partition]
        wait_values(client, "restart", partition, node_id(victim), expected)
    # And it takes part again: a new write reaches it too.
    client.produce("restart", 0, encode_batch([b"after"]))
    wait_values(
        client, "restart", 0, node_id(victim), before[0] + during[0] + [b"after"], timeout_s=10
    )


def test_a_dead_follower_of_an_idle_partition_is_reported_under_replicated(
    fresh: FreshClusters,
) -> None:
    # In sync means "acknowledged recently": a dead follower of a partition nobody
    # writes to still has a match offset equal to the high watermark.
    cluster, client = fresh.start(3)
    create_topic(cluster, client, "idle", 1, 3)
    produce_values(client, "idle", 0, [b"only"])
    leader = wait_leader(cluster, "idle", 0)

    def health() -> PartitionHealth | None:
        return next((h for h in client.describe_cluster().partitions if h.topic == "idle"), None)

    wait_for(lambda: (h := health()) is not None and len(h.in_sync) == 3, 10, "all in sync")
    victim = next(node for node in cluster.nodes if node is not leader)
    cluster.kill(victim)
    killed_at = time.monotonic()
    wait_for(
        lambda: (h := health()) is not None and h.under_replicated,
        10,
        "the partition to be reported under-replicated",
    )
    # Well before the replica move grace (10 s), after which the group would shrink.
    assert time.monotonic() - killed_at < 8
    reported = health()
    assert reported is not None and node_id(victim) not in reported.in_sync


def partition_views(client: Client, topic: str) -> dict[int, tuple[set[str], set[str]]]:
    """Per partition: placement's replicas and the leader-reported voters."""
    description = client.describe_cluster()
    views = {}
    for health in description.partitions:
        if health.topic == topic:
            views[health.partition] = (set(health.replicas), set(health.voters))
    return views


def wait_replicas_settled(
    client: Client, topic: str, partitions: int, *, without: str | None = None
) -> dict[int, set[str]]:
    """Wait until every partition has a leader whose voters equal its placement
    (and, with ``without``, a placement that no longer holds that node: the node
    answering may not have heard of a weight change yet, and its old placement is
    settled too)."""
    settled: dict[int, set[str]] = {}

    def converged() -> bool:
        description = client.describe_cluster()
        healths = {h.partition: h for h in description.partitions if h.topic == topic}
        if sorted(healths) != list(range(partitions)):
            return False
        for partition, health in healths.items():
            if health.leader is None or health.under_replicated:
                return False
            if set(health.voters) != set(health.replicas):
                return False
            if without is not None and without in health.replicas:
                return False
            settled[partition] = set(health.replicas)
        return True

    wait_for(converged, 60, f"{topic}: voters to match placement on every partition")
    return settled


def test_fourth_node_takes_over_partitions_and_data_stays_readable(
    fresh: FreshClusters,
) -> None:
    cluster, client = fresh.start(3)
    partitions = 8
    create_topic(cluster, client, "grow", partitions, 3)
    expected = {p: [f"grow-{p}-{i}".encode() for i in range(30)] for p in range(partitions)}
    for partition, values in expected.items():
        produce_values(client, "grow", partition, values)
    newcomer = cluster.add_node()
    cluster.wait_ready(newcomer)
    wait_settled(cluster)
    placement = wait_replicas_settled(client, "grow", partitions)
    moved = [p for p, replicas in placement.items() if "node3" in replicas]
    assert moved, f"no partition moved to node3: {placement}"
    assert len(moved) < partitions
    snapshot = client.metadata(refresh=True)
    for partition in moved:
        assert "node3" in snapshot.replicas_of("grow", partition)
        wait_values(client, "grow", partition, "node3", expected[partition])
    for partition, replicas in placement.items():
        assert len(replicas) == 3
        for replica in replicas:
            wait_values(client, "grow", partition, replica, expected[partition])
    # A node that left a partition's group deletes its copy.
    for partition, replicas in placement.items():
        for node in cluster.nodes:
            directory = node.data_dir / "partitions" / "grow" / str(partition)
            if node_id(node) not in replicas:
                wait_for(
                    lambda directory=directory: not directory.exists(),
                    SETTLE_S,
                    f"{directory} to be deleted",
                )


def test_drained_node_ends_with_no_replicas_and_nothing_is_lost(fresh: FreshClusters) -> None:
    cluster, client = fresh.start(4)
    partitions = 6
    create_topic(cluster, client, "drain", partitions, 3)
    expected = {p: [f"drain-{p}-{i}".encode() for i in range(30)] for p in range(partitions)}
    for partition, values in expected.items():
        produce_values(client, "drain", partition, values)
    drained = cluster.nodes[3]
    hosted_before = [
        p for p in range(partitions) if "node3" in client.metadata().replicas_of("drain", p)
    ]
    assert hosted_before, "placement gave node3 nothing to drain"
    member = client.update_node(drained.grpc, weight=0)
    assert member.node_id == "node3" and member.weight == 0
    placement = wait_replicas_settled(client, "drain", partitions, without="node3")
    for partition, replicas in placement.items():
        assert "node3" not in replicas, (partition, replicas)
        assert len(replicas) == 3
    snapshot = client.metadata(refresh=True)
    for partition in range(partitions):
        info = snapshot.partition("drain", partition)
        assert "node3" not in info.replicas
        assert "node3" not in info.voters and "node3" not in info.learners

    def metadata_moved() -> bool:
        response = cluster.stub(drained).Metadata(pb.MetadataRequest(), timeout=2)
        weights = {m.node_id: m.weight for m in response.members}
        assert weights["node3"] == 0
        health = [
            h
            for node in running(cluster)
            for h in cluster.stub(node)
            .DescribeCluster(pb.DescribeClusterRequest(), timeout=2)
            .partitions
            if (h.topic, h.partition) == ("__cluster", 0)
        ]
        return len(health) == 1 and "node3" not in health[0].voters

    wait_for(metadata_moved, SETTLE_S, "__cluster/0 to leave node3")
    root = drained.data_dir / "partitions"
    wait_for(
        lambda: not any((root / "drain" / str(p)).exists() for p in range(partitions)),
        SETTLE_S,
        "node3 to delete its copies of drain",
    )
    for partition in range(partitions):
        fetch = pb.FetchRequest(topic="drain", partition=partition, offset=0)
        error = rpc_error(lambda fetch=fetch: cluster.stub(drained).Fetch(fetch, timeout=5))
        # Retriable: the partition exists, other nodes serve it (and are named).
        assert error.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert "has no replica on node3" in error.details()  # type: ignore[attr-defined]
    for partition, replicas in placement.items():
        for replica in replicas:
            wait_values(client, "drain", partition, replica, expected[partition])
    assert drained.running
    assert os.path.isdir(drained.data_dir)


def test_a_node_of_another_cluster_is_refused(shared: Shared, tmp_path: Path) -> None:
    """A data dir that belongs to another cluster must not join this one."""
    import json
    import subprocess
    import sys

    data_dir = tmp_path / "stranger"
    data_dir.mkdir()
    (data_dir / "node.json").write_text(
        json.dumps({"node_id": "stranger", "cluster_id": "another-cluster"})
    )
    seed = shared.cluster.nodes[0].gossip
    host = shared.cluster.nodes[-1].host.rsplit(".", 1)[0] + ".250"
    result = subprocess.run(
        [
            sys.executable, "-m", "laminar.server", "node", "start",
            "--data-dir", str(data_dir), "--gossip", f"{host}:7000", "--grpc", f"{host}:7100",
            "--seeds", seed, "--preset", "local",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "cluster id mismatch" in result.stderr
    assert "Traceback" not in result.stderr
    assert_all_serving(shared)
