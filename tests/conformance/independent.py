"""A second Laminar record-batch codec, written from docs/format.md alone.

It deliberately does not import `laminar` or `laminar_client`: it exists to show
that the specification is enough to encode, decode and validate batches.
"""

import struct

import msgpack
import xxhash
import zstandard

HEADER_SIZE = 80
MAGIC = 1
CODEC_NONE = 0
CODEC_ZSTD = 1
ATTR_CODEC_MASK = 0x07
ATTR_CONTROL = 0x10
ATTR_RESERVED_MASK = 0x08 | 0x20 | 0x40 | 0x80
FLAG_KEYS = 0x01
FLAG_HEADERS = 0x02

# §1.5 limits (the node's defaults).
BATCH_BYTES_MAX = 16 * 1024 * 1024
PAYLOAD_UNCOMPRESSED_BYTES_MAX = 64 * 1024 * 1024
RECORD_COUNT_MAX = 1_000_000

I64_MAX = 2**63 - 1
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

# §1.1: length, magic, attributes, reserved, record_count, payload_uncompressed_bytes,
# base_offset, term, first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence,
# reserved, payload_checksum, header_checksum.
HEADER = struct.Struct("<IBBHiIqqqqqiIQQ")
FIELDS = (
    "length",
    "magic",
    "attributes",
    None,
    "record_count",
    "payload_uncompressed_bytes",
    "base_offset",
    "term",
    "first_timestamp_ms",
    "max_timestamp_ms",
    "producer_id",
    "base_sequence",
    None,
    "payload_checksum",
    "header_checksum",
)
assert HEADER.size == HEADER_SIZE

GRPC_STATUS = {
    "BATCH_TOO_LARGE": "RESOURCE_EXHAUSTED",
    "INVALID_INPUT": "INVALID_ARGUMENT",
    "RECORD_FORMAT": "INVALID_ARGUMENT",
}


class BatchError(ValueError):
    """A batch refused by a rule of the spec; `code` is the ErrorDetail.code name."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


def _fail(message: str, code: str = "RECORD_FORMAT"):
    raise BatchError(code, message)


# ---------------------------------------------------------------------------- encode


def _pack_headers(headers) -> bytes:
    if not headers:
        return b""
    return msgpack.packb([[k, v] for k, v in headers], use_bin_type=True)


def encode(records, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    """Canonical uncompressed batch for `records` of (timestamp_ms, key, value, headers)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    n = len(records)
    timestamps = [r[0] for r in records]
    keys = [r[1] for r in records]
    values = [r[2] for r in records]
    blobs = [_pack_headers(r[3]) for r in records]
    has_keys = any(k is not None for k in keys)
    has_headers = any(blobs)

    def lengths(items):
        return struct.pack(f"<{n}i", *(-1 if x is None else len(x) for x in items))

    flags = (FLAG_KEYS if has_keys else 0) | (FLAG_HEADERS if has_headers else 0)
    parts = [bytes([flags]), struct.pack(f"<{n}q", *timestamps), lengths(values)]
    if has_keys:
        parts.append(lengths(keys))
    if has_headers:
        parts.append(struct.pack(f"<{n}I", *(len(b) for b in blobs)))
    if has_keys:
        parts.extend(k for k in keys if k is not None)
    parts.extend(v for v in values if v is not None)
    if has_headers:
        parts.extend(blobs)
    payload = b"".join(parts)

    header = HEADER.pack(
        HEADER_SIZE + len(payload),
        MAGIC,
        CODEC_NONE,
        0,
        n,
        len(payload),
        -1,
        -1,
        timestamps[0],
        max(timestamps),
        producer_id,
        base_sequence,
        0,
        xxhash.xxh3_64_intdigest(payload),
        0,
    )
    header_checksum = xxhash.xxh3_64_intdigest(header[:72])
    return header[:72] + struct.pack("<Q", header_checksum) + payload


# ---------------------------------------------------------------------- validation


