"""Block reservation of the active segment (laminar.segment.fallocate).

Reserved blocks are seen through ``st_blocks``: reservation must never change a
file's size (readers, recovery and truncation rely on it), must be released when a
segment is sealed, cut or closed, and a filesystem that refuses it, or a failing
reservation, must cost only speed.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.errors import ConfigError
from laminar.records import next_offset, with_leader_fields
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog
from laminar.segment.fallocate import reserve
from laminar.segment.files import SegmentFiles
from tests.segment.support import simple_batch

# Stamped now, so that a reopened segment does not roll by age at its next append.
BATCH = simple_batch(1, timestamp_ms=int(time.time() * 1000))
BATCH_BYTES = len(BATCH)
BIG = simple_batch(100, value_bytes=1000)  # about 100 KB
KIB = 1024
MIB = 1024 * KIB
BLOCK = 4096


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _segment(log: SegmentLog, base_offset: int) -> str:
    return os.path.join(log.directory, f"{base_offset:020d}.log")


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., SegmentLog]]:
    opened: list[SegmentLog] = []

    def opener(**overrides: Any) -> SegmentLog:
        settings: dict[str, Any] = {
            "segment_bytes_max": 64 * MIB,
            "fsync_policy": FsyncPolicy.NEVER,
            "retention_ms": None,
        }
        settings.update(overrides)
        log = SegmentLog.open(str(tmp_path / "log"), LogConfig(**settings))
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


@pytest.fixture
def reserving(tmp_path: Path) -> None:
    """Skips the test unless ``tmp_path``'s filesystem reserves blocks."""
    probe = str(tmp_path / "probe")
    descriptor = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        supported = reserve(descriptor, 0, MIB)
    finally:
        os.close(descriptor)
        os.unlink(probe)
    if not supported:
        pytest.skip("this filesystem does not support fallocate")


def _append_all(log: SegmentLog, batches: list[bytes]) -> bytes:
    """Append; returns the bytes the log must hold (stamped)."""
    return b"".join(with_leader_fields(b, log.append(b, term=1), 1) for b in batches)


def _read_all(log: SegmentLog) -> bytes:
    """Every batch, read one segment at a time."""
    chunks, offset = [], log.start_offset
    while offset < log.end_offset:
        chunks.append(log.read(offset, 64 * MIB))
        offset = next_offset(chunks[-1])
    return b"".join(chunks)


