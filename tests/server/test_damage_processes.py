"""Damage suite (issue 28): one replica's files damaged on disk, its node restarted.

A 3-node cluster of real node processes (64 KiB segments, so each partition has
several sealed segments) holds topic ``dmg``, one partition per kind of damage,
and topic ``calm``, left alone. Once every replica holds every record, node 2 is
killed (a stopped node leaves the cluster), one file of each ``dmg`` partition's
replica on it is damaged (a flipped byte, garbage, or a lost slot: see
``KINDS``), and the node is started again.
Then, as the crash suite does for torn writes:

- the node starts, and its ``calm`` replicas are back in sync within a bound;
- damage is named in the node's log and set aside in ``quarantine/`` with a note
  (file, offset, position, checksums); a damaged index is rebuilt instead;
- each damaged replica heals from its peers (a voter in sync again) within a bound;
- every acknowledged record is read back exactly, from the damaged replica itself
  (every batch's checksum verified) and through the Consumer.

One slot of the state file damaged (the older copy, or the one not written yet)
costs nothing: the other holds the state. (Rot in the newest slot makes the
replica fall back to the state before its last save, as a save torn by a crash
does: the two cannot be told apart; ``docs/design.md``, "Damaged storage", says
what that costs; ``tests/segment/test_state.py`` covers the fallback.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from random import Random

import pytest
from laminar_client import Client, Consumer, Producer

from laminar.records import decode_batch, iter_batches
from laminar.segment.statefile import decode_slot
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import SETTLE_S, node_id, wait_leader, wait_settled

KINDS = (
    "sealed_segment",
    "active_segment",
    "index",
    "time_index",
    "state_one_slot",
    "state_both_slots",
    "committed",
)
"""``dmg`` partition ``p`` gets damage ``KINDS[p]``."""
QUARANTINED = {"sealed_segment", "active_segment", "state_both_slots", "committed"}
HEALING = {"sealed_segment", "active_segment", "state_both_slots"}
"""Kinds that cost the replica entries or its vote: it heals as a learner. (A
garbage committed file costs nothing: it is set aside and written anew.)"""
TOPIC = "dmg"
CALM = "calm"
CALM_PARTITIONS = 2
RECORDS = 2_000
"""Records per partition: about four 64 KiB segments of 130-byte records."""
HEAL_S = 30.0
"""Bound on a damaged replica's return to the in-sync voters after its node is up."""


@dataclass
class Damaged:
    cluster: ProcessCluster
    victim: NodeProcess
    produced: dict[tuple[str, int], list[bytes]]
    log_before: int
    """Bytes of the victim's log file before the restart (its new lines follow)."""
    restarted_at: float


def value(topic: str, partition: int, index: int) -> bytes:
    """A record that does not compress away: a flipped byte lands in real data."""
    return b"%s/%d:%06d:" % (topic.encode(), partition, index) + Random(index).randbytes(100)


def bootstrap(cluster: ProcessCluster) -> list[str]:
    return [node.grpc for node in cluster.nodes]


def partition_dir(node: NodeProcess, topic: str, partition: int) -> Path:
    return node.data_dir / "partitions" / topic / str(partition)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def batch_positions(path: Path) -> list[int]:
    return [position for position, _ in iter_batches(path.read_bytes())]


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x5A
    path.write_bytes(bytes(data))


