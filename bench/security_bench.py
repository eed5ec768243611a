"""Issue 31's figures in one report: ``python -m bench.security_bench [--quick]``.

Runs, one after another, each in a process of its own:

- ``bench.tls_bench``: a plaintext and a TLS 3-node cluster measured alternately in
  one run (``tls_produce_rf3_vs_plain`` >= 0.8, ``tls_produce_p99_vs_plain`` <= 1.3,
  ``tls_fetch_vs_plain`` >= 0.8, ``cert_rotation_failed_rpcs`` 0);
- ``bench.gossip_crypto_bench``: ``gossip_seal_open_us``, sealing and opening one
  1,400-byte gossip packet (AES-256-GCM, the replay rule on);
- ``bench.acl_bench``: ``acl_check_us`` with 10,000 ACLs (<= 5), remembered answers,
  and ``acl_check_uncached_us``, decided from the index each time.

It prints every figure of the three, the targets missed and the figures as one JSON
line (the last line).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench import tls_bench
from bench.report import load_average, machine_note, missed_targets, print_report, run_main

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {**tls_bench.TARGETS, "acl_check_us": ("<=", 5.0)}
PARTS = {
    "tls_bench": (["--repeat", "3"], ["--quick", "--repeat", "1"]),
    "gossip_crypto_bench": ([], ["--packets", "500", "--runs", "3"]),
    "acl_bench": ([], ["--checks", "20000", "--runs", "1"]),
}
"""Each part and its arguments: (a full run, ``--quick``)."""


def run_part(name: str, args: list[str]) -> dict[str, float]:
    """The figures ``bench.<name>`` prints as its last line."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench.{name} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs (a smoke test)")
    args = parser.parse_args()
    loaded = load_average()
    results: dict[str, float] = {}
    for name, (full, quick) in PARTS.items():
        results |= run_part(name, quick if args.quick else full)
    print_report(
        results,
        missed=missed_targets(results, TARGETS, unmeasured=True),
        notes=[machine_note(loaded)],
    )


if __name__ == "__main__":
    run_main(main)
