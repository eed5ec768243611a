"""Benchmark of the keyed-compaction engine (issue 34, point 4).

Run: ``.venv/bin/python -m bench.compaction_bench [--mib N] [--keys K] [--repeat R]
[--memory-mib M] [--batch-records B] [--seed S] [--dir PATH] [--p99-runs N]
[--p99-mib N] [--p99-keys K] [--p99-samples N] [--p99-pace-mib-s R]
[--p99-segment-mib N] [--p99-check-ms MS]``

One process writes ``--mib`` MiB (1,024) of keyed records of 1 KiB values, keys drawn
at random (seeded) from ``--keys`` distinct ones (10,000), ``--batch-records`` (64)
to a batch, into a ``SegmentLog`` of 64 MiB segments, all sealed. Then, in each of
``--repeat`` rounds (3), in turns so that every side sees the same machine:

* ``raw_read_mb_s``: the segment files read in 1 MiB chunks with plain ``read``
  calls: segment_bench's ``raw_read_mb_s``, its "raw read speed", the baseline of
  the issue's target;
* ``log_read_mb_s``: the log scanned with ``SegmentLog.read`` in 1 MiB chunks
  (segment_bench's ``read_mb_s``);
* ``segment_read_mb_s``: every sealed segment scanned with ``read_segment`` (a
  view of each batch in its 1 MiB read; checksums were verified when written):
  what each pass of the engine reads;
* ``engine_mb_s``: MiB of input per second of a whole compaction of a copy of the
  log, as a replica runs it (the node's ``laminar.server.compactor.run_command``,
  called here): ``build_superseded`` over every sealed segment
  (``read_segment``, a key map of ``--memory-mib`` MiB, 64 as the node default),
  then per segment ``replace_segment(base, compact(read_segment(base), ...))`` (the
  crash-safe swap, with its fsyncs), by one command whose ``end`` is the last
  segment's end; a segment whose every offset is superseded is replaced by nothing
  without being read (``SupersededOffsets.count``) and the directory synced once
  after them, as a replica does (unpaced: the node's ``compaction_bytes_per_s_max
  = 0``). ``superseded_mb_s`` and ``rewrite_mb_s`` are its two parts. The clock
  stops when the last swap (and that sync) returns: the compaction is then done,
  durable and what every read sees, which is what the issue measures; the old
  files' pages and blocks are then
  still being freed by the log's freeing thread (``laminar.segment.files``, as
  Kafka's cleaner deletes replaced segments asynchronously);
* ``engine_incl_freeing_mb_s``: the same job timed until that thread has closed
  every old file (``SegmentFiles.wait_freed``, which also cuts short the thread's
  50 ms wait for the job to end): what the job costs the machine in all;
* ``engine_in_memory_mb_s``: the engine alone over the same batches held in
  memory (build_superseded + compact, output dropped): its compute, no I/O.

Figures are medians over the rounds; each ratio is taken within one round:
``engine_vs_raw_read`` (target >= 0.3, the issue's), ``engine_vs_log_read``,
``engine_vs_segment_read``, ``engine_incl_freeing_vs_raw_read`` and
``engine_in_memory_vs_raw_read``. Then
``bytes_before``, ``bytes_after`` and ``bytes_after_vs_before`` (the log's bytes
before and after), ``records_after`` (must equal ``keys``, the distinct keys
written: one record per key is left) and ``passes``.

The engine reads the range twice (once for the superseded offsets, once to
rewrite it; the copy is reopened, so the first pass verifies the checksums and
the second trusts them), so it cannot pass half of the read speed of its own
reads; each batch with survivors and superseded records is re-encoded, one batch
per run of survivors; each segment swap (``replace_segment``) makes three fsyncs
(the new file, the directory twice), one for an emptied segment (the directory's
comes once after a run of them, as a node's job does; 0.2-0.5 ms each on a quiet
VM, 3-4 ms while other processes write), and leaves the old file to
the freeing thread (12-16 ms per 64 MiB segment, mostly the filesystem freeing
its blocks in its journal: done during the job, it holds the job's next fsync
up, hence the thread's wait for the job to end).

Where the time goes at 1 GiB on a quiet VM (medians of 5-7 runs, seconds), with
pyarrow's key map (``key_map_kind()``, in the notes): the raw read 0.065-0.08
(its speed moves between 10 and 19 GB/s from minute to minute, and with it the
ratio); ``read_segment`` over the range verifying checksums 0.10 (0.083 trusting
them); the keys cut from it (``records.stored_key_column``, about 0.4 us a batch)
and copied out every ``GATHER_BYTES`` (4 MiB) of batches while in the CPU's cache
0.022; the key map 0.023 in memory, 0.03 in the pass (Arrow's hash table over
the map's keys and each group of 43,690 records, the 64 MiB budget's eighth, in
one call); the rewrite pass 0.087-0.11: compacting the 3
segments that keep records (about 5,000 runs re-encoded by
``records.encode_runs``, which reads a batch's columns once for all its runs),
writing and checking their new files, their fsyncs (0.022, most of it the 10 MB
file's) and the 13 emptied segments' swaps (0.006). So the job is 0.24-0.27 s,
0.25-0.34x of the raw read. What is left is a few microseconds of Python a batch
or a run (16,600 batches read, 5,000 runs), the reads themselves and the fsyncs.
Tried and dropped: reading the next window on a second thread while the caller
works on the current one (the passes took twice as long: the two threads hand the
GIL back and forth at every window); fsyncing each new file on a thread while the
next segment is rewritten (slower: on ext4 the next swap's rename waits for that
fsync's journal commit, and the largest fsync comes last); starting each new
file's writeback as it is written (``sync_file_range``: no change).

Then ``produce_p99_during_compaction_vs_idle`` (target <= 1.5; :func:`p99_run`):
``--p99-runs`` (3) times, a fresh node process (fsync on) with a compact topic of
``--p99-segment-mib`` (1) MiB segments filled with ``--p99-mib`` (64) MiB of
keyed records, compaction held off by its ``min_compaction_lag_ms`` while
``--p99-samples`` (2,000) acks=all produce calls of one record go one at a time
to another topic (idle), then the lag set to 0 and the calls going on while the
node compacts; only calls that overlap a compaction job count as during (the idle
calls see the leader's scan of the changelog's dirty range, at most 1 MiB a check
on the event loop, as any compact topic's node does). The
node's compaction is paced at ``--p99-pace-mib-s`` (64, the node default) and
checked every ``--p99-check-ms`` (100). Each run's p99 during over p99 idle; the
figure is the median of the runs, with ``produce_p99_idle_ms``,
``produce_p99_during_compaction_ms``, the p50s, ``compaction_jobs``,
``compacting_share`` (of the time sampled during) and
``produce_samples_during_compaction``.
The ratio depends on the disk: with fsyncs of 7-11 ms at p99 (this VM earlier)
it was 0.92-1.42. With fsyncs well under a millisecond (idle p99 about 0.9 ms) it
was 1.6-2.0 until three causes of slow calls during a job went (each seen in the
timeline of the calls against the node's log): pyarrow's import by the first job
(10-20 ms stalls: now imported on the compaction thread once the node holds a
replica of a compact topic); a step of
the key map over 43,690 records holding the GIL for some 5 ms (a paced job now
takes 2,048: ``PACED_GROUP_RECORDS``); and the emptied segments' swaps back to
back, unpaced, each holding up the produce call whose fsync waits behind its two
fsyncs (now each counts its bytes against the pace and leaves the directory's
fsync to the end of the run). Now 1.2-1.7 over 10 full bench runs in a row
(each the median of 3 runs), median 1.47, and ``engine_vs_raw_read`` 0.265-0.347,
median 0.299, in the same runs: both sit at their targets, inside the machine's
drift (the first five runs, right after a CI run, gave p99 ratios of 1.53-1.69
and the last five, on a quiet machine, 1.20-1.41); after the key map's single hash
call per group, five more gave 0.326-0.370 (median 0.345) and 1.39-1.54 (median
1.44). What is left of the p99 ratio
is not reproducible enough to tune against: in a run at 1.71 the slow calls of
the first pass came every 31-32 ms, one step of the paced key map (2 MiB at 64
MiB/s), and in one at 1.37 two of its ten slow calls overlapped a step.

Prints a table, the notes, the targets missed, then one JSON object as the last
line.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import grpc

from bench.cluster_bench import PRODUCE_METHOD, percentile
from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from bench.segment_bench import READ_CHUNK_BYTES
from laminar.records import encode_batch, libzstd_version, next_offset, parse_header
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog, layout
from laminar.segment.compaction import (
    CompactCommand,
    SupersededOffsets,
    build_superseded,
    compact,
    key_map_kind,
)
from laminar.segment.files import SegmentFiles
from laminar.segment.storage import Buffer
from laminar.server import compactor
from laminar.testing.processes import ProcessCluster, wait_for
from laminar.tuning import tune_allocator
from laminar.v1 import laminar_pb2 as pb

MIB = 1024 * 1024
VALUE_BYTES = 1024
SEGMENT_BYTES = 64 * MIB
TARGETS = {
    "engine_vs_raw_read": (">=", 0.3),
    "produce_p99_during_compaction_vs_idle": ("<=", 1.5),
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


def open_log(path: Path, files: SegmentFiles | None = None) -> SegmentLog:
    return SegmentLog.open(
        str(path),
        LogConfig(
            segment_bytes_max=SEGMENT_BYTES, fsync_policy=FsyncPolicy.NEVER, retention_ms=None
        ),
        files=files,
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
    freeing_s: float  # after the job: until the freeing thread closed every old file
    passes: int
    bytes_after: int
    records_after: int

    @property
    def seconds(self) -> float:
        return self.superseded_s + self.rewrite_s


def engine_run(source: Path, work: Path, memory_bytes_max: int) -> EngineRun:
    """Compact a copy of the log at ``source`` (in ``work``) as a replica does: the
    node's :func:`~laminar.server.compactor.run_command` (unpaced) over every sealed
    segment, by one command whose ``end`` is the end of the last one. Only the
    compaction is timed, and its first part (``build_superseded``) apart."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    os.sync()  # the copy's writeback is not the engine's
    files = SegmentFiles()
    log = open_log(work, files)
    try:
        sealed = log.sealed_segments()
        end = sealed[-1][1]
        cmd = CompactCommand(end=end, tombstones_end=0, zstd=libzstd_version())
        built: list[tuple[float, SupersededOffsets]] = []

        def building(*args: Any, **kwargs: Any) -> SupersededOffsets:
            superseded = build_superseded(*args, **kwargs)
            built.append((time.perf_counter(), superseded))
            return superseded

        with mock.patch.object(compactor, "build_superseded", building):  # time its two parts
            started = time.perf_counter()
            compactor.run_command(log, cmd, memory_bytes_max=memory_bytes_max)
            done = time.perf_counter()
        files.wait_freed()
        freed = time.perf_counter()
        records = sum(
            parse_header(batch).record_count
            for base, _ in log.sealed_segments()
            for batch in log.read_segment(base)
        )
        (built_at, superseded), *_ = built
        return EngineRun(
            built_at - started,
            done - built_at,
            freed - done,
            superseded.passes,
            log.size_bytes,
            records,
        )
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


