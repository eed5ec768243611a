"""Unit tests of the quarantine: damaged files set aside with a note, come what may."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from laminar.errors import CorruptSegmentError
from laminar.segment import quarantine
from laminar.segment.quarantine import DamageNote, quarantined_bytes, set_aside


def _note() -> DamageNote:
    error = CorruptSegmentError(
        "/data/partitions/t/0/00000000000000000100.log",
        120,
        4096,
        "payload checksum mismatch",
        expected=0x1234,
        found=0x5678,
    )
    return DamageNote.of_segment("t/0", error, "log cut before this batch")


def test_files_are_copied_or_moved_with_a_durable_note(tmp_path: Path) -> None:
    replica = tmp_path / "partitions" / "t" / "0"
    replica.mkdir(parents=True)
    (replica / "00000000000000000100.log").write_bytes(b"segment")
    (replica / "state").write_bytes(b"state")
    directory = set_aside(
        str(tmp_path),
        "t",
        0,
        _note(),
        copy=[str(replica / "00000000000000000100.log"), str(replica / "missing.log")],
        move=[str(replica / "state")],
    )
    assert directory is not None
    kept = Path(directory)
    assert kept.parent == tmp_path / "quarantine" / "t" / "0"
    assert (kept / "00000000000000000100.log").read_bytes() == b"segment"
    assert (replica / "00000000000000000100.log").exists()  # copied: the log keeps it
    assert (kept / "state").read_bytes() == b"state"
    assert not (replica / "state").exists()  # moved
    note = json.loads((kept / "note.json").read_text())
    assert note["replica"] == "t/0"
    assert note["offset"] == 120 and note["position"] == 4096
    assert note["expected_checksum"] == "0x0000000000001234"
    assert note["found_checksum"] == "0x0000000000005678"
    assert note["time"].endswith("Z")
    assert quarantined_bytes(str(tmp_path)) == len(b"segment") + len(b"state") + len(
        (kept / "note.json").read_bytes()
    )


def test_a_copy_that_fails_is_left_out_and_said(tmp_path: Path) -> None:
    unreadable = tmp_path / "a-directory.log"  # copying a directory fails
    unreadable.mkdir()
    directory = set_aside(str(tmp_path), "t", 0, _note(), copy=[str(unreadable)])
    assert directory is not None
    note = json.loads((Path(directory) / "note.json").read_text())
    assert "no copy of a-directory.log" in note["action"]
    assert not (Path(directory) / "a-directory.log").exists()


def test_a_move_that_fails_deletes_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller needs the file gone (a state file replaced anew): with no room to
    keep it, it is deleted and the note says so."""
    state = tmp_path / "state"
    state.write_bytes(b"state")

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", no_space)
    directory = set_aside(str(tmp_path), "t", 0, _note(), move=[str(state)])
    assert directory is not None
    assert not state.exists()
    note = json.loads((Path(directory) / "note.json").read_text())
    assert "state deleted, not kept" in note["action"]


def test_no_quarantine_directory_still_removes_what_must_go(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.write_bytes(b"")  # a file where the directory should be: makedirs fails
    state = tmp_path / "state"
    state.write_bytes(b"state")
    assert set_aside(str(data_dir), "t", 0, _note(), move=[str(state)]) is None
    assert not state.exists()


def test_an_excerpt_keeps_a_segment_from_the_damage_on_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quarantine, "EXCERPT_BYTES_MAX", 5)
    segment = tmp_path / "00000000000000000100.log"
    segment.write_bytes(b"0123456789abcdef")
    directory = set_aside(
        str(tmp_path), "t", 0, _note(), excerpts=[(str(segment), 4), (str(tmp_path / "gone"), 0)]
    )
    assert directory is not None
    kept = Path(directory) / "00000000000000000100.log.from-4"
    assert kept.read_bytes() == b"45678"
    assert segment.read_bytes() == b"0123456789abcdef"


def test_quarantined_bytes_of_a_data_dir_without_quarantine_is_zero(tmp_path: Path) -> None:
    assert quarantined_bytes(str(tmp_path)) == 0
