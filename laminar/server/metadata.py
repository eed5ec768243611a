"""Cluster metadata: the topic catalogue, kept in the internal partition ``__cluster/0``.

Every change is a command record (msgpack, versioned) appended to ``__cluster/0``
through its leader; every node applies the committed records in offset order to a
local :class:`MetadataState`, so all nodes converge on the same catalogue. Nodes
that hold a replica of ``__cluster/0`` read it locally; the others long-poll it
from a node that does (see :mod:`laminar.server.node`).

Commands::

    {"v": 1, "op": "create_topic", "id": str, "name": str, "partitions": int,
     "replication_factor": int, "retention_bytes": int, "retention_ms": int,
     "replicas": [[node id, ...], ...],        # founding replicas per partition
     "defaults": [field name, ...],            # set by the cluster's defaults (optional)
     "cleanup_policy": str, "delete_retention_ms": int, "min_compaction_lag_ms": int,
     "max_compaction_lag_ms": int, "min_cleanable_dirty_ratio": float}   # (optional)
    {"v": 1, "op": "delete_topic", "id": str, "name": str}
    {"v": 1, "op": "alter_topic", "id": str, "name": str, "topic_id": str,
     "set": {field name: value, ...},          # the settings that change
     "reset": [field name, ...]}               # those of "set" that are cluster defaults
    {"v": 1, "op": "add_partitions", "id": str, "name": str, "topic_id": str,
     "from": int, "partitions": int,           # the count before, and after
     "replicas": [[node id, ...], ...]}        # founding replicas of each new partition
    {"v": 1, "op": "maintenance", "id": str, "node": str, "enter": bool}
    {"v": 1, "op": "create_acls", "id": str, "acls": [[principal, operation,
     resource type, resource name, pattern, permission], ...]}
    {"v": 1, "op": "delete_acls", "id": str, "acls": [[...], ...]}   # exact ACLs
    {"v": 1, "op": "snapshot", "chunk_v": 1, "snapshot_id": str, "as_of": int, ...}

A ``snapshot`` record is one chunk of the whole state as of offset ``as_of`` (see
:mod:`laminar.snapshots`): the catalogue, and the last :data:`TOMBSTONES_MAX`
deletions (so that a node rebuilding from a snapshot sees the deletions it missed,
as a replay would have shown them). The leader of ``__cluster/0`` writes one when
the log since the last has grown enough, and every replica then deletes its log
below ``as_of``. A state whose log starts past what it applied (a restart after
that, a follower sent the leader's log start, a node long-polling a peer whose log
moved on) *seeks*: it reads from the log start to the first complete snapshot as
of an offset at or after it, restores it, and applies the log from its ``as_of``.
Restoring reports, as changes, what a replay from the state's previous applied
offset would have: the topics created and deleted at or after it (in offset
order), the deletion of any topic it held that is gone, and each node whose
maintenance state differs; for a topic it still holds (the same creation) that
changed, the additions of partitions it missed (at their offsets, kept in the
snapshot) and an ``altered``, never a deletion. ``applied_ids`` (used
only by the proposer, right after its command applies) is not in snapshots.

Applying is deterministic and idempotent: creating an existing topic or deleting a
missing one changes nothing (the request that lost the race is told so, because its
``id`` is not the one that took effect). ``alter_topic`` and ``add_partitions`` name
the topic by its creation command (``topic_id``): once the topic was deleted and
created again under its name, they change nothing. Each applies whole or not at all
(the new settings are validated as one), once per command id; ``add_partitions``
only from the count its proposer saw (``from``), so of two racing ones the second
changes nothing. A record that does not decode is skipped
with an error log: it was validated before it was proposed, so it can only come
from a newer version of Laminar (a node that predates ``maintenance`` skips it
so: it keeps re-placing a node in maintenance after its own move grace).

**Maintenance** (``laminar cluster maintenance enter|exit NODE``): the nodes in
:attr:`MetadataState.maintenance` give up their leaderships and take no new ones,
and placement keeps their replicas while they are down for up to
``maintenance_grace_ms`` instead of ``replica_move_grace_ms``
(:func:`laminar.server.rules.placement_members`). Being in the replicated catalogue,
the state holds while the node is down and is cleared only by ``exit``.

**ACLs** (``laminar acl``, :mod:`laminar.security.acl`): :attr:`MetadataState.acls`,
in creation order; ``acls_version`` changes with every change of them, so that the
node's authorizer rebuilds its index when it changes. A delete names exact ACLs
(the proposer resolved its filters); creating an existing ACL or deleting a missing
one changes nothing. Snapshots keep them (key ``acls``, absent from a node that
predates them: none).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from laminar.errors import InvalidInputError, InvalidTopicError
from laminar.records import decode_records, encode_batch, iter_batches
from laminar.security.acl import Acl
from laminar.snapshots import CompleteSnapshot, SnapshotAssembler, SnapshotChunk, split_snapshot
from laminar.topic_settings import (
    ALTERABLE_SETTINGS,
    CLEANUP_POLICIES,
    LATER_SETTINGS,
    TOPIC_SETTINGS,
)

_LOG = logging.getLogger(__name__)

CLUSTER_TOPIC = "__cluster"
METADATA_KEY = (CLUSTER_TOPIC, 0)
METADATA_REPLICATION_MAX = 3
_VERSION = 1

TOPIC_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
PARTITIONS_MAX = 10_000
REPLICATION_FACTOR_MAX = 7
SETTING_MS_MAX = 1 << 62
"""Largest duration setting (ms) a topic takes: far beyond any use, within int64."""

SNAPSHOT_VERSION = 1
"""Version of the snapshot payload (:meth:`MetadataState.snapshot_payload`)."""

TOMBSTONES_MAX = 10_000
"""Deleted topics a snapshot remembers (name, partitions, offsets): a node that was
away for fewer deletions than this rebuilds from a snapshot and deletes its
replicas of them as a replay would; one away longer still deletes those of every
topic it held that is gone, but not of topics it never learnt about (an orphan
left on disk, refused by the peers). About 100 bytes each."""

IDS_KEPT_MAX = 10_000
"""Recent command ids kept (for the proposer's check of which create won)."""

COUNTS_KEPT_MAX = 1024
"""Batch ends whose applied-record count is kept for a snapshot's paired check."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What a user asks for when creating a topic (and changes by altering it)."""

    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int = -1  # -1: unlimited
    retention_ms: int = -1
    defaults: tuple[str, ...] = ()
    """The fields (of :data:`TOPIC_SETTINGS`) the cluster's defaults set because the
    request left them out (or an alter reset them)."""
    cleanup_policy: str = "delete"
    """One of :data:`CLEANUP_POLICIES`: ``compact`` keeps the newest record per key."""
    delete_retention_ms: int = 86_400_000
    """How long a tombstone (null value) stays readable after compaction covers it."""
    min_compaction_lag_ms: int = 0
    """Records younger than this stay uncompacted."""
    max_compaction_lag_ms: int = -1
    """-1: none; else a record is compacted at the latest this long after it was written."""
    min_cleanable_dirty_ratio: float = 0.5
    """Compact when the bytes written since the last compaction reach this share of the log."""

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    def settings(self) -> dict[str, object]:
        """Every setting by its field name (:data:`TOPIC_SETTINGS`)."""
        return {name: getattr(self, name) for name in TOPIC_SETTINGS}

    def validate(self) -> None:
        """Raise :class:`InvalidTopicError` naming the first bad field."""
        validate_topic_name(self.name)
        if not 1 <= self.partitions <= PARTITIONS_MAX:
            raise InvalidTopicError(
                f"partitions must be in [1, {PARTITIONS_MAX}], got {self.partitions}"
            )
        if not 1 <= self.replication_factor <= REPLICATION_FACTOR_MAX:
            raise InvalidTopicError(
                f"replication_factor must be in [1, {REPLICATION_FACTOR_MAX}], "
                f"got {self.replication_factor}"
            )
        for field_name in ("retention_bytes", "retention_ms"):
            value = getattr(self, field_name)
            if value < -1 or value == 0:
                raise InvalidTopicError(f"{field_name} must be positive or -1, got {value}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidTopicError(
                f"cleanup_policy must be one of {', '.join(CLEANUP_POLICIES)}, "
                f"got {self.cleanup_policy!r:.40}"
            )
        for field_name in ("delete_retention_ms", "min_compaction_lag_ms"):
            value = getattr(self, field_name)
            if not 0 <= value <= SETTING_MS_MAX:
                raise InvalidTopicError(
                    f"{field_name} must be in [0, {SETTING_MS_MAX}], got {value}"
                )
        max_lag = self.max_compaction_lag_ms
        if max_lag != -1 and not max(1, self.min_compaction_lag_ms) <= max_lag <= SETTING_MS_MAX:
            raise InvalidTopicError(
                "max_compaction_lag_ms must be -1 or in "
                f"[max(1, min_compaction_lag_ms), {SETTING_MS_MAX}], got {max_lag}"
            )
        ratio = self.min_cleanable_dirty_ratio
        if not 0 < ratio <= 1:  # NaN fails too
            raise InvalidTopicError(f"min_cleanable_dirty_ratio must be in (0, 1], got {ratio}")
        unknown = [name for name in self.defaults if name not in TOPIC_SETTINGS]
        if unknown:
            raise InvalidTopicError(f"defaults names unknown settings: {', '.join(unknown)}")


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
    """Per partition, the replicas that founded it (the new ones' own when added)."""
    command_id: str
    """The id of the command that created the topic: its identity across a delete
    and re-create of the same name (``alter_topic`` and ``add_partitions`` name it)."""
    created_offset: int
    additions: tuple[tuple[int, int], ...] = ()
    """Each ``add_partitions`` applied: ``(metadata offset, first new partition)``,
    oldest first, so that a node rebuilding from a snapshot founds them at the
    offsets a replay would have (:attr:`Change.founded_partitions`)."""

    @property
    def created_partitions(self) -> int:
        """The partition count the topic was created with."""
        return self.additions[0][1] if self.additions else self.spec.partitions

    def as_of_partitions(self, partitions: int) -> TopicState:
        """This topic as it was with its first ``partitions`` partitions."""
        return replace(
            self,
            spec=replace(self.spec, partitions=partitions),
            founding_replicas=self.founding_replicas[:partitions],
            additions=tuple(added for added in self.additions if added[1] < partitions),
        )


@dataclass(frozen=True, slots=True)
class Change:
    """One applied command: ``kind`` is ``created``, ``deleted``, ``altered`` (the
    settings changed: ``previous`` holds the topic before) or ``partitions_added``
    (partitions ``previous.spec.partitions`` up to ``topic.spec.partitions`` are new:
    they are founded as a new topic's)."""

    kind: str
    topic: TopicState
    offset: int
    previous: TopicState | None = None

    @property
    def founded_partitions(self) -> range:
        """The partitions this change founds (none for ``altered`` and ``deleted``)."""
        if self.kind == "created":
            return range(self.topic.created_partitions)
        if self.kind == "partitions_added":
            assert self.previous is not None
            return range(self.previous.spec.partitions, self.topic.spec.partitions)
        return range(0)


@dataclass(frozen=True, slots=True)
class MaintenanceChange:
    """A node entered (``enter``) or left maintenance."""

    node_id: str
    enter: bool
    offset: int


MetadataChange = Change | MaintenanceChange

NODE_ID_BYTES_MAX = 64
"""Longest node id a maintenance command may name (as membership allows)."""


class MetadataState:
    """The catalogue as of ``applied_offset`` (the next metadata offset to apply)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicState] = {}
        self.applied_offset = 0
        self.read_offset = 0
        """The next offset to read: ``applied_offset``, or ahead of it while seeking."""
        self.applied_ids: dict[str, int] = {}  # recent command ids -> offset
        self.refused_ids: dict[str, str] = {}
        """Recent command ids that applied as nothing because the change they make is
        no longer valid (an alter that a concurrent one made invalid) -> why; for the
        proposer, like :attr:`applied_ids`, and not in snapshots."""
        self.applied_count = 0
        """Records applied (snapshot chunks not counted): a snapshot's paired check."""
        self.tombstones: deque[Change] = deque(maxlen=TOMBSTONES_MAX)
        """The most recent deletions, oldest first."""
        self.maintenance: dict[str, int] = {}
        """Nodes in maintenance -> the offset of the command that put them there."""
        self.acls: dict[Acl, int] = {}
        """The cluster's ACLs -> the offset of the command that created each."""
        self.acls_version = 0
        """Changes whenever :attr:`acls` does."""
        self.bytes_since_snapshot = 0
        self.last_snapshot_bytes = 0
        self._seek: SnapshotAssembler | None = None
        self._seek_start = 0
        self._follow = SnapshotAssembler(keep_payload=False)
        self._counts_at: OrderedDict[int, int] = OrderedDict({0: 0})
        self._completed: list[CompleteSnapshot] = []

    @property
    def seeking(self) -> bool:
        return self._seek is not None

    def rebuild_from(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``, past what was applied: seek the
        first complete snapshot as of ``start_offset`` or later (module docstring)."""
        assert start_offset > self.applied_offset, (start_offset, self.applied_offset)
        _LOG.info(
            "metadata log starts at %d past the applied %d: rebuilding from a snapshot",
            start_offset,
            self.applied_offset,
        )
        self._seek = SnapshotAssembler(keep_payload=True)
        self._seek_start = start_offset
        self.read_offset = start_offset

    def take_snapshots(self) -> list[CompleteSnapshot]:
        """Snapshots completed by :meth:`apply` since the last call (the log below
        their ``as_of_offset`` may be deleted)."""
        completed, self._completed = self._completed, []
        return completed

    def apply(self, data: bytes) -> list[MetadataChange]:
        """Apply the batches in ``data`` (a read of ``__cluster/0``) past the read offset."""
        changes: list[MetadataChange] = []
        for position, header in iter_batches(data, verify=False):
            if header.next_offset <= self.read_offset:
                continue
            if header.base_offset != self.read_offset:
                raise AssertionError(
                    f"metadata gap: read up to {self.read_offset}, "
                    f"next batch starts at {header.base_offset}"
                )
            records = []
            if not header.is_control:
                records = decode_records(data[position : position + header.length])
            if self._seek is not None:
                for record in records:
                    restored = self._seek_record(record.value or b"", record.offset)
                    if restored is not None:
                        changes.extend(restored)
                        return changes  # the rest of this read is past the new read offset
                self.read_offset = header.next_offset
                continue
            for record in records:
                value = record.value or b""
                self.bytes_since_snapshot += len(value)
                change = self._apply_record(value, record.offset)
                if change is not None:
                    changes.append(change)
            self.applied_offset = self.read_offset = header.next_offset
            self._counts_at[self.applied_offset] = self.applied_count
            if len(self._counts_at) > COUNTS_KEPT_MAX:
                self._counts_at.popitem(last=False)
        return changes

    def _apply_record(self, value: bytes, offset: int) -> MetadataChange | None:
        try:
            command = msgpack.unpackb(value)
            if not isinstance(command, dict) or command.get("v") != _VERSION:
                raise ValueError(f"unsupported command {command!r:.100}")
            op = command["op"]
            if op == "snapshot":
                self._follow_chunk(SnapshotChunk.from_fields(command), offset)
                return None
            self.applied_count += 1
            command_id = str(command["id"])
            seen = command_id in self.applied_ids
            self.applied_ids[command_id] = offset
            if len(self.applied_ids) > IDS_KEPT_MAX:
                del self.applied_ids[next(iter(self.applied_ids))]
            if op == "create_topic":
                return self._apply_create(command, command_id, offset)
            if op == "alter_topic":
                return self._apply_alter(command, seen, offset)
            if op == "add_partitions":
                return self._apply_add_partitions(command, seen, offset)
            if op == "delete_topic":
                deleted = self.topics.pop(str(command["name"]), None)
                if deleted is None:
                    return None
                change = Change("deleted", deleted, offset)
                self.tombstones.append(Change("deleted", _tombstone(deleted), offset))
                return change
            if op == "maintenance":
                return self._apply_maintenance(str(command["node"]), bool(command["enter"]), offset)
            if op in ("create_acls", "delete_acls"):
                self._apply_acls(op == "create_acls", command["acls"], offset)
                return None
            raise ValueError(f"unknown op {op!r}")
        except (
            ValueError,
            KeyError,
            TypeError,
            InvalidInputError,
            msgpack.UnpackException,
        ) as error:
            _LOG.error("skipping metadata record at offset %d: %s", offset, error)
            return None

    def _apply_create(self, command: dict[str, Any], command_id: str, offset: int) -> Change | None:
        spec = TopicSpec(
            name=str(command["name"]),
            partitions=int(command["partitions"]),
            replication_factor=int(command["replication_factor"]),
            retention_bytes=int(command["retention_bytes"]),
            retention_ms=int(command["retention_ms"]),
            defaults=tuple(str(f) for f in command.get("defaults", ())),
            **_extra_settings(command),
        )
        if spec.name in self.topics:
            return None
        replicas = tuple(tuple(str(n) for n in group) for group in command["replicas"])
        if len(replicas) != spec.partitions:
            raise ValueError("one replica list per partition expected")
        topic = TopicState(spec, replicas, command_id, offset)
        self.topics[spec.name] = topic
        return Change("created", topic, offset)

    def _altered_topic(self, command: dict[str, Any], seen: bool) -> TopicState | None:
        """The topic an ``alter_topic``/``add_partitions`` command names, if it applies:
        not a command id applied before, and the topic the proposer saw (not one
        deleted and created again under the same name since)."""
        topic = self.topics.get(str(command["name"]))
        if seen or topic is None or topic.command_id != str(command["topic_id"]):
            return None
        return topic

    def _apply_alter(self, command: dict[str, Any], seen: bool, offset: int) -> Change | None:
        changed = {str(name): value for name, value in command["set"].items()}
        reset = {str(name) for name in command.get("reset", ())}
        unknown = sorted(set(changed) - set(ALTERABLE_SETTINGS) | reset - set(changed))
        if unknown:
            raise ValueError(f"alter_topic names unknown settings {unknown}")
        topic = self._altered_topic(command, seen)
        if topic is None:
            return None
        defaults = [name for name in topic.spec.defaults if name not in changed]
        defaults += [name for name in ALTERABLE_SETTINGS if name in reset]
        spec = replace(topic.spec, **_typed_settings(changed), defaults=tuple(defaults))
        try:
            spec.validate()  # all or nothing
        except InvalidTopicError as error:  # valid when proposed: a concurrent alter
            self._refuse(str(command["id"]), offset, error)
            return None
        if spec == topic.spec:
            return None
        altered = replace(topic, spec=spec)
        self.topics[spec.name] = altered
        return Change("altered", altered, offset, previous=topic)

    def _apply_add_partitions(
        self, command: dict[str, Any], seen: bool, offset: int
    ) -> Change | None:
        first, partitions = int(command["from"]), int(command["partitions"])
        replicas = tuple(tuple(str(n) for n in group) for group in command["replicas"])
        if len(replicas) != partitions - first or first < 1:
            raise ValueError("one replica list per new partition expected")
        topic = self._altered_topic(command, seen)
        if topic is None or topic.spec.partitions != first:
            return None  # lost a race: the count is no longer the one it grows from
        spec = replace(topic.spec, partitions=partitions)
        try:
            spec.validate()
        except InvalidTopicError as error:
            self._refuse(str(command["id"]), offset, error)
            return None
        grown = replace(
            topic,
            spec=spec,
            founding_replicas=topic.founding_replicas + replicas,
            additions=(*topic.additions, (offset, first)),
        )
        self.topics[spec.name] = grown
        return Change("partitions_added", grown, offset, previous=topic)

    def _refuse(self, command_id: str, offset: int, error: InvalidTopicError) -> None:
        _LOG.warning(
            "metadata command %s at offset %d changes nothing: %s", command_id, offset, error
        )
        self.refused_ids[command_id] = str(error)
        if len(self.refused_ids) > IDS_KEPT_MAX:
            del self.refused_ids[next(iter(self.refused_ids))]

    def _apply_maintenance(self, node_id: str, enter: bool, offset: int) -> MetadataChange | None:
        if enter == (node_id in self.maintenance):
            return None  # already so: idempotent
        if enter:
            self.maintenance[node_id] = offset
        else:
            del self.maintenance[node_id]
        _LOG.info("node %s %s maintenance", node_id, "entered" if enter else "left")
        return MaintenanceChange(node_id, enter, offset)

    def _apply_acls(self, create: bool, fields: list[list[Any]], offset: int) -> None:
        acls = [Acl.from_fields(acl) for acl in fields]  # all or none: validate first
        changed = False
        for acl in acls:
            if create and acl not in self.acls:
                self.acls[acl] = offset
                changed = True
            elif not create and acl in self.acls:
                del self.acls[acl]
                changed = True
        if changed:
            self.acls_version += 1
            _LOG.info("ACLs %s: %d now", "created" if create else "deleted", len(self.acls))

    def _follow_chunk(self, chunk: SnapshotChunk, offset: int) -> None:
        complete = self._follow.add(chunk, offset)
        if complete is None:
            return
        count = self._counts_at.get(complete.as_of_offset)
        if count is not None and count != complete.applied_count:
            # The snapshot and this node's own replay disagree: keep the log (the
            # prefix is not deleted below it), and the next snapshot is due as before.
            _LOG.error(
                "metadata snapshot at %d as of %d holds %d records, this node applied %d: "
                "ignored, the log is kept",
                offset,
                complete.as_of_offset,
                complete.applied_count,
                count,
            )
            return
        self.bytes_since_snapshot = 0
        self.last_snapshot_bytes = complete.snapshot_bytes
        self._completed.append(complete)

    def _seek_record(self, value: bytes, offset: int) -> list[MetadataChange] | None:
        """A record read while seeking; the changes of a restore once one completes."""
        assert self._seek is not None
        try:
            command = msgpack.unpackb(value)
            if not isinstance(command, dict) or command.get("op") != "snapshot":
                return None
            complete = self._seek.add(SnapshotChunk.from_fields(command), offset)
        except (ValueError, TypeError, InvalidInputError, msgpack.UnpackException):
            return None  # reported when applied
        if complete is None or complete.as_of_offset < self._seek_start:
            return None
        assert complete.payload is not None
        try:
            topics, tombstones, applied_count, maintenance, acls = _restore_payload(
                complete.payload
            )
        except (ValueError, KeyError, TypeError, InvalidInputError, msgpack.UnpackException) as e:
            _LOG.error("metadata snapshot at %d does not restore: %s", offset, e)
            return None
        changes: list[MetadataChange] = []
        changes += self._restore_changes(topics, tombstones)
        changes += [
            MaintenanceChange(node_id, node_id in maintenance, complete.as_of_offset)
            for node_id in sorted(maintenance.keys() ^ self.maintenance.keys())
        ]
        self.maintenance = maintenance
        if acls != self.acls:
            self.acls = acls
            self.acls_version += 1
        self.topics = topics
        self.tombstones = deque(tombstones, maxlen=TOMBSTONES_MAX)
        self.applied_count = applied_count
        self.applied_ids = {}
        self.applied_offset = self.read_offset = complete.as_of_offset
        self._counts_at = OrderedDict({self.applied_offset: applied_count})
        self._seek = None
        _LOG.info(
            "metadata restored from the snapshot as of %d (%d topics, %d bytes)",
            complete.as_of_offset,
            len(topics),
            complete.snapshot_bytes,
        )
        return changes

    def _restore_changes(
        self, topics: dict[str, TopicState], tombstones: list[Change]
    ) -> list[Change]:
        """What a replay from ``applied_offset`` to the snapshot would have reported:
        the deletions since (those remembered, and of every held topic that is gone),
        the topics not held (created, then each addition of partitions), and for a
        held topic that changed (the same creation): its additions of partitions and
        an ``altered``; in offset order."""
        since = self.applied_offset
        changes = [change for change in tombstones if change.offset >= since]
        reported = {(c.topic.spec.name, c.topic.command_id) for c in changes}
        for name, held in self.topics.items():
            topic = topics.get(name)
            if topic == held:
                continue
            if topic is not None and topic.command_id == held.command_id:
                changes += _changes_since(held, topic, since)
            elif (name, held.command_id) not in reported:
                changes.append(Change("deleted", held, since))
        for name, topic in topics.items():
            held_topic = self.topics.get(name)
            if held_topic is None or held_topic.command_id != topic.command_id:
                changes += _changes_since(None, topic, since)
        changes.sort(key=lambda change: (change.offset, change.kind != "deleted"))
        return changes

    def snapshot_payload(self) -> bytes:
        """The state (catalogue and tombstones) as of ``applied_offset``, encoded."""
        body: dict[str, Any] = {
            "v": SNAPSHOT_VERSION,
            "applied_count": self.applied_count,
            "topics": [_topic_fields(topic) for topic in self.topics.values()],
            "tombstones": [[*_topic_fields(c.topic), c.offset] for c in self.tombstones],
            # A key of its own, so that a node that predates it reads the rest.
            "defaults": {
                name: list(topic.spec.defaults)
                for name, topic in self.topics.items()
                if topic.spec.defaults
            },
            # The settings added since (non-default ones) and additions of partitions.
            "settings": {
                name: extras
                for name, topic in self.topics.items()
                if (extras := _topic_extras(topic))
            },
            "maintenance": [[node_id, offset] for node_id, offset in self.maintenance.items()],
            "acls": [[*acl.fields(), offset] for acl, offset in self.acls.items()],
        }
        data: bytes = msgpack.packb(body)
        return data


def _tombstone(topic: TopicState) -> TopicState:
    """A deleted topic as a tombstone keeps it: without its founding replicas."""
    return replace(topic, founding_replicas=())


def _changes_since(held: TopicState | None, topic: TopicState, since: int) -> list[Change]:
    """The changes that took the topic from ``held`` (None: not held) to ``topic``:
    its creation, each addition of partitions after ``held``'s, and an ``altered``
    (at ``since``: the snapshot does not say when) if other settings changed."""
    changes: list[Change] = []
    if held is None:
        changes.append(Change("created", topic, topic.created_offset))
        previous = topic.as_of_partitions(topic.created_partitions)
    else:
        previous = held
    for added_offset, first in topic.additions:
        if first >= previous.spec.partitions:
            end = next((f for _, f in topic.additions if f > first), topic.spec.partitions)
            grown = topic.as_of_partitions(end)
            grown = replace(grown, spec=replace(grown.spec, **_settings_but_partitions(previous)))
            changes.append(Change("partitions_added", grown, added_offset, previous=previous))
            previous = grown
    if held is not None and previous.spec != topic.spec:
        changes.append(Change("altered", topic, since, previous=previous))
    return changes


def _settings_but_partitions(topic: TopicState) -> dict[str, Any]:
    settings = {name: getattr(topic.spec, name) for name in ALTERABLE_SETTINGS}
    return {**settings, "defaults": topic.spec.defaults}


def _extra_settings(fields: dict[str, Any]) -> dict[str, Any]:
    """The settings added after the first command and snapshot formats that
    ``fields`` holds, typed (absent ones keep :class:`TopicSpec`'s defaults)."""
    return _typed_settings({name: fields[name] for name in LATER_SETTINGS if name in fields})


def _typed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    typed: dict[str, Any] = {}
    for name, value in settings.items():
        if name == "cleanup_policy":
            typed[name] = str(value)
        elif name == "min_cleanable_dirty_ratio":
            typed[name] = float(value)
        else:
            typed[name] = int(value)
    return typed


def _topic_fields(topic: TopicState) -> list[Any]:
    spec = topic.spec
    return [
        spec.name,
        spec.partitions,
        spec.replication_factor,
        spec.retention_bytes,
        spec.retention_ms,
        [list(group) for group in topic.founding_replicas],
        topic.command_id,
        topic.created_offset,
    ]


def _topic_extras(topic: TopicState) -> dict[str, Any]:
    """What a snapshot keeps of a topic beyond :func:`_topic_fields` (the settings
    that differ from their defaults, and the additions of partitions)."""
    spec, plain = topic.spec, TopicSpec(topic.spec.name, 1, 1)
    extras: dict[str, Any] = {
        name: getattr(spec, name)
        for name in LATER_SETTINGS
        if getattr(spec, name) != getattr(plain, name)
    }
    if topic.additions:
        extras["additions"] = [list(added) for added in topic.additions]
    return extras


def _topic_from(
    fields: list[Any], defaults: tuple[str, ...] = (), extras: dict[str, Any] | None = None
) -> TopicState:
    name, partitions, factor, retention_bytes, retention_ms, founders, command_id, offset = fields
    extras = extras or {}
    spec = TopicSpec(
        str(name),
        int(partitions),
        int(factor),
        int(retention_bytes),
        int(retention_ms),
        defaults,
        **_extra_settings(extras),
    )
    replicas = tuple(tuple(str(n) for n in group) for group in founders)
    additions = tuple((int(at), int(first)) for at, first in extras.get("additions", ()))
    return TopicState(spec, replicas, str(command_id), int(offset), additions)


def _restore_payload(
    payload: bytes,
) -> tuple[dict[str, TopicState], list[Change], int, dict[str, int], dict[Acl, int]]:
    body = msgpack.unpackb(payload)
    if not isinstance(body, dict) or body.get("v") != SNAPSHOT_VERSION:
        raise ValueError(f"unsupported metadata snapshot version {body!r:.40}")
    topics = {}
    defaults = body.get("defaults", {})
    # Absent in a snapshot written by a node that predates them: the defaults.
    settings = body.get("settings", {})
    for fields in body["topics"]:
        name = fields[0]
        defaulted = tuple(str(f) for f in defaults.get(name, ()))
        topic = _topic_from(fields, defaulted, settings.get(name))
        topics[topic.spec.name] = topic
    tombstones = [
        Change("deleted", _topic_from(fields[:-1]), int(fields[-1]))
        for fields in body["tombstones"]
    ]
    # Absent in a snapshot written by a node that predates maintenance: none.
    maintenance = {str(node_id): int(offset) for node_id, offset in body.get("maintenance", ())}
    # Absent in a snapshot written by a node that predates ACLs: none.
    acls = {Acl.from_fields(fields[:-1]): int(fields[-1]) for fields in body.get("acls", ())}
    return topics, tombstones, int(body["applied_count"]), maintenance, acls


def snapshot_commands(state: MetadataState, snapshot_id: str) -> list[bytes]:
    """The record values of a snapshot of ``state`` as of its applied offset."""
    chunks = split_snapshot(
        state.snapshot_payload(),
        snapshot_id=snapshot_id,
        as_of_offset=state.applied_offset,
        applied_count=state.applied_count,
    )
    return [msgpack.packb({"v": _VERSION, "op": "snapshot", **chunk.fields()}) for chunk in chunks]


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
            "defaults": list(spec.defaults),
            # Read by nodes that know them; absent (an older proposer): the defaults.
            **{name: getattr(spec, name) for name in LATER_SETTINGS},
        }
    )


def alter_topic_command(
    topic: TopicState, changed: dict[str, object], reset: Iterable[str], command_id: str
) -> bytes:
    """The batch that sets the settings ``changed`` (validated by the caller) of the
    topic created as ``topic``; those in ``reset`` take the cluster's default (their
    value in ``changed``: the proposer resolved it)."""
    return _command(
        {
            "v": _VERSION,
            "op": "alter_topic",
            "id": command_id,
            "name": topic.spec.name,
            "topic_id": topic.command_id,
            "set": changed,
            "reset": sorted(reset),
        }
    )


def add_partitions_command(
    topic: TopicState, founding_replicas: list[tuple[str, ...]], command_id: str
) -> bytes:
    """The batch that grows ``topic`` (as the proposer saw it) by one partition per
    entry of ``founding_replicas`` (the new partitions' founders)."""
    return _command(
        {
            "v": _VERSION,
            "op": "add_partitions",
            "id": command_id,
            "name": topic.spec.name,
            "topic_id": topic.command_id,
            "from": topic.spec.partitions,
            "partitions": topic.spec.partitions + len(founding_replicas),
            "replicas": [list(group) for group in founding_replicas],
        }
    )


def delete_topic_command(name: str, command_id: str) -> bytes:
    return _command({"v": _VERSION, "op": "delete_topic", "id": command_id, "name": name})


def maintenance_command(node_id: str, enter: bool, command_id: str) -> bytes:
    """The batch that puts ``node_id`` in maintenance (``enter``) or takes it out."""
    validate_node_id(node_id)
    return _command(
        {"v": _VERSION, "op": "maintenance", "id": command_id, "node": node_id, "enter": enter}
    )


def acls_command(acls: list[Acl], *, create: bool, command_id: str) -> bytes:
    """The batch that creates (``create``) or deletes exactly ``acls`` (validated)."""
    return _command(
        {
            "v": _VERSION,
            "op": "create_acls" if create else "delete_acls",
            "id": command_id,
            "acls": [acl.fields() for acl in acls],
        }
    )


def validate_node_id(node_id: str) -> None:
    if not node_id or len(node_id.encode()) > NODE_ID_BYTES_MAX or "\x00" in node_id:
        raise InvalidInputError(
            f"a node id is 1-{NODE_ID_BYTES_MAX} bytes without NUL, got {node_id!r:.80}"
        )


def _command(command: dict[str, object]) -> bytes:
    return encode_batch([msgpack.packb(command)])
