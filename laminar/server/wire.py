"""Binary encoding of replication traffic between two nodes: one :class:`PeerBundle`.

Theory of operation
-------------------

A bundle is what one node sends one peer in one tick (see
:mod:`laminar.replica.coalesce`): messages of many partitions, each tagged with its
``(topic, partition)`` key. It travels as one length-prefixed frame on the
peer TCP connection (:mod:`laminar.server.transport`). The encoding is::

    version (1 byte) | header length (4 bytes, big-endian) | header (msgpack) | blobs

The header is one msgpack array ``[topics, nodes, heartbeats, messages]``:

- ``topics`` / ``nodes``: every topic name and node id the bundle mentions, once
  each. Entries refer to them by index, so a bundle of 300 heartbeats from an idle
  node carries each string once instead of 300 times (smaller, and far fewer
  string objects to build on decode).
- ``heartbeats`` / ``messages``: the bundle's two lists, in order. Every entry is a
  flat array ``[kind, topic index, partition, field, ...]`` whose fields follow the
  message dataclass's field order (:data:`_SCHEMAS`): terms and offsets as ints,
  flags as booleans, node ids as indexes into ``nodes``, and an ``AppendRequest``'s
  ``batches`` as its length in bytes. ``heartbeats`` holds only ``Heartbeat`` and
  ``HeartbeatResponse`` (compact tuples: 7–8 small items); ``messages`` may hold
  any message type.

``blobs`` is the ``batches`` of every ``AppendRequest`` in ``messages``, back to
back, in order. Keeping them out of the msgpack body means each batch is copied
exactly once per direction: ``bytes.join`` on encode (msgpack's packer would copy
it into its buffer and again into the result), one slice on decode.

Decoding trusts nothing: the frame comes from the network. Sizes are bounded by
:class:`WireLimits` before and during unpacking (msgpack's own ``max_*_len``
limits, no maps, bins or extension types), every field is type- and range-checked,
and the blob lengths must add up to exactly the bytes that follow the header. Any
violation raises :class:`~laminar.errors.InvalidInputError` naming what is wrong;
no other exception escapes :func:`decode_bundle`. :func:`encode_bundle` checks the
partition keys and node ids it is given (a bad one is a caller bug, reported the
same way) but leaves value ranges to the decoder, which is the one gatekeeper.

Measured on the development machine (2 CPUs, shared and loaded; CPython 3.11,
msgpack 1.2; ``python -m laminar.server.wire`` reruns it): a bundle with one 100 KB
``AppendRequest`` encodes in 7–10 µs and decodes in 9–16 µs; one with a single
record's append, or with one ``AppendResponse``, encodes in 3.3–6 µs and decodes in
6.1–6.7 µs (8.5–15 µs before the append fast paths); a bundle of 300 heartbeats
(150 ``Heartbeat`` + 150 ``HeartbeatResponse`` over 100 topics, 4.4 KB) encodes in
230–390 µs and decodes in 510–810 µs, about half of which is constructing the
frozen message dataclasses (~1.5 µs each).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields, replace
from typing import Final

import msgpack

from laminar.errors import ConfigError, InvalidInputError
from laminar.ids import TopicPartition
from laminar.replica.coalesce import PeerBundle
from laminar.replica.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallStart,
    Message,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from laminar.replica.types import NodeId

WIRE_VERSION: Final = 2
"""First byte of every encoded bundle; a decoder rejects any other value."""
NODE_ID_BYTES_MAX: Final = 255
TOPIC_BYTES_MAX: Final = 255
PARTITION_MAX: Final = 2**31 - 1
OFFSET_MIN: Final = -1
"""Terms and offsets: -1 is the messages' "none" value."""
OFFSET_MAX: Final = 2**63 - 1

_PREFIX: Final = struct.Struct(">BI")
PREFIX_BYTES: Final = _PREFIX.size

PartitionKey = TopicPartition


