"""The peer wire encoding: exact round trips, and nothing malformed gets through."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Hashable

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laminar.errors import ConfigError, InvalidInputError
from laminar.replica.coalesce import Coalescer, PeerBundle
from laminar.replica.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallStart,
    Message,
    Outbound,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from laminar.replica.types import NodeId
from laminar.server import wire
from laminar.server.wire import (
    OFFSET_MAX,
    PARTITION_MAX,
    PREFIX_BYTES,
    WIRE_VERSION,
    WireLimits,
    decode_bundle,
    encode_bundle,
)

# ---------------------------------------------------------------- strategies

offsets = st.integers(min_value=-1, max_value=OFFSET_MAX)
small_offsets = st.integers(min_value=-1, max_value=10_000)
node_ids = st.text(min_size=1, max_size=20).filter(lambda text: len(text.encode()) <= 255)
node_ids = node_ids.map(NodeId)
topics = st.text(min_size=1, max_size=30)
partitions = st.integers(min_value=0, max_value=PARTITION_MAX)
keys = st.tuples(topics, partitions)

heartbeat_messages: st.SearchStrategy[Heartbeat | HeartbeatResponse] = st.one_of(
    st.builds(Heartbeat, offsets, node_ids, offsets, st.booleans()),
    st.builds(HeartbeatResponse, offsets, node_ids, offsets),
)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(VoteRequest, offsets, node_ids, offsets, offsets, st.booleans(), st.booleans()),
    st.builds(VoteResponse, offsets, node_ids, st.booleans(), st.booleans()),
    st.builds(
        AppendRequest,
        offsets,
        node_ids,
        offsets,
        offsets,
        st.binary(max_size=300),
        offsets,
        offsets,
    ),
    st.builds(
        AppendResponse,
        offsets,
        node_ids,
        st.booleans(),
        offsets,
        offsets,
        offsets,
        offsets,
        offsets,
    ),
    st.builds(TimeoutNow, offsets, node_ids),
    st.builds(InstallStart, offsets, node_ids, offsets, offsets, st.binary(max_size=100), offsets),
    heartbeat_messages,
)
bundles = st.builds(
    PeerBundle,
    st.lists(st.tuples(keys, heartbeat_messages), max_size=8).map(tuple),
    st.lists(st.tuples(keys, messages), max_size=8).map(tuple),
)


def sample_bundle() -> PeerBundle:
    """One of every message type, with a batch, in the coalescer's shape."""
    node = NodeId("node-a")
    coalescer = Coalescer()
    for outbound_message in (
        VoteRequest(3, node, 100, 2, pre_vote=True, transfer=True),
        VoteResponse(3, node, granted=False, pre_vote=True),
        AppendRequest(3, node, 90, 2, b"\x00batch-bytes\xff" * 10, 100, 80),
        AppendResponse(3, node, False, -1, 50, 90, 2, 40),
        AppendResponse(3, node, True, 60, 60, 50, healing_since=40, log_start=12),
        Heartbeat(3, node, 80, member=False),
        HeartbeatResponse(3, node, 100),
        TimeoutNow(4, node),
        InstallStart(4, node, 500, 3, b"\x93\x00\x91\xa1a\x90", 480),
        InstallStart(4, node, 500, 3, b"\x93\x00\x91\xa1a\x90", 480, discard=True),
        AppendRequest(3, node, 100, 3, b"second", 101, 80),
    ):
        coalescer.add(("orders", 7), Outbound(NodeId("node-b"), outbound_message))
    coalescer.add(("payments", 0), Outbound(NodeId("node-b"), Heartbeat(9, NodeId("x"), -1)))
    return coalescer.drain()[NodeId("node-b")]


def assert_rejected(data: bytes, limits: WireLimits | None = None) -> str:
    with pytest.raises(InvalidInputError) as caught:
        if limits is None:
            decode_bundle(data)
        else:
            decode_bundle(data, limits=limits)
    assert str(caught.value)
    return str(caught.value)


def build(header: object, blobs: bytes = b"", version: int = WIRE_VERSION) -> bytes:
    """Hand-made encodings, for fields the encoder would never produce."""
    packed = msgpack.packb(header)
    return struct.pack(">BI", version, len(packed)) + packed + blobs


