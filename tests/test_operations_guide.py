"""docs/operations.md runs as written.

Its ```` ```sh ```` blocks run in order in one ``bash`` (``set -euo pipefail``)
against three real node processes on loopback: ``HOST1..3`` are free 127.0.0.x
addresses, each host's ``LAMINAR_HOME`` a directory under ``tmp_path``, ``PATH``
starts with this Python's ``bin`` (``laminar``, ``python``). A block marked
``hosts=1,2,3`` runs once per host, in a subshell with that host's ``HOST``,
``NODE`` and ``LAMINAR_HOME``. Blocks marked ``sh-norun (reason)`` are skipped;
there are few of them and each says why. The guide's nodes use the ``lan`` preset,
as an operator's would: the guide is about production settings.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar.testing.processes import _free_host_base

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
_BLOCK = re.compile(r"^```(sh-norun|sh)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NORUN_MAX = 5
SCRIPT_TIMEOUT_S = 240  # about 70 s here


@dataclass(frozen=True, slots=True)
class Block:
    kind: str
    info: str
    body: str


def guide_blocks(text: str) -> list[Block]:
    return [Block(m.group(1), m.group(2).strip(), m.group(3)) for m in _BLOCK.finditer(text)]


def guide_script(blocks: list[Block], hosts: dict[int, dict[str, str]]) -> str:
    """The guide's runnable blocks as one bash script."""
    parts = ["set -euo pipefail"]
    for block in blocks:
        if block.kind == "sh-norun":
            continue
        match = re.fullmatch(r"(?:hosts=(\d+(?:,\d+)*))?", block.info)
        assert match is not None, f"unknown block marker {block.info!r}"
        if match.group(1) is None:
            parts.append(block.body)
            continue
        for index in map(int, match.group(1).split(",")):
            exports = [f"export {key}={shlex.quote(value)}" for key, value in hosts[index].items()]
            parts += ["(", *exports, f"echo '## host {index}'", block.body, ")"]
    return "\n".join(parts) + "\n"


def test_the_guide_marks_its_skipped_blocks_with_a_reason() -> None:
    blocks = guide_blocks(GUIDE.read_text())
    skipped = [b for b in blocks if b.kind == "sh-norun"]
    assert len(skipped) <= NORUN_MAX
    for block in skipped:
        assert re.fullmatch(r"\(.{10,}\)", block.info), block.info
    assert sum(b.kind == "sh" for b in blocks) >= 10
    # Every fenced shell block is one of the two kinds (a ```bash block would be skipped).
    assert "```bash" not in GUIDE.read_text() and "```shell" not in GUIDE.read_text()


@pytest.mark.guide  # about 70 s: three nodes with the lan preset, restarted four times
@pytest.mark.timeout(SCRIPT_TIMEOUT_S + 60)  # the script's own timeout reports its output
def test_every_command_of_the_operations_guide_runs(tmp_path: Path) -> None:
    base = _free_host_base()
    hosts = {
        index: {
            "HOST": f"127.0.0.{base + index - 1}",
            "NODE": f"node{index}",
            "LAMINAR_HOME": str(tmp_path / f"host{index}"),
        }
        for index in (1, 2, 3)
    }
    env = {key: value for key, value in os.environ.items() if not key.startswith("LAMINAR_")}
    env |= {f"HOST{index}": host["HOST"] for index, host in hosts.items()}
    env |= {"PATH": f"{Path(sys.executable).parent}:{env['PATH']}", "TMPDIR": str(tmp_path)}
    script = guide_script(guide_blocks(GUIDE.read_text()), hosts)
    (tmp_path / "guide.sh").write_text(script)
    process = subprocess.Popen(
        ["bash", str(tmp_path / "guide.sh")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        output, _ = process.communicate(timeout=SCRIPT_TIMEOUT_S)
        # The guide ends by stopping its nodes: nothing of its session may be left.
        leftover = _group_alive(process.pid)
    except subprocess.TimeoutExpired:
        timed_out, leftover = True, True
        _kill_group(process.pid)
        output, _ = process.communicate()  # what it printed up to where it hung
    finally:
        _kill_group(process.pid)
        process.wait()
    logs = "".join(
        f"\n--- {path}\n{path.read_text()[-3000:]}" for path in tmp_path.glob("host*/node.log")
    )
    assert not timed_out, f"the guide did not end in {SCRIPT_TIMEOUT_S} s:\n{output[-6000:]}{logs}"
    assert process.returncode == 0, f"{output[-6000:]}{logs}"
    assert not leftover, "the guide left processes running"
    assert output.count("valid, preset lan; 6 settings differ") == 3  # the three node.toml
    assert "[host] recovery_bytes_per_s = -5: recovery_bytes_per_s must be >= 0" in output
    assert "exit status 1" in output
    assert "0 of 3 partitions under-replicated" in output
    # Gossip encryption: switched on, then rotated, each `list` ending with one key
    # held by and primary on the three nodes.
    assert output.count("verify incoming on, outgoing on") >= 6
    assert len(re.findall(r"^[A-Za-z0-9+/]{43}=\s+3/3\s+3/3$", output, re.MULTILINE)) == 2


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
