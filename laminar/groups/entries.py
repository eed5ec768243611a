"""The log entries of the ``__groups`` topic: one record value each, msgpack.

Everything a consumer group remembers is one of these entries in the log of the
``__groups`` partition its id hashes to, applied in log order by
:class:`laminar.groups.state.GroupState`. An entry states what someone *asked*;
whether it takes effect is decided when it is applied, so every replica (and a
coordinator rebuilt after a failover) reaches the same verdict.

Encoding (a msgpack map, version 1; ``v`` and ``kind`` first)::

    {"v": 1, "kind": "join", "group": str, "member_id": str, "instance_id": str | nil,
     "weight": float, "topics": [str, ...], "pattern": str | nil,
     "session_timeout_ms": int, "rebalance_timeout_ms": int}
    {"v": 1, "kind": "leave", "group": str, "member_id": str,
     "reason": "left" | "expired" | "fenced"}
    {"v": 1, "kind": "partitions", "group": str, "counts": [[topic, count], ...]}
    {"v": 1, "kind": "own" | "release", "group": str, "topic": str, "partition": int,
     "member_id": str, "assignment_epoch": int}
    {"v": 1, "kind": "commit", "group": str, "topic": str, "partition": int,
     "next_offset": int, "metadata": str, "member_id": str, "member_epoch": int,
     "assignment_epoch": int}
    {"v": 1, "kind": "reset", "group": str, "offsets": [[topic, partition, next_offset], ...]}
    {"v": 1, "kind": "delete", "group": str}
    {"v": 1, "kind": "snapshot", "chunk_v": 1, "snapshot_id": str, "as_of": int,
     "applied_count": int, "index": int, "count": int, "bytes": int, "crc": int,
     "payload": bin}

A ``snapshot`` record is not an entry: it is one chunk of the partition's whole
state as of offset ``as_of`` (see :mod:`laminar.snapshots` and
:mod:`laminar.groups.replay`); :func:`decode_record` returns it as a
:class:`~laminar.snapshots.SnapshotChunk`, :func:`decode_entry` refuses it.

``partitions`` records the group's subscription resolved against the topic catalogue
(topic -> partition count): the coordinator appends it when the catalogue changes,
so the assignment every replica computes at apply time does not depend on when
each replica learnt of a new topic or partition.

Every field has a limit (the constants below); constructing an entry beyond one
raises :class:`~laminar.errors.InvalidInputError`, decoding bytes that are not a
valid entry raises :class:`~laminar.errors.GroupEntryFormatError`. A member id is
an opaque client-chosen string (a random UUID in practice); the pair (member id,
member epoch) names one incarnation of a member.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import msgpack

from laminar.errors import GroupEntryFormatError, InvalidInputError
from laminar.groups.assignment import (
    GROUP_PARTITIONS_MAX,
    check_group_id,
    check_member_key,
    check_weight,
)
from laminar.snapshots import SnapshotChunk

ENTRY_VERSION = 1
"""Encoding version written in every entry's ``v``; decoding refuses any other."""

ENTRY_BYTES_MAX = 1 << 20
"""Largest encoded entry; a reset of :data:`GROUP_PARTITIONS_MAX` partitions fits."""

METADATA_BYTES_MAX = 4096
"""Longest commit metadata string (UTF-8 bytes): a hint for humans and tools, not a store."""

SUBSCRIPTION_TOPICS_MAX = 1000
"""Most topics in one subscription list."""

PATTERN_BYTES_MAX = 255
"""Longest subscription pattern (a Python regular expression, full match)."""

TOPIC_NAME_BYTES_MAX = 255
"""Longest topic name accepted in an entry (the catalogue itself allows 200 characters)."""

PARTITION_INDEX_MAX = 9_999
"""Largest partition index (a topic has at most 10,000 partitions)."""

EPOCH_MAX = (1 << 63) - 1
"""Largest group, member or assignment epoch and largest offset (int64)."""

