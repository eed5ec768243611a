"""Benchmark of the keyed-compaction engine (issue 34, point 4).

Run: ``.venv/bin/python -m bench.compaction_bench [--mib N] [--keys K] [--repeat R]
[--memory-mib M] [--batch-records B] [--seed S] [--dir PATH]``

One process writes ``--mib`` MiB (1,024) of keyed records of 1 KiB values, keys drawn
at random (seeded) from ``--keys`` distinct ones (10,000), ``--batch-records`` (64)
to a batch, into a ``SegmentLog`` of 64 MiB segments, all sealed. Then, in each of
``--repeat`` rounds (3), in turns so that every side sees the same machine:

* ``raw_read_mb_s``: the segment files read in 1 MiB chunks with plain ``read``
  calls (segment_bench's ``raw_read_mb_s``);
* ``log_read_mb_s``: the log scanned with ``SegmentLog.read`` in 1 MiB chunks
  (segment_bench's ``read_mb_s``);
* ``segment_read_mb_s``: every sealed segment scanned with ``read_segment`` (each
  batch checked and copied): what each pass of the engine reads;
* ``engine_mb_s``: MiB of input per second of a whole compaction of a copy of the
  log, as a replica runs it: ``build_superseded`` over every sealed segment
  (``read_segment``, a key map of ``--memory-mib`` MiB, 64 as the node default),
  then per segment ``replace_segment(base, compact(read_segment(base), ...))`` (the
  crash-safe swap, with its fsyncs), by one command whose ``end`` is the last
  segment's end; a segment whose every offset is superseded is replaced by nothing
  without being read (``SupersededOffsets.count``), as a replica may do.
  ``superseded_mb_s`` and ``rewrite_mb_s`` are its two parts;
* ``engine_in_memory_mb_s``: the engine alone over the same batches held in
  memory (build_superseded + compact, output dropped): its compute, no I/O.

Figures are medians over the rounds; each ratio is taken within one round:
``engine_vs_raw_read`` (target >= 0.3, the issue's), ``engine_vs_log_read``,
``engine_vs_segment_read`` and ``engine_in_memory_vs_raw_read``. Then
``bytes_before``, ``bytes_after`` and ``bytes_after_vs_before`` (the log's bytes
before and after), ``records_after`` (must equal ``keys``, the distinct keys
written: one record per key is left) and ``passes``.

The engine reads the range twice (once for the superseded offsets, once to
rewrite it), so it cannot pass half of the read speed of its own reads; and each
segment swap (``replace_segment``) fsyncs its new file and directory and frees the
old file's blocks, which on this VM costs 20-45 ms per 64 MiB segment.

``produce_p99_during_compaction_vs_idle`` (point 4's last figure) is a TODO phase:
it needs the compaction wired into the replica driver (helper ``replication``), so
that a node compacts while a producer writes to it. The bench prints a ``phase
TODO`` line for it and leaves it out of the figures.

Prints a table, the notes, the targets missed, then one JSON object as the last
line.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from bench.segment_bench import READ_CHUNK_BYTES
from laminar.records import encode_batch, libzstd_version, next_offset, parse_header
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog, layout
from laminar.segment.compaction import CompactCommand, build_superseded, compact
from laminar.segment.storage import Buffer
from laminar.tuning import tune_allocator

MIB = 1024 * 1024
VALUE_BYTES = 1024
SEGMENT_BYTES = 64 * MIB
TARGETS = {"engine_vs_raw_read": (">=", 0.3)}
TODO_PHASES = {
    "produce_p99_during_compaction_vs_idle": "needs the compaction wired into the replica "
    "driver (issue 34 task E, helper replication): a node that compacts while a producer "
    "writes to it"
}


def fill_log(
    path: Path, mib: int, keys: int, batch_records: int, seed: int
) -> tuple[SegmentLog, int]:
    """A log of ``mib`` MiB of 1 KiB records, keys drawn from ``keys`` distinct ones,
    and how many distinct keys it holds."""
    rng = random.Random(seed)
    base = rng.randbytes(VALUE_BYTES * (batch_records + 64))
    names = [b"key-%08d" % index for index in range(keys)]
    log = open_log(path)
    drawn: set[bytes] = set()
    while log.size_bytes < mib * MIB:
        shift = rng.randrange(64)
        values = [
            base[VALUE_BYTES * i + shift : VALUE_BYTES * (i + 1) + shift]
            for i in range(batch_records)
        ]
        batch_keys = [names[rng.randrange(keys)] for _ in range(batch_records)]
        drawn.update(batch_keys)
        log.append(encode_batch(values, keys=batch_keys, timestamps_ms=1_700_000_000_000), term=1)
    log.roll()  # every batch in a sealed segment: compaction never touches the active one
    return log, len(drawn)


def segment_files(path: Path) -> list[Path]:
    found = []
    for name in os.listdir(path):
        base = layout.segment_base_of(name)
        if base is not None:
            found.append((base, path / name))
    return [file for _, file in sorted(found)]


def raw_read_s(files: list[Path]) -> float:
    started = time.perf_counter()
    for file in files:
        with open(file, "rb", buffering=0) as handle:
            while handle.read(READ_CHUNK_BYTES):
                pass
    return time.perf_counter() - started


def log_read_s(log: SegmentLog) -> float:
    started = time.perf_counter()
    offset, end = log.start_offset, log.end_offset
    while offset < end:
        offset = next_offset(log.read(offset, READ_CHUNK_BYTES))
    return time.perf_counter() - started


def open_log(path: Path) -> SegmentLog:
    return SegmentLog.open(
        str(path),
        LogConfig(
            segment_bytes_max=SEGMENT_BYTES, fsync_policy=FsyncPolicy.NEVER, retention_ms=None
        ),
    )


def segment_read_s(log: SegmentLog) -> float:
    """One scan of every sealed segment with ``read_segment``: what each engine pass reads."""
    started = time.perf_counter()
    for base, _ in log.sealed_segments():
        for _ in log.read_segment(base):
            pass
    return time.perf_counter() - started


@dataclass
class EngineRun:
    """One compaction of a copy of the log: seconds of each part, and what is left."""

    superseded_s: float  # build_superseded: one read of every sealed segment per pass
    rewrite_s: float  # compact + replace_segment: one more read, the writes, fsyncs
    passes: int
    bytes_after: int
    records_after: int

    @property
    def seconds(self) -> float:
        return self.superseded_s + self.rewrite_s


def engine_run(source: Path, work: Path, memory_bytes_max: int) -> EngineRun:
    """Compact a copy of the log at ``source`` (in ``work``) as a replica would:
    every sealed segment, by one command whose ``end`` is the end of the last one.
    Only the compaction is timed."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    os.sync()  # the copy's writeback is not the engine's
    log = open_log(work)
    try:
        sealed = log.sealed_segments()
        start, end = sealed[0][0], sealed[-1][1]
        cmd = CompactCommand(end=end, tombstones_end=0, zstd=libzstd_version())

        def read_range() -> Iterator[Buffer]:
            for base, _ in sealed:
                yield from log.read_segment(base)

        started = time.perf_counter()
        with build_superseded(read_range, start, end, memory_bytes_max) as superseded:
            built = time.perf_counter()
            for base, segment_end in sealed:
                if superseded.count(base, segment_end - base) == segment_end - base:
                    # Every offset holds a superseded record: nothing to read.
                    log.replace_segment(base, [])
                    continue
                log.replace_segment(base, compact(log.read_segment(base), cmd, superseded))
            passes = superseded.passes
        done = time.perf_counter()
        records = sum(
            parse_header(batch).record_count
            for base, _ in log.sealed_segments()
            for batch in log.read_segment(base)
        )
        return EngineRun(built - started, done - built, passes, log.size_bytes, records)
    finally:
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def in_memory_s(batches: list[Buffer], memory_bytes_max: int) -> float:
    """The engine alone over batches already in memory (its compute; no I/O)."""
    start = parse_header(batches[0]).base_offset
    end = parse_header(batches[-1]).next_offset
    cmd = CompactCommand(end=end, tombstones_end=0, zstd=libzstd_version())
    started = time.perf_counter()
    with build_superseded(lambda: batches, start, end, memory_bytes_max) as superseded:
        for _ in compact(batches, cmd, superseded):
            pass
    return time.perf_counter() - started


