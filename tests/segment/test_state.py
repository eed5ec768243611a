"""Staged consensus state: visible at once, durable only after sync()."""

from __future__ import annotations

from pathlib import Path

from laminar.segment import LogConfig, SegmentLog
from laminar.segment.memory import MemoryLog


def test_segment_log_staged_state_is_written_by_sync(tmp_path: Path) -> None:
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        log.save_state(b"one")
        log.stage_state(b"two")
        assert log.load_state() == b"two"
        assert (tmp_path / "state").read_bytes() == b"one"  # not yet on disk
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"one"  # closed without a sync: the stage is gone
        log.stage_state(b"three")
        log.sync()
        assert (tmp_path / "state").read_bytes() == b"three"
        log.stage_state(b"four")
        log.save_state(b"five")  # a durable save replaces any staged state
        log.sync()
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"five"


def test_memory_log_staged_state_is_lost_in_a_crash_before_sync() -> None:
    log = MemoryLog(fsync=False)
    log.save_state(b"one")
    log.stage_state(b"two")
    assert log.load_state() == b"two"
    assert log.crash().load_state() == b"one"
    log.sync()
    assert log.crash().load_state() == b"two"