def _parse_header(batch: bytes) -> dict:
    """§1.6 step 1 up to and including the header rules of §1.1."""
    if len(batch) < HEADER_SIZE:
        _fail(f"batch of {len(batch)} bytes is shorter than the 80-byte header")
    values = HEADER.unpack_from(batch)
    h = {name: v for name, v in zip(FIELDS, values, strict=True) if name is not None}
    if h["magic"] != MAGIC:
        _fail(f"magic {h['magic']} is not 1")
    if xxhash.xxh3_64_intdigest(batch[:72]) != h["header_checksum"]:
        _fail("header checksum mismatch")

    # Header rules, in the order §1.6 lists them.
    attrs, n = h["attributes"], h["record_count"]
    if attrs & ATTR_CODEC_MASK > CODEC_ZSTD:
        _fail(f"unknown codec {attrs & ATTR_CODEC_MASK}")
    if attrs & ATTR_RESERVED_MASK:
        _fail(f"reserved attribute bits set: {attrs:#04x}")
    if attrs & ATTR_CONTROL and n != 1:
        _fail("a control batch holds exactly one record")
    if h["length"] <= HEADER_SIZE:
        _fail(f"length {h['length']} leaves no payload")
    if h["length"] > BATCH_BYTES_MAX:
        _fail(f"length {h['length']} > batch_bytes_max", "BATCH_TOO_LARGE")
    if n < 1:
        _fail(f"record_count {n} < 1")
    if n > RECORD_COUNT_MAX:
        _fail(f"record_count {n} > record_count_max", "BATCH_TOO_LARGE")
    pub = h["payload_uncompressed_bytes"]
    if pub > PAYLOAD_UNCOMPRESSED_BYTES_MAX:
        _fail(f"payload_uncompressed_bytes {pub} > max", "BATCH_TOO_LARGE")
    if pub < 12 * n + 1:
        _fail(f"payload_uncompressed_bytes {pub} < 12 * record_count + 1")
    if attrs & ATTR_CODEC_MASK == CODEC_NONE and pub != h["length"] - HEADER_SIZE:
        _fail("uncompressed batch: payload_uncompressed_bytes != length - 80")
    if h["base_offset"] < -1 or h["base_offset"] + n > I64_MAX:
        _fail(f"impossible base_offset {h['base_offset']}")
    if h["term"] < -1:
        _fail(f"impossible term {h['term']}")
    if h["max_timestamp_ms"] < h["first_timestamp_ms"]:
        _fail("max_timestamp_ms < first_timestamp_ms")
    pid, seq = h["producer_id"], h["base_sequence"]
    if pid < -1:
        _fail(f"impossible producer_id {pid}")
    if seq < -1 or seq + n > 2**31:
        _fail(f"impossible base_sequence {seq}")
    if (pid == -1) != (seq == -1):
        _fail("producer_id is -1 exactly when base_sequence is -1")
    return h


def _decompress(stored: bytes, size: int) -> bytes:
    """§1.3: exactly one zstd frame decompressing to exactly `size` bytes."""
    if stored[:4] != ZSTD_MAGIC:
        _fail("compressed payload does not start with a zstd frame")
    try:
        params = zstandard.get_frame_parameters(stored)
    except zstandard.ZstdError as e:
        _fail(f"bad zstd frame header: {e}")
    if params.dict_id != 0:
        _fail("zstd dictionaries are not supported")
    if params.content_size not in (zstandard.CONTENTSIZE_UNKNOWN, size):
        _fail(f"zstd frame declares {params.content_size} bytes, header says {size}")
    obj = zstandard.ZstdDecompressor().decompressobj()
    out = []
    produced = 0
    try:
        # Small input steps so that a hostile frame cannot expand far past `size`.
        for i in range(0, len(stored), 256):
            chunk = obj.decompress(stored[i : i + 256])
            produced += len(chunk)
            out.append(chunk)
            if produced > size:
                _fail(f"zstd frame decompresses to more than {size} bytes")
            if obj.eof:
                if obj.unused_data or i + 256 < len(stored):
                    _fail("bytes follow the zstd frame")
                break
    except zstandard.ZstdError as e:
        _fail(f"zstd error: {e}")
    if not obj.eof:
        _fail("truncated zstd frame")
    if produced != size:
        _fail(f"zstd frame decompresses to {produced} bytes, header says {size}")
    return b"".join(out)


