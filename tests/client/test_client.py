from __future__ import annotations

import random
import threading
import time

import pytest
from laminar_client import (
    AttemptTimeoutError,
    Client,
    ClusterUnreachableError,
    IdempotentProducer,
    NoAnswerError,
    NodeUnreachableError,
    RetryPolicy,
)
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S
from laminar_client.transport import Transport

from laminar.errors import (
    BatchLimitError,
    ClusterIdMismatchError,
    InvalidInputError,
    InvalidTopicError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    StorageError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import TopicExistsError
from laminar.records import decode_records, encode_batch, parse_header
from laminar.testing.processes import free_port
from laminar.v1 import laminar_pb2 as pb
from tests.client.fake_server import FakeCluster

FAST = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=5, attempts_max=20)


def make_client(cluster: FakeCluster, **kwargs) -> Client:
    kwargs.setdefault("retry", FAST)
    kwargs.setdefault("timeout_s", 10.0)
    kwargs.setdefault("rng", random.Random(7))
    return Client(cluster.bootstrap, **kwargs)


def batch(*values: bytes) -> bytes:
    return encode_batch(list(values))


def test_produce_goes_to_leader_and_fetch_reads_back(cluster: FakeCluster) -> None:
    cluster.add_topic("t", partitions=2)
    with make_client(cluster) as client:
        assert client.produce("t", 1, [batch(b"a", b"b"), batch(b"c")]) == [0, 2]
        assert client.produce("t", 1, batch(b"d")) == [3]
        result = client.fetch("t", 1, 0)
        values = [r.value for r in result.records()]
    assert values == [b"a", b"b", b"c", b"d"]
    assert result.high_watermark == 4
    assert set(cluster.calls_to("Produce")) == {cluster.partition("t", 1).leader}


