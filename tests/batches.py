"""Hand-made record batches for tests: a payload put in place with the length and
both checksums recomputed, as a buggy (or hostile) producer would send it."""

from __future__ import annotations

import xxhash
import zstandard

from laminar import records
from laminar.records import HEADER_BYTES, Compression, encode_batch, parse_header


def with_payload(batch: bytes, payload: bytes, **fields: int) -> bytes:
    """``batch`` with ``payload`` (uncompressed), compressed as ``batch`` is."""
    stored = payload
    if parse_header(batch).compression is Compression.ZSTD:
        stored = zstandard.ZstdCompressor().compress(payload)
    return with_stored(batch, stored, payload_uncompressed_bytes=len(payload), **fields)


def with_stored(batch: bytes, stored: bytes, **fields: int) -> bytes:
    """``batch`` with the stored payload ``stored`` and header ``fields`` in place.

    Recomputes the length and both checksums, so that ``verify_batch`` passes
    whatever the payload holds.
    """
    header = parse_header(batch)
    values = header._asdict()
    for unpacked_only in ("magic", "header_checksum"):
        del values[unpacked_only]
    values["length"] = HEADER_BYTES + len(stored)
    values["payload_checksum"] = xxhash.xxh3_64_intdigest(stored)
    values.update(fields)
    return records._pack_header(**values) + stored


def columns_beyond_payload() -> bytes:
    """A batch with correct checksums whose value length (10^6) exceeds its 3-byte
    payload: stored, it would fail every consumer at its offset."""
    valid = encode_batch([b"abc"])
    payload = bytearray(valid[HEADER_BYTES:])  # flags, timestamp, value length, value
    payload[9:13] = (10**6).to_bytes(4, "little")
    return with_payload(valid, bytes(payload))
