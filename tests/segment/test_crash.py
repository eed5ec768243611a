"""Crash and corruption tests of SegmentLog recovery.

A torn or corrupt tail of the active segment must be cut back to the longest
valid prefix of whole batches; a corrupt batch in a sealed segment must never be
served; damaged index files must be rebuilt. Expected results are computed from
what was written, independently of the log's own scan.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar.errors import CorruptSegmentError
from laminar.records import HEADER_BYTES, with_leader_fields
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog
from tests.segment.support import FakeClock, RecordSpec, make_batch, scrub_pass, split_batches

CONFIG = LogConfig(
    segment_bytes_max=2048,
    index_interval_bytes=256,
    fsync_policy=FsyncPolicy.NEVER,
    retention_ms=None,
)


@dataclass
class Written:
    """A batch as the log stores it."""

    base_offset: int
    term: int
    records: list[RecordSpec]
    data: bytes

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


def _random_records(rng: random.Random) -> list[RecordSpec]:
    return [
        (
            rng.randint(-5, 100),
            None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 8)),
            rng.randbytes(rng.randint(0, 200)),
        )
        for _ in range(rng.randint(1, 4))
    ]


def _write(log: SegmentLog, rng: random.Random, count: int) -> list[Written]:
    written: list[Written] = []
    term = 1
    for _ in range(count):
        term += rng.random() < 0.2
        records = _random_records(rng)
        raw = make_batch(records)
        base = log.append(raw, term=term)
        written.append(Written(base, term, records, with_leader_fields(raw, base, term)))
    return written


def _read_all(log: SegmentLog, rng: random.Random) -> list[bytes]:
    """Every batch from start to end, by reads of random sizes."""
    batches: list[bytes] = []
    offset = log.start_offset
    while offset < log.end_offset:
        got = split_batches(log.read(offset, rng.randint(1, 5000)))
        assert got, f"empty read at {offset} below end {log.end_offset}"
        batches.extend(got)
        offset = _next_offset(got[-1])
    return batches


def _next_offset(batch: bytes) -> int:
    from laminar.records import parse_header

    return parse_header(batch).next_offset


def _log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


@dataclass
class Template:
    directory: Path
    written: list[Written]


def _make_template(root: Path, seed: int, *, close: bool) -> Template:
    rng = random.Random(seed)
    source = root / f"source-{seed}"
    log = SegmentLog.open(str(source), CONFIG)
    written = _write(log, rng, rng.randint(6, 30))
    if close:
        log.close()
        return Template(source, written)
    # A crash: take the files of a log that is still open (no index of the active
    # segment written, nothing synced by close).
    copy = root / f"crashed-{seed}"
    shutil.copytree(source, copy)
    log.close()
    return Template(copy, written)


def _flip_bits(path: Path, positions: list[int], rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    for position in positions:
        data[position] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def _damage_active(active: Path, size: int, rng: random.Random) -> int:
    """Cut and/or flip bits in the active segment; returns the first damaged byte."""
    mode = rng.choice(["cut", "flip", "both"])
    first_damage = size
    if mode in ("cut", "both"):
        cut = rng.randint(1 if mode == "both" else 0, size)
        os.truncate(active, cut)
        first_damage = cut
    if mode in ("flip", "both") and first_damage > 0:
        positions = [rng.randrange(first_damage) for _ in range(rng.randint(1, 3))]
        _flip_bits(active, positions, rng)
        first_damage = min(positions)
    return first_damage


def _check_damaged_case(template: Template, case_directory: Path, rng: random.Random) -> None:
    shutil.copytree(template.directory, case_directory)
    active = _log_files(case_directory)[-1]
    active_base = int(active.name.split(".")[0])
    sealed = [batch for batch in template.written if batch.base_offset < active_base]
    in_active = [batch for batch in template.written if batch.base_offset >= active_base]
    size = active.stat().st_size
    assert size == sum(len(batch.data) for batch in in_active)

    first_damage = _damage_active(active, size, rng)
    survivors: list[Written] = []
    end_position = 0
    for batch in in_active:
        end_position += len(batch.data)
        if end_position > first_damage:
            break
        survivors.append(batch)
    kept = sealed + survivors
    expected_end = kept[-1].next_offset if kept else active_base
    expected_term = kept[-1].term if kept else -1

    log = SegmentLog.open(str(case_directory), CONFIG)
    try:
        assert log.end_offset == expected_end
        assert log.last_term == expected_term
        assert active.stat().st_size == sum(len(batch.data) for batch in survivors)
        assert _read_all(log, rng) == [batch.data for batch in kept]
        # Appends continue right after the surviving prefix.
        records = _random_records(rng)
        term = max(expected_term, 1)
        raw = make_batch(records)
        assert log.append(raw, term=term) == expected_end
        appended = with_leader_fields(raw, expected_end, term)
        assert log.read(expected_end, 10_000) == appended
    finally:
        log.close()
    with SegmentLog.open(str(case_directory), CONFIG) as reopened:
        assert reopened.end_offset == expected_end + len(records)
        assert _read_all(reopened, rng) == [batch.data for batch in kept] + [appended]


@pytest.mark.parametrize("close", [True, False], ids=["closed", "crashed"])
def test_damaged_active_segment_keeps_longest_valid_prefix(close: bool, tmp_path: Path) -> None:
    """180 damaged copies of 6 logs per variant: 360 cases in all."""
    for template_number in range(6):
        seed = template_number * 2 + int(close)
        template = _make_template(tmp_path, seed, close=close)
        rng = random.Random(seed * 1000)
        for case in range(30):
            case_directory = tmp_path / f"case-{seed}-{case}"
            _check_damaged_case(template, case_directory, rng)
            shutil.rmtree(case_directory)


def test_empty_active_segment_after_total_loss(tmp_path: Path) -> None:
    rng = random.Random(7)
    template = _make_template(tmp_path, 7, close=False)
    active = _log_files(template.directory)[-1]
    os.truncate(active, 10)  # not even one whole header
    active_base = int(active.name.split(".")[0])
    with SegmentLog.open(str(template.directory), CONFIG) as log:
        assert log.end_offset == active_base
        sealed = [batch for batch in template.written if batch.base_offset < active_base]
        assert log.last_term == sealed[-1].term
        assert _read_all(log, rng) == [batch.data for batch in sealed]
        assert log.append(make_batch([(1, None, b"after")]), term=sealed[-1].term) == active_base


# --------------------------------------------------------------------------- sealed segments


def _log_with_sealed_segments(directory: Path, seed: int) -> list[Written]:
    rng = random.Random(seed)
    with SegmentLog.open(str(directory), CONFIG) as log:
        written = _write(log, rng, 40)
        assert log.segment_count >= 3
    return written


@pytest.mark.parametrize("where", ["payload", "header", "header_checksum", "length"])
def test_corrupt_sealed_batch_is_reported_never_served(where: str, tmp_path: Path) -> None:
    written = _log_with_sealed_segments(tmp_path, 11)
    files = _log_files(tmp_path)
    target_file = files[1]
    segment_base = int(target_file.name.split(".")[0])
    following_base = int(files[2].name.split(".")[0])
    in_segment = [b for b in written if segment_base <= b.base_offset < following_base]
    assert len(in_segment) >= 3
    victim_index = 2
    victim = in_segment[victim_index]
    position = sum(len(batch.data) for batch in in_segment[:victim_index])
    offset_in_batch = {
        "payload": HEADER_BYTES + len(victim.data[HEADER_BYTES:]) // 2,
        "header": 33,
        "header_checksum": 75,
        "length": 1,
    }[where]
    data = bytearray(target_file.read_bytes())
    data[position + offset_in_batch] ^= 0x10
    target_file.write_bytes(bytes(data))

    with SegmentLog.open(str(tmp_path), CONFIG) as log:
        assert log.end_offset == written[-1].next_offset
        # Valid batches before the corrupt one are served; the corrupt one is not.
        served = split_batches(log.read(segment_base, 1_000_000))
        assert served == [batch.data for batch in in_segment[:victim_index]]
        for offset in range(victim.base_offset, victim.next_offset):
            for _ in range(2):  # the failure is not forgotten after a first report
                with pytest.raises(CorruptSegmentError) as caught:
                    log.read(offset, 1_000_000)
                assert caught.value.path == str(target_file)
                assert caught.value.offset == victim.base_offset
        # Other segments are unaffected.
        later = [batch for batch in written if batch.base_offset >= following_base]
        served_later = split_batches(log.read(following_base, 1_000_000))
        assert served_later == [batch.data for batch in later[: len(served_later)]]
        assert served_later


def test_corrupt_sealed_batch_stays_unserved_after_becoming_active(tmp_path: Path) -> None:
    """Truncating back into a sealed segment makes it active; its unread batches
    are still unverified, and appending must not mark them as good."""
    written = _log_with_sealed_segments(tmp_path, 12)
    files = _log_files(tmp_path)
    first_file = files[0]
    second_base = int(files[1].name.split(".")[0])
    in_first = [b for b in written if b.base_offset < second_base]
    victim = in_first[1]
    data = bytearray(first_file.read_bytes())
    data[len(in_first[0].data) + HEADER_BYTES + 1] ^= 0x01
    first_file.write_bytes(bytes(data))
    assert len(in_first) >= 3
    # A fake clock: with the wall clock, the reopened segment would roll by age.
    with SegmentLog.open(str(tmp_path), CONFIG, clock_ms=FakeClock()) as log:
        # Drop the first segment's last batch so that the next append fits in it.
        assert log.truncate_suffix(in_first[-1].base_offset) == in_first[-1].base_offset
        assert log.segment_count == 1
        log.append(make_batch([(1, None, b"new")]), term=written[-1].term)
        assert log.segment_count == 1
        with pytest.raises(CorruptSegmentError) as caught:
            log.read(victim.base_offset, 1_000_000)
        assert caught.value.offset == victim.base_offset
        assert split_batches(log.read(0, 1_000_000)) == [in_first[0].data]


# --------------------------------------------------------------------------- index files


def _expected_offset_for(written: list[Written], timestamp_ms: int) -> int | None:
    for batch in written:
        for index, (record_ms, _, _) in enumerate(batch.records):
            if record_ms >= timestamp_ms:
                return batch.base_offset + index
    return None


def _garble(path: Path, how: str, rng: random.Random) -> None:
    if how == "delete":
        path.unlink()
    elif how == "random_same_size":
        path.write_bytes(rng.randbytes(path.stat().st_size))
    elif how == "partial_entry":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - 3])
    elif how == "zeros":
        path.write_bytes(bytes(path.stat().st_size))
    elif how == "empty":
        path.write_bytes(b"")
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("suffix", ["index", "timeindex"])
@pytest.mark.parametrize("how", ["delete", "random_same_size", "partial_entry", "zeros", "empty"])
def test_damaged_sealed_index_is_rebuilt(suffix: str, how: str, tmp_path: Path) -> None:
    written = _log_with_sealed_segments(tmp_path, 13)
    rng = random.Random(13)
    files = _log_files(tmp_path)
    damaged = files[1].with_suffix(f".{suffix}")
    originals = {path: path.read_bytes() for path in tmp_path.glob("*index")}
    _garble(damaged, how, rng)
    with SegmentLog.open(str(tmp_path), CONFIG) as log:
        for batch in written:
            for offset in range(batch.base_offset, batch.next_offset):
                assert split_batches(log.read(offset, 1))[0] == batch.data
        assert _read_all(log, rng) == [batch.data for batch in written]
        for timestamp_ms in range(-7, 103):
            assert log.offset_for_timestamp(timestamp_ms) == _expected_offset_for(
                written, timestamp_ms
            )
        for batch in written:
            assert log.term_at(batch.base_offset) == batch.term
    # The rebuilt files are what the log wrote when it sealed the segment.
    for path, data in originals.items():
        if path.stem != files[-1].stem:
            assert path.read_bytes() == data, path.name


def test_orphan_index_files_and_temporaries_are_removed(tmp_path: Path) -> None:
    written = _log_with_sealed_segments(tmp_path, 14)
    orphan_base = written[-1].next_offset + 100
    strays = [
        tmp_path / f"{orphan_base:020d}.index",
        tmp_path / f"{orphan_base:020d}.timeindex",
        tmp_path / "state.tmp",
        tmp_path / f"{0:020d}.index.tmp",
    ]
    for path in strays:
        path.write_bytes(b"leftover")
    with SegmentLog.open(str(tmp_path), CONFIG) as log:
        log.save_state(b"vote")
        assert log.end_offset == written[-1].next_offset
    for path in strays:
        assert not path.exists(), path.name
    with SegmentLog.open(str(tmp_path), CONFIG) as log:
        assert log.load_state() == b"vote"
        assert _read_all(log, random.Random(1)) == [batch.data for batch in written]


# --------------------------------------------------------------------------- segment swap


class _Crash(BaseException):
    """The machine stops here (a BaseException: no cleanup code catches it)."""


_FILE_CALLS = frozenset(
    {"open", "write", "pwrite", "pwritev", "fsync", "fdatasync", "replace", "rename", "unlink"}
)
_SWAP_MODULES = ("laminar.segment.log", "laminar.segment.layout", "laminar.segment.index")


class _CrashingOs:
    """Stands in for ``os`` in the storage modules: records each call that changes
    files (or makes them durable) and crashes instead of making call number
    ``crash_at``; after a crash every such call crashes too."""

    def __init__(self, crash_at: int | None) -> None:
        self.crash_at = crash_at
        self.calls: list[str] = []
        self.crashed = False

    def __getattr__(self, name: str) -> object:
        real = getattr(os, name)
        if name not in _FILE_CALLS:
            return real

        def call(*args: object, **kwargs: object) -> object:
            if self.crashed or len(self.calls) == self.crash_at:
                self.crashed = True
                raise _Crash(name)
            self.calls.append(name)
            return real(*args, **kwargs)

        return call


def _swap_template(
    root: Path, seed: int, *, emptied: bool = False
) -> tuple[Path, list[Written], int, list[bytes]]:
    """A closed log of several sealed segments, the base of a middle one, and a
    replacement for it: a random subset of its batches (a compaction's output), or
    none (``emptied``: a segment that starts no term, so every term stays)."""
    written = _log_with_sealed_segments(root / "template", seed)
    bases = [int(path.name.split(".")[0]) for path in _log_files(root / "template")]
    if emptied:
        for base, end in itertools.pairwise(bases):
            before = [w.term for w in written if w.base_offset < base]
            terms = {w.term for w in written if base <= w.base_offset < end}
            if before and terms == {before[-1]}:
                return root / "template", written, base, []
        raise AssertionError(f"seed {seed}: every sealed segment starts a term")

    def droppable(pair: tuple[int, int]) -> int:  # batches that do not start a term
        terms = [w.term for w in written if pair[0] <= w.base_offset < pair[1]]
        return len(terms) - len(set(terms))

    base, end = max(itertools.pairwise(bases), key=droppable)
    rng = random.Random(seed)
    in_segment = [batch for batch in written if base <= batch.base_offset < end]
    # Terms must not go back along the log: keep each term's first batch.
    kept = [
        batch.data
        for index, batch in enumerate(in_segment)
        if index == 0 or batch.term != in_segment[index - 1].term or rng.random() < 0.4
    ]
    assert len(kept) < len(in_segment)
    return root / "template", written, base, kept


def _replace_crashing(
    directory: Path,
    base: int,
    new: list[bytes],
    crash_at: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> _CrashingOs:
    """Run replace_segment with a crash before file call ``crash_at`` (None: no
    crash); the directory then holds what the crash left (the page cache: a
    killed process loses nothing it wrote)."""
    import importlib

    crashing = _CrashingOs(crash_at)
    log = SegmentLog.open(str(directory), CONFIG)
    try:
        with monkeypatch.context() as patch:
            for name in _SWAP_MODULES:
                patch.setattr(importlib.import_module(name), "os", crashing)
            with contextlib.suppress(_Crash):
                log.replace_segment(base, new)
        shutil.copytree(directory, directory.with_name(directory.name + "-crashed"))
    finally:
        log.close()
    return crashing


def _segment_files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()}


@pytest.mark.parametrize(("seed", "emptied"), [(31, False), (32, False), (36, True)])
def test_segment_swap_crash_at_every_file_call_leaves_old_or_new(
    seed: int, emptied: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash before each file call of replace_segment (and, while the rename is
    not yet durable, a power loss that undoes it; once it is, one that loses or
    tears the new index files): the reopened log holds the old segment or the new
    one, never a mix, and every other file is unchanged. An emptied segment's old
    index files are overwritten after the rename, not removed before it: a crash
    may leave them with the empty file, which they never pass for."""
    template, written, base, new = _swap_template(tmp_path, seed, emptied=emptied)
    old_batches = [batch.data for batch in written]
    bases = [int(p.name.split(".")[0]) for p in _log_files(template)]
    following = bases[bases.index(base) + 1]
    new_batches = (
        [batch.data for batch in written if batch.base_offset < base]
        + new
        + [batch.data for batch in written if batch.base_offset >= following]
    )
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    calls = _replace_crashing(reference, base, new, None, monkeypatch).calls
    renamed_at = calls.index("replace") if "replace" in calls else len(calls)
    target = f"{base:020d}"
    untouched = {
        name: data for name, data in _segment_files(template).items() if not name.startswith(target)
    }
    for crash_at in range(len(calls) + 1):
        case = tmp_path / f"case-{crash_at}"
        shutil.copytree(template, case)
        _replace_crashing(case, base, new, crash_at, monkeypatch)
        crashed = case.with_name(case.name + "-crashed")
        variants = [(crashed, crash_at > renamed_at)]
        rename_durable = "fsync" in calls[renamed_at + 1 : crash_at]
        if renamed_at < crash_at and not rename_durable:
            lost = tmp_path / f"case-{crash_at}-lost-rename"
            shutil.copytree(crashed, lost)
            (lost / f"{target}.log").rename(lost / f"{target}.log.tmp")
            shutil.copy(template / f"{target}.log", lost / f"{target}.log")
            variants.append((lost, False))
        if rename_durable:
            # The new index files are not fsynced: a power loss may lose or tear them.
            for how in ("missing", "torn"):
                lost = tmp_path / f"case-{crash_at}-{how}-indexes"
                shutil.copytree(crashed, lost)
                for suffix in (".index", ".timeindex"):
                    index = lost / f"{target}{suffix}"
                    if how == "missing":
                        index.unlink(missing_ok=True)
                    elif index.exists():
                        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
                variants.append((lost, True))
        for directory, swapped in variants:
            with SegmentLog.open(str(directory), CONFIG) as log:
                assert log.damage_found is None
                got = _read_all(log, random.Random(crash_at))
                assert got == (new_batches if swapped else old_batches), (crash_at, calls)
                assert log.end_offset == written[-1].next_offset
                assert [b for b, _ in log.sealed_segments()] == [
                    int(p.name.split(".")[0]) for p in _log_files(template)
                ][:-1]
                for batch in written:
                    assert log.term_at(batch.base_offset) == batch.term
                held = [w for w in written if w.data in set(got)]
                for timestamp_ms in range(-7, 103, 3):
                    assert log.offset_for_timestamp(timestamp_ms) == _expected_offset_for(
                        held, timestamp_ms
                    )
            files = _segment_files(directory)
            assert not [name for name in files if name.endswith(".tmp")]
            for name, data in untouched.items():
                if (
                    not name.endswith("index")
                    or name.split(".")[0] != _log_files(template)[-1].stem
                ):
                    assert files[name] == data, (crash_at, name)


def test_a_swap_fsyncs_the_new_file_and_the_directory_not_the_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three fsyncs: the new file before its rename, the directory after the old
    indexes' removal and after the rename. The new index files are not synced (a
    crash that loses them costs a rebuild: the crash test above)."""
    template, _, base, new = _swap_template(tmp_path, 34)
    calls = _replace_crashing(template, base, new, None, monkeypatch).calls
    renamed_at = calls.index("replace")
    assert calls[:renamed_at].count("fsync") == 2, calls
    assert calls[renamed_at:].count("fsync") == 1, calls
    assert calls[-4:] == ["open", "write", "open", "write"], calls  # the two indexes


def test_an_emptied_segment_is_swapped_with_two_fsyncs_and_no_unlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The new file's fsync and the directory's after the rename; the old index
    files are overwritten afterwards. A crash between the two leaves them beside the
    empty file: the open finds them wrong for it and rebuilds the (empty) index."""
    template, written, base, new = _swap_template(tmp_path, 36, emptied=True)
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    calls = _replace_crashing(reference, base, new, None, monkeypatch).calls
    assert calls.count("fsync") == 2 and "unlink" not in calls, calls
    synced_at = calls.index("fsync", calls.index("replace"))  # the directory's
    case = tmp_path / "case"
    shutil.copytree(template, case)
    _replace_crashing(case, base, new, synced_at + 1, monkeypatch)  # before the indexes
    crashed = case.with_name("case-crashed")
    target = f"{base:020d}"
    assert (crashed / f"{target}.log").stat().st_size == 0
    assert (crashed / f"{target}.index").read_bytes() == (template / f"{target}.index").read_bytes()
    caplog.set_level(logging.WARNING, logger="laminar.segment")
    with SegmentLog.open(str(reference), CONFIG) as log:
        expected = _read_all(log, random.Random(1))
    with SegmentLog.open(str(crashed), CONFIG) as log:
        assert _read_all(log, random.Random(2)) == expected
        assert [b for b, _ in log.sealed_segments()] == [
            int(p.name.split(".")[0]) for p in _log_files(template)
        ][:-1]
        for batch in written:
            assert log.term_at(batch.base_offset) == batch.term
    assert len(expected) < len(written)
    assert [r for r in caplog.records if "rebuilding index" in r.getMessage()]
    assert (crashed / f"{target}.index").read_bytes() == (
        reference / f"{target}.index"
    ).read_bytes()


