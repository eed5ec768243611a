from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from laminar.errors import (
    BatchLimitError,
    ChecksumMismatchError,
    ClusterIdMismatchError,
    ConfigError,
    CorruptSegmentError,
    DuplicateSequenceError,
    InvalidInputError,
    InvalidTopicError,
    LaminarError,
    LogClosedError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordFormatError,
    RequestTimeoutError,
    StorageError,
    StorageFullError,
    TruncatedBatchError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.grpc_errors import (
    ERROR_METADATA_KEY,
    TopicExistsError,
    abort_with,
    error_from_rpc,
    error_metadata,
    error_to_status,
)
from laminar.v1.laminar_pb2 import ErrorCode

S = grpc.StatusCode


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details="", metadata=()):
        self._code, self._details, self._metadata = code, details, metadata

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._metadata


def round_trip(error: LaminarError) -> LaminarError:
    status, detail = error_to_status(error)
    return error_from_rpc(FakeRpcError(status, detail.message, error_metadata(detail)))


TABLE = [
    (NotLeaderError("n1", "h:1"), S.UNAVAILABLE, ErrorCode.NOT_LEADER, NotLeaderError),
    (UnavailableError("q"), S.UNAVAILABLE, ErrorCode.UNAVAILABLE, UnavailableError),
    (RequestTimeoutError("t"), S.DEADLINE_EXCEEDED, ErrorCode.REQUEST_TIMEOUT, RequestTimeoutError),
    (
        UnknownTopicOrPartitionError("u"),
        S.NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        UnknownTopicOrPartitionError,
    ),
    (
        OffsetOutOfRangeError(9, 2, 5),
        S.OUT_OF_RANGE,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        OffsetOutOfRangeError,
    ),
    (BatchLimitError("big"), S.RESOURCE_EXHAUSTED, ErrorCode.BATCH_TOO_LARGE, BatchLimitError),
    (RecordFormatError("bad"), S.INVALID_ARGUMENT, ErrorCode.RECORD_FORMAT, RecordFormatError),
    (
        ChecksumMismatchError("payload", 1, 2),
        S.INVALID_ARGUMENT,
        ErrorCode.RECORD_FORMAT,
        RecordFormatError,
    ),
    (
        TruncatedBatchError("short", needed_bytes=9, available_bytes=1),
        S.INVALID_ARGUMENT,
        ErrorCode.RECORD_FORMAT,
        RecordFormatError,
    ),
    (TopicExistsError("dup"), S.ALREADY_EXISTS, ErrorCode.TOPIC_EXISTS, TopicExistsError),
    (InvalidTopicError("n"), S.INVALID_ARGUMENT, ErrorCode.INVALID_TOPIC, InvalidTopicError),
    (InvalidInputError("i"), S.INVALID_ARGUMENT, ErrorCode.INVALID_INPUT, InvalidInputError),
    (ConfigError("c"), S.INVALID_ARGUMENT, ErrorCode.CONFIG, ConfigError),
    (
        OutOfOrderSequenceError(1, 5, 3),
        S.FAILED_PRECONDITION,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
        OutOfOrderSequenceError,
    ),
    (
        ClusterIdMismatchError("a", "b"),
        S.FAILED_PRECONDITION,
        ErrorCode.CLUSTER_ID_MISMATCH,
        ClusterIdMismatchError,
    ),
    (
        CorruptSegmentError("f", 1, 2, "crc"),
        S.DATA_LOSS,
        ErrorCode.STORAGE,
        CorruptSegmentError,
    ),
    (
        StorageFullError("no space", ("n2",)),
        S.RESOURCE_EXHAUSTED,
        ErrorCode.STORAGE_FULL,
        StorageFullError,
    ),
    (LogClosedError("closed"), S.INTERNAL, ErrorCode.STORAGE, StorageError),
    (StorageError("disk"), S.INTERNAL, ErrorCode.STORAGE, StorageError),
    (DuplicateSequenceError(1, 2, 3), S.INTERNAL, ErrorCode.ERROR_UNKNOWN, LaminarError),
    (LaminarError("other"), S.INTERNAL, ErrorCode.ERROR_UNKNOWN, LaminarError),
]


