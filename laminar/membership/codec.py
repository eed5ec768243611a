"""Wire encoding of membership messages: msgpack, versioned, authenticated.

Frame (UDP packet or TCP stream message)::

    tag (16 bytes) | version (1 byte) | message | message | ...

``tag`` is keyed BLAKE2b-128 of everything after it, under the cluster key, so a
packet from another cluster, or a corrupted one, fails authentication and is
dropped before any parsing. Each message is one msgpack array whose first item is
the message kind. Concatenating independently encoded messages lets the sender
account for packet size exactly while filling a packet up to the MTU.

Decoding never raises: it returns the messages or a :class:`DropReason`. Every
field is type- and range-checked; nothing from the wire reaches the state machine
unvalidated.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import math
from collections.abc import Sequence
from typing import assert_never

import msgpack

from laminar.errors import ConfigError
from laminar.membership.member import MemberState, Metadata, NodeId
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

WIRE_VERSION = 1
TAG_BYTES = 16
FRAME_OVERHEAD_BYTES = TAG_BYTES + 1
NODE_ID_BYTES_MAX = 64
ADDRESS_BYTES_MAX = 128
ZONE_BYTES_MAX = 64
METADATA_ENTRIES_MAX = 32
SEQUENCE_MAX = 2**32 - 1
INCARNATION_MAX = 2**63 - 1
WEIGHT_MAX = 1e12
MESSAGES_PER_PACKET_MAX = 256

_PERSON = b"laminar-swim"

_KIND_PING = 1
_KIND_ACK = 2
_KIND_NACK = 3
_KIND_PING_REQUEST = 4
_KIND_ALIVE = 5
_KIND_SUSPECT = 6
_KIND_DEAD = 7
_KIND_PUSH_PULL = 8

_STATE_CODES = {
    MemberState.ALIVE: 0,
    MemberState.SUSPECT: 1,
    MemberState.DEAD: 2,
    MemberState.LEFT: 3,
}
_STATES_BY_CODE = {code: state for state, code in _STATE_CODES.items()}


class DropReason(enum.Enum):
    """Why an incoming frame was dropped (each is counted by the core)."""

    OVERSIZED = "oversized"
    TRUNCATED = "truncated"
    AUTHENTICATION = "authentication"
    VERSION = "version"
    MALFORMED = "malformed"


class _InvalidFieldError(Exception):
    """A field failed validation (never escapes this module)."""


class Codec:
    """Encodes and authenticates messages under one cluster key."""

    __slots__ = ("_key", "_metadata_bytes_max")

    def __init__(self, cluster_key: bytes, *, metadata_bytes_max: int) -> None:
        if not isinstance(cluster_key, bytes) or not cluster_key:
            raise ConfigError("cluster_key must be non-empty bytes")
        if len(cluster_key) > 64:
            cluster_key = hashlib.blake2b(cluster_key, digest_size=64).digest()
        self._key = cluster_key
        self._metadata_bytes_max = metadata_bytes_max

    # ----------------------------------------------------------------- encoding

    def encode(self, message: Message) -> bytes:
        """One message as msgpack bytes (to be framed by :meth:`seal`)."""
        packed: bytes = msgpack.packb(_to_wire(message), use_bin_type=True)
        return packed

    def encode_record(self, record: MemberRecord) -> bytes:
        """One push-pull member record as msgpack bytes (callers may cache it)."""
        packed: bytes = msgpack.packb(_record_fields(record), use_bin_type=True)
        return packed

    def encode_push_pull(
        self,
        source_id: NodeId,
        source_address: str,
        *,
        is_join: bool,
        is_reply: bool,
        encoded_records: Sequence[bytes],
    ) -> bytes:
        """The same bytes as ``encode(PushPull(...))``, from records already encoded
        by :meth:`encode_record`: a full state costs a join, not a re-encoding."""
        packer = msgpack.Packer(use_bin_type=True)
        head = [_KIND_PUSH_PULL, source_id, source_address, is_join, is_reply]
        parts = [packer.pack_array_header(len(head) + 1)]
        parts.extend(packer.pack(item) for item in head)
        parts.append(packer.pack_array_header(len(encoded_records)))
        parts.extend(encoded_records)
        return b"".join(parts)

    def seal(self, encoded_messages: Sequence[bytes]) -> bytes:
        """Frame already-encoded messages: tag, version, messages."""
        body = bytes([WIRE_VERSION]) + b"".join(encoded_messages)
        return self._tag(body) + body

    def _tag(self, body: bytes) -> bytes:
        return hashlib.blake2b(body, key=self._key, digest_size=TAG_BYTES, person=_PERSON).digest()

    # ----------------------------------------------------------------- decoding

    def open(self, frame: bytes, *, size_bytes_max: int) -> tuple[Message, ...] | DropReason:
        """The messages in ``frame``, or why it was dropped. Never raises."""
        if len(frame) > size_bytes_max:
            return DropReason.OVERSIZED
        if len(frame) <= FRAME_OVERHEAD_BYTES:
            return DropReason.TRUNCATED
        body = frame[TAG_BYTES:]
        if not hmac.compare_digest(frame[:TAG_BYTES], self._tag(body)):
            return DropReason.AUTHENTICATION
        if body[0] != WIRE_VERSION:
            return DropReason.VERSION
        try:
            return self._decode_messages(body, 1)
        except (_InvalidFieldError, ValueError, TypeError, msgpack.UnpackException):
            return DropReason.MALFORMED

    def _decode_messages(self, body: bytes, start: int) -> tuple[Message, ...]:
        unpacker = msgpack.Unpacker(
            raw=False,
            strict_map_key=True,
            max_buffer_size=max(len(body), 1024),
            max_array_len=100_000,
            max_map_len=METADATA_ENTRIES_MAX,
        )
        unpacker.feed(body[start:])
        messages: list[Message] = []
        for item in unpacker:
            if len(messages) >= MESSAGES_PER_PACKET_MAX:
                raise _InvalidFieldError("too many messages")
            messages.append(self._from_wire(item))
        if unpacker.tell() != len(body) - start:
            raise _InvalidFieldError("trailing bytes")
        if not messages:
            raise _InvalidFieldError("empty frame")
        return tuple(messages)

    def _from_wire(self, item: object) -> Message:
        if not isinstance(item, list) or not item:
            raise _InvalidFieldError("message is not a non-empty array")
        kind = item[0]
        if kind == _KIND_PING:
            _length(item, 5)
            return Ping(_sequence(item[1]), _node_id(item[2]), _node_id(item[3]), _address(item[4]))
        if kind == _KIND_ACK:
            _length(item, 3)
            return Ack(_sequence(item[1]), _node_id(item[2]))
        if kind == _KIND_NACK:
            _length(item, 3)
            return Nack(_sequence(item[1]), _node_id(item[2]))
        if kind == _KIND_PING_REQUEST:
            _length(item, 7)
            return PingRequest(
                _sequence(item[1]),
                _node_id(item[2]),
                _address(item[3]),
                _node_id(item[4]),
                _address(item[5]),
                _bool(item[6]),
            )
        if kind == _KIND_ALIVE:
            _length(item, 8)
            return self._alive(item[1:])
        if kind == _KIND_SUSPECT:
            _length(item, 4)
            return Suspect(_node_id(item[1]), _incarnation(item[2]), _node_id(item[3]))
        if kind == _KIND_DEAD:
            _length(item, 4)
            return Dead(_node_id(item[1]), _incarnation(item[2]), _node_id(item[3]))
        if kind == _KIND_PUSH_PULL:
            _length(item, 6)
            records = item[5]
            if not isinstance(records, list):
                raise _InvalidFieldError("push-pull members is not an array")
            return PushPull(
                _node_id(item[1]),
                _address(item[2]),
                _bool(item[3]),
                _bool(item[4]),
                tuple(self._record(record) for record in records),
            )
        raise _InvalidFieldError(f"unknown message kind {kind!r}")

    def _alive(self, fields: list[object]) -> Alive:
        return Alive(
            node_id=_node_id(fields[0]),
            incarnation=_incarnation(fields[1]),
            gossip_address=_address(fields[2]),
            grpc_address=_address(fields[3], allow_empty=True),
            weight=_weight(fields[4]),
            zone=_text(fields[5], ZONE_BYTES_MAX, allow_empty=True),
            metadata=self._metadata(fields[6]),
        )

    def _record(self, record: object) -> MemberRecord:
        if not isinstance(record, list) or len(record) != 8:
            raise _InvalidFieldError("member record is not an 8-array")
        code = record[0]
        if not isinstance(code, int) or isinstance(code, bool) or code not in _STATES_BY_CODE:
            raise _InvalidFieldError("bad member state")
        return MemberRecord(self._alive(record[1:]), _STATES_BY_CODE[code])

    def _metadata(self, value: object) -> Metadata:
        if not isinstance(value, dict) or len(value) > METADATA_ENTRIES_MAX:
            raise _InvalidFieldError("metadata is not a small map")
        total = 0
        pairs: list[tuple[str, str]] = []
        for key, item in value.items():
            if not isinstance(key, str) or not isinstance(item, str):
                raise _InvalidFieldError("metadata keys and values must be strings")
            total += len(key.encode()) + len(item.encode())
            pairs.append((key, item))
        if total > self._metadata_bytes_max:
            raise _InvalidFieldError("metadata too large")
        return tuple(sorted(pairs))


def validate_metadata(metadata: Metadata, metadata_bytes_max: int) -> None:
    """Raise ConfigError unless ``metadata`` fits the wire limits (for local input)."""
    total = 0
    if len(metadata) > METADATA_ENTRIES_MAX:
        raise ConfigError(f"metadata has more than {METADATA_ENTRIES_MAX} entries")
    for key, value in metadata:
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigError("metadata keys and values must be strings")
        total += len(key.encode()) + len(value.encode())
    if total > metadata_bytes_max:
        raise ConfigError(f"metadata is {total} bytes, more than {metadata_bytes_max}")


def validate_identity_fields(
    node_id: str, gossip_address: str, grpc_address: str, weight: float, zone: str
) -> None:
    """Raise ConfigError unless the local member's fields fit the wire limits."""
    try:
        _node_id(node_id)
        _address(gossip_address)
        _address(grpc_address, allow_empty=True)
        _weight(weight)
        _text(zone, ZONE_BYTES_MAX, allow_empty=True)
    except _InvalidFieldError as error:
        raise ConfigError(f"invalid local member: {error}") from None


