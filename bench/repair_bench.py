"""Benchmark of failure handling and repair (issue 28): how the cluster rides out a
damaged or full node and returns to health by itself.

Run: ``.venv/bin/python -m bench.repair_bench [--quick] [--repeat N] [--only PHASES]
[--size-mib N] [--variants V,...]``

Each phase is one function that measures one figure (and its breakdown) and adds
it to the :class:`Report`; a figure is the median of ``--repeat`` runs (default
3; ``--quick`` 1), each on a fresh cluster, unless said otherwise. Phases that
need root are skipped with a note when run without it.

* ``disk_full`` -> ``write_gap_after_disk_full_s`` (root: it mounts a tmpfs):
  :func:`laminar.testing.disk_full.disk_full_run`. Three nodes (``--preset
  local``, fsync on); the third's data directory is a 40 MB tmpfs with a watermark
  of 8 MiB (``--disk-free-bytes-min``), and it leads the partition (replication
  factor 3) that a steady producer (``Producer``, acks=all, idempotent) writes a
  1 KB record to every 5 ms. A filler file takes every free byte of the tmpfs (the
  issue's trial: appends fail with ``ENOSPC`` unless the watermark acts first);
  5 s later it is deleted. The figure is the longest time without an acknowledged
  write from the fill to the deletion. Target <= 2 s (the issue's trial: the
  replica was fenced and reopened as leader in a loop, and the producer's records
  failed after the whole delivery timeout). Breakdown from the same runs:
  ``write_gap_below_watermark_s``, the same for a fill that leaves half the
  watermark free (the node hands its leaderships over at its next check, with no
  write failing); ``disk_full_detected_s``, from the fill to the node saying it
  is full; ``disk_full_back_in_service_s``, from the deletion until the node leads
  its partition again with every replica in sync and none fenced (no restart). The
  notes say who led while the disk was full, how many replicas the node fenced
  for want of space, and that nothing acknowledged was lost (every replica read
  back).

* ``repair`` -> ``repair_mb_s``, ``repair_vs_raw_read`` and
  ``produce_p99_during_repair_vs_idle``: :func:`laminar.testing.repair.repair_run`.
  Three nodes (``--preset local``, fsync on); one partition (replication factor
  3) filled with ``--size-mib`` (1 GiB; ``--quick`` 256 MiB) of 10 KB records; a
  producer writes 1 KB records to another topic 200 times a second (acks=all).
  After 5 s of that alone, a follower of the filled partition is killed, one
  byte of its first segment flipped (the whole replica is lost) and the node
  restarted: it sets the damaged files aside and the replica catches up from the
  leader as a learner. ``repair_mb_s`` is the replica's size over the time from
  the node answering until it is a voter in sync again with nothing damaged;
  ``repair_vs_raw_read`` that over ``raw_read_mb_s``, the segment bench's raw
  read (:func:`bench.segment_bench.bench_read`, page cache) in the same run
  (target >= 0.3); ``produce_p99_during_repair_vs_idle`` the producer's p99
  latency during the repair over its p99 before the kill (target <= 1.5). The
  repaired copy must serve exactly the leader's batches. Variants
  (``--variants``), each figure suffixed with the variant's name:
  ``default`` (the default ``recovery_bytes_per_s``, no suffix), ``unlimited``
  (0: no budget), ``fast`` (100 MiB/s), ``own_disk`` (root: the victim's data
  directory is a tmpfs, so its repair writes do not reach the disk the other
  nodes write to, as on machines of their own). Also ``durable_write_mb_s``:
  256 MiB written to one file and fsynced, the disk's ceiling for a repair that
  is written durably, and ``repair_vs_durable_write``.

The notes also give the load average before and after: the figures are only as
good as the machine is quiet.

Prints a table, the notes, the targets missed, then one JSON object as the last
line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from bench.segment_bench import bench_read, make_batches
from laminar.server.host import HostConfig
from laminar.testing.disk_full import (
    TMPFS_BYTES,
    WATERMARK_BYTES,
    DiskFullRun,
    disk_full_run,
    tmpfs_unsupported_reason,
)
from laminar.testing.repair import RepairRun, repair_run
from laminar.tuning import tune_numpy

TARGETS: dict[str, tuple[str, float]] = {
    "write_gap_after_disk_full_s": ("<=", 2.0),
    "repair_vs_raw_read": (">=", 0.3),
    "produce_p99_during_repair_vs_idle": ("<=", 1.5),
}


@dataclass
class Report:
    results: dict[str, float] = field(default_factory=dict)
    runs: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, runs: Sequence[float]) -> None:
        self.runs[name] = list(runs)
        self.results[name] = statistics.median(runs)


# ----------------------------------------------------------------------------- disk_full


def write_gap_after_disk_full(args: argparse.Namespace, report: Report) -> None:
    """``write_gap_after_disk_full_s`` and its breakdown (see the module docstring)."""
    reason = tmpfs_unsupported_reason()
    if reason is not None:
        report.notes.append(f"disk_full: skipped, {reason}")
        return
    runs: list[DiskFullRun] = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="laminar-repair-bench-") as root:
            runs.append(disk_full_run(Path(root)))
    report.add("write_gap_after_disk_full_s", [r.phase("no_space").write_gap_s for r in runs])
    report.add("write_gap_below_watermark_s", [r.phase("watermark").write_gap_s for r in runs])
    report.add("disk_full_detected_s", [r.phase("no_space").full_after_s for r in runs])
    report.add("disk_full_back_in_service_s", [r.phase("no_space").back_in_service_s for r in runs])
    for run in runs:
        full = run.phase("no_space")
        lost = run.findings.counts.get("lost", 0)
        checks = "clean" if run.findings.clean else str(run.findings)
        report.notes.append(
            f"disk_full: {run.node} led partition {run.partition}; while full "
            f"{full.leader_while_full} led, {full.fenced_while_full} replicas fenced for "
            f"want of space; {run.acked:,} records acknowledged, {lost} lost, failed "
            f"records {run.errors or 'none'}; read-back checks {checks}"
        )
    report.notes.append(
        f"disk_full: tmpfs {TMPFS_BYTES >> 20} MiB, watermark {WATERMARK_BYTES >> 20} MiB"
    )


# ----------------------------------------------------------------------------- repair

VARIANTS: dict[str, tuple[int | None, bool]] = {
    "default": (None, False),
    "unlimited": (0, False),
    "fast": (100 << 20, False),
    "own_disk": (None, True),
}
"""Each repair variant's ``recovery_bytes_per_s`` (None: the default) and whether
the victim's data directory is a tmpfs."""


