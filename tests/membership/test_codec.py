"""Property tests of the wire codec: round trips, and garbage never raises."""

from __future__ import annotations

import random

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.membership import config as presets
from laminar.membership.codec import Codec, DropReason
from laminar.membership.core import MembershipCore
from laminar.membership.member import MemberState, NodeId
from laminar.membership.messages import (
    Ack,
    Alive,
    Dead,
    MemberRecord,
    Message,
    Nack,
    Ping,
    PingRequest,
    PushPull,
    Suspect,
)

from .helpers import KEY, as_member, local_member

CODEC = Codec(KEY, metadata_bytes_max=512)

node_ids = st.text(min_size=1, max_size=16).map(NodeId)
addresses = st.text(min_size=1, max_size=40)
sequences = st.integers(0, 2**32 - 1)
incarnations = st.integers(0, 2**63 - 1)
metadata = st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=5).map(
    lambda d: tuple(sorted(d.items()))
)
alives = st.builds(
    Alive,
    node_ids,
    incarnations,
    addresses,
    st.text(max_size=40),
    st.floats(0, 1e9, allow_nan=False),
    st.text(max_size=20),
    metadata,
)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Ping, sequences, node_ids, node_ids, addresses),
    st.builds(Ack, sequences, node_ids),
    st.builds(Nack, sequences, node_ids),
    st.builds(PingRequest, sequences, node_ids, addresses, node_ids, addresses, st.booleans()),
    alives,
    st.builds(Suspect, node_ids, incarnations, node_ids),
    st.builds(Dead, node_ids, incarnations, node_ids),
    st.builds(
        PushPull,
        node_ids,
        addresses,
        st.booleans(),
        st.booleans(),
        st.lists(st.builds(MemberRecord, alives, st.sampled_from(MemberState)), max_size=4).map(
            tuple
        ),
    ),
)


@given(st.lists(messages, min_size=1, max_size=5))
def test_messages_round_trip(batch: list[Message]) -> None:
    frame = CODEC.seal([CODEC.encode(message) for message in batch])
    assert CODEC.open(frame, size_bytes_max=1 << 20) == tuple(batch)


def _core() -> MembershipCore:
    others = [as_member(local_member(name)) for name in ("b", "c")]
    return MembershipCore(
        presets.lan(), local_member("a"), KEY, random.Random(0), 0, known_members=others
    )


@settings(max_examples=300)
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise(data: bytes) -> None:
    core = _core()
    output = core.receive_packet(data, 0)
    assert output.events == ()
    core.receive_stream(data, 0)
    assert CODEC.open(data, size_bytes_max=1400) in set(DropReason)


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(st.integers(0, 9), st.lists(json_like, max_size=8))
def test_authentic_garbage_never_raises(kind: int, fields: list[object]) -> None:
    """Well-authenticated, well-formed msgpack with nonsense fields."""
    frame = CODEC.seal([msgpack.packb([kind, *fields])])
    core = _core()
    core.receive_packet(frame, 0)
    core.receive_stream(frame, 0)
    core.tick(10_000)


@settings(max_examples=300)
@given(messages, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
def test_authentic_mutations_never_raise(message: Message, edits: list[tuple[int, int]]) -> None:
    """Valid encodings with corrupted bytes, re-tagged as if from a buggy peer."""
    encoded = bytearray(CODEC.encode(message))
    for position, value in edits:
        encoded[position % len(encoded)] = value
    frame = CODEC.seal([bytes(encoded)])
    core = _core()
    core.receive_packet(frame, 0)
    core.receive_stream(frame, 0)
    opened = CODEC.open(frame, size_bytes_max=1 << 20)
    assert isinstance(opened, tuple | DropReason)


def test_deep_nesting_is_malformed_not_a_crash() -> None:
    body = b"\x91" * 5000 + b"\x01"
    assert CODEC.open(CODEC.seal([body]), size_bytes_max=1 << 20) is DropReason.MALFORMED


push_pulls = st.builds(
    PushPull,
    node_ids,
    addresses,
    st.booleans(),
    st.booleans(),
    st.lists(st.builds(MemberRecord, alives, st.sampled_from(MemberState)), max_size=6).map(tuple),
)


@given(push_pulls)
@settings(max_examples=100)
def test_push_pull_from_cached_records_is_byte_identical(message: PushPull) -> None:
    assembled = CODEC.encode_push_pull(
        message.source_id,
        message.source_address,
        is_join=message.is_join,
        is_reply=message.is_reply,
        encoded_records=[CODEC.encode_record(record) for record in message.members],
    )
    assert assembled == CODEC.encode(message)
