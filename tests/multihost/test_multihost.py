"""Multi-host tier (marker ``multihost``; root and ``ip`` needed; run from ``.ci/run``).

Nodes on hosts of their own: each in a network namespace with its own address on a
bridge, all inside namespaces this test creates and deletes (nothing touches the
machine's network), listening on ``0.0.0.0`` and advertising their host's name or
address. The run itself is :mod:`laminar.testing.multihost`, started in the
client's namespace; this file builds the network, starts it, prints its report and
asserts on it.

    .venv/bin/python -m pytest -q -s -m multihost tests/multihost    # about a minute
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from laminar.testing.multihost import (
    NODES,
    PARTITIONS,
    RECORDS_PER_ROUND,
    HostNetwork,
    host_address,
    hosts_text,
    multihost_unsupported_reason,
)

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(600)]

RUN_TIMEOUT_S = 420


def test_nodes_on_their_own_hosts_advertise_names_and_survive_moving(tmp_path: Path) -> None:
    reason = multihost_unsupported_reason()
    if reason is not None:
        pytest.skip(reason)
    prefix = f"laminar-mh-{os.getpid()}"
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(hosts_text({i: host_address(i) for i in range(NODES + 1)}))
    report_path = tmp_path / "report.json"
    with HostNetwork(prefix, NODES + 1) as network:
        client_host = network.hosts[NODES]
        command = client_host.command(
            [
                "sh",
                "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"',
                str(hosts_file),
                sys.executable,
                "-m",
                "laminar.testing.multihost",
                "--prefix",
                prefix,
                "--root",
                str(tmp_path / "run"),
                "--hosts-file",
                str(hosts_file),
                "--report",
                str(report_path),
            ]
        )
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )
        print(result.stdout[-20_000:], result.stderr[-20_000:], sep="\n")
        assert result.returncode == 0, result.stderr[-5000:]
    for name in (prefix, *(f"{prefix}-h{i}" for i in range(NODES + 1))):
        assert not Path(f"/run/netns/{name}").exists(), f"namespace {name} left behind"
    report = json.loads(report_path.read_text())
    print(json.dumps(report, indent=1))
    assert report["acknowledged"] == 4 * RECORDS_PER_ROUND
    for key in ("reads_first", "node2_reads", "node1_reads", "reads_last"):
        assert sorted(report[key]) == [f"node{i}" for i in range(NODES)]
    assert report["members"] == {
        "node0": ["n0.laminar.test:7100", "n0.laminar.test:7000", "alive"],
        "node1": ["10.77.0.21:7100", "10.77.0.21:7000", "alive"],  # moved, advertised anew
        "node2": ["n2.laminar.test:7100", "n2.laminar.test:7000", "alive"],  # moved, same name
    }
    assert len(report["leaders_after"]) == PARTITIONS
