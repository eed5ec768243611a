from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from laminar_cli import common, progress
from laminar_cli.cluster import cluster_maintenance
from laminar_client import Client, PartitionOffsets, key_partition

from laminar import cli
from laminar.errors import InvalidInputError
from laminar.records import decode_batch, encode_batch
from laminar.testing.processes import free_port
from laminar.v1 import laminar_pb2 as pb
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


def stored(cluster: FakeCluster, topic: str, partition: int) -> list[tuple[bytes | None, bytes]]:
    """The (key, value) of every record the fake holds for topic/partition."""
    records = []
    for batch in cluster.partition(topic, partition).batches:
        decoded = decode_batch(batch)
        records.extend(zip(decoded.keys, decoded.values, strict=True))
    return records


def test_help_documents_every_option(capsys) -> None:
    assert cli.main(["--help"]) == 0
    top = capsys.readouterr().out
    for word in ("--bootstrap", "--timeout", "topic", "produce", "consume", "cluster"):
        assert word in top
    assert cli.main(["produce", "--help"]) == 0
    produce = capsys.readouterr().out
    for option in (
        "--partition",
        "--key-partitioning",
        "--file",
        "--acks",
        "--batch-size",
        "--progress",
        "--no-progress",
    ):
        assert option in produce
    assert "deprecated" in produce and "sticky" in produce
    assert cli.main(["consume", "--help"]) == 0
    consume = capsys.readouterr().out
    for option in (
        "--partition",
        "--from",
        "--follow",
        "--max",
        "--format",
        "--progress",
        "--no-progress",
    ):
        assert option in consume
    assert cli.main(["topic", "create", "--help"]) == 0
    create = capsys.readouterr().out
    for option in ("--partitions", "--replication-factor", "--retention-bytes", "--retention-ms"):
        assert option in create


def test_group_help_documents_every_command_and_option(capsys) -> None:
    assert cli.main(["group", "--help"]) == 0
    group = capsys.readouterr().out
    for action in ("list", "describe", "reset-offsets", "delete"):
        assert action in group
    assert cli.main(["group", "describe", "--help"]) == 0
    assert "--format" in capsys.readouterr().out
    assert cli.main(["group", "reset-offsets", "--help"]) == 0
    reset = capsys.readouterr().out
    for option in ("--to", "--timestamp-ms", "--offset", "--topic", "--dry-run"):
        assert option in reset
    for choice in ("earliest", "latest", "timestamp", "offset"):
        assert choice in reset
    assert cli.main(["group", "reset-offsets", "g", "--to", "offset"]) == 1  # needs --offset
    assert "--offset" in capsys.readouterr().err


def test_bootstrap_default_from_environment(monkeypatch) -> None:
    monkeypatch.setenv(common.BOOTSTRAP_ENV, "10.1.1.1:9")
    assert cli.build_parser().parse_args(["topic", "list"]).bootstrap == "10.1.1.1:9"
    monkeypatch.delenv(common.BOOTSTRAP_ENV)
    assert cli.build_parser().parse_args(["topic", "list"]).bootstrap == common.DEFAULT_BOOTSTRAP


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["topic"],
        ["topic", "create"],
        ["topic", "create", "x", "--partitions", "0", "--replication-factor", "1"],
        ["produce", "t", "--partition", "1", "--key-partitioning"],
        ["consume", "t", "--format", "xml"],
        ["consume", "t", "--partition", "0,x"],
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
    assert "  retention_ms=60000 (topic)" in described
    assert "  retention_bytes=unlimited (cluster default)" in described
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
    captured = capsys.readouterr()
    assert "produced 3 records to t/1 at offsets 0..2" in captured.out
    # --batch-size is deprecated: the producer batches by bytes and time (one batch here).
    assert captured.err == (
        "laminar: warning: --batch-size is deprecated and ignored: the producer batches "
        "by bytes and time\n"
    )
    assert len(cluster.partition("t", 1).batches) == 1
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


