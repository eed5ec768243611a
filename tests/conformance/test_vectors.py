"""Laminar against its own record-batch conformance vectors (``docs/conformance``).

1. The committed ``batches-v1.json`` is what ``scripts/conformance_vectors.py``
   generates now.
2. Laminar's codec agrees with every vector: it encodes the ``encode`` vectors to
   exactly their bytes, reads exactly the headers and records of the ``decode``
   vectors, and refuses the ``invalid`` ones.
3. A real broker process agrees: it answers a Produce of each ``invalid`` vector with
   the vector's gRPC status and ``ErrorDetail`` code, and stores the ``encode`` (and
   the non-control ``decode``) vectors byte for byte but for the fields a leader sets.

One node process serves every broker test (module-scoped); every wait has a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from laminar_client import Client

from laminar.errors import RecordFormatError
from laminar.grpc_errors import ERROR_METADATA_KEY
from laminar.records import (
    HEADER_BYTES,
    Header,
    Record,
    check_payload,
    decode_batch,
    encode_batch,
    iter_batches,
    verify_batch,
)
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from scripts.conformance_vectors import (
    OUTPUT,
    broker_error,
    build,
    expected_status,
    render,
    unstamped,
)
from tests.server.test_cluster import CLIENT_TIMEOUT_S, SETTLE_S, start_cluster, wait_leader

Vector = dict[str, Any]

VECTORS: dict[str, Any] = json.loads(OUTPUT.read_text(encoding="utf-8"))
ENCODE: list[Vector] = VECTORS["encode"]
DECODE: list[Vector] = VECTORS["decode"]
INVALID: list[Vector] = VECTORS["invalid"]

SERVICE_ONLY = {"trailing_bytes", "control_from_client"}
"""Invalid vectors whose batch itself decodes: only the broker's produce checks refuse
them (a produce request's batch is exactly its length; clients write no control
batches)."""

RPC_TIMEOUT_S = 10.0


def _names(vectors: list[Vector]) -> list[str]:
    return [vector["name"] for vector in vectors]


def _batch(vector: Vector) -> bytes:
    return bytes.fromhex(vector["batch"])


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def _headers(pairs: list[list[str]]) -> tuple[Header, ...]:
    return tuple((key, bytes.fromhex(value)) for key, value in pairs)


def _record(record: Vector, offset: int) -> Record:
    """A vector's record (JSON) as the codec's :class:`Record`, at ``offset``."""
    return Record(
        offset,
        record["timestamp_ms"],
        _bytes(record["key"]),
        _bytes(record["value"]),
        _headers(record["headers"]),
    )


def _masked(batch: bytes) -> bytes:
    """``batch`` without the fields a leader sets: base_offset and term (bytes 16..32)
    and the header checksum (72..80)."""
    return batch[:16] + batch[32:72] + batch[HEADER_BYTES:]


# --------------------------------------------------------------------------- the file


def test_committed_vectors_are_what_the_generator_produces() -> None:
    assert json.loads(OUTPUT.read_text(encoding="utf-8")) == build()
    assert OUTPUT.read_text(encoding="utf-8") == render(), (
        "run: .venv/bin/python scripts/conformance_vectors.py"
    )


def test_the_file_has_every_section_and_unique_names() -> None:
    assert VECTORS["name"] == "laminar-record-batch-vectors"
    assert VECTORS["version"] == 1
    assert ENCODE and DECODE and INVALID
    names = _names(ENCODE) + _names(DECODE) + _names(INVALID)
    assert len(names) == len(set(names))
    assert {f"{name}_stamped" for name in _names(ENCODE)} <= set(_names(DECODE))
    assert set(_names(INVALID)) >= SERVICE_ONLY


# --------------------------------------------------------------------------- the codec


@pytest.mark.parametrize("vector", ENCODE, ids=_names(ENCODE))
def test_codec_encodes_each_encode_vector_exactly(vector: Vector) -> None:
    records = vector["records"]
    batch = encode_batch(
        [_bytes(record["value"]) for record in records],
        keys=[_bytes(record["key"]) for record in records],
        timestamps_ms=[record["timestamp_ms"] for record in records],
        headers=[list(_headers(record["headers"])) for record in records],
        producer_id=vector["producer_id"],
        base_sequence=vector["base_sequence"],
    )
    assert batch.hex() == vector["batch"]
    assert decode_batch(batch).records() == [_record(record, -1) for record in records]
    assert broker_error(batch) is None


@pytest.mark.parametrize("vector", DECODE, ids=_names(DECODE))
def test_codec_decodes_each_decode_vector_exactly(vector: Vector) -> None:
    batch = _batch(vector)
    header = verify_batch(batch)
    assert header._asdict() == vector["header"]
    assert header.is_control is vector["control"]
    check_payload(batch, header)
    base = header.base_offset
    expected = [_record(record, base + index) for index, record in enumerate(vector["records"])]
    assert [record["offset"] for record in vector["records"]] == [r.offset for r in expected]
    assert decode_batch(batch).records() == expected


@pytest.mark.parametrize("vector", INVALID, ids=_names(INVALID))
def test_codec_refuses_each_invalid_vector(vector: Vector) -> None:
    batch = _batch(vector)
    error = broker_error(batch)
    assert error is not None
    assert expected_status(error) == (vector["error_code"], vector["grpc_status"])
    if vector["name"] in SERVICE_ONLY:
        decode_batch(batch)  # the batch itself decodes: only the service refuses it
        return
    with pytest.raises(RecordFormatError):
        decode_batch(batch)
    # What a leader runs on receipt refuses it too (check_payload raises exactly when
    # decode_batch would).
    with pytest.raises(RecordFormatError):
        header = verify_batch(batch)
        assert header.length == len(batch)
        check_payload(batch, header)


# --------------------------------------------------------------------------- a broker


@dataclass
class Broker:
    cluster: ProcessCluster
    node: NodeProcess
    stub: laminar_pb2_grpc.LaminarStub
    topic: str


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One real node process with a topic of one partition, replication factor 1."""
    cluster = start_cluster(tmp_path_factory.mktemp("conformance"), 1)
    try:
        node = cluster.nodes[0]
        topic = "vectors"
        create_topic(cluster, node, topic)
        # A channel with its own subchannels: none left in backoff by another test.
        channel = grpc.insecure_channel(node.grpc, options=[("grpc.use_local_subchannel_pool", 1)])
        try:
            stub = laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]
            broker = Broker(cluster, node, stub, topic)
            # The leader's first entry (its term's no-op at offset 0) committed: the
            # high watermark the tests read as "before" moves no more on its own.
            wait_for(lambda: high_watermark(broker, topic) >= 1, SETTLE_S, "the leader's no-op")
            yield broker
        finally:
            channel.close()
    finally:
        cluster.close()