def test_unknown_leader_uses_first_replica(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    part = cluster.partition("t")
    part.advertised_leader = ""  # metadata: leader unknown
    part.replicas = ["n2", "n0", "n1"]
    part.leader = "n2"
    with make_client(cluster) as client:
        assert client.produce("t", 0, batch(b"x")) == [0]
    assert cluster.calls_to("Produce") == ["n2"]


def test_not_leader_hint_is_followed_and_remembered(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    part = cluster.partition("t")
    part.leader = "n1"
    part.advertised_leader = "n0"  # stale metadata
    with make_client(cluster) as client:
        assert client.produce("t", 0, batch(b"x")) == [0]
        assert client.produce("t", 0, batch(b"y")) == [1]
    assert cluster.calls_to("Produce") == ["n0", "n1", "n1"]


def test_not_leader_without_hint_refreshes_metadata(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", NotLeaderError(None, None))
    with make_client(cluster) as client:
        client.metadata()
        metadata_calls = len(cluster.calls_to("Metadata"))
        assert client.produce("t", 0, batch(b"x")) == [0]
    assert cluster.calls_to("Produce") == ["n0", "n0"]
    # The refresh about t/0 asks its followers, which agree that n0 leads.
    assert cluster.calls_to("Metadata")[metadata_calls:] == ["n1", "n2"]


def test_unavailable_is_retried_with_backoff_then_succeeds(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", UnavailableError("no quorum"), UnavailableError("x"))
    sleeps: list[float] = []
    with make_client(cluster, sleep=sleeps.append) as client:
        assert client.produce("t", 0, batch(b"x")) == [0]
    assert cluster.calls_to("Produce") == ["n0", "n0", "n0"]
    assert len(sleeps) == 2
    assert all(0 < s <= FAST.backoff_max_ms / 1000 for s in sleeps)


def test_retries_stop_at_attempts_max(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", *[UnavailableError("down")] * 10)
    policy = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=1, attempts_max=3)
    client = make_client(cluster, retry=policy, sleep=lambda s: None)
    with client, pytest.raises(UnavailableError, match="down"):
        client.produce("t", 0, batch(b"x"))
    assert len(cluster.calls_to("Produce")) == 3


def test_retries_stop_at_deadline(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", *[UnavailableError("down")] * 1000)
    policy = RetryPolicy(backoff_initial_ms=20, backoff_max_ms=20, attempts_max=1000)
    # A manual clock that only the backoff sleeps move: the count of attempts is then
    # fixed by the deadline and the backoff, not by how fast this machine is.
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    class RealTimeouts(Transport):
        """Each call gets 5 s of real time: the manual deadline's last milliseconds
        would otherwise be real gRPC deadlines, which a loaded machine misses."""

        def call(self, address, method, request, response_type, *, timeout_s):  # type: ignore[no-untyped-def]
            return super().call(address, method, request, response_type, timeout_s=5.0)

    client = make_client(
        cluster, retry=policy, clock=lambda: now[0], sleep=sleep, transport=RealTimeouts()
    )
    with client, pytest.raises(UnavailableError):
        client.produce("t", 0, batch(b"x"), timeout_s=0.3)
    # Backoffs of 10-20 ms (jittered) within 0.3 s: between 15 and 31 attempts.
    assert 15 <= len(cluster.calls_to("Produce")) <= 31


def test_backoff_is_capped_exponential_with_jitter() -> None:
    policy = RetryPolicy(backoff_initial_ms=10, backoff_max_ms=100, jitter_ratio=0.5)
    rng = random.Random(1)
    waits = [policy.backoff_ms(i, rng) for i in range(10)]
    assert all(5 <= w <= 10 for w in waits[:1])
    assert all(50 <= w <= 100 for w in waits[5:])
    assert len(set(waits)) == len(waits)  # jittered


@pytest.mark.parametrize(
    ("error", "expected", "attributes"),
    [
        (BatchLimitError("too big"), BatchLimitError, {}),
        (RecordFormatError("bad"), RecordFormatError, {}),
        (InvalidInputError("bad"), InvalidInputError, {}),
        (InvalidTopicError("bad name"), InvalidTopicError, {}),
        (OutOfOrderSequenceError(5, 3, 9), OutOfOrderSequenceError, {}),
        (ClusterIdMismatchError("a", "b"), ClusterIdMismatchError, {}),
        (StorageError("disk"), StorageError, {}),
    ],
)
def test_non_retriable_errors_map_back_and_are_not_retried(
    cluster: FakeCluster, error, expected, attributes
) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", error, error)
    with make_client(cluster) as client:
        client.metadata()
        with pytest.raises(expected) as caught:
            client.produce("t", 0, batch(b"x"))
    assert type(caught.value) is expected
    assert str(error) in str(caught.value)
    assert len(cluster.calls_to("Produce")) == 1


def test_a_topic_unknown_to_a_node_is_retried_until_it_arrives(cluster: FakeCluster) -> None:
    # Right after a topic's creation some nodes may not have applied it yet.
    cluster.add_topic("t")
    unknown = UnknownTopicOrPartitionError("no topic 't'")
    cluster.fail_next("n0", "Produce", unknown, unknown, unknown)
    with make_client(cluster) as client:
        assert client.produce("t", 0, batch(b"x")) == [0]
    assert len(cluster.calls_to("Produce")) == 4


def test_a_topic_that_stays_unknown_fails_after_the_wait(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    unknown = UnknownTopicOrPartitionError("no topic 't'")
    cluster.fail_next("n0", "Produce", *([unknown] * 1000))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with make_client(cluster, clock=lambda: now[0], sleep=sleep, retry=RetryPolicy()) as client:
        client.metadata()
        with pytest.raises(UnknownTopicOrPartitionError):
            client.produce("t", 0, batch(b"x"))
    assert UNKNOWN_TOPIC_WAIT_S <= now[0] < UNKNOWN_TOPIC_WAIT_S + 2


def test_unknown_topic_in_metadata_is_raised(cluster: FakeCluster) -> None:
    with make_client(cluster) as client, pytest.raises(UnknownTopicOrPartitionError):
        client.produce("missing", 0, batch(b"x"))


def test_offset_out_of_range_carries_the_range(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a", b"b"))
        with pytest.raises(OffsetOutOfRangeError) as caught:
            client.fetch("t", 0, 10)
    assert (caught.value.offset, caught.value.start_offset, caught.value.end_offset) == (10, 0, 2)


def test_fetch_spreads_over_replicas(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a"))
        served = [client.fetch("t", 0, 0).served_by for _ in range(6)]
    assert sorted(served) == ["n0", "n0", "n1", "n1", "n2", "n2"]


def test_fetch_skips_a_failing_replica(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a"))
        cluster.nodes["n1"].stop()
        served = {client.fetch("t", 0, 0).served_by for _ in range(6)}
    assert served == {"n0", "n2"}


def test_fetch_pinned_replica(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a"))
        assert client.fetch("t", 0, 0, replica="n2").served_by == "n2"
        address = cluster.address_of("n1")
        assert client.fetch("t", 0, 0, replica=address).served_by == "n1"


def test_records_iterator_and_follow(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, [batch(b"a", b"b"), batch(b"c", b"d")])
        assert [r.value for r in client.records("t", 0, 1)] == [b"b", b"c", b"d"]
        assert [r.offset for r in client.records("t", 0, 0, 3)] == [0, 1, 2]
        assert list(client.records("t", 0, 4)) == []
        followed = client.records("t", 0, 4, 5, follow=True, max_wait_s=0.05)
        client.produce("t", 0, batch(b"e"))
        assert [r.value for r in followed] == [b"e"]


def test_watermarks(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a", b"b", b"c"))
        marks = client.watermarks("t", 0)
    assert (marks.log_start_offset, marks.high_watermark) == (0, 3)


def test_metadata_is_cached_then_refreshed_when_stale(cluster: FakeCluster) -> None:
    now = [0.0]
    with make_client(cluster, metadata_max_age_s=10, clock=lambda: now[0]) as client:
        first = client.metadata()
        client.metadata()
        assert len(cluster.calls_to("Metadata")) == 1
        now[0] = 11.0
        client.metadata()
        assert len(cluster.calls_to("Metadata")) == 2
    assert first.members["n1"].grpc_address == cluster.address_of("n1")
    assert first.cluster_id == "fake"


def test_bootstrap_skips_a_dead_address(cluster: FakeCluster) -> None:
    cluster.nodes["n0"].stop()
    with make_client(cluster) as client:
        metadata = client.metadata()
    assert metadata.node_id in {"n1", "n2"}


def test_all_nodes_down_is_unavailable(cluster: FakeCluster) -> None:
    cluster.stop()
    with make_client(cluster, timeout_s=1.0) as client, pytest.raises(UnavailableError):
        client.metadata()


def test_metadata_refreshed_after_leader_moves(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        client.produce("t", 0, batch(b"a"))
        part = cluster.partition("t")
        part.leader = "n2"
        cluster.nodes["n0"].stop()  # old leader gone: unreachable, then refresh
        assert client.produce("t", 0, batch(b"b")) == [1]
        assert client.metadata().partition("t", 0).leader == "n2"


def test_idempotent_producer_retry_is_deduplicated(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    # The leader writes the batch, then the answer is lost.
    cluster.fail_next("n0", "Produce", ("after", UnavailableError("lost answer")))
    with make_client(cluster) as client:
        producer = IdempotentProducer(client, rng=random.Random(3))
        assert producer.send("t", 0, [b"a", b"b"]) == 0
        assert producer.send("t", 0, [b"c"]) == 2
    stored = cluster.partition("t").batches
    assert [[r.value for r in decode_records(b)] for b in stored] == [[b"a", b"b"], [b"c"]]
    headers = [parse_header(b) for b in stored]
    assert [h.base_sequence for h in headers] == [0, 2]
    assert headers[0].producer_id == headers[1].producer_id == producer.producer_id


def test_idempotent_producer_rotates_id_after_unknown_outcome(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", *[UnavailableError("down")] * 3)
    policy = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=1, attempts_max=3)
    with make_client(cluster, retry=policy) as client:
        producer = IdempotentProducer(client, rng=random.Random(3))
        first_id = producer.producer_id
        with pytest.raises(UnavailableError):
            producer.send("t", 0, [b"a"])
        assert producer.producer_id != first_id
        assert producer.send("t", 0, [b"b"]) == 0


def test_idempotent_producer_rotates_id_after_a_storage_error(cluster: FakeCluster) -> None:
    """STORAGE: the leader fenced its replica after the batch reached it, and a new
    leader may commit it (laminar_client.sequencing.verdict). Reusing the sequence
    under the same id would have the next batch answered as that one's duplicate,
    its records dropped."""
    cluster.add_topic("t")
    cluster.fail_next("n0", "Produce", ("after", StorageError("replica fenced")))
    with make_client(cluster) as client:
        producer = IdempotentProducer(client, rng=random.Random(3))
        first_id = producer.producer_id
        with pytest.raises(StorageError):
            producer.send("t", 0, [b"a"])
        assert producer.producer_id != first_id
        assert producer.send("t", 0, [b"b"]) == 1
    stored = cluster.partition("t").batches
    assert [[r.value for r in decode_records(b)] for b in stored] == [[b"a"], [b"b"]]


def test_admin_calls(cluster: FakeCluster) -> None:
    with make_client(cluster) as client:
        created = client.create_topic("orders", 3, 2, retention_s=1.0)
        assert created.config.partitions == 3
        assert created.config.retention_ms == 1000
        assert next(p.replicas for p in created.partitions) == ("n0", "n1")
        with pytest.raises(TopicExistsError):
            client.create_topic("orders", 1, 1)
        with pytest.raises(InvalidTopicError):
            client.create_topic("bad/name", 1, 1)
        assert [t.name for t in client.list_topics()] == ["orders"]
        assert client.metadata().topic("orders").config.replication_factor == 2
        description = client.describe_cluster()
        assert [m.node_id for m in description.members] == ["n0", "n1", "n2"]
        assert len(description.partitions) == 3
        member = client.update_node(cluster.address_of("n1"), weight=0.0, zone="zz")
        assert (member.node_id, member.weight, member.zone) == ("n1", 0.0, "zz")
        client.delete_topic("orders")
        assert client.list_topics() == []
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topic("orders")


def test_admin_follows_not_leader_hint(cluster: FakeCluster) -> None:
    with make_client(cluster) as client:
        client.metadata()
        first = client.cache.any_address()
        cluster.fail_next(
            next(n for n, node in cluster.nodes.items() if node.address == first),
            "CreateTopic",
            NotLeaderError("n2", cluster.address_of("n2")),
        )
        client.create_topic("x", 1, 1)
    assert cluster.calls_to("CreateTopic")[-1] == "n2"


def test_request_timeout_maps_back(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    policy = RetryPolicy(backoff_initial_ms=1, backoff_max_ms=1, attempts_max=1)
    cluster.fail_next("n0", "Produce", RequestTimeoutError("slow"))
    with make_client(cluster, retry=policy) as client, pytest.raises(RequestTimeoutError):
        client.produce("t", 0, batch(b"x"))


def test_invalid_arguments_are_rejected_locally(cluster: FakeCluster) -> None:
    with make_client(cluster) as client:
        with pytest.raises(InvalidInputError):
            client.produce("t", 0, [])
        with pytest.raises(InvalidInputError):
            client.produce("t", 0, batch(b"x"), acks="most")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            client.fetch("t", 0, -1)
    with pytest.raises(InvalidInputError):
        Client("")


def test_transport_tells_no_answer_from_an_answered_error(cluster: FakeCluster) -> None:
    transport = Transport()

    def metadata(node_id: str, timeout_s: float) -> None:
        address = cluster.address_of(node_id)
        request = pb.MetadataRequest()
        transport.call(address, "Metadata", request, pb.MetadataResponse, timeout_s=timeout_s)

    try:
        cluster.fail_next("n0", "Metadata", UnavailableError("no quorum"))
        with pytest.raises(UnavailableError) as answered:
            metadata("n0", 5.0)
        assert not isinstance(answered.value, NoAnswerError)  # n0 is up: it answered

        release = threading.Event()
        cluster.fail_next("n1", "Metadata", release)
        with pytest.raises(AttemptTimeoutError):
            metadata("n1", 0.2)
        release.set()

        cluster.nodes["n2"].stop()
        with pytest.raises(NodeUnreachableError):
            metadata("n2", 5.0)
    finally:
        transport.close()


def test_concurrent_producers_survive_a_leader_change(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    errors: list[BaseException] = []
    offsets: list[int] = []
    lock = threading.Lock()
    halfway = threading.Barrier(5)
    moved = threading.Barrier(5)

    def produce(worker: int) -> None:
        try:
            for index in range(20):
                if index == 10:
                    halfway.wait(10)
                    moved.wait(10)
                (offset,) = client.produce("t", 0, batch(b"%d-%d" % (worker, index)))
                with lock:
                    offsets.append(offset)
        except BaseException as error:
            errors.append(error)

    with make_client(cluster) as client:
        threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        halfway.wait(10)  # every worker wrote 10 records to n0
        with cluster.lock:
            cluster.partition("t").leader = "n1"
        cluster.nodes["n0"].stop()
        moved.wait(10)
        for thread in threads:
            thread.join(30)
    assert not errors
    assert sorted(offsets) == list(range(80))
    assert cluster.calls_to("Produce").count("n1") == 40


def test_a_new_client_gives_up_soon_when_every_bootstrap_address_refuses() -> None:
    """Nothing listens at either address: each call fails after the 1 s grace
    (not the 30 s timeout), naming the addresses."""
    addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with Client(addresses, timeout_s=30) as client:
        for call in (
            client.describe_cluster,
            client.list_topics,
            lambda: client.list_offsets("t", [0]),
            client.metadata,
        ):
            started = time.monotonic()
            with pytest.raises(ClusterUnreachableError) as raised:
                call()
            assert time.monotonic() - started < 2.0
            assert raised.value.addresses == tuple(addresses)
            assert all(f"{a} (connection refused)" in str(raised.value) for a in addresses)


def test_a_name_that_does_not_resolve_fails_as_soon() -> None:
    with Client("no-such-host.invalid:7100", timeout_s=30) as client:
        started = time.monotonic()
        with pytest.raises(ClusterUnreachableError, match="name not resolved"):
            client.list_topics()
        assert time.monotonic() - started < 2.0


def test_one_bootstrap_address_refusing_is_not_the_cluster_unreachable(
    cluster: FakeCluster,
) -> None:
    with Client([f"127.0.0.1:{free_port()}", *cluster.bootstrap.split(",")], timeout_s=5) as client:
        assert client.list_topics() == []


def test_once_a_node_answered_a_refused_connection_is_retried_until_the_deadline() -> None:
    """A client that has reached the cluster takes a refusal for a node restarting:
    it retries to the call's deadline rather than giving up after the grace."""
    fake = FakeCluster(1)
    try:
        with Client(fake.bootstrap, timeout_s=4) as client:
            assert client.list_topics() == []
            fake.stop()
            started = time.monotonic()
            with pytest.raises(NoAnswerError):  # not ClusterUnreachableError
                client.list_topics()
            # Past the grace (1 s), to within a backoff (at most 1 s) of the deadline.
            assert time.monotonic() - started > 2.5
    finally:
        fake.stop()


def test_a_write_its_silent_leader_holds_goes_to_the_new_leader_soon(
    cluster: FakeCluster,
) -> None:
    """The leader hangs (paused or cut off) and the other replicas name a new one:
    the client abandons the attempt after leader_check_s instead of waiting out the
    3 s attempt timeout."""
    cluster.add_topic("t")
    part = cluster.partition("t", 0)
    old = part.leader
    release = threading.Event()
    try:
        with make_client(cluster) as client:
            assert client.produce("t", 0, batch(b"a")) == [0]
            cluster.fail_next(old, "Produce", release)  # the old leader answers nothing
            with cluster.lock:
                part.leader = next(n for n in part.replicas if n != old)  # elected
            started = time.monotonic()
            assert client.produce("t", 0, batch(b"b")) == [1]
            assert time.monotonic() - started < 1.5
            assert client.attempt_timeout_s == 3.0
    finally:
        release.set()
    assert cluster.calls_to("Produce").count(old) == 2


def test_a_slow_leader_that_still_leads_is_waited_for_not_written_twice(
    cluster: FakeCluster,
) -> None:
    cluster.add_topic("t")
    part = cluster.partition("t", 0)
    release = threading.Event()
    cluster.fail_next(part.leader, "Produce", release)
    timer = threading.Timer(1.2, release.set)  # answers after 1.2 s: checked, not moved
    timer.start()
    try:
        with make_client(cluster) as client:
            started = time.monotonic()
            assert client.produce("t", 0, batch(b"a")) == [0]
            assert time.monotonic() - started >= 1.1
    finally:
        timer.cancel()
        release.set()
    assert cluster.calls_to("Produce") == [part.leader]
    assert len(cluster.calls_to("Metadata")) >= 3  # it did look (0.5 s, then every 0.25 s)


def test_producer_and_consumer_given_an_address_take_tls_and_token(tmp_path) -> None:
    """Given a bootstrap string, a producer or consumer builds its client with the
    TLS options and token it is given; given a Client, they are the client's own."""
    from laminar_client import Consumer, Producer, TlsOptions

    from laminar.security import certs

    (tmp_path / "ca.pem").write_bytes(certs.make_ca().cert)
    tls = TlsOptions(ca_file=str(tmp_path / "ca.pem"))
    with Producer("127.0.0.1:1", tls=tls, token="lmt.a.b") as producer:
        assert producer.client.tls is tls
        assert ("authorization", "Bearer lmt.a.b") in producer.client.call_metadata
    with Consumer("127.0.0.1:1", tls=tls, token="lmt.a.b") as consumer:
        assert consumer.client.tls is tls
    with Client("127.0.0.1:1") as client, pytest.raises(InvalidInputError, match="pass them"):
        Producer(client, tls=tls)
