"""Unit tests of the cluster metadata state machine and topic validation."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from laminar.errors import InvalidInputError, InvalidTopicError, OffsetOutOfRangeError
from laminar.records import decode_batch, encode_batch, iter_batches, with_leader_fields
from laminar.security.acl import Acl
from laminar.server.follower import MetadataFollower
from laminar.server.metadata import (
    Change,
    MaintenanceChange,
    MetadataState,
    TopicSpec,
    _restore_payload,
    acls_command,
    create_topic_command,
    delete_topic_command,
    maintenance_command,
    snapshot_commands,
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


# ---------------------------------------------------------------- snapshots


def _stamped(values: list[bytes], offset: int) -> bytes:
    """Each value a batch of its own, stamped from ``offset`` on."""
    return b"".join(
        with_leader_fields(encode_batch([value]), offset + n, 1) for n, value in enumerate(values)
    )


def _churn(first: int, count: int) -> list[bytes]:
    """Create ``count`` topics and delete every other one, as command batches."""
    batches = []
    for n in range(first, first + count):
        batches.append(create_topic_command(TopicSpec(f"t{n}", 2, 1), [("a",), ("b",)], f"c{n}"))
        if n % 2:
            batches.append(delete_topic_command(f"t{n}", f"d{n}"))
    return batches


def test_a_node_whose_log_starts_past_zero_rebuilds_from_the_snapshot() -> None:
    writer = MetadataState()
    log = _log(*_churn(0, 10))
    writer.apply(log)
    as_of = writer.applied_offset
    # Entries appended while the snapshot is written land before its chunks (X > A).
    between = _churn(10, 2)
    tail_batches = b"".join(
        with_leader_fields(batch, as_of + n, 1) for n, batch in enumerate(between)
    )
    chunks = snapshot_commands(writer, "snap-1")
    writer.apply(tail_batches)
    chunk_offset = writer.applied_offset
    writer.apply(_stamped(chunks, chunk_offset))
    assert [s.as_of_offset for s in writer.take_snapshots()] == [as_of]  # paired check passed
    after = writer.applied_offset
    writer.apply(_log_from(after, create_topic_command(TopicSpec("late", 1, 1), [("a",)], "L")))
    full = log + tail_batches + _stamped(chunks, chunk_offset)
    full += _log_from(after, create_topic_command(TopicSpec("late", 1, 1), [("a",)], "L"))

    # A restart whose log was cut below the snapshot's A: restore, then the tail.
    reader = MetadataState()
    reader.rebuild_from(as_of - 1)
    changes = []
    while reader.read_offset < writer.applied_offset:  # reads from where it stands
        changes += reader.apply(_from_offset(full, reader.read_offset))
    assert reader.topics == writer.topics and reader.applied_offset == writer.applied_offset
    # It reports what a replay from 0 would have, but for the creation of topics
    # deleted before the snapshot: every deletion, the creation of every topic that
    # is left, and those of the tail (replayed as they are).
    replayed = MetadataState().apply(full)

    def names(kind: str, changes: list[Change]) -> list[str]:
        return sorted(c.topic.spec.name for c in changes if c.kind == kind)

    assert names("deleted", changes) == names("deleted", replayed)
    assert set(writer.topics) <= set(names("created", changes)) < set(names("created", replayed))
    assert all(c.offset == c.topic.created_offset for c in changes if c.kind == "created")
    # Snapshot records change nothing when applied in order.
    assert MetadataState().apply(full) == replayed


def test_a_follower_behind_a_snapshot_learns_what_it_missed() -> None:
    writer = MetadataState()
    writer.apply(_log(*_churn(0, 4)))  # t0, t2 live; t1, t3 deleted
    behind = MetadataState()
    behind.apply(_log(*_churn(0, 4)))
    more = [*_churn(4, 4), delete_topic_command("t0", "x")]
    writer.apply(_log_from(writer.applied_offset, *more))
    chunks = snapshot_commands(writer, "s")
    at = writer.applied_offset
    writer.apply(_stamped(chunks, at))
    behind.rebuild_from(at)
    changes = behind.apply(_stamped(chunks, at))
    assert behind.topics == writer.topics
    # What it missed, in log order: the deletions (t5, t7 and its own t0) and the
    # topics still there that it lacked; nothing about t2, which it has.
    assert [(c.kind, c.topic.spec.name) for c in changes] == [
        ("created", "t4"),
        ("deleted", "t5"),
        ("created", "t6"),
        ("deleted", "t7"),
        ("deleted", "t0"),
    ]
    assert [c.offset for c in changes] == sorted(c.offset for c in changes)


def test_a_torn_metadata_snapshot_is_not_restored() -> None:
    writer = MetadataState()
    writer.apply(_log(*_churn(0, 300)))  # a catalogue over one chunk
    chunks = snapshot_commands(writer, "torn")
    assert len(chunks) >= 1
    at = writer.applied_offset
    reader = MetadataState()
    reader.rebuild_from(at)
    reader.apply(_stamped(chunks[:-1] if len(chunks) > 1 else [], at))
    assert reader.seeking and reader.topics == {}


def _log_from(offset: int, *batches: bytes) -> bytes:
    return b"".join(with_leader_fields(batch, offset + n, 1) for n, batch in enumerate(batches))


def _from_offset(data: bytes, offset: int) -> bytes:
    """The batches of ``data`` from the one at ``offset`` on (a log read)."""
    for position, header in iter_batches(data, verify=False):
        if header.base_offset >= offset:
            return data[position:]
    return b""


def test_a_long_polling_node_behind_the_peers_log_start_rebuilds_from_its_snapshot() -> None:
    """The follower of a node without a replica: the peer answers OFFSET_OUT_OF_RANGE
    (its log starts past the node's applied offset), the node reads the snapshot
    after the start and follows on; the changes reach the node."""
    writer = MetadataState()
    batches = _churn(0, 6)
    writer.apply(_log(*batches))
    at = writer.applied_offset
    chunks = snapshot_commands(writer, "s")
    writer.apply(_stamped(chunks, at))
    after = writer.applied_offset
    late = create_topic_command(TopicSpec("late", 1, 1), [("a",)], "L")
    writer.apply(_log_from(after, late))
    # The peer deleted its log below the snapshot's A.
    log = _stamped(chunks, at) + _log_from(after, late)
    asked: list[int] = []

    async def fetch_remote(offset: int) -> bytes:
        asked.append(offset)
        await asyncio.sleep(0.01)  # a long-poll: nothing new for a while
        if offset < at:
            raise OffsetOutOfRangeError(offset, at, writer.applied_offset)
        return _from_offset(log, offset)

    async def scenario() -> list[Change]:
        seen: list[Change] = []
        state = MetadataState()
        follower = MetadataFollower(state, lambda: None, fetch_remote, seen.extend)
        follower.start()
        try:
            await follower.wait_applied(writer.applied_offset, timeout_s=10)
        finally:
            await follower.stop()
        assert state.topics == writer.topics
        return seen

    seen = asyncio.run(scenario())
    assert asked[:2] == [0, at]  # refused from 0, then read from the start
    assert {c.topic.spec.name for c in seen if c.kind == "created"} == set(writer.topics)


def test_a_metadata_snapshot_that_disagrees_with_the_replay_keeps_the_log() -> None:
    """The paired check: a snapshot whose record count differs from what this node
    applied up to its offset is not reported, so the log below it is not deleted."""
    log = _log(*_churn(0, 4))
    writer = MetadataState()
    writer.apply(log)
    writer.applied_count += 1  # a writer whose state is not what the log says
    chunks = snapshot_commands(writer, "snap-bad")
    follower = MetadataState()
    follower.apply(log)
    follower.apply(_stamped(chunks, follower.applied_offset))
    assert follower.take_snapshots() == []
    good = MetadataState()
    good.apply(log)
    follower.apply(_stamped(snapshot_commands(good, "snap-good"), follower.applied_offset))
    assert [s.snapshot_id for s in follower.take_snapshots()] == ["snap-good"]


def test_the_fields_the_cluster_defaulted_survive_the_log_and_a_snapshot() -> None:
    spec = TopicSpec("orders", 1, 3, defaults=("partitions", "replication_factor"))
    state = MetadataState()
    state.apply(_log(create_topic_command(spec, [("a", "b", "c")], "id1")))
    assert state.topics["orders"].spec.defaults == ("partitions", "replication_factor")
    topics, _, _, _, _ = _restore_payload(state.snapshot_payload())
    assert topics == state.topics
    # A command and a snapshot from before the field: nothing was defaulted.
    old = msgpack.unpackb(state.snapshot_payload())
    del old["defaults"]
    topics, _, _, _, _ = _restore_payload(msgpack.packb(old))
    assert topics["orders"].spec.defaults == ()
    command = msgpack.unpackb(decode_batch(create_topic_command(spec, [("a",)], "x")).values[0])
    del command["defaults"]
    fresh = MetadataState()
    fresh.apply(_log(encode_batch([msgpack.packb({**command, "replication_factor": 1})])))
    assert fresh.topics["orders"].spec.defaults == ()


def test_maintenance_is_entered_and_left_idempotently_through_the_log() -> None:
    state = MetadataState()
    changes = state.apply(
        _log(
            maintenance_command("b", True, "m1"),
            maintenance_command("b", True, "m2"),  # already in: nothing changes
            maintenance_command("c", False, "m3"),  # not in: nothing changes
            maintenance_command("c", True, "m4"),
            maintenance_command("b", False, "m5"),
        )
    )
    assert changes == [
        MaintenanceChange("b", True, 0),
        MaintenanceChange("c", True, 3),
        MaintenanceChange("b", False, 4),
    ]
    assert state.maintenance == {"c": 3}
    assert state.applied_ids["m2"] == 1  # the proposer learns its command applied


@pytest.mark.parametrize("node_id", ["", "x" * 65, "a\x00b"])
def test_a_maintenance_command_refuses_a_bad_node_id(node_id: str) -> None:
    with pytest.raises(InvalidInputError, match="node id"):
        maintenance_command(node_id, True, "m")


def test_maintenance_survives_a_snapshot_and_old_snapshots_read_as_none() -> None:
    writer = MetadataState()
    writer.apply(
        _log(
            create_topic_command(TopicSpec("orders", 1, 1), [("a",)], "c1"),
            maintenance_command("b", True, "m1"),
            maintenance_command("a", True, "m2"),
        )
    )
    chunks = snapshot_commands(writer, "s")
    at = writer.applied_offset
    writer.apply(_stamped(chunks, at))
    # A node that was away while "a" entered, and "z" was (wrongly) in: it learns
    # both differences from the snapshot, as a replay would have shown them.
    behind = MetadataState()
    behind.apply(_log(maintenance_command("z", True, "old")))
    behind.rebuild_from(at)
    changes = behind.apply(_stamped(chunks, at))
    assert behind.maintenance == writer.maintenance == {"b": 1, "a": 2}
    maintenance = [c for c in changes if isinstance(c, MaintenanceChange)]
    assert maintenance == [
        MaintenanceChange("a", True, at),
        MaintenanceChange("b", True, at),
        MaintenanceChange("z", False, at),
    ]
    # The payload keeps every key an older node reads, and a snapshot from before
    # maintenance existed restores with no node in maintenance.
    body = msgpack.unpackb(writer.snapshot_payload())
    assert {"v", "applied_count", "topics", "tombstones", "defaults"} <= set(body)
    del body["maintenance"]
    topics, _, _, maintenance_restored, _ = _restore_payload(msgpack.packb(body))
    assert topics == writer.topics and maintenance_restored == {}


def test_a_node_that_predates_maintenance_skips_the_command() -> None:
    """What an older node does with the command (an unknown op): skips it with an
    error log and goes on applying the log, its applied count in step."""
    state = MetadataState()
    state.apply(
        _log(
            maintenance_command("b", True, "m1"),
            create_topic_command(TopicSpec("orders", 1, 1), [("a",)], "c1"),
        )
    )
    command = msgpack.unpackb(decode_batch(maintenance_command("b", True, "m1")).values[0])
    old = MetadataState()
    old.apply(
        _log(
            encode_batch([msgpack.packb({**command, "op": "from_the_future"})]),
            create_topic_command(TopicSpec("orders", 1, 1), [("a",)], "c1"),
        )
    )
    assert old.topics == state.topics and old.applied_count == state.applied_count


def test_acls_are_created_and_deleted_through_the_log_and_kept_by_a_snapshot() -> None:
    bob_write = Acl("User:bob", "write", "topic", "orders")
    bob_read = Acl("User:bob", "read", "topic", "ord", "prefixed")
    writer = MetadataState()
    writer.apply(
        _log(
            acls_command([bob_write, bob_read], create=True, command_id="a1"),
            acls_command([bob_write], create=True, command_id="a2"),  # exists: no change
            acls_command([bob_write], create=False, command_id="a3"),
            acls_command([bob_write], create=False, command_id="a4"),  # gone: no change
        )
    )
    assert list(writer.acls) == [bob_read]
    assert writer.acls_version == 2  # one per change, none for the idempotent ones
    # A node rebuilding from a snapshot gets the same ACLs, and a new version.
    chunks = snapshot_commands(writer, "s")
    at = writer.applied_offset
    writer.apply(_stamped(chunks, at))
    behind = MetadataState()
    behind.apply(_log(acls_command([bob_write], create=True, command_id="old")))
    version = behind.acls_version
    behind.rebuild_from(at)
    behind.apply(_stamped(chunks, at))
    assert behind.acls == writer.acls and behind.acls_version > version
    # A snapshot from before ACLs existed restores with none.
    body = msgpack.unpackb(writer.snapshot_payload())
    del body["acls"]
    assert _restore_payload(msgpack.packb(body))[4] == {}


def test_a_bad_acl_record_is_skipped_whole() -> None:
    state = MetadataState()
    good = Acl("User:bob", "write", "topic", "orders").fields()
    bad = ["User:bob", "fly", "topic", "orders", "literal", "allow"]
    record = msgpack.packb({"v": 1, "op": "create_acls", "id": "x", "acls": [good, bad]})
    state.apply(_log(encode_batch([record])))
    assert state.acls == {} and state.applied_offset == 1