GOOD_HEARTBEAT = (5, 0, 1, 3, 0, 10, True, False)


# ---------------------------------------------------------------- round trips


def test_every_message_type_round_trips() -> None:
    bundle = sample_bundle()
    assert {type(message) for _, message in bundle.items()} == {
        VoteRequest,
        VoteResponse,
        AppendRequest,
        AppendResponse,
        Heartbeat,
        HeartbeatResponse,
        TimeoutNow,
        InstallStart,
    }
    decoded = decode_bundle(encode_bundle(bundle))
    assert decoded == bundle
    assert decoded.items() == bundle.items()
    assert all(isinstance(message.term, int) for _, message in decoded.items())


def test_empty_bundle_round_trips() -> None:
    assert decode_bundle(encode_bundle(PeerBundle((), ()))) == PeerBundle((), ())


@given(bundles)
@settings(max_examples=200, deadline=None)
def test_any_bundle_round_trips(bundle: PeerBundle) -> None:
    data = encode_bundle(bundle)
    assert data[0] == WIRE_VERSION
    assert decode_bundle(data) == bundle


def test_decode_accepts_bytearray_and_memoryview() -> None:
    bundle = sample_bundle()
    data = encode_bundle(bundle)
    assert decode_bundle(bytearray(data)) == bundle
    assert decode_bundle(memoryview(data)) == bundle


def test_strings_are_sent_once() -> None:
    beats: list[tuple[Hashable, Heartbeat | HeartbeatResponse]] = [
        (("a-rather-long-topic-name", index), Heartbeat(1, NodeId("a-long-node-name"), index))
        for index in range(100)
    ]
    data = encode_bundle(PeerBundle(tuple(beats), ()))
    assert data.count(b"a-rather-long-topic-name") == 1
    assert data.count(b"a-long-node-name") == 1


def test_batches_follow_the_header_verbatim() -> None:
    batch = bytes(range(256)) * 400
    bundle = PeerBundle((), ((("t", 0), AppendRequest(1, NodeId("n"), 0, -1, batch, 10, 0)),))
    data = encode_bundle(bundle)
    assert data.endswith(batch)
    (decoded,) = decode_bundle(data).messages
    assert isinstance(decoded[1], AppendRequest)
    assert decoded[1].batches == batch


# ---------------------------------------------------------------- encode errors


@pytest.mark.parametrize("key", ["orders", ("orders",), (1, 2), ("orders", "1"), ("t", 1, 2)])
def test_encode_rejects_bad_partition_keys(key: Hashable) -> None:
    bundle = PeerBundle(((key, Heartbeat(1, NodeId("n"), 0)),), ())
    with pytest.raises(InvalidInputError, match="partition key"):
        encode_bundle(bundle)


def test_encode_rejects_non_string_node_and_unrepresentable_int() -> None:
    with pytest.raises(InvalidInputError, match="node id"):
        encode_bundle(PeerBundle((), ((("t", 0), TimeoutNow(1, 42)),)))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="cannot be encoded"):
        encode_bundle(PeerBundle((), ((("t", 0), TimeoutNow(2**70, NodeId("n"))),)))


def test_encode_rejects_append_in_heartbeats() -> None:
    append = AppendRequest(1, NodeId("n"), 0, -1, b"x", 1, 0)
    bundle = PeerBundle(((("t", 0), append),), ())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="heartbeat"):
        encode_bundle(bundle)


# ---------------------------------------------------------------- decode errors


def test_rejects_wrong_version_and_truncated_prefix() -> None:
    data = encode_bundle(sample_bundle())
    assert "version" in assert_rejected(bytes([WIRE_VERSION + 1]) + data[1:])
    assert "version" in assert_rejected(bytes([0]) + data[1:])
    for size in range(PREFIX_BYTES):
        assert_rejected(data[:size])


def test_every_truncation_is_rejected() -> None:
    data = encode_bundle(sample_bundle())
    for size in range(len(data)):
        assert_rejected(data[:size])


def test_trailing_bytes_are_rejected() -> None:
    data = encode_bundle(sample_bundle())
    assert "after its last batch" in assert_rejected(data + b"\x00")