@pytest.mark.parametrize(("error", "status", "code", "back"), TABLE)
def test_table_and_round_trip(error, status, code, back) -> None:
    got_status, detail = error_to_status(error)
    assert (got_status, detail.code) == (status, code)
    assert detail.message == str(error)
    returned = round_trip(error)
    assert type(returned) is back
    assert str(returned) == str(error)


def test_not_leader_carries_hint() -> None:
    returned = round_trip(NotLeaderError("n7", "10.0.0.7:7100"))
    assert isinstance(returned, NotLeaderError)
    assert (returned.leader_id, returned.leader_address) == ("n7", "10.0.0.7:7100")
    unknown = round_trip(NotLeaderError(None, None))
    assert isinstance(unknown, NotLeaderError)
    assert (unknown.leader_id, unknown.leader_address) == (None, None)


def test_offset_out_of_range_carries_range() -> None:
    returned = round_trip(OffsetOutOfRangeError(9, 2, 5))
    assert isinstance(returned, OffsetOutOfRangeError)
    assert (returned.offset, returned.start_offset, returned.end_offset) == (9, 2, 5)


def test_sequence_fields_and_placeholders() -> None:
    returned = round_trip(OutOfOrderSequenceError(1, 5, 3))
    assert isinstance(returned, OutOfOrderSequenceError)
    assert (returned.producer_id, returned.base_sequence, returned.expected_sequence) == (1, 5, 3)
    corrupt = round_trip(CorruptSegmentError("f", 1, 2, "crc"))
    assert isinstance(corrupt, CorruptSegmentError)
    assert corrupt.path == ""


def test_storage_full_carries_the_full_nodes_and_is_not_a_batch_limit() -> None:
    returned = round_trip(StorageFullError("no majority has space", ("n2", "n3")))
    assert isinstance(returned, StorageFullError) and isinstance(returned, StorageError)
    assert returned.nodes == ("n2", "n3")
    assert not isinstance(returned, BatchLimitError)


def test_topic_exists_is_an_invalid_topic_error() -> None:
    assert issubclass(TopicExistsError, InvalidTopicError)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (S.UNAVAILABLE, UnavailableError),
        (S.DEADLINE_EXCEEDED, RequestTimeoutError),
        (S.NOT_FOUND, UnknownTopicOrPartitionError),
        (S.OUT_OF_RANGE, OffsetOutOfRangeError),
        (S.INVALID_ARGUMENT, InvalidInputError),
        (S.RESOURCE_EXHAUSTED, BatchLimitError),
        (S.ALREADY_EXISTS, TopicExistsError),
        (S.DATA_LOSS, CorruptSegmentError),
        (S.CANCELLED, UnavailableError),
        (S.INTERNAL, LaminarError),
        (S.UNKNOWN, LaminarError),
        (S.UNIMPLEMENTED, LaminarError),
    ],
)
def test_status_without_detail_maps_by_code(status, expected) -> None:
    returned = error_from_rpc(FakeRpcError(status, "transport says no"))
    assert type(returned) is expected
    assert "transport says no" in str(returned)


def test_garbage_detail_falls_back_to_status() -> None:
    metadata = ((ERROR_METADATA_KEY, b"\xff\xff\xff"),)
    returned = error_from_rpc(FakeRpcError(S.UNAVAILABLE, "x", metadata))
    assert type(returned) is UnavailableError


def test_abort_with_on_a_real_aio_server() -> None:
    async def scenario() -> LaminarError:
        async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await abort_with(context, NotLeaderError("n3", "127.0.0.1:7103"))

        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "test.Svc", {"Call": grpc.unary_unary_rpc_method_handler(handler)}
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/test.Svc/Call")
                try:
                    await asyncio.to_thread(call, b"", timeout=5)
                except grpc.RpcError as rpc_error:
                    assert rpc_error.code() == S.UNAVAILABLE
                    return error_from_rpc(rpc_error)
            raise AssertionError("call did not fail")
        finally:
            await server.stop(None)

    returned = asyncio.run(scenario())
    assert isinstance(returned, NotLeaderError)
    assert returned.leader_address == "127.0.0.1:7103"