def test_a_swapped_segment_reopens_without_rebuilding_anything(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    template, _, base, new = _swap_template(tmp_path, 33)
    with SegmentLog.open(str(template), CONFIG) as log:
        log.replace_segment(base, new)
        expected = _read_all(log, random.Random(1))
    before = _segment_files(template)
    caplog.set_level(logging.INFO, logger="laminar.segment")
    damage: list[CorruptSegmentError] = []
    with SegmentLog.open(str(template), CONFIG, set_aside=damage.append) as log:
        assert _read_all(log, random.Random(2)) == expected
        assert log.damage_found is None
        assert scrub_pass(log, 1000)[1] == []
    assert damage == []
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "rebuilding" in m or "truncating" in m], messages
    assert _segment_files(template) == before


def test_an_emptied_swap_left_to_sync_the_directory_later_makes_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sync_directory=False`` (keyed compaction's runs of emptied segments): the
    new file's fsync only; ``sync_directory()`` then fsyncs the directory once. Its
    calls are the swap's above less the directory's last fsync, so a crash at each
    leaves the old segment or the new one as the crash test above checks (a power
    loss may undo the rename until ``sync_directory()``)."""
    import importlib

    template, _, base, new = _swap_template(tmp_path, 36, emptied=True)
    crashing = _CrashingOs(None)
    with SegmentLog.open(str(template), CONFIG) as log, monkeypatch.context() as patch:
        for name in _SWAP_MODULES:
            patch.setattr(importlib.import_module(name), "os", crashing)
        log.replace_segment(base, new, sync_directory=False)
        swapped = list(crashing.calls)
        log.sync_directory()
        after = crashing.calls[len(swapped) :]
    assert swapped.count("fsync") == 1 and swapped.index("fsync") < swapped.index("replace")
    assert after.count("fsync") == 1, after
