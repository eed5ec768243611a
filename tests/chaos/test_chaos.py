"""Chaos tests (design §9, tier 5; marker ``chaos``; root, ``ip`` and ``nft`` needed).

Each test makes its own network namespace ``laminar-chaos-<pid>``, runs everything
inside it with ``ip netns exec``, and in a ``finally`` kills whatever is left in it
and deletes it. The run itself is :mod:`laminar.testing.chaos`; this file starts it,
prints its report and asserts on it.

    .venv/bin/python -m pytest -s -m chaos tests/chaos                  # about 90 s
    .venv/bin/python -m pytest -s -m chaos tests/chaos --duration 600   # a longer run
    .venv/bin/python -m pytest -s -m chaos tests/chaos --chaos-seed N   # replay a plan
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from laminar.testing.chaos import NetworkNamespace, chaos_unsupported_reason

from .conftest import chaos_duration_s, run_timeout_s

pytestmark = pytest.mark.chaos

EXIT_TAIL_LINES = 150
"""Lines of a failed run's output repeated in the assertion message."""


@pytest.fixture
def namespace() -> NetworkNamespace:
    reason = chaos_unsupported_reason()
    if reason is not None:
        pytest.skip(reason)
    return NetworkNamespace(f"laminar-chaos-{os.getpid()}")


def test_cuts_drop_node_traffic_both_ways_and_spare_the_client(
    namespace: NetworkNamespace,
) -> None:
    """The firewall rules as the run uses them, on UDP sockets bound like nodes'."""
    script = textwrap.dedent(
        """
        import socket
        import sys
        from laminar.testing.chaos import Cut, Firewall

        def bound(host):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((host, 7000))
            sock.settimeout(0.3)
            return sock

        def passes(sender, receiver):
            sender.sendto(b"x", receiver.getsockname())
            try:
                receiver.recv(16)
                return True
            except TimeoutError:
                return False

        a, b, c = bound("127.0.0.11"), bound("127.0.0.12"), bound("127.0.0.13")
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind(("127.0.0.1", 0))
        firewall = Firewall(sys.argv[1])
        firewall.apply(Cut(("127.0.0.11",), ("127.0.0.12",)))
        print(passes(a, b), passes(b, a), passes(a, c), passes(c, b), passes(client, b))
        firewall.apply(Cut(("127.0.0.11",), ("127.0.0.12", "127.0.0.13"), ("127.0.0.11",)))
        print(passes(client, a), passes(b, c))
        firewall.apply(None)
        print(passes(a, b), passes(b, a))
        """
    )
    with namespace:
        result = subprocess.run(
            namespace.command([sys.executable, "-c", script, namespace.name]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    cut, isolated, healed = result.stdout.splitlines()
    assert cut == "False False True True True"
    # The client's source address is 127.0.0.1, which the closed ports refuse.
    assert isolated == "False True"
    assert healed == "True True"


def test_faults_lose_duplicate_misplace_and_diverge_nothing(
    namespace: NetworkNamespace, tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    duration_s = chaos_duration_s(pytestconfig)
    seed = pytestconfig.getoption("--chaos-seed", default=None)
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    replay = f"pytest -s -m chaos tests/chaos --chaos-seed {seed} --duration {duration_s:g}"
    print(f"\nchaos seed={seed} (replay the fault plan: {replay})", flush=True)
    report_path = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "laminar.testing.chaos",
        "--seed", str(seed), "--duration", str(duration_s),
        "--root", str(tmp_path / "cluster"), "--report", str(report_path),
        "--netns", namespace.name,
    ]  # fmt: skip
    with namespace:
        returncode, output = run_echoed(namespace.command(command), run_timeout_s(duration_s))
    failed = f"the chaos run failed (seed {seed}); replay: {replay}\n"
    assert returncode == 0, failed + "".join(output)
    report = json.loads(report_path.read_text(encoding="utf-8"))
    print(summary(report), flush=True)
    findings = report["findings"]
    assert not report["writer_crashes"], report["writer_crashes"]
    assert report["acks"] > 0
    assert report["secure"], "the run is secured: TLS, encrypted gossip, authorization"
    assert report["faults"], "no fault was applied"
    assert report["settled"], f"seed {seed}: {report['notes']}"
    assert not report["unreadable"], f"seed {seed}: replicas that failed the final read"
    assert not findings["counts"], f"seed {seed}: {json.dumps(findings, indent=1)}"
    # Every damaged replica was found at its node's restart and set aside.
    assert set(report["damaged"]) <= set(report["quarantined"]), report["quarantined"]


def run_echoed(command: list[str], timeout_s: float) -> tuple[int, list[str]]:
    """Run ``command``, echoing its output as it comes; its status and last lines."""
    deadline_s = time.monotonic() + timeout_s
    tail: collections.deque[str] = collections.deque(maxlen=EXIT_TAIL_LINES)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:  # ends when the run exits (or is killed)
            print(line, end="", flush=True)
            tail.append(line)
            if time.monotonic() > deadline_s:
                process.kill()
                tail.append(f"killed after {timeout_s:.0f} s\n")
        return process.wait(), list(tail)


def summary(report: dict[str, Any]) -> str:
    faults = report["faults"]
    lines = [
        f"seed={report['seed']} workload_s={report['workload_s']} acks={report['acks']} "
        f"uncertain_values={report['uncertain_values']} sends_failed={report['sends_failed']}",
        *(f"  failed send: {line}" for line in report["failed_sends"]),
        f"faults ({len(faults)}):",
        *(
            f"  {f['started_s']:7.1f}-{f['healed_s']:7.1f} s  {f['kind']:<8} {f['target']:<24}"
            f" longest write gap {f['longest_write_gap_s']:5.2f} s"
            + ("" if f["failover_s"] is None else f", new leader after {f['failover_s']:.2f} s")
            for f in faults
        ),
        f"longest write gap per partition, s (gap, from): {report['write_gap_s_by_partition']}",
        f"slowest acknowledged send per partition, s (took, sent at): "
        f"{report['slowest_send_s_by_partition']}",
        f"longest write gap per fault kind, s: {report['write_gap_s_by_fault_kind']}",
        f"replica high watermarks: {report['replicas_read']}",
        "connections to gossip/peer ports from an unbound source (max seen, by port): "
        f"{report['unattributed_peer_connections_max']}",
        f"unreadable={report['unreadable']} peak_rss_mb(run)={report['peak_rss_mb']}",
        f"damaged={report['damaged']} quarantined={report['quarantined']}",
        f"settled={report['settled']} findings={report['findings']}",
    ]
    return "\n".join(lines)
