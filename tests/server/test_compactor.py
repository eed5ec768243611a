"""run_command's per-segment shortcuts: a segment the command would not change is
neither rewritten nor swapped, and the bytes kept still count it."""

from __future__ import annotations

from collections.abc import Iterable

from laminar.records import encode_batch, parse_header
from laminar.segment.compaction import CompactCommand, build_superseded, compact
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import Buffer
from laminar.server.compactor import run_command


def _log(keys: list[bytes], *, tombstone_at: int | None = None) -> MemoryLog:
    log = MemoryLog(fsync=False, segment_batches_max=2)
    for offset, key in enumerate(keys):
        value = None if offset == tombstone_at else b"v%d" % offset
        log.append(encode_batch([value], keys=[key]), term=1)
    log.roll()
    return log


def _stored(log: MemoryLog) -> list[bytes]:
    return [bytes(b) for base, _ in log.sealed_segments() for b in log.read_segment(base)]


class _Swaps:
    """Counts a log's replace_segment calls, by base."""

    def __init__(self, log: MemoryLog) -> None:
        self.bases: list[int] = []
        original = log.replace_segment

        def counting(base: int, batches: Iterable[Buffer]) -> None:
            self.bases.append(base)
            original(base, batches)

        log.replace_segment = counting  # type: ignore[method-assign]


def test_a_segment_the_command_leaves_alike_is_not_swapped() -> None:
    # Segments of two batches: [a b] [c d] [a e]: only the first holds a superseded record.
    keys = [b"a", b"b", b"c", b"d", b"a", b"e"]
    log = _log(keys)
    before = _stored(log)
    swaps = _Swaps(log)
    command = CompactCommand(6, 0, codec=0)
    kept = run_command(log, command, memory_bytes_max=1 << 20)
    assert swaps.bases == [0]  # [2, 4) and [4, 6) are as the command leaves them
    with build_superseded(lambda: before, 0, 6, 1 << 20) as gone:
        assert _stored(log) == [bytes(b) for b in compact(before, command, gone)]
    assert [parse_header(b).base_offset for b in _stored(log)] == [1, 2, 3, 4, 5]
    assert kept == sum(len(b) for b in _stored(log))


def test_a_segment_with_a_removable_tombstone_is_rewritten() -> None:
    log = _log([b"a", b"b", b"c", b"d", b"e", b"f"], tombstone_at=1)
    swaps = _Swaps(log)
    run_command(log, CompactCommand(6, 2, codec=0), memory_bytes_max=1 << 20)
    assert swaps.bases == [0]  # nothing superseded anywhere, but a tombstone below T
    assert [parse_header(b).base_offset for b in _stored(log)] == [0, 2, 3, 4, 5]