SESSION_TIMEOUT_MS_MIN = 100
SESSION_TIMEOUT_MS_MAX = 3_600_000
"""Session timeout bounds: 100 ms (simulations) to one hour."""

REBALANCE_TIMEOUT_MS_MIN = 100
REBALANCE_TIMEOUT_MS_MAX = 3_600_000
"""Bounds of the time an owner has to release a partition moved away from it."""

_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9._-]+")


class LeaveReason(enum.StrEnum):
    """Why a member left the group."""

    LEFT = "left"
    """The member said goodbye (``Consumer.close``)."""
    EXPIRED = "expired"
    """The coordinator heard nothing for ``session_timeout_ms``."""
    FENCED = "fenced"
    """The coordinator removed it: it kept a partition past the rebalance timeout, or
    a new incarnation with its instance id joined."""


def check_topic(topic: str) -> None:
    """Reject a topic name that no catalogue could hold (and that would break hashing)."""
    if not isinstance(topic, str) or not _TOPIC_PATTERN.fullmatch(topic):
        raise InvalidInputError(f"invalid topic name in group entry: {topic!r:.80}")
    if len(topic) > TOPIC_NAME_BYTES_MAX:
        raise InvalidInputError(f"topic name longer than {TOPIC_NAME_BYTES_MAX}: {topic:.80}")


