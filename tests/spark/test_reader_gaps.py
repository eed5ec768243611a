"""The cluster reader (:func:`laminar_spark.reader.read_range`) over a partition
with gaps between batches (keyed compaction): a fake client serves fetches from a
:class:`MemoryLog` as a node does (whole batches from the one holding the offset,
or the one after a gap, up to the high watermark). No Spark session, no cluster."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from laminar_client.client import FetchResult
from laminar_spark.planner import OffsetRange, ReadTask
from laminar_spark.reader import read_range

from laminar.records import encode_batch, parse_header, with_leader_fields
from laminar.segment import MemoryLog

TOPIC = "t"


@dataclass
class GappedClient:
    """Serves one partition's fetches from ``log`` below ``high_watermark``."""

    log: MemoryLog
    high_watermark: int
    fetches: int = 0

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int) -> FetchResult:
        self.fetches += 1
        data = b""
        if offset < self.high_watermark:
            data = self.log.read(offset, max_bytes, upper_offset=self.high_watermark)
        return FetchResult(data, self.high_watermark, self.log.start_offset, "fake")


def gapped_log() -> tuple[MemoryLog, list[int]]:
    """Batches of 4 records at 0, 4, ..., 96 in segments of 5 batches; compaction
    then keeps some batches of each sealed segment (none of the second one), so
    that gaps lie at segment starts, inside and at ends. The offsets held."""
    log = MemoryLog(segment_batches_max=5)
    for base in range(0, 100, 4):
        raw = encode_batch([b"v%d" % (base + i) for i in range(4)], keys=[b"k"] * 4)
        log.append_stamped(with_leader_fields(raw, base, 1))
    for number, (base, _) in enumerate(log.sealed_segments()):
        batches = list(log.read_segment(base))
        log.replace_segment(base, [b for i, b in enumerate(batches) if number != 1 and i % 2])
    log.roll()  # the last batches sealed too; the active segment is empty
    last_base = log.sealed_segments()[-1][0]
    log.replace_segment(last_base, list(log.read_segment(last_base))[:1])
    held = [
        offset
        for base, _ in log.sealed_segments()
        for batch in log.read_segment(base)
        for offset in range(parse_header(batch).base_offset, parse_header(batch).next_offset)
    ]
    return log, held


def offsets_read(client: GappedClient, task: ReadTask | OffsetRange) -> list[int]:
    def no_stall(_: float) -> None:
        raise AssertionError("the reader waited for offsets that no batch holds")

    batches: list[Any] = list(
        read_range(client, task, fetch_bytes=100, stall_timeout_s=0, sleep=no_stall)  # type: ignore[arg-type]
    )
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    return [int(o) for o in table["offset"].to_pylist()]


def test_a_range_over_gaps_reads_every_record_held_once() -> None:
    log, held = gapped_log()
    assert 0 < len(held) < 100 and held[-1] < 99  # a gap at the end, below the watermark
    client = GappedClient(log, log.end_offset)
    assert offsets_read(client, OffsetRange(TOPIC, 0, 0, 100)) == held


@pytest.mark.parametrize("cuts", [[6, 50], [21, 22, 23, 61], [2, 90, 99]])
def test_tasks_cut_inside_gaps_read_each_record_exactly_once(cuts: list[int]) -> None:
    log, held = gapped_log()
    client = GappedClient(log, log.end_offset)
    bounds = [0, *cuts, 100]
    got: list[int] = []
    for start, end in itertools.pairwise(bounds):
        got += offsets_read(client, ReadTask(TOPIC, 0, start, end, 0, 100))
    assert got == held
    # A range cut at both ends inside gaps.
    assert offsets_read(client, OffsetRange(TOPIC, 0, 21, 63)) == [o for o in held if 21 <= o < 63]
