"""Unit tests of node configuration: options over TOML over presets, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.errors import ConfigError
from laminar.replica.config import ReplicaConfig
from laminar.server.config import build_config, load_toml


def test_options_override_file_override_preset(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'data_dir = "/data"\ngrpc = "10.0.0.1:7100"\nseeds = ["10.0.0.2:7000"]\n'
        'preset = "lan"\nweight = 2\n[replica]\nheartbeat_interval_ms = 80\n'
    )
    config = build_config({"grpc": "10.0.0.9:7100", "zone": "eu-1"}, load_toml(str(path)))
    assert config.data_dir == "/data"
    assert config.grpc == "10.0.0.9:7100"
    assert config.seeds == ("10.0.0.2:7000",)
    assert config.weight == 2.0 and config.zone == "eu-1"
    assert config.replica.heartbeat_interval_ms == 80
    assert config.replica.election_timeout_min_ms == ReplicaConfig.lan().election_timeout_min_ms


def test_seeds_from_a_comma_list() -> None:
    config = build_config({"data_dir": "d", "seeds": "127.0.0.1:1, 127.0.0.2:2"})
    assert config.seeds == ("127.0.0.1:1", "127.0.0.2:2")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "data-dir"),
        ({"data_dir": "d", "grpc": "nohost"}, "host:port"),
        ({"data_dir": "d", "grpc": "0.0.0.0:7100"}, "wildcard"),
        ({"data_dir": "d", "gossip": "h:70000"}, "host:port"),
        ({"data_dir": "d", "peer": "h"}, "host:port"),
        ({"data_dir": "d", "peer": "127.0.0.1:7100"}, "must differ"),
        ({"data_dir": "d", "weight": -1.0}, "weight"),
        ({"data_dir": "d", "preset": "fast"}, "preset"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(options)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data_dir = 1", "wrong type"),
        ("nonsense = true", "unknown config key"),
        ('data_dir = "d"\n[replica]\nbogus = 1', "unknown key"),
        ('data_dir = "d"\n[replica]\nheartbeat_interval_ms = "x"', "wrong type"),
        ('data_dir = "d"\n[replica]\nheartbeat_interval_ms = 99999', "replica"),
        ("data_dir = [", "not valid TOML"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        build_config({}, load_toml(str(path)))


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_toml("/nonexistent/laminar.toml")