def repair(args: argparse.Namespace, report: Report) -> None:
    """``repair_mb_s``, ``repair_vs_raw_read``, ``produce_p99_during_repair_vs_idle``
    and their breakdown (see the module docstring)."""
    size = args.size_mib << 20
    with tempfile.TemporaryDirectory(prefix="laminar-repair-bench-") as root:
        reference = reference_speeds(Path(root), min(size, REFERENCE_BYTES))
    for name, value in reference.items():
        report.add(name, [value])
    for variant in args.variants:
        rate, tmpfs = VARIANTS[variant]
        rate = HostConfig().recovery_bytes_per_s if rate is None else rate
        reason = tmpfs_unsupported_reason() if tmpfs else None
        if reason is not None:
            report.notes.append(f"repair {variant}: skipped, {reason}")
            continue
        runs: list[RepairRun] = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="laminar-repair-bench-") as root:
                runs.append(repair_run(Path(root), size, rate, victim_tmpfs=tmpfs))
        suffix = "" if variant == "default" else f"_{variant}"
        speed = [run.repair_mb_s for run in runs]
        report.add(f"repair_mb_s{suffix}", speed)
        report.add(f"repair_vs_raw_read{suffix}", [s / reference["raw_read_mb_s"] for s in speed])
        report.add(
            f"repair_vs_durable_write{suffix}",
            [s / reference["durable_write_mb_s"] for s in speed],
        )
        report.add(f"produce_p99_during_repair_vs_idle{suffix}", [r.p99_ratio for r in runs])
        for run in runs:
            report.notes.append(
                f"repair {variant}: {run.size_bytes >> 20} MiB at recovery_bytes_per_s "
                f"{run.recovery_bytes_per_s >> 20 or 'unlimited'} MiB/s"
                f"{' (victim on tmpfs)' if run.victim_tmpfs else ''}: filled in "
                f"{run.fill_s:.1f} s, restart {run.restart_s:.1f} s, repaired in "
                f"{run.repair_s:.1f} s; produce p99 idle {run.p99_idle_s * 1000:.1f} ms "
                f"({run.load_samples[0]} records), during repair "
                f"{run.p99_repair_s * 1000:.1f} ms ({run.load_samples[1]}); load errors "
                f"{run.load_errors or 'none'}; quarantined {', '.join(run.quarantined)}; "
                f"repaired copy {'identical to' if run.identical else 'DIFFERS FROM'} "
                "the leader's"
            )
            if not run.identical:
                raise SystemExit("repair: the repaired copy differs from the leader's")


