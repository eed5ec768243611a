"""docs/disk.md against the code: the example bytes it quotes are what the code
writes, the checksum rules it states give the checksums the code stores, and the
names, sizes and limits it quotes are the code's."""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import msgpack
import xxhash

from laminar.replica.core import founding_state
from laminar.replica.types import GroupConfig, NodeId
from laminar.segment import layout
from laminar.segment.committed import FILE_BYTES, decode_committed, encode_committed
from laminar.segment.index import TRAILER_BYTES, SparseIndex
from laminar.segment.quarantine import EXCERPT_BYTES_MAX
from laminar.segment.statefile import SLOT_BYTES, decode_slot, encode_slot

DOC = (Path(__file__).resolve().parents[2] / "docs" / "disk.md").read_text(encoding="utf-8")


def _hex(data: bytes) -> str:
    return data.hex(" ")


def _quoted(data: bytes) -> bool:
    """Whether the document quotes ``data`` as a line of hex bytes."""
    return _hex(data) in DOC.splitlines()


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end >= 0 else len(DOC)]


def test_the_tree_names_every_file_the_layout_names() -> None:
    tree = _section("The directory tree").split("```")[1]
    for name in (
        layout.NODE_FILE,
        layout.FOUNDED_FILE,
        layout.KEYRING_FILE,
        layout.PARTITIONS_DIR + "/",
        layout.QUARANTINE_DIR + "/",
        layout.STATE_FILE,
        layout.COMMITTED_FILE,
        layout.NOTE_FILE,
        *(f"<base>.{suffix}" for suffix in layout.SEGMENT_SUFFIXES),
    ):
        assert re.search(rf"\s{re.escape(name)}\s", tree), name
    assert layout.excerpt_name("X", 7) == "X.from-7" and "<file>.from-<position>" in tree
    assert f"zero-padded to **{layout.SEGMENT_DIGITS} digits**" in DOC
    assert layout.segment_name(42) == "00000000000000000042.log"
    assert "`00000000000000000042.log`" in DOC
    assert f"ending in **`{layout.TEMPORARY_SUFFIX}`**" in DOC
    replacement = layout.replacement_path("d", 42)
    assert replacement == "d/00000000000000000042.log.tmp"
    assert re.search(r"\s<base>\.log\.tmp\s", tree)
    assert layout.is_temporary(replacement.split("/")[-1])


def test_committed_file_as_documented() -> None:
    data = encode_committed(1000)
    assert len(data) == FILE_BYTES == 24 and "24 bytes, **little-endian**" in DOC
    assert _quoted(data)
    # The rule as written: magic, version 1, 3 reserved, i64 offset, XXH3-64 of [0, 16).
    assert data[:4] == b"LMCT" and data[4] == 1 and data[5:8] == bytes(3)
    assert struct.unpack_from("<q", data, 8)[0] == 1000
    assert struct.unpack_from("<Q", data, 16)[0] == xxhash.xxh3_64_intdigest(data[:16])
    assert decode_committed(data, "committed") == 1000


def test_state_file_slot_as_documented() -> None:
    payload = founding_state(GroupConfig((NodeId("n-a"), NodeId("n-b"), NodeId("n-c"))))
    assert msgpack.unpackb(payload) == {
        "v": 1,
        "term": 1,
        "vote": "n-a",
        "configs": [[-1, ["n-a", "n-b", "n-c"], []]],
        "start": [],
    }
    assert _quoted(payload) and f"{len(payload)} bytes of payload" in DOC
    slot = encode_slot(SLOT_BYTES, 1, payload)
    header = slot[: len(slot) - len(payload)]
    assert len(header) == 24 and "a 24-byte header, **big-endian**" in DOC
    assert _quoted(header)
    assert f"two slots** of `slot_bytes` each ({SLOT_BYTES}," in DOC
    # The rule as written: magic, slot_bytes, sequence, length, CRC-32 of the stored
    # sequence followed by the payload.
    magic, slot_bytes, sequence, length, checksum = struct.unpack(">4sIQII", header)
    assert (magic, slot_bytes, sequence, length) == (b"LMS1", SLOT_BYTES, 1, len(payload))
    assert checksum == zlib.crc32(header[8:16] + payload)
    assert zlib.crc32(b"123456789") == 0xCBF43926 and "= 0xCBF43926" in DOC
    assert decode_slot(slot + bytes(SLOT_BYTES - len(slot)), SLOT_BYTES) == (1, payload)


def test_index_files_as_documented(tmp_path: Path) -> None:
    index = SparseIndex()
    index.add(0, 0, -(2**63))
    index.add(3, 4200, 1_700_000_000_500)
    offsets, times = str(tmp_path / "x.index"), str(tmp_path / "x.timeindex")
    index.write(offsets, times)
    offset_data, time_data = Path(offsets).read_bytes(), Path(times).read_bytes()
    assert _quoted(offset_data) and _quoted(time_data)
    assert f"then a {TRAILER_BYTES}-byte trailer" in DOC
    # The rule as written: LE entries (u32, u32) and (i64, u32); the trailer is the
    # XXH3-64 of the offset entries followed by the time index, then the magic.
    entries = offset_data[:-TRAILER_BYTES]
    assert struct.unpack("<4I", entries) == (0, 0, 3, 4200)
    assert struct.unpack("<qIqI", time_data) == (-(2**63), 0, 1_700_000_000_500, 3)
    stored, magic = struct.unpack("<Q8s", offset_data[-TRAILER_BYTES:])
    assert stored == xxhash.xxh3_64_intdigest(entries + time_data)
    assert magic == b"LMIDX\0\0\1" and "`4c 4d 49 44 58 00 00 01`" in DOC


def test_quoted_limits_are_the_code_s() -> None:
    assert EXCERPT_BYTES_MAX == 64 << 20 and "at most 64 MiB" in _section("Quarantine")
