"""The one table between Laminar's error tree and gRPC status codes.

Both sides use this module: the server turns a :class:`~laminar.errors.LaminarError`
into a status code plus a typed :class:`ErrorDetail` (serialized into the trailing
metadata key ``laminar-error-bin``) with :func:`abort_with`; the client turns the
:class:`grpc.RpcError` back into the same class, with the same attributes, with
:func:`error_from_rpc`. So a caller sees one exception tree whether the error was
raised locally or on a remote node.

The table (first matching row wins, so subclasses come before their bases)::

    error class                    gRPC status          ErrorDetail.code
    -----------------------------  -------------------  --------------------------
    NotLeaderError                 UNAVAILABLE          NOT_LEADER (+ leader id, address)
    UnavailableError               UNAVAILABLE          UNAVAILABLE
    RequestTimeoutError            DEADLINE_EXCEEDED    REQUEST_TIMEOUT
    RetriableError (other)         UNAVAILABLE          UNAVAILABLE
    UnknownTopicOrPartitionError   NOT_FOUND            UNKNOWN_TOPIC_OR_PARTITION
    OffsetOutOfRangeError          OUT_OF_RANGE         OFFSET_OUT_OF_RANGE (+ start, end)
    BatchLimitError                RESOURCE_EXHAUSTED   BATCH_TOO_LARGE
    RecordFormatError (other)      INVALID_ARGUMENT     RECORD_FORMAT
    TopicExistsError               ALREADY_EXISTS       TOPIC_EXISTS
    InvalidTopicError              INVALID_ARGUMENT     INVALID_TOPIC
    InvalidInputError (other)      INVALID_ARGUMENT     INVALID_INPUT
    ConfigError                    INVALID_ARGUMENT     CONFIG
    OutOfOrderSequenceError        FAILED_PRECONDITION  OUT_OF_ORDER_SEQUENCE
    ClusterIdMismatchError         FAILED_PRECONDITION  CLUSTER_ID_MISMATCH
    FencedMemberError              FAILED_PRECONDITION  FENCED (+ group, member id, reason)
    GroupNotEmptyError             FAILED_PRECONDITION  GROUP_NOT_EMPTY (+ group, member count)
    StorageFullError               RESOURCE_EXHAUSTED   STORAGE_FULL (+ the full nodes)
    AuthenticationError            UNAUTHENTICATED      AUTHENTICATION_FAILED
    AuthorizationError             PERMISSION_DENIED    AUTHORIZATION_FAILED (+ operation, resource)
    CorruptSegmentError            DATA_LOSS            STORAGE
    StorageError (other)           INTERNAL             STORAGE
    anything else                  INTERNAL             ERROR_UNKNOWN

Why these codes: ``NOT_LEADER`` is ``UNAVAILABLE`` because it is retriable and a
generic gRPC client retries ``UNAVAILABLE`` without knowing Laminar; the detail
carries the hint a Laminar client follows at once. ``RESOURCE_EXHAUSTED`` is also
what gRPC itself returns for a message above the receive limit, so an oversized
batch reads the same whether the transport or the broker refused it; a full disk
is a resource exhausted too (``STORAGE_FULL``: the detail tells the two apart).

Reading back: with a detail, its ``code`` picks the class (``STORAGE`` under
``DATA_LOSS`` is a :class:`CorruptSegmentError`); ``ERROR_UNKNOWN`` gives a plain
:class:`LaminarError` with the server's message. Without a detail (a proxy, the
transport itself, or a server that failed before reaching Laminar code) the status
code alone picks the class: see ``_CLASS_BY_STATUS``.

Fields that the detail does not carry come back as placeholders: the requested
``offset`` of an out-of-range error is -1 (the client knows what it asked for),
and the producer or cluster ids of sequence and cluster-id errors are -1 / "".
The subclasses of :class:`RecordFormatError` other than :class:`BatchLimitError`
come back as :class:`RecordFormatError`. :class:`DuplicateSequenceError` is not an
error on the wire (a produce response marks duplicates); if one is aborted with
anyway it reaches the client as a plain :class:`LaminarError`.
"""

from __future__ import annotations