def create_topic(cluster: ProcessCluster, node: NodeProcess, topic: str) -> None:
    with Client([node.grpc], timeout_s=CLIENT_TIMEOUT_S) as client:
        client.create_topic(topic, 1, 1)
    wait_leader(cluster, topic, 0)


def produce(broker: Broker, topic: str, batch: bytes) -> pb.ProduceResponse | grpc.RpcError:
    """A Produce of ``batch`` alone (acks all): its answer, or the error it failed with.

    UNAVAILABLE (no vector expects it: the new leader not serving yet) is retried
    until the deadline."""
    request = pb.ProduceRequest(topic=topic, partition=0, batches=[batch], acks=pb.ACKS_ALL)
    outcome: list[pb.ProduceResponse | grpc.RpcError] = []

    def answered() -> bool:
        try:
            outcome[:] = [broker.stub.Produce(request, timeout=RPC_TIMEOUT_S)]
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                raise
            outcome[:] = [error]
        return True

    wait_for(answered, SETTLE_S, f"a produce to {topic} to be answered")
    return outcome[0]


def detail_code_name(error: grpc.RpcError) -> str | None:
    """The name of the ``ErrorDetail.code`` in the trailing metadata, if there is one."""
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == ERROR_METADATA_KEY:
            detail = pb.ErrorDetail()
            detail.ParseFromString(value)
            return pb.ErrorCode.Name(detail.code)
    return None


