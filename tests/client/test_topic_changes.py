"""Client side of issue 34: ``alter_topic``, ``create_partitions``, a metadata
cache that never goes back to an older catalogue, and what a keyed producer does
when a topic grows (the fake cluster of tests/client/fake_server.py)."""

from __future__ import annotations

import logging
import math
import threading
import time
from fractions import Fraction

import pytest
from laminar_client import Producer, key_partition, moved_key_fraction
from laminar_client.metadata import CLUSTER_DEFAULT, SET_ON_TOPIC, TopicMetadata

from laminar.errors import (
    InvalidInputError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)
from laminar.records import decode_records
from laminar.v1 import laminar_pb2 as pb
from tests.client.fake_server import FakeCluster
from tests.client.test_client import FAST, make_client


def test_alter_topic_sets_and_resets_through_the_metadata_leader(cluster: FakeCluster) -> None:
    with make_client(cluster) as client:
        client.create_topic("t", 2, 2, retention_bytes=1000)
        altered = client.alter_topic(
            "t",
            set={"retention_ms": 60_000, "cleanup_policy": "compact"},
            reset=["retention_bytes"],
        )
        assert altered.previous.config.retention_ms == -1
        assert altered.topic.config.retention_ms == 60_000
        assert altered.topic.config.cleanup_policy == "compact"
        assert altered.topic.config.retention_bytes == -1
        assert altered.topic.source("retention_bytes") == CLUSTER_DEFAULT
        assert altered.previous.source("retention_bytes") == SET_ON_TOPIC
        assert [name for name, _, _ in altered.changes()] == [
            "retention_bytes",
            "retention_ms",
            "cleanup_policy",
        ]
        # The cache was invalidated: the next read sees the change.
        assert client.metadata().topic("t").config.retention_ms == 60_000
    # n0 is the fake's metadata leader: whichever node was asked first, it answered.
    assert cluster.calls_to("AlterTopic")[-1] == "n0"


