"""Adding partitions to a live topic on three node processes (issue 34, point 2).

A keyed idempotent producer writes ``key:sequence`` for 200 keys in a loop while
``laminar topic add-partitions --to 6`` raises the topic from 4 partitions; a group
consumer subscribed by pattern reads along. Checked: the CLI names the key move;
the producer sees the new count within its ``metadata_max_age_s`` and then maps
keys by modulo 6; per key the sequence increases within every partition, each key
sits in one partition before the change and one after (a moved key visibly
elsewhere), nothing is lost or duplicated; the group member reads partitions 4 and
5 within the documented bound (its coordinator applies the change, then one
heartbeat). Waits are on conditions with deadlines; every process is stopped.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator

import pytest
from laminar_client import Client, Consumer, Producer, key_partition

from laminar import cli
from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import CLIENT_TIMEOUT_S, create_topic, start_cluster, wait_leader

TOPIC = "grows"
KEYS = [f"key{i:03d}" for i in range(200)]
METADATA_MAX_AGE_S = 1.0
SESSION_S = 9.0  # heartbeats every 0.6 s (session / 15)
WAIT_S = 60.0  # generous: two cores shared with other test runs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("add-partitions"), 3)
    try:
        yield cluster
    finally:
        cluster.close()


def bootstrap(cluster: ProcessCluster) -> list[str]:
    return [node.grpc for node in cluster.nodes]


class KeyedLoop:
    """Sends ``key:sequence`` for every key, round after round, from a thread, until
    stopped; the producer's client refreshes metadata every ``METADATA_MAX_AGE_S``."""

    def __init__(self, cluster: ProcessCluster) -> None:
        self.client = Client(
            bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S, metadata_max_age_s=METADATA_MAX_AGE_S
        )
        self.producer: Producer[bytes, bytes] = Producer(self.client, linger_s=0.01)
        self.rounds = 0
        self.sent: list[
            tuple[str, int, int, int]
        ] = []  # acknowledged (key, sequence, partition, offset)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="keyed-loop", daemon=True)

    def __enter__(self) -> KeyedLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                futures = [
                    (
                        key,
                        self.rounds,
                        self.producer.send(
                            TOPIC, f"{key}:{self.rounds}".encode(), key=key.encode()
                        ),
                    )
                    for key in KEYS
                ]
                self.producer.flush()
                for key, sequence, future in futures:
                    where = future.result(0)
                    self.sent.append((key, sequence, where.partition, where.offset))
                self.rounds += 1
        except BaseException as error:  # surfaced by the test thread
            self._error = error

    def wait_rounds(self, rounds: int) -> None:
        target = self.rounds + rounds
        wait_for(lambda: self._failed() or self.rounds >= target, WAIT_S, f"{rounds} rounds")

    def _failed(self) -> bool:
        if self._error is not None:
            raise self._error
        return False

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self.producer.close()
        self.client.close()
        self._failed()


class PatternReader:
    """A group member subscribed by pattern, reading from a thread until stopped:
    when it first got a record of each partition."""

    def __init__(self, cluster: ProcessCluster) -> None:
        self.consumer: Consumer[bytes, bytes] = Consumer(
            bootstrap(cluster), group="grows-readers", pattern="grow.*", session_timeout_s=SESSION_S
        )
        self.first_record_s: dict[int, float] = {}
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pattern-reader", daemon=True)

    def __enter__(self) -> PatternReader:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in self.consumer.records(timeout_s=0.2):
                self.first_record_s.setdefault(record.partition, time.monotonic())
                self.count += 1
                if self._stop.is_set():
                    break

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self.consumer.close()


def stored_records(
    client: Client, partitions: int, acknowledged: list[tuple[int, int]]
) -> dict[int, list[tuple[str, int]]]:
    """Per partition, every (key, sequence) in offset order, through the last of the
    ``acknowledged`` (partition, offset)."""
    found: dict[int, list[tuple[str, int]]] = {}
    for partition in range(partitions):
        # Up to the last acknowledged record: a follower may not know its commit yet.
        end = max((o + 1 for p, o in acknowledged if p == partition), default=0)
        for record in client.records(TOPIC, partition, 0, end, follow=True):
            assert record.value is not None
            key, sequence = record.value.decode().split(":")
            assert record.key == key.encode()
            found.setdefault(partition, []).append((key, int(sequence)))
    return found


