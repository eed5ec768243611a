"""Laminar's one exception tree.

Every error that Laminar raises to a caller is a :class:`LaminarError`. The tree::

    LaminarError
    ├── ConfigError                      a configuration value or combination is impossible
    ├── InvalidInputError                the caller sent something malformed or too large
    │   ├── RecordFormatError            bytes that do not form a valid record batch
    │   │   ├── TruncatedBatchError      buffer shorter than the batch it announces
    │   │   ├── UnsupportedMagicError    unknown batch format version
    │   │   ├── ChecksumMismatchError    payload or header checksum does not match
    │   │   ├── BatchLimitError          a length or count beyond the configured limits
    │   │   └── CorruptBatchError        a control batch's value is not what its kind holds
    │   ├── InvalidTopicError            bad topic name or topic settings
    │   │   └── TopicExistsError         a topic with that name already exists
    │   └── GroupEntryFormatError        bytes that do not form a valid consumer-group log entry
    ├── StorageError                     the on-disk log cannot do what was asked
    │   ├── CorruptSegmentError          a segment holds a corrupt batch (file, offset)
    │   ├── CorruptStateError            a replica's state file has no valid copy
    │   ├── OffsetOutOfRangeError        offset outside [start_offset, end_offset]
    │   ├── NonMonotonicOffsetError      an append would break offset density
    │   ├── ZstdVersionError             keyed compaction needs another libzstd than this node's
    │   ├── LogClosedError               the log was closed
    │   └── StorageFullError             no majority of a partition's replicas has disk space
    ├── RetriableError                   the operation may succeed if retried
    │   ├── NotLeaderError               this replica is not the leader (leader hint attached)
    │   ├── UnavailableError             no quorum / not enough replicas
    │   │   ├── NodeUnreachableError     (client) the connection to the node failed
    │   │   │   └── NodeRefusedError     (client) nothing listens there (refused, no such host)
    │   │   │       └── TlsHandshakeError (client) the TLS handshake failed (cause attached)
    │   │   └── ClusterUnreachableError  (client) no node ever answered: every address refused
    │   ├── RequestTimeoutError          the deadline passed before an answer
    │   │   ├── AttemptTimeoutError      (client) the node did not answer one attempt in time
    │   │   │   └── LeaderMovedError     (client) abandoned: another replica leads meanwhile
    │   │   └── DeliveryTimeoutError     (client) a record not acknowledged in delivery_timeout_s
    │   ├── NoAnswerError                (client) base of the two: the node never answered
    │   └── BufferFullError              (client) the producer's buffer stayed full for max_block_s
    ├── UnknownTopicOrPartitionError     no such topic or partition
    ├── ProducerSequenceError            idempotent-producer sequence rejected
    │   ├── DuplicateSequenceError       batch already written (original offset attached)
    │   └── OutOfOrderSequenceError      gap in the producer's sequence
    ├── FencedMemberError                a consumer-group member's epoch or ownership is stale
    ├── GroupNotEmptyError               an admin change to a group that still has members
    ├── ClusterIdMismatchError           a node or peer belongs to another cluster
    ├── AuthenticationError              the caller's credentials (a bearer token) are not valid
    ├── AuthorizationError               the caller may not do this (operation, resource attached)
    ├── RecordDeserializationError       (client) a deserializer refused a record's key or value
    └── ClientClosedError                (client) the producer or consumer was closed

Inside the sans-IO cores an *expected* rejection (a duplicate sequence, a write to a
follower) is an output value, not an exception; the shells turn those outputs into
these errors at the API boundary. An ``AssertionError`` anywhere is a bug.

The gRPC layer maps this tree to status codes in one table, and the client maps
the codes back, so the same class reaches a user whether the error was raised
locally or on a remote node.
"""

from __future__ import annotations


class LaminarError(Exception):
    """Base of every error Laminar raises."""


class ConfigError(LaminarError, ValueError):
    """A configuration value, or a combination of values, is impossible."""