def _check_int(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInputError(f"{name} must be an int in [{low}, {high}], got {value!r:.40}")


def _check_partition(topic: str, partition: int) -> None:
    check_topic(topic)
    _check_int("partition", partition, 0, PARTITION_INDEX_MAX)


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member consumes: an explicit topic list, or a pattern (full match).

    Exactly one of the two is given. A pattern is matched by the coordinator against
    the catalogue; the result is recorded in a :class:`Partitions` entry.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.pattern is None and not self.topics:
            raise InvalidInputError("a subscription needs topics or a pattern")
        if self.pattern is not None and self.topics:
            raise InvalidInputError("a subscription has either topics or a pattern, not both")
        if len(self.topics) > SUBSCRIPTION_TOPICS_MAX:
            raise InvalidInputError(
                f"a subscription lists at most {SUBSCRIPTION_TOPICS_MAX} topics"
            )
        for topic in self.topics:
            check_topic(topic)
        if len(set(self.topics)) != len(self.topics):
            raise InvalidInputError("a subscription lists each topic once")
        if self.pattern is not None:
            if not isinstance(self.pattern, str) or not self.pattern:
                raise InvalidInputError("a subscription pattern must be a non-empty string")
            if len(self.pattern.encode()) > PATTERN_BYTES_MAX:
                raise InvalidInputError(f"subscription pattern longer than {PATTERN_BYTES_MAX}")
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise InvalidInputError(f"invalid subscription pattern: {error}") from None

    def __str__(self) -> str:
        if self.pattern is not None:
            return f"pattern {self.pattern!r}"
        return f"topics {list(self.topics)}"

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (topics starting with ``__`` never are)."""
        if topic.startswith("__"):
            return False
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


@dataclass(frozen=True, slots=True)
class Join:
    """A member joins (or a static member's new incarnation replaces the old one)."""

    group_id: str
    member_id: str
    subscription: Subscription
    instance_id: str | None = None
    weight: float = 1.0
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        check_member_key(self.member_id)
        if self.instance_id is not None:
            check_member_key(self.instance_id)
        check_weight(self.weight)
        _check_int(
            "session_timeout_ms",
            self.session_timeout_ms,
            SESSION_TIMEOUT_MS_MIN,
            SESSION_TIMEOUT_MS_MAX,
        )
        _check_int(
            "rebalance_timeout_ms",
            self.rebalance_timeout_ms,
            REBALANCE_TIMEOUT_MS_MIN,
            REBALANCE_TIMEOUT_MS_MAX,
        )

    @property
    def key(self) -> str:
        """The member's assignment key: its instance id, else its member id."""
        return self.instance_id or self.member_id


@dataclass(frozen=True, slots=True)
class Leave:
    """A member leaves: it said so, its session expired, or it was fenced."""

    group_id: str
    member_id: str
    reason: LeaveReason

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        check_member_key(self.member_id)
        LeaveReason(self.reason)


@dataclass(frozen=True, slots=True)
class Partitions:
    """The group's subscription resolved against the catalogue: (topic, count) pairs."""

    group_id: str
    counts: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        total = 0
        for topic, count in self.counts:
            check_topic(topic)
            _check_int("partition count", count, 1, PARTITION_INDEX_MAX + 1)
            total += count
        if total > GROUP_PARTITIONS_MAX:
            raise InvalidInputError(f"a group consumes at most {GROUP_PARTITIONS_MAX} partitions")
        if len({topic for topic, _ in self.counts}) != len(self.counts):
            raise InvalidInputError("each topic appears once in a partitions entry")


@dataclass(frozen=True, slots=True)
class _Claim:
    """An entry about who owns one partition (:class:`Own`, :class:`Release`)."""

    group_id: str
    topic: str
    partition: int
    member_id: str
    assignment_epoch: int

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        _check_partition(self.topic, self.partition)
        check_member_key(self.member_id)
        _check_int("assignment_epoch", self.assignment_epoch, 1, EPOCH_MAX)


_ClaimT = TypeVar("_ClaimT", bound=_Claim)


@dataclass(frozen=True, slots=True)
class Own(_Claim):
    """The coordinator confirms ``member_id`` as the owner of one partition."""


@dataclass(frozen=True, slots=True)
class Release(_Claim):
    """The owner gives one partition up (after its final commit)."""


@dataclass(frozen=True, slots=True)
class Commit:
    """The owner's committed position: the next offset to read, plus a metadata note."""

    group_id: str
    topic: str
    partition: int
    next_offset: int
    member_id: str
    member_epoch: int
    assignment_epoch: int
    metadata: str = ""

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        _check_partition(self.topic, self.partition)
        _check_int("next_offset", self.next_offset, 0, EPOCH_MAX)
        check_member_key(self.member_id)
        _check_int("member_epoch", self.member_epoch, 1, EPOCH_MAX)
        _check_int("assignment_epoch", self.assignment_epoch, 1, EPOCH_MAX)
        _check_metadata(self.metadata)


@dataclass(frozen=True, slots=True)
class Reset:
    """Admin: set committed positions (any direction); only applies to an empty group."""

    group_id: str
    offsets: tuple[tuple[str, int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        check_group_id(self.group_id)
        if len(self.offsets) > GROUP_PARTITIONS_MAX:
            raise InvalidInputError(f"a reset names at most {GROUP_PARTITIONS_MAX} partitions")
        for topic, partition, next_offset in self.offsets:
            _check_partition(topic, partition)
            _check_int("next_offset", next_offset, 0, EPOCH_MAX)
        if len({(topic, partition) for topic, partition, _ in self.offsets}) != len(self.offsets):
            raise InvalidInputError("a reset names each partition once")


@dataclass(frozen=True, slots=True)
class Delete:
    """Admin: forget the group and its commits; only applies to an empty group."""

    group_id: str

    def __post_init__(self) -> None:
        check_group_id(self.group_id)


GroupEntry: TypeAlias = Join | Leave | Partitions | Own | Release | Commit | Reset | Delete
"""Every kind of ``__groups`` log entry."""


def _check_metadata(metadata: str) -> None:
    if not isinstance(metadata, str):
        raise InvalidInputError("commit metadata must be a string")
    if len(metadata.encode()) > METADATA_BYTES_MAX:
        raise InvalidInputError(f"commit metadata longer than {METADATA_BYTES_MAX} UTF-8 bytes")


def encode_entry(entry: GroupEntry) -> bytes:
    """The record value of ``entry`` (validated when it was constructed)."""
    body: dict[str, Any]
    match entry:
        case Join():
            body = {
                "kind": "join",
                "member_id": entry.member_id,
                "instance_id": entry.instance_id,
                "weight": float(entry.weight),
                "topics": list(entry.subscription.topics),
                "pattern": entry.subscription.pattern,
                "session_timeout_ms": entry.session_timeout_ms,
                "rebalance_timeout_ms": entry.rebalance_timeout_ms,
            }
        case Leave():
            body = {"kind": "leave", "member_id": entry.member_id, "reason": str(entry.reason)}
        case Partitions():
            body = {"kind": "partitions", "counts": [list(pair) for pair in entry.counts]}
        case Own() | Release():
            body = {
                "kind": "own" if isinstance(entry, Own) else "release",
                "topic": entry.topic,
                "partition": entry.partition,
                "member_id": entry.member_id,
                "assignment_epoch": entry.assignment_epoch,
            }
        case Commit():
            body = {
                "kind": "commit",
                "topic": entry.topic,
                "partition": entry.partition,
                "next_offset": entry.next_offset,
                "metadata": entry.metadata,
                "member_id": entry.member_id,
                "member_epoch": entry.member_epoch,
                "assignment_epoch": entry.assignment_epoch,
            }
        case Reset():
            body = {"kind": "reset", "offsets": [list(triple) for triple in entry.offsets]}
        case Delete():
            body = {"kind": "delete"}
    data: bytes = msgpack.packb({"v": ENTRY_VERSION, **body, "group": entry.group_id})
    assert len(data) <= ENTRY_BYTES_MAX, "a validated entry always fits ENTRY_BYTES_MAX"
    return data


def decode_entry(data: bytes) -> GroupEntry:
    """Parse one record value; :class:`GroupEntryFormatError` if it is not a valid entry
    (a snapshot chunk included: see :func:`decode_record`)."""
    record = decode_record(data)
    if isinstance(record, SnapshotChunk):
        raise GroupEntryFormatError("a snapshot chunk, not a group entry")
    return record


def decode_record(data: bytes) -> GroupEntry | SnapshotChunk:
    """Parse one ``__groups`` record value: an entry or a snapshot chunk;
    :class:`GroupEntryFormatError` if it is neither."""
    if len(data) > ENTRY_BYTES_MAX:
        raise GroupEntryFormatError(f"group entry of {len(data)} bytes > {ENTRY_BYTES_MAX}")
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise GroupEntryFormatError(f"group entry is not msgpack: {error}") from None
    if not isinstance(body, dict):
        raise GroupEntryFormatError(f"group entry is not a map: {type(body).__name__}")
    if body.get("v") != ENTRY_VERSION:
        raise GroupEntryFormatError(f"unsupported group entry version {body.get('v')!r:.20}")
    if body.get("kind") == "snapshot":
        try:
            return SnapshotChunk.from_fields(body)
        except InvalidInputError as error:
            raise GroupEntryFormatError(f"invalid snapshot chunk: {error}") from None
    decoder = _DECODERS.get(body.get("kind"))  # type: ignore[arg-type]
    if decoder is None:
        raise GroupEntryFormatError(f"unknown group entry kind {body.get('kind')!r:.40}")
    try:
        return decoder(_Fields(body))
    except InvalidInputError as error:
        raise GroupEntryFormatError(f"invalid {body['kind']} entry: {error}") from None


def encode_snapshot_chunk(chunk: SnapshotChunk) -> bytes:
    """The record value of one snapshot chunk (validated when it was constructed)."""
    data: bytes = msgpack.packb({"v": ENTRY_VERSION, "kind": "snapshot", **chunk.fields()})
    assert len(data) <= ENTRY_BYTES_MAX, "a chunk always fits ENTRY_BYTES_MAX"
    return data


class _Fields:
    """Typed access to a decoded map; a missing or mistyped field is a format error."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body

    def _get(self, name: str, kinds: tuple[type, ...]) -> Any:
        if name not in self.body:
            raise InvalidInputError(f"missing field {name!r}")
        value = self.body[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise InvalidInputError(f"field {name!r} has type {type(value).__name__}")
        return value

    def text(self, name: str) -> str:
        value: str = self._get(name, (str,))
        return value

    def optional_text(self, name: str) -> str | None:
        value: str | None = self._get(name, (str, type(None)))
        return value

    def integer(self, name: str) -> int:
        value: int = self._get(name, (int,))
        return value

    def number(self, name: str) -> float:
        value = float(self._get(name, (int, float)))
        if not math.isfinite(value):
            raise InvalidInputError(f"field {name!r} is not finite")
        return value

    def rows(self, name: str, width: int) -> list[list[Any]]:
        value: list[Any] = self._get(name, (list,))
        if any(not isinstance(row, list) or len(row) != width for row in value):
            raise InvalidInputError(f"field {name!r} must hold lists of {width}")
        return value

    def strings(self, name: str) -> list[str]:
        value: list[Any] = self._get(name, (list,))
        if any(not isinstance(item, str) for item in value):
            raise InvalidInputError(f"field {name!r} must hold strings")
        return value

    def group(self) -> str:
        return self.text("group")


def _decode_join(fields: _Fields) -> Join:
    topics = fields.strings("topics")
    return Join(
        group_id=fields.group(),
        member_id=fields.text("member_id"),
        subscription=Subscription(tuple(topics), fields.optional_text("pattern")),
        instance_id=fields.optional_text("instance_id"),
        weight=fields.number("weight"),
        session_timeout_ms=fields.integer("session_timeout_ms"),
        rebalance_timeout_ms=fields.integer("rebalance_timeout_ms"),
    )


def _decode_leave(fields: _Fields) -> Leave:
    reason = fields.text("reason")
    if reason not in LeaveReason.__members__.values():
        raise InvalidInputError(f"unknown leave reason {reason!r:.20}")
    return Leave(fields.group(), fields.text("member_id"), LeaveReason(reason))


def _decode_partitions(fields: _Fields) -> Partitions:
    return Partitions(fields.group(), tuple((row[0], row[1]) for row in fields.rows("counts", 2)))


def _claim_decoder(kind: type[_ClaimT]) -> Callable[[_Fields], _ClaimT]:
    """The decoder of :class:`Own` or :class:`Release`: the same fields."""

    def decode(fields: _Fields) -> _ClaimT:
        return kind(
            fields.group(),
            fields.text("topic"),
            fields.integer("partition"),
            fields.text("member_id"),
            fields.integer("assignment_epoch"),
        )

    return decode


def _decode_commit(fields: _Fields) -> Commit:
    return Commit(
        group_id=fields.group(),
        topic=fields.text("topic"),
        partition=fields.integer("partition"),
        next_offset=fields.integer("next_offset"),
        member_id=fields.text("member_id"),
        member_epoch=fields.integer("member_epoch"),
        assignment_epoch=fields.integer("assignment_epoch"),
        metadata=fields.text("metadata"),
    )


def _decode_reset(fields: _Fields) -> Reset:
    return Reset(
        fields.group(), tuple((row[0], row[1], row[2]) for row in fields.rows("offsets", 3))
    )


def _decode_delete(fields: _Fields) -> Delete:
    return Delete(fields.group())


_DECODERS: dict[str, Callable[[_Fields], GroupEntry]] = {
    "join": _decode_join,
    "leave": _decode_leave,
    "partitions": _decode_partitions,
    "own": _claim_decoder(Own),
    "release": _claim_decoder(Release),
    "commit": _decode_commit,
    "reset": _decode_reset,
    "delete": _decode_delete,
}
