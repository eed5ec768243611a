"""Benchmark of the background scrubber (issue 28, point 4): ``scrub_cpu_pct``.

Run: ``.venv/bin/python -m bench.scrub_bench [--quick] [--repeat N] [--data-mib N]
[--window-s S]``

One node process (``--preset local``, fsync off: the writes are only setup) holds
``--data-mib`` MiB (1,024; ``--quick`` 256) in a topic of 4 partitions, replication
factor 1, in 64 MiB segments, as batches of 16 records of 1 KiB (16 KiB: what a
producer under moderate load sends) or, for the ``_1kib_batches`` figures, of one
record (the worst case: the scrubber's cost is mostly per batch then).
Each run restarts the node twice on that data and measures its CPU (``utime +
stime`` from ``/proc/<pid>/stat``) over a window of ``--window-s`` seconds (20;
``--quick`` 5) once it has settled (answering, and under 10% of a core over half a
second: opening the replicas reads every log once):

* idle: scrubbing off (``[host] scrub_bytes_per_s = 0``);
* scrubbing: ``scrub_bytes_per_s`` at its default (16 MiB/s) and
  ``scrub_pass_min_ms = 0``, so that it scrubs throughout the window (the worst
  case: with the default pass period a node this small would rest between passes).
  The segment files are dropped from the page cache first
  (``posix_fadvise(DONTNEED)``), so the scrubber reads from the disk, as it does
  for data nobody has read lately.

Figures (median of ``--repeat`` runs, default 3; ``--quick`` 1):

* ``scrub_cpu_pct``: (scrubbing CPU - idle CPU) / window, in % of one core. Target
  <= 2. ``scrub_cpu_pct_1kib_batches``: the same for 1 KiB batches. Target <= 2.
* ``scrub_read_mib_s`` (and ``..._1kib_batches``): what the node read meanwhile
  (``rchar`` of ``/proc/<pid>/io``), MiB/s: the scrubber's actual rate in bytes (at
  most the configured one; it also charges 4 KiB per batch and 64 KiB per call,
  see :mod:`laminar.server.scrub`).
* ``idle_cpu_pct``: the idle node's CPU, the baseline.
* ``scrub_cpu_ms_per_mib``: the extra CPU per MiB read.

:func:`scrub_cpu_run` is the whole measurement of one run, self-contained (it
starts and stops its own node).

Measured on this 2-core machine (1 GiB, 20 s windows, 3 runs): ``scrub_cpu_pct``
0.3 (11.3 MiB/s read), ``scrub_cpu_pct_1kib_batches`` 0.35 (3.2 MiB/s read), idle
0.6-0.7; the CPU clock ticks are 10 ms, so a 20 s window resolves 0.05%.

Prints a table, the notes, the targets missed, then one JSON object as the last
line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from laminar_client import Client

from bench.group_bench import cpu_s
from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from laminar.records import encode_batch
from laminar.server.host import HostConfig
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for

TOPIC = "scrub"
PARTITIONS = 4
RECORD_BYTES = 1024
BATCH_RECORDS = {"": 16, "_1kib_batches": 1}
"""Records per stored batch, by the suffix of the figures measured with them."""
REQUEST_BYTES = 4 << 20
SEGMENT_BYTES = 64 << 20
SETTLED_CPU_FRACTION = 0.1
"""A restarted node has settled (its replicas are open: opening reads every log
once) when it used less than this fraction of a core over half a second."""
DEFAULT_RATE = HostConfig().scrub_bytes_per_s

TARGETS: dict[str, tuple[str, float]] = {
    "scrub_cpu_pct": ("<=", 2.0),
    "scrub_cpu_pct_1kib_batches": ("<=", 2.0),
}


@dataclass(frozen=True)
class ScrubRun:
    idle_cpu_s: float
    scrub_cpu_s: float
    read_bytes: int
    window_s: float

    @property
    def idle_cpu_pct(self) -> float:
        return 100 * self.idle_cpu_s / self.window_s

    @property
    def scrub_cpu_pct(self) -> float:
        return 100 * (self.scrub_cpu_s - self.idle_cpu_s) / self.window_s

    @property
    def read_mib_s(self) -> float:
        return self.read_bytes / 2**20 / self.window_s

    @property
    def cpu_ms_per_mib(self) -> float:
        mib = self.read_bytes / 2**20
        return 1000 * (self.scrub_cpu_s - self.idle_cpu_s) / mib if mib else 0.0


def read_chars(pid: int) -> int:
    """Bytes process ``pid`` has read with read-like calls so far (``rchar``)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as file:
        for line in file:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError(f"no rchar in /proc/{pid}/io")


def drop_page_cache(data_dir: Path) -> None:
    """Ask the kernel to drop the segment files' clean pages (no privilege needed)."""
    for path in data_dir.glob("partitions/*/*/*.log"):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def write_config(root: Path, name: str, scrub_bytes_per_s: int) -> Path:
    path = root / f"{name}.toml"
    path.write_text(
        f"[host]\nscrub_bytes_per_s = {scrub_bytes_per_s}\nscrub_pass_min_ms = 0\n"
        f"[log]\nsegment_bytes_max = {SEGMENT_BYTES}\n"
    )
    return path


