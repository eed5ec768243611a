"""run_command's per-segment shortcuts: a segment the command would not change is
neither rewritten nor swapped, and the bytes kept still count it; and its pacing:
an emptied segment's swap counts against the pace, and a paced job hashes its keys
in small steps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from laminar.records import encode_batch, parse_header
from laminar.segment.compaction import CompactCommand, build_superseded, compact
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import Buffer
from laminar.server import compactor
from laminar.server.compactor import Pacer, run_command


def _log(keys: list[bytes], *, tombstone_at: int | None = None) -> MemoryLog:
    log = MemoryLog(fsync=False, segment_batches_max=2)
    for offset, key in enumerate(keys):
        value = None if offset == tombstone_at else b"v%d" % offset
        log.append(encode_batch([value], keys=[key]), term=1)
    log.roll()
    return log


def _stored(log: MemoryLog) -> list[bytes]:
    return [bytes(b) for base, _ in log.sealed_segments() for b in log.read_segment(base)]


class _Recorder:
    """A log's swaps (once done) and directory syncs, and the calls of :attr:`pacer`,
    in the order they came: ``("swap", base, sync_directory)``, ``("sync", -1, True)`` and
    ``("pace", count, True)``."""

    def __init__(self, log: MemoryLog) -> None:
        self.events: list[tuple[str, int, bool]] = []
        events = self.events
        replace, sync = log.replace_segment, log.sync_directory

        def replacing(base: int, batches: Iterable[Buffer], *, sync_directory: bool = True) -> None:
            replace(base, batches, sync_directory=sync_directory)  # noted once done: a
            events.append(("swap", base, sync_directory))  # rewrite paces while it reads

        def syncing() -> None:
            events.append(("sync", -1, True))
            sync()

        class Counting(Pacer):
            def pace(self, count: int) -> None:
                events.append(("pace", count, True))
                super().pace(count)

        log.replace_segment = replacing  # type: ignore[method-assign]
        log.sync_directory = syncing  # type: ignore[method-assign]
        self.pacer = Counting(1 << 40, sleep=lambda _: None)

    @property
    def swapped(self) -> list[int]:
        return [base for kind, base, _ in self.events if kind == "swap"]


def test_a_segment_the_command_leaves_alike_is_not_swapped() -> None:
    # Segments of two batches: [a b] [c d] [a e]: only the first holds a superseded record.
    keys = [b"a", b"b", b"c", b"d", b"a", b"e"]
    log = _log(keys)
    before = _stored(log)
    swaps = _Recorder(log)
    command = CompactCommand(6, 0, codec=0)
    kept = run_command(log, command, memory_bytes_max=1 << 20)
    assert swaps.swapped == [0]  # [2, 4) and [4, 6) are as the command leaves them
    with build_superseded(lambda: before, 0, 6, 1 << 20) as gone:
        assert _stored(log) == [bytes(b) for b in compact(before, command, gone)]
    assert [parse_header(b).base_offset for b in _stored(log)] == [1, 2, 3, 4, 5]
    assert kept == sum(len(b) for b in _stored(log))


def test_a_segment_with_a_removable_tombstone_is_rewritten() -> None:
    log = _log([b"a", b"b", b"c", b"d", b"e", b"f"], tombstone_at=1)
    swaps = _Recorder(log)
    run_command(log, CompactCommand(6, 2, codec=0), memory_bytes_max=1 << 20)
    assert swaps.swapped == [0]  # nothing superseded anywhere, but a tombstone below T
    assert [parse_header(b).base_offset for b in _stored(log)] == [0, 2, 3, 4, 5]


def test_an_emptied_segments_swap_counts_its_bytes_against_the_pace() -> None:
    """A segment whose every offset is superseded is swapped unread; its swap is
    counted as its bytes (at most SWAP_PACE_BYTES), so a job of emptied segments
    does not swap them back to back (their fsyncs would hold up every produce's)."""
    # [a a] [a a] [b a] [b c]: the first two segments are emptied, the third
    # rewritten (its b is superseded), the last left alike.
    log = _log([b"a", b"a", b"a", b"a", b"b", b"a", b"b", b"c"])
    sizes = {base: log.segment_summary(base).size_bytes for base, _ in log.sealed_segments()}
    paces = _Recorder(log)
    run_command(log, CompactCommand(8, 0, codec=0), memory_bytes_max=1 << 20, pacer=paces.pacer)
    after_pass = paces.events[paces.events.index(("swap", 0, False)) :]
    assert after_pass[:4] == [
        ("swap", 0, False),
        ("pace", sizes[0], True),
        ("swap", 2, False),
        ("pace", sizes[2], True),
    ]
    # The rewritten one is paced by its read, batch by batch, and not charged again.
    batch = ("pace", sizes[4] // 2, True)
    assert after_pass[4:] == [batch, batch, ("swap", 4, True), batch, batch]


def test_a_swap_counts_a_mebibyte_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compactor, "SWAP_PACE_BYTES", 10)
    log = _log([b"a", b"a", b"a", b"b"])
    paces = _Recorder(log)
    run_command(log, CompactCommand(4, 0, codec=0), memory_bytes_max=1 << 20, pacer=paces.pacer)
    assert paces.events[paces.events.index(("swap", 0, False)) + 1] == ("pace", 10, True)


def test_a_paced_job_hashes_its_keys_in_small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step of the key map holds the GIL: a paced job (a node's, sharing the
    process with the event loop) takes PACED_GROUP_RECORDS at most; an unpaced one
    the engine's default."""
    seen: list[int | None] = []
    real = compactor.build_superseded

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("group_records_max"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compactor, "build_superseded", spy)
    run_command(_log([b"a", b"a", b"b"]), CompactCommand(3, 0, codec=0), memory_bytes_max=1 << 20)
    paced = Pacer(1 << 30, sleep=lambda _: None)
    command = CompactCommand(3, 0, codec=0)
    run_command(_log([b"a", b"a", b"b"]), command, memory_bytes_max=1 << 20, pacer=paced)
    assert seen == [None, compactor.PACED_GROUP_RECORDS]


def test_a_run_of_emptied_segments_syncs_the_directory_once_after_it() -> None:
    """Emptied segments are swapped without the directory's fsync; it comes once,
    before the job returns (its result must be durable then), or with the next
    rewritten segment's swap, which syncs the directory itself."""
    calls: list[tuple[str, int, bool]] = []
    for keys in ([b"a"] * 6, [b"a", b"a", b"a", b"a", b"a", b"c"]):
        log = _log(keys)
        recorder = _Recorder(log)
        run_command(log, CompactCommand(6, 0, codec=0), memory_bytes_max=1 << 20)
        calls += [*recorder.events, ("job done", -1, True)]
    # [a a] [a a] [a a]: two emptied, then a rewrite (it syncs the directory itself).
    # [a a] [a a] [a c]: two emptied, then one left alike, then the job's own sync.
    assert calls == [
        ("swap", 0, False),
        ("swap", 2, False),
        ("swap", 4, True),
        ("job done", -1, True),
        ("swap", 0, False),
        ("swap", 2, False),
        ("sync", -1, True),
        ("job done", -1, True),
    ]
