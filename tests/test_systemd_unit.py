"""``deploy/systemd/laminar@.service``: what the unit promises (hardening, limits, a
stop timeout above the node's own shutdown bounds), and ``systemd-analyze verify``
and ``security`` on it (skipped where systemd-analyze is missing: Debian's package
``systemd``; ``.ci/run`` installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from laminar.server.config import NodeConfig, build_config

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "systemd"
UNIT = DEPLOY / "laminar@.service"
PROGRAM = "/opt/laminar/bin/laminar"
EXPOSURE_MAX = 2.0
"""``systemd-analyze security``'s exposure, 0 (best) to 10; 1.4 when written."""


def settings() -> dict[str, list[str]]:
    """``[Section]Key`` -> every value given (a key may repeat)."""
    found: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        found.setdefault(f"{section}{key}", []).append(value)
    return found


def one(key: str) -> str:
    (value,) = settings()[f"[Service]{key}"]
    return value


def test_unit_is_hardened_with_the_data_dir_its_only_writable_path() -> None:
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "PrivateDevices": "yes",
        "Restart": "on-failure",
        "CapabilityBoundingSet": "",
        "User": "laminar",
    }.items():
        assert one(key) == value, key
    command = one("ExecStart").split()
    assert command[:3] == [PROGRAM, "node", "start"]
    data_dir = command[command.index("--data-dir") + 1]
    assert data_dir == "/var/lib/laminar/%i"
    assert one("ReadWritePaths") == data_dir
    assert f"/var/lib/{one('StateDirectory')}" == data_dir
    assert "--config" in command


def test_unit_limits_cover_a_node() -> None:
    soft, _, hard = one("LimitNOFILE").partition(":")
    assert int(soft) >= 65_536 and int(hard or soft) >= int(soft)
    stop_s = int(one("TimeoutStopSec"))
    for preset in (NodeConfig.local("data"), NodeConfig.lan("data")):
        bounds_s = (preset.handover_timeout_ms + preset.shutdown_timeout_ms) / 1000
        assert stop_s > bounds_s, preset.preset
        # The comment above the setting says the figures: keep it true.
        text = UNIT.read_text(encoding="utf-8")
        assert f"handover_timeout_ms, {preset.handover_timeout_ms // 1000} s" in text
        assert f"shutdown_timeout_ms, {preset.shutdown_timeout_ms // 1000} s" in text


def test_the_readmes_node_file_is_a_valid_config() -> None:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    config = build_config({"data_dir": "/var/lib/laminar/node1"}, tomllib.loads(block))
    assert (config.preset, config.grpc, config.bootstrap) == ("lan", "10.0.0.1:7100", True)
    assert len(config.seeds) == 2


@pytest.fixture
def instance(tmp_path: Path) -> Path:
    """The template as instance ``node1``, its program an existing ``laminar`` (verify
    checks that ExecStart's program exists): the one next to this interpreter."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is missing (Debian package systemd)")
    program = Path(sys.executable).with_name("laminar")
    assert program.is_file(), "laminar's entry point is not installed next to python"
    path = tmp_path / "laminar@node1.service"
    path.write_text(UNIT.read_text(encoding="utf-8").replace(PROGRAM, str(program)))
    return path


def analyze(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_systemd_analyze_verify_finds_nothing(instance: Path) -> None:
    result = analyze("verify", instance.name, cwd=instance.parent)
    # verify exits 0 on an unknown key or a bad value too: it only warns on stderr.
    assert (result.returncode, result.stderr.strip()) == (0, "")


def test_systemd_analyze_security_rates_it_ok(instance: Path) -> None:
    result = analyze("security", "--offline=yes", instance.name, cwd=instance.parent)
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", result.stdout)
    assert match is not None, result.stdout[-2000:]
    assert float(match.group(1)) <= EXPOSURE_MAX, result.stdout