class InvalidInputError(LaminarError, ValueError):
    """The caller sent something malformed or beyond a limit."""


class RecordFormatError(InvalidInputError):
    """Bytes that do not form a valid record batch."""


class TruncatedBatchError(RecordFormatError):
    """The buffer is shorter than the batch (or header) it announces."""

    def __init__(self, message: str, *, needed_bytes: int, available_bytes: int) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes


class UnsupportedMagicError(RecordFormatError):
    """The batch's format version (magic byte) is not one this build reads."""

    def __init__(self, magic: int) -> None:
        super().__init__(f"unsupported record batch magic {magic}")
        self.magic = magic


class ChecksumMismatchError(RecordFormatError):
    """A batch's payload or header checksum does not match its contents."""

    def __init__(self, which: str, expected: int, actual: int) -> None:
        super().__init__(
            f"{which} checksum mismatch: stored {expected:#018x}, computed {actual:#018x}"
        )
        self.which = which
        self.expected = expected
        self.actual = actual


class BatchLimitError(RecordFormatError):
    """A length or count is beyond the configured limit (or simply absurd)."""


class CorruptBatchError(RecordFormatError):
    """A control batch's value is not what its kind holds: a ``compact`` command that
    is not msgpack, of an unknown version or rule, or with a field missing, of the
    wrong type or out of range (docs/format.md, section 1.7)."""


class InvalidTopicError(InvalidInputError):
    """A topic name or topic setting is invalid."""


class TopicExistsError(InvalidTopicError):
    """A topic with that name already exists."""


class GroupEntryFormatError(InvalidInputError):
    """Bytes that do not form a valid consumer-group log entry (``__groups`` topic):
    not msgpack, an unknown version or kind, a missing field or one beyond its limit."""


class StorageError(LaminarError):
    """The on-disk log cannot do what was asked."""


class ZstdVersionError(StorageError):
    """A keyed compaction command asks for zstd output made with another libzstd
    version than this node's: the bytes could differ from the other replicas', so
    this node must not compact by it (docs/format.md, section 1.7)."""

    def __init__(self, wanted: str, local: str) -> None:
        super().__init__(
            f"the compaction command needs zstd output of libzstd {wanted or '(none named)'}, "
            f"this node has {local}"
        )
        self.wanted = wanted
        self.local = local


class CorruptSegmentError(StorageError):
    """A batch inside a segment failed validation; it is never served.
    ``expected`` / ``found``: the stored and computed checksums, when a checksum
    (rather than the batch's structure) failed."""

    def __init__(
        self,
        path: str,
        offset: int,
        position: int,
        reason: str,
        *,
        expected: int | None = None,
        found: int | None = None,
    ) -> None:
        super().__init__(
            f"corrupt batch in {path} at offset {offset} (file position {position}): {reason}"
        )
        self.path = path
        self.offset = offset
        self.position = position
        self.reason = reason
        self.expected = expected
        self.found = found


class CorruptStateError(StorageError):
    """A replica's state file (term, vote, configurations) has no valid copy."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: corrupt state file: neither slot is valid")
        self.path = path


class OffsetOutOfRangeError(StorageError):
    """The requested offset is outside the log's valid range ``[start, end]``."""

    def __init__(self, offset: int, start_offset: int, end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range: valid offsets are "
            f"[{start_offset}, {end_offset}] (end is the next offset to be written)"
        )
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset


class NonMonotonicOffsetError(StorageError):
    """An append with an explicit base offset would leave a gap or overlap."""

    def __init__(self, base_offset: int, end_offset: int) -> None:
        super().__init__(
            f"batch base offset {base_offset} does not follow the log end offset {end_offset}"
        )
        self.base_offset = base_offset
        self.end_offset = end_offset


class LogClosedError(StorageError):
    """The log was closed; no further operations are possible on this object."""


