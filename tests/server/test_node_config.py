"""Unit tests of node configuration: options over TOML over presets, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.cli import main
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


def test_advertised_addresses_default_to_the_listen_addresses() -> None:
    config = build_config({"data_dir": "d", "grpc": "10.0.0.9:7100"})
    assert config.advertised_grpc == "10.0.0.9:7100"
    assert config.advertised_gossip == config.gossip == "127.0.0.1:7000"
    assert config.advertised_peer == config.peer


def test_wildcard_listen_with_advertised_addresses_options_over_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'data_dir = "/data"\ngossip = "0.0.0.0:7000"\ngrpc = "[::]:7100"\n'
        'peer = "0.0.0.0:7200"\nadvertise_gossip = "node3.example:7000"\n'
        'advertise_grpc = "node3.example:7100"\nadvertise_peer = "node3.example:7200"\n'
        'seeds = ["node1.example:7000", "[2001:db8::1]:7000"]\n'
    )
    config = build_config({"advertise_grpc": "[2001:db8::3]:7100"}, load_toml(str(path)))
    assert config.grpc == "[::]:7100" and config.advertised_grpc == "[2001:db8::3]:7100"
    assert config.gossip == "0.0.0.0:7000"
    assert config.advertised_gossip == "node3.example:7000"
    assert config.advertised_peer == "node3.example:7200"
    assert config.seeds == ("node1.example:7000", "[2001:db8::1]:7000")


def test_wildcard_error_names_the_advertise_option() -> None:
    with pytest.raises(ConfigError, match="--advertise-peer"):
        build_config({"data_dir": "d", "peer": "0.0.0.0:7200"})


def test_node_start_help_documents_advertised_addresses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["node", "start", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in ("gossip", "grpc", "peer"):
        assert f"--advertise-{name} HOST:PORT" in out
    assert "needs --advertise-" in out and "a host name or an address" in out


def test_seeds_from_a_comma_list() -> None:
    config = build_config({"data_dir": "d", "seeds": "127.0.0.1:1, 127.0.0.2:2"})
    assert config.seeds == ("127.0.0.1:1", "127.0.0.2:2")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "data-dir"),
        ({"data_dir": "d", "grpc": "nohost"}, "host:port"),
        ({"data_dir": "d", "grpc": "0.0.0.0:7100"}, "wildcard"),
        ({"data_dir": "d", "gossip": "h:70000"}, r"port must be a number in \[1, 65535\]"),
        ({"data_dir": "d", "grpc": "::1:7100"}, "brackets"),
        ({"data_dir": "d", "grpc": "0.0.0.0:7100", "advertise_grpc": "[::]:7100"}, "wildcard"),
        ({"data_dir": "d", "advertise_peer": "bad host:7200"}, "not an IPv4 address"),
        ({"data_dir": "d", "seeds": "0.0.0.0:7000"}, "seed .* wildcard"),
        (
            {
                "data_dir": "d",
                "advertise_peer": "n1.example:7100",
                "advertise_grpc": "n1.example:7100",
            },
            "advertised .* must differ",
        ),
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


def test_presets_set_the_two_graces_and_every_part() -> None:
    local = build_config({"data_dir": "d"})
    lan = build_config({"data_dir": "d", "preset": "lan"})
    assert local.replica_move_grace_ms == 10_000
    assert lan.replica_move_grace_ms == 300_000  # replicas move after minutes on a LAN
    assert lan.replica == ReplicaConfig.lan() and local.replica == ReplicaConfig.local()
    # Leadership moves within about an election timeout in both.
    assert lan.replica.election_timeout_max_ms < lan.replica_move_grace_ms / 100
    assert local.transport.connect_timeout_ms < lan.transport.connect_timeout_ms


def test_tables_configure_the_parts_of_a_node(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'data_dir = "d"\nreplica_move_grace_ms = 60000\n'
        "[host]\nproduce_calls_max = 7\n[service]\nfetch_wait_ms_max = 5000\n"
        "[transport]\nqueue_max = 9\n[log]\nsegment_bytes_max = 1048576\n"
    )
    config = build_config({}, load_toml(str(path)))
    assert config.replica_move_grace_ms == 60_000
    assert config.host.produce_calls_max == 7
    assert config.service.fetch_wait_ms_max == 5000
    assert config.transport.queue_max == 9
    assert config.log.segment_bytes_max == 1 << 20


def test_disk_watermark_options_override_the_host_table(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'data_dir = "d"\n[host]\ndisk_free_bytes_min = 1000\ndisk_free_percent_min = 5\n'
    )
    from_file = build_config({}, load_toml(str(path)))
    assert from_file.host.disk_free_bytes_min == 1000
    assert from_file.host.disk_free_percent_min == 5.0  # an integer in TOML is fine
    options = {"disk_free_bytes_min": 8 << 20, "disk_free_percent_min": None}
    config = build_config(options, load_toml(str(path)))
    assert config.host.disk_free_bytes_min == 8 << 20
    assert config.host.disk_free_percent_min == 5.0
    with pytest.raises(ConfigError, match="disk_free_percent_min"):
        build_config({"data_dir": "d", "disk_free_percent_min": 100.0})


def test_node_start_help_documents_the_disk_watermark(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "start", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--disk-free-bytes-min" in text and "--disk-free-percent-min" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('data_dir = "d"\n[host]\nproduce_calls_max = 0', "produce_calls_max"),
        ('data_dir = "d"\n[host]\ndisk_free_bytes_min = -1', "disk_free_bytes_min"),
        ('data_dir = "d"\n[host]\ndisk_check_ms = 0', "disk_check_ms"),
        ('data_dir = "d"\n[service]\ncalls_max = 0', "calls_max"),
        ('data_dir = "d"\n[service]\nbogus = 1', "unknown key"),
        ('data_dir = "d"\nreplica_move_grace_ms = -1', "replica_move_grace_ms"),
    ],
)
def test_bad_tables(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        build_config({}, load_toml(str(path)))
