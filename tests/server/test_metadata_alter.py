"""Unit tests of the catalogue's alter_topic and add_partitions commands (issue 34):
apply, races with a delete and re-create, idempotence, snapshots and restores."""

from __future__ import annotations

import dataclasses
import math

import msgpack
import pytest

from laminar.errors import InvalidTopicError
from laminar.records import decode_batch, encode_batch, with_leader_fields
from laminar.server.metadata import (
    Change,
    MetadataState,
    TopicSpec,
    TopicState,
    _restore_payload,
    add_partitions_command,
    alter_topic_command,
    create_topic_command,
    delete_topic_command,
    snapshot_commands,
)
from laminar.server.placement_keeper import retention_of, settings_of
from laminar.topic_settings import LATER_SETTINGS

FOUNDERS = [("a", "b"), ("b", "c")]


def _log_from(offset: int, *batches: bytes) -> bytes:
    return b"".join(with_leader_fields(batch, offset + n, 1) for n, batch in enumerate(batches))


def _apply(state: MetadataState, *batches: bytes) -> list[Change]:
    changes = state.apply(_log_from(state.applied_offset, *batches))
    assert all(isinstance(change, Change) for change in changes)
    return changes  # type: ignore[return-value]


def _created(state: MetadataState, name: str = "t", command_id: str = "c1") -> TopicState:
    _apply(state, create_topic_command(TopicSpec(name, 2, 2), FOUNDERS, command_id))
    return state.topics[name]


def _stamped(values: list[bytes], offset: int) -> bytes:
    return b"".join(
        with_leader_fields(encode_batch([value]), offset + n, 1) for n, value in enumerate(values)
    )


def test_an_alter_changes_the_settings_keeps_the_identity_and_reports_the_previous() -> None:
    state = MetadataState()
    topic = _created(state)
    changed = {"retention_ms": 60_000, "cleanup_policy": "compact,delete"}
    (change,) = _apply(state, alter_topic_command(topic, changed, [], "a1"))
    assert change.kind == "altered" and change.previous == topic and change.offset == 1
    spec = state.topics["t"].spec
    assert (spec.retention_ms, spec.cleanup_policy, spec.compact) == (
        60_000,
        "compact,delete",
        True,
    )
    assert state.topics["t"].command_id == "c1" and state.topics["t"].created_offset == 0
    assert state.topics["t"].founding_replicas == topic.founding_replicas


def test_reset_puts_the_field_back_in_defaults_and_set_takes_it_out() -> None:
    state = MetadataState()
    _apply(
        state,
        create_topic_command(TopicSpec("t", 2, 2, defaults=("retention_ms",)), FOUNDERS, "c1"),
    )
    topic = state.topics["t"]
    _apply(state, alter_topic_command(topic, {"retention_ms": 5000}, [], "a1"))
    assert state.topics["t"].spec.defaults == ()
    topic = state.topics["t"]
    _apply(state, alter_topic_command(topic, {"retention_bytes": -1}, ["retention_bytes"], "a2"))
    assert state.topics["t"].spec.defaults == ("retention_bytes",)


def test_an_alter_or_add_of_a_topic_deleted_and_created_again_changes_nothing() -> None:
    state = MetadataState()
    old = _created(state)
    _apply(state, delete_topic_command("t", "d1"))
    new = _created(state, command_id="c2")
    assert (
        _apply(
            state,
            alter_topic_command(old, {"retention_ms": 1000}, [], "a1"),
            add_partitions_command(old, [("a", "b")], "p1"),
        )
        == []
    )
    assert state.topics["t"] == new


def test_an_alter_applies_whole_or_not_at_all() -> None:
    state = MetadataState()
    topic = _created(state)
    bad = {"retention_ms": 1000, "min_cleanable_dirty_ratio": 1.5}
    assert _apply(state, alter_topic_command(topic, bad, [], "a1")) == []
    assert state.topics["t"] == topic
    unknown = {"retention_ms": 1000, "colour": 3}
    assert _apply(state, alter_topic_command(topic, unknown, [], "a2")) == []
    assert state.topics["t"] == topic