# ----------------------------------------------------------------------------- produce p99

CHANGELOG = "changelog"
LOAD_TOPIC = "load"
DAY_MS = 86_400_000
P99_FILL_BATCH_RECORDS = 64
P99_PRODUCE_BYTES_MAX = 4 * MIB  # one fill request: whole batches up to this
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"  # laminar.server.logs.TEXT_FORMAT's asctime
JOB_LINE = re.compile(
    r"^(\S+ \S+) INFO \S+: keyed compaction (proposed|applied) "
    + re.escape(CHANGELOG)
    + r"/0 node=\S+ offset=(\d+)"
)


@dataclass
class P99Run:
    """One node's produce latencies (ms) before and while it compacts."""

    idle_ms: list[float]
    during_ms: list[float]
    jobs: int
    compacting_s: float
    sampled_s: float

    @property
    def ratio(self) -> float:
        return percentile(self.during_ms, 0.99) / percentile(self.idle_ms, 0.99)


def node_config(pace_bytes_per_s: int, check_ms: int, segment_bytes: int) -> str:
    return (
        f"[host]\nretention_check_ms = {check_ms}\n"
        f"compaction_bytes_per_s_max = {pace_bytes_per_s}\n"
        f"[log]\nsegment_bytes_max = {segment_bytes}\n"
    )