class StorageFullError(StorageError):
    """A write refused at once because a majority of its partition's replicas are on
    nodes out of disk space (below their free-space watermark, see
    :mod:`laminar.server.disk`): it was not written. Not retriable as is: it succeeds
    once space is freed (retention, a deleted topic, an operator), which may take
    long. ``nodes``: the full nodes among the partition's replicas."""

    def __init__(self, message: str, nodes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.nodes = nodes


class RetriableError(LaminarError):
    """The operation failed for a transient reason and may succeed if retried."""


class NotLeaderError(RetriableError):
    """This replica is not the partition's leader; ``leader`` is the best hint known."""

    def __init__(self, leader_id: str | None, leader_address: str | None) -> None:
        hint = f"leader is {leader_id} at {leader_address}" if leader_id else "leader unknown"
        super().__init__(f"not the leader: {hint}")
        self.leader_id = leader_id
        self.leader_address = leader_address


class UnavailableError(RetriableError):
    """Not enough replicas are reachable to serve the request (no quorum)."""


class RequestTimeoutError(RetriableError):
    """The request's deadline passed before it completed; its outcome is unknown."""


class NoAnswerError(RetriableError):
    """Client side: the node did not answer the call at all (no Laminar error came
    back), so routing skips it for a while; the two kinds below say how."""


class NodeUnreachableError(NoAnswerError, UnavailableError):
    """Client side: the connection to the node failed (refused, reset, closed mid-call)."""


class NodeRefusedError(NodeUnreachableError):
    """Client side: nothing listens at the node's address: the connection was refused,
    or the host name does not resolve."""


class TlsHandshakeError(NodeRefusedError):
    """Client side: the connection failed at the TLS handshake, so no call can pass
    until the configuration changes: a plaintext client at a TLS port (or the
    reverse), a node certificate from a CA the client's CA file lacks, an expired
    certificate, a certificate that does not name the address, or a client
    certificate the node refused (missing, expired, unknown CA). ``cause`` says
    which, as far as the client can tell. Like a refused connection it fails a new
    client's calls within ``connect_grace_s`` (with every bootstrap address failing
    so, this error is raised rather than :class:`ClusterUnreachableError`)."""

    def __init__(self, message: str, *, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


class ClusterUnreachableError(UnavailableError):
    """Client side: no node has answered this client yet, and every address it knows
    (its bootstrap list) refused the connection or does not resolve, for the
    client's ``connect_grace_s``: no cluster runs there. ``addresses`` are those
    addresses. Not raised once any node has answered: then a refused connection is
    a node restarting, retried until the call's deadline."""

    def __init__(self, message: str, *, addresses: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.addresses = addresses


class AttemptTimeoutError(NoAnswerError, RequestTimeoutError):
    """Client side: the node did not answer before the attempt's deadline (stopped,
    cut off or overloaded)."""


class LeaderMovedError(AttemptTimeoutError):
    """Client side: an attempt to a partition's leader that had not answered yet was
    abandoned because the other replicas name a new leader (the old one is paused,
    cut off or hung); its outcome is unknown, as after a timeout."""


class DeliveryTimeoutError(RequestTimeoutError):
    """Client side: a record was not acknowledged within the producer's
    ``delivery_timeout_s``. ``sent`` says whether any attempt left the client: if one
    did, the record may have been written."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class BufferFullError(RetriableError):
    """Client side: ``send`` waited ``max_block_s`` for room in the producer's buffer
    (``buffer_bytes_max``) and found none; the record was not taken."""


class UnknownTopicOrPartitionError(LaminarError):
    """No such topic, or no such partition in that topic."""


class ProducerSequenceError(LaminarError):
    """An idempotent producer's batch sequence was rejected."""


class DuplicateSequenceError(ProducerSequenceError):
    """The batch was already written; ``base_offset`` is where it was written."""

    def __init__(self, producer_id: int, base_sequence: int, base_offset: int) -> None:
        super().__init__(
            f"producer {producer_id} sequence {base_sequence} already written "
            f"at offset {base_offset}"
        )
        self.producer_id = producer_id
        self.base_sequence = base_sequence
        self.base_offset = base_offset


class OutOfOrderSequenceError(ProducerSequenceError):
    """The batch's sequence leaves a gap after the last one written."""

    def __init__(self, producer_id: int, base_sequence: int, expected_sequence: int) -> None:
        super().__init__(
            f"producer {producer_id} sent sequence {base_sequence}, expected {expected_sequence}"
        )
        self.producer_id = producer_id
        self.base_sequence = base_sequence
        self.expected_sequence = expected_sequence


class FencedMemberError(LaminarError):
    """A consumer-group member acted with a stale identity: it was expired, fenced or
    replaced, or no longer owns the partition at that assignment epoch. Nothing it
    asked for took effect; it must drop all its partitions (without committing) and
    rejoin. Not retriable as is: retrying the same request fails the same way."""

    def __init__(self, group_id: str, member_id: str, reason: str) -> None:
        super().__init__(f"member {member_id} of group {group_id} is fenced: {reason}")
        self.group_id = group_id
        self.member_id = member_id
        self.reason = reason


class GroupNotEmptyError(LaminarError):
    """An admin change (offset reset, delete) to a consumer group that still has
    members; stop them (or wait for their sessions to expire) first."""

    def __init__(self, group_id: str, member_count: int) -> None:
        super().__init__(f"group {group_id} still has {member_count} member(s)")
        self.group_id = group_id
        self.member_count = member_count


class ClusterIdMismatchError(LaminarError):
    """A node or peer belongs to a different cluster."""

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"cluster id mismatch: this cluster is {expected}, peer says {actual}")
        self.expected = expected
        self.actual = actual


class AuthenticationError(LaminarError):
    """The caller presented credentials that are not valid (a wrong, malformed or
    revoked bearer token, a certificate no principal rule maps): nothing was done.
    gRPC ``UNAUTHENTICATED``. A caller presenting nothing is not refused as such: it
    is the principal ``User:ANONYMOUS``, checked like any other."""


class AuthorizationError(LaminarError):
    """The caller may not do ``operation`` on the resource (``resource_type``
    ``topic``, ``group`` or ``cluster``, named ``resource_name``): nothing was done or
    written. gRPC ``PERMISSION_DENIED``. It never says whether a topic or group that
    the caller may not describe exists."""

    def __init__(
        self, message: str, *, operation: str = "", resource_type: str = "", resource_name: str = ""
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.resource_type = resource_type
        self.resource_name = resource_name


class RecordDeserializationError(LaminarError):
    """Client side: the consumer's key or value deserializer raised on a record.
    ``topic``, ``partition`` and ``offset`` name the record; the consumer's position
    stays on it (iterating raises again) until the application seeks past it
    (``seek(tp, error.offset + 1)``), as Kafka's ``RecordDeserializationException``.
    The deserializer's exception is the ``__cause__``."""

    def __init__(self, topic: str, partition: int, offset: int, field: str, cause: BaseException):
        super().__init__(
            f"cannot deserialize the {field} of the record at {topic}/{partition} offset "
            f"{offset}: {type(cause).__name__}: {cause}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.field = field


class ClientClosedError(LaminarError):
    """Client side: the producer or consumer was closed; records still buffered when
    it closed without flushing fail with this error."""


class TopicNotAuthorizedError(UnknownTopicOrPartitionError, AuthorizationError):
    """A topic the cluster's answer does not show to this caller: it does not exist,
    or the caller may not describe it (the two look the same by design). Both an
    :class:`UnknownTopicOrPartitionError` and an :class:`AuthorizationError`
    (``describe`` on the topic)."""

    def __init__(self, topic: str) -> None:
        AuthorizationError.__init__(
            self,
            f"unknown topic {topic!r}, or not authorized to describe it (describe on "
            f"topic {topic})",
            operation="describe",
            resource_type="topic",
            resource_name=topic,
        )