def test_keyed_producer_and_pattern_group_across_add_partitions(
    cluster: ProcessCluster,
) -> None:
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        create_topic(cluster, client, TOPIC, 4, 3)
        with KeyedLoop(cluster) as loop, PatternReader(cluster) as reader:
            loop.wait_rounds(3)
            wait_for(lambda: len(reader.first_record_s) == 4, WAIT_S, "the reader on 4 partitions")
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                code = cli.main(
                    [
                        "--bootstrap",
                        ",".join(bootstrap(cluster)),
                        "topic",
                        "add-partitions",
                        TOPIC,
                        "--to",
                        "6",
                    ]
                )
            changed_s = time.monotonic()
            assert code == 0, output.getvalue()
            printed = output.getvalue()
            assert f"topic {TOPIC} grew 4 \u2192 6 partitions" in printed
            assert "keyed records now map by modulo 6: 66.7% of keys move" in printed
            for partition in (4, 5):
                wait_leader(cluster, TOPIC, partition)
            wait_for(
                lambda: loop.producer.metrics().partition_count_changes == 1,
                WAIT_S,
                "the producer to see 6 partitions",
            )
            producer_seen_s = time.monotonic() - changed_s
            wait_for(
                lambda: {4, 5} <= set(reader.first_record_s), WAIT_S, "the reader on t/4 and t/5"
            )
            reader_seen_s = max(reader.first_record_s[p] for p in (4, 5)) - changed_s
            loop.wait_rounds(3)
        sent = loop.sent
        stored = stored_records(client, 6, [(p, o) for _, _, p, o in sent])
    print(
        f"add-partitions 4->6: producer remapped after {producer_seen_s:.2f} s "
        f"(metadata_max_age_s={METADATA_MAX_AGE_S}), group reader read t/4 and t/5 "
        f"{reader_seen_s:.2f} s after the command; {loop.rounds} rounds of {len(KEYS)} keys"
    )
    # The producer's bound: a refresh within metadata_max_age_s once a batch goes out
    # (generous margin for the shared machine).
    assert producer_seen_s < METADATA_MAX_AGE_S + 15
    # The group's bound: the coordinator's node applies the change (a metadata round
    # trip), then one heartbeat (SESSION_S / 15), then a fetch; same margin.
    assert reader_seen_s < SESSION_S / 15 + 15
    moved = 0
    for key in KEYS:
        old, new = key_partition(key.encode(), 4), key_partition(key.encode(), 6)
        per_partition = {
            partition: [s for k, s in records if k == key]
            for partition, records in stored.items()
            if any(k == key for k, _ in records)
        }
        sequences = sorted(s for values in per_partition.values() for s in values)
        expected = sorted(s for k, s, _, _ in sent if k == key)
        assert sequences == expected, f"{key}: lost or duplicated records"
        assert sequences == list(range(len(sequences)))
        for values in per_partition.values():
            assert values == sorted(values), f"{key}: out of order within a partition"
        assert set(per_partition) <= {old, new}
        assert per_partition[old][0] == 0  # before the change: the old modulo
        assert max(per_partition[new]) == sequences[-1]  # after it: the new one
        if old != new:
            moved += 1
            # The move is visible: one switch, every later record in the new partition.
            assert max(per_partition[old]) < min(per_partition[new])
    assert 100 < moved < 170, moved  # 2/3 of 200 keys move, give or take


def run_cli(cluster: ProcessCluster, *argv: str) -> tuple[int, str, str]:
    """``laminar ARGV`` in this process against the cluster: exit code, stdout, stderr."""
    output, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
        code = cli.main(["--bootstrap", ",".join(bootstrap(cluster)), *argv])
    return code, output.getvalue(), errors.getvalue()


def test_cli_alter_and_describe_against_the_nodes(cluster: ProcessCluster) -> None:
    """The nodes' sources as the CLI shows them: given at creation or by alter is
    (topic), left out or reset is (cluster default); a value the nodes refuse is one
    error line naming the field, and nothing changes."""
    code, out, err = run_cli(cluster, "topic", "create", "settings", "--partitions", "2")
    assert code == 0, err
    code, out, err = run_cli(
        cluster, "topic", "alter", "settings", "--retention-ms", "3600000",
        "--cleanup-policy", "compact,delete",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines() == [
        "altered topic settings:",
        "  retention_ms: unlimited (cluster default) \u2192 3600000 (topic)",
        "  cleanup_policy: delete (cluster default) \u2192 compact,delete (topic)",
    ]
    described: list[str] = []

    def describe_shows_the_change() -> bool:
        # The metadata leader answered the alter once it applied it; the nodes a
        # describe asks apply it within a metadata round trip.
        code, out, err = run_cli(cluster, "topic", "describe", "settings")
        assert code == 0, err
        described[:] = out.splitlines()
        return "  retention_ms=3600000 (topic)" in described

    wait_for(describe_shows_the_change, WAIT_S, "describe to show the alter")
    assert "  partitions=2 (topic)" in described
    assert "  retention_ms=3600000 (topic)" in described
    assert "  retention_bytes=unlimited (cluster default)" in described
    assert "  cleanup_policy=compact,delete (topic)" in described
    code, out, err = run_cli(cluster, "topic", "alter", "settings", "--reset", "retention-ms")
    assert code == 0, err
    assert out.splitlines()[1] == (
        "  retention_ms: 3600000 (topic) \u2192 unlimited (cluster default)"
    )
    code, out, err = run_cli(cluster, "topic", "alter", "settings", "--replication-factor", "5")
    assert code == 1
    assert len(err.splitlines()) == 1 and "replication_factor" in err, err
    code, out, err = run_cli(cluster, "topic", "add-partitions", "settings", "--to", "2")
    assert code == 1
    assert "has 2 partitions" in err, err
