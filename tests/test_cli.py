from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest

from laminar import cli
from tests.client.fake_server import FakeCluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(3)
    try:
        yield fake
    finally:
        fake.stop()


def run(cluster: FakeCluster | None, *argv: str, bootstrap: str | None = None) -> int:
    address = bootstrap or (cluster.bootstrap if cluster else "127.0.0.1:1")
    return cli.main(["--bootstrap", address, "--timeout", "5", *argv])


def test_help_documents_every_option(capsys) -> None:
    assert cli.main(["--help"]) == 0
    top = capsys.readouterr().out
    for word in ("--bootstrap", "--timeout", "topic", "produce", "consume", "cluster"):
        assert word in top
    assert cli.main(["produce", "--help"]) == 0
    produce = capsys.readouterr().out
    for option in ("--partition", "--key-partitioning", "--file", "--acks", "--batch-size"):
        assert option in produce
    assert cli.main(["consume", "--help"]) == 0
    consume = capsys.readouterr().out
    for option in ("--partition", "--from", "--follow", "--max", "--format"):
        assert option in consume
    assert cli.main(["topic", "create", "--help"]) == 0
    create = capsys.readouterr().out
    for option in ("--partitions", "--replication-factor", "--retention-bytes", "--retention-ms"):
        assert option in create


def test_bootstrap_default_from_environment(monkeypatch) -> None:
    monkeypatch.setenv(cli.BOOTSTRAP_ENV, "10.1.1.1:9")
    assert cli.build_parser().parse_args(["topic", "list"]).bootstrap == "10.1.1.1:9"
    monkeypatch.delenv(cli.BOOTSTRAP_ENV)
    assert cli.build_parser().parse_args(["topic", "list"]).bootstrap == cli.DEFAULT_BOOTSTRAP


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["topic"],
        ["topic", "create", "x"],
        ["topic", "create", "x", "--partitions", "0", "--replication-factor", "1"],
        ["produce", "t", "--partition", "1", "--key-partitioning"],
        ["consume", "t", "--format", "xml"],
        ["cluster", "set-weight", "n1", "-1"],
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert "Traceback" not in err


def test_topic_lifecycle(cluster: FakeCluster, capsys) -> None:
    assert (
        run(
            cluster,
            "topic",
            "create",
            "orders",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
            "--retention-ms",
            "60000",
        )
        == 0
    )
    assert "created topic orders" in capsys.readouterr().out
    assert run(cluster, "topic", "list") == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["TOPIC", "PARTITIONS", "RF"]
    assert listing[1].split() == ["orders", "2", "3"]
    assert run(cluster, "topic", "describe", "orders") == 0
    described = capsys.readouterr().out
    assert "retention_ms=60000" in described
    assert "retention_bytes=unlimited" in described
    assert "n0,n1,n2" in described
    assert run(cluster, "topic", "delete", "orders") == 0
    assert "deleted topic orders" in capsys.readouterr().out
    assert run(cluster, "topic", "list") == 0
    assert "orders" not in capsys.readouterr().out


def test_errors_are_one_line_without_traceback(cluster: FakeCluster, capsys) -> None:
    assert (
        run(cluster, "topic", "create", "t", "--partitions", "1", "--replication-factor", "1") == 0
    )
    capsys.readouterr()
    assert (
        run(cluster, "topic", "create", "t", "--partitions", "1", "--replication-factor", "1") == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("laminar: error: ") and "already exists" in err
    assert err.count("\n") == 1
    assert run(cluster, "topic", "describe", "missing") == 1
    assert "unknown topic" in capsys.readouterr().err
    assert run(cluster, "consume", "missing") == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert run(cluster, "produce", "t", "--file", "/nonexistent/file") == 1
    assert "No such file" in capsys.readouterr().err


def test_unreachable_cluster_is_an_error(capsys) -> None:
    assert cli.main(["--bootstrap", "127.0.0.1:1", "--timeout", "0.5", "topic", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("laminar: error: ") and err.count("\n") == 1


def test_produce_from_file_and_consume(cluster: FakeCluster, capsys, tmp_path) -> None:
    cluster.add_topic("t", partitions=2)
    source = tmp_path / "lines.txt"
    source.write_text("one\ntwo\nthree\n", encoding="utf-8")
    assert (
        run(cluster, "produce", "t", "--partition", "1", "--file", str(source), "--batch-size", "2")
        == 0
    )
    assert "produced 3 records to t/1 at offsets 0..2" in capsys.readouterr().out
    assert len(cluster.partition("t", 1).batches) == 2
    assert run(cluster, "consume", "t", "--partition", "1") == 0
    assert capsys.readouterr().out.splitlines() == ["one", "two", "three"]
    assert (
        run(
            cluster,
            "consume",
            "t",
            "--partition",
            "1",
            "--from",
            "1",
            "--max",
            "1",
            "--format",
            "json",
        )
        == 0
    )
    (line,) = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert (record["offset"], record["value"], record["key"]) == (1, "two", None)
    assert run(cluster, "consume", "t", "--partition", "1", "--from", "latest") == 0
    assert capsys.readouterr().out == ""
    assert run(cluster, "consume", "t", "--partition", "1", "--from", "soon") == 1
    assert "--from" in capsys.readouterr().err


def test_produce_from_stdin_with_key_partitioning(
    cluster: FakeCluster, capsys, monkeypatch
) -> None:
    cluster.add_topic("t", partitions=4)
    lines = "".join(f"k{i}\tv{i}\n" for i in range(20))
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert run(cluster, "produce", "t", "--key-partitioning") == 0
    out = capsys.readouterr().out
    assert out.count("produced") >= 2
    total = sum(cluster.partition("t", p).end_offset for p in range(4))
    assert total == 20
    for partition in range(4):
        assert run(cluster, "consume", "t", "--partition", str(partition), "--format", "json") == 0
        for line in capsys.readouterr().out.splitlines():
            record = json.loads(line)
            assert record["value"] == "v" + record["key"][1:]


def test_cluster_status_and_node_updates(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t", partitions=2)
    assert run(cluster, "cluster", "status") == 0
    out = capsys.readouterr().out
    assert "cluster fake" in out
    assert "z1" in out and cluster.address_of("n2") in out
    assert "1 of 2 partitions under-replicated" in out
    assert run(cluster, "cluster", "drain", "n1") == 0
    assert "node n1: weight=0" in capsys.readouterr().out
    assert cluster.members["n1"].weight == 0.0
    assert cluster.calls_to("UpdateNode") == ["n1"]
    assert run(cluster, "cluster", "set-weight", cluster.address_of("n2"), "2.5") == 0
    assert cluster.members["n2"].weight == 2.5
    assert run(cluster, "cluster", "set-zone", "n0", "rack-9") == 0
    assert cluster.members["n0"].zone == "rack-9"
    capsys.readouterr()
    assert run(cluster, "cluster", "drain", "n9") == 1
    assert "unknown node 'n9'" in capsys.readouterr().err