def high_watermark(broker: Broker, topic: str) -> int:
    request = pb.FetchRequest(topic=topic, partition=0, offset=0, max_bytes=1, max_wait_ms=0)
    return int(broker.stub.Fetch(request, timeout=RPC_TIMEOUT_S).high_watermark)


def fetch_data_batches(broker: Broker, topic: str, count: int) -> list[bytes]:
    """The first ``count`` non-control batches of the partition, fetched from offset 0
    (control batches, such as the no-op a new leader writes first, are skipped)."""
    found: list[bytes] = []
    offset = 0
    deadline = time.monotonic() + SETTLE_S
    while len(found) < count:
        assert time.monotonic() < deadline, f"fetched {len(found)} of {count} batches"
        request = pb.FetchRequest(topic=topic, partition=0, offset=offset, max_wait_ms=1_000)
        data = broker.stub.Fetch(request, timeout=RPC_TIMEOUT_S).batches
        for position, header in iter_batches(data):
            if header.next_offset <= offset:
                continue  # a fetch may start before the offset asked for
            offset = header.next_offset
            if not header.is_control:
                found.append(data[position : position + header.length])
    return found


def test_broker_refuses_each_invalid_vector_with_its_codes(broker: Broker) -> None:
    before = high_watermark(broker, broker.topic)
    wrong: list[str] = []
    for vector in INVALID:
        outcome = produce(broker, broker.topic, _batch(vector))
        if not isinstance(outcome, grpc.RpcError):
            wrong.append(f"{vector['name']}: accepted at offset {list(outcome.base_offsets)}")
            continue
        status = outcome.code().name  # type: ignore[attr-defined]
        code = detail_code_name(outcome)
        if (code, status) != (vector["error_code"], vector["grpc_status"]):
            wrong.append(
                f"{vector['name']}: {code} {status}, expected "
                f"{vector['error_code']} {vector['grpc_status']} "
                f"({outcome.details()})"  # type: ignore[attr-defined]
            )
    assert not wrong, "\n".join(wrong)
    assert high_watermark(broker, broker.topic) == before, "an invalid vector was stored"


def test_broker_stores_each_encode_vector_as_sent(broker: Broker) -> None:
    base_offsets = []
    for vector in ENCODE:
        outcome = produce(broker, broker.topic, _batch(vector))
        assert not isinstance(outcome, grpc.RpcError), (vector["name"], outcome)
        assert len(outcome.base_offsets) == 1
        base_offsets.append(outcome.base_offsets[0])

    fetched = fetch_data_batches(broker, broker.topic, len(ENCODE))
    for vector, base_offset, batch in zip(ENCODE, base_offsets, fetched, strict=True):
        name = vector["name"]
        assert _masked(batch) == _masked(_batch(vector)), name
        header = verify_batch(batch)
        assert header.base_offset == base_offset, name
        assert header.term >= 0, name
        records = [_record(record, base_offset + i) for i, record in enumerate(vector["records"])]
        assert decode_batch(batch).records() == records, name
    end = base_offsets[-1] + len(ENCODE[-1]["records"])
    assert high_watermark(broker, broker.topic) == end, "more was stored than was sent"


def test_broker_stores_each_data_decode_vector_as_sent(broker: Broker) -> None:
    """The non-control decode vectors (compressed, and the accepted non-canonical
    encodings among them) are valid batches to a broker too, once unstamped."""
    vectors = [vector for vector in DECODE if not vector["control"]]
    topic = "decode-vectors"
    create_topic(broker.cluster, broker.node, topic)
    base_offsets = []
    for vector in vectors:
        outcome = produce(broker, topic, unstamped(_batch(vector)))
        assert not isinstance(outcome, grpc.RpcError), (vector["name"], outcome)
        base_offsets.append(outcome.base_offsets[0])

    fetched = fetch_data_batches(broker, topic, len(vectors))
    for vector, base_offset, batch in zip(vectors, base_offsets, fetched, strict=True):
        name = vector["name"]
        assert _masked(batch) == _masked(_batch(vector)), name
        assert verify_batch(batch).base_offset == base_offset, name
        records = [_record(record, base_offset + i) for i, record in enumerate(vector["records"])]
        assert decode_batch(batch).records() == records, name
