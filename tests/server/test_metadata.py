"""Unit tests of the cluster metadata state machine and topic validation."""

from __future__ import annotations

import pytest

from laminar.errors import InvalidTopicError
from laminar.records import encode_batch, with_leader_fields
from laminar.server.metadata import (
    MetadataState,
    TopicSpec,
    create_topic_command,
    delete_topic_command,
    validate_topic_name,
)


def _log(*batches: bytes) -> bytes:
    """Stamp batches at consecutive offsets, as the metadata partition stores them."""
    return b"".join(with_leader_fields(batch, offset, 1) for offset, batch in enumerate(batches))


def test_create_and_delete_apply_in_order_and_idempotently() -> None:
    spec = TopicSpec("orders", 2, 3)
    founders = [("a", "b", "c"), ("b", "c", "a")]
    log = _log(
        create_topic_command(spec, founders, "id1"),
        create_topic_command(TopicSpec("orders", 9, 1), [("a",)] * 9, "id2"),  # loses the race
        delete_topic_command("missing", "id3"),
        delete_topic_command("orders", "id4"),
        create_topic_command(TopicSpec("orders", 1, 1), [("z",)], "id5"),
    )
    state = MetadataState()
    changes = state.apply(log)
    assert [(c.kind, c.offset) for c in changes] == [("created", 0), ("deleted", 3), ("created", 4)]
    assert state.applied_offset == 5
    topic = state.topics["orders"]
    assert topic.spec.partitions == 1 and topic.command_id == "id5"
    assert state.applied_ids["id2"] == 1
    # Re-applying the same read changes nothing.
    assert state.apply(log) == []


def test_a_gap_in_the_metadata_log_is_a_bug() -> None:
    state = MetadataState()
    state.apply(_log(delete_topic_command("x", "1")))
    later = with_leader_fields(delete_topic_command("y", "2"), 5, 1)
    with pytest.raises(AssertionError):
        state.apply(later)


def test_unknown_records_are_skipped() -> None:
    state = MetadataState()
    assert state.apply(_log(encode_batch([b"\xc1 not msgpack"]), encode_batch([b"\x80"]))) == []
    assert state.applied_offset == 2


@pytest.mark.parametrize(
    "name", ["", "__cluster", "a b", "x" * 201, "-lead", "tab\t", "sla/sh", "ünï"]
)
def test_bad_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


@pytest.mark.parametrize(
    "spec",
    [
        TopicSpec("t", 0, 1),
        TopicSpec("t", 10_001, 1),
        TopicSpec("t", 1, 0),
        TopicSpec("t", 1, 8),
        TopicSpec("t", 1, 1, retention_bytes=0),
        TopicSpec("t", 1, 1, retention_ms=-5),
    ],
)
def test_bad_topic_specs(spec: TopicSpec) -> None:
    with pytest.raises(InvalidTopicError):
        spec.validate()


def test_good_topic_spec() -> None:
    TopicSpec("orders.v1_eu-west", 12, 3, retention_bytes=1 << 30, retention_ms=-1).validate()