def test_cluster_maintenance_enter_exit_and_status(cluster: FakeCluster, capsys) -> None:
    assert run(cluster, "cluster", "maintenance", "enter", cluster.address_of("n1")) == 0
    assert "node n1: in maintenance (in maintenance: n1)" in capsys.readouterr().out
    assert cluster.maintenance == ["n1"]
    # A node gossip no longer knows may still be taken out by its id.
    assert run(cluster, "cluster", "maintenance", "enter", "gone") == 0
    capsys.readouterr()
    assert run(cluster, "cluster", "status") == 0
    assert "in maintenance: n1, gone (leads nothing;" in capsys.readouterr().out
    assert run(cluster, "cluster", "maintenance", "exit", "n1") == 0
    assert "node n1: out of maintenance (in maintenance: gone)" in capsys.readouterr().out
    assert run(cluster, "cluster", "maintenance", "pause", "n1") == 2  # argparse


def test_rolling_restart_stops_before_a_node_a_majority_needs(
    cluster: FakeCluster, capsys, tmp_path
) -> None:
    # The fake reports partition t/1 with no voter in sync: stopping any of its
    # voters could cost its majority, so nothing is touched and the command never runs.
    cluster.add_topic("t", partitions=2)
    ran = tmp_path / "ran"
    argv = ["cluster", "rolling-restart", "--command", f"touch {ran}", "--settle-timeout", "0.2"]
    assert run(cluster, *argv) == 1
    err = capsys.readouterr().err
    assert "laminar: error: stopped before n0 (asked for 0.2 s): t/0: voter" in err
    assert "is not in sync" in err
    assert cluster.calls_to("SetMaintenance") == []
    assert not ran.exists()


def test_cluster_status_lists_peers_refused_for_their_protocol_version(
    cluster: FakeCluster, capsys
) -> None:
    assert run(cluster, "cluster", "status") == 0
    assert "incompatible protocol" not in capsys.readouterr().out
    cluster.incompatible_peers["n0"] = [
        pb.IncompatiblePeer(
            node_id="n7",
            address="127.0.0.9:7200",
            protocol_version=1,
            reason="too old",
            refused_for_ms=4000,
        )
    ]
    assert run(cluster, "cluster", "status") == 0
    out = capsys.readouterr().out
    assert "peers refused for an incompatible protocol version" in out
    row = next(line for line in out.splitlines() if line.startswith("n0") and "n7" in line)
    assert row.split()[:5] == ["n0", "n7", "127.0.0.9:7200", "1", "4"]


def test_cluster_status_shows_each_nodes_free_space_and_disk_state(
    cluster: FakeCluster, capsys
) -> None:
    mib = 1 << 20
    cluster.disks["n0"] = pb.NodeDisk(
        free_bytes=30 * mib, total_bytes=40 * mib, watermark_bytes=8 * mib
    )
    cluster.disks["n1"] = pb.NodeDisk(
        free_bytes=512, total_bytes=40 * mib, watermark_bytes=8 * mib, full=True
    )
    assert run(cluster, "cluster", "status") == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    assert "DISK_FREE" in rows["NODE"] and "DISK" in rows["NODE"]
    assert "30.0 MiB of 40.0 MiB" in rows["n0"] and rows["n0"].rstrip().endswith("ok")
    assert "512 B of 40.0 MiB" in rows["n1"] and "full (below 8.0 MiB)" in rows["n1"]
    assert rows["n2"].split()[-2:] == ["-", "-"]  # it says nothing of its disk


