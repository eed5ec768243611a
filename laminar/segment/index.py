"""Sparse offset and time indexes of one segment.

``.index`` holds 8-byte entries ``(relative_offset u32, position u32)``: the batch
whose base offset is ``segment_base + relative_offset`` starts at byte ``position``
of the ``.log`` file. ``.timeindex`` holds 12-byte entries
``(timestamp_ms i64, relative_offset u32)``: every batch from that offset on, up to
the next entry, belongs after a batch whose running-maximum timestamp was
``timestamp_ms``; entries are monotonic in both fields. Both are little-endian.
``.index`` ends with a 16-byte trailer: the xxh3-64 of both files' entries (u64,
little-endian) and the magic ``b"LMIDX\\0\\0\\1"``; a file without it (an older
version's, or cut short) or whose entries do not match it is rebuilt from the log.

An entry is added when at least ``index_interval_bytes`` of log were written since
the previous one (the first batch of a segment always gets one). Indexes live in
memory and are written to their files when the segment is sealed or the log
closed; they can always be rebuilt from the log, so they are never trusted
blindly: the trailer's checksum catches a damaged byte in either file (an entry
still in order but pointing elsewhere would send reads to the wrong batch, or a
time lookup past the records it asks for), and :func:`entries_are_sane` checks
them on open.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

import xxhash

_OFFSET_ENTRY_BYTES = 8
_TIME_ENTRY_BYTES = 12
_LITTLE = sys.byteorder == "little"
_TRAILER_MAGIC = b"LMIDX\0\0\1"
_TRAILER = struct.Struct("<Q8s")
TRAILER_BYTES = _TRAILER.size


class SparseIndex:
    """Both sparse indexes of one segment, in memory."""

    __slots__ = (
        "positions",
        "relative_offsets",
        "time_relative_offsets",
        "timestamps_ms",
    )

    def __init__(self) -> None:
        self.relative_offsets = array("L")
        self.positions = array("L")
        self.timestamps_ms = array("q")
        self.time_relative_offsets = array("L")

    def add(self, relative_offset: int, position: int, running_max_timestamp_ms: int) -> None:
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)
        if not self.timestamps_ms or running_max_timestamp_ms > self.timestamps_ms[-1]:
            self.timestamps_ms.append(running_max_timestamp_ms)
            self.time_relative_offsets.append(relative_offset)

    def floor(self, relative_offset: int) -> tuple[int, int]:
        """The last entry at or below ``relative_offset``: (relative offset, position)."""
        index = bisect_right(self.relative_offsets, relative_offset) - 1
        if index < 0:
            return 0, 0
        return self.relative_offsets[index], self.positions[index]

    def time_floor(self, timestamp_ms: int) -> int:
        """Relative offset from which to scan for the first timestamp >= ``timestamp_ms``.

        Every batch before the returned offset has a timestamp below ``timestamp_ms``.
        """
        index = bisect_right(self.timestamps_ms, timestamp_ms - 1) - 1
        if index < 0:
            return 0
        return self.time_relative_offsets[index]

    def truncate(self, position: int) -> None:
        """Drop entries for batches at or after ``position``."""
        keep = bisect_right(self.positions, position - 1) if position > 0 else 0
        kept_offset = self.relative_offsets[keep - 1] if keep else -1
        del self.relative_offsets[keep:]
        del self.positions[keep:]
        time_keep = bisect_right(self.time_relative_offsets, kept_offset)
        del self.timestamps_ms[time_keep:]
        del self.time_relative_offsets[time_keep:]

    @property
    def max_timestamp_ms(self) -> int | None:
        return self.timestamps_ms[-1] if self.timestamps_ms else None

    # ------------------------------------------------------------------ files

    def write(self, offset_path: str, time_path: str, *, sync: bool = True) -> None:
        """Write both files, and fsync them unless ``sync`` is False (a crash may then
        lose them, or leave them torn: either way the segment's index is rebuilt
        from its batch headers at open)."""
        offsets = array("L", [0]) * (2 * len(self.positions))
        offsets[0::2] = self.relative_offsets
        offsets[1::2] = self.positions
        times = bytearray()
        for timestamp_ms, relative_offset in zip(
            self.timestamps_ms, self.time_relative_offsets, strict=True
        ):
            times += timestamp_ms.to_bytes(8, "little", signed=True)
            times += relative_offset.to_bytes(4, "little")
        offset_data = _to_u32_bytes(offsets)
        trailer = _TRAILER.pack(_checksum(offset_data, times), _TRAILER_MAGIC)
        _write_file(time_path, bytes(times), sync=sync)
        _write_file(offset_path, offset_data + trailer, sync=sync)

    @classmethod
    def read(cls, offset_path: str, time_path: str) -> SparseIndex | None:
        """Load both files; None when either is missing, not a whole number of
        entries, or not what the trailer's checksum says (rebuild it then)."""
        try:
            with open(offset_path, "rb") as file:
                offset_data = file.read()
            with open(time_path, "rb") as file:
                time_data = file.read()
        except OSError:
            return None
        if len(offset_data) < TRAILER_BYTES:
            return None
        checksum, magic = _TRAILER.unpack_from(offset_data, len(offset_data) - TRAILER_BYTES)
        offset_data = offset_data[:-TRAILER_BYTES]
        if magic != _TRAILER_MAGIC or checksum != _checksum(offset_data, time_data):
            return None
        if len(offset_data) % _OFFSET_ENTRY_BYTES or len(time_data) % _TIME_ENTRY_BYTES:
            return None
        index = cls()
        pairs = array("I")
        pairs.frombytes(offset_data)
        if not _LITTLE:  # pragma: no cover
            pairs.byteswap()
        index.relative_offsets = array("L", pairs[0::2])
        index.positions = array("L", pairs[1::2])
        for start in range(0, len(time_data), _TIME_ENTRY_BYTES):
            index.timestamps_ms.append(
                int.from_bytes(time_data[start : start + 8], "little", signed=True)
            )
            index.time_relative_offsets.append(
                int.from_bytes(time_data[start + 8 : start + 12], "little")
            )
        return index

    def entries_are_sane(self, log_bytes: int) -> bool:
        """Structural checks: strictly increasing, in bounds, both start at the first
        batch (which may start after the segment's base: keyed compaction)."""
        if not self.positions:
            return log_bytes == 0 and not self.timestamps_ms
        if self.positions[0] != 0:
            return False
        # The first batch always gets a time entry, and time entries only ever point
        # at batches that have an offset entry.
        first = self.relative_offsets[0]
        if not self.time_relative_offsets or self.time_relative_offsets[0] != first:
            return False
        if not set(self.time_relative_offsets) <= set(self.relative_offsets):
            return False
        if self.positions[-1] >= log_bytes:
            return False
        if any(b <= a for a, b in zip(self.positions, self.positions[1:], strict=False)):
            return False
        if any(
            b <= a for a, b in zip(self.relative_offsets, self.relative_offsets[1:], strict=False)
        ):
            return False
        return all(
            b > a for a, b in zip(self.timestamps_ms, self.timestamps_ms[1:], strict=False)
        ) and all(
            b > a
            for a, b in zip(
                self.time_relative_offsets, self.time_relative_offsets[1:], strict=False
            )
        )


def _checksum(offset_data: bytes, time_data: bytes | bytearray) -> int:
    digest = xxhash.xxh3_64()
    digest.update(offset_data)
    digest.update(time_data)
    return digest.intdigest()


def _to_u32_bytes(values: array[int]) -> bytes:
    data = array("I", values)
    if not _LITTLE:  # pragma: no cover
        data.byteswap()
    return data.tobytes()


def _write_file(path: str, data: bytes, *, sync: bool) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(descriptor, view)
            view = view[written:]
        if sync:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)