def damage(directory: Path, kind: str) -> None:
    """Damage one file of the (stopped) replica in ``directory``."""
    logs = segments(directory)
    sealed = logs[len(logs) // 2 - 1]  # one in the middle, never the active one
    assert len(logs) >= 3, f"want sealed segments around the damage, have {logs}"
    if kind == "sealed_segment":
        flip(sealed, 200)  # inside the first batch's payload
    elif kind == "active_segment":
        active = logs[-1]
        positions = batch_positions(active)
        assert len(positions) >= 2, "want whole batches after the damaged one"
        flip(active, positions[0] + 200)
    elif kind in ("index", "time_index"):
        path = sealed.with_suffix(".index" if kind == "index" else ".timeindex")
        flip(path, 12)  # an entry's position, or a timestamp's high bits
    elif kind in ("state_one_slot", "state_both_slots"):
        path = directory / "state"
        data = bytearray(path.read_bytes())
        slot_bytes = len(data) // 2
        slots = [
            decode_slot(data[i * slot_bytes : (i + 1) * slot_bytes], slot_bytes) for i in (0, 1)
        ]
        valid = [(slot[0], i) for i, slot in enumerate(slots) if slot is not None]
        assert valid, "want a state to damage"
        if kind == "state_one_slot":
            # The slot a save would go to next: the older copy, or the one never
            # written (a replica that saved once, as when it was founded).
            hit = 1 - max(valid)[1]
            data[hit * slot_bytes : hit * slot_bytes + 64] = Random(3).randbytes(64)
        else:
            for _, slot in valid:
                data[slot * slot_bytes + 30] ^= 0x5A  # inside the payload: its checksum fails
        path.write_bytes(bytes(data))
    elif kind == "committed":
        path = directory / "committed"
        path.write_bytes(Random(7).randbytes(len(path.read_bytes())))
    else:  # pragma: no cover
        raise AssertionError(kind)


def health(cluster: ProcessCluster) -> dict[tuple[str, int], tuple[set[str], set[str]]]:
    """(voters, in-sync voters) of every partition, as their leaders report them."""
    with Client(bootstrap(cluster)) as client:
        described = client.describe_cluster()
    return {(h.topic, h.partition): (set(h.voters), set(h.in_sync)) for h in described.partitions}


def victim_in_sync(
    cluster: ProcessCluster, victim: NodeProcess, keys: list[tuple[str, int]]
) -> bool:
    seen = health(cluster)
    name = node_id(victim)
    return all(key in seen and name in seen[key][0] and name in seen[key][1] for key in keys)


def damaged_listed(cluster: ProcessCluster, victim: NodeProcess) -> list[pb.DamagedReplica]:
    response = cluster.stub(victim).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
    return list(response.damaged)


def wait_caught_up(cluster: ProcessCluster, victim: NodeProcess) -> None:
    """Every replica on ``victim`` holds its partition's whole log (in sync), so the
    damage hits acknowledged records."""
    keys = [(TOPIC, p) for p in range(len(KINDS))] + [(CALM, p) for p in range(CALM_PARTITIONS)]
    wait_for(lambda: victim_in_sync(cluster, victim, keys), SETTLE_S, "node2 in sync everywhere")


def produce(
    cluster: ProcessCluster, topic: str, partition: int, start: int, count: int
) -> list[bytes]:
    values = [value(topic, partition, i) for i in range(start, start + count)]
    with Producer(bootstrap(cluster)) as producer:
        for number, record in enumerate(values, start=1):
            producer.send(topic, record, partition=partition)
            if number % 100 == 0:
                producer.flush()
        producer.flush()
    return values


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Damaged]:
    root = tmp_path_factory.mktemp("damage")
    config = root / "node.toml"
    config.write_text("[log]\nsegment_bytes_max = 65536\n")
    cluster = ProcessCluster(root)
    try:
        first = cluster.add_node(bootstrap=True, extra_args=["--config", str(config)])
        cluster.wait_ready(first)
        for _ in range(2):
            cluster.add_node(extra_args=["--config", str(config)])
        for node in cluster.nodes:
            cluster.wait_ready(node)
        wait_settled(cluster)
        with Client(bootstrap(cluster)) as client:
            client.create_topic(TOPIC, len(KINDS), 3)
            client.create_topic(CALM, CALM_PARTITIONS, 3)
        produced: dict[tuple[str, int], list[bytes]] = {}
        for topic, count in ((TOPIC, len(KINDS)), (CALM, CALM_PARTITIONS)):
            for partition in range(count):
                wait_leader(cluster, topic, partition)
                produced[topic, partition] = produce(cluster, topic, partition, 0, RECORDS)
        victim = cluster.nodes[2]
        active = (TOPIC, KINDS.index("active_segment"))
        while len(batch_positions(segments(partition_dir(victim, *active))[-1])) < 3:
            produced[active] += produce(cluster, *active, len(produced[active]), 100)
        wait_caught_up(cluster, victim)
        committed = partition_dir(victim, TOPIC, KINDS.index("committed")) / "committed"
        wait_for(committed.exists, SETTLE_S, "the committed file to be written")
        # Killed, not stopped: a stopped node gossips that it left, and placement
        # moves its replicas away at once (they would be removed, not healed).
        cluster.kill(victim)
        for partition, kind in enumerate(KINDS):
            damage(partition_dir(victim, TOPIC, partition), kind)
        log_before = victim.log_path.stat().st_size
        restarted_at = time.monotonic()
        cluster.start(victim)
        cluster.wait_ready(victim)
        yield Damaged(cluster, victim, produced, log_before, restarted_at)
    finally:
        cluster.close()


def new_log(damaged: Damaged) -> str:
    with open(damaged.victim.log_path, "rb") as file:
        file.seek(damaged.log_before)
        return file.read().decode(errors="replace")


def notes(victim: NodeProcess, partition: int) -> list[tuple[Path, dict[str, object]]]:
    """(quarantine directory, its note) of each damage set aside for the partition."""
    directory = victim.data_dir / "quarantine" / TOPIC / str(partition)
    return [
        (path.parent, json.loads(path.read_text()))
        for path in sorted(directory.glob("*/note.json"))
    ]


def test_the_node_starts_and_its_other_replicas_are_back_in_sync(damaged: Damaged) -> None:
    cluster, victim = damaged.cluster, damaged.victim
    assert victim.running
    calm = [(CALM, p) for p in range(CALM_PARTITIONS)]
    wait_for(lambda: victim_in_sync(cluster, victim, calm), HEAL_S, "calm replicas in sync")


