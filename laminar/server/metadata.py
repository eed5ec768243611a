"""Cluster metadata: the topic catalogue, kept in the internal partition ``__cluster/0``.

Every change is a command record (msgpack, versioned) appended to ``__cluster/0``
through its leader; every node applies the committed records in offset order to a
local :class:`MetadataState`, so all nodes converge on the same catalogue. Nodes
that hold a replica of ``__cluster/0`` read it locally; the others long-poll it
from a node that does (see :mod:`laminar.server.node`).

Commands::

    {"v": 1, "op": "create_topic", "id": str, "name": str, "partitions": int,
     "replication_factor": int, "retention_bytes": int, "retention_ms": int,
     "replicas": [[node id, ...], ...]}        # founding replicas per partition
    {"v": 1, "op": "delete_topic", "id": str, "name": str}

Applying is deterministic and idempotent: creating an existing topic or deleting a
missing one changes nothing (the request that lost the race is told so, because its
``id`` is not the one that took effect). A record that does not decode is skipped
with an error log: it was validated before it was proposed, so it can only come
from a newer version of Laminar.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import msgpack

from laminar.errors import InvalidTopicError
from laminar.records import decode_records, encode_batch, iter_batches

_LOG = logging.getLogger(__name__)

CLUSTER_TOPIC = "__cluster"
METADATA_KEY = (CLUSTER_TOPIC, 0)
METADATA_REPLICATION_MAX = 3
_VERSION = 1

TOPIC_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
PARTITIONS_MAX = 10_000
REPLICATION_FACTOR_MAX = 7


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What a user asks for when creating a topic."""

    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int = -1  # -1: unlimited
    retention_ms: int = -1

    def validate(self) -> None:
        """Raise :class:`InvalidTopicError` naming the first bad field."""
        validate_topic_name(self.name)
        if not 1 <= self.partitions <= PARTITIONS_MAX:
            raise InvalidTopicError(
                f"partitions must be in [1, {PARTITIONS_MAX}], got {self.partitions}"
            )
        if not 1 <= self.replication_factor <= REPLICATION_FACTOR_MAX:
            raise InvalidTopicError(
                f"replication factor must be in [1, {REPLICATION_FACTOR_MAX}], "
                f"got {self.replication_factor}"
            )
        for field_name in ("retention_bytes", "retention_ms"):
            value = getattr(self, field_name)
            if value < -1 or value == 0:
                raise InvalidTopicError(f"{field_name} must be positive or -1, got {value}")


def validate_topic_name(name: str) -> None:
    if name.startswith("__"):
        raise InvalidTopicError(f"topic names starting with '__' are internal: {name!r}")
    if not TOPIC_NAME_PATTERN.match(name):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: 1-200 characters from [A-Za-z0-9._-], "
            "starting with a letter or digit"
        )


@dataclass(frozen=True, slots=True)
class TopicState:
    spec: TopicSpec
    founding_replicas: tuple[tuple[str, ...], ...]
    command_id: str
    created_offset: int


@dataclass(frozen=True, slots=True)
class Change:
    """One applied command: ``kind`` is ``created`` or ``deleted``."""

    kind: str
    topic: TopicState
    offset: int


class MetadataState:
    """The catalogue as of ``applied_offset`` (the next metadata offset to apply)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}
        self.applied_offset = 0
        self.applied_ids: dict[str, int] = {}  # recent command ids -> offset

    def apply(self, data: bytes) -> list[Change]:
        """Apply the batches in ``data`` (a read of ``__cluster/0``) past the applied offset."""
        changes: list[Change] = []
        for position, header in iter_batches(data, verify=False):
            if header.next_offset <= self.applied_offset:
                continue
            if header.base_offset != self.applied_offset:
                raise AssertionError(
                    f"metadata gap: applied up to {self.applied_offset}, "
                    f"next batch starts at {header.base_offset}"
                )
            if not header.is_control:
                batch = data[position : position + header.length]
                for record in decode_records(batch):
                    change = self._apply_record(record.value or b"", record.offset)
                    if change is not None:
                        changes.append(change)
            self.applied_offset = header.next_offset
        return changes

    def _apply_record(self, value: bytes, offset: int) -> Change | None:
        try:
            command = msgpack.unpackb(value)
            if not isinstance(command, dict) or command.get("v") != _VERSION:
                raise ValueError(f"unsupported command {command!r:.100}")
            op = command["op"]
            command_id = str(command["id"])
            self.applied_ids[command_id] = offset
            if len(self.applied_ids) > 10_000:
                del self.applied_ids[next(iter(self.applied_ids))]
            if op == "create_topic":
                spec = TopicSpec(
                    name=str(command["name"]),
                    partitions=int(command["partitions"]),
                    replication_factor=int(command["replication_factor"]),
                    retention_bytes=int(command["retention_bytes"]),
                    retention_ms=int(command["retention_ms"]),
                )
                if spec.name in self.topics:
                    return None
                replicas = tuple(tuple(str(n) for n in group) for group in command["replicas"])
                if len(replicas) != spec.partitions:
                    raise ValueError("one replica list per partition expected")
                topic = TopicState(spec, replicas, command_id, offset)
                self.topics[spec.name] = topic
                return Change("created", topic, offset)
            if op == "delete_topic":
                deleted = self.topics.pop(str(command["name"]), None)
                return None if deleted is None else Change("deleted", deleted, offset)
            raise ValueError(f"unknown op {op!r}")
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as error:
            _LOG.error("skipping metadata record at offset %d: %s", offset, error)
            return None


def create_topic_command(
    spec: TopicSpec, founding_replicas: list[tuple[str, ...]], command_id: str
) -> bytes:
    """The batch that creates a topic (validated by the caller)."""
    return _command(
        {
            "v": _VERSION,
            "op": "create_topic",
            "id": command_id,
            "name": spec.name,
            "partitions": spec.partitions,
            "replication_factor": spec.replication_factor,
            "retention_bytes": spec.retention_bytes,
            "retention_ms": spec.retention_ms,
            "replicas": [list(group) for group in founding_replicas],
        }
    )


def delete_topic_command(name: str, command_id: str) -> bytes:
    return _command({"v": _VERSION, "op": "delete_topic", "id": command_id, "name": name})


def _command(command: dict[str, object]) -> bytes:
    return encode_batch([msgpack.packb(command)])
