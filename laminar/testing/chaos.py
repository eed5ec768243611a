"""Chaos runs (design §9, tier 5): real nodes, real faults, a final full read.

Theory of operation. A chaos run needs root and happens in two processes:

* the *outer* side (the pytest test, or anyone) creates a private network namespace
  with :class:`NetworkNamespace`, runs ``ip netns exec NAME python -m
  laminar.testing.chaos ...`` inside it, and afterwards kills every process left in
  the namespace and deletes it. Nothing a run does can reach the host's network.
* the *inner* side (:func:`main`, refusing to run outside the namespace it is given)
  starts a :class:`~laminar.testing.processes.ProcessCluster` of nodes on
  127.0.0.11, .12, ... (127.0.0.1 stays the client's source address), creates a
  topic with acks=all writers, and plays a seeded :class:`FaultPlan`: SIGKILL of a
  partition's leader (then a restart), SIGSTOP/SIGCONT of one, isolation of one,
  a 2/3 split, and disk damage (SIGKILL of a node holding a replica of the
  partition, a byte flipped in a batch of a sealed segment of that replica, a
  restart: the replica must be set aside and heal from its peers). Meanwhile a
  :class:`Workload` writes unique values (``w{writer}-{sequence}``) with one
  :class:`~laminar_client.IdempotentProducer` per writer and records every
  acknowledgement with its partition and offset. After the plan, every fault is
  healed, the run waits (with deadlines) until every partition takes writes again
  and every replica agrees, reads every partition from *every* node that holds a
  copy and hands the reads to :func:`check`.

Partitions are nft rules in the namespace (:class:`Firewall`, table
``inet laminar_chaos``): a cut between address groups A and B drops packets from A's
addresses to B's and back; the client (source 127.0.0.1) still reaches every node,
as a client beyond the partition would, so an isolated leader still gets writes. The
rules sit on the ``input`` hook so that a dropped packet vanishes silently as on a
real network (dropped on ``output``, the sender's ``send``/``connect`` would fail at
once with EPERM). A cut by address holds only for sockets bound to their node's
address: one that is not leaves from 127.0.0.1 and passes. The run counts such
connections to gossip and peer ports (:func:`unattributed_peer_connections`) and
reports the most it saw. An isolated node also gets its gossip and peer ports closed
to every other source, which cuts what reaches it whatever the sources (what it
sends from an unbound socket still leaves).

:func:`check` is pure: acknowledgements and replica reads in, :class:`Findings` out
(lost, duplicated, misplaced, divergent and unknown records). :func:`write_gaps`
finds the longest time each partition went without an acknowledged write.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from laminar_client import Client, IdempotentProducer

from laminar.errors import LaminarError
from laminar.records import HEADER_BYTES, iter_batches, next_offset, parse_header
from laminar.segment.layout import NOTE_FILE
from laminar.testing.processes import (
    GOSSIP_PORT,
    PEER_PORT,
    NodeProcess,
    ProcessCluster,
    wait_for,
)
from laminar.v1 import laminar_pb2 as pb

NODE_HOST_BASE = 11
"""Node ``i`` listens on ``127.0.0.<NODE_HOST_BASE + i>``; 127.0.0.1, the source
address of sockets nobody bound (the client's), belongs to no node."""
NFT_TABLE = "laminar_chaos"
TOPIC = "chaos"
FAULT_KINDS = ("kill", "pause", "isolate", "split", "damage")
HOLD_RANGE_S = {
    "kill": (2.0, 13.0),
    "pause": (1.0, 8.0),
    "isolate": (2.0, 10.0),
    "split": (2.0, 10.0),
    "damage": (1.0, 5.0),
}
"""How long each kind of fault lasts, uniformly drawn. A kill held past the node's
``replica_move_grace_ms`` (10 s in the local preset) makes placement move the dead
node's partitions away; a damaged node is back well within it, so that its replica
heals rather than moves."""
SEGMENT_BYTES_MAX = 65_536
"""The nodes' segment size: small, so that a partition has sealed segments to damage
within seconds of writes (and the run rolls segments often)."""
QUIET_RANGE_S = (1.0, 4.0)
"""Fault-free time after each heal."""
EXAMPLES_MAX = 10
"""Examples of each kind of finding kept in a report (the counts are complete)."""


# --------------------------------------------------------------------------- namespace


def in_network_namespace(name: str) -> bool:
    """Whether this process runs in the network namespace ``ip netns`` calls ``name``."""
    try:
        named = os.stat(f"/run/netns/{name}")
        own = os.stat("/proc/self/ns/net")
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (own.st_dev, own.st_ino)


def chaos_unsupported_reason() -> str | None:
    """Why this machine cannot run chaos tests, or None when it can."""
    if os.geteuid() != 0:
        return "chaos tests need root (network namespaces and nft)"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return f"chaos tests need {' and '.join(missing)} (apt-get install iproute2 nftables)"
    return None


class NetworkNamespace:
    """A named network namespace with loopback up; :meth:`delete` kills what is left in
    it (by pid) and removes it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> NetworkNamespace:
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        try:
            self.run(["ip", "link", "set", "lo", "up"])
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str]) -> None:
        subprocess.run(self.command(argv), check=True)

    def pids(self) -> list[int]:
        result = subprocess.run(
            ["ip", "netns", "pids", self.name], capture_output=True, text=True, check=False
        )
        return [int(word) for word in result.stdout.split()]

    def kill_all(self, timeout_s: float = 20) -> None:
        """SIGKILL every process in the namespace and wait until none is left."""

        def empty() -> bool:
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return not pids

        wait_for(empty, timeout_s, f"the processes in namespace {self.name} to exit")

    def delete(self) -> None:
        try:
            self.kill_all()
        finally:
            subprocess.run(["ip", "netns", "delete", self.name], check=False)


# --------------------------------------------------------------------------- firewall


@dataclass(frozen=True, slots=True)
class Cut:
    """Traffic between every address of ``side_a`` and every address of ``side_b`` is
    dropped; ``closed`` addresses also drop gossip and peer packets from any source
    but themselves (for sockets that leave from the unbound source address)."""

    side_a: tuple[str, ...]
    side_b: tuple[str, ...]
    closed: tuple[str, ...] = ()


def nft_ruleset(cut: Cut | None) -> str:
    """The whole ``inet laminar_chaos`` table for ``cut`` (None: empty, traffic flows)."""
    lines = [
        f"table inet {NFT_TABLE}",
        f"delete table inet {NFT_TABLE}",
        f"table inet {NFT_TABLE} {{",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
    ]
    if cut is not None:
        side_a = ", ".join(cut.side_a)
        side_b = ", ".join(cut.side_b)
        lines.append(f"    ip saddr {{ {side_a} }} ip daddr {{ {side_b} }} drop")
        lines.append(f"    ip saddr {{ {side_b} }} ip daddr {{ {side_a} }} drop")
        ports = f"{GOSSIP_PORT}, {PEER_PORT}"
        for address in cut.closed:
            lines.append(
                f"    ip daddr {address} ip saddr != {address} "
                f"meta l4proto {{ tcp, udp }} th dport {{ {ports} }} drop"
            )
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


class Firewall:
    """nft rules of this process's network namespace, which must be the private one
    called ``namespace`` (so that a mistake cannot touch the host's rules)."""

    def __init__(self, namespace: str) -> None:
        if not in_network_namespace(namespace):
            raise RuntimeError(f"refusing to change nft rules outside namespace {namespace}")
        self.cut: Cut | None = None

    def apply(self, cut: Cut | None) -> None:
        """Replace the rules atomically (one nft transaction)."""
        subprocess.run(["nft", "-f", "-"], input=nft_ruleset(cut).encode(), check=True)
        self.cut = cut

    def remove(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", NFT_TABLE], check=False)
        self.cut = None


def unattributed_peer_connections(node_hosts: Sequence[str]) -> dict[int, int]:
    """Per port (gossip, peer): established TCP connections to a node's port that
    leave from an address that is not a node's, which address rules cannot place."""
    nodes = set(node_hosts)
    counts = dict.fromkeys((GOSSIP_PORT, PEER_PORT), 0)
    for local, remote in _established_tcp():
        local_host, _ = local
        remote_host, remote_port = remote
        if remote_host in nodes and remote_port in counts and local_host not in nodes:
            counts[remote_port] += 1
    return counts


def _established_tcp() -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    with contextlib.suppress(OSError), open("/proc/self/net/tcp", encoding="ascii") as file:
        for line in list(file)[1:]:
            words = line.split()
            if len(words) > 3 and words[3] == "01":  # TCP_ESTABLISHED
                yield _address(words[1]), _address(words[2])


def _address(text: str) -> tuple[str, int]:
    host_hex, port_hex = text.split(":")
    host = ".".join(str(byte) for byte in reversed(bytes.fromhex(host_hex)))
    return host, int(port_hex, 16)


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One planned fault. ``partition`` picks the leader to kill, pause or isolate
    (``node`` if it has none); ``minority`` the two node indexes split from the rest."""

    kind: str
    hold_s: float
    quiet_s: float
    node: int = 0
    partition: int = 0
    minority: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class FaultPlan:
    seed: int
    faults: tuple[FaultSpec, ...]

    @classmethod
    def generate(
        cls, seed: int, duration_s: float, node_count: int, partition_count: int
    ) -> FaultPlan:
        """Faults until their hold and quiet times add up to ``duration_s``; the same
        seed and arguments always give the same plan."""
        rng = random.Random(seed)
        faults: list[FaultSpec] = []
        planned_s = 0.0
        while planned_s < duration_s:
            kind = rng.choice(FAULT_KINDS)
            fault = FaultSpec(
                kind=kind,
                hold_s=round(rng.uniform(*HOLD_RANGE_S[kind]), 1),
                quiet_s=round(rng.uniform(*QUIET_RANGE_S), 1),
                node=rng.randrange(node_count),
                partition=rng.randrange(partition_count),
                minority=tuple(sorted(rng.sample(range(node_count), 2))),
            )
            faults.append(fault)
            planned_s += fault.hold_s + fault.quiet_s
        if all(fault.kind != "damage" for fault in faults):
            # Every run damages a disk at least once, midway (segments are sealed by
            # then): one more fault, so the plan runs over by its hold and quiet.
            hold_s = round(rng.uniform(*HOLD_RANGE_S["damage"]), 1)
            damage = replace(faults[0], kind="damage", hold_s=hold_s)
            faults.insert(len(faults) // 2, damage)
        return cls(seed, tuple(faults))


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """A fault as applied: what, to whom, and when (seconds since the run began)."""

    kind: str
    target: str
    started_s: float
    healed_s: float
    failover_s: float | None = None
    """For a faulty leader: how long until another node said it led the partition
    (None: nobody did before the heal)."""


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class Ack:
    partition: int
    offset: int
    value: bytes
    at_s: float


@dataclass
class WorkloadLog:
    acks: list[Ack] = field(default_factory=list)
    uncertain: list[bytes] = field(default_factory=list)
    sent: set[bytes] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    """The first :data:`EXAMPLES_MAX` failed sends: when, where, why."""
    crashes: list[str] = field(default_factory=list)
    """Writers that died of an unexpected exception (a bug in the client or here)."""
    last_ack_s: dict[int, float] = field(default_factory=dict)
    slowest_send_s: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Per partition: the longest acknowledged send and when it began."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked_since(self, partition: int, moment_s: float) -> bool:
        with self.lock:
            return self.last_ack_s.get(partition, -1.0) > moment_s


class Workload:
    """``writer_count`` threads; writer ``w`` sends batches of unique values to partition
    ``w % partition_count`` with its own idempotent producer, acks=all."""

    def __init__(
        self,
        client: Client,
        topic: str,
        partition_count: int,
        writer_count: int,
        clock_s: ClockS,
        *,
        batch_records: int = 4,
        send_timeout_s: float = 10.0,
        sends_per_s_max: float = 0.0,
    ) -> None:
        self.client = client
        self.topic = topic
        self.partition_count = partition_count
        self.clock_s = clock_s
        self.batch_records = batch_records
        self.send_timeout_s = send_timeout_s
        self.send_interval_s = 1.0 / sends_per_s_max if sends_per_s_max > 0 else 0.0
        self.log = WorkloadLog()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._write, args=(writer,), name=f"writer{writer}")
            for writer in range(writer_count)
        ]
        self.started_s = 0.0
        self.stopped_s = 0.0

    def start(self) -> None:
        self.started_s = self.clock_s()
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(self.send_timeout_s + 30)
            if thread.is_alive():
                raise RuntimeError(f"{thread.name} did not stop")
        self.stopped_s = self.clock_s()

    def _write(self, writer: int) -> None:
        try:
            self._write_until_stopped(writer)
        except Exception:
            with self.log.lock:
                self.log.crashes.append(f"writer{writer}: {traceback.format_exc()}")
            raise

    def _write_until_stopped(self, writer: int) -> None:
        partition = writer % self.partition_count
        producer = IdempotentProducer(self.client)
        sequence = 0
        log = self.log
        next_send_s = self.clock_s()
        while not self.stop.is_set():
            if self.send_interval_s:
                # Pacing, which bounds the run's memory (every value is kept to the end).
                wait_s = next_send_s - self.clock_s()
                if wait_s > 0 and self.stop.wait(wait_s):
                    break
                next_send_s = max(next_send_s, self.clock_s()) + self.send_interval_s
            values = [f"w{writer}-{sequence + i}".encode() for i in range(self.batch_records)]
            sequence += len(values)
            with log.lock:
                log.sent.update(values)
            sent_s = self.clock_s()
            try:
                base_offset = producer.send(
                    self.topic, partition, values, acks="all", timeout_s=self.send_timeout_s
                )
            except LaminarError as error:
                with log.lock:
                    log.uncertain.extend(values)
                    name = type(error).__name__
                    log.errors[name] = log.errors.get(name, 0) + 1
                    if len(log.failures) < EXAMPLES_MAX:
                        at_s = self.clock_s()
                        log.failures.append(f"{at_s:.2f}s p{partition} {name}: {error}"[:300])
                continue
            at_s = self.clock_s()
            with log.lock:
                log.acks.extend(
                    Ack(partition, base_offset + index, value, at_s)
                    for index, value in enumerate(values)
                )
                log.last_ack_s[partition] = at_s
                slowest = log.slowest_send_s.get(partition, (0.0, 0.0))
                log.slowest_send_s[partition] = max(slowest, (at_s - sent_s, sent_s))


class ClockS:
    """Seconds since the run began (monotonic)."""

    def __init__(self) -> None:
        self.origin_s = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.origin_s


# --------------------------------------------------------------------------- checker


@dataclass(frozen=True, slots=True)
class ReplicaRead:
    """Everything one node served for a partition: (offset, value) below its high
    watermark, in offset order."""

    node: str
    high_watermark: int
    records: tuple[tuple[int, bytes], ...]


@dataclass
class Findings:
    """What the final reads contradict; every list empty means the run was correct.

    ``lost``: acknowledged values no node serves. ``duplicated``: values stored at
    more than one (partition, offset). ``misplaced``: acknowledged values served,
    but never at the partition and offset they were acknowledged with.
    ``divergent``: offsets below the partition's lowest replica high watermark where
    replicas serve different values (or one serves none). ``unknown``: values the
    workload never sent. Each list keeps at most :data:`EXAMPLES_MAX` examples;
    ``counts`` has the totals.
    """

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        examples: list[str] = getattr(self, kind)
        if len(examples) < EXAMPLES_MAX:
            examples.append(example)

    @property
    def clean(self) -> bool:
        return not self.counts


def check(
    acks: Sequence[Ack],
    sent: set[bytes],
    reads: Mapping[int, Sequence[ReplicaRead]],
) -> Findings:
    """Compare the acknowledgements with every replica's final read (see
    :class:`Findings`)."""
    findings = Findings()
    # Most values sit at one place: keep one tuple for those, a set only for the rest.
    first_place: dict[bytes, tuple[int, int]] = {}
    more_places: dict[bytes, set[tuple[int, int]]] = {}
    for partition in sorted(reads):
        replicas = reads[partition]
        for read in replicas:
            for offset, value in read.records:
                place = (partition, offset)
                seen = first_place.setdefault(value, place)
                if seen != place:
                    more_places.setdefault(value, {seen}).add(place)
        _check_agreement(partition, replicas, findings)

    def places_of(value: bytes) -> list[tuple[int, int]]:
        if value in more_places:
            return sorted(more_places[value])
        return [first_place[value]] if value in first_place else []

    for value in sorted(more_places):
        findings.add("duplicated", f"{value!r} at {places_of(value)}")
    for value in sorted(value for value in first_place if value not in sent):
        findings.add("unknown", f"{value!r} at {places_of(value)}")
    for ack in acks:
        where = places_of(ack.value)
        acked_at = f"{ack.partition}/{ack.offset}"
        if not where:
            findings.add("lost", f"{ack.value!r} acked at {acked_at}")
        elif (ack.partition, ack.offset) not in where:
            findings.add("misplaced", f"{ack.value!r} acked at {acked_at}, found at {where}")
    return findings


def _check_agreement(partition: int, replicas: Sequence[ReplicaRead], findings: Findings) -> None:
    """Every replica against the first, below the lowest high watermark of them all."""
    if len(replicas) < 2:
        return
    floor = min(read.high_watermark for read in replicas)
    reference, *others = replicas
    expected = {offset: value for offset, value in reference.records if offset < floor}
    for other in others:
        unseen = set(expected)
        for offset, value in other.records:
            if offset >= floor:
                break
            unseen.discard(offset)
            if expected.get(offset) != value:
                findings.add(
                    "divergent",
                    f"{partition}/{offset}: {reference.node}={expected.get(offset)!r} "
                    f"{other.node}={value!r}",
                )
        for offset in sorted(unseen):
            findings.add(
                "divergent",
                f"{partition}/{offset}: {reference.node}={expected[offset]!r} {other.node}=None",
            )


@dataclass(frozen=True, slots=True)
class Gap:
    """The longest stretch without an acknowledged write on one partition."""

    partition: int
    length_s: float
    from_s: float
    to_s: float


def write_gaps(
    acks: Sequence[Ack], partition_count: int, started_s: float, stopped_s: float
) -> list[Gap]:
    """Per partition, the longest time between consecutive acknowledgements (the run's
    start and the workload's stop count as boundaries)."""
    times: dict[int, list[float]] = defaultdict(list)
    for ack in acks:
        times[ack.partition].append(ack.at_s)
    gaps = []
    for partition in range(partition_count):
        moments = [started_s, *sorted(set(times[partition])), stopped_s]
        longest = max(itertools.pairwise(moments), key=lambda pair: pair[1] - pair[0])
        gaps.append(Gap(partition, longest[1] - longest[0], longest[0], longest[1]))
    return gaps


def gaps_by_fault_kind(
    acks: Sequence[Ack], events: Sequence[FaultEvent], started_s: float, stopped_s: float
) -> dict[str, float]:
    """For each fault kind, the longest gap between acknowledgements of one partition
    that overlaps a fault of that kind (from its start to its heal); ``none`` for gaps
    that overlap no fault."""
    longest: dict[str, float] = {}
    for length_s, overlapped in _gaps(acks, events, started_s, stopped_s):
        for kind in {events[i].kind for i in overlapped} or {"none"}:
            longest[kind] = max(longest.get(kind, 0.0), length_s)
    return dict(sorted(longest.items()))


def gaps_by_fault(
    acks: Sequence[Ack], events: Sequence[FaultEvent], started_s: float, stopped_s: float
) -> list[float]:
    """For each fault, the longest gap of any partition that overlaps it."""
    longest = [0.0] * len(events)
    for length_s, overlapped in _gaps(acks, events, started_s, stopped_s):
        for index in overlapped:
            longest[index] = max(longest[index], length_s)
    return longest


def _gaps(
    acks: Sequence[Ack], events: Sequence[FaultEvent], started_s: float, stopped_s: float
) -> Iterator[tuple[float, list[int]]]:
    """Every gap between consecutive acknowledgements of a partition, with the indexes
    of the faults it overlaps."""
    times: dict[int, set[float]] = defaultdict(set)
    for ack in acks:
        times[ack.partition].add(ack.at_s)
    for partition in sorted(times):
        moments = [started_s, *sorted(times[partition]), stopped_s]
        for begin_s, end_s in itertools.pairwise(moments):
            overlapped = [
                index
                for index, event in enumerate(events)
                if event.started_s < end_s and begin_s < event.healed_s
            ]
            yield end_s - begin_s, overlapped


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True, slots=True)
class RunOptions:
    seed: int
    duration_s: float
    root: Path
    namespace: str
    """The private network namespace the run must be in (``ip netns`` name)."""
    node_count: int = 5
    partition_count: int = 6
    writer_count: int = 6
    writer_sends_per_s_max: float = 100.0
    """Pacing of each writer (0: none). Every value sent, acknowledged and read back is
    kept in memory to the end, about 0.7 KB each: 6 writers of 4-value batches at 100
    sends/s add at most 2,400 values (~1.7 MB) per second of run."""
    settle_timeout_s: float = 90.0
    secure: bool = True
    """Run the cluster as an operator would secure it (TLS, encrypted gossip,
    authorization: ``ProcessCluster(secure=True)``); ``--plain`` turns it off."""


class ChaosRun:
    """The inner side: cluster, workload and faults inside a private namespace."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.clock_s = ClockS()
        self.cluster = ProcessCluster(
            options.root,
            host_base=NODE_HOST_BASE,
            secure=options.secure,
            node_config=f"[log]\nsegment_bytes_max = {SEGMENT_BYTES_MAX}\n",
        )
        self.firewall = Firewall(options.namespace)
        self.events: list[FaultEvent] = []
        self.notes: list[str] = []
        self.unattributed_max: dict[int, int] = {}
        self.unreadable: list[str] = []
        self.damaged: list[str] = []
        """``node:topic/partition`` of each replica given a damaged segment."""

    def say(self, text: str) -> None:
        print(f"[chaos {self.clock_s():7.2f}s] {text}", flush=True)

    # ------------------------------------------------------------------ cluster

    def start_cluster(self) -> None:
        self.options.root.mkdir(parents=True, exist_ok=True)
        first = self.cluster.add_node(bootstrap=True)
        self.cluster.wait_ready(first, 60)
        for _ in range(self.options.node_count - 1):
            node = self.cluster.add_node()
            self.cluster.wait_ready(node, 60)
        self.wait_members(60)

    def node_id(self, node: NodeProcess) -> str:
        return f"node{node.index}"

    def wait_members(self, timeout_s: float) -> None:
        expected = {self.node_id(node) for node in self.cluster.nodes}

        def agree() -> bool:
            for node in self.cluster.nodes:
                response = self.cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
                alive = {m.node_id for m in response.members if m.state == "alive"}
                if alive != expected:
                    return False
            return True

        wait_for(agree, timeout_s, f"every node to see {sorted(expected)} alive")

    def leader_of(self, partition: int, excluded: NodeProcess | None = None) -> NodeProcess | None:
        """A running node that says it leads ``partition`` (None if none answers so)."""
        for node in self.cluster.nodes:
            if not node.running or node is excluded:
                continue
            with contextlib.suppress(Exception):
                response = self.cluster.stub(node).Metadata(
                    pb.MetadataRequest(topics=[TOPIC]), timeout=1
                )
                info = response.topics[0].partitions[partition]
                if info.leader == response.node_id:
                    return node
        return None

    # ------------------------------------------------------------------ faults

    def apply(self, fault: FaultSpec) -> None:
        nodes = self.cluster.nodes
        started_s = self.clock_s()
        leader: NodeProcess | None = None
        if fault.kind in ("kill", "pause", "isolate"):
            leader = self.leader_of(fault.partition)
            victim = leader if leader is not None else nodes[fault.node]
            role = f"leader of {fault.partition}" if leader is not None else "no leader found"
            target = f"{self.node_id(victim)} ({role})"
        else:
            victim = nodes[fault.node]
            target = self.node_id(victim)
        if fault.kind == "damage":
            victim, target = self._damage(fault)
        elif fault.kind == "kill":
            self.cluster.kill(victim)
        elif fault.kind == "pause":
            self._signal(victim, signal.SIGSTOP)
        elif fault.kind == "isolate":
            others = tuple(n.host for n in nodes if n is not victim)
            self.firewall.apply(Cut((victim.host,), others, closed=(victim.host,)))
        else:
            minority = tuple(nodes[i].host for i in fault.minority)
            majority = tuple(n.host for n in nodes if n.host not in minority)
            self.firewall.apply(Cut(minority, majority))
            target = " ".join(f"node{i}" for i in fault.minority) + " | rest"
        self.say(f"{fault.kind} {target} for {fault.hold_s} s")
        failover_s = self._hold(fault.hold_s, fault.partition, leader)
        self.heal()
        healed_s = self.clock_s()
        if failover_s is not None:
            failover_s -= started_s
        self.events.append(FaultEvent(fault.kind, target, started_s, healed_s, failover_s))
        self._hold(fault.quiet_s)

    def _damage(self, fault: FaultSpec) -> tuple[NodeProcess, str]:
        """Kill a node holding a replica of ``fault.partition`` with a sealed segment
        (the ``fault.node``-th such node, cyclically), and flip a byte in the payload
        of the middle batch of its middle sealed segment; the restart in
        :meth:`heal` must find it. A plain kill when no replica has a sealed segment."""
        holders = [
            (node, logs)
            for node in self.cluster.nodes
            if node.running and len(logs := node.segment_files(TOPIC, fault.partition)) >= 2
        ]
        if not holders:
            victim = self.cluster.nodes[fault.node]
            self.cluster.kill(victim)
            return victim, f"{self.node_id(victim)} (no sealed segment yet: killed only)"
        victim, _ = holders[fault.node % len(holders)]
        self.cluster.kill(victim)
        # Listed again once it is down: a segment may have rolled meanwhile.
        logs = victim.segment_files(TOPIC, fault.partition)
        segment = logs[(len(logs) - 1) // 2]  # never the last (active) one
        data = bytearray(segment.read_bytes())
        positions = [position for position, _ in iter_batches(bytes(data), verify=False)]
        position = positions[len(positions) // 2]
        header = parse_header(data, position)
        flipped = position + HEADER_BYTES + (header.length - HEADER_BYTES) // 2
        data[flipped] ^= 0x10
        segment.write_bytes(bytes(data))
        self.damaged.append(f"{self.node_id(victim)}:{TOPIC}/{fault.partition}")
        return victim, (
            f"{self.node_id(victim)} ({TOPIC}/{fault.partition} {segment.name} byte {flipped})"
        )

    def heal(self) -> None:
        """Drop every rule, resume every paused node, restart every killed one."""
        self.firewall.apply(None)
        for node in self.cluster.nodes:
            if node.running:
                self._signal(node, signal.SIGCONT)
        for node in self.cluster.nodes:
            if not node.running:
                self.cluster.start(node)
                self.cluster.wait_ready(node, 60)

    def _signal(self, node: NodeProcess, signum: signal.Signals) -> None:
        if node.process is not None and node.running:
            node.process.send_signal(signum)

    def _hold(
        self, seconds: float, partition: int = 0, leader: NodeProcess | None = None
    ) -> float | None:
        """Let a fault (or the quiet after it) last; sample the connections meanwhile.
        With the faulty ``leader`` of ``partition``: when another node took over."""
        hosts = [node.host for node in self.cluster.nodes]
        deadline_s = self.clock_s() + seconds
        failover_s: float | None = None
        while self.clock_s() < deadline_s:
            for port, count in unattributed_peer_connections(hosts).items():
                self.unattributed_max[port] = max(self.unattributed_max.get(port, 0), count)
            watching = leader is not None and failover_s is None
            if watching and self.leader_of(partition, excluded=leader) is not None:
                failover_s = self.clock_s()
            time.sleep(min(0.2, max(0.0, deadline_s - self.clock_s())))
        return failover_s

    # ------------------------------------------------------------------ settling

    def wait_writes_everywhere(self, log: WorkloadLog, since_s: float) -> None:
        partitions = range(self.options.partition_count)
        wait_for(
            lambda: log.crashes or all(log.acked_since(p, since_s) for p in partitions),
            self.options.settle_timeout_s,
            f"every partition to acknowledge a write after {since_s:.1f} s",
        )
        if log.crashes:
            raise RuntimeError(f"a writer crashed: {log.crashes[0]}")

    def wait_settled(self, client: Client) -> None:
        """Every node sees every node alive; every partition has a leader whose voters
        equal placement; every replica's high watermark is the same."""
        self.wait_members(self.options.settle_timeout_s)

        def replicas_agree() -> bool:
            description = client.describe_cluster(timeout_s=5)
            healths = {h.partition: h for h in description.partitions if h.topic == TOPIC}
            if sorted(healths) != list(range(self.options.partition_count)):
                return False
            for partition, health in healths.items():
                if health.leader is None or health.under_replicated:
                    return False
                if set(health.voters) != set(health.replicas):
                    return False
                marks = {
                    client.fetch(
                        TOPIC, partition, 0, max_bytes=1, replica=r, timeout_s=5
                    ).high_watermark
                    for r in health.replicas
                }
                if len(marks) != 1:
                    return False
            return True

        wait_for(replicas_agree, self.options.settle_timeout_s, "replicas to agree")

    def read_everything(self, client: Client) -> dict[int, list[ReplicaRead]]:
        """Every partition from every node that holds a copy of it (by its own word: a
        Metadata answer gives a high watermark for the partitions the node holds)."""
        reads: dict[int, list[ReplicaRead]] = {p: [] for p in range(self.options.partition_count)}
        for node in self.cluster.nodes:
            response = self.cluster.stub(node).Metadata(
                pb.MetadataRequest(topics=[TOPIC]), timeout=10
            )
            for info in response.topics[0].partitions:
                if info.high_watermark < 0:
                    continue
                try:
                    read = read_replica(client, TOPIC, info.partition, node.grpc)
                except LaminarError as error:
                    self.unreadable.append(f"{TOPIC}/{info.partition} on {node.grpc}: {error}")
                    continue
                reads[info.partition].append(read)
        return reads

    # ------------------------------------------------------------------ main

    def run(self) -> dict[str, object]:
        options = self.options
        plan = FaultPlan.generate(
            options.seed, options.duration_s, options.node_count, options.partition_count
        )
        self.say(f"seed={options.seed} duration_s={options.duration_s} faults={len(plan.faults)}")
        self.firewall.apply(None)
        self.start_cluster()
        bootstrap = [node.grpc for node in self.cluster.nodes]
        secured = self.cluster.client_options()
        self.say(f"secure={options.secure} (TLS, encrypted gossip, authorization)")
        with (
            Client(bootstrap, timeout_s=15, **secured) as client,
            Client(bootstrap, timeout_s=15, **secured) as reader,
        ):
            client.create_topic(TOPIC, options.partition_count, 3)
            wait_for(
                lambda: all(self.leader_of(p) for p in range(options.partition_count)),
                60,
                "a leader for every partition",
            )
            workload = Workload(
                client,
                TOPIC,
                options.partition_count,
                options.writer_count,
                self.clock_s,
                sends_per_s_max=options.writer_sends_per_s_max,
            )
            workload.start()
            try:
                self.wait_writes_everywhere(workload.log, 0.0)
                self.say("workload running; faults begin")
                for fault in plan.faults:
                    self.apply(fault)
                self.heal()
                healed_s = self.clock_s()
                self.say("healed; waiting for writes on every partition")
                self.wait_writes_everywhere(workload.log, healed_s)
            finally:
                workload.finish()
            self.say("workload stopped; waiting for replicas to agree")
            settled = True
            try:
                self.wait_settled(reader)
            except TimeoutError as error:
                settled = False
                self.notes.append(str(error))
                self.say(f"not settled: {error}")
            reads = self.read_everything(reader)
        log = workload.log
        findings = check(log.acks, log.sent, reads)
        return self.report(plan, workload, reads, findings, settled)

    def report(
        self,
        plan: FaultPlan,
        workload: Workload,
        reads: Mapping[int, Sequence[ReplicaRead]],
        findings: Findings,
        settled: bool,
    ) -> dict[str, object]:
        log = workload.log
        started_s, stopped_s = workload.started_s, workload.stopped_s
        return {
            "seed": plan.seed,
            "secure": self.options.secure,
            "duration_s": self.options.duration_s,
            "workload_s": round(stopped_s - started_s, 1),
            "acks": len(log.acks),
            "sends_failed": dict(sorted(log.errors.items())),
            "uncertain_values": len(log.uncertain),
            "failed_sends": log.failures,
            "writer_crashes": log.crashes,
            "faults": [
                asdict(event) | {"longest_write_gap_s": round(gap_s, 2)}
                for event, gap_s in zip(
                    self.events,
                    gaps_by_fault(log.acks, self.events, started_s, stopped_s),
                    strict=True,
                )
            ],
            "write_gap_s_by_partition": {
                gap.partition: [round(gap.length_s, 2), round(gap.from_s, 1)]
                for gap in write_gaps(log.acks, self.options.partition_count, started_s, stopped_s)
            },
            "slowest_send_s_by_partition": {
                partition: [round(length_s, 2), round(at_s, 1)]
                for partition, (length_s, at_s) in sorted(log.slowest_send_s.items())
            },
            "write_gap_s_by_fault_kind": {
                kind: round(length_s, 2)
                for kind, length_s in gaps_by_fault_kind(
                    log.acks, self.events, started_s, stopped_s
                ).items()
            },
            "replicas_read": {
                partition: {r.node: r.high_watermark for r in replicas}
                for partition, replicas in reads.items()
            },
            "unattributed_peer_connections_max": self.unattributed_max,
            "settled": settled,
            "unreadable": self.unreadable,
            "damaged": self.damaged,
            "quarantined": self.quarantined(),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "notes": self.notes,
            "findings": asdict(findings),
        }

    def quarantined(self) -> list[str]:
        """``node:topic/partition`` of each replica a node set damage aside for."""
        found = []
        for node in self.cluster.nodes:
            for note in sorted(node.quarantine_dir.glob(f"*/*/*/{NOTE_FILE}")):
                found.append(f"{self.node_id(node)}:{json.loads(note.read_text())['replica']}")
        return found

    def close(self) -> None:
        try:
            self.firewall.remove()
            for node in self.cluster.nodes:
                self._signal(node, signal.SIGCONT)
        finally:
            self.cluster.close()


def read_replica(client: Client, topic: str, partition: int, address: str) -> ReplicaRead:
    """Everything the node at ``address`` serves of the partition."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        result = client.fetch(topic, partition, offset, replica=address, timeout_s=10)
        for record in result.records(offset):
            if record.offset < result.high_watermark:
                records.append((record.offset, record.value or b""))
        if result.batches:
            offset = max(offset, next_offset(result.batches))
        if offset >= result.high_watermark or not result.batches:
            return ReplicaRead(result.served_by, result.high_watermark, tuple(records))


def main(argv: list[str] | None = None) -> int:
    """``ip netns exec NAME python -m laminar.testing.chaos --netns NAME --seed N
    --duration S --root DIR --report FILE``, as root."""
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.chaos")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True, help="seconds of faults")
    parser.add_argument("--root", type=Path, required=True, help="directory for node data")
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--netns", required=True, help="the private network namespace this runs in")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--writers", type=int, default=6)
    parser.add_argument(
        "--writer-rate", type=float, default=100.0, help="sends per second per writer, 0: no limit"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="run the cluster without TLS, gossip encryption and authorization",
    )
    args = parser.parse_args(argv)
    if not in_network_namespace(args.netns):
        print(f"chaos: run me inside network namespace {args.netns}", file=sys.stderr)
        return 2
    options = RunOptions(
        seed=args.seed,
        duration_s=args.duration,
        root=args.root,
        namespace=args.netns,
        node_count=args.nodes,
        partition_count=args.partitions,
        writer_count=args.writers,
        writer_sends_per_s_max=args.writer_rate,
        secure=not args.plain,
    )
    run = ChaosRun(options)
    try:
        report = run.run()
    except BaseException:
        for node in run.cluster.nodes:
            print(f"----- {node.log_path} (last lines)", flush=True)
            print(run.cluster.log_tail(node, 40), flush=True)
        raise
    finally:
        run.close()
    args.report.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