def now_ms() -> int:
    return int(time.time() * 1000)


def job_windows(log_path: Path) -> list[tuple[float, float]]:
    """``(start, end)`` wall-clock seconds of each keyed compaction job of the
    changelog the node's log shows: from its command's proposal (one node: committed
    at once, then run) to its ``applied`` line; a job not applied yet runs on."""
    proposed: dict[int, float] = {}
    windows = []
    for line in log_path.read_text(errors="replace").splitlines():
        found = JOB_LINE.match(line)
        if found is None:
            continue
        stamp = datetime.strptime(found[1], LOG_TIME_FORMAT).timestamp()  # local time
        offset = int(found[3])
        if found[2] == "proposed":
            proposed[offset] = stamp
        elif offset in proposed:
            windows.append((proposed.pop(offset), stamp + 0.001))  # the stamp's resolution
    windows += [(start, float("inf")) for start in proposed.values()]
    return sorted(windows)


def p99_run(root: Path, args: argparse.Namespace) -> P99Run:
    """A single node: a compact topic of small segments filled with ``--p99-mib`` MiB
    of keyed records (its minimum lag holds compaction off), then ``--p99-samples``
    acks=all produce calls of one record to another topic, one at a time (idle);
    then the lag is set to 0 and the same calls go on while the node compacts the
    changelog. A call counts as during compaction when it overlaps a job (the node
    log's ``proposed``/``applied`` lines); sampling stops once it has
    ``--p99-samples`` such calls, or once no job has run for two checks after the
    last one (or after a minute)."""
    config = node_config(
        int(args.p99_pace_mib_s * MIB), args.p99_check_ms, int(args.p99_segment_mib * MIB)
    )
    with ProcessCluster(root, node_config=config) as cluster:
        node = cluster.add_node(bootstrap=True)
        cluster.wait_ready(node)
        stub = cluster.stub(node)

        def create(name: str, topic: pb.TopicConfig) -> None:
            topic.partitions, topic.replication_factor = 1, 1
            stub.CreateTopic(pb.CreateTopicRequest(name=name, config=topic), timeout=30)

        create(LOAD_TOPIC, pb.TopicConfig())
        create(CHANGELOG, pb.TopicConfig(cleanup_policy="compact", min_compaction_lag_ms=DAY_MS))

        def produce(topic: str, batches: list[bytes]) -> None:
            request = pb.ProduceRequest(topic=topic, partition=0, batches=batches, acks=pb.ACKS_ALL)
            stub.Produce(request, timeout=30)

        def led() -> bool:
            try:
                for topic in (LOAD_TOPIC, CHANGELOG):
                    # Stamped now, as the fill: the lag holds it too.
                    hello = encode_batch([b"hello"], keys=[b"hello"], timestamps_ms=now_ms())
                    produce(topic, [hello])
            except grpc.RpcError:
                return False
            return True

        wait_for(led, 60, "both topics to take a record")
        rng = random.Random(args.seed)
        values = rng.randbytes(VALUE_BYTES * (P99_FILL_BATCH_RECORDS + 64))
        names = [b"key-%08d" % index for index in range(args.p99_keys)]
        filled, pending = 0, []
        while filled < args.p99_mib * MIB:
            shift = rng.randrange(64)
            batch = encode_batch(
                [
                    values[VALUE_BYTES * i + shift : VALUE_BYTES * (i + 1) + shift]
                    for i in range(P99_FILL_BATCH_RECORDS)
                ],
                keys=[names[rng.randrange(args.p99_keys)] for _ in range(P99_FILL_BATCH_RECORDS)],
                timestamps_ms=now_ms(),  # young: the lag holds them
            )
            pending.append(batch)
            filled += len(batch)
            if sum(map(len, pending)) >= P99_PRODUCE_BYTES_MAX:
                produce(CHANGELOG, pending)
                pending = []
        if pending:
            produce(CHANGELOG, pending)

        load = pb.ProduceRequest(
            topic=LOAD_TOPIC,
            partition=0,
            batches=[encode_batch([b"x" * 100])],
            acks=pb.ACKS_ALL,
        ).SerializeToString()
        channel = cluster.channel(node.grpc)
        call = channel.unary_unary(PRODUCE_METHOD)

        def timed(count: int) -> list[tuple[float, float, float]]:
            """``count`` calls: (wall-clock start s, end s, milliseconds) each."""
            samples = []
            for _ in range(count):
                wall = time.time()
                started = time.perf_counter()
                call(load, timeout=30)
                elapsed = time.perf_counter() - started
                samples.append((wall, wall + elapsed, elapsed * 1000))
            return samples

        timed(max(20, args.p99_samples // 10))  # warm-up
        idle = timed(args.p99_samples)
        if job_windows(node.log_path):
            raise RuntimeError(f"the node compacted while sampled idle; see {node.log_path}")
        alter = pb.AlterTopicRequest(name=CHANGELOG, set=pb.TopicConfig(min_compaction_lag_ms=0))
        began = time.time()
        stub.AlterTopic(alter, timeout=30)
        during: list[tuple[float, float, float]] = []
        quiet_s = 2 * args.p99_check_ms / 1000 + 0.5
        windows: list[tuple[float, float]] = []
        while True:
            samples = timed(50)
            windows = job_windows(node.log_path)
            during += [s for s in samples if _overlaps(s, windows)]
            now = time.time()
            last_end = max((end for _, end in windows), default=None)
            settled = last_end is not None and last_end < now - quiet_s
            if len(during) >= args.p99_samples or settled or now - began > 60:
                break
        if not during:
            raise RuntimeError(f"no produce call overlapped a compaction job; see {node.log_path}")
        ended = time.time()
        compacting_s = sum(min(end, ended) - max(start, began) for start, end in windows)
        return P99Run(
            [ms for _, _, ms in idle],
            [ms for _, _, ms in during],
            len(windows),
            compacting_s,
            ended - began,
        )


def _overlaps(sample: tuple[float, float, float], windows: list[tuple[float, float]]) -> bool:
    start, end, _ = sample
    return any(start < window_end and window_start < end for window_start, window_end in windows)


def p99_phase(
    root: Path, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """``--p99-runs`` runs of :func:`p99_run`, each on a fresh node: the median
    figures, and each run's."""
    runs: dict[str, list[float]] = {name: [] for name in P99_FIGURES}
    for number in range(args.p99_runs):
        run = p99_run(root / f"p99-{number}", args)
        runs["produce_p99_idle_ms"].append(percentile(run.idle_ms, 0.99))
        runs["produce_p99_during_compaction_ms"].append(percentile(run.during_ms, 0.99))
        runs["produce_p99_during_compaction_vs_idle"].append(run.ratio)
        runs["produce_p50_idle_ms"].append(percentile(run.idle_ms, 0.5))
        runs["produce_p50_during_compaction_ms"].append(percentile(run.during_ms, 0.5))
        runs["produce_samples_during_compaction"].append(len(run.during_ms))
        runs["compaction_jobs"].append(run.jobs)
        runs["compacting_share"].append(run.compacting_s / run.sampled_s)
    return {name: statistics.median(values) for name, values in runs.items()}, runs


P99_FIGURES = (
    "produce_p99_idle_ms",
    "produce_p99_during_compaction_ms",
    "produce_p99_during_compaction_vs_idle",
    "produce_p50_idle_ms",
    "produce_p50_during_compaction_ms",
    "produce_samples_during_compaction",
    "compaction_jobs",
    "compacting_share",
)


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
    "engine_incl_freeing_mb_s",
    "engine_incl_freeing_vs_raw_read",
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
    p99 = parser.add_argument_group("produce p99 during compaction (a node process)")
    p99.add_argument("--p99-runs", type=int, default=3, help="runs, a fresh node each (3; 0: skip)")
    p99.add_argument("--p99-mib", type=float, default=64, help="MiB of the changelog (64)")
    p99.add_argument("--p99-keys", type=int, default=1000, help="its distinct keys (1,000)")
    p99.add_argument("--p99-samples", type=int, default=2000, help="calls idle, and during (2,000)")
    p99.add_argument(
        "--p99-pace-mib-s",
        type=float,
        default=64,
        help="[host] compaction_bytes_per_s_max in MiB/s (64, the default; 0: unpaced)",
    )
    p99.add_argument(
        "--p99-segment-mib", type=float, default=1, help="[log] segment_bytes_max in MiB (1)"
    )
    p99.add_argument(
        "--p99-check-ms", type=int, default=100, help="[host] retention_check_ms (100)"
    )
    args = parser.parse_args()
    if min(args.mib, args.keys, args.repeat, args.batch_records) < 1 or args.memory_mib <= 0:
        parser.error("--mib, --keys, --repeat, --batch-records and --memory-mib must be positive")
    if args.p99_runs < 0 or args.p99_pace_mib_s < 0:
        parser.error("--p99-runs and --p99-pace-mib-s must be >= 0")
    if args.p99_runs and (
        min(args.p99_mib, args.p99_keys, args.p99_samples, args.p99_segment_mib, args.p99_check_ms)
        <= 0
    ):
        parser.error("--p99-mib, -keys, -samples, -segment-mib and -check-ms must be positive")

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
        key_map = key_map_kind()  # imports pyarrow now, as a node does once: not in a round

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
            with_freeing_s = outcome[-1].seconds + outcome[-1].freeing_s
            runs["engine_incl_freeing_mb_s"].append(size_mib / with_freeing_s)
            runs["engine_incl_freeing_vs_raw_read"].append(seconds["raw"] / with_freeing_s)
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
        if args.p99_runs:
            figures, p99_runs = p99_phase(root / "nodes", args)
            results.update(figures)
            runs.update(p99_runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    notes = [
        f"data: {args.mib:,} MiB of {VALUE_BYTES} B values, {args.keys:,} keys, "
        f"{args.batch_records} records a batch, {SEGMENT_BYTES // MIB} MiB segments, "
        f"written in {fill_s:.1f} s; key map {args.memory_mib:g} MiB ({key_map}); "
        f"{args.repeat} rounds",
        f"produce p99: one node, acks=all calls of one 100 B record one at a time to a "
        f"1-partition topic, idle then while it compacts a {args.p99_mib:g} MiB changelog of "
        f"{args.p99_keys:,} keys in {args.p99_segment_mib:g} MiB segments, paced at "
        f"{args.p99_pace_mib_s:g} MiB/s (0: unpaced), checks every {args.p99_check_ms} ms; "
        f"{args.p99_runs} runs"
        if args.p99_runs
        else "produce p99: skipped (--p99-runs 0)",
        machine_note(loaded),
    ]
    missed = missed_targets(results, TARGETS, unmeasured=True)
    print_report(results, missed=missed, runs=runs, notes=notes)


if __name__ == "__main__":
    run_main(main)