def test_alter_topic_validate_only_changes_nothing(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        answer = client.alter_topic("t", set=pb.TopicConfig(retention_ms=5), validate_only=True)
        assert answer.topic.config.retention_ms == 5
        assert client.metadata(refresh=True).topic("t").config.retention_ms == -1


@pytest.mark.parametrize(
    ("settings", "reset", "message"),
    [
        ({"partitions": 4}, (), "create_partitions"),
        ({"retention": 4}, (), "unknown topic setting 'retention'"),
        ({"retention_ms": "60"}, (), "retention_ms must be an integer"),
        ({"retention_ms": True}, (), "retention_ms must be an integer"),
        ({"cleanup_policy": 1}, (), "cleanup_policy must be a string"),
        ({"min_cleanable_dirty_ratio": "x"}, (), "must be a number"),
        ({"replication_factor": -1}, (), "replication_factor must be a positive"),
        ({"retention_ms": 5}, ("retention_ms",), "retention_ms is both set and reset"),
        ({}, ("partitions",), "cannot reset 'partitions'"),
        ({}, (), "nothing to change"),
        (pb.TopicConfig(partitions=3), (), "create_partitions"),
    ],
)
def test_alter_topic_refuses_bad_requests_before_sending(
    cluster: FakeCluster, settings: object, reset: tuple[str, ...], message: str
) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client, pytest.raises(InvalidInputError, match=message):
        client.alter_topic("t", set=settings, reset=reset)  # type: ignore[arg-type]
    assert cluster.calls_to("AlterTopic") == []


def test_alter_topic_maps_node_errors_back(cluster: FakeCluster) -> None:
    cluster.add_topic("t")
    with make_client(cluster) as client:
        with pytest.raises(InvalidTopicError, match="retention_ms"):
            client.alter_topic("t", set={"retention_ms": 0})
        with pytest.raises(UnknownTopicOrPartitionError):
            client.alter_topic("nope", set={"retention_ms": 10})


def test_create_partitions_answers_the_new_partitions(cluster: FakeCluster) -> None:
    cluster.add_topic("t", partitions=4)
    with make_client(cluster) as client:
        assert len(client.metadata().topic("t").partitions) == 4
        dry = client.create_partitions("t", 6, validate_only=True)
        assert dry.previous == 4
        assert len(client.metadata(refresh=True).topic("t").partitions) == 4
        added = client.create_partitions("t", 6)
        assert added.previous == 4
        assert [p.partition for p in added.added] == [4, 5]
        assert all(p.replicas for p in added.added)
        assert len(client.metadata().topic("t").partitions) == 6
        with pytest.raises(InvalidInputError, match="has 6 partitions; --to must be more"):
            client.create_partitions("t", 6)
        with pytest.raises(InvalidInputError, match="positive integer"):
            client.create_partitions("t", -1)


def test_moved_key_fraction_is_exact() -> None:
    assert moved_key_fraction(4, 8) == Fraction(1, 2)
    assert moved_key_fraction(4, 6) == Fraction(2, 3)
    assert moved_key_fraction(5, 5) == 0
    for old, new in [(3, 7), (6, 9), (10, 12), (1, 5)]:
        # Brute force over the residues modulo lcm(old, new).
        lcm = math.lcm(old, new)
        moved = sum(1 for r in range(lcm) if r % old != r % new)
        assert moved_key_fraction(old, new) == Fraction(moved, lcm)
    # And as keys see it: about that share of real keys change partition.
    keys = [f"key-{i}".encode() for i in range(20_000)]
    share = sum(key_partition(k, 4) != key_partition(k, 6) for k in keys) / len(keys)
    assert abs(share - 2 / 3) < 0.02
    with pytest.raises(InvalidInputError):
        moved_key_fraction(0, 3)


def test_cache_never_goes_back_to_an_older_catalogue(cluster: FakeCluster) -> None:
    """Nodes that have not applied an add-partitions yet answer an older catalogue
    (a lower metadata offset); the cache keeps the newer topics, so the count never
    shrinks, and still takes the leaders those answers name."""
    cluster.add_topic("t", partitions=4)
    with make_client(cluster) as client:
        before = cluster.topic_proto("t")
        assert len(client.metadata(refresh=True).topic("t").partitions) == 4
        cluster.add_partitions("t", 6)
        newest = client.metadata(refresh=True)
        assert (newest.metadata_offset, len(newest.topic("t").partitions)) == (1, 6)
        # Every node now answers the old catalogue, with a new leader for t/0.
        lagging = pb.TopicInfo()
        lagging.CopyFrom(before)
        lagging.partitions[0].leader = "n2"
        with cluster.lock:
            for node in cluster.nodes:
                cluster.frozen_metadata[node] = (0, [lagging])
        for _ in range(3):
            again = client.cache.refresh(5.0)
            assert again.metadata_offset == 1
            assert again.topic("t").config.partitions == 6
            assert [p.partition for p in again.topic("t").partitions] == list(range(6))
            assert again.partition("t", 0).leader == "n2"


def _records_by_partition(cluster: FakeCluster, topic: str) -> dict[int, list[tuple[str, int]]]:
    """Per partition, the (key, sequence) of each ``key:sequence`` record in order."""
    found: dict[int, list[tuple[str, int]]] = {}
    with cluster.lock:
        for index, part in enumerate(cluster.topics[topic].partitions):
            for batch in part.batches:
                for record in decode_records(batch):
                    assert record.value is not None
                    key, sequence = record.value.decode().split(":")
                    assert record.key == key.encode()
                    found.setdefault(index, []).append((key, int(sequence)))
    return found


def test_keyed_producer_across_added_partitions(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Records taken before the producer sees the new count keep their partition;
    later ones map by the new modulo; per key the order holds within every
    partition; the move is logged once (naming the share) and counted."""
    cluster.add_topic("t", partitions=4)
    keys = [f"k{i}" for i in range(200)]
    caplog.set_level(logging.WARNING, logger="laminar_client.producer")
    with Producer(cluster.bootstrap, retry=FAST, linger_s=60.0) as producer:
        for sequence in range(3):
            for key in keys:
                producer.send("t", f"{key}:{sequence}".encode(), key=key.encode())
        cluster.add_partitions("t", 6)
        producer.client.metadata(refresh=True)
        for sequence in range(3, 6):
            for key in keys:
                producer.send("t", f"{key}:{sequence}".encode(), key=key.encode())
        producer.client.metadata(refresh=True)  # the same count again: no second warning
        producer.send("t", b"k0:6", key=b"k0")
        producer.flush()
        assert producer.metrics().partition_count_changes == 1
    warnings = [r.getMessage() for r in caplog.records if "grew" in r.getMessage()]
    assert warnings == [
        "topic t grew 4\u21926 partitions: keyed records now map by modulo 6; about 67% "
        "of keys move (records already sent keep their partition)"
    ]
    stored = _records_by_partition(cluster, "t")
    moved = 0
    for key in keys:
        where = {
            partition: [s for k, s in records if k == key]
            for partition, records in stored.items()
            if any(k == key for k, _ in records)
        }
        old, new = key_partition(key.encode(), 4), key_partition(key.encode(), 6)
        assert where[old][:3] == [0, 1, 2]  # taken before the change: the old partition
        assert where[new][-3:] == [3, 4, 5] or key == "k0"  # after: the new modulo
        for sequences in where.values():
            assert sequences == sorted(sequences)  # per-key order within a partition
        assert sorted(s for seqs in where.values() for s in seqs) == list(
            range(7 if key == "k0" else 6)
        )
        if old != new:
            moved += 1
            assert set(where) == {old, new}  # the move is visible
        else:
            assert set(where) == {old}
    assert 100 < moved < 160  # about two thirds of 200 keys


def test_producer_warns_only_when_a_count_grows(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.add_topic("t", partitions=3)
    caplog.set_level(logging.WARNING, logger="laminar_client.producer")
    with Producer(cluster.bootstrap, retry=FAST, linger_s=0.0) as producer:
        producer.send("t", b"a", key=b"x").result(5.0)
        producer.client.metadata(refresh=True)
        producer.send("t", b"b", key=b"x").result(5.0)
        # Deleted and created again with fewer partitions: not a growth.
        with cluster.lock:
            del cluster.topics["t"]
        cluster.add_topic("t", partitions=2)
        producer.client.metadata(refresh=True)
        producer.send("t", b"c", key=b"x").result(5.0)
        assert producer.metrics().partition_count_changes == 0
    assert not [r for r in caplog.records if "grew" in r.getMessage()]


def test_settings_and_sources_from_a_node_that_predates_them() -> None:
    """A node without keyed compaction sends neither the new settings nor sources:
    the settings read as their defaults (no compaction), sources from ``defaults``."""
    old = TopicMetadata.from_proto(
        pb.TopicInfo(
            name="t",
            config=pb.TopicConfig(partitions=2, replication_factor=3, retention_ms=-1),
            defaults=["replication_factor"],
        )
    )
    assert (old.config.cleanup_policy, old.config.max_compaction_lag_ms) == ("delete", -1)
    assert old.source("replication_factor") == CLUSTER_DEFAULT
    assert old.source("partitions") == SET_ON_TOPIC
    assert hash(old)  # still a hashable value
    new = TopicMetadata.from_proto(
        pb.TopicInfo(
            name="t",
            config=pb.TopicConfig(partitions=2, cleanup_policy="compact"),
            defaults=["replication_factor"],
            sources=[
                pb.SettingSource(name="replication_factor", source=pb.SettingSource.TOPIC),
                pb.SettingSource(name="partitions", source=pb.SettingSource.CLUSTER_DEFAULT),
            ],
        )
    )
    assert new.config.cleanup_policy == "compact"
    assert new.source("replication_factor") == SET_ON_TOPIC  # sources win over defaults
    assert new.source("partitions") == CLUSTER_DEFAULT


def test_a_partition_just_added_is_waited_for_not_refused(cluster: FakeCluster) -> None:
    """A producer whose metadata predates ``create_partitions`` (it asked a node that
    had not applied it yet) sends to a new partition by number: it looks again in
    fresh metadata, as Kafka's producer waits for a partition missing from its
    metadata, instead of refusing it at once; a partition that never comes is still
    refused within the wait."""
    cluster.add_topic("t", partitions=4)
    with Producer(cluster.bootstrap, retry=FAST, linger_s=0.0) as producer:
        producer.send("t", b"a", partition=3).result(5.0)  # the producer holds count 4
        grow = threading.Timer(0.3, cluster.add_partitions, ("t", 6))
        grow.start()
        try:
            assert producer.send("t", b"b", partition=5).result(5.0).partition == 5
        finally:
            grow.join()
        start_s = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="not 6"):
            producer.send("t", b"c", partition=6)
        assert time.monotonic() - start_s < 5.0