@pytest.mark.parametrize("kind", KINDS)
def test_damage_is_named_and_set_aside_with_a_note(damaged: Damaged, kind: str) -> None:
    partition = KINDS.index(kind)
    found = notes(damaged.victim, partition)
    log = new_log(damaged)
    named = f"replica {TOPIC}/{partition} node={node_id(damaged.victim)}: damaged storage"
    if kind not in QUARANTINED:
        assert found == []
        assert named not in log
        if kind in ("index", "time_index"):
            assert (
                f"rebuilding index segment={partition_dir(damaged.victim, TOPIC, partition)}" in log
            )
        return
    assert named in log
    if kind in ("sealed_segment", "active_segment"):
        # The log cut below the committed offset: the committed file goes aside too.
        found = [(path, note) for path, note in found if str(note["file"]).endswith(".log")]
    assert len(found) == 1, found
    quarantine, note = found[0]
    assert note["replica"] == f"{TOPIC}/{partition}"
    assert note["reason"] and note["action"] and note["time"]
    if kind in ("sealed_segment", "active_segment"):
        logs = segments(partition_dir(damaged.victim, TOPIC, partition))
        assert str(note["file"]).endswith(".log")
        assert isinstance(note["offset"], int) and isinstance(note["position"], int)
        assert note["expected_checksum"] != note["found_checksum"]
        assert note["expected_checksum"] and note["found_checksum"]
        # The damaged segment alone is kept, from the damage on: later ones held
        # nothing damaged, and the log keeps what came before.
        kept = f"{Path(str(note['file'])).name}.from-{note['position']}"
        assert [p.name for p in quarantine.iterdir() if p.name != "note.json"] == [kept]
        assert (quarantine / kept).stat().st_size > 0
        assert logs, "the valid prefix is kept"
    else:
        name = "state" if kind == "state_both_slots" else "committed"
        assert Path(str(note["file"])).name == name
        assert (quarantine / name).exists()


def test_each_damaged_replica_heals_within_the_bound(damaged: Damaged) -> None:
    cluster, victim = damaged.cluster, damaged.victim
    keys = [(TOPIC, p) for p in range(len(KINDS))]

    def healed() -> bool:
        return not damaged_listed(cluster, victim) and victim_in_sync(cluster, victim, keys)

    wait_for(healed, HEAL_S, "every damaged replica back among the in-sync voters")
    print(f"healed {time.monotonic() - damaged.restarted_at:.1f} s after the restart")


def fetch_all(
    cluster: ProcessCluster, node: NodeProcess, topic: str, partition: int
) -> list[bytes]:
    """Every data record of the partition as ``node``'s replica serves it, each
    batch's checksums verified."""
    stub = cluster.stub(node)
    found: list[bytes] = []
    offset = 0
    while True:
        response = stub.Fetch(
            pb.FetchRequest(topic=topic, partition=partition, offset=offset), timeout=10
        )
        if not response.batches:
            assert offset >= response.high_watermark
            return found
        for position, header in iter_batches(response.batches):
            if header.next_offset <= offset or header.is_control:
                offset = max(offset, header.next_offset)
                continue
            decoded = decode_batch(response.batches, position)
            skip = offset - header.base_offset
            found.extend(v or b"" for v in decoded.values[max(skip, 0) :])
            offset = header.next_offset


def test_the_damaged_replicas_healed_in_place(damaged: Damaged) -> None:
    """Each damaged replica healed as the same replica (a learner, then a voter
    again), not by being removed from its group and copied anew."""
    cluster, victim = damaged.cluster, damaged.victim
    keys = [(TOPIC, p) for p in range(len(KINDS))]
    wait_for(lambda: victim_in_sync(cluster, victim, keys), HEAL_S, "in sync")
    log = new_log(damaged)
    assert f"replica deleted {TOPIC}/" not in log
    healed = {p for p in range(len(KINDS)) if KINDS[p] in HEALING}
    assert log.count("healed: a voter again") >= len(healed)


@pytest.mark.parametrize("kind", KINDS)
def test_the_healed_replica_serves_every_acknowledged_record(damaged: Damaged, kind: str) -> None:
    cluster, victim = damaged.cluster, damaged.victim
    key = (TOPIC, KINDS.index(kind))
    wait_for(lambda: victim_in_sync(cluster, victim, [key]), HEAL_S, f"{key} in sync")
    expected = damaged.produced[key]

    def complete() -> bool:
        return len(fetch_all(cluster, victim, *key)) >= len(expected)

    wait_for(complete, HEAL_S, f"node2 to serve all of {key}")
    assert fetch_all(cluster, victim, *key) == expected


def test_the_consumer_reads_every_acknowledged_record(damaged: Damaged) -> None:
    cluster = damaged.cluster
    total = sum(len(values) for values in damaged.produced.values())
    read: dict[tuple[str, int], list[bytes]] = {key: [] for key in damaged.produced}
    with Consumer(bootstrap(cluster)) as consumer:
        consumer.assign(list(damaged.produced))
        for count, record in enumerate(consumer.records(timeout_s=20), start=1):
            assert record.value is not None
            read[record.topic, record.partition].append(record.value)
            if count >= total:
                break
    assert read == damaged.produced