def fill(bootstrap: str, data_mib: int, batch_records: int) -> None:
    """``data_mib`` MiB of batches of ``batch_records`` records, spread over the
    topic's partitions."""
    batch = encode_batch([os.urandom(RECORD_BYTES)] * batch_records)
    per_request = max(1, REQUEST_BYTES // len(batch))
    with Client([bootstrap], timeout_s=30) as client:
        client.create_topic(TOPIC, PARTITIONS, 1)
        written = 0
        partition = 0
        while written < data_mib << 20:
            client.produce(TOPIC, partition, [batch] * per_request, timeout_s=60)
            written += per_request * len(batch)
            partition = (partition + 1) % PARTITIONS


def restart(cluster: ProcessCluster, node: NodeProcess, config: Path) -> int:
    """Start ``node`` again with ``config``; its pid once it has settled."""
    if node.running:
        cluster.terminate(node)
    node.extra_args = ["--config", str(config)]
    cluster.start(node)
    cluster.wait_ready(node, timeout_s=120)
    assert node.process is not None
    pid = node.process.pid

    def settled() -> bool:
        used_s, _ = cpu_window(pid, 0.5)
        return used_s < 0.5 * SETTLED_CPU_FRACTION

    wait_for(settled, 120, "the restarted node to settle")
    return pid


def cpu_window(pid: int, window_s: float) -> tuple[float, int]:
    """CPU seconds and bytes read by ``pid`` over ``window_s`` seconds from now."""
    cpu_before, read_before = cpu_s(pid), read_chars(pid)
    time.sleep(window_s)
    return cpu_s(pid) - cpu_before, read_chars(pid) - read_before


def scrub_cpu_run(root: Path, data_mib: int, window_s: float, batch_records: int) -> ScrubRun:
    """One node holding ``data_mib`` MiB in batches of ``batch_records`` records of
    1 KiB: its CPU over ``window_s`` idle, then scrubbing at the default rate (see
    the module docstring)."""
    idle_config = write_config(root, "idle", 0)
    scrub_config = write_config(root, "scrub", DEFAULT_RATE)
    with ProcessCluster(root / "cluster", fsync=False) as cluster:
        node = cluster.add_node(bootstrap=True, extra_args=["--config", str(idle_config)])
        cluster.wait_ready(node)
        fill(node.grpc, data_mib, batch_records)
        pid = restart(cluster, node, idle_config)
        idle_cpu_s, _ = cpu_window(pid, window_s)
        cluster.terminate(node)
        drop_page_cache(node.data_dir)
        pid = restart(cluster, node, scrub_config)
        scrub_cpu_s, read_bytes = cpu_window(pid, window_s)
        if read_bytes < DEFAULT_RATE * window_s / 20:  # even 1 KiB batches read 1/5 of it
            raise RuntimeError(f"the node does not seem to scrub; see {node.log_path}")
        if "damage found" in node.log_path.read_text(errors="replace"):
            raise RuntimeError(f"the scrubber found damage in fresh data; see {node.log_path}")
    return ScrubRun(idle_cpu_s, scrub_cpu_s, read_bytes, window_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="less data, shorter windows")
    parser.add_argument("--repeat", type=int, help="runs (median; default 3, --quick 1)")
    parser.add_argument("--data-mib", type=int, help="MiB the node holds (1024; --quick 256)")
    parser.add_argument("--window-s", type=float, help="seconds measured (20; --quick 5)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    data_mib = args.data_mib or (256 if args.quick else 1024)
    window_s = args.window_s or (5.0 if args.quick else 20.0)
    if repeat < 1 or data_mib < 1 or window_s <= 0:
        parser.error("--repeat, --data-mib and --window-s must be positive")

    loaded = load_average()
    results: dict[str, float] = {}
    runs_of: dict[str, list[float]] = {}
    for suffix, batch_records in BATCH_RECORDS.items():
        runs = []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="laminar-scrub-bench-") as root:
                runs.append(scrub_cpu_run(Path(root), data_mib, window_s, batch_records))
        figures = {
            "scrub_cpu_pct": [r.scrub_cpu_pct for r in runs],
            "scrub_read_mib_s": [r.read_mib_s for r in runs],
            "idle_cpu_pct": [r.idle_cpu_pct for r in runs],
            "scrub_cpu_ms_per_mib": [r.cpu_ms_per_mib for r in runs],
        }
        for name, values in figures.items():
            results[name + suffix] = statistics.median(values)
            runs_of[name + suffix] = values
    notes = [
        f"node: {data_mib:,} MiB in {PARTITIONS} partitions, scrub_bytes_per_s "
        f"{DEFAULT_RATE / 2**20:g} MiB/s, windows of {window_s:g} s, {repeat} run(s); "
        f"a full pass over 1 TiB at that rate takes {2**40 / DEFAULT_RATE / 3600:.1f} h",
        machine_note(loaded),
    ]
    missed = missed_targets(results, TARGETS, unmeasured=True)
    print_report(results, missed=missed, runs=runs_of, notes=notes)


if __name__ == "__main__":
    run_main(main)