def test_a_command_id_applies_once() -> None:
    state = MetadataState()
    topic = _created(state)
    first = alter_topic_command(topic, {"retention_ms": 1000}, [], "a1")
    _apply(state, first, alter_topic_command(topic, {"retention_ms": 2000}, [], "a2"))
    assert _apply(state, first) == []  # the same command again (a retried proposal)
    assert state.topics["t"].spec.retention_ms == 2000
    grow = add_partitions_command(state.topics["t"], [("c", "a")], "p1")
    assert [c.kind for c in _apply(state, grow, grow)] == ["partitions_added"]


def test_added_partitions_extend_the_founders_and_a_stale_count_loses_the_race() -> None:
    state = MetadataState()
    topic = _created(state)
    to_four = add_partitions_command(topic, [("c", "a"), ("a", "c")], "p1")
    to_three = add_partitions_command(topic, [("c", "b")], "p2")  # proposed from 2 as well
    (change,) = _apply(state, to_four, to_three)
    grown = state.topics["t"]
    assert change.kind == "partitions_added" and change.previous == topic
    assert change.founded_partitions == range(2, 4)
    assert grown.spec.partitions == 4 and grown.additions == ((1, 2),)  # (offset, first)
    assert grown.founding_replicas == (*topic.founding_replicas, ("c", "a"), ("a", "c"))
    assert grown.created_partitions == 2


def test_a_snapshot_keeps_the_new_settings_and_additions_and_an_old_one_restores() -> None:
    state = MetadataState()
    topic = _created(state)
    changed = {
        "cleanup_policy": "compact",
        "delete_retention_ms": 1000,
        "min_compaction_lag_ms": 5,
        "max_compaction_lag_ms": 10,
        "min_cleanable_dirty_ratio": 0.25,
    }
    _apply(
        state,
        alter_topic_command(topic, changed, [], "a1"),
        add_partitions_command(topic, [("c", "a")], "p1"),
    )
    topics, _, _, _, _ = _restore_payload(state.snapshot_payload())
    assert topics == state.topics
    # A snapshot from a node that predates the settings: the defaults, no additions.
    old = msgpack.unpackb(state.snapshot_payload())
    del old["settings"]
    topics, _, _, _, _ = _restore_payload(msgpack.packb(old))
    restored = topics["t"]
    assert restored.spec.cleanup_policy == "delete" and restored.additions == ()
    assert restored.spec.partitions == 3  # the count itself is in the old fields


