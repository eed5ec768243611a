"""docs/conformance/batches-v1.json against the independent codec (written from the spec)."""

import json
from pathlib import Path

import pytest

from tests.conformance import independent

VECTORS_PATH = Path(__file__).resolve().parents[2] / "docs" / "conformance" / "batches-v1.json"
VECTORS = json.loads(VECTORS_PATH.read_text())


def _hex(value):
    return None if value is None else bytes.fromhex(value)


def _input_records(vector):
    """An encode vector's records as (timestamp_ms, key, value, headers) tuples."""
    return [
        (
            r["timestamp_ms"],
            _hex(r["key"]),
            _hex(r["value"]),
            [(k, bytes.fromhex(v)) for k, v in r["headers"]],
        )
        for r in vector["records"]
    ]


def _expected_records(vector):
    """A decode vector's records in the shape `independent.decode` returns."""
    return [
        {
            "offset": r["offset"],
            "timestamp_ms": r["timestamp_ms"],
            "key": _hex(r["key"]),
            "value": _hex(r["value"]),
            "headers": [(k, bytes.fromhex(v)) for k, v in r["headers"]],
        }
        for r in vector["records"]
    ]


def _by_name(section):
    vectors = VECTORS[section]
    return pytest.mark.parametrize("vector", vectors, ids=[v["name"] for v in vectors])


def test_version_and_limits():
    assert VECTORS["version"] == 1
    limits = VECTORS["limits"]
    assert limits["batch_bytes_max"] == independent.BATCH_BYTES_MAX
    assert limits["payload_uncompressed_bytes_max"] == independent.PAYLOAD_UNCOMPRESSED_BYTES_MAX
    assert limits["record_count_max"] == independent.RECORD_COUNT_MAX


def test_vector_names_are_unique():
    names = [v["name"] for s in ("encode", "decode", "invalid") for v in VECTORS[s]]
    assert len(names) == len(set(names))


@_by_name("encode")
def test_encode(vector):
    batch = independent.encode(
        _input_records(vector), vector["producer_id"], vector["base_sequence"]
    )
    assert batch.hex() == vector["batch"]


@_by_name("encode")
def test_encode_vector_decodes_back(vector):
    header, control, records = independent.decode(bytes.fromhex(vector["batch"]))
    assert not control
    assert header["producer_id"] == vector["producer_id"]
    assert header["base_sequence"] == vector["base_sequence"]
    assert header["base_offset"] == -1 and header["term"] == -1
    got = [(r["timestamp_ms"], r["key"], r["value"], r["headers"]) for r in records]
    assert got == _input_records(vector)
    assert independent.produce_error(bytes.fromhex(vector["batch"])) is None


@_by_name("decode")
def test_decode(vector):
    header, control, records = independent.decode(bytes.fromhex(vector["batch"]))
    assert header == vector["header"]
    assert control == vector["control"]
    assert records == _expected_records(vector)


@_by_name("invalid")
def test_invalid(vector):
    batch = bytes.fromhex(vector["batch"])
    assert independent.produce_error(batch) == vector["error_code"]
    assert independent.GRPC_STATUS[vector["error_code"]] == vector["grpc_status"]


@_by_name("invalid")
def test_invalid_is_refused_by_decode(vector):
    """A client's own validation refuses each invalid batch too, with the same code.

    INVALID_INPUT is about the request rather than the batch: a consumer still decodes a
    control batch (it is only refused from a client), and refuses a cut or padded buffer.
    """
    batch = bytes.fromhex(vector["batch"])
    if vector["error_code"] == "INVALID_INPUT" and batch[5] & independent.ATTR_CONTROL:
        assert independent.decode(batch)[1] is True
        return
    with pytest.raises(independent.BatchError) as info:
        independent.decode(batch)
    if vector["error_code"] != "INVALID_INPUT":
        assert info.value.code == vector["error_code"]