# --------------------------------------------------------------------- helpers


def _to_wire(message: Message) -> list[object]:
    match message:
        case Ping():
            return [
                _KIND_PING,
                message.sequence,
                message.target_id,
                message.source_id,
                message.source_address,
            ]
        case Ack():
            return [_KIND_ACK, message.sequence, message.source_id]
        case Nack():
            return [_KIND_NACK, message.sequence, message.source_id]
        case PingRequest():
            return [
                _KIND_PING_REQUEST,
                message.sequence,
                message.target_id,
                message.target_address,
                message.source_id,
                message.source_address,
                message.want_nack,
            ]
        case Alive():
            return [_KIND_ALIVE, *_alive_fields(message)]
        case Suspect():
            return [_KIND_SUSPECT, message.node_id, message.incarnation, message.from_id]
        case Dead():
            return [_KIND_DEAD, message.node_id, message.incarnation, message.from_id]
        case PushPull():
            return [
                _KIND_PUSH_PULL,
                message.source_id,
                message.source_address,
                message.is_join,
                message.is_reply,
                [_record_fields(record) for record in message.members],
            ]
        case _:
            assert_never(message)


def _record_fields(record: MemberRecord) -> list[object]:
    return [_STATE_CODES[record.state], *_alive_fields(record.alive)]


