"""The node and the client library agree with the proto on a topic's settings
(:mod:`laminar.topic_settings`): a setting added to ``TopicConfig`` in the proto
fails here until both sides have a field for it, with the same default."""

from __future__ import annotations

import dataclasses

from laminar_client.metadata import TopicConfig

from laminar.server.metadata import TopicSpec
from laminar.topic_settings import ALTERABLE_SETTINGS, LATER_SETTINGS, TOPIC_SETTINGS
from laminar.v1 import laminar_pb2 as pb

PROTO_FIELDS = [field.name for field in pb.TopicConfig.DESCRIPTOR.fields]
SPEC_ONLY = {"name", "defaults"}  # the topic's name, and which settings are defaults


def _defaults(cls: type) -> dict[str, object]:
    return {
        field.name: field.default
        for field in dataclasses.fields(cls)
        if field.default is not dataclasses.MISSING
    }


def test_the_setting_names_are_the_proto_fields() -> None:
    assert list(TOPIC_SETTINGS) == PROTO_FIELDS
    assert list(ALTERABLE_SETTINGS) == [name for name in PROTO_FIELDS if name != "partitions"]
    assert PROTO_FIELDS[PROTO_FIELDS.index("cleanup_policy") :] == list(LATER_SETTINGS)


def test_the_node_and_the_client_each_hold_every_setting_with_the_same_default() -> None:
    client_fields = [field.name for field in dataclasses.fields(TopicConfig)]
    assert client_fields == PROTO_FIELDS
    spec_fields = [field.name for field in dataclasses.fields(TopicSpec)]
    assert sorted(set(spec_fields) - SPEC_ONLY) == sorted(PROTO_FIELDS)
    # A node that predates a later setting sends it unset: the client reads the
    # default the node would have used.
    client, node = _defaults(TopicConfig), _defaults(TopicSpec)
    assert {name: client[name] for name in LATER_SETTINGS} == {
        name: node[name] for name in LATER_SETTINGS
    }


def test_a_topic_config_carries_every_setting_both_ways() -> None:
    config = TopicConfig(
        partitions=3,
        replication_factor=2,
        retention_bytes=1 << 30,
        retention_ms=60_000,
        cleanup_policy="compact,delete",
        delete_retention_ms=5,
        min_compaction_lag_ms=6,
        max_compaction_lag_ms=7,
        min_cleanable_dirty_ratio=0.25,
    )
    wire = config.to_proto()
    assert [field.name for field, _ in wire.ListFields()] == PROTO_FIELDS
    assert TopicConfig.from_proto(wire) == config
    # A node that predates keyed compaction: the later settings unset, the defaults.
    old = pb.TopicConfig(partitions=3, replication_factor=2, retention_bytes=-1, retention_ms=-1)
    assert TopicConfig.from_proto(old) == TopicConfig(3, 2)
    spec = TopicSpec("t", 3, 2, cleanup_policy="compact", min_cleanable_dirty_ratio=0.25)
    assert list(spec.settings()) == PROTO_FIELDS
    read = TopicConfig.from_proto(pb.TopicConfig(**spec.settings()))
    assert (read.cleanup_policy, read.min_cleanable_dirty_ratio) == ("compact", 0.25)