def test_limits() -> None:
    bundle = sample_bundle()
    data = encode_bundle(bundle)
    assert "bundle_bytes_max" in assert_rejected(
        data, WireLimits(bundle_bytes_max=len(data) - 1, batch_bytes_max=100)
    )
    assert "messages_max" in assert_rejected(data, WireLimits(messages_max=len(bundle) - 1))
    assert "batches length" in assert_rejected(data, WireLimits(batch_bytes_max=50))
    assert decode_bundle(data, limits=WireLimits(messages_max=len(bundle))) == bundle


def test_oversized_arrays_and_strings_stop_inside_the_unpacker() -> None:
    limits = WireLimits(messages_max=10)
    many = tuple((5, 0, 1, 3, 0, 10, True, False) for _ in range(11))
    assert_rejected(build((("t",), ("n",), many, ())), limits)
    assert_rejected(build((("t" * 256,), ("n",), (), ())))
    assert "max_str_len" in assert_rejected(build((("t",), ("é" * 128,), (), ())))
    longest = "é" * 127 + "x"  # 255 bytes
    beat = (5, 0, 1, 3, 0, 10, True, False)
    decoded = decode_bundle(build(((longest,), (longest,), (beat,), ())))
    assert decoded.heartbeats == (((longest, 1), Heartbeat(3, NodeId(longest), 10)),)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ({"a": 1}, "not valid msgpack"),
        ([], "header must be"),
        (("t", (), (), ()), "topic table"),
        (((1,), (), (), ()), "topic"),
        ((("",), (), (), ()), "topic"),
        ((("t",), (b"n",), (), ()), "not valid msgpack"),
        ((("t",), ("",), (), ()), "node id"),
        ((("t",), ("n",), 5, ()), "arrays"),
        ((("t",), ("n",), (5,), ()), "heartbeats[0]"),
        ((("t",), ("n",), ((5, 0),), ()), "heartbeats[0]"),
        ((("t",), ("n",), ((9, 0, 1, 3, 0, 10, True, False),), ()), "kind"),
        ((("t",), ("n",), ((7, 0, 1, 3, 0),), ()), "kind"),  # TimeoutNow as a heartbeat
        ((("t",), ("n",), ((5.0, 0, 1, 3, 0, 10, True, False),), ()), "kind"),
        ((("t",), ("n",), ((True, 0, 1, 3, 0, 10, True, False),), ()), "kind"),
        ((("t",), ("n",), ((5, 1, 1, 3, 0, 10, True, False),), ()), "topic index"),
        ((("t",), ("n",), ((5, -1, 1, 3, 0, 10, True, False),), ()), "topic index"),
        ((("t",), ("n",), ((5, 0, -1, 3, 0, 10, True, False),), ()), "partition"),
        ((("t",), ("n",), ((5, 0, 2**31, 3, 0, 10, True, False),), ()), "partition"),
        ((("t",), ("n",), ((5, 0, "1", 3, 0, 10, True, False),), ()), "partition"),
        ((("t",), ("n",), ((5, 0, 1, -2, 0, 10, True, False),), ()), "term"),
        ((("t",), ("n",), ((5, 0, 1, 2**63, 0, 10, True, False),), ()), "term"),
        ((("t",), ("n",), ((5, 0, 1, 1.5, 0, 10, True, False),), ()), "term"),
        ((("t",), ("n",), ((5, 0, 1, True, 0, 10, True, False),), ()), "term"),
        ((("t",), ("n",), ((5, 0, 1, 3, 1, 10, True, False),), ()), "leader"),
        ((("t",), ("n",), ((5, 0, 1, 3, "n", 10, True, False),), ()), "leader"),
        ((("t",), ("n",), ((5, 0, 1, 3, 0, None, True, False),), ()), "commit_offset"),
        ((("t",), ("n",), ((5, 0, 1, 3, 0, 10, 1, False),), ()), "member"),
        ((("t",), ("n",), ((6, 0, 1, 3, 0, -5, 7),), ()), "end_offset"),
        ((("t",), ("n",), ((6, 0, 1, 3, 0, 10, True, 1),), ()), "HeartbeatResponse needs"),
        ((("t",), ("n",), (), ((1, 0, 1, 3, 0, 10, 2, 1, True),)), "pre_vote"),
        ((("t",), ("n",), (), ((2, 0, 1, 3, 0, "yes", True),)), "granted"),
        ((("t",), ("n",), (), ((3, 0, 1, 3, 0, 10, 2, -1, 5, 3),)), "batches length"),
        ((("t",), ("n",), (), ((3, 0, 1, 3, 0, 10, 2, 4, 5, 3),)), "truncated"),
        ((("t",), ("n",), (), ((4, 0, 1, 3, 0, True, 10, 5, 5, 2, "x", -1, 0),)), "conflict_start"),
        ((("t",), ("n",), (), ((4, 0, 1, 3, 0, True, 10, 5, 5, 2, 3, "no", 0),)), "healing_since"),
        ((("t",), ("n",), (), ((4, 0, 1, 3, 0, True, 10, 5, 5, 2, 3, -1, 1.5),)), "log_start"),
        (
            (("t",), ("n",), (), ((4, 0, 1, 3, 0, True, 10, 5, 5, 2, 3, -1),)),
            "AppendResponse needs",
        ),
        ((("t",), ("n",), (), ((8, 0, 1, 3, 0, 5, 2, 0, 4, 1),)), "discard"),
        ((("t",), ("n",), (), ((8, 0, 1, 3, 0, 5, 2, 0, 4),)), "InstallStart needs"),
        ((("t",), ("n",), (), ((7, 0, 1, 3, 0, 5),)), "TimeoutNow needs"),
    ],
)
def test_malformed_fields_are_rejected(header: object, expected: str) -> None:
    assert expected in assert_rejected(build(header))