def _alive_fields(alive: Alive) -> list[object]:
    return [
        alive.node_id,
        alive.incarnation,
        alive.gossip_address,
        alive.grpc_address,
        float(alive.weight),
        alive.zone,
        dict(alive.metadata),
    ]


def _length(item: list[object], length: int) -> None:
    if len(item) != length:
        raise _InvalidFieldError(f"expected {length} fields, got {len(item)}")


def _int(value: object, maximum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise _InvalidFieldError(f"bad integer {value!r}")
    return value


def _sequence(value: object) -> int:
    return _int(value, SEQUENCE_MAX)


def _incarnation(value: object) -> int:
    return _int(value, INCARNATION_MAX)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _InvalidFieldError("expected a bool")
    return value


def _text(value: object, bytes_max: int, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _InvalidFieldError("expected a string")
    if not value and not allow_empty:
        raise _InvalidFieldError("empty string")
    if len(value.encode()) > bytes_max:
        raise _InvalidFieldError("string too long")
    return value


def _node_id(value: object) -> NodeId:
    return NodeId(_text(value, NODE_ID_BYTES_MAX))


def _address(value: object, *, allow_empty: bool = False) -> str:
    return _text(value, ADDRESS_BYTES_MAX, allow_empty=allow_empty)


def _weight(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _InvalidFieldError("weight is not a number")
    weight = float(value)
    if not math.isfinite(weight) or not 0.0 <= weight <= WEIGHT_MAX:
        raise _InvalidFieldError("weight out of range")
    return weight