def test_produce_key_partitioning_uses_key_partition(
    cluster: FakeCluster, capsys, tmp_path
) -> None:
    cluster.add_topic("t", partitions=5)
    keys = [f"user-{i}" for i in range(40)]
    source = tmp_path / "keyed.txt"
    source.write_text("".join(f"{k}|{i}\n" for i, k in enumerate(keys)), encoding="utf-8")
    assert (
        run(
            cluster,
            "produce",
            "t",
            "--key-partitioning",
            "--key-separator",
            "|",
            "--file",
            str(source),
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    placed: dict[bytes, int] = {}
    for partition in range(5):
        records = stored(cluster, "t", partition)
        for key, _ in records:
            assert key is not None
            placed[key] = partition
        if records:
            last = len(records) - 1
            assert f"produced {len(records)} records to t/{partition} at offsets 0..{last}" in out
    assert placed == {k.encode(): key_partition(k.encode(), 5) for k in keys}
    assert len(set(placed.values())) > 1


def test_produce_keyless_lines_use_the_sticky_partition(cluster: FakeCluster, capsys) -> None:
    # Changed on purpose: lines without a key under --key-partitioning used to go to
    # partition 0; they now go where the producer puts keyless records (one sticky
    # partition, chosen at random, until about a batch's worth of bytes went to it).
    cluster.add_topic("t", partitions=4)
    for _ in range(3):
        before = {p: cluster.partition("t", p).end_offset for p in range(4)}
        monkey_stdin = io.StringIO("".join(f"keyless {i}\n" for i in range(10)))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stdin", monkey_stdin)
            assert run(cluster, "produce", "t", "--key-partitioning") == 0
        grown = [p for p in range(4) if cluster.partition("t", p).end_offset > before[p]]
        assert len(grown) == 1
        (partition,) = grown
        assert stored(cluster, "t", partition)[-1] == (None, b"keyless 9")
        assert f"produced 10 records to t/{partition}" in capsys.readouterr().out


def test_produce_passes_bytes_through(cluster: FakeCluster, capsys, tmp_path) -> None:
    cluster.add_topic("t")
    source = tmp_path / "binary.txt"
    source.write_bytes(b"\xff\xfe not utf-8\r\nplain\n")
    assert run(cluster, "produce", "t", "--file", str(source)) == 0
    assert stored(cluster, "t", 0) == [(None, b"\xff\xfe not utf-8"), (None, b"plain")]


def test_consume_from_offset_max_and_several_partitions(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t", partitions=3)
    with Client(cluster.bootstrap) as client:
        for partition in range(3):
            values = [f"p{partition}-{i}".encode() for i in range(5)]
            client.produce("t", partition, [encode_batch(values, keys=[b"k"] * 5)])
    assert run(cluster, "consume", "t", "--partition", "2", "--from", "3") == 0
    assert capsys.readouterr().out.splitlines() == ["p2-3", "p2-4"]
    assert run(cluster, "consume", "t", "--partition", "2", "--from", "1", "--max", "2") == 0
    assert capsys.readouterr().out.splitlines() == ["p2-1", "p2-2"]
    assert run(cluster, "consume", "t", "--from", "5") == 0  # the end: nothing to read
    assert capsys.readouterr().out == ""

    # Several partitions: comma-separated or repeated; each one in order.
    assert (
        run(
            cluster,
            "consume",
            "t",
            "--partition",
            "0,2",
            "--partition",
            "1",
            "--from",
            "3",
            "--format",
            "json",
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for record in records:
        assert record["topic"] == "t" and record["key"] == "k"
        by_partition.setdefault(record["partition"], []).append((record["offset"], record["value"]))
    assert by_partition == {p: [(3, f"p{p}-3"), (4, f"p{p}-4")] for p in range(3)}
    assert run(cluster, "consume", "t", "--partition", "0,1,2", "--max", "4") == 0
    assert len(capsys.readouterr().out.splitlines()) == 4

    # An offset past the end of a partition is an error, before anything is read.
    assert run(cluster, "consume", "t", "--partition", "1", "--from", "9") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--from 9 is outside t/1" in err
    assert run(cluster, "consume", "t", "--partition", "7") == 1
    assert capsys.readouterr().err.startswith("laminar: error: ")


def test_consume_stops_at_the_high_watermark_seen_at_start(
    cluster: FakeCluster, capsys, monkeypatch
) -> None:
    cluster.add_topic("t")
    with Client(cluster.bootstrap) as client:
        client.produce("t", 0, [encode_batch([b"a", b"b", b"c", b"d"])])
    # Records appended after the start are not printed: pretend the end was 2.
    real = Client.list_offsets

    def early(self, topic, partitions, **kwargs):
        answers = real(self, topic, partitions, **kwargs)
        return {p: PartitionOffsets(o.log_start_offset, 2, None) for p, o in answers.items()}

    monkeypatch.setattr(Client, "list_offsets", early)
    assert run(cluster, "consume", "t") == 0
    assert capsys.readouterr().out.splitlines() == ["a", "b"]


def test_consume_reads_to_the_leaders_high_watermark(
    cluster: FakeCluster, capsys, monkeypatch
) -> None:
    """A follower's high watermark may trail the leader's (a node just restarted):
    the end ``consume`` reads to is the leaders', so every acknowledged record is
    printed (a CI run of the operations guide printed fewer than it produced)."""
    cluster.add_topic("t")
    with Client(cluster.bootstrap) as client:
        client.produce("t", 0, [encode_batch([b"a", b"b", b"c", b"d"])])
    real = Client.list_offsets

    def trailing_followers(self, topic, partitions, *, leader=False, **kwargs):
        answers = real(self, topic, partitions, leader=leader, **kwargs)
        if leader:
            return answers
        return {p: PartitionOffsets(o.log_start_offset, 1, None) for p, o in answers.items()}

    monkeypatch.setattr(Client, "list_offsets", trailing_followers)
    assert run(cluster, "consume", "t") == 0
    assert capsys.readouterr().out.splitlines() == ["a", "b", "c", "d"]


def test_consume_follow_waits_for_new_records(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t")
    with Client(cluster.bootstrap) as client:
        client.produce("t", 0, [encode_batch([b"first"])])
        codes: list[int] = []
        follower = threading.Thread(
            target=lambda: codes.append(
                run(cluster, "consume", "t", "--follow", "--max", "3", "--from", "latest")
            )
        )
        follower.start()
        deadline = time.monotonic() + 5
        while not cluster.calls_to("Fetch") and time.monotonic() < deadline:
            time.sleep(0.01)
        client.produce("t", 0, [encode_batch([b"second", b"third"])])
        time.sleep(0.2)
        client.produce("t", 0, [encode_batch([b"fourth"])])
        follower.join(10)
    assert not follower.is_alive() and codes == [0]
    assert capsys.readouterr().out.splitlines() == ["second", "third", "fourth"]


def test_progress_line_only_when_asked_or_on_a_terminal(
    cluster: FakeCluster, capsys, tmp_path, monkeypatch
) -> None:
    cluster.add_topic("t")
    source = tmp_path / "lines.txt"
    source.write_text("".join(f"{i}\n" for i in range(1200)), encoding="utf-8")
    assert run(cluster, "produce", "t", "--file", str(source), "--progress") == 0
    captured = capsys.readouterr()
    assert "produced 1200 records to t/0 at offsets 0..1199" in captured.out
    assert captured.err.startswith("\r") and captured.err.endswith("\n")
    assert "produced 1,200 records in " in captured.err and "/s)" in captured.err
    assert run(cluster, "consume", "t", "--progress", "--max", "1000") == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1000
    assert "consumed 1,000 records in " in captured.err

    # Not a terminal (as here): no progress unless forced.
    assert run(cluster, "produce", "t", "--file", str(source)) == 0
    assert run(cluster, "consume", "t") == 0
    assert capsys.readouterr().err == ""

    # A terminal: shown on runs that last, never with --no-progress.
    monkeypatch.setattr(progress, "isatty", lambda stream: stream is not sys.stdout)
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0.0001)
    assert run(cluster, "consume", "t", "--max", "10") == 0
    assert "consumed 10 records in " in capsys.readouterr().err
    assert run(cluster, "consume", "t", "--max", "10", "--no-progress") == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "isatty", lambda stream: True)  # stdout on the terminal too
    assert run(cluster, "consume", "t", "--max", "10") == 0
    assert capsys.readouterr().err == ""


def test_progress_line_rewrites_itself(monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0.02)
    count = 0
    with progress.Progress("produced", lambda: count, None):
        for _ in range(10):
            count += 123_456
            time.sleep(0.01)
    err = capsys.readouterr().err
    lines = err.split("\r")[1:]
    assert len(lines) >= 2
    assert all(line.startswith("produced ") and "/s)" in line for line in lines)
    assert "\n" not in "".join(lines[:-1]) and lines[-1].endswith("/s)\n")
    assert lines[-1].startswith("produced 1,234,560 records in ")


def test_produce_errors_are_one_line(cluster: FakeCluster, capsys, tmp_path) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("a\nb\nc\n", encoding="utf-8")
    assert run(cluster, "produce", "missing", "--file", str(source)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "laminar: error: unknown topic 'missing'\n"

    cluster.add_topic("t", partitions=2)
    assert run(cluster, "produce", "t", "--partition", "2", "--file", str(source)) == 1
    err = capsys.readouterr().err
    assert err == "laminar: error: topic 't' has partitions 0..1, not 2\n"

    # A line the producer refuses: the lines before it are written, the rest not read.
    big = tmp_path / "big.txt"
    big.write_bytes(b"a\nb\n" + b"x" * (9 * 1024 * 1024) + b"\nc\n")
    assert run(cluster, "produce", "t", "--partition", "1", "--file", str(big)) == 1
    captured = capsys.readouterr()
    assert captured.out == "produced 2 records to t/1 at offsets 0..1\n"
    assert captured.err.startswith("laminar: error: line 3: a record of ")
    assert captured.err.count("\n") == 1
    assert stored(cluster, "t", 1) == [(None, b"a"), (None, b"b")]

    # The leader refuses the records for good: each is reported failed, in one line.
    cluster.fail_next("n0", "Produce", InvalidInputError("refused by the test"))
    assert run(cluster, "produce", "t", "--file", str(source)) == 1
    captured = capsys.readouterr()
    assert captured.out == "produced 0 records\n"
    assert captured.err.startswith("laminar: error: 3 records not written: ")
    assert "refused by the test" in captured.err and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err

    assert run(cluster, "produce", "t", "--key-partitioning", "--key-separator", "") == 1
    assert "--key-separator" in capsys.readouterr().err


def test_produce_interrupted_exits_130_after_closing(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t")

    class Interrupted(io.StringIO):
        def __iter__(self):
            yield "one\n"
            yield "two\n"
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", Interrupted())
        assert run(cluster, "produce", "t") == 130
    captured = capsys.readouterr()
    assert captured.out == "produced 2 records to t/0 at offsets 0..1\n"
    assert "Traceback" not in captured.err
    assert stored(cluster, "t", 0) == [(None, b"one"), (None, b"two")]


def test_with_no_cluster_a_command_fails_within_two_seconds_and_says_what_to_do(
    capsys,
) -> None:
    """Nothing listens at the bootstrap address; the default --timeout of 30 s. As a
    user runs it (a process of its own: exit code, output), and timed in-process
    (an interpreter's start-up on a loaded machine is not the command's doing)."""
    address = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "laminar.cli", "--bootstrap", address, "cluster", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"laminar: error: no Laminar node answered at {address} ")
    assert "(connection refused)" in lines[0] and "scripts/local_cluster.sh start" in lines[0]
    started = time.monotonic()
    assert cli.main(["--bootstrap", address, "cluster", "status"]) == 1
    elapsed = time.monotonic() - started
    assert capsys.readouterr().err.splitlines() == lines
    assert elapsed <= 2.0, elapsed


def test_topic_create_leaves_unset_settings_to_the_cluster(cluster: FakeCluster, capsys) -> None:
    assert run(cluster, "topic", "create", "plain") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "created topic plain: partitions=1 (cluster default) replication_factor=3 (cluster default)"
    )
    assert run(cluster, "topic", "describe", "plain") == 0
    assert capsys.readouterr().out.splitlines()[:10] == [
        "topic plain:",
        "  partitions=1 (cluster default)",
        "  replication_factor=3 (cluster default)",
        "  retention_bytes=unlimited (cluster default)",
        "  retention_ms=unlimited (cluster default)",
        "  cleanup_policy=delete (cluster default)",
        "  delete_retention_ms=86400000 (cluster default)",
        "  min_compaction_lag_ms=0 (cluster default)",
        "  max_compaction_lag_ms=none (cluster default)",
        "  min_cleanable_dirty_ratio=0.5 (cluster default)",
    ]
    assert run(cluster, "topic", "create", "some", "--replication-factor", "2") == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "created topic some: partitions=1 (cluster default) replication_factor=2 (topic)"
    )
    assert run(cluster, "topic", "create", "bad", "--retention-ms", "0") == 1
    assert "--retention-ms must be > 0 or -1" in capsys.readouterr().err


def test_topic_create_takes_the_compaction_settings(cluster: FakeCluster, capsys) -> None:
    argv = ["topic", "create", "c", "--cleanup-policy", "compact,delete"]
    argv += ["--delete-retention-ms", "1000", "--min-cleanable-dirty-ratio", "0.25"]
    assert run(cluster, *argv) == 0
    config = cluster.topics["c"].config
    assert (config.cleanup_policy, config.delete_retention_ms) == ("compact,delete", 1000)
    assert config.min_cleanable_dirty_ratio == 0.25
    capsys.readouterr()
    assert run(cluster, "topic", "describe", "c") == 0
    described = capsys.readouterr().out
    assert "  cleanup_policy=compact,delete (topic)" in described
    assert "  min_compaction_lag_ms=0 (cluster default)" in described
    assert run(cluster, "topic", "create", "d", "--cleanup-policy", "shred") == 2
    assert "invalid choice: 'shred'" in capsys.readouterr().err
    assert run(cluster, "topic", "create", "d", "--min-cleanable-dirty-ratio", "1.5") == 1
    assert "--min-cleanable-dirty-ratio must be in (0, 1], got 1.5" in capsys.readouterr().err


def test_topic_describe_notes_partitions_moving_replicas(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t", partitions=3, rf=2)
    assert run(cluster, "topic", "describe", "t") == 0
    assert "moving replicas" not in capsys.readouterr().out
    cluster.partition("t", 1).voters = ["n1"]  # rf 1 -> 2 under way: n2 not voting yet
    assert run(cluster, "topic", "describe", "t") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3].split() == ["1", "n1", "n1,n2", "n1", "0"]
    assert (
        out[-1]
        == "1 of 3 partitions are moving replicas (VOTERS towards REPLICAS, one node at a time)"
    )


def test_topic_alter_prints_old_and_new(cluster: FakeCluster, capsys) -> None:
    assert run(cluster, "topic", "create", "t", "--retention-bytes", "5000") == 0
    capsys.readouterr()
    argv = ["topic", "alter", "t", "--retention-ms", "60000", "--cleanup-policy", "compact"]
    assert run(cluster, *argv, "--reset", "retention-bytes") == 0
    assert capsys.readouterr().out.splitlines() == [
        "altered topic t:",
        "  retention_bytes: 5000 (topic) \u2192 unlimited (cluster default)",
        "  retention_ms: unlimited (cluster default) \u2192 60000 (topic)",
        "  cleanup_policy: delete (cluster default) \u2192 compact (topic)",
    ]
    assert cluster.topics["t"].config.retention_ms == 60000
    # A dry run shows the change and leaves the topic as it is.
    assert run(cluster, "topic", "alter", "t", "--replication-factor", "2", "--dry-run") == 0
    assert capsys.readouterr().out.splitlines() == [
        "would alter topic t:",
        "  replication_factor: 3 (cluster default) \u2192 2 (topic)",
    ]
    assert cluster.topics["t"].config.replication_factor == 3
    assert run(cluster, "topic", "alter", "t", "--replication-factor", "2") == 0
    assert "replicas move one node at a time" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--retention-ms", "0"], 1, "--retention-ms must be > 0 or -1, got 0"),
        (["--retention-bytes", "-5"], 1, "--retention-bytes must be > 0 or -1, got -5"),
        (["--max-compaction-lag-ms", "-2"], 1, "--max-compaction-lag-ms must be >= 0 or -1"),
        ([], 1, "nothing to change"),
        (["--reset", "partitions"], 2, "not a resettable setting: 'partitions'"),
        (["--retention-ms", "5", "--reset", "retention_ms"], 1, "both set and reset"),
        (["--partitions", "5"], 2, "unrecognized arguments: --partitions"),
        (["--delete-retention-ms", "-1"], 2, "must be >= 0"),
    ],
)
def test_topic_alter_refuses_bad_input_in_one_line(
    cluster: FakeCluster, capsys, argv: list[str], code: int, message: str
) -> None:
    cluster.add_topic("t")
    assert run(cluster, "topic", "alter", "t", *argv) == code
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert cluster.calls_to("AlterTopic") == []


def test_topic_alter_names_the_field_the_node_refuses(cluster: FakeCluster, capsys) -> None:
    cluster.add_topic("t")
    cluster.topics["t"].config.retention_ms = 0  # the fake then refuses any alter
    assert run(cluster, "topic", "alter", "t", "--cleanup-policy", "compact") == 1
    assert "retention_ms must be positive or -1" in capsys.readouterr().err


def test_topic_add_partitions_prints_the_new_partitions_and_the_key_move(
    cluster: FakeCluster, capsys
) -> None:
    cluster.add_topic("t", partitions=4)
    assert run(cluster, "topic", "add-partitions", "t", "--to", "8", "--dry-run") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "topic t would grow 4 \u2192 8 partitions"
    assert cluster.topics["t"].config.partitions == 4
    assert run(cluster, "topic", "add-partitions", "t", "--to", "8") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "topic t grew 4 \u2192 8 partitions"
    assert out[1].split() == ["PARTITION", "REPLICAS"]
    assert [line.split()[0] for line in out[2:6]] == ["4", "5", "6", "7"]
    assert out[6].startswith(
        "warning: keyed records now map by modulo 8: 50% of keys move to another "
        "partition (exactly 1/2: the residues r < lcm(4,8)=8 with r mod 4 != r mod 8)."
    )
    assert cluster.topics["t"].config.partitions == 8
    assert run(cluster, "topic", "add-partitions", "t", "--to", "12") == 0
    assert "66.7% of keys move" in capsys.readouterr().out
    assert run(cluster, "topic", "add-partitions", "t", "--to", "12") == 1
    assert "has 12 partitions; --to must be more" in capsys.readouterr().err
    assert run(cluster, "topic", "add-partitions", "t", "--to", "0") == 2
    assert run(cluster, "topic", "add-partitions", "nope", "--to", "3") == 1
    assert "unknown topic" in capsys.readouterr().err


def test_node_maintenance_is_the_cluster_maintenance_command() -> None:
    parser = cli.build_parser()
    for group in ("node", "cluster"):
        args = parser.parse_args([group, "maintenance", "enter", "n1"])
        assert args.handler is cluster_maintenance
        assert (args.change, args.node) == ("enter", "n1")