FIGURES = (
    "raw_read_mb_s",
    "log_read_mb_s",
    "segment_read_mb_s",
    "engine_mb_s",
    "engine_vs_raw_read",
    "engine_vs_log_read",
    "engine_vs_segment_read",
    "superseded_mb_s",
    "rewrite_mb_s",
    "engine_in_memory_mb_s",
    "engine_in_memory_vs_raw_read",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="MiB of records (1024)")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys (10,000)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median; 3)")
    parser.add_argument("--memory-mib", type=float, default=64, help="key map MiB (64)")
    parser.add_argument("--batch-records", type=int, default=64, help="records a batch (64)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the keys (1)")
    parser.add_argument("--dir", help="directory for data files (default: a temporary one)")
    args = parser.parse_args()
    if min(args.mib, args.keys, args.repeat, args.batch_records) < 1 or args.memory_mib <= 0:
        parser.error("--mib, --keys, --repeat, --batch-records and --memory-mib must be positive")

    tune_allocator()  # as a node does (see segment_bench)
    loaded = load_average()
    root = Path(tempfile.mkdtemp(prefix="laminar-compaction-bench-", dir=args.dir))
    results: dict[str, float] = {}
    runs: dict[str, list[float]] = {name: [] for name in FIGURES}
    memory_bytes_max = int(args.memory_mib * MIB)
    try:
        began = time.perf_counter()
        log, distinct = fill_log(root / "log", args.mib, args.keys, args.batch_records, args.seed)
        fill_s = time.perf_counter() - began
        os.sync()  # every side reads settled page cache
        files = segment_files(root / "log")
        size_mib = log.size_bytes / MIB
        batches = [b for base, _ in log.sealed_segments() for b in log.read_segment(base)]
        outcome: list[EngineRun] = []

        def engine() -> float:
            outcome.append(engine_run(root / "log", root / "work", memory_bytes_max))
            return outcome[-1].seconds

        sides = [
            ("raw", lambda: raw_read_s(files)),
            ("log", lambda: log_read_s(log)),
            ("segment", lambda: segment_read_s(log)),
            ("engine", engine),
            ("in_memory", lambda: in_memory_s(batches, memory_bytes_max)),
        ]
        for round_number in range(args.repeat):
            shift = round_number % len(sides)
            seconds = {name: run() for name, run in sides[shift:] + sides[:shift]}
            for name in ("raw", "log", "segment"):
                runs[f"{name}_read_mb_s"].append(size_mib / seconds[name])
                runs[f"engine_vs_{name}_read"].append(seconds[name] / seconds["engine"])
            runs["engine_mb_s"].append(size_mib / seconds["engine"])
            runs["superseded_mb_s"].append(size_mib / outcome[-1].superseded_s)
            runs["rewrite_mb_s"].append(size_mib / outcome[-1].rewrite_s)
            runs["engine_in_memory_mb_s"].append(size_mib / seconds["in_memory"])
            runs["engine_in_memory_vs_raw_read"].append(seconds["raw"] / seconds["in_memory"])
        log.close()
        last = outcome[-1]
        for name, values in runs.items():
            results[name] = statistics.median(values)
        results.update(
            bytes_before=size_mib * MIB,
            bytes_after=last.bytes_after,
            bytes_after_vs_before=last.bytes_after / (size_mib * MIB),
            records_after=last.records_after,
            passes=last.passes,
            data_mib=args.mib,
            keys=distinct,
        )
        if last.records_after != distinct:
            print(f"phase failed: {last.records_after:,} records left of {distinct:,} keys")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, why in TODO_PHASES.items():
        print(f"phase TODO: {name}: {why}")
    notes = [
        f"data: {args.mib:,} MiB of {VALUE_BYTES} B values, {args.keys:,} keys, "
        f"{args.batch_records} records a batch, {SEGMENT_BYTES // MIB} MiB segments, "
        f"written in {fill_s:.1f} s; key map {args.memory_mib:g} MiB; {args.repeat} rounds",
        machine_note(loaded),
    ]
    missed = missed_targets(results, TARGETS, unmeasured=True)
    print_report(results, missed=missed, runs=runs, notes=notes)


if __name__ == "__main__":
    run_main(main)