REFERENCE_BYTES = 256 << 20
"""The most the raw read reads (its speed does not grow with size), and what the
durable write writes (less fits in the disk's write cache)."""


def reference_speeds(directory: Path, size: int) -> dict[str, float]:
    """The segment bench's raw read speed over ``size`` bytes (page cache) and the
    disk's durable write speed (:data:`REFERENCE_BYTES` to one file, fsync at the
    end, as ``dd conv=fsync``)."""
    batch_bytes = len(make_batches(1)[0])
    raw = bench_read(directory, make_batches(max(1, size // batch_bytes)), 1)["raw_read_mb_s"]
    chunk = os.urandom(1 << 20)
    path = directory / "durable-write.bin"
    started = time.perf_counter()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(REFERENCE_BYTES >> 20):
            os.write(descriptor, chunk)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    durable = (REFERENCE_BYTES >> 20) / (time.perf_counter() - started)
    return {"raw_read_mb_s": raw, "durable_write_mb_s": durable}


PHASES: dict[str, Callable[[argparse.Namespace, Report], None]] = {
    "disk_full": write_gap_after_disk_full,
    "repair": repair,
}


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run per figure")
    parser.add_argument("--repeat", type=int, help="runs per figure (median; default 3)")
    parser.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases to run, of {', '.join(PHASES)} (default: all)",
    )
    parser.add_argument(
        "--size-mib",
        type=int,
        help="repair: MiB in the damaged replica (default 1024; --quick 256)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"repair: comma-separated variants, of {', '.join(VARIANTS)} (default: all)",
    )
    args = parser.parse_args()
    args.size_mib = args.size_mib or (256 if args.quick else 1024)
    if args.size_mib < 1:
        parser.error("--size-mib must be at least 1")
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown_variants = sorted(set(args.variants) - set(VARIANTS))
    if unknown_variants:
        parser.error(f"unknown variants {unknown_variants}; choose from {', '.join(VARIANTS)}")
    args.repeat = args.repeat or (1 if args.quick else 3)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.only = [phase.strip() for phase in args.only.split(",") if phase.strip()]
    unknown = sorted(set(args.only) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases {unknown}; choose from {', '.join(PHASES)}")
    tune_numpy()

    report = Report()
    loaded = load_average()
    for phase in args.only:
        PHASES[phase](args, report)
    report.notes.append(machine_note(loaded))
    print_report(
        report.results,
        missed=missed_targets(report.results, TARGETS),
        runs=report.runs,
        notes=report.notes,
    )


if __name__ == "__main__":
    run_main(main)
