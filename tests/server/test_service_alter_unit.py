"""AlterTopic, CreatePartitions and the compacted topics' produce check, through the
service's handlers against a fake node whose metadata proposals apply at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from laminar.errors import (
    InvalidInputError,
    InvalidTopicError,
    NotLeaderError,
    UnknownTopicOrPartitionError,
)
from laminar.ids import NodeId, TopicPartition
from laminar.membership import MemberState
from laminar.placement import PlacementMember
from laminar.records import encode_batch, with_leader_fields
from laminar.replica.types import Acks, Role
from laminar.server.host import ProduceResult
from laminar.server.metadata import (
    METADATA_KEY,
    MetadataState,
    TopicSpec,
    alter_topic_command,
    create_topic_command,
    delete_topic_command,
)
from laminar.topic_settings import TOPIC_SETTINGS
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_service_unit import FakeHost, FakeNode, call, member, service_of, status

NODES = ("n1", "n2", "n3")


@dataclass
class ProposingHost(FakeHost):
    """Appends each metadata proposal to the catalogue at once (a one-node log)."""

    metadata: MetadataState = field(default_factory=MetadataState)

    async def produce(
        self, key: TopicPartition, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        offset = self.metadata.applied_offset
        self.produced.append((key, batch))
        if key == METADATA_KEY:
            self.metadata.apply(with_leader_fields(batch, offset, 1))
        return ProduceResult(offset, False)


@dataclass
class ClusterNode(FakeNode):
    """The metadata leader of a cluster of ``NODES`` (all eligible)."""

    def placement_members(self) -> list[PlacementMember]:
        return [PlacementMember(NodeId(node_id)) for node_id in NODES]


def leader(spec: TopicSpec | None = None) -> ClusterNode:
    """A metadata leader holding the topic ``spec`` (2 partitions, rf 1 by default)."""
    node = ClusterNode(view=[member(n) for n in NODES])
    node.replicas[METADATA_KEY] = status(Role.LEADER, "n1")
    host = ProposingHost(metadata=node.metadata)
    node.fake_host = host
    spec = spec or TopicSpec("t", 2, 1, defaults=("retention_ms",))
    founders = [("n1",)] * spec.partitions
    host.metadata.apply(with_leader_fields(create_topic_command(spec, founders, "c1"), 0, 1))
    return node


def alter(
    node: ClusterNode,
    reset: tuple[str, ...] = (),
    validate_only: bool = False,
    name: str = "t",
    **changes: object,
) -> tuple[pb.AlterTopicResponse | None, Exception | None]:
    request = pb.AlterTopicRequest(
        name=name,
        set=pb.TopicConfig(**changes),  # type: ignore[arg-type]
        reset=list(reset),
        validate_only=validate_only,
    )
    return call(service_of(node), "AlterTopic", request)


def sources(info: pb.TopicInfo) -> dict[str, int]:
    return {source.name: source.source for source in info.sources}


def test_an_alter_is_applied_and_answers_the_topic_and_its_previous_state() -> None:
    node = leader()
    answer, error = alter(node, replication_factor=3, retention_ms=60_000)
    assert error is None and answer is not None
    assert (answer.topic.config.replication_factor, answer.topic.config.retention_ms) == (3, 60_000)
    assert (answer.previous.config.replication_factor, answer.previous.config.retention_ms) == (
        1,
        -1,
    )
    assert node.metadata.topics["t"].spec.replication_factor == 3
    assert sources(answer.previous)["retention_ms"] == pb.SettingSource.CLUSTER_DEFAULT
    assert sources(answer.topic)["retention_ms"] == pb.SettingSource.TOPIC
    assert list(sources(answer.topic)) == list(TOPIC_SETTINGS)


def test_reset_takes_the_proposers_default_and_validate_only_proposes_nothing() -> None:
    node = leader(TopicSpec("t", 2, 1, retention_ms=5000, cleanup_policy="compact"))
    answer, error = alter(node, reset=("retention_ms", "cleanup_policy"), validate_only=True)
    assert error is None and answer is not None
    assert (answer.topic.config.retention_ms, answer.topic.config.cleanup_policy) == (-1, "delete")
    assert set(answer.topic.defaults) == {"retention_ms", "cleanup_policy"}
    assert len(node.fake_host.produced) == 0
    assert node.metadata.topics["t"].spec.retention_ms == 5000
    answer, error = alter(node, reset=("retention_ms",))
    assert error is None and node.metadata.topics["t"].spec.retention_ms == -1
    assert node.metadata.topics["t"].spec.defaults == ("retention_ms",)


@pytest.mark.parametrize(
    ("reset", "changes", "named"),
    [
        ((), {"retention_ms": 0}, "retention_ms"),
        ((), {"retention_bytes": -7}, "retention_bytes"),
        ((), {"cleanup_policy": "shred"}, "cleanup_policy"),
        ((), {"min_cleanable_dirty_ratio": 2.0}, "min_cleanable_dirty_ratio"),
        ((), {"delete_retention_ms": -1}, "delete_retention_ms"),
        ((), {"max_compaction_lag_ms": 0}, "max_compaction_lag_ms"),
        ((), {"replication_factor": 4}, "replication_factor"),  # 3 eligible nodes
        ((), {"replication_factor": 9}, "replication_factor"),
        ((), {"partitions": 4}, "partitions"),
        (("retention_ms",), {"retention_ms": 10}, "retention_ms"),  # set and reset
        (("colour",), {}, "colour"),
        (("partitions",), {}, "partitions"),
        ((), {}, "nothing to alter"),
    ],
)
def test_a_bad_alter_names_the_field_and_proposes_nothing(
    reset: tuple[str, ...], changes: dict[str, object], named: str
) -> None:
    node = leader()
    before = node.metadata.topics["t"]
    # A good field beside the bad one: all or nothing.
    good = {} if "retention_bytes" in changes or not changes else {"retention_bytes": 100}
    _, error = alter(node, reset=reset, **{**good, **changes})
    assert isinstance(error, InvalidTopicError) and named in str(error), error
    assert node.fake_host.produced == [] and node.metadata.topics["t"] == before


def test_an_alter_of_an_internal_or_unknown_topic_or_off_the_leader_is_refused() -> None:
    node = leader()
    _, error = alter(node, name="__groups", retention_ms=5)
    assert isinstance(error, InvalidTopicError) and "internal" in str(error)
    _, error = alter(node, name="nope", retention_ms=5)
    assert isinstance(error, UnknownTopicOrPartitionError)
    node.replicas[METADATA_KEY] = status(Role.FOLLOWER, "n2")
    _, error = alter(node, retention_ms=5)
    assert isinstance(error, NotLeaderError) and error.leader_id == "n2"
    request = pb.CreatePartitionsRequest(name="t", to=4)
    _, error = call(service_of(node), "CreatePartitions", request)
    assert isinstance(error, NotLeaderError) and error.leader_id == "n2"
    assert node.fake_host.produced == []


def add_partitions(
    node: ClusterNode, to: int, validate_only: bool = False
) -> tuple[pb.CreatePartitionsResponse | None, Exception | None]:
    request = pb.CreatePartitionsRequest(name="t", to=to, validate_only=validate_only)
    return call(service_of(node), "CreatePartitions", request)


def test_create_partitions_founds_only_the_new_ones_and_answers_the_previous_count() -> None:
    node = leader(TopicSpec("t", 2, 2))
    answer, error = add_partitions(node, 5, validate_only=True)
    assert error is None and answer is not None
    assert (answer.topic.config.partitions, answer.previous) == (5, 2)
    assert node.fake_host.produced == []
    answer, error = add_partitions(node, 5)
    assert error is None and answer is not None
    assert (answer.topic.config.partitions, answer.previous) == (5, 2)
    topic = node.metadata.topics["t"]
    assert topic.spec.partitions == 5 and topic.founding_replicas[:2] == (("n1",), ("n1",))
    assert all(len(group) == 2 for group in topic.founding_replicas[2:])


@pytest.mark.parametrize(
    ("to", "message"),
    [
        (2, "topic t has 2 partitions; to must be more"),
        (1, "topic t has 2 partitions; to must be more"),
        (10_001, "to must be at most 10000"),
    ],
)
def test_create_partitions_refuses_a_count_not_above_the_current_or_over_the_limit(
    to: int, message: str
) -> None:
    node = leader()
    _, error = add_partitions(node, to)
    assert isinstance(error, InvalidTopicError) and message in str(error)
    assert node.fake_host.produced == []


def produce_to(node: ClusterNode, batch: bytes) -> Exception | None:
    request = pb.ProduceRequest(topic="t", partition=0, batches=[batch], acks=pb.ACKS_ALL)
    return call(service_of(node), "Produce", request)[1]


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_refuses_a_batch_with_a_record_without_a_key(policy: str) -> None:
    node = leader(TopicSpec("t", 2, 1, cleanup_policy=policy))
    node.replicas[("t", 0)] = status(Role.LEADER, "n1")
    keyed = encode_batch([b"v1", b"v2"], keys=[b"k1", b"k2"], timestamps_ms=1_700_000_000_000)
    assert produce_to(node, keyed) is None
    for keys in ([b"k1", None], None):
        batch = encode_batch([b"v1", b"v2"], keys=keys, timestamps_ms=1_700_000_000_000)
        error = produce_to(node, batch)
        assert isinstance(error, InvalidInputError) and "needs a key" in str(error)
    assert [key for key, _ in node.fake_host.produced if key == ("t", 0)] == [("t", 0)]


def test_a_delete_topic_takes_records_without_keys() -> None:
    node = leader()
    node.replicas[("t", 0)] = status(Role.LEADER, "n1")
    assert produce_to(node, encode_batch([b"v"], timestamps_ms=1_700_000_000_000)) is None


def test_create_topic_takes_the_new_settings_and_lists_the_rest_as_defaults() -> None:
    node = leader()
    config = pb.TopicConfig(partitions=1, cleanup_policy="compact", min_cleanable_dirty_ratio=0.2)
    answer, error = call(
        service_of(node), "CreateTopic", pb.CreateTopicRequest(name="c", config=config)
    )
    assert error is None and answer is not None
    spec = node.metadata.topics["c"].spec
    assert (spec.cleanup_policy, spec.min_cleanable_dirty_ratio) == ("compact", 0.2)
    assert "cleanup_policy" not in spec.defaults and "delete_retention_ms" in spec.defaults
    assert sources(answer.topic)["cleanup_policy"] == pb.SettingSource.TOPIC
    bad = pb.TopicConfig(min_compaction_lag_ms=-1)
    _, error = call(service_of(node), "CreateTopic", pb.CreateTopicRequest(name="d", config=bad))
    assert isinstance(error, InvalidTopicError) and "min_compaction_lag_ms" in str(error)


@dataclass
class RacingHost(ProposingHost):
    """A delete and re-create of the topic commits just before each proposal."""

    async def produce(
        self, key: TopicPartition, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        offset = self.metadata.applied_offset
        race = [
            delete_topic_command("t", f"d{offset}"),
            create_topic_command(TopicSpec("t", 2, 1), [("n2",), ("n2",)], f"race{offset}"),
        ]
        for index, command in enumerate(race):
            self.metadata.apply(with_leader_fields(command, offset + index, 1))
        return await super().produce(key, batch, acks, timeout_s)


def test_a_change_that_lost_a_race_with_a_delete_and_re_create_is_unknown_topic() -> None:
    node = leader()
    node.fake_host = RacingHost(metadata=node.metadata)
    _, error = alter(node, retention_ms=5000)
    assert isinstance(error, UnknownTopicOrPartitionError)
    assert node.metadata.topics["t"].spec.retention_ms == -1  # the new topic untouched
    _, error = add_partitions(node, 4)
    assert isinstance(error, UnknownTopicOrPartitionError)
    assert node.metadata.topics["t"].spec.partitions == 2


@dataclass
class ConcurrentAlterHost(ProposingHost):
    """Another alter (a min lag of 100 ms) commits just before each proposal."""

    async def produce(
        self, key: TopicPartition, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        offset = self.metadata.applied_offset
        other = alter_topic_command(
            self.metadata.topics["t"], {"min_compaction_lag_ms": 100}, [], f"other{offset}"
        )
        self.metadata.apply(with_leader_fields(other, offset, 1))
        return await super().produce(key, batch, acks, timeout_s)


def test_an_alter_that_a_concurrent_one_made_invalid_is_refused_naming_the_field() -> None:
    node = leader()
    node.fake_host = ConcurrentAlterHost(metadata=node.metadata)
    _, error = alter(node, max_compaction_lag_ms=50)
    assert isinstance(error, InvalidTopicError) and "max_compaction_lag_ms" in str(error)
    assert node.metadata.topics["t"].spec.max_compaction_lag_ms == -1


@pytest.mark.parametrize("how", ["create", "alter"])
def test_a_compacted_topic_waits_until_every_node_speaks_protocol_2(how: str) -> None:
    """A node of peer protocol 1 refuses the gaps keyed compaction leaves: while one
    is a member, no topic becomes compacted (named in the error), and nothing is
    proposed; a gone member does not count."""
    node = leader()
    node.view = [*node.view, member("old", protocol=1)]
    compact = pb.TopicConfig(cleanup_policy="compact")
    request: Any = (
        pb.CreateTopicRequest(name="c", config=compact)
        if how == "create"
        else pb.AlterTopicRequest(name="t", set=compact)
    )
    method = "CreateTopic" if how == "create" else "AlterTopic"
    offset = node.metadata.applied_offset
    _, error = call(service_of(node), method, request)
    assert isinstance(error, InvalidTopicError), error
    assert "protocol 2" in str(error) and "node old speaks 1" in str(error)
    assert node.metadata.applied_offset == offset  # nothing proposed
    node.view[-1] = member("old", MemberState.DEAD, protocol=1)
    _, error = call(service_of(node), method, request)
    assert error is None
    topic = node.metadata.topics["c" if how == "create" else "t"]
    assert topic.spec.cleanup_policy == "compact"
