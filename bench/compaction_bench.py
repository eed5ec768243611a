"""Benchmark of the keyed-compaction engine (issue 34, point 4).

Run: ``.venv/bin/python -m bench.compaction_bench [--mib N] [--keys K] [--repeat R]
[--memory-mib M] [--batch-records B] [--dir PATH]``

One process writes ``--mib`` MiB (1,024) of keyed records of 1 KiB values, keys drawn
at random (seeded) from ``--keys`` distinct ones (10,000), ``--batch-records`` (64)
to a batch, into a ``SegmentLog`` of 64 MiB segments. Then, in each of ``--repeat``
rounds (3), in turns so that all three see the same machine:

* ``raw_read_mb_s``: the segment files read in 1 MiB chunks with plain ``read``
  calls (bench/segment_bench.py's raw side);
* ``log_read_mb_s``: the whole log scanned with ``SegmentLog.read`` in 1 MiB chunks
  (segment_bench's ``read_mb_s``);
* ``engine_mb_s``: MiB of input per second through the whole engine, as a replica
  would run it over the log: :func:`build_superseded` over ``[start, end)`` with a
  key map of ``--memory-mib`` MiB (64, the node default), then :func:`compact`
  over the log's batches by a command with ``end`` the log's end, every compacted
  batch written to a new file (fsync off, as the append figures of segment_bench).
  Helper ``gaps``' ``replace_segment`` was not on its branch yet, so the output goes
  to one new file rather than over the segments.

Figures (medians over the rounds; each ratio is taken within one round):

* ``engine_vs_raw_read``: ``engine_mb_s`` / ``raw_read_mb_s``, target >= 0.3 (the
  issue's); ``engine_vs_log_read``: the same against the log's read.
* ``bytes_before``, ``bytes_after``, ``bytes_after_vs_before``: the log's bytes and
  the compacted output's; ``records_after`` must equal the distinct keys.
* ``passes``: passes over the range ``build_superseded`` took.

``produce_p99_during_compaction_vs_idle`` (point 4's last figure) is a TODO phase:
it needs the compaction wired into the replica driver (helper ``replication``), so
that a node compacts while a producer writes to it. The bench prints it as a TODO
line and leaves it out of the figures.

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
from pathlib import Path

from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from bench.segment_bench import READ_CHUNK_BYTES
from laminar.records import encode_batch, libzstd_version, next_offset, parse_header, peek_length
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog, layout
from laminar.segment.compaction import CompactCommand, build_superseded, compact
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


def fill_log(path: Path, mib: int, keys: int, batch_records: int, seed: int) -> SegmentLog:
    """A log of ``mib`` MiB of 1 KiB records, keys drawn from ``keys`` distinct ones."""
    rng = random.Random(seed)
    base = rng.randbytes(VALUE_BYTES * (batch_records + 64))
    names = [b"key-%08d" % index for index in range(keys)]
    config = LogConfig(
        segment_bytes_max=SEGMENT_BYTES, fsync_policy=FsyncPolicy.NEVER, retention_ms=None
    )
    log = SegmentLog.open(str(path), config)
    while log.size_bytes < mib * MIB:
        shift = rng.randrange(64)
        values = [
            base[VALUE_BYTES * i + shift : VALUE_BYTES * (i + 1) + shift]
            for i in range(batch_records)
        ]
        batch_keys = [names[rng.randrange(keys)] for _ in range(batch_records)]
        log.append(encode_batch(values, keys=batch_keys, timestamps_ms=1_700_000_000_000), term=1)
    return log


def log_batches(log: SegmentLog) -> Iterator[memoryview]:
    """Every batch of ``log`` in order, read in 1 MiB chunks, as views of the chunks."""
    offset, end = log.start_offset, log.end_offset
    while offset < end:
        chunk = log.read(offset, READ_CHUNK_BYTES)
        view = memoryview(chunk)
        position = 0
        while position < len(chunk):  # whole batches: SegmentLog.read checked them
            length = peek_length(chunk, position)
            yield view[position : position + length]
            position += length
        offset = next_offset(chunk)


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


def engine_run(log: SegmentLog, output: Path, memory_bytes_max: int) -> tuple[float, int, int, int]:
    """Seconds, passes, bytes written and records written by one compaction of the
    whole log."""
    start, end = log.start_offset, log.end_offset
    cmd = CompactCommand(end=end, tombstones_end=0, zstd=libzstd_version())
    started = time.perf_counter()
    with (
        build_superseded(lambda: log_batches(log), start, end, memory_bytes_max) as superseded,
        open(output, "wb") as file,
    ):
        written = records = 0
        for batch in compact(log_batches(log), cmd, superseded):  # type: ignore[arg-type]
            written += file.write(batch)
            records += parse_header(batch).record_count
        passes = superseded.passes
    return time.perf_counter() - started, passes, written, records


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
    runs: dict[str, list[float]] = {}
    try:
        began = time.perf_counter()
        log = fill_log(root / "log", args.mib, args.keys, args.batch_records, args.seed)
        fill_s = time.perf_counter() - began
        os.sync()  # every side reads settled page cache
        files = segment_files(root / "log")
        size = log.size_bytes
        memory_bytes_max = int(args.memory_mib * MIB)
        figures: dict[str, list[float]] = {
            name: []
            for name in (
                "raw_read_mb_s",
                "log_read_mb_s",
                "engine_mb_s",
                "engine_vs_raw_read",
                "engine_vs_log_read",
            )
        }
        for round_number in range(args.repeat):
            sides = [
                ("raw", lambda: raw_read_s(files)),
                ("log", lambda: log_read_s(log)),
                ("engine", lambda: engine_run(log, root / "compacted", memory_bytes_max)[0]),
            ]
            shift = round_number % len(sides)
            seconds = dict((name, run()) for name, run in sides[shift:] + sides[:shift])
            figures["raw_read_mb_s"].append(size / MIB / seconds["raw"])
            figures["log_read_mb_s"].append(size / MIB / seconds["log"])
            figures["engine_mb_s"].append(size / MIB / seconds["engine"])
            figures["engine_vs_raw_read"].append(seconds["raw"] / seconds["engine"])
            figures["engine_vs_log_read"].append(seconds["log"] / seconds["engine"])
        _, passes, after, records = engine_run(log, root / "compacted", memory_bytes_max)
        log.close()
        for name, values in figures.items():
            results[name] = statistics.median(values)
            runs[name] = values
        results.update(
            bytes_before=size,
            bytes_after=after,
            bytes_after_vs_before=after / size,
            records_after=records,
            passes=passes,
            data_mib=args.mib,
            keys=args.keys,
        )
        if records != args.keys:
            print(f"phase failed: {records:,} records left, {args.keys:,} distinct keys")
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
    print_report(
        results, missed=missed_targets(results, TARGETS, unmeasured=True), runs=runs, notes=notes
    )


if __name__ == "__main__":
    run_main(main)
