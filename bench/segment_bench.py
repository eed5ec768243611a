"""Benchmark of the record-batch codec and the segmented log.

Run: ``.venv/bin/python -m bench.segment_bench [--quick] [--repeat N] [--dir PATH]``

Every figure is the median of ``--repeat`` runs (3 by default) taken in this one
process, with 100-byte values in batches of 1,000 records; ``check_payload_us`` is
microseconds per batch, and ``check_vs_verify`` its cost over ``verify_batch``'s,
the two checks a leader runs on receipt (``*_zstd_*``: the same, compressed). The
append and read figures are medians over interleaved rounds instead (see
:func:`bench_append` and :func:`bench_read`), with at least 9 rounds. Baselines are
measured in the same run: plain Python writes and reads of the same bytes to a
plain file.
Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from laminar.records import (
    Compression,
    Record,
    check_payload,
    decode_batch,
    decode_records,
    encode_batch,
    encode_records,
    next_offset,
    verify_batch,
)
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog, layout
from laminar.tuning import tune_allocator

VALUE_BYTES = 100
RECORDS_PER_BATCH = 1000
MIB = 1024 * 1024
READ_CHUNK_BYTES = 1 * MIB
# bench_append: MiB per round and per turn of each writer, fewest rounds (see there).
APPEND_ROUND_MIB = 128
APPEND_CHUNK_MIB = 4
APPEND_ROUNDS_MIN = 9
READ_ROUNDS_MIN = 9  # bench_read: pairs of scans, fewest


def make_batches(count: int, seed: int = 1) -> list[bytes]:
    """``count`` distinct batches of 1,000 records with 100-byte values."""
    base = os.urandom(VALUE_BYTES * RECORDS_PER_BATCH + count)
    timestamp_ms = 1_700_000_000_000
    batches = []
    for index in range(count):
        values = [
            base[index + VALUE_BYTES * i : index + VALUE_BYTES * (i + 1)]
            for i in range(RECORDS_PER_BATCH)
        ]
        batches.append(encode_batch(values, timestamps_ms=timestamp_ms + index))
    return batches


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def median_of(repeat: int, function: Callable[[], float]) -> float:
    return statistics.median(function() for _ in range(repeat))


# ----------------------------------------------------------------------------- codec


def bench_codec(repeat: int, quick: bool) -> dict[str, float]:
    values = [os.urandom(VALUE_BYTES) for _ in range(RECORDS_PER_BATCH)]
    timestamps_ms = [1_700_000_000_000 + i for i in range(RECORDS_PER_BATCH)]
    records = [Record(-1, t, None, v, ()) for t, v in zip(timestamps_ms, values, strict=True)]
    batch = encode_records(records)
    rounds = 300 if quick else 1000

    def call_s(function: Callable[[], object], count: int) -> float:
        """Seconds per call of ``function`` over ``count`` calls in a row."""

        # Each result is dropped before the next call, as a producer or consumer does
        # with a batch it has sent or handled. (Keeping all of them measured the
        # allocator and the garbage collector: 300 decoded batches hold 300,000 live
        # objects, and decode_records_s read ~2.3M instead of ~4.5M.)
        def calls() -> None:
            for _ in range(count):
                function()

        return timed(calls) / count

    def rate(function: Callable[[], object]) -> float:
        return median_of(repeat, lambda: RECORDS_PER_BATCH / call_s(function, rounds))

    def receipt(sample: bytes) -> tuple[float, float]:
        """check_payload's microseconds per batch, and its cost over verify_batch's.

        The two checks a leader runs on every batch it receives, timed in turns
        (each ratio from one run, the median over runs); verify_batch takes ~2 us,
        hence ten times the calls.
        """
        header = verify_batch(sample)
        count = 10 * rounds
        check_s = []
        ratios = []
        for _ in range(repeat):
            check_s.append(call_s(lambda: check_payload(sample, header), count))
            ratios.append(check_s[-1] / call_s(lambda: verify_batch(sample), count))
        return statistics.median(check_s) * 1e6, statistics.median(ratios)

    zstd_batch = encode_records(records, compression=Compression.ZSTD)
    results = {
        "encode_records_s": rate(lambda: encode_records(records)),
        "encode_columns_records_s": rate(lambda: encode_batch(values, timestamps_ms=timestamps_ms)),
        "decode_records_s": rate(lambda: decode_batch(batch)),
        "decode_to_record_tuples_s": rate(lambda: decode_records(batch)),
        "decode_zstd_records_s": rate(lambda: decode_batch(zstd_batch)),
    }
    results["check_payload_us"], results["check_vs_verify"] = receipt(batch)
    results["check_payload_zstd_us"], results["check_zstd_vs_verify"] = receipt(zstd_batch)
    return results


# ----------------------------------------------------------------------------- log


def bench_append(directory: Path, batches: list[bytes], repeat: int) -> dict[str, float]:
    """Appends with fsync ``never`` against Python writing the same bytes to a file.

    Three writers take the same batches: plain ``file.write`` calls to a new file
    (raw), ``SegmentLog.append`` as the broker calls it (``verified=True``: the
    payload checksum was checked on receipt) and ``append`` checking the payload
    checksum itself (``verified=False``). The logs are new and do their full work
    (header checks, stamping, indexes); each side's time covers only its own writes.

    The data set is cut into slices of about ``APPEND_ROUND_MIB``. In each round the
    three writers take turns, ``APPEND_CHUNK_MIB`` of one slice at a time (the order
    rotating with every chunk), so that all three see the same machine: on this
    2-core host other load and the kernel's page-cache work (allocating pages, and
    ext4 freeing the blocks of deleted files at its next journal commit) come and go
    within a tenth of a second, and made back-to-back runs of 512 MiB differ by up
    to 2x. Before every round the previous round's files are deleted and
    ``os.sync()`` returns, so every round starts from the same state and no round
    pays for another's writeback. Ratios are taken within each round and reported
    as the median over rounds; the MB/s figures are medians of per-round rates.
    """
    config = LogConfig(fsync_policy=FsyncPolicy.NEVER, retention_ms=None)
    batch_bytes = len(batches[0])
    slice_count = max(1, round(len(batches) * batch_bytes / (APPEND_ROUND_MIB * MIB)))
    per_slice = -(-len(batches) // slice_count)
    per_chunk = max(1, APPEND_CHUNK_MIB * MIB // batch_bytes)
    log_path = directory / "append"
    checked_path = directory / "append-checked"
    raw_path = directory / "raw.bin"

    def clean() -> None:
        shutil.rmtree(log_path, ignore_errors=True)
        shutil.rmtree(checked_path, ignore_errors=True)
        raw_path.unlink(missing_ok=True)
        os.sync()

    def one_round(part: list[bytes]) -> list[float]:
        """Seconds spent by raw, log and checked log writing ``part``."""
        clean()
        seconds = [0.0, 0.0, 0.0]
        with (
            open(raw_path, "wb") as raw,
            SegmentLog.open(str(log_path), config) as log,
            SegmentLog.open(str(checked_path), config) as checked,
        ):
            writers: list[Callable[[list[bytes]], object]] = [
                lambda chunk: [raw.write(batch) for batch in chunk],
                lambda chunk: [log.append(b, term=1, verified=True) for b in chunk],
                lambda chunk: [checked.append(b, term=1, verified=False) for b in chunk],
            ]
            for number, start in enumerate(range(0, len(part), per_chunk)):
                chunk = part[start : start + per_chunk]
                for turn in range(3):
                    which = (number + turn) % 3
                    began = time.perf_counter()
                    writers[which](chunk)
                    seconds[which] += time.perf_counter() - began
        return seconds

    rates: list[list[float]] = [[], [], []]
    log_ratios: list[float] = []
    checked_ratios: list[float] = []
    rounds = max(APPEND_ROUNDS_MIN, max(repeat, 3) * slice_count)
    for round_number in range(rounds):
        offset = (round_number % slice_count) * per_slice
        part = batches[offset : offset + per_slice]
        mib = len(part) * batch_bytes / MIB
        seconds = one_round(part)
        for rate, elapsed in zip(rates, seconds, strict=True):
            rate.append(mib / elapsed)
        log_ratios.append(seconds[0] / seconds[1])
        checked_ratios.append(seconds[0] / seconds[2])
    clean()
    raw_mb_s, log_mb_s, _ = (statistics.median(rate) for rate in rates)
    return {
        "append_mb_s": log_mb_s,
        "append_records_s": log_mb_s * MIB / batch_bytes * RECORDS_PER_BATCH,
        "raw_write_mb_s": raw_mb_s,
        "append_vs_raw": statistics.median(log_ratios),
        "append_checksummed_vs_raw": statistics.median(checked_ratios),
    }


def bench_append_always(
    directory: Path, batches: list[bytes], repeat: int, writers: int = 4
) -> dict[str, float]:
    config = LogConfig(
        segment_bytes_max=128 * MIB, fsync_policy=FsyncPolicy.ALWAYS, retention_ms=None
    )
    per_writer = [batches[i::writers] for i in range(writers)]

    def run() -> float:
        path = directory / "always"
        shutil.rmtree(path, ignore_errors=True)
        log = SegmentLog.open(str(path), config)
        syncs_before = _fdatasync_counter[0]
        threads = [
            threading.Thread(target=lambda part=part: [log.append(b, term=1) for b in part])
            for part in per_writer
        ]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        log.close()
        _syncs_per_run.append(_fdatasync_counter[0] - syncs_before)
        return elapsed

    _syncs_per_run: list[int] = []
    seconds = median_of(repeat, run)
    appends = len(batches)
    return {
        "append_always_records_s": appends * RECORDS_PER_BATCH / seconds,
        "append_always_appends_per_fsync": appends / statistics.median(_syncs_per_run),
    }


_fdatasync_counter = [0]
_real_fdatasync = os.fdatasync


def _counting_fdatasync(descriptor: int) -> None:
    _fdatasync_counter[0] += 1
    _real_fdatasync(descriptor)


def bench_read(directory: Path, batches: list[bytes], repeat: int) -> dict[str, float]:
    total_bytes = sum(len(batch) for batch in batches)
    # Small segments, so that after reopening most data sits in sealed segments,
    # whose checksums are verified on first read (read_verified_mb_s).
    config = LogConfig(
        segment_bytes_max=16 * MIB, fsync_policy=FsyncPolicy.NEVER, retention_ms=None
    )
    path = directory / "read"
    shutil.rmtree(path, ignore_errors=True)
    log = SegmentLog.open(str(path), config)
    for batch in batches:
        log.append(batch, term=1)
    raw_path = directory / "raw-read.bin"
    with open(raw_path, "wb") as file:
        for batch in batches:
            file.write(batch)
    # Both sides read settled page cache: no scan pays for the kernel writing back
    # the gigabyte just written.
    os.sync()

    def read_all(log: SegmentLog) -> float:
        def scan() -> None:
            offset, end, got = log.start_offset, log.end_offset, 0
            while offset < end:
                data = log.read(offset, READ_CHUNK_BYTES)
                got += len(data)
                offset = next_offset(data)
            assert got == total_bytes, (got, total_bytes)

        return timed(scan)

    def raw_read() -> float:
        def scan() -> None:
            got = 0
            with open(raw_path, "rb", buffering=0) as file:
                while chunk := file.read(READ_CHUNK_BYTES):
                    got += len(chunk)
            assert got == total_bytes

        return timed(scan)

    # Scans of ~0.1 s each, raw and log in turns (which goes first alternating):
    # each round's ratio compares two scans a tenth of a second apart, and the
    # figures are medians over rounds. Longer gaps let this VM's speed drift
    # between the two sides (single scans differ by up to 1.5x minute to minute).
    log_s: list[float] = []
    raw_s: list[float] = []
    ratios: list[float] = []
    for round_number in range(max(READ_ROUNDS_MIN, repeat)):
        if round_number % 2:
            log_s.append(read_all(log))
            raw_s.append(raw_read())
        else:
            raw_s.append(raw_read())
            log_s.append(read_all(log))
        ratios.append(raw_s[-1] / log_s[-1])
    log.close()
    # Reopened: sealed segments are verified (checksums) on their first read.
    cold_s: list[float] = []
    for _ in range(repeat):
        reopened = SegmentLog.open(str(path), config)
        cold_s.append(read_all(reopened))
        reopened.close()
    results = {
        "read_mb_s": total_bytes / MIB / statistics.median(log_s),
        "raw_read_mb_s": total_bytes / MIB / statistics.median(raw_s),
        "read_verified_mb_s": total_bytes / MIB / statistics.median(cold_s),
    }
    results["read_vs_raw"] = statistics.median(ratios)
    return results


def bench_recovery(directory: Path, repeat: int, segment_mib: int = 256) -> dict[str, float]:
    batch_bytes = len(make_batches(1)[0])
    count = segment_mib * MIB // batch_bytes
    batches = make_batches(64)
    config = LogConfig(
        segment_bytes_max=(segment_mib + 8) * MIB,
        fsync_policy=FsyncPolicy.NEVER,
        retention_ms=None,
    )
    path = directory / "recovery"
    shutil.rmtree(path, ignore_errors=True)
    log = SegmentLog.open(str(path), config)
    for index in range(count):
        log.append(batches[index % len(batches)], term=1)
    size = log.size_bytes
    log.close()
    assert log.segment_count == 1

    def run() -> float:
        for name in os.listdir(path):
            parsed = layout.parse_segment_name(name)
            if parsed is not None and parsed[1] in layout.INDEX_SUFFIXES:
                os.unlink(path / name)
        start = time.perf_counter()
        reopened = SegmentLog.open(str(path), config)
        elapsed = time.perf_counter() - start
        assert reopened.end_offset == count * RECORDS_PER_BATCH
        reopened.close()
        return elapsed

    return {
        "recovery_mb_s": size / MIB / median_of(repeat, run),
        "recovery_segment_mib": size / MIB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller data sets (< 40 s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--dir", help="directory for data files (default: a temporary one)")
    args = parser.parse_args()

    # As a node does (see laminar.tuning): without it, glibc trims and re-faults
    # the heap top around the megabyte-sized read buffers, in this process's heap
    # ~27 page faults per 1 MiB read. Both sides of every ratio run in this process.
    tune_allocator()
    os.fdatasync = _counting_fdatasync
    data_mib = 128 if args.quick else 512
    batch_count = data_mib * MIB // len(make_batches(1)[0])
    batches = make_batches(batch_count)
    root = Path(tempfile.mkdtemp(prefix="laminar-bench-", dir=args.dir))
    started = time.perf_counter()
    results: dict[str, float] = {}
    try:
        results.update(bench_codec(args.repeat, args.quick))
        results.update(bench_append(root, batches, args.repeat))
        always_batches = batches[: 400 if args.quick else 1600]
        results.update(bench_append_always(root, always_batches, args.repeat))
        results.update(bench_read(root, batches, args.repeat))
        results.update(bench_recovery(root, args.repeat))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.fdatasync = _real_fdatasync
    results["data_mib"] = data_mib
    results["elapsed_s"] = time.perf_counter() - started

    width = max(len(key) for key in results)
    print(f"{'figure':<{width}}  value")
    for key, value in results.items():
        print(f"{key:<{width}}  {value:,.2f}")
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))


if __name__ == "__main__":
    main()