def test_a_create_command_carries_the_new_settings_and_an_old_one_takes_the_defaults() -> None:
    spec = TopicSpec("t", 1, 1, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    state = MetadataState()
    _apply(state, create_topic_command(spec, [("a",)], "c1"))
    assert state.topics["t"].spec == spec
    command = msgpack.unpackb(decode_batch(create_topic_command(spec, [("a",)], "x")).values[0])
    for name in LATER_SETTINGS:
        del command[name]
    old = MetadataState()
    old.apply(_log_from(0, encode_batch([msgpack.packb(command)])))
    assert old.topics["t"].spec == TopicSpec("t", 1, 1)


def _restore_over(held: MetadataState, writer: MetadataState) -> list[Change]:
    """Restore ``held`` from a snapshot of ``writer`` (its log start past ``held``)."""
    chunks = snapshot_commands(writer, "s")
    at = writer.applied_offset
    held.rebuild_from(at)
    changes = held.apply(_stamped(chunks, at))
    assert not held.seeking and held.topics == writer.topics
    return changes  # type: ignore[return-value]


def test_restoring_a_snapshot_over_an_altered_topic_deletes_nothing() -> None:
    writer, held = MetadataState(), MetadataState()
    for state in (writer, held):
        _created(state)
    topic = writer.topics["t"]
    _apply(
        writer,
        alter_topic_command(topic, {"replication_factor": 3, "retention_ms": 9000}, [], "a1"),
        add_partitions_command(topic, [("c", "a")], "p1"),
        add_partitions_command(topic.as_of_partitions(3), [("a", "b")], "p2"),
    )
    held_topic = held.topics["t"]
    changes = _restore_over(held, writer)
    assert [(c.kind, c.offset) for c in changes] == [
        ("altered", 1),  # when is not in the snapshot: at the held state's offset
        ("partitions_added", 2),
        ("partitions_added", 3),
    ]
    assert [list(c.founded_partitions) for c in changes] == [[], [2], [3]]
    assert changes[1].previous == held_topic
    assert changes[0].previous is not None and changes[0].previous.spec.partitions == 4


def test_restoring_from_scratch_founds_the_added_partitions_at_their_own_offsets() -> None:
    writer = MetadataState()
    topic = _created(writer)
    _apply(writer, add_partitions_command(topic, [("c", "a"), ("a", "c")], "p1"))
    changes = _restore_over(MetadataState(), writer)
    assert [(c.kind, c.offset, list(c.founded_partitions)) for c in changes] == [
        ("created", 0, [0, 1]),
        ("partitions_added", 1, [2, 3]),
    ]


def test_restoring_over_a_topic_deleted_and_created_again_still_deletes_the_old_one() -> None:
    writer, held = MetadataState(), MetadataState()
    _created(writer)
    _created(held)
    _apply(writer, delete_topic_command("t", "d1"))
    _created(writer, command_id="c2")
    changes = _restore_over(held, writer)
    assert [(c.kind, c.topic.command_id) for c in changes] == [("deleted", "c1"), ("created", "c2")]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cleanup_policy": "shred"}, "cleanup_policy"),
        ({"delete_retention_ms": -1}, "delete_retention_ms"),
        ({"min_compaction_lag_ms": -5}, "min_compaction_lag_ms"),
        ({"max_compaction_lag_ms": 0}, "max_compaction_lag_ms"),
        ({"min_compaction_lag_ms": 100, "max_compaction_lag_ms": 50}, "max_compaction_lag_ms"),
        ({"min_cleanable_dirty_ratio": 0.0}, "min_cleanable_dirty_ratio"),
        ({"min_cleanable_dirty_ratio": math.nan}, "min_cleanable_dirty_ratio"),
        ({"replication_factor": 8}, "replication_factor"),
        ({"retention_ms": 0}, "retention_ms"),
    ],
)
def test_each_bad_setting_is_refused_naming_its_field(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidTopicError, match=f"^{field} "):
        dataclasses.replace(TopicSpec("t", 1, 1), **changes).validate()  # type: ignore[arg-type]


def test_settings_of_reads_the_catalogue_live_and_compact_alone_keeps_no_retention() -> None:
    state = MetadataState()
    topic = _created(state)
    assert settings_of(state, ("nope", 0)) is None
    assert retention_of(state, ("t", 0)) == (None, None)
    _apply(
        state, alter_topic_command(topic, {"retention_ms": 5000, "retention_bytes": 99}, [], "a")
    )
    settings = settings_of(state, ("t", 1))
    assert settings is not None and not settings.compact
    assert (settings.retention_bytes, settings.retention_ms) == (99, 5000)
    assert retention_of(state, ("t", 1)) == (99, 5000)
    for policy, retention in (("compact,delete", (99, 5000)), ("compact", (None, None))):
        _apply(
            state, alter_topic_command(state.topics["t"], {"cleanup_policy": policy}, [], policy)
        )
        settings = settings_of(state, ("t", 0))
        assert settings is not None and settings.compact and settings.cleanup_policy == policy
        assert (settings.retention_bytes, settings.retention_ms) == retention
        assert retention_of(state, ("t", 0)) == retention
        assert settings.delete_retention_ms == 86_400_000 and settings.max_compaction_lag_ms == -1


def test_an_alter_that_a_concurrent_one_made_invalid_is_refused_and_remembered() -> None:
    state = MetadataState()
    topic = _created(state)
    # Both valid against the topic their proposers saw; the second no longer is.
    first = alter_topic_command(topic, {"min_compaction_lag_ms": 100}, [], "a1")
    second = alter_topic_command(topic, {"max_compaction_lag_ms": 50}, [], "a2")
    assert [c.kind for c in _apply(state, first, second)] == ["altered"]
    assert state.topics["t"].spec.max_compaction_lag_ms == -1
    assert "max_compaction_lag_ms" in state.refused_ids["a2"] and "a1" not in state.refused_ids
