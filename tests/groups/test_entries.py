"""Encoding, decoding and limits of the ``__groups`` log entries."""

from __future__ import annotations

import msgpack
import pytest

from laminar.errors import GroupEntryFormatError, InvalidInputError
from laminar.groups.entries import (
    METADATA_BYTES_MAX,
    Commit,
    Delete,
    GroupEntry,
    Join,
    Leave,
    LeaveReason,
    Own,
    Partitions,
    Release,
    Reset,
    Subscription,
    decode_entry,
    encode_entry,
)

EXAMPLES: list[GroupEntry] = [
    Join("g", "m1", Subscription(("a", "b")), instance_id="i1", weight=2.5),
    Join("g", "m2", Subscription(pattern=r"orders\..*"), session_timeout_ms=6000),
    Leave("g", "m1", LeaveReason.EXPIRED),
    Partitions("g", (("a", 3), ("b", 1))),
    Own("g", "a", 2, "m1", 7),
    Release("g", "a", 2, "m1", 7),
    Commit("g", "a", 2, 1234, "m1", 3, 7, metadata="é" * 10),
    Reset("g", (("a", 0, 0), ("a", 1, 99))),
    Delete("g"),
]


@pytest.mark.parametrize("entry", EXAMPLES, ids=lambda entry: type(entry).__name__)
def test_round_trip(entry: GroupEntry) -> None:
    assert decode_entry(encode_entry(entry)) == entry


def test_commit_is_small() -> None:
    assert len(encode_entry(Commit("group", "topic", 3, 10**9, "m" * 36, 5, 5))) < 200


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({"v": 2, "kind": "delete", "group": "g"}),
        msgpack.packb({"v": 1, "kind": "nope", "group": "g"}),
        msgpack.packb({"v": 1, "kind": "own", "group": "g"}),
        msgpack.packb(
            {
                "v": 1,
                "kind": "own",
                "group": "g",
                "topic": "a",
                "partition": True,
                "member_id": "m",
                "assignment_epoch": 1,
            }
        ),
        msgpack.packb(
            {
                "v": 1,
                "kind": "own",
                "group": "g",
                "topic": "a",
                "partition": 1,
                "member_id": "m",
                "assignment_epoch": 0,
            }
        ),
        msgpack.packb({"v": 1, "kind": "leave", "group": "g", "member_id": "m", "reason": "x"}),
        msgpack.packb({"v": 1, "kind": "partitions", "group": "g", "counts": [["a"]]}),
        msgpack.packb({"v": 1, "kind": "delete", "group": "g\x00"}),
        b"\x00" * (1 << 20 + 1),
    ],
)
def test_garbage_raises_a_typed_error(data: bytes) -> None:
    with pytest.raises(GroupEntryFormatError):
        decode_entry(data)


def test_limits_on_construction() -> None:
    with pytest.raises(InvalidInputError):
        Commit("g", "a", 0, 0, "m", 1, 1, metadata="x" * (METADATA_BYTES_MAX + 1))
    with pytest.raises(InvalidInputError):
        Commit("g", "a", 0, -1, "m", 1, 1)
    with pytest.raises(InvalidInputError):
        Own("g", "a", 10_000, "m", 1)
    with pytest.raises(InvalidInputError):
        Join("g", "m", Subscription(("a",)), session_timeout_ms=10)
    with pytest.raises(InvalidInputError):
        Subscription(("a",), pattern="a")
    with pytest.raises(InvalidInputError):
        Subscription(pattern="(")
    with pytest.raises(InvalidInputError):
        Subscription(("a", "a"))
    with pytest.raises(InvalidInputError):
        Partitions("g", (("a", 10_000), ("b", 1)))


def test_subscription_matching() -> None:
    assert Subscription(pattern=r"orders\..*").matches("orders.eu")
    assert not Subscription(pattern=r"orders\..*").matches("orders")
    assert not Subscription(pattern=".*").matches("__groups")
    assert Subscription(("a",)).matches("a") and not Subscription(("a",)).matches("b")
