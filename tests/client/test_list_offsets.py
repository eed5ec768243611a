"""``Client.list_offsets`` and ``Client.watermarks`` on a simulated cluster.

`SimCluster` (manual clock, nodes answering from their own views) with a
``ListOffsets`` handler: a node answers for the partitions it hosts and gives the
others a per-partition ``UNAVAILABLE``, as a Laminar node does.
"""

from __future__ import annotations

import random

import pytest
from laminar_client import Client, PartitionOffsets, RetryPolicy
from laminar_client.client import LIST_OFFSETS_PARTITIONS_MAX, UNKNOWN_TOPIC_WAIT_S

from laminar.errors import (
    InvalidInputError,
    LaminarError,
    StorageError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import error_to_status
from laminar.v1 import laminar_pb2 as pb
from tests.client.sim_cluster import Key, ManualClock, SimCluster, SimNode

TOPIC = "t"


class OffsetsSim(SimCluster):
    """A `SimCluster` whose nodes answer ``ListOffsets`` for the partitions they host."""

    def __init__(self, node_count: int) -> None:
        super().__init__(ManualClock(), node_count)
        self.timestamps: dict[Key, list[int]] = {}  # each offset's record timestamp
        self.starts: dict[Key, int] = {}  # log start offsets (retention), 0 by default
        self.partition_errors: dict[str, LaminarError] = {}  # by node: for every partition

    def write(self, key: Key, *timestamps_ms: int) -> None:
        self.timestamps.setdefault(key, []).extend(timestamps_ms)
        self.partitions[key].end_offset += len(timestamps_ms)

    def requests(self) -> list[tuple[str, list[int], int | None]]:
        """Every ``ListOffsets`` call: node, partitions, time asked."""
        return [
            (
                call.node_id,
                list(call.request.partitions),
                call.request.timestamp_ms if call.request.HasField("timestamp_ms") else None,
            )
            for call in self.calls
            if call.method == "ListOffsets"
        ]

    def _listoffsets(
        self, node: SimNode, request: pb.ListOffsetsRequest, timeout_s: float
    ) -> pb.ListOffsetsResponse:
        if not any(topic == request.topic for topic, _ in self.partitions):
            raise UnknownTopicOrPartitionError(f"no topic {request.topic!r}")
        answers = []
        for partition in request.partitions:
            key = (request.topic, partition)
            answer = pb.PartitionOffsets(partition=partition)
            error = self.partition_errors.get(node.node_id)
            if key not in node.leaders:
                error = UnavailableError(f"{key} has no replica on {node.node_id}")
            if error is not None:
                answer.error.CopyFrom(error_to_status(error)[1])
            else:
                answer.log_start_offset = self.starts.get(key, 0)
                answer.high_watermark = self.partitions[key].end_offset
                found = self._offset_for(key, request)
                if found is not None:
                    answer.offset_for_timestamp = found
            answers.append(answer)
        return pb.ListOffsetsResponse(partitions=answers, served_by=node.node_id)

    def _offset_for(self, key: Key, request: pb.ListOffsetsRequest) -> int | None:
        if not request.HasField("timestamp_ms"):
            return None
        times = self.timestamps.get(key, [])
        for offset in range(self.starts.get(key, 0), len(times)):
            if times[offset] >= request.timestamp_ms:
                return offset
        return None


def make_client(sim: SimCluster, **kwargs: object) -> Client:
    return Client(
        sim.bootstrap(*sim.nodes),
        transport=sim,
        clock=sim.clock,
        sleep=sim.clock.sleep,
        rng=random.Random(7),
        **kwargs,  # type: ignore[arg-type]
    )


def one_replica_each(partitions: int = 6) -> OffsetsSim:
    """Partition p on node n(p mod 3) alone."""
    sim = OffsetsSim(3)
    for partition in range(partitions):
        node = f"n{partition % 3}"
        sim.add_partition(TOPIC, partition, [node], leader=node)
    return sim


def test_partitions_on_the_same_node_share_one_request() -> None:
    sim = one_replica_each(6)
    for partition in range(6):
        sim.write((TOPIC, partition), *range(partition + 1))
    with make_client(sim) as client:
        offsets = client.list_offsets(TOPIC, [5, 4, 3, 2, 1, 0])
    assert offsets == {p: PartitionOffsets(0, p + 1, None) for p in [5, 4, 3, 2, 1, 0]}
    assert list(offsets) == [5, 4, 3, 2, 1, 0]  # the order asked
    assert sorted(sim.requests()) == [
        ("n0", [3, 0], None),
        ("n1", [4, 1], None),
        ("n2", [5, 2], None),
    ]


def test_the_offset_for_a_time_is_the_nodes_answer_or_none() -> None:
    sim = one_replica_each(3)
    sim.write((TOPIC, 0), 100, 300, 200)
    sim.write((TOPIC, 1), 50)
    sim.starts[(TOPIC, 2)] = 0
    with make_client(sim) as client:
        offsets = client.list_offsets(TOPIC, range(3), timestamp_ms=250)
        assert offsets == {
            0: PartitionOffsets(0, 3, 1),
            1: PartitionOffsets(0, 1, None),  # every record is earlier
            2: PartitionOffsets(0, 0, None),  # empty
        }
        assert {time for _, _, time in sim.requests()} == {250}
        # 0 is a time like any other, not "no time".
        assert client.list_offsets(TOPIC, [0], timestamp_ms=0)[0].offset_for_timestamp == 0


def test_watermarks_ask_list_offsets_and_fetch_nothing() -> None:
    sim = one_replica_each(1)
    sim.write((TOPIC, 0), 1, 2, 3, 4)
    sim.starts[(TOPIC, 0)] = 3  # retention dropped offsets 0-2
    with make_client(sim) as client:
        marks = client.watermarks(TOPIC, 0)
    assert (marks.log_start_offset, marks.high_watermark) == (3, 4)
    assert sim.requests() == [("n0", [0], None)]
    assert sim.calls_to("Fetch") == []


def test_a_replica_without_the_partition_sends_the_client_to_the_next_at_once() -> None:
    # Metadata still lists n0 as a replica of t/0, but n0 no longer hosts it.
    sim = OffsetsSim(3)
    sim.add_partition(TOPIC, 0, ["n0", "n1"], leader="n1")
    del sim.nodes["n0"].leaders[(TOPIC, 0)]
    sim.write((TOPIC, 0), 10, 20)
    with make_client(sim) as client:
        client.metadata()
        for _ in range(4):  # reads take turns: some of these ask n0 first
            started_s = sim.clock()
            assert client.list_offsets(TOPIC, [0]) == {0: PartitionOffsets(0, 2, None)}
            assert sim.clock() - started_s < 0.01  # no backoff (>= 12.5 ms): the next at once
    asked = [node for node, _, _ in sim.requests()]
    assert "n0" in asked and asked.count("n1") == 4


def test_partitions_of_a_node_that_does_not_answer_go_to_other_replicas() -> None:
    sim = OffsetsSim(3)
    for partition in range(6):
        sim.add_partition(TOPIC, partition, ["n0", "n1", "n2"], leader="n0")
        sim.write((TOPIC, partition), 1)
    with make_client(sim) as client:
        client.metadata()
        sim.nodes["n0"].state = "hung"  # each attempt to it takes its whole timeout
        offsets = client.list_offsets(TOPIC, range(6))
        assert offsets == dict.fromkeys(range(6), PartitionOffsets(0, 1, None))
        assert [node for node, _, _ in sim.requests()].count("n0") == 1  # then skipped
        assert sim.clock() < client.attempt_timeout_s + 0.5  # no backoff either


def test_a_partition_no_replica_can_answer_fails_with_its_error_at_the_deadline() -> None:
    sim = one_replica_each(2)
    sim.partition_errors["n1"] = UnavailableError("n1's replica is out of service")
    with make_client(sim) as client:
        with pytest.raises(UnavailableError, match="out of service"):
            client.list_offsets(TOPIC, [0, 1], timeout_s=2.0)
        assert 1.0 < sim.clock() <= 2.1  # backed off and retried until the deadline
    asked = sim.requests()
    assert asked.count(("n0", [0], None)) == 1  # answered once, not asked again
    assert asked.count(("n1", [1], None)) > 2


def test_attempts_per_partition_are_bounded() -> None:
    sim = one_replica_each(1)
    sim.partition_errors["n0"] = UnavailableError("busy")
    client = make_client(sim, retry=RetryPolicy(attempts_max=3))
    with client, pytest.raises(UnavailableError, match="busy"):
        client.list_offsets(TOPIC, [0])
    assert len(sim.requests()) == 3


def test_a_partition_error_that_retrying_cannot_fix_is_raised_at_once() -> None:
    sim = one_replica_each(2)
    sim.partition_errors["n1"] = StorageError("the replica's log failed")
    with make_client(sim) as client, pytest.raises(StorageError, match="log failed"):
        client.list_offsets(TOPIC, [0, 1])
    assert len(sim.requests()) <= 2


def test_an_unknown_topic_is_retried_for_a_while_then_raised() -> None:
    sim = one_replica_each(1)
    with make_client(sim) as client:
        with pytest.raises(UnknownTopicOrPartitionError):
            client.list_offsets("nope", [0])
        assert UNKNOWN_TOPIC_WAIT_S <= sim.clock() < UNKNOWN_TOPIC_WAIT_S + 2.0
        with pytest.raises(UnknownTopicOrPartitionError):
            client.list_offsets(TOPIC, [0, 7])  # no such partition


@pytest.mark.parametrize(
    ("partitions", "words"),
    [
        ([], "got 0"),
        ([0, -1], ">= 0"),
        (range(LIST_OFFSETS_PARTITIONS_MAX + 1), f"got {LIST_OFFSETS_PARTITIONS_MAX + 1}"),
    ],
)
def test_bad_arguments_are_refused_before_any_call(partitions: object, words: str) -> None:
    sim = one_replica_each(1)
    with make_client(sim) as client, pytest.raises(InvalidInputError, match=words):
        client.list_offsets(TOPIC, partitions)  # type: ignore[arg-type]
    assert sim.calls == []


def test_a_partition_asked_twice_is_answered_once() -> None:
    sim = one_replica_each(1)
    with make_client(sim) as client:
        assert list(client.list_offsets(TOPIC, [0, 0])) == [0]
    assert sim.requests() == [("n0", [0], None)]
