"""Unit tests for the pure pieces of the node's consumer-group shell and its errors."""

from __future__ import annotations

import grpc
from laminar_client.partitioner import key_partition as client_key_partition

from laminar.errors import FencedMemberError, GroupNotEmptyError
from laminar.groups.entries import Join, Own, Partitions, Subscription
from laminar.groups.state import GroupState
from laminar.grpc_errors import error_from_detail, error_to_status
from laminar.partitioning import key_partition
from laminar.server.groups import (
    APPEND_BATCH_BYTES_MAX,
    GROUPS_PARTITIONS,
    GROUPS_TOPIC,
    _chunks,
    group_partition,
    group_status,
)
from laminar.v1.laminar_pb2 import ErrorCode


def test_a_group_lives_in_the_partition_its_name_hashes_to() -> None:
    assert client_key_partition is key_partition  # one function, shared
    for group_id in ("billing", "g", "ünïcode", "x" * 255):
        topic, index = group_partition(group_id)
        assert topic == GROUPS_TOPIC
        assert index == key_partition(group_id.encode(), GROUPS_PARTITIONS)
    indexes = {group_partition(f"group-{n}")[1] for n in range(200)}
    assert indexes == set(range(GROUPS_PARTITIONS))


def test_group_status_follows_members_and_owners() -> None:
    state = GroupState()
    assert group_status(state.group("g")) == "dead"
    subscription = Subscription(("t",))
    state.apply(Join("g", "m1", subscription))
    state.apply(Partitions("g", (("t", 1),)))
    group = state.group("g")
    assert group is not None
    assert group_status(group) == "reconciling"  # partition 0 has no owner yet
    state.apply(Own("g", "t", 0, "m1", 1))
    assert group_status(group) == "stable"
    group.members.clear()
    group.owners.clear()
    assert group_status(group) == "empty"


def test_entries_are_appended_in_batches_of_bounded_size() -> None:
    half = b"x" * (APPEND_BATCH_BYTES_MAX // 2)
    assert list(_chunks([])) == []
    assert list(_chunks([b"a", b"b"])) == [[b"a", b"b"]]
    runs = list(_chunks([half, half, b"y", half]))
    assert runs == [[half, half], [b"y", half]]
    big = b"z" * (APPEND_BATCH_BYTES_MAX + 1)
    assert list(_chunks([big, b"a"])) == [[big], [b"a"]]  # one entry per run at least


def test_fenced_and_group_not_empty_round_trip_with_their_fields() -> None:
    status, detail = error_to_status(FencedMemberError("g", "m1", "stale epoch"))
    assert status == grpc.StatusCode.FAILED_PRECONDITION
    assert detail.code == ErrorCode.FENCED
    back = error_from_detail(detail)
    assert isinstance(back, FencedMemberError)
    assert (back.group_id, back.member_id, back.reason) == ("g", "m1", "stale epoch")

    status, detail = error_to_status(GroupNotEmptyError("g", 3))
    assert status == grpc.StatusCode.FAILED_PRECONDITION
    assert detail.code == ErrorCode.GROUP_NOT_EMPTY
    back = error_from_detail(detail)
    assert isinstance(back, GroupNotEmptyError)
    assert (back.group_id, back.member_count) == ("g", 3)