from typing import NoReturn, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from laminar.errors import (
    AuthenticationError,
    AuthorizationError,
    BatchLimitError,
    ClusterIdMismatchError,
    ConfigError,
    CorruptSegmentError,
    FencedMemberError,
    GroupNotEmptyError,
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    RetriableError,
    StorageError,
    StorageFullError,
    TopicExistsError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.v1.laminar_pb2 import ErrorCode, ErrorDetail

__all__ = [
    "ERROR_METADATA_KEY",
    "TopicExistsError",
    "abort_with",
    "error_code_name",
    "error_from_rpc",
    "error_metadata",
    "error_to_status",
]

ERROR_METADATA_KEY = "laminar-error-bin"
"""Trailing metadata key holding a serialized :class:`ErrorDetail` (binary: ``-bin``)."""

_DETAIL_BYTES_MAX = 64 * 1024
"""A detail longer than this is ignored on reading (it cannot be ours)."""


_E = TypeVar("_E", bound=LaminarError)

# (class, status, detail code): ordered, subclasses before their bases.
_TABLE: tuple[tuple[type[LaminarError], grpc.StatusCode, ErrorCode], ...] = (
    (NotLeaderError, grpc.StatusCode.UNAVAILABLE, ErrorCode.NOT_LEADER),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE, ErrorCode.UNAVAILABLE),
    (RequestTimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED, ErrorCode.REQUEST_TIMEOUT),
    (RetriableError, grpc.StatusCode.UNAVAILABLE, ErrorCode.UNAVAILABLE),
    (
        UnknownTopicOrPartitionError,
        grpc.StatusCode.NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    (OffsetOutOfRangeError, grpc.StatusCode.OUT_OF_RANGE, ErrorCode.OFFSET_OUT_OF_RANGE),
    (BatchLimitError, grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorCode.BATCH_TOO_LARGE),
    (RecordFormatError, grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.RECORD_FORMAT),
    (TopicExistsError, grpc.StatusCode.ALREADY_EXISTS, ErrorCode.TOPIC_EXISTS),
    (InvalidTopicError, grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_TOPIC),
    (InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_INPUT),
    (ConfigError, grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.CONFIG),
    (
        OutOfOrderSequenceError,
        grpc.StatusCode.FAILED_PRECONDITION,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
    ),
    (ClusterIdMismatchError, grpc.StatusCode.FAILED_PRECONDITION, ErrorCode.CLUSTER_ID_MISMATCH),
    (FencedMemberError, grpc.StatusCode.FAILED_PRECONDITION, ErrorCode.FENCED),
    (GroupNotEmptyError, grpc.StatusCode.FAILED_PRECONDITION, ErrorCode.GROUP_NOT_EMPTY),
    (StorageFullError, grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorCode.STORAGE_FULL),
    (AuthenticationError, grpc.StatusCode.UNAUTHENTICATED, ErrorCode.AUTHENTICATION_FAILED),
    (AuthorizationError, grpc.StatusCode.PERMISSION_DENIED, ErrorCode.AUTHORIZATION_FAILED),
    (CorruptSegmentError, grpc.StatusCode.DATA_LOSS, ErrorCode.STORAGE),
    (StorageError, grpc.StatusCode.INTERNAL, ErrorCode.STORAGE),
)

# Detail code -> class for reading back (STORAGE is refined by the status code).
_CLASS_BY_CODE: dict[ErrorCode, type[LaminarError]] = {
    ErrorCode.NOT_LEADER: NotLeaderError,
    ErrorCode.UNAVAILABLE: UnavailableError,
    ErrorCode.REQUEST_TIMEOUT: RequestTimeoutError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UnknownTopicOrPartitionError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.INVALID_INPUT: InvalidInputError,
    ErrorCode.RECORD_FORMAT: RecordFormatError,
    ErrorCode.BATCH_TOO_LARGE: BatchLimitError,
    ErrorCode.INVALID_TOPIC: InvalidTopicError,
    ErrorCode.TOPIC_EXISTS: TopicExistsError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: OutOfOrderSequenceError,
    ErrorCode.STORAGE: StorageError,
    ErrorCode.CLUSTER_ID_MISMATCH: ClusterIdMismatchError,
    ErrorCode.CONFIG: ConfigError,
    ErrorCode.AUTHENTICATION_FAILED: AuthenticationError,
}

# Status code -> class when no detail came with the status.
_CLASS_BY_STATUS: dict[grpc.StatusCode, type[LaminarError]] = {
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.ABORTED: UnavailableError,
    grpc.StatusCode.CANCELLED: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimeoutError,
    grpc.StatusCode.NOT_FOUND: UnknownTopicOrPartitionError,
    grpc.StatusCode.OUT_OF_RANGE: OffsetOutOfRangeError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidInputError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BatchLimitError,
    grpc.StatusCode.ALREADY_EXISTS: TopicExistsError,
    grpc.StatusCode.DATA_LOSS: CorruptSegmentError,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthorizationError,
}


def error_to_status(error: LaminarError) -> tuple[grpc.StatusCode, ErrorDetail]:
    """The status code and typed detail that carry ``error`` over gRPC."""
    detail = ErrorDetail(code=ErrorCode.ERROR_UNKNOWN, message=str(error))
    status = grpc.StatusCode.INTERNAL
    for error_class, row_status, row_code in _TABLE:
        if isinstance(error, error_class):
            status = row_status
            detail.code = row_code
            break
    if isinstance(error, NotLeaderError):
        detail.leader_id = error.leader_id or ""
        detail.leader_address = error.leader_address or ""
    elif isinstance(error, OffsetOutOfRangeError):
        detail.offset = error.offset
        detail.start_offset = error.start_offset
        detail.end_offset = error.end_offset
    elif isinstance(error, OutOfOrderSequenceError):
        detail.producer_id = error.producer_id
        detail.base_sequence = error.base_sequence
        detail.expected_sequence = error.expected_sequence
    elif isinstance(error, FencedMemberError):
        detail.group = error.group_id
        detail.member_id = error.member_id
        detail.reason = error.reason
    elif isinstance(error, GroupNotEmptyError):
        detail.group = error.group_id
        detail.member_count = error.member_count
    elif isinstance(error, StorageFullError):
        detail.nodes.extend(error.nodes)
    elif isinstance(error, AuthorizationError):
        detail.operation = error.operation
        detail.resource_type = error.resource_type
        detail.resource_name = error.resource_name
    return status, detail


def error_code_name(error: LaminarError) -> str:
    """The name of ``error``'s :class:`ErrorCode` (``NOT_LEADER``, ...), as
    :func:`error_to_status` would send it; the node's request metrics count by it."""
    for error_class, _status, row_code in _TABLE:
        if isinstance(error, error_class):
            return ErrorCode.Name(row_code)
    return ErrorCode.Name(ErrorCode.ERROR_UNKNOWN)


def error_metadata(detail: ErrorDetail) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata carrying ``detail``."""
    return ((ERROR_METADATA_KEY, detail.SerializeToString()),)


async def abort_with(context: grpc.aio.ServicerContext, error: LaminarError) -> NoReturn:
    """Abort the current RPC with ``error``'s status code, message and typed detail."""
    status, detail = error_to_status(error)
    context.set_trailing_metadata(error_metadata(detail))
    await context.abort(status, detail.message)
    raise AssertionError("context.abort returned")  # pragma: no cover


class _DetailAsCall:
    """A bare :class:`ErrorDetail` (a per-partition error inside an answer) in the
    shape of a failed call, so that :func:`error_from_rpc`'s one table reads it."""

    __slots__ = ("_detail",)

    def __init__(self, detail: ErrorDetail) -> None:
        self._detail = detail

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNKNOWN  # the detail's code decides

    def details(self) -> str:
        return self._detail.message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return error_metadata(self._detail)


def error_from_detail(detail: ErrorDetail) -> LaminarError:
    """The :class:`LaminarError` a per-partition :class:`ErrorDetail` stands for."""
    return error_from_rpc(_DetailAsCall(detail))


def error_from_rpc(rpc_error: grpc.RpcError) -> LaminarError:
    """The :class:`LaminarError` that a failed call carries (see the module table)."""
    status = _status_of(rpc_error)
    message = _details_of(rpc_error) or f"rpc failed with {status.name}"
    detail = _detail_of(rpc_error)
    if detail is None:
        return _from_status(status, message)
    if detail.message:
        message = detail.message
    code = detail.code
    if code == ErrorCode.NOT_LEADER:
        return NotLeaderError(detail.leader_id or None, detail.leader_address or None)
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        return _with_message(
            OffsetOutOfRangeError(detail.offset, detail.start_offset, detail.end_offset), message
        )
    if code == ErrorCode.OUT_OF_ORDER_SEQUENCE:
        return _with_message(
            OutOfOrderSequenceError(
                detail.producer_id, detail.base_sequence, detail.expected_sequence
            ),
            message,
        )
    if code == ErrorCode.FENCED:
        return FencedMemberError(detail.group, detail.member_id, detail.reason)
    if code == ErrorCode.GROUP_NOT_EMPTY:
        return GroupNotEmptyError(detail.group, detail.member_count)
    if code == ErrorCode.STORAGE_FULL:
        return StorageFullError(message, tuple(detail.nodes))
    if code == ErrorCode.AUTHORIZATION_FAILED:
        return AuthorizationError(
            message,
            operation=detail.operation,
            resource_type=detail.resource_type,
            resource_name=detail.resource_name,
        )
    if code == ErrorCode.STORAGE and status == grpc.StatusCode.DATA_LOSS:
        return _bare(CorruptSegmentError, message, path="", offset=-1, position=-1, reason="")
    error_class = _CLASS_BY_CODE.get(code)
    if error_class is None:
        return LaminarError(message)
    return _build(error_class, message)


# --------------------------------------------------------------------------- helpers


def _from_status(status: grpc.StatusCode, message: str) -> LaminarError:
    error_class = _CLASS_BY_STATUS.get(status)
    if error_class is None:
        return LaminarError(message)
    return _build(error_class, message)


def _build(error_class: type[LaminarError], message: str) -> LaminarError:
    """An instance of ``error_class`` with ``message`` and placeholder typed fields."""
    if error_class is NotLeaderError:
        return NotLeaderError(None, None)
    if error_class is OffsetOutOfRangeError:
        return _bare(OffsetOutOfRangeError, message, offset=-1, start_offset=-1, end_offset=-1)
    if error_class is OutOfOrderSequenceError:
        return _bare(
            OutOfOrderSequenceError,
            message,
            producer_id=-1,
            base_sequence=-1,
            expected_sequence=-1,
        )
    if error_class is ClusterIdMismatchError:
        return _bare(ClusterIdMismatchError, message, expected="", actual="")
    if error_class is CorruptSegmentError:
        return _bare(CorruptSegmentError, message, path="", offset=-1, position=-1, reason="")
    return error_class(message)


def _bare(error_class: type[_E], message: str, **fields: object) -> _E:
    """Build an error whose constructor needs fields the wire does not carry."""
    error = error_class.__new__(error_class)
    Exception.__init__(error, message)
    for name, value in fields.items():
        setattr(error, name, value)
    return error


def _with_message(error: _E, message: str) -> _E:
    error.args = (message,)
    return error


def _status_of(rpc_error: grpc.RpcError) -> grpc.StatusCode:
    code = getattr(rpc_error, "code", None)
    status = code() if callable(code) else None
    return status if isinstance(status, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def _details_of(rpc_error: grpc.RpcError) -> str:
    details = getattr(rpc_error, "details", None)
    text = details() if callable(details) else None
    return text if isinstance(text, str) else ""


def _detail_of(rpc_error: grpc.RpcError) -> ErrorDetail | None:
    trailing = getattr(rpc_error, "trailing_metadata", None)
    metadata = trailing() if callable(trailing) else None
    for key, value in metadata or ():
        if key != ERROR_METADATA_KEY or not isinstance(value, bytes):
            continue
        if len(value) > _DETAIL_BYTES_MAX:
            return None
        detail = ErrorDetail()
        try:
            detail.ParseFromString(value)
        except DecodeError:
            return None
        return detail
    return None