def _parse_headers_blob(blob: bytes) -> list:
    if not blob:
        return []
    try:
        obj = msgpack.unpackb(blob, raw=False, use_list=True, strict_map_key=False)
    except (ValueError, TypeError) as e:  # msgpack's errors are ValueErrors
        _fail(f"record headers are not one msgpack object: {e!r}")
    if not isinstance(obj, list):
        _fail("record headers are not a msgpack array")
    pairs = []
    for pair in obj:
        if not (isinstance(pair, list) and len(pair) == 2):
            _fail("a record header is not a [key, value] pair")
        k, v = pair
        if not isinstance(k, str) or not isinstance(v, bytes):
            _fail("a record header is not a [str, bin] pair")
        pairs.append((k, v))
    return pairs


def _parse_payload(payload: bytes, h: dict) -> list[dict]:
    """§1.2: the columnar payload, every rule checked; returns the records."""
    n = h["record_count"]
    flags = payload[0]
    if flags & ~(FLAG_KEYS | FLAG_HEADERS):
        _fail(f"reserved payload flag bits set: {flags:#04x}")
    has_keys, has_headers = flags & FLAG_KEYS, flags & FLAG_HEADERS
    fixed = 1 + 12 * n + (4 * n if has_keys else 0) + (4 * n if has_headers else 0)
    if fixed > len(payload):
        _fail("payload too short for its length columns")
    pos = 1

    def column(fmt):
        nonlocal pos
        items = struct.unpack_from(f"<{n}{fmt}", payload, pos)
        pos += struct.calcsize(f"<{n}{fmt}")
        return items

    timestamps = column("q")
    value_lens = column("i")
    key_lens = column("i") if has_keys else (-1,) * n
    header_lens = column("I") if has_headers else (0,) * n
    if any(x < -1 for x in value_lens + key_lens):
        _fail("a key or value length is below -1")
    data = sum(x for x in key_lens + value_lens if x > 0) + sum(header_lens)
    if data != len(payload) - fixed:
        _fail(f"data columns hold {len(payload) - fixed} bytes, lengths say {data}")
    if timestamps[0] != h["first_timestamp_ms"]:
        _fail("first timestamp differs from first_timestamp_ms")
    if max(timestamps) != h["max_timestamp_ms"]:
        _fail("largest timestamp differs from max_timestamp_ms")

    def take(length):
        nonlocal pos
        if length == -1:
            return None
        pos += length
        return payload[pos - length : pos]

    keys = [take(x) for x in key_lens]
    values = [take(x) for x in value_lens]
    headers = [_parse_headers_blob(take(x)) for x in header_lens]
    base = h["base_offset"]
    return [
        {
            "offset": base + i,
            "timestamp_ms": timestamps[i],
            "key": keys[i],
            "value": values[i],
            "headers": headers[i],
        }
        for i in range(n)
    ]


def _check_payload(batch: bytes, h: dict) -> list[dict]:
    """§1.6 step 2: payload checksum, decompression, payload rules."""
    stored = batch[HEADER_SIZE : h["length"]]
    if xxhash.xxh3_64_intdigest(stored) != h["payload_checksum"]:
        _fail("payload checksum mismatch")
    payload = stored
    if h["attributes"] & ATTR_CODEC_MASK == CODEC_ZSTD:
        payload = _decompress(stored, h["payload_uncompressed_bytes"])
    return _parse_payload(payload, h)


# ------------------------------------------------------------------ public entries


def decode(batch: bytes) -> tuple[dict, bool, list[dict]]:
    """Validate a stored/fetched batch and return (header, control, records)."""
    h = _parse_header(batch)
    if h["length"] != len(batch):
        _fail(f"length {h['length']} differs from the {len(batch)} bytes given")
    records = _check_payload(batch, h)
    return h, bool(h["attributes"] & ATTR_CONTROL), records


def produce_error(batch: bytes) -> str | None:
    """The ErrorDetail.code a ProduceRequest holding only `batch` gets, or None."""
    try:
        h = _parse_header(batch)
        if h["length"] != len(batch):
            _fail("length differs from the bytes sent", "INVALID_INPUT")
        if h["attributes"] & ATTR_CONTROL:
            _fail("a client may not produce a control batch", "INVALID_INPUT")
        _check_payload(batch, h)
    except BatchError as e:
        return e.code
    return None
