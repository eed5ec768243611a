"""The data directory's names (laminar.segment.layout): what a node writes where,
parsed back, and the one file-replacing helper."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from laminar.segment import layout
from laminar.segment.layout import (
    ReplicaDirectory,
    parse_partition,
    parse_segment_name,
    replace_file,
    replica_directories,
    segment_base_of,
    segment_bases,
    segment_name,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_names_on_disk_are_pinned() -> None:
    """The names an existing data directory holds: a change here would make a node
    lose its identity or its replicas on upgrade."""
    data = os.path.join("d")
    assert layout.node_path(data) == "d/node.json"
    assert layout.founded_path(data) == "d/founded"
    assert layout.keyring_path(data) == "d/keyring.json"
    assert layout.partitions_directory(data) == "d/partitions"
    replica = layout.partition_directory(data, "events", 7)
    assert replica == "d/partitions/events/7"
    assert layout.state_path(replica) == "d/partitions/events/7/state"
    assert layout.committed_path(replica) == "d/partitions/events/7/committed"
    assert layout.segment_path(replica, 42) == "d/partitions/events/7/00000000000000000042.log"
    assert layout.index_path(replica, 42).endswith("/00000000000000000042.index")
    assert layout.time_index_path(replica, 42).endswith("/00000000000000000042.timeindex")
    assert layout.quarantine_directory(data) == "d/quarantine"
    assert (
        layout.quarantine_entry_directory(data, "events", 7, "20260101T000000.000000001Z")
        == "d/quarantine/events/7/20260101T000000.000000001Z"
    )
    assert layout.excerpt_name("00000000000000000042.log", 80) == "00000000000000000042.log.from-80"
    assert layout.temporary_path("d/founded") == "d/founded.tmp"


@pytest.mark.parametrize("base", [0, 1, 42, 10**19, 2**63 - 1])
@pytest.mark.parametrize("suffix", layout.SEGMENT_SUFFIXES)
def test_segment_names_round_trip(base: int, suffix: str) -> None:
    name = segment_name(base, suffix)
    assert len(name) == layout.SEGMENT_DIGITS + 1 + len(suffix)
    assert parse_segment_name(name) == (base, suffix)
    assert segment_base_of(name) == (base if suffix == layout.SEGMENT_SUFFIX else None)


@pytest.mark.parametrize(
    "name",
    [
        "42.log",  # not zero-padded
        "000000000000000000042.log",  # 21 digits
        "0000000000000000004a.log",
        "\u0660" * 20 + ".log",  # Arabic-Indic digits: str.isdigit() says yes
        "00000000000000000042.log.tmp",
        "00000000000000000042.index.tmp",
        "00000000000000000042.LOG",
        "00000000000000000042.log.from-80",
        "00000000000000000042.log\n",  # a regex's $ would accept it
        "state",
        "committed",
        "",
    ],
)
def test_other_names_are_not_segments(name: str) -> None:
    assert parse_segment_name(name) is None
    assert segment_base_of(name) is None


def test_partition_names_are_canonical_decimal() -> None:
    assert [parse_partition(n) for n in ("0", "7", "1023")] == [0, 7, 1023]
    for name in ("", "-1", "007", "1a", "\u0663", "1.0", " 1", "1\n"):
        assert parse_partition(name) is None, name


def test_replica_directories_lists_replicas_in_topic_then_partition_order(
    tmp_path: Path,
) -> None:
    assert replica_directories(str(tmp_path)) == []  # no partitions/ yet
    root = tmp_path / "partitions"
    for topic, partition in [("b", "10"), ("b", "2"), ("a", "0"), ("__cluster", "0")]:
        (root / topic / partition).mkdir(parents=True)
    (root / "b" / "3").write_bytes(b"")  # a file, not a replica directory
    (root / "b" / "007").mkdir()  # not a name a node writes
    (root / "b" / "4.tmp").mkdir()
    (root / "stray").write_bytes(b"")  # a file beside the topics
    found = replica_directories(str(tmp_path))
    assert found == [
        ReplicaDirectory("__cluster", 0, str(root / "__cluster" / "0")),
        ReplicaDirectory("a", 0, str(root / "a" / "0")),
        ReplicaDirectory("b", 2, str(root / "b" / "2")),
        ReplicaDirectory("b", 10, str(root / "b" / "10")),
    ]
    for replica in found:
        assert replica.directory == layout.partition_directory(
            str(tmp_path), replica.topic, replica.partition
        )


def test_segment_bases_are_the_log_files_in_offset_order(tmp_path: Path) -> None:
    for base in (300, 5, 10**12):
        for suffix in layout.SEGMENT_SUFFIXES:
            (tmp_path / segment_name(base, suffix)).write_bytes(b"")
    (tmp_path / (segment_name(7) + ".tmp")).write_bytes(b"")
    (tmp_path / segment_name(9, layout.INDEX_SUFFIX)).write_bytes(b"")  # orphan index
    (tmp_path / "state").write_bytes(b"")
    assert segment_bases(str(tmp_path)) == [5, 300, 10**12]


def test_replace_file_replaces_whole_and_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "founded"
    path.write_bytes(b"old contents, longer than the new")
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    inode = path.stat().st_ino
    replace_file(str(path), b"12")
    assert path.read_bytes() == b"12"
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert sorted(os.listdir(tmp_path)) == ["founded"]  # no temporary left
    # The new file before the rename, then the directory that names it.
    assert synced == [str(tmp_path / "founded.tmp"), str(tmp_path)]

    synced.clear()
    replace_file(str(path), b"3", durable=False)
    assert path.read_bytes() == b"3"
    assert synced == []


def test_replace_file_mode_and_hole(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    umask = os.umask(0o022)
    try:
        replace_file(str(path), b"{}", mode=0o600)
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o600
    state = tmp_path / "state"
    replace_file(str(state), b"slot", file_bytes=8192)
    data = state.read_bytes()
    assert len(data) == 8192 and data[:4] == b"slot" and not data[4:].strip(b"\0")
    assert state.stat().st_blocks * 512 < 8192  # the rest is a hole, never written


def test_a_failed_replace_keeps_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "node.json"
    path.write_bytes(b"old")

    def no_space(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        replace_file(str(path), b"new")
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["node.json"]


def test_only_the_layout_module_spells_data_directory_names() -> None:
    """Every writer and reader of a data directory asks laminar.segment.layout for
    its paths (issue 33, point 4): no second spelling to drift apart."""
    spellings = re.compile(
        r""":020d\}|\(\\d\{20\}\)|"(node\.json|founded|keyring\.json|timeindex)"|"""
        r"""os\.path\.join\([^)]*"(partitions|quarantine|state|committed)"|"""
        r"""/ "(partitions|quarantine)\""""
    )
    found = []
    for package in ("laminar", "clients"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "layout.py" or "/v1/" in str(path):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if spellings.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
