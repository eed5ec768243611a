"""The ``committed`` file: its format, and the replica host keeping it current."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from laminar.records import encode_batch
from laminar.replica.config import ReplicaConfig
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment import committed as committed_module
from laminar.segment.committed import (
    COMMITTED_FILE,
    FILE_BYTES,
    CommittedFileError,
    decode_committed,
    encode_committed,
    read_committed,
    write_committed,
)
from laminar.segment.config import LogConfig
from laminar.server.host import HostConfig, ReplicaHost
from tests.server.aio import bounded, wait_until

DEADLINE_S = 10.0
KEY = ("events", 0)


def test_round_trip_and_replace(tmp_path: Path) -> None:
    assert read_committed(str(tmp_path)) is None
    write_committed(str(tmp_path), 0)
    assert read_committed(str(tmp_path)) == 0
    write_committed(str(tmp_path), 2**63 - 1)
    assert read_committed(str(tmp_path)) == 2**63 - 1
    assert sorted(os.listdir(tmp_path)) == [COMMITTED_FILE]  # no temporary left behind
    assert os.path.getsize(tmp_path / COMMITTED_FILE) == FILE_BYTES


def test_later_saves_overwrite_the_file_in_place_and_a_misshapen_one_is_replaced(
    tmp_path: Path,
) -> None:
    write_committed(str(tmp_path), 5)
    inode = os.stat(tmp_path / COMMITTED_FILE).st_ino
    write_committed(str(tmp_path), 6)  # no rename: about 0.45 ms of journal work each
    assert os.stat(tmp_path / COMMITTED_FILE).st_ino == inode
    assert read_committed(str(tmp_path)) == 6
    (tmp_path / COMMITTED_FILE).write_bytes(b"short")
    write_committed(str(tmp_path), 7)
    assert read_committed(str(tmp_path)) == 7
    assert os.path.getsize(tmp_path / COMMITTED_FILE) == FILE_BYTES


def test_a_reader_that_catches_a_write_half_done_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_committed(str(tmp_path), 41)
    good = (tmp_path / COMMITTED_FILE).read_bytes()
    torn = good[:8] + encode_committed(42)[8:12] + good[12:]  # half the new offset
    reads = iter([torn, good])
    monkeypatch.setattr(committed_module, "_read_bytes", lambda path: next(reads))
    assert read_committed(str(tmp_path)) == 41
    monkeypatch.setattr(committed_module, "_read_bytes", lambda path: torn)
    with pytest.raises(CommittedFileError, match="checksum"):
        read_committed(str(tmp_path))  # torn every time: damaged


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:-1], "23 bytes"),
        (lambda data: b"XXXX" + data[4:], "magic"),
        (lambda data: data[:4] + b"\x02" + data[5:], "version"),
        (lambda data: data[:8] + bytes([data[8] ^ 1]) + data[9:], "checksum"),
    ],
)
def test_damage_is_reported_with_the_path(damage: object, reason: str) -> None:
    data = encode_committed(1234)
    assert decode_committed(data, "p") == 1234
    assert callable(damage)
    with pytest.raises(CommittedFileError, match=f"bad committed file p: .*{reason}"):
        decode_committed(damage(data), "p")


def test_negative_offsets_are_refused() -> None:
    with pytest.raises(ValueError, match="committed offset"):
        encode_committed(-1)


run = bounded(DEADLINE_S * 3)


def _no_peers(node: str, bundle: object) -> None:
    raise AssertionError("a single-voter group sends nothing")


async def _leading_host(tmp_path: Path, save_ms: int) -> ReplicaHost:
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        LogConfig(),
        send=_no_peers,
        host_config=HostConfig(committed_save_ms=save_ms),
    )
    await host.start()
    replica = host.open_replica(KEY, GroupConfig((NodeId("n1"),)))
    await wait_until(lambda: replica.core.role is Role.LEADER, "leadership", timeout_s=DEADLINE_S)
    return host


def _committed(tmp_path: Path) -> int | None:
    return read_committed(os.path.join(tmp_path, "partitions", "events", "0"))


@run
async def test_the_host_saves_the_high_watermark_periodically_and_on_close(
    tmp_path: Path,
) -> None:
    host = await _leading_host(tmp_path, save_ms=20)
    try:
        for number in range(3):
            await host.produce(KEY, encode_batch([b"%d" % number], timestamps_ms=1), Acks.ALL, 5)
        replica = host.get(KEY)
        assert replica is not None
        high_watermark = replica.core.high_watermark
        assert high_watermark >= 3
        await wait_until(
            lambda: _committed(tmp_path) == high_watermark, "committed file", timeout_s=DEADLINE_S
        )
    finally:
        await host.close()
    # A long period: only the close writes the last produce's watermark.
    host = await _leading_host(tmp_path, save_ms=3_600_000)
    replica = host.get(KEY)
    assert replica is not None
    try:
        await host.produce(KEY, encode_batch([b"last"], timestamps_ms=1), Acks.ALL, 5)
        final = replica.core.high_watermark
        before_close = _committed(tmp_path)
        assert before_close is not None and before_close < final  # not yet
    finally:
        await host.close()
    assert _committed(tmp_path) == final


@run
async def test_a_committed_file_above_the_log_end_makes_the_replica_heal(tmp_path: Path) -> None:
    """The file records more than the log holds (acknowledged entries are gone: a
    crash that lost unsynced appends, or damage): the file is set aside and the
    replica heals instead of leading with what is left. Alone in its group it waits
    for an operator, who accepts the loss; it then leads and saves the true value."""
    host = await _leading_host(tmp_path, save_ms=3_600_000)
    await host.close()
    write_committed(str(tmp_path / "partitions" / "events" / "0"), 1_000)
    host = ReplicaHost(
        "n1",
        str(tmp_path),
        ReplicaConfig.local(),
        LogConfig(),
        send=_no_peers,
        host_config=HostConfig(committed_save_ms=3_600_000),
    )
    await host.start()
    try:
        replica = host.get(KEY)
        assert replica is not None and replica.core.healing
        assert _committed(tmp_path) is None  # set aside, with a note
        notes = list((tmp_path / "quarantine" / "events" / "0").rglob("note.json"))
        assert len(notes) == 1 and "acknowledged entries are missing" in notes[0].read_text()
        assert [d.key for d in host.damaged()] == [KEY]
        assert host.accept_data_loss(KEY)
        await wait_until(
            lambda: replica.core.role is Role.LEADER, "leadership", timeout_s=DEADLINE_S
        )
        await host.close()
        saved = _committed(tmp_path)
        assert saved is not None and saved <= replica.core.high_watermark < 1_000
    finally:
        await host.close()


def test_host_config_rejects_a_zero_period() -> None:
    with pytest.raises(Exception, match="committed_save_ms"):
        HostConfig(committed_save_ms=0)
