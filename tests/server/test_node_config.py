"""Unit tests of node configuration: options over TOML over presets, clear errors."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from laminar.cli import main
from laminar.errors import ConfigError
from laminar.replica.config import ReplicaConfig
from laminar.server.config import NOT_IN_FILE, TABLES, NodeConfig, build_config, load_toml
from laminar.server.config_file import DATA_DIR_EXAMPLE, defaults_toml, field_docs
from laminar.server.transport import TransportConfig


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


def test_the_default_preset_is_lan() -> None:
    # An operator who starts a node without --preset gets production timings, not
    # the local preset's (fast, for tests).
    config = build_config({"data_dir": "d"})
    assert config.preset == "lan"
    assert config == NodeConfig.lan("d")


def test_node_start_help_names_the_default_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "start", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default lan" in text and "default local" not in text


def test_presets_set_the_two_graces_and_every_part() -> None:
    local = build_config({"data_dir": "d", "preset": "local"})
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


def test_metrics_option_sets_the_metrics_table_over_the_file(tmp_path: Path) -> None:
    assert not build_config({"data_dir": "d"}).metrics.enabled  # off by default
    path = tmp_path / "node.toml"
    path.write_text(
        'data_dir = "d"\n[metrics]\naddress = "127.0.0.1:9000"\npartition_series = "leaders"\n'
    )
    from_file = build_config({}, load_toml(str(path)))
    assert from_file.metrics.address == "127.0.0.1:9000"
    assert from_file.metrics.partition_series == "leaders"
    config = build_config({"metrics": "127.0.0.1:9100"}, load_toml(str(path)))
    assert config.metrics.address == "127.0.0.1:9100"
    assert config.metrics.partition_series == "leaders"
    with pytest.raises(ConfigError, match=r"metrics address .* must differ"):
        build_config({"data_dir": "d", "grpc": "127.0.0.1:7100", "metrics": "127.0.0.1:7100"})
    with pytest.raises(ConfigError, match=r"\[metrics\] partition_series = \"some\""):
        build_config({"data_dir": "d"}, {"metrics": {"partition_series": "some"}})


def test_node_start_help_documents_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "start", "--help"]) == 0
    assert "--metrics HOST:PORT" in capsys.readouterr().out
    assert main(["node", "config", "--defaults"]) == 0
    text = capsys.readouterr().out
    assert "\n[metrics]\n" in text and 'partition_series = "none"' in text
    assert "6,000 series" in text  # the series count per setting is documented


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


@pytest.mark.parametrize("preset", ["lan", "local"])
def test_defaults_file_parses_back_to_the_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], preset: str
) -> None:
    assert main(["node", "config", "--defaults", "--preset", preset]) == 0
    text = capsys.readouterr().out
    values = tomllib.loads(text)
    expected = build_config({"data_dir": DATA_DIR_EXAMPLE, "preset": preset})
    assert build_config({}, values) == expected
    path = tmp_path / "node.toml"
    path.write_text(text)
    assert main(["node", "config", "--check", str(path)]) == 0
    assert f"valid, preset {preset}; 0 settings differ" in capsys.readouterr().out


def _fields(config: object, table: str | None) -> list[tuple[str | None, str, object]]:
    found: list[tuple[str | None, str, object]] = []
    for item in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value):
            found += _fields(value, f"{table}.{item.name}" if table else item.name)
        else:
            found.append((table, item.name, value))
    return found


def test_defaults_list_every_setting_with_its_documentation() -> None:
    config = NodeConfig.lan(DATA_DIR_EXAMPLE)
    text = defaults_toml("lan")
    sections = {None: text.split("\n[", 1)[0]}
    for section in text.split("\n[")[1:]:
        header, body = section.split("]\n", 1)
        sections[header] = body
    settings = _fields(config, None)
    assert len(settings) > 100
    for table, name, value in settings:
        body = sections[table]
        if name in NOT_IN_FILE.get(table or "", {}):
            assert f"# {name}: not set here" in body
        elif value is None:
            assert f"# {name} is not set by default." in body
        else:
            assert f"\n{name} = " in f"\n{body}", (table, name)
    # Every field is documented, in its attribute docstring or its class docstring.
    classes = {type(config)} | {type(getattr(config, t)) for t in TABLES}
    classes |= {type(config.log.limits), type(config.transport.limits)}
    for cls in classes:
        docs = field_docs(cls)
        for item in dataclasses.fields(cls):
            if not dataclasses.is_dataclass(getattr(config, item.name, None)):
                assert docs.get(item.name), f"{cls.__name__}.{item.name} has no documentation"


def test_field_docs_reads_attribute_and_class_docstrings() -> None:
    assert field_docs(NodeConfig)["fsync"].startswith("Fsync appended batches")
    transport = field_docs(TransportConfig)
    assert transport["backoff_initial_ms"] == transport["backoff_max_ms"]
    assert transport["queue_max"].startswith("Frames waiting per destination")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[host]\nrecovery_bytes_per_s = -5\n",
            "[host] recovery_bytes_per_s = -5: recovery_bytes_per_s must be >= 0",
        ),
        (
            "[replica]\nheartbeat_interval_ms = 1500\n",
            "[replica] heartbeat_interval_ms = 1_500: heartbeat_interval_ms must be below "
            "election_timeout_min_ms (election_timeout_min_ms is 1_000)",
        ),
        (
            '[replica]\nheartbeat_interval_ms = "fast"\n',
            '[replica] heartbeat_interval_ms = "fast" has the wrong type: expected an integer',
        ),
        (
            "[replica]\nheartbeat_intervl_ms = 50\n",
            "unknown key 'heartbeat_intervl_ms' in [replica] (did you mean "
            "'heartbeat_interval_ms'?)",
        ),
        (
            "[log.limits]\nrecord_count_max = 0\n",
            "[log.limits] record_count_max = 0: record_count_max must be in (0, ",
        ),
        ("[log]\nretention_ms = 1000\n", "[log] retention_ms cannot be set in the node's file"),
        ("replica_move_grace_ms = -1\n", "replica_move_grace_ms = -1: "),
        ('preset = "fast"\n', 'preset = "fast": must be one of local, lan'),
        ("[host]\nscrub = 1\n[host.x]\n", "unknown key 'scrub' in [host]"),
        ("[service]\nfetch_bytes_max = [1]\n", "[service] fetch_bytes_max = [1] has the wrong"),
    ],
)
def test_check_names_the_table_field_value_and_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "node.toml"
    path.write_text(f'data_dir = "d"\n{text}')
    assert main(["node", "config", "--check", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"laminar node config: {path}: {message}")
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.out == ""


def test_check_lists_what_differs_from_the_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'preset = "lan"\nweight = 2\n[host]\nscrub_bytes_per_s = 0\n'
        "[transport.limits]\nmessages_max = 500\n"
    )
    assert main(["node", "config", "--check", str(path)]) == 0  # data_dir may come later
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{path}: valid, preset lan; 3 settings differ from it",
        "  weight = 2.0 (preset: not set)",
        "  [host] scrub_bytes_per_s = 0 (preset: 16_777_216)",
        "  [transport.limits] messages_max = 500 (preset: 100_000)",
    ]