@dataclass(frozen=True, slots=True)
class WireLimits:
    """Bounds a decoder enforces on one bundle (TIGER_STYLE: a limit on everything).

    ``bundle_bytes_max``: the whole encoded bundle, in bytes. The gRPC channels'
    message size limits are derived from it, and the sender splits a bundle that
    would exceed it. Must stay below 4 GiB (the header length field).
    ``messages_max``: heartbeats plus messages in one bundle; also caps every msgpack
    array (and so the topic and node tables).
    ``batch_bytes_max``: one ``AppendRequest``'s ``batches``. Comfortably above the
    replica's ``append_bytes_max`` (4 MiB) because a single record batch (up to 16
    MiB) is always sent whole.
    """

    bundle_bytes_max: int = 64 * 1024 * 1024
    messages_max: int = 100_000
    batch_bytes_max: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if not PREFIX_BYTES < self.bundle_bytes_max < 2**32:
            raise ConfigError(f"bundle_bytes_max must be in ({PREFIX_BYTES}, 2**32)")
        if self.messages_max < 1:
            raise ConfigError("messages_max must be positive")
        if not 0 < self.batch_bytes_max <= self.bundle_bytes_max:
            raise ConfigError("batch_bytes_max must be in (0, bundle_bytes_max]")


# Field codes: T term or offset (int), N node id (index into the node table),
# B flag (bool), L batches (length of the next blob).
@dataclass(frozen=True, slots=True)
class _Schema:
    kind: int
    message_type: Callable[..., Message]
    names: tuple[str, ...]
    codes: str
    heartbeat: bool


def _schema(kind: int, message_type: type[Message], codes: str) -> _Schema:
    names = tuple(field.name for field in fields(message_type))
    assert len(names) == len(codes), message_type
    heartbeat = message_type in (Heartbeat, HeartbeatResponse)
    return _Schema(kind, message_type, names, codes, heartbeat)


_SCHEMA_LIST: Final = (
    _schema(1, VoteRequest, "TNTTBB"),
    _schema(2, VoteResponse, "TNBB"),
    _schema(3, AppendRequest, "TNTTLTT"),
    _schema(4, AppendResponse, "TNBTTTTTTT"),
    _schema(5, Heartbeat, "TNTBB"),
    _schema(6, HeartbeatResponse, "TNTT"),
    _schema(7, TimeoutNow, "TN"),
    _schema(8, InstallStart, "TNTTLTB"),
)
_SCHEMAS: Final = {schema.kind: schema for schema in _SCHEMA_LIST}
_SCHEMA_BY_TYPE: Final = {schema.message_type: schema for schema in _SCHEMA_LIST}
_ENTRY_PREFIX_ITEMS: Final = 3  # kind, topic index, partition
_ENTRY_ITEMS_MAX: Final = _ENTRY_PREFIX_ITEMS + max(len(schema.codes) for schema in _SCHEMA_LIST)
_HEARTBEAT: Final = 5
_HEARTBEAT_RESPONSE: Final = 6
_APPEND: Final = 3
_APPEND_RESPONSE: Final = 4
assert _SCHEMAS[_HEARTBEAT].message_type is Heartbeat
assert _SCHEMAS[_HEARTBEAT_RESPONSE].message_type is HeartbeatResponse
assert _SCHEMAS[_APPEND].message_type is AppendRequest
assert _SCHEMAS[_APPEND_RESPONSE].message_type is AppendResponse


# ------------------------------------------------------------------------ encode


def encode_bundle(bundle: PeerBundle) -> bytes:
    """Encode ``bundle`` whose keys are ``(topic, partition)`` tuples.

    Raises :class:`InvalidInputError` for a key that is not ``(str, int)``, a node
    id that is not a string, or an int msgpack cannot represent. Each batch is
    copied once, into the result.
    """
    topics: dict[str, int] = {}
    nodes: dict[str, int] = {}
    blobs: list[bytes] = []
    heartbeats = [
        _encode_entry(key, message, topics, nodes, blobs) for key, message in bundle.heartbeats
    ]
    if blobs:
        raise InvalidInputError("an AppendRequest cannot travel as a heartbeat")
    messages = [
        _encode_entry(key, message, topics, nodes, blobs) for key, message in bundle.messages
    ]
    try:
        header = msgpack.packb((list(topics), list(nodes), heartbeats, messages))
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidInputError(f"bundle cannot be encoded: {error}") from error
    return b"".join((_PREFIX.pack(WIRE_VERSION, len(header)), header, *blobs))