def test_wrong_field_types_in_each_valid_position_are_rejected() -> None:
    """Replace every field of a valid encoding with values of the wrong type."""
    bundle = sample_bundle()
    data = encode_bundle(bundle)
    header_size = struct.unpack_from(">I", data, 1)[0]
    header = msgpack.unpackb(data[PREFIX_BYTES : PREFIX_BYTES + header_size])
    blobs = data[PREFIX_BYTES + header_size :]
    for list_index in (2, 3):
        for entry_index, entry in enumerate(header[list_index]):
            for field_index in range(len(entry)):
                for wrong in (None, "x", 1.0, [1], -2, 2**64 - 1, b"x"):
                    changed = [list(part) for part in header]
                    changed[list_index][entry_index] = list(entry)
                    changed[list_index][entry_index][field_index] = wrong
                    try:
                        result = decode_bundle(build(changed, blobs))
                    except InvalidInputError:
                        continue
                    # Only a substitution that is itself valid may decode.
                    assert len(result) == len(bundle)


def test_limits_are_checked() -> None:
    with pytest.raises(ConfigError):
        WireLimits(bundle_bytes_max=2**32)
    with pytest.raises(ConfigError):
        WireLimits(messages_max=0)
    with pytest.raises(ConfigError):
        WireLimits(bundle_bytes_max=100, batch_bytes_max=101)


# ---------------------------------------------------------------- fuzzing


@given(st.binary(max_size=400))
@settings(max_examples=1000, deadline=None)
def test_arbitrary_bytes_never_escape_as_other_errors(data: bytes) -> None:
    with contextlib.suppress(InvalidInputError):
        decode_bundle(data)


@given(st.binary(max_size=400))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_after_a_valid_prefix(data: bytes) -> None:
    """Random msgpack-ish bodies behind a valid version and header length."""
    with contextlib.suppress(InvalidInputError):
        decode_bundle(struct.pack(">BI", WIRE_VERSION, len(data)) + data)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda children: st.lists(children, max_size=8),
    max_leaves=30,
)


@given(msgpack_values, st.binary(max_size=20))
@settings(max_examples=500, deadline=None)
def test_arbitrary_msgpack_headers(header: object, blobs: bytes) -> None:
    with contextlib.suppress(InvalidInputError):
        decode_bundle(build(header, blobs))


entry_items = st.one_of(
    st.integers(min_value=-3, max_value=8),
    st.sampled_from([None, True, False, "n", 1.0, 2**31, 2**63, b"x"]),
)
entries = st.lists(st.lists(entry_items, min_size=1, max_size=12), max_size=4)


