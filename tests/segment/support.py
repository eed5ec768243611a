"""Helpers shared by the storage-engine tests: batch builders and a fake clock."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from laminar.errors import CorruptSegmentError
from laminar.records import Record, decode_records, encode_batch, iter_batches
from laminar.segment.log import ScrubCursor, ScrubResult, SegmentLog

# (timestamp_ms, key, value) of one record before it is written.
RecordSpec = tuple[int, bytes | None, bytes]


def make_batch(records: Sequence[RecordSpec]) -> bytes:
    """An unstamped batch holding ``records``."""
    return encode_batch(
        [value for _, _, value in records],
        keys=[key for _, key, _ in records],
        timestamps_ms=[timestamp_ms for timestamp_ms, _, _ in records],
    )


def simple_batch(count: int = 1, *, value_bytes: int = 10, timestamp_ms: int = 0) -> bytes:
    """An unstamped batch of ``count`` records of ``value_bytes`` each."""
    return make_batch(
        [(timestamp_ms + index, None, bytes([index % 256]) * value_bytes) for index in range(count)]
    )


def split_batches(data: bytes) -> list[bytes]:
    """Whole, checksum-verified batches of a read result."""
    return [data[position : position + header.length] for position, header in iter_batches(data)]


def records_of(data: bytes) -> list[Record]:
    """Every record of a read result, batches decoded in order."""
    return [record for batch in split_batches(data) for record in decode_records(batch)]


@dataclass
class FakeClock:
    """A clock the test moves by hand."""

    now_ms: int = 0

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        self.now_ms += delta_ms


def open_files_under(directory: Path | str) -> list[str]:
    """Paths under ``directory`` that this process holds open (Linux ``/proc``)."""
    root = os.path.realpath(directory) + os.sep
    paths = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        if target.startswith(root):
            paths.append(target)
    return sorted(paths)


def flip(path: Path | str, position: int) -> None:
    """Flip one bit of the byte at ``position`` in the file at ``path``: bit rot,
    even under a log that has the file open (its reads see the page cache)."""
    with open(path, "r+b") as file:
        file.seek(position)
        byte = file.read(1)
        file.seek(position)
        file.write(bytes([byte[0] ^ 0x10]))


def scrub_pass(
    log: SegmentLog, max_bytes: int, cursor: ScrubCursor | None = None
) -> tuple[int, list[CorruptSegmentError], int]:
    """Scrub until the pass ends: bytes scrubbed, damage found, calls made."""
    total = 0
    damage: list[CorruptSegmentError] = []
    calls = 0
    while True:
        result: ScrubResult = log.scrub(cursor, max_bytes)
        calls += 1
        assert calls < 10_000, "the pass does not end"
        total += result.scrubbed_bytes
        if result.damage is not None:
            damage.append(result.damage)
        if result.cursor is None:
            return total, damage, calls
        cursor = result.cursor