def _encode_entry(
    key: Hashable,
    message: Message,
    topics: dict[str, int],
    nodes: dict[str, int],
    blobs: list[bytes],
) -> list[object]:
    if not (
        isinstance(key, tuple)
        and len(key) == 2
        and isinstance(key[0], str)
        and isinstance(key[1], int)
    ):
        raise InvalidInputError(f"partition key must be a (topic, partition) tuple: {key!r:.80}")
    topic, partition = key
    message_type = type(message)
    # Fast paths: a bundle may hold hundreds of heartbeats (an idle node's), and every
    # write sends two appends and gets two answers.
    if isinstance(message, Heartbeat) and isinstance(message.leader, str):
        return [
            _HEARTBEAT,
            _intern(topic, topics),
            partition,
            message.term,
            _intern(message.leader, nodes),
            message.commit_offset,
            message.member,
            message.quiesce,
        ]
    if isinstance(message, HeartbeatResponse) and isinstance(message.follower, str):
        return [
            _HEARTBEAT_RESPONSE,
            _intern(topic, topics),
            partition,
            message.term,
            _intern(message.follower, nodes),
            message.end_offset,
            message.high_watermark,
        ]
    if isinstance(message, AppendRequest) and isinstance(message.leader, str):
        batches = message.batches
        blobs.append(batches)
        return [
            _APPEND,
            _intern(topic, topics),
            partition,
            message.term,
            _intern(message.leader, nodes),
            message.prev_end_offset,
            message.prev_term,
            len(batches),
            message.end_offset,
            message.commit_offset,
        ]
    if isinstance(message, AppendResponse) and isinstance(message.follower, str):
        return [
            _APPEND_RESPONSE,
            _intern(topic, topics),
            partition,
            message.term,
            _intern(message.follower, nodes),
            message.success,
            message.match_offset,
            message.end_offset,
            message.prev_end_offset,
            message.conflict_term,
            message.conflict_start,
            message.healing_since,
            message.log_start,
        ]
    schema = _SCHEMA_BY_TYPE.get(message_type)
    if schema is None:
        raise InvalidInputError(f"not a replication message: {message_type.__name__}")
    entry: list[object] = [schema.kind, _intern(topic, topics), partition]
    for code, name in zip(schema.codes, schema.names, strict=True):
        value = getattr(message, name)
        if code == "N":
            if not isinstance(value, str):
                raise InvalidInputError(f"{name} must be a node id string: {value!r:.80}")
            entry.append(_intern(value, nodes))
        elif code == "L":
            blobs.append(value)
            entry.append(len(value))
        else:
            entry.append(value)
    return entry


def _intern(text: str, table: dict[str, int]) -> int:
    index = table.get(text)
    if index is None:
        index = table[text] = len(table)
    return index


# ------------------------------------------------------------------------ decode

_DEFAULT_LIMITS: Final = WireLimits()