@given(entries, entries)
@settings(max_examples=500, deadline=None)
def test_arbitrary_entries_in_a_valid_frame(
    heartbeats: list[object], messages: list[object]
) -> None:
    """Well-shaped header, arbitrary entries: exercises every field check."""
    with contextlib.suppress(InvalidInputError):
        decode_bundle(build((("t", "u"), ("n", "m"), heartbeats, messages), b"blob"))


def seed_encodings() -> list[bytes]:
    """Valid encodings to mutate: drawing fresh bundles would cost most of the time."""
    bundle = sample_bundle()
    return [
        encode_bundle(bundle),
        encode_bundle(PeerBundle(bundle.heartbeats, ())),
        encode_bundle(PeerBundle((), bundle.messages)),
        encode_bundle(PeerBundle((), ())),
    ]


SEED_ENCODINGS = seed_encodings()


@st.composite
def mutated_encodings(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEED_ENCODINGS)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        action = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        position = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if action == "flip" and data:
            data[position] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif action == "set" and data:
            data[position] = draw(st.integers(min_value=0, max_value=255))
        elif action == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=4))
        elif action == "delete" and data:
            del data[position : position + draw(st.integers(min_value=1, max_value=4))]
        else:
            del data[position:]
    return bytes(data)


@given(mutated_encodings())
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_encodings_decode_validly_or_raise_invalid_input(data: bytes) -> None:
    try:
        bundle = decode_bundle(data)
    except InvalidInputError:
        return
    # A mutation that survives must still be a well-formed bundle: re-encodable.
    assert decode_bundle(encode_bundle(bundle)) == bundle


# ---------------------------------------------------------------- fast paths

FAST_TYPES = (AppendRequest, AppendResponse, Heartbeat, HeartbeatResponse)
fast_shaped = st.builds(
    lambda kind, rest: (kind, *rest),
    st.sampled_from([3, 4, 5, 6]),
    st.lists(
        st.one_of(
            st.integers(min_value=-2, max_value=4),
            st.sampled_from([None, True, False, "n", 1.0, 2**63, -(2**63) - 1, b"x"]),
        ),
        min_size=4,
        max_size=10,
    ),
)


def decode_both(
    entry: object, heartbeats_only: bool, topics: object, nodes: object, blob: bytes
) -> tuple[object, object]:
    """(fast path's result, general path's result); an InvalidInputError is returned."""
    results: list[object] = []
    for decode in (wire._decode_fast, wire._decode_entry):
        try:
            results.append(decode(entry, heartbeats_only, topics, nodes, wire._Blobs(blob, 0, 5)))
        except InvalidInputError as error:
            results.append(error)
    return results[0], results[1]


@given(st.tuples(keys, messages), st.booleans())
@settings(max_examples=300, deadline=None)
def test_fast_paths_take_every_valid_frequent_message(
    item: tuple[tuple[str, int], Message], heartbeats_only: bool
) -> None:
    data = encode_bundle(PeerBundle((), (item,)))
    size = struct.unpack_from(">I", data, 1)[0]
    topics_, nodes_, _, (entry,) = msgpack.unpackb(
        data[PREFIX_BYTES : PREFIX_BYTES + size], use_list=False
    )
    blob = data[PREFIX_BYTES + size :]
    fast = wire._decode_fast(
        entry, heartbeats_only, topics_, nodes_, wire._Blobs(blob, 0, len(blob))
    )
    allowed = not heartbeats_only or isinstance(item[1], (Heartbeat, HeartbeatResponse))
    if isinstance(item[1], FAST_TYPES) and allowed:
        general = wire._decode_entry(
            entry, heartbeats_only, topics_, nodes_, wire._Blobs(blob, 0, len(blob))
        )
        assert fast == general == item
        assert type(fast[1]) is type(item[1])
    else:
        assert fast is None  # the general path decides (and rejects what is misplaced)


@given(fast_shaped, st.booleans())
@settings(max_examples=1000, deadline=None)
def test_fast_paths_accept_nothing_the_general_path_rejects(
    entry: tuple[object, ...], heartbeats_only: bool
) -> None:
    fast, general = decode_both(entry, heartbeats_only, ("t", "u"), ("n", "m", "o"), b"0123456789")
    if fast is None:
        return
    assert type(fast) is type(general)
    if not isinstance(fast, InvalidInputError):
        assert fast == general
