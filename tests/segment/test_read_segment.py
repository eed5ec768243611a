"""SegmentLog.read_segment, keyed compaction's reader: one read per window of
batches (each batch a view of it, no copy), checksums verified once per segment
file (the verified prefix :meth:`SegmentLog.read` keeps too), damage still found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import laminar.segment.log as log_module
from laminar.errors import CorruptSegmentError
from laminar.records import encode_batch, verify_payload
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog
from laminar.segment.layout import SEGMENT_SUFFIX, segment_path

CONFIG = LogConfig(segment_bytes_max=4 << 20, fsync_policy=FsyncPolicy.NEVER, retention_ms=None)


def _batch(index: int, value_bytes: int = 1000) -> bytes:
    return encode_batch([bytes([index % 251]) * value_bytes] * 4, keys=[b"k%d" % index] * 4)


def _sealed_log(path: Path, batches: list[bytes]) -> list[bytes]:
    """A log whose first segment holds ``batches``, sealed, written and closed; the
    batches as stored (stamped)."""
    with SegmentLog.open(str(path), CONFIG) as log:
        for batch in batches:
            log.append(batch, term=1)
        log.roll()
        return [bytes(batch) for batch in log.read_segment(0)]


def test_read_segment_verifies_a_segment_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = _sealed_log(tmp_path / "log", [_batch(i) for i in range(40)])
    checked: list[int] = []

    def counting(batch: bytes | bytearray | memoryview, position: int, header: object) -> None:
        checked.append(position)
        verify_payload(batch, position, header)  # type: ignore[arg-type]

    monkeypatch.setattr(log_module, "verify_payload", counting)
    with SegmentLog.open(str(tmp_path / "log"), CONFIG) as log:  # reopened: nothing verified
        assert [bytes(b) for b in log.read_segment(0)] == stored
        assert len(checked) == len(stored)  # the first scan checks every batch
        assert [bytes(b) for b in log.read_segment(0)] == stored
        assert len(checked) == len(stored)  # the second one trusts what the first checked
        assert log.read(0, 1 << 20)  # and so does read()
        assert len(checked) == len(stored)


def test_read_segment_yields_views_of_one_read(tmp_path: Path) -> None:
    big = _batch(99, value_bytes=400_000)  # 1.6 MB: more than one read window
    stored = _sealed_log(tmp_path / "log", [_batch(i) for i in range(10)] + [big, _batch(100)])
    with SegmentLog.open(str(tmp_path / "log"), CONFIG) as log:
        batches = list(log.read_segment(0))
    assert [bytes(b) for b in batches] == stored
    assert all(isinstance(b, memoryview) for b in batches)
    assert len({id(b.obj) for b in batches[:10]}) == 1  # one read served the small ones
    assert len(batches[10]) == len(stored[10])


def test_read_segment_finds_damage_on_every_scan(tmp_path: Path) -> None:
    stored = _sealed_log(tmp_path / "log", [_batch(i) for i in range(20)])
    damaged_at = sum(len(b) for b in stored[:7]) + len(stored[7]) - 1  # batch 7's last byte
    with open(segment_path(str(tmp_path / "log"), 0, SEGMENT_SUFFIX), "r+b") as file:
        file.seek(damaged_at)
        byte = file.read(1)
        file.seek(damaged_at)
        file.write(bytes([byte[0] ^ 1]))
        os.fsync(file.fileno())
    with SegmentLog.open(str(tmp_path / "log"), CONFIG) as log:
        for _ in range(2):  # the verified prefix never passes the damaged batch
            seen: list[bytes] = []
            with pytest.raises(CorruptSegmentError):
                seen.extend(bytes(b) for b in log.read_segment(0))
            assert seen == stored[: len(seen)] and len(seen) <= 7