@pytest.mark.usefixtures("reserving")
def test_appends_reserve_blocks_ahead_without_changing_the_file_size(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = _append_all(log, [BATCH] * 3)
    path = _segment(log, 0)
    assert os.path.getsize(path) == 3 * BATCH_BYTES
    assert _allocated(path) >= 256 * KIB
    assert _read_all(log) == stored


@pytest.mark.usefixtures("reserving")
def test_reservation_grows_with_the_segment_but_not_past_the_maximum_step(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(preallocate_bytes_max=MIB)
    stored = _append_all(log, [BIG] * 40)  # about 4 MB, so several steps
    path = _segment(log, 0)
    size = os.path.getsize(path)
    assert size == len(stored)
    assert size < _allocated(path) <= size + MIB + BLOCK
    assert _read_all(log) == stored


@pytest.mark.usefixtures("reserving")
def test_sealing_and_closing_release_the_reserved_blocks(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log(segment_bytes_max=3 * BATCH_BYTES)
    stored = _append_all(log, [BATCH] * 4)  # the fourth rolls
    sealed, active = _segment(log, 0), _segment(log, 3)
    assert os.path.getsize(sealed) == 3 * BATCH_BYTES
    assert _allocated(sealed) < 3 * BATCH_BYTES + BLOCK
    assert _allocated(active) >= 256 * KIB
    log.close()
    assert os.path.getsize(active) == BATCH_BYTES
    assert _allocated(active) < BATCH_BYTES + BLOCK
    reopened = open_log(segment_bytes_max=3 * BATCH_BYTES)
    assert _read_all(reopened) == stored
    stored += _append_all(reopened, [BATCH])  # reserves again, at the end
    assert _allocated(active) >= 256 * KIB
    assert _read_all(reopened) == stored


@pytest.mark.usefixtures("reserving")
def test_truncation_releases_the_reserved_blocks_and_appends_go_on(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = _append_all(log, [BATCH] * 5)
    assert log.truncate_suffix(2) == 2
    path = _segment(log, 0)
    assert os.path.getsize(path) == 2 * BATCH_BYTES
    assert _allocated(path) < 2 * BATCH_BYTES + BLOCK
    kept = stored[: 2 * BATCH_BYTES] + _append_all(log, [BATCH] * 2)
    assert _allocated(path) >= 256 * KIB
    assert _read_all(log) == kept


def test_no_reservation_when_turned_off(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(preallocate_bytes_max=0)
    _append_all(log, [BATCH] * 3)
    assert _allocated(_segment(log, 0)) < 3 * BATCH_BYTES + BLOCK


def test_a_filesystem_without_fallocate_is_asked_once(
    open_log: Callable[..., SegmentLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def refuse(descriptor: int, offset: int, length: int) -> bool:
        asked.append(length)
        return False

    monkeypatch.setattr("laminar.segment.log.reserve", refuse)
    log = open_log(segment_bytes_max=3 * BATCH_BYTES)
    stored = _append_all(log, [BATCH] * 7)  # three segments
    assert len(asked) == 1
    assert _read_all(log) == stored


def test_a_failed_reservation_is_logged_and_retried_a_step_later(
    open_log: Callable[..., SegmentLog],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    asked: list[tuple[int, int]] = []

    def fail(descriptor: int, offset: int, length: int) -> bool:
        asked.append((offset, length))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("laminar.segment.log.reserve", fail)
    log = open_log()
    with caplog.at_level(logging.WARNING, logger="laminar.segment.log"):
        stored = _append_all(log, [BATCH] * 3)  # all within the first step
        assert asked == [(0, BATCH_BYTES + 256 * KIB)]
        stored += _append_all(log, [BIG] * 3)  # beyond it: asked again
    assert len(asked) == 2 and asked[1][0] == BATCH_BYTES + 256 * KIB
    assert [r.message for r in caplog.records if "cannot reserve" in r.message] != []
    assert _read_all(log) == stored


@pytest.mark.usefixtures("reserving")
def test_a_step_the_node_cannot_spare_is_not_reserved_and_asked_again_a_step_later(
    tmp_path: Path,
) -> None:
    """The node's watermark (``SegmentFiles.may_reserve``) refuses a step: no blocks
    are reserved beyond what the appends write, and the next step asks again."""
    asked: list[int] = []
    spare = {"bytes": 0}

    def may_reserve(length_bytes: int) -> bool:
        asked.append(length_bytes)
        return length_bytes <= spare["bytes"]

    files = SegmentFiles(may_reserve=may_reserve)
    config = LogConfig(fsync_policy=FsyncPolicy.NEVER, retention_ms=None)
    log = SegmentLog.open(str(tmp_path / "log"), config, files=files)
    try:
        stored = _append_all(log, [BATCH] * 3)
        path = _segment(log, 0)
        assert asked == [BATCH_BYTES + 256 * KIB]
        assert _allocated(path) < 3 * BATCH_BYTES + BLOCK  # nothing reserved ahead
        spare["bytes"] = 64 * MIB
        stored += _append_all(log, [BIG] * 3)  # past the refused step: asked again
        assert len(asked) == 2
        assert _allocated(path) >= os.path.getsize(path) + 256 * KIB
        assert _read_all(log) == stored
    finally:
        log.close()


@pytest.mark.parametrize(
    "setting",
    [
        {"preallocate_bytes_max": -1},
        {"segment_bytes_max": 0},
        {"segment_bytes_max": 2**32},
        {"index_interval_bytes": 0},
        {"read_bytes_max": 0},
        {"retention_bytes": -1},
        {"fsync_interval_ms": 0},
    ],
)
def test_config_rejects_out_of_range_settings(setting: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        LogConfig(**setting)  # type: ignore[arg-type]


@pytest.mark.usefixtures("reserving")
def test_a_failed_release_is_logged_and_close_still_closes(
    open_log: Callable[..., SegmentLog],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = open_log()
    stored = _append_all(log, [BATCH] * 2)

    def fail(descriptor: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", fail)
    with caplog.at_level(logging.WARNING, logger="laminar.segment.log"):
        log.close()
    assert any("cannot release reserved blocks" in r.message for r in caplog.records)
    monkeypatch.undo()
    reopened = open_log()
    assert _read_all(reopened) == stored
