"""Write the record-batch conformance vectors: ``docs/conformance/batches-v1.json``.

The vectors make the batch format of ``laminar/records.py`` (specified in
``docs/format.md``) checkable by an implementation in any language:

``encode``   records, and the exact uncompressed batch a conforming encoder makes of them;
``decode``   valid batches as a leader stored them, with the header fields and records a
             conforming decoder reads from each;
``invalid``  single batches a client could send, with the ``ErrorCode`` and gRPC status a
             Laminar broker answers a ``Produce`` of each one with.

Everything is computed with Laminar's own codec, and the broker's answers with the
broker's own checks in the broker's order (:func:`broker_error`); ``tests/conformance``
proves that the codec and a real broker process agree with every vector. The output
does not depend on the zstandard library's version: the two vectors compressed by it
hold frames frozen below (:data:`FROZEN_FRAMES`, checked to decompress to their
payloads), and every other zstd frame is built here from raw blocks (:func:`zstd_frame`).

Usage, from the repository root::

    .venv/bin/python scripts/conformance_vectors.py          # write the file
    .venv/bin/python scripts/conformance_vectors.py --check  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import xxhash
import zstandard

from laminar.errors import LaminarError, RecordFormatError
from laminar.grpc_errors import error_to_status
from laminar.ids import NodeId
from laminar.records import (
    ATTRIBUTE_CODEC_MASK,
    ATTRIBUTE_CONTROL,
    DEFAULT_LIMITS,
    HEADER_BYTES,
    HEADER_STRUCT,
    Compression,
    Header,
    check_payload,
    check_produced_header,
    decode_batch,
    encode_batch,
    encode_control_batch,
    parse_header,
    seal_payload,
    verify_batch,
    with_leader_fields,
)
from laminar.replica.core import encode_config
from laminar.replica.types import GroupConfig
from laminar.v1.laminar_pb2 import ErrorCode

ROOT = Path(__file__).resolve().parent.parent
OUTPUT_NAME = "docs/conformance/batches-v1.json"
OUTPUT = ROOT / OUTPUT_NAME
COMMAND = ".venv/bin/python scripts/conformance_vectors.py"

NAME = "laminar-record-batch-vectors"
VERSION = 1
SPEC = "docs/format.md"
GENERATOR = "scripts/conformance_vectors.py"

DECODE_BASE_OFFSET = 1000
"""Decode vector ``i`` is stamped with base offset 1000 + 100 * i and term 3."""
DECODE_OFFSET_STEP = 100
DECODE_TERM = 3
T0 = 1_700_000_000_000
"""A realistic timestamp in milliseconds (2023-11-14)."""
MIB = 1024 * 1024

Json = dict[str, Any]
RecordSpec = tuple[int, bytes | None, bytes | None, list[Header]]
"""One record of an encode vector: (timestamp_ms, key, value, headers)."""


# --------------------------------------------------------------------------- the broker


def broker_error(batch: bytes) -> LaminarError | None:
    """The error a broker answers a ``Produce`` of ``batch`` alone with, or None.

    Mirrors, in the broker's order:

    1. ``laminar/server/service.py`` ``LaminarService._check_produce``, per batch:
       :func:`laminar.records.check_produced_header` (the very function it calls);
       its errors reach the client as raised.
    2. ``laminar/replica/core.py`` ``ReplicaCore._check_batch``: ``verify_batch`` and
       ``check_payload`` with the node's limits (``DEFAULT_LIMITS``). The core answers
       a refusal as ``ProduceStatus.INVALID`` with the error's message, which
       ``laminar/server/host.py`` ``_result`` raises as a plain ``RecordFormatError``.
       (Its own length and control checks repeat step 1's, which refused first.)
    """
    try:
        check_produced_header(batch)
    except LaminarError as error:
        return error
    try:
        header = verify_batch(batch, limits=DEFAULT_LIMITS)
        if header.length == len(batch):
            check_payload(batch, header, limits=DEFAULT_LIMITS)
    except RecordFormatError as error:
        return RecordFormatError(str(error))
    return None


def expected_status(error: LaminarError) -> tuple[str, str]:
    """``(ErrorCode name, gRPC status name)`` that carry ``error`` over gRPC."""
    status, detail = error_to_status(error)
    return ErrorCode.Name(detail.code), status.name


# --------------------------------------------------------------------------- forging

_HEADER_FIELDS = (
    "length",
    "magic",
    "attributes",
    "reserved_6",
    "record_count",
    "payload_uncompressed_bytes",
    "base_offset",
    "term",
    "first_timestamp_ms",
    "max_timestamp_ms",
    "producer_id",
    "base_sequence",
    "reserved_60",
    "payload_checksum",
    "header_checksum",
)
_CHECKSUMMED_HEADER_BYTES = 72
_CHECKSUM = struct.Struct("<Q")


def header_fields(batch: bytes) -> dict[str, int]:
    """Every field of ``batch``'s 80-byte header, reserved ones included, unchecked."""
    return dict(zip(_HEADER_FIELDS, HEADER_STRUCT.unpack_from(batch), strict=True))


def pack_header(fields: dict[str, int]) -> bytes:
    """An 80-byte header of ``fields`` (as :func:`header_fields` names them) whose
    header checksum is right for them (``fields["header_checksum"]`` is ignored)."""
    head = HEADER_STRUCT.pack(*(fields[name] for name in _HEADER_FIELDS))
    head = head[:_CHECKSUMMED_HEADER_BYTES]
    return head + _CHECKSUM.pack(xxhash.xxh3_64_intdigest(head))


FROZEN_FRAMES = {
    # zstandard 0.25 at level 3, captured once: a newer zstd may compress differently,
    # and the file must stay the same (compressed bytes are not canonical).
    "keyed_records": "28b52ffd204ddd0100c402010068e5cf8b0100000102050000000600ffffffff757365"
    "722d313366697273747365636f6e6474686972640500295240206017c877594102",
    "some_headers": "28b52ffd20ad1d040012871a23b0271d8ce8568d4a514f225b045a226ccb5a23f631e47e"
    "c38076a0810569104b884c0199d1a141ffb5886f1fc2e0adfb62ae00e15a228588ab3ffd5bd688510124482a"
    "11e394b2e59c11150b3d3d3faca3ccd296f46d6a7750d334b69505697b7100493b138e4773120900338964861b"
    "330799b6e1060646ef0682cc96952e",
}

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_BYTES_MAX = 128 * 1024
_SKIPPABLE_FRAME = b"\x50\x2a\x4d\x18" + struct.pack("<I", 0)
"""An empty skippable frame (magic 0x184D2A50, size 0)."""


def zstd_frame(
    data: bytes,
    *,
    content_size: bool = True,
    checksum: int | None = None,
    dictionary_id: int | None = None,
) -> bytes:
    """A zstd frame (RFC 8878) of ``data`` in raw (stored) blocks: valid for every
    decoder, and the same bytes whatever zstd library is installed. ``checksum``: a
    Content_Checksum to write (4 bytes); ``dictionary_id``: a 1-byte Dictionary_ID."""
    # With the size: Single_Segment_flag and an 8-byte Frame_Content_Size (FCS_Field_Size
    # 3). Without: no Frame_Content_Size, and a Window_Descriptor of 128 KiB (exponent 7).
    descriptor = (0xE0 if content_size else 0x00) | (0x04 if checksum is not None else 0)
    header = bytes((descriptor | (0x01 if dictionary_id is not None else 0),))
    if not content_size:
        header += bytes((7 << 3,))
    if dictionary_id is not None:
        header += bytes((dictionary_id,))
    if content_size:
        header += struct.pack("<Q", len(data))
    blocks = []
    chunks = [
        data[at : at + _ZSTD_BLOCK_BYTES_MAX] for at in range(0, len(data), _ZSTD_BLOCK_BYTES_MAX)
    ]
    for index, chunk in enumerate(chunks or [b""]):
        last = index == max(len(chunks), 1) - 1
        blocks.append(int(last | (len(chunk) << 3)).to_bytes(3, "little") + chunk)
    trailer = b"" if checksum is None else struct.pack("<I", checksum)
    return _ZSTD_MAGIC + header + b"".join(blocks) + trailer


def frozen_zstd(name: str, batch: bytes) -> bytes:
    """``batch`` (uncompressed) with its payload as the frozen frame of ``name``."""
    frame = bytes.fromhex(FROZEN_FRAMES[name])
    payload = batch[HEADER_BYTES:]
    if zstandard.ZstdDecompressor().decompress(frame) != payload:
        raise AssertionError(f"the frozen frame of {name} no longer holds its payload")
    return forge(
        batch, frame, attributes=int(Compression.ZSTD), payload_uncompressed_bytes=len(payload)
    )


def forge(batch: bytes, stored: bytes | None = None, **changes: int) -> bytes:
    """``batch`` with header fields changed and, given ``stored``, another stored payload.

    With ``stored``, the length and the payload checksum follow it (and so does the
    uncompressed size, when the forged batch is not compressed). The header checksum
    is always recomputed. ``changes`` override all of these.
    """
    fields = header_fields(batch)
    if stored is None:
        stored = batch[HEADER_BYTES:]
    else:
        fields["length"] = HEADER_BYTES + len(stored)
        fields["payload_checksum"] = xxhash.xxh3_64_intdigest(stored)
        if not changes.get("attributes", fields["attributes"]) & ATTRIBUTE_CODEC_MASK:
            fields["payload_uncompressed_bytes"] = len(stored)
    fields.update(changes)
    return pack_header(fields) + stored


def unstamped(batch: bytes) -> bytes:
    """``batch`` as a client sends it: base offset and term -1."""
    return forge(batch, base_offset=-1, term=-1)


def _lengths(items: Sequence[bytes | None]) -> bytes:
    return struct.pack(f"<{len(items)}i", *(-1 if item is None else len(item) for item in items))


def build_payload(
    timestamps_ms: Sequence[int],
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    header_blobs: Sequence[bytes] | None = None,
) -> bytes:
    """An uncompressed payload, column by column: a keys column when ``keys`` is given
    (even if every key is null) and a headers column when ``header_blobs`` is."""
    count = len(values)
    flags = (0x01 if keys is not None else 0) | (0x02 if header_blobs is not None else 0)
    parts = [bytes((flags,)), struct.pack(f"<{count}q", *timestamps_ms), _lengths(values)]
    if keys is not None:
        parts.append(_lengths(keys))
    if header_blobs is not None:
        parts.append(struct.pack(f"<{count}I", *map(len, header_blobs)))
    if keys is not None:
        parts.append(b"".join(key for key in keys if key is not None))
    parts.append(b"".join(value for value in values if value is not None))
    if header_blobs is not None:
        parts.append(b"".join(header_blobs))
    return b"".join(parts)


def seal(payload: bytes, timestamps_ms: Sequence[int]) -> bytes:
    """An uncompressed batch around ``payload`` (leader fields unset)."""
    return seal_payload(
        payload,
        record_count=len(timestamps_ms),
        first_timestamp_ms=timestamps_ms[0],
        max_timestamp_ms=max(timestamps_ms),
        compression=Compression.NONE,
    )


def pack_headers(pairs: object) -> bytes:
    """msgpack of a record's headers as an encoder writes them (str keys, bin values)."""
    return msgpack.packb(pairs, use_bin_type=True)  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- encode


@dataclass(frozen=True)
class EncodeCase:
    name: str
    description: str
    records: list[RecordSpec]
    producer_id: int = -1
    base_sequence: int = -1

    def encode(self, compression: Compression = Compression.NONE) -> bytes:
        return encode_batch(
            [value for _, _, value, _ in self.records],
            keys=[key for _, key, _, _ in self.records],
            timestamps_ms=[timestamp for timestamp, _, _, _ in self.records],
            headers=[headers for _, _, _, headers in self.records],
            compression=compression,
            producer_id=self.producer_id,
            base_sequence=self.base_sequence,
        )


def encode_cases() -> list[EncodeCase]:
    long_key = bytes(range(250)) * 4
    return [
        EncodeCase(
            "one_record",
            "One record with a value and nothing else, timestamp 0: the smallest batch "
            "layout (no keys column, no headers column).",
            [(0, None, b"hello", [])],
        ),
        EncodeCase(
            "keyed_records",
            "Three records with keys (one key null) and increasing timestamps: a keys column "
            "with -1 for the null key, keys then values concatenated in record order.",
            [
                (T0, b"user-1", b"first", []),
                (T0 + 1, None, b"second", []),
                (T0 + 2, b"user-3", b"third", []),
            ],
        ),
        EncodeCase(
            "null_and_empty_values",
            "A null value (tombstone, length -1, no bytes) next to an empty value (length 0): "
            "the two are distinct.",
            [(T0, b"user-1", None, []), (T0 + 1, b"user-2", b"", [])],
        ),
        EncodeCase(
            "all_keys_null",
            "Every key null: a canonical encoder omits the keys column and leaves payload "
            "flag bit 0 clear.",
            [(T0, None, b"a", []), (T0, None, b"b", []), (T0, None, b"c", [])],
        ),
        EncodeCase(
            "some_headers",
            "Headers on some records only: the headers column is present and a record "
            "without headers has header length 0 (no msgpack blob).",
            [
                (T0, b"k", b"with one header", [("trace-id", bytes.fromhex("0102030405"))]),
                (T0 + 1, b"k", b"without headers", []),
                (
                    T0 + 2,
                    b"k",
                    b"with two headers",
                    [("content-type", b"application/json"), ("attempt", b"\x01")],
                ),
            ],
        ),
        EncodeCase(
            "header_edge_cases",
            "Header keys are msgpack str (UTF-8, here non-ASCII) and values msgpack bin "
            "(here one empty); a repeated key is kept, in order.",
            [
                (
                    T0,
                    None,
                    b"v",
                    [
                        ("größe-日本", b"42"),
                        ("empty", b""),
                        ("dup", b"1"),
                        ("dup", b"2"),
                    ],
                )
            ],
        ),
        EncodeCase(
            "unordered_timestamps",
            "Timestamps need not be monotonic and may be negative or 2**63-1: "
            "first_timestamp_ms is the first record's, max_timestamp_ms the largest.",
            [
                (T0, None, b"a", []),
                (-T0, None, b"b", []),
                (2**63 - 1, None, b"c", []),
                (0, None, b"d", []),
            ],
        ),
        EncodeCase(
            "idempotent_producer",
            "An idempotent producer's batch: producer_id and base_sequence set, the records "
            "taking sequences 42, 43 and 44.",
            [
                (T0, b"k", b"seq-42", []),
                (T0 + 1, b"k", b"seq-43", []),
                (T0 + 2, b"k", b"seq-44", []),
            ],
            producer_id=0x1234_5678_9ABC,
            base_sequence=42,
        ),
        EncodeCase(
            "every_byte_value_long_key",
            "Keys and values are opaque bytes: a value holding every byte 0..255 and a "
            "1000-byte key.",
            [(T0, long_key, bytes(range(256)), [])],
        ),
        EncodeCase(
            "hundred_records",
            "One hundred records with small keys (every third null) and values, to exercise "
            "the columns at length.",
            [
                (
                    T0 + 10 * index,
                    None if index % 3 == 0 else b"key-%d" % index,
                    b"value-%d" % index,
                    [],
                )
                for index in range(100)
            ],
        ),
    ]


def encode_vector(case: EncodeCase) -> Json:
    batch = case.encode()
    return {
        "name": case.name,
        "description": case.description,
        "records": [
            {
                "timestamp_ms": timestamp,
                "key": _hex(key),
                "value": _hex(value),
                "headers": _headers_json(headers),
            }
            for timestamp, key, value, headers in case.records
        ],
        "producer_id": case.producer_id,
        "base_sequence": case.base_sequence,
        "batch": batch.hex(),
    }


# --------------------------------------------------------------------------- decode


def decode_batches(cases: list[EncodeCase]) -> list[tuple[str, str, bytes]]:
    """Every decode vector's ``(name, description, batch)``, not yet stamped."""
    by_name = {case.name: case for case in cases}
    found: list[tuple[str, str, bytes]] = [
        (
            f"{case.name}_stamped",
            f"The encode vector {case.name} as a leader stores it (base_offset and term set, "
            "header checksum recomputed).",
            case.encode(),
        )
        for case in cases
    ]
    not_canonical = (
        " Compressed bytes are not canonical: another zstd implementation may produce "
        "other bytes; an encoder must only produce a batch that decodes."
    )
    for name in ("keyed_records", "some_headers"):
        found.append(
            (
                f"{name}_zstd",
                f"The encode vector {name} compressed with zstd (codec 1): the payload "
                "checksum covers the compressed bytes." + not_canonical,
                frozen_zstd(name, by_name[name].encode()),
            )
        )

    keyed = by_name["keyed_records"].encode()
    payload = keyed[HEADER_BYTES:]
    frame = zstd_frame(payload, content_size=False)
    found.append(
        (
            "zstd_without_content_size",
            "A zstd frame that does not declare its content size (optional in zstd): the "
            "decoder decompresses into at most payload_uncompressed_bytes." + not_canonical,
            forge(keyed, frame, attributes=int(Compression.ZSTD)),
        )
    )

    timestamps = [T0, T0 + 1]
    found.append(
        (
            "keys_flag_every_key_null",
            "Payload flag bit 0 set with every key length -1: not canonical, but decodes to "
            "null keys.",
            seal(build_payload(timestamps, [b"a", b"b"], keys=[None, None]), timestamps),
        )
    )
    found.append(
        (
            "headers_flag_every_header_empty",
            "Payload flag bit 1 set with every header length 0: not canonical, but decodes to "
            "records without headers.",
            seal(build_payload(timestamps, [b"a", b"b"], header_blobs=[b"", b""]), timestamps),
        )
    )
    found.append(
        (
            "header_msgpack_not_shortest",
            "A header blob in longer msgpack types than needed (array16, str16, bin16): "
            "encoders write the shortest, decoders accept any.",
            seal(
                build_payload(
                    [T0], [b"a"], header_blobs=[b"\xdc\x00\x01\x92\xda\x00\x01h\xc5\x00\x01v"]
                ),
                [T0],
            ),
        )
    )
    found.append(
        (
            "empty_header_array16",
            "A record whose header blob is an empty array16 (0xdc 0x00 0x00): no headers.",
            seal(build_payload([T0], [b"a"], header_blobs=[b"\xdc\x00\x00"]), [T0]),
        )
    )
    found.append(
        (
            "empty_header_array",
            "A record whose header blob is an empty msgpack array (0x90) next to one with "
            "headers: decodes to no headers, like header length 0.",
            seal(
                build_payload(
                    timestamps,
                    [b"a", b"b"],
                    header_blobs=[b"\x90", pack_headers([["h", b"v"]])],
                ),
                timestamps,
            ),
        )
    )
    found.append(
        (
            "control_noop",
            "The control batch a new leader writes first (attribute bit 4, one record, key "
            "'noop', empty value); consumers skip control batches.",
            encode_control_batch(b"noop", b"", 5),
        )
    )
    voters = (NodeId("node0"), NodeId("node1"), NodeId("node2"))
    found.append(
        (
            "control_config",
            "A configuration control batch (key 'config', value a msgpack map of voters and "
            "learners) as the broker writes it for three voters; consumers skip it.",
            encode_config(GroupConfig(voters), 5),
        )
    )
    return found


def decode_vector(name: str, description: str, batch: bytes) -> Json:
    header = verify_batch(batch)
    check_payload(batch, header)
    records = decode_batch(batch).records()
    return {
        "name": name,
        "description": description,
        "batch": batch.hex(),
        "header": dict(header._asdict()),
        "control": header.is_control,
        "records": [
            {
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": _hex(record.key),
                "value": _hex(record.value),
                "headers": _headers_json(record.headers),
            }
            for record in records
        ],
    }


# --------------------------------------------------------------------------- invalid


def invalid_batches() -> list[tuple[str, str, bytes]]:
    """Every invalid vector's ``(name, description, batch)``."""
    base = encode_batch([b"value"], keys=[b"key"], timestamps_ms=[T0])
    base_payload = base[HEADER_BYTES:]
    pair_timestamps = [T0 + 10, T0 + 20]
    pair = encode_batch([b"a", b"b"], timestamps_ms=pair_timestamps)
    fields = header_fields(base)

    def flipped(batch: bytes, position: int) -> bytes:
        data = bytearray(batch)
        data[position] ^= 0x01
        return bytes(data)

    def headers_batch(blob: bytes) -> bytes:
        return seal(build_payload([T0], [b"v"], header_blobs=[blob]), [T0])

    payload = bytearray(base_payload)
    payload[0] |= 0x04
    unknown_flag = forge(base, bytes(payload))
    payload = bytearray(base_payload)  # flags, timestamp, value length at 9, key length at 13
    struct.pack_into("<i", payload, 9, 10**6)
    value_past_end = forge(base, bytes(payload))
    payload = bytearray(base_payload)
    struct.pack_into("<i", payload, 9, -2)
    length_minus_two = forge(base, bytes(payload))

    zstd = int(Compression.ZSTD)
    wrong_checksum = ~xxhash.xxh64_intdigest(base_payload) & 0xFFFFFFFF
    framed = zstd_frame(base_payload)
    unframed = zstd_frame(base_payload, content_size=False)
    return [
        (
            "shorter_than_header",
            "79 bytes: a batch is at least its 80-byte header.",
            base[: HEADER_BYTES - 1],
        ),
        ("unsupported_magic", "Magic 2: only format version 1 is known.", forge(base, magic=2)),
        (
            "header_checksum_wrong",
            "The header checksum does not match header bytes [0, 72).",
            flipped(base, 72),
        ),
        (
            "payload_checksum_wrong",
            "A payload byte changed without its checksum: the payload checksum covers the "
            "stored payload.",
            flipped(base, len(base) - 1),
        ),
        (
            "length_beyond_bytes_sent",
            "The length field announces one byte more than was sent (the buffer is cut short).",
            base[:-1],
        ),
        (
            "trailing_bytes",
            "Four bytes after the batch: a batch in a produce request is exactly its length.",
            base + b"\x00\x00\x00\x00",
        ),
        (
            "unknown_attribute_bit",
            "Attribute bit 3 (0x08) set: bits other than the codec and the control bit must be 0.",
            forge(base, attributes=0x08),
        ),
        (
            "unknown_codec",
            "Codec 2: only 0 (none) and 1 (zstd) are known.",
            forge(base, attributes=2),
        ),
        (
            "control_from_client",
            "The control bit set on a client's batch: only the broker writes control batches.",
            forge(base, attributes=ATTRIBUTE_CONTROL),
        ),
        (
            "record_count_zero",
            "Record count 0: a batch holds at least one record.",
            forge(base, record_count=0),
        ),
        (
            "record_count_over_limit",
            "Record count 1,000,001 in a tiny payload: the record count limit (1,000,000) is "
            "checked before whether the records fit.",
            forge(base, record_count=DEFAULT_LIMITS.record_count_max + 1),
        ),
        (
            "length_over_limit",
            "A length field of 20 MiB (only the header forged): above the 16 MiB batch limit, "
            "refused before the bytes sent are counted.",
            forge(base, length=20 * MIB),
        ),
        (
            "uncompressed_size_over_limit",
            "A zstd batch whose payload_uncompressed_bytes is 65 MiB: above the 64 MiB limit, "
            "refused before anything is decompressed.",
            forge(base, framed, attributes=zstd, payload_uncompressed_bytes=65 * MIB),
        ),
        (
            "uncompressed_size_not_length",
            "An uncompressed batch whose payload_uncompressed_bytes is not length - 80.",
            forge(base, payload_uncompressed_bytes=fields["payload_uncompressed_bytes"] + 1),
        ),
        (
            "records_cannot_fit",
            f"Three records in a {len(base_payload)}-byte payload: record_count * 12 + 1 "
            "(flags, then at least a timestamp and a value length per record) exceeds "
            "payload_uncompressed_bytes.",
            forge(base, record_count=3),
        ),
        (
            "first_timestamp_above_max",
            "first_timestamp_ms greater than max_timestamp_ms in the header.",
            forge(pair, first_timestamp_ms=T0 + 30),
        ),
        (
            "first_timestamp_not_first_record",
            "The header's first_timestamp_ms is not the first record's timestamp.",
            forge(pair, first_timestamp_ms=pair_timestamps[0] + 1),
        ),
        (
            "max_timestamp_not_largest",
            "The header's max_timestamp_ms is not the largest record timestamp.",
            forge(pair, max_timestamp_ms=pair_timestamps[1] + 1),
        ),
        (
            "unknown_payload_flag",
            "Payload flag bit 2 (0x04) set: only bits 0 (keys) and 1 (headers) are known.",
            unknown_flag,
        ),
        (
            "value_length_past_payload",
            "A value length (1,000,000) that runs past the payload's end.",
            value_past_end,
        ),
        (
            "length_minus_two",
            "A value length of -2: the only negative length is -1 (null).",
            length_minus_two,
        ),
        (
            "bytes_after_columns",
            "Two bytes left over after the last column: the columns must fill the payload exactly.",
            forge(base, base_payload + b"\x00\x00"),
        ),
        (
            "header_blob_not_msgpack",
            "A header blob that is not msgpack (0xc1, never used).",
            headers_batch(b"\xc1"),
        ),
        (
            "header_value_str",
            "A header value that is a msgpack str: header values are bin.",
            headers_batch(msgpack.packb([["k", "v"]], use_bin_type=True)),
        ),
        (
            "header_key_bin",
            "A header key that is a msgpack bin: header keys are str.",
            headers_batch(msgpack.packb([[b"k", b"v"]], use_bin_type=True)),
        ),
        (
            "header_blob_map",
            "A header blob that is a msgpack map: record headers are an array of [key, value] "
            "pairs.",
            headers_batch(msgpack.packb({"k": b"v"}, use_bin_type=True)),
        ),
        (
            "header_blob_trailing_bytes",
            "A header blob with a byte after its msgpack array: the blob is exactly one "
            "msgpack value.",
            headers_batch(pack_headers([["k", b"v"]]) + b"\x00"),
        ),
        (
            "zstd_not_a_frame",
            "Codec zstd on a payload that is not a zstd frame (the uncompressed payload).",
            forge(base, attributes=zstd),
        ),
        (
            "zstd_content_size_mismatch",
            "A zstd frame whose declared content size differs from payload_uncompressed_bytes.",
            forge(base, framed, attributes=zstd, payload_uncompressed_bytes=len(base_payload) + 1),
        ),
        (
            "zstd_short_without_content_size",
            "A zstd frame without a content size that decompresses to fewer bytes than "
            "payload_uncompressed_bytes.",
            forge(
                base, unframed, attributes=zstd, payload_uncompressed_bytes=len(base_payload) + 5
            ),
        ),
        (
            "zstd_long_without_content_size",
            "A zstd frame without a content size that decompresses to more bytes than "
            "payload_uncompressed_bytes: a decoder decompresses into at most that many.",
            forge(
                base, unframed, attributes=zstd, payload_uncompressed_bytes=len(base_payload) - 1
            ),
        ),
        (
            "producer_without_sequence",
            "producer_id set with base_sequence -1: the two are set together or not at all.",
            forge(base, producer_id=7, base_sequence=-1),
        ),
        (
            "sequence_past_int32",
            "base_sequence 2**31 - 1 with two records: the last sequence must be at most "
            "2**31 - 1.",
            forge(pair, producer_id=7, base_sequence=2**31 - 1),
        ),
        (
            "base_offset_minus_2",
            "base_offset -2: it is -1 (unset) or >= 0.",
            forge(base, base_offset=-2),
        ),
        ("term_minus_5", "term -5: it is -1 (unset) or >= 0.", forge(base, term=-5)),
        (
            "control_with_two_records",
            "A client's control batch of two records: the header rule (a control batch holds "
            "one record) is checked before the control bit is refused as input.",
            forge(pair, attributes=ATTRIBUTE_CONTROL),
        ),
        (
            "uncompressed_size_over_limit_uncompressed",
            "An uncompressed batch whose payload_uncompressed_bytes is 65 MiB: the limit is "
            "checked before the size is compared with the length.",
            forge(base, payload_uncompressed_bytes=65 * MIB),
        ),
        (
            "zstd_checksum_wrong",
            "A zstd frame whose Content_Checksum is present and wrong.",
            forge(base, zstd_frame(base_payload, checksum=wrong_checksum), attributes=zstd),
        ),
        (
            "zstd_dictionary",
            "A zstd frame that names a dictionary (Dictionary_ID 7): not supported.",
            forge(base, zstd_frame(base_payload, dictionary_id=7), attributes=zstd),
        ),
        (
            "zstd_skippable_frame_first",
            "A skippable frame before the zstd frame: the payload is exactly one frame.",
            forge(base, _SKIPPABLE_FRAME + zstd_frame(base_payload), attributes=zstd),
        ),
        (
            "header_key_invalid_utf8",
            "A header key that is a msgpack str holding bytes that are not UTF-8.",
            headers_batch(b"\x91\x92\xa2\xff\xfe\xc4\x01v"),
        ),
    ]


def invalid_vector(name: str, description: str, batch: bytes) -> Json:
    error = broker_error(batch)
    assert error is not None, f"invalid vector {name} is accepted by the broker"
    error_code, grpc_status = expected_status(error)
    return {
        "name": name,
        "description": description,
        "batch": batch.hex(),
        "error_code": error_code,
        "grpc_status": grpc_status,
    }


# --------------------------------------------------------------------------- document


def build() -> Json:
    """The whole vectors document, as written to :data:`OUTPUT`."""
    cases = encode_cases()
    encode = [encode_vector(case) for case in cases]
    for case in cases:
        assert broker_error(case.encode()) is None, case.name
    decode = []
    for index, (name, description, batch) in enumerate(decode_batches(cases)):
        if not parse_header(batch).is_control:
            assert broker_error(batch) is None, name
        base_offset = DECODE_BASE_OFFSET + DECODE_OFFSET_STEP * index
        stamped = with_leader_fields(batch, base_offset, DECODE_TERM)
        decode.append(decode_vector(name, description, stamped))
    invalid = [invalid_vector(*vector) for vector in invalid_batches()]
    names = [vector["name"] for vector in (*encode, *decode, *invalid)]
    assert len(names) == len(set(names)), "vector names are unique"
    return {
        "name": NAME,
        "version": VERSION,
        "spec": SPEC,
        "generator": GENERATOR,
        "limits": {
            "batch_bytes_max": DEFAULT_LIMITS.batch_bytes_max,
            "payload_uncompressed_bytes_max": DEFAULT_LIMITS.payload_uncompressed_bytes_max,
            "record_count_max": DEFAULT_LIMITS.record_count_max,
        },
        "encode": encode,
        "decode": decode,
        "invalid": invalid,
    }


def render() -> str:
    """The file's text: :func:`build` as indented JSON with a trailing newline."""
    return json.dumps(build(), indent=1) + "\n"


def is_fresh() -> bool:
    """Whether :data:`OUTPUT` holds exactly what :func:`render` produces."""
    try:
        current = OUTPUT.read_bytes()
    except FileNotFoundError:
        return False
    return current == render().encode()


def write() -> None:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_bytes(render().encode())


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def _headers_json(headers: Sequence[Header]) -> list[list[str]]:
    return [[key, value.hex()] for key, value in headers]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 when {OUTPUT_NAME} is stale; write nothing"
    )
    args = parser.parse_args(argv)
    if args.check:
        if not is_fresh():
            print(f"conformance-vectors: stale generated file: {OUTPUT_NAME}")
            print(f"run: {COMMAND}")
            return 1
        print(f"conformance-vectors: {OUTPUT_NAME} is fresh")
        return 0
    write()
    print(f"conformance-vectors: wrote {OUTPUT_NAME}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