def decode_bundle(
    data: bytes | bytearray | memoryview, *, limits: WireLimits = _DEFAULT_LIMITS
) -> PeerBundle:
    """Decode and validate one bundle; keys come back as ``(topic, partition)``.

    Raises :class:`InvalidInputError` (and nothing else) when ``data`` is not a
    well-formed bundle of this version within ``limits``.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    size = len(data)
    if size > limits.bundle_bytes_max:
        raise InvalidInputError(
            f"bundle is {size} bytes, more than bundle_bytes_max={limits.bundle_bytes_max}"
        )
    if size < PREFIX_BYTES:
        raise InvalidInputError(f"bundle is truncated: {size} bytes, no room for its prefix")
    version, header_bytes = _PREFIX.unpack_from(data)
    if version != WIRE_VERSION:
        raise InvalidInputError(f"unsupported bundle version {version} (expected {WIRE_VERSION})")
    header_end = PREFIX_BYTES + header_bytes
    if header_end > size:
        raise InvalidInputError(
            f"bundle is truncated: header needs {header_bytes} bytes, {size - PREFIX_BYTES} remain"
        )
    header = _unpack_header(memoryview(data)[PREFIX_BYTES:header_end], limits)
    if type(header) is not tuple or len(header) != 4:
        raise InvalidInputError("bundle header must be [topics, nodes, heartbeats, messages]")
    topic_table, node_table, heartbeat_entries, message_entries = header
    topics = _string_table(topic_table, "topic", TOPIC_BYTES_MAX)
    nodes = _string_table(node_table, "node id", NODE_ID_BYTES_MAX)
    if type(heartbeat_entries) is not tuple or type(message_entries) is not tuple:
        raise InvalidInputError("bundle heartbeats and messages must be arrays")
    count = len(heartbeat_entries) + len(message_entries)
    if count > limits.messages_max:
        raise InvalidInputError(
            f"bundle holds {count} messages, more than messages_max={limits.messages_max}"
        )
    blobs = _Blobs(data, header_end, limits.batch_bytes_max)
    heartbeats = _decode_entries(heartbeat_entries, "heartbeats", topics, nodes, blobs)
    messages = _decode_entries(message_entries, "messages", topics, nodes, blobs)
    blobs.finish()
    return PeerBundle(heartbeats, messages)  # type: ignore[arg-type]  # kinds checked


def _unpack_header(header: memoryview, limits: WireLimits) -> object:
    try:
        return msgpack.unpackb(
            header,
            raw=False,
            use_list=False,
            strict_map_key=True,
            max_str_len=max(NODE_ID_BYTES_MAX, TOPIC_BYTES_MAX),
            max_bin_len=0,
            max_array_len=max(limits.messages_max, _ENTRY_ITEMS_MAX),
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception as error:  # the C unpacker raises a dozen types; all mean "malformed"
        raise InvalidInputError(f"bundle header is not valid msgpack: {error!s:.200}") from error


def _string_table(value: object, what: str, bytes_max: int) -> tuple[str, ...]:
    if type(value) is not tuple:
        raise InvalidInputError(f"{what} table must be an array")
    for text in value:
        if type(text) is not str or not text or len(text.encode()) > bytes_max:
            raise InvalidInputError(
                f"{what} must be a non-empty string of at most {bytes_max} bytes: {text!r:.80}"
            )
    return value


class _Blobs:
    """Hands out the batches that follow the header, in order, each copied once."""

    __slots__ = ("_batch_bytes_max", "_data", "_position")

    def __init__(self, data: bytes, position: int, batch_bytes_max: int) -> None:
        self._data = data
        self._position = position
        self._batch_bytes_max = batch_bytes_max

    def take(self, length: object) -> bytes:
        if type(length) is not int or not 0 <= length <= self._batch_bytes_max:
            raise InvalidInputError(
                f"batches length must be an int in [0, {self._batch_bytes_max}]: {length!r:.40}"
            )
        start = self._position
        end = start + length
        if end > len(self._data):
            raise InvalidInputError(
                f"bundle is truncated: batches need {length} bytes, "
                f"{len(self._data) - start} remain"
            )
        self._position = end
        return self._data[start:end]

    def finish(self) -> None:
        extra = len(self._data) - self._position
        if extra:
            raise InvalidInputError(f"bundle has {extra} bytes after its last batch")


def _decode_entries(
    entries: tuple[object, ...],
    where: str,
    topics: tuple[str, ...],
    nodes: tuple[str, ...],
    blobs: _Blobs,
) -> tuple[tuple[PartitionKey, Message], ...]:
    heartbeats_only = where == "heartbeats"
    decoded: list[tuple[PartitionKey, Message]] = []
    for position, entry in enumerate(entries):
        try:
            fast = _decode_fast(entry, heartbeats_only, topics, nodes, blobs)
            decoded.append(
                fast
                if fast is not None
                else _decode_entry(entry, heartbeats_only, topics, nodes, blobs)
            )
        except InvalidInputError as error:
            raise InvalidInputError(f"{where}[{position}]: {error}") from None
    return tuple(decoded)


def _decode_fast(
    entry: object,
    heartbeats_only: bool,
    topics: tuple[str, ...],
    nodes: tuple[str, ...],
    blobs: _Blobs,
) -> tuple[PartitionKey, Message] | None:
    """A valid message of the four frequent kinds, checked inline; else None.

    The kinds are a heartbeat and its response (hundreds per bundle from an idle
    node) and an append and its response (every write, twice). None also covers
    every malformed entry: :func:`_decode_entry` then finds and reports the fault.
    Same checks, a third to half the cost of the general path. The checks are
    written out for each kind on purpose: sharing the common prefix through a
    helper made a bundle of 300 heartbeats 15% slower to decode.
    """
    if type(entry) is not tuple:
        return None
    length = len(entry)
    if length == 8:
        kind, topic, partition, term, node, commit_offset, member, quiesce = entry
        if (
            kind == _HEARTBEAT
            and type(kind) is int
            and type(topic) is int
            and 0 <= topic < len(topics)
            and type(partition) is int
            and 0 <= partition <= PARTITION_MAX
            and type(term) is int
            and OFFSET_MIN <= term <= OFFSET_MAX
            and type(node) is int
            and 0 <= node < len(nodes)
            and type(commit_offset) is int
            and OFFSET_MIN <= commit_offset <= OFFSET_MAX
            and type(member) is bool
            and type(quiesce) is bool
        ):
            return (topics[topic], partition), Heartbeat(
                term, NodeId(nodes[node]), commit_offset, member, quiesce
            )
    elif length == 7:
        kind, topic, partition, term, node, end_offset, watermark = entry
        if (
            kind == _HEARTBEAT_RESPONSE
            and type(kind) is int
            and type(topic) is int
            and 0 <= topic < len(topics)
            and type(partition) is int
            and 0 <= partition <= PARTITION_MAX
            and type(term) is int
            and OFFSET_MIN <= term <= OFFSET_MAX
            and type(node) is int
            and 0 <= node < len(nodes)
            and type(end_offset) is int
            and OFFSET_MIN <= end_offset <= OFFSET_MAX
            and type(watermark) is int
            and OFFSET_MIN <= watermark <= OFFSET_MAX
        ):
            return (topics[topic], partition), HeartbeatResponse(
                term, NodeId(nodes[node]), end_offset, watermark
            )
    elif length == 10 and not heartbeats_only:
        kind, topic, partition, term, node, prev_end, prev_term, size, end, commit = entry
        if (
            kind == _APPEND
            and type(kind) is int
            and type(topic) is int
            and 0 <= topic < len(topics)
            and type(partition) is int
            and 0 <= partition <= PARTITION_MAX
            and type(term) is int
            and OFFSET_MIN <= term <= OFFSET_MAX
            and type(node) is int
            and 0 <= node < len(nodes)
            and type(prev_end) is int
            and OFFSET_MIN <= prev_end <= OFFSET_MAX
            and type(prev_term) is int
            and OFFSET_MIN <= prev_term <= OFFSET_MAX
            and type(size) is int
            and type(end) is int
            and OFFSET_MIN <= end <= OFFSET_MAX
            and type(commit) is int
            and OFFSET_MIN <= commit <= OFFSET_MAX
        ):
            return (topics[topic], partition), AppendRequest(
                term, NodeId(nodes[node]), prev_end, prev_term, blobs.take(size), end, commit
            )
    elif length == 13 and not heartbeats_only:
        (kind, topic, partition, term, node, success, match, end, prev_end, c_term, c_start, heal,
         log_start) = entry  # fmt: skip
        if (
            kind == _APPEND_RESPONSE
            and type(kind) is int
            and type(topic) is int
            and 0 <= topic < len(topics)
            and type(partition) is int
            and 0 <= partition <= PARTITION_MAX
            and type(term) is int
            and OFFSET_MIN <= term <= OFFSET_MAX
            and type(node) is int
            and 0 <= node < len(nodes)
            and type(success) is bool
            and type(match) is int
            and OFFSET_MIN <= match <= OFFSET_MAX
            and type(end) is int
            and OFFSET_MIN <= end <= OFFSET_MAX
            and type(prev_end) is int
            and OFFSET_MIN <= prev_end <= OFFSET_MAX
            and type(c_term) is int
            and OFFSET_MIN <= c_term <= OFFSET_MAX
            and type(c_start) is int
            and OFFSET_MIN <= c_start <= OFFSET_MAX
            and type(heal) is int
            and OFFSET_MIN <= heal <= OFFSET_MAX
            and type(log_start) is int
            and OFFSET_MIN <= log_start <= OFFSET_MAX
        ):
            return (topics[topic], partition), AppendResponse(
                term,
                NodeId(nodes[node]),
                success,
                match,
                end,
                prev_end,
                c_term,
                c_start,
                heal,
                log_start,
            )
    return None


def _decode_entry(
    entry: object,
    heartbeats_only: bool,
    topics: tuple[str, ...],
    nodes: tuple[str, ...],
    blobs: _Blobs,
) -> tuple[PartitionKey, Message]:
    if type(entry) is not tuple or len(entry) < _ENTRY_PREFIX_ITEMS:
        raise InvalidInputError("entry must be an array [kind, topic, partition, ...]")
    kind, topic_index, partition = entry[:_ENTRY_PREFIX_ITEMS]
    schema = _SCHEMAS.get(kind) if type(kind) is int else None
    if schema is None or (heartbeats_only and not schema.heartbeat):
        raise InvalidInputError(f"unknown or misplaced message kind {kind!r:.40}")
    if len(entry) != _ENTRY_PREFIX_ITEMS + len(schema.codes):
        raise InvalidInputError(
            f"{schema.message_type.__name__} needs {len(schema.codes)} fields, "
            f"got {len(entry) - _ENTRY_PREFIX_ITEMS}"
        )
    topic = _lookup(topic_index, topics, "topic")
    if type(partition) is not int or not 0 <= partition <= PARTITION_MAX:
        raise InvalidInputError(f"partition must be an int in [0, 2**31): {partition!r:.40}")
    values: list[object] = []
    for code, name, value in zip(
        schema.codes, schema.names, entry[_ENTRY_PREFIX_ITEMS:], strict=True
    ):
        values.append(_decode_field(code, name, value, nodes, blobs))
    return (topic, partition), schema.message_type(*values)


def _decode_field(
    code: str, name: str, value: object, nodes: tuple[str, ...], blobs: _Blobs
) -> object:
    if code == "T":
        if type(value) is not int or not OFFSET_MIN <= value <= OFFSET_MAX:
            raise InvalidInputError(f"{name} must be an int in [-1, 2**63): {value!r:.40}")
        return value
    if code == "N":
        return NodeId(_lookup(value, nodes, name))
    if code == "B":
        if type(value) is not bool:
            raise InvalidInputError(f"{name} must be a boolean: {value!r:.40}")
        return value
    return blobs.take(value)


def _lookup(index: object, table: tuple[str, ...], what: str) -> str:
    if type(index) is not int or not 0 <= index < len(table):
        raise InvalidInputError(f"{what} index must be an int in [0, {len(table)}): {index!r:.40}")
    return table[index]


# --------------------------------------------------------------------- benchmark


def _benchmark(repeat: int = 2000) -> dict[str, float]:
    """Microseconds per encode and decode of the two typical bundles."""
    import os
    import time

    append = AppendRequest(7, NodeId("node-1"), 1000, 7, os.urandom(100_000), 2000, 990)
    one_append = PeerBundle((), ((("events", 3), append),))
    small = replace(append, batches=os.urandom(239), end_offset=1001)  # one 100-byte record
    one_small = PeerBundle((), ((("events", 3), small),))
    answer = AppendResponse(7, NodeId("node-2"), True, 1001, 1001, 1000)
    one_answer = PeerBundle((), ((("events", 3), answer),))
    beats: list[tuple[Hashable, Heartbeat | HeartbeatResponse]] = []
    for index in range(300):
        key = (f"topic-{index % 100}", index // 100)
        beat: Heartbeat | HeartbeatResponse
        if index % 2:
            beat = Heartbeat(5, NodeId("node-1"), 123_456 + index)
        else:
            beat = HeartbeatResponse(5, NodeId("node-1"), 123_456 + index)
        beats.append((key, beat))
    heartbeats = PeerBundle(tuple(beats), ())
    results: dict[str, float] = {}
    for name, bundle in (
        ("append_100kb", one_append),
        ("append_1_record", one_small),
        ("append_response", one_answer),
        ("heartbeats_300", heartbeats),
    ):
        data = encode_bundle(bundle)
        assert decode_bundle(data) == bundle
        started = time.perf_counter()
        for _ in range(repeat):
            encode_bundle(bundle)
        results[f"{name}_encode_us"] = (time.perf_counter() - started) / repeat * 1e6
        started = time.perf_counter()
        for _ in range(repeat):
            decode_bundle(data)
        results[f"{name}_decode_us"] = (time.perf_counter() - started) / repeat * 1e6
    return results


if __name__ == "__main__":
    for metric, value in _benchmark().items():
        print(f"{metric:28} {value:10.1f}")
