"""Benchmark of consumer groups (issue 16): failover, join movement, commits, group reads.

Run: ``.venv/bin/python -m bench.group_bench [--quick] [--repeat N] [--only PHASES]``

Three nodes (``--preset local``, fsync on) run on 127.0.0.x
(:class:`~laminar.testing.processes.ProcessCluster`). Group members are OS
processes (:mod:`laminar.testing.group_member`: a ``Consumer`` with ``group=``
reading ``batches()``), which append what they do to an events file (one JSON
line per event, ``t`` from ``time.time()``, the clock this process reads too); the
bench reads those files as they grow and asks ``Client.describe_group`` for owners.
Topics have replication factor 3 and 100-byte values; every group id is new, so a
group starts with nothing committed (from the earliest offsets). Each figure is
the median of ``--repeat`` runs (default 3; ``--quick`` 1, and smaller sizes)
unless said otherwise:

* ``rebalance_s``: a group of 3 members (session timeout 3 s, rebalance timeout
  10 s, auto-commit: the members' defaults) reads a new topic of 12 partitions
  while a producer thread in this process writes one record to every partition
  every 10 ms (1,200 records/s). Once the group is settled (describe_group: stable,
  4 partitions each) and has read, in every partition, past a record written after
  that, one member gets SIGKILL. The figure is the time from the kill until every
  partition the dead member owned has been read again by a survivor: a "batch"
  event of a survivor for that partition, later than the kill, whose ``next`` is
  past the first record the producer sent after the kill. Target: <= session
  timeout + 1 s. Breakdown, same origin: ``rebalance_expired_s`` until
  describe_group (asked every 50 ms) no longer lists the dead member;
  ``rebalance_assigned_s`` until the survivors' "assigned" events cover all its
  partitions; ``rebalance_first_batch_s`` until the first of them is read again as
  above. The notes give how many records the group had not read yet at the kill.
  ``rebalance_s_explicit_commits``: the same with members that do not auto-commit
  but commit every 50 batches (``--no-auto-commit --commit-every-batches 50``).
  (Auto-commit used to send a synchronous commit each time the application asked
  for the next chunk, capping a member at one chunk per commit round trip: members
  fell behind the producer and read the moved partitions only after their
  backlog, 10-16 s. It now commits in the background; the two figures should be
  close.)
* ``join_moved_fraction``: a group of 3 members over a topic of 60 partitions,
  settled (stable, 20 each); a 4th member joins; once settled again (15 each) the
  partitions whose owner (describe_group) changed, divided by 60. Ideal 0.25,
  target <= 1.1 x 0.25. The value can depend on the group id and the member ids
  (the hash), so the figure is the *mean* over ``--join-groups`` groups (5;
  ``--quick`` 2), not a median of repeats; each group's value is listed.
  ``join_moved_between_old``: the mean number of partitions that moved from one
  old member to another (0 when a join moves only the joiner's share).
* ``commit_p99_ms``: one member (a ``Consumer`` with ``group=`` in this process,
  auto-commit off, alone in its group over a topic of 3 partitions) commits one
  partition's offset at a time through ``Consumer.commit({tp: offset})`` (one
  ``CommitOffsets`` call, appended with acks=all to the group's ``__groups``
  partition), ``--commits`` times (2,000; ``--quick`` 300), each waiting for its
  answer; the p99 of those latencies. ``produce_p99_ms``: in the same run as many
  single records through ``Producer.send_and_wait`` (acks=all, idempotent; the next
  sent after the ack) to the partition whose leader is the group's coordinator, so
  both append on the same node; the two series alternate in blocks of 100 so that
  drift of the machine hits both. ``commit_p99_vs_produce_p99`` = commit p99 /
  produce p99, target <= 1.5. The ``_p50_ms`` figures are the medians.
* ``group_consume_records_s``: 3 members join a new group subscribed to a topic
  that does not exist yet, and are SIGSTOPped; the topic (6 partitions) is
  created and ``--records`` records (3,000,000; ``--quick`` 1,000,000) written in
  batches of 1,000 (``Client.produce``, acks=all); the coordinator hands each
  member its 2 partitions meanwhile (describe_group: stable). The members are
  SIGCONTed together; the figure is records / the time from then until every
  partition has been read to its end (the largest ``next`` of the batch events
  reaches it). No member has a fetch in flight while stopped, and none reads
  before the others joined, so this is reading, not rebalancing (a group started on
  a full topic would have its first member read nearly everything before the
  others join). ``group_consume_records_s_one_member``: the same with one member;
  ``group_consume_three_vs_one``: the first over the second. The members here have
  a 30 s session timeout (they stay stopped while the records are written). Each
  run's note gives the time to the first batch and the CPU seconds of the members
  and of the nodes from the SIGCONT to the end (``/proc/<pid>/stat`` utime +
  stime), as a fraction of the machine's cores. What limits it on 2 cores: CPU.
  The members only frame the fetched batches (no record is decoded), so during the
  read the nodes serving the fetches and the members use about both cores (the
  printed fraction also counts the ~0.1 s before the first batch); 3 members spend
  more CPU than one on the same records (three processes, each with its own event
  loop, gRPC threads and heartbeats) and have no spare core to spread onto, so the
  group reads no faster than a single member here.

* ``zombie_records_after_resume`` (issue 27): members ``a`` (1 s of processing per
  batch) and ``b`` (both auto-commit, session 3 s) read a new topic of 4
  partitions while the steady producer writes to it; ``a`` is SIGSTOPped in the
  middle of a batch, ``b`` takes its partitions and reads them, then ``a`` is
  SIGCONTed. The figure counts the records ``a`` handed out after the SIGCONT of
  the partitions it held when stopped, before an ``assigned`` event gave each back
  (``laminar.testing.group_member.zombie_records``); target 0. Before the
  lease, a resumed member handed out what it had prefetched (134 records within
  36 ms in the issue's trial). ``zombie_lost_after_resume_s``: from the SIGCONT to
  ``a``'s ``on_lost``.
* ``close_commit_lag``: 3 members of a new group read a topic of 6 partitions
  (``--close-records`` records, 60,000; ``--quick`` 20,000) to its end and all
  close (SIGTERM); the figure is the group's lag then: the sum over partitions of
  high watermark - committed offset. Target 0. Auto-commit members, and
  ``close_commit_lag_commit_in_revoke``: members that commit only in
  ``on_revoked`` (``--no-auto-commit --commit-on-revoke``, as Kafka users write
  it; that commit used to raise during ``close()``).

* ``groups_log_bytes_after_1m_commits`` (issue 27): a cluster of its own; one
  member commits 1,000,000 offsets (``--compaction-commits``; ``--quick`` 100,000,
  and the figures are then named ``..._after_100k_commits``) through CommitOffsets,
  200 per call; the ``__groups`` bytes on the node holding the most, after the
  commits. Target <= 64 MiB (snapshots bound the log). ``groups_replay_s_...``:
  every node stopped and started again, the seconds until FetchOffsets returns
  every commit (process start and gossip included). Target <= 5 s. See
  :func:`compaction_run`.
* ``node_rss_growth_mb_per_hour_committing``: one auto-committing member reads a
  steady producer's records; every node's RSS is sampled over ``--rss-window-s``
  after a warm-up, the figure is the steepest node's slope (MB/h). Target <= 10.
  ``..._not_committing``: the same run with a member that never commits, the
  in-run baseline. See :func:`memory_run`.

The notes also give the load average before and after the run: the figures are
only as good as the machine is quiet.

Prints a table, the notes, the targets missed, then one JSON object as the last
line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from laminar_client import Client, Consumer, DeliveryFuture, Producer

from bench.client_bench import create_topic, start_cluster
from bench.report import load_average, machine_note, missed_targets, print_report, run_main
from laminar.errors import LaminarError, RetriableError
from laminar.groups.coordinator import HEARTBEATS_PER_SESSION
from laminar.groups.entries import Commit, encode_entry
from laminar.grpc_errors import error_from_rpc
from laminar.records import encode_batch
from laminar.segment import layout
from laminar.testing.group_member import GroupMemberProcess, zombie_records
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.tuning import tune_numpy
from laminar.v1 import laminar_pb2 as pb

VALUE_BYTES = 100
SESSION_TIMEOUT_S = 3.0
"""The members' session timeout in the failover and join runs."""
CONSUME_SESSION_TIMEOUT_S = 30.0
"""The members' session timeout in the read runs and the commit run: longer than
they stay SIGSTOPped while the records are written."""
SETTLE_TIMEOUT_S = 60.0
"""Longest wait for a group to settle, or for a run's end."""
EVENT_POLL_S = 0.05
"""How often the bench reads the events files (and describes the group)."""

REBALANCE_TOPIC = "group-rebalance"
REBALANCE_PARTITIONS = 12
REBALANCE_MEMBERS = 3
STEADY_TICK_S = 0.01
"""The failover run's producer writes one record to every partition this often."""
REBALANCE_VARIANTS: dict[str, dict[str, Any]] = {
    "rebalance_s": {},
    "rebalance_s_explicit_commits": {"auto_commit": False, "commit_every_batches": 50},
}
"""The members' options per failover figure: the defaults (auto-commit), and an
explicit commit every 50 batches instead."""
JOIN_TOPIC = "group-join"
JOIN_PARTITIONS = 60
JOIN_IDEAL_FRACTION = 0.25
COMMIT_TOPIC = "group-commit"
COMMIT_PARTITIONS = 3
COMMIT_BLOCK = 100
"""Commits (then produces) in a row before switching to the other series."""
CONSUME_TOPIC = "group-consume"
CONSUME_PARTITIONS = 6
CONSUME_MEMBERS = 3
BACKLOG_BATCH_RECORDS = 1000
"""Records per stored batch of the read runs (what a busy Producer makes: 100 KB)."""
BACKLOG_BATCHES_PER_CALL = 8

ZOMBIE_TOPIC = "group-zombie"
ZOMBIE_PARTITIONS = 4
ZOMBIE_DELAY_MS = 1000
"""The paused member's processing time per batch (the SIGSTOP lands in it)."""
CLOSE_TOPIC = "group-close"
CLOSE_PARTITIONS = CONSUME_PARTITIONS  # what write_backlog writes
CLOSE_MEMBERS = 3
CLOSE_VARIANTS: dict[str, dict[str, Any]] = {
    "close_commit_lag": {},
    "close_commit_lag_commit_in_revoke": {"auto_commit": False, "commit_on_revoke": True},
}

TARGETS: dict[str, tuple[str, float]] = {
    "rebalance_s": ("<=", SESSION_TIMEOUT_S + 1),
    "join_moved_fraction": ("<=", 1.1 * JOIN_IDEAL_FRACTION),
    "commit_p99_vs_produce_p99": ("<=", 1.5),
    "zombie_records_after_resume": ("<=", 0),
    "close_commit_lag": ("<=", 0),
    "close_commit_lag_commit_in_revoke": ("<=", 0),
    "groups_log_bytes_after_1m_commits": ("<=", 64 * 2**20),
    "groups_replay_s_after_1m_commits": ("<=", 5.0),
    "node_rss_growth_mb_per_hour_committing": ("<=", 10.0),
}
PHASES = ("commit", "consume", "rebalance", "join", "zombie", "close", "compaction", "memory")

Event = dict[str, Any]
TopicPartition = tuple[str, int]


# ----------------------------------------------------------------------------- members


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as file:
            stat = file.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    # After "pid (comm) ": state is field 3, utime and stime fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class EventTail:
    """The events a member appends to its file, read incrementally (whole lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[Event] = []
        self._offset = 0
        self._partial = b""

    def read(self) -> list[Event]:
        """The events appended since the last call."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        new = [json.loads(line) for line in lines if line.strip()]
        self.events.extend(new)
        return new


@dataclass(eq=False)
class Member:
    """One member process, its events and what they said about it."""

    name: str
    process: GroupMemberProcess
    tail: EventTail
    member_id: str | None = None
    owned: set[TopicPartition] = field(default_factory=set)
    """What it reads, as its assigned, revoked and lost events say."""

    def poll(self) -> list[Event]:
        """New events; raises on an "error" event."""
        new = self.tail.read()
        for event in new:
            kind = event["event"]
            if kind == "started":
                self.member_id = str(event["member_id"])
            elif kind == "assigned":
                self.owned.update((topic, index) for topic, index in event["partitions"])
            elif kind in ("revoked", "lost"):
                self.owned.difference_update((t, index) for t, index in event["partitions"])
            elif kind == "error":
                raise RuntimeError(f"member {self.name} failed: {event}")
        return new


class Fleet:
    """Member processes of one run; :meth:`close` stops every one (SIGTERM, SIGKILL)."""

    def __init__(self, bootstrap: Sequence[str], directory: Path) -> None:
        self.bootstrap = list(bootstrap)
        self.directory = directory
        self.members: list[Member] = []

    def start(self, group: str, topic: str, **options: Any) -> Member:
        name = f"{group}-m{len(self.members)}"
        path = self.directory / f"{name}.events"
        process = GroupMemberProcess.start(self.bootstrap, group, [topic], path, **options)
        member = Member(name, process, EventTail(path))
        self.members.append(member)
        return member

    def wait_started(self) -> None:
        def started() -> bool:
            for member in self.members:
                member.poll()
            return all(m.member_id is not None for m in self.members)

        wait_for(started, SETTLE_TIMEOUT_S, "every member process to start")

    def close(self) -> None:
        """SIGTERM to all at once (each closes: commit, leave), then wait for each."""
        for member in self.members:
            if member.process.running:
                member.process.process.terminate()
        for member in self.members:
            try:
                member.process.stop(10)
            except Exception:
                member.process.kill()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def balanced_counts(partitions: int, members: int) -> list[int]:
    """The sorted loads of ``members`` equal members over ``partitions``."""
    base, extra = divmod(partitions, members)
    return sorted([base + 1] * extra + [base] * (members - extra))


def wait_settled(
    client: Client, group: str, topic: str, partitions: int, members: int
) -> dict[TopicPartition, str]:
    """Owners once the group is stable with ``members`` members, each holding its share."""
    found: dict[TopicPartition, str] = {}

    def settled() -> bool:
        description = client.describe_group(group, timeout_s=2)
        if description.state != "stable" or len(description.members) != members:
            return False
        owners = {
            (p.topic, p.partition): p.owner for p in description.partitions if p.topic == topic
        }
        if len(owners) != partitions:
            return False
        counts = Counter(owners.values())
        loads = sorted(counts[m.member_id] for m in description.members)
        if None in counts or loads != balanced_counts(partitions, members):
            return False
        found.update({tp: owner for tp, owner in owners.items() if owner is not None})
        return True

    wait_for(settled, SETTLE_TIMEOUT_S, f"group {group} to settle with {members} members")
    return found


def new_group(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ----------------------------------------------------------------------------- rebalance


class SteadyProducer:
    """Writes one record to every partition every STEADY_TICK_S, from its own thread.

    :meth:`mark` notes a time; :meth:`offsets_after_mark` then gives, per
    partition, the offset of the first record sent after it.
    """

    def __init__(self, bootstrap: Sequence[str], topic: str, partitions: int) -> None:
        self._producer: Producer = Producer(list(bootstrap))
        self._topic = topic
        self._partitions = partitions
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._mark_t: float | None = None
        self._after_mark: dict[int, DeliveryFuture] = {}
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._producer.close()

    def _run(self) -> None:
        value = b"r" * VALUE_BYTES
        try:
            while not self._stop.wait(STEADY_TICK_S):
                sent_t = time.time()
                futures = [
                    self._producer.send(self._topic, value, partition=partition)
                    for partition in range(self._partitions)
                ]
                with self._lock:
                    if self._mark_t is not None and sent_t > self._mark_t:
                        for partition, future in enumerate(futures):
                            self._after_mark.setdefault(partition, future)
        except BaseException as error:
            self.error = error

    def mark(self, mark_t: float) -> None:
        with self._lock:
            self._mark_t = mark_t
            self._after_mark = {}

    def offsets_after_mark(self, partitions: Sequence[int]) -> dict[int, int]:
        def sent() -> bool:
            if self.error is not None:
                raise RuntimeError(f"the steady producer failed: {self.error}")
            with self._lock:
                return all(p in self._after_mark for p in partitions)

        wait_for(sent, 10, "the steady producer to send after the mark")
        with self._lock:
            futures = {p: self._after_mark[p] for p in partitions}
        return {p: future.result(30).offset for p, future in futures.items()}


@dataclass(frozen=True, slots=True)
class RebalanceRun:
    total_s: float
    expired_s: float
    assigned_s: float
    first_batch_s: float
    behind_records: int
    """How far behind the producer the group was reading at the kill."""


@dataclass
class FailoverWatch:
    """What the bench saw after the kill, as times since it."""

    killed_t: float
    lost: frozenset[TopicPartition]
    expired_t: float | None = None
    assigned_t: dict[TopicPartition, float] = field(default_factory=dict)
    consumed_t: dict[TopicPartition, float] = field(default_factory=dict)

    def see(self, event: Event, marks: dict[TopicPartition, int]) -> None:
        if event["t"] <= self.killed_t:
            return
        if event["event"] == "assigned":
            for topic, partition in event["partitions"]:
                if (topic, partition) in self.lost:
                    self.assigned_t.setdefault((topic, partition), event["t"])
        elif event["event"] == "batch":
            tp = (event["topic"], event["partition"])
            if tp in self.lost and event["next"] > marks[tp]:
                self.consumed_t.setdefault(tp, event["t"])

    def done(self) -> bool:
        return len(self.consumed_t) == len(self.lost)


def rebalance_run(env: Environment, topic: str, options: dict[str, Any]) -> RebalanceRun:
    """One failover on a new topic (so the group reads no history of earlier runs)."""
    create_topic(env.client, topic, REBALANCE_PARTITIONS)
    group = new_group("rebalance")
    with (
        SteadyProducer(env.bootstrap, topic, REBALANCE_PARTITIONS) as steady,
        env.fleet() as fleet,
    ):
        members = [
            fleet.start(group, topic, session_timeout_s=SESSION_TIMEOUT_S, **options)
            for _ in range(REBALANCE_MEMBERS)
        ]
        fleet.wait_started()
        owners = wait_settled(env.client, group, topic, REBALANCE_PARTITIONS, REBALANCE_MEMBERS)
        wait_live(members, steady, topic)
        victim, survivors = members[0], members[1:]
        lost = frozenset(tp for tp, owner in owners.items() if owner == victim.member_id)
        assert lost, "the victim owns nothing"
        watch = FailoverWatch(time.time(), lost)
        steady.mark(watch.killed_t)
        victim.process.kill()
        after = steady.offsets_after_mark(range(REBALANCE_PARTITIONS))
        marks = {(topic, p): offset for p, offset in after.items()}
        behind = records_behind(members, marks)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while not watch.done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sorted(lost - set(watch.consumed_t))} not read again")
            if watch.expired_t is None:
                description = env.client.describe_group(group, timeout_s=2)
                if all(m.member_id != victim.member_id for m in description.members):
                    watch.expired_t = time.time()
            for member in survivors:
                for event in member.poll():
                    watch.see(event, marks)
            time.sleep(EVENT_POLL_S)
    if watch.expired_t is None:  # read again before the poll saw the expiry
        watch.expired_t = min(watch.assigned_t.values(), default=watch.killed_t)
    return RebalanceRun(
        total_s=max(watch.consumed_t.values()) - watch.killed_t,
        expired_s=watch.expired_t - watch.killed_t,
        assigned_s=max(watch.assigned_t.values(), default=watch.killed_t) - watch.killed_t,
        first_batch_s=min(watch.consumed_t.values()) - watch.killed_t,
        behind_records=behind,
    )


def wait_live(members: Sequence[Member], steady: SteadyProducer, topic: str) -> None:
    """Wait until the group has read, in every partition, past a record written now."""
    steady.mark(time.time())
    written = steady.offsets_after_mark(range(REBALANCE_PARTITIONS))

    def caught_up() -> bool:
        reached = reached_offsets(members)
        return all(reached.get((topic, p), 0) > offset for p, offset in written.items())

    wait_for(caught_up, SETTLE_TIMEOUT_S, "the group to read what is written now")


def reached_offsets(members: Sequence[Member]) -> dict[TopicPartition, int]:
    """Per partition, the end of the furthest batch any of ``members`` read."""
    reached: dict[TopicPartition, int] = {}
    for member in members:
        member.poll()
        for event in member.tail.events:
            if event["event"] == "batch":
                tp = (event["topic"], event["partition"])
                reached[tp] = max(reached.get(tp, 0), int(event["next"]))
    return reached


def records_behind(members: Sequence[Member], marks: dict[TopicPartition, int]) -> int:
    """Records the group had not read yet at the kill: per partition, the first
    offset written after it less the end of the last batch read before it."""
    reached = reached_offsets(members)
    return sum(max(0, mark - reached.get(tp, 0)) for tp, mark in marks.items())


# ----------------------------------------------------------------------------- join


@dataclass(frozen=True, slots=True)
class JoinRun:
    moved_fraction: float
    moved_between_old: int


def join_run(client: Client, fleet: Fleet) -> JoinRun:
    group = new_group("join")
    for _ in range(3):
        fleet.start(group, JOIN_TOPIC, session_timeout_s=SESSION_TIMEOUT_S)
    before = wait_settled(client, group, JOIN_TOPIC, JOIN_PARTITIONS, 3)
    joiner = fleet.start(group, JOIN_TOPIC, session_timeout_s=SESSION_TIMEOUT_S)
    after = wait_settled(client, group, JOIN_TOPIC, JOIN_PARTITIONS, 4)
    fleet.wait_started()
    moved = [tp for tp in before if before[tp] != after[tp]]
    between_old = sum(after[tp] != joiner.member_id for tp in moved)
    return JoinRun(len(moved) / JOIN_PARTITIONS, between_old)


# ----------------------------------------------------------------------------- commit


@dataclass(frozen=True, slots=True)
class CommitRun:
    commit_ms: list[float]
    produce_ms: list[float]
    same_node: bool
    """Whether the produce partition's leader was the group's coordinator."""


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def coordinator_partition(client: Client, group: str, topic: str) -> int | None:
    """A partition of ``topic`` led by ``group``'s coordinator, if there is one."""
    coordinator: str = client.describe_group(group).coordinator
    for partition in client.metadata(refresh=True).topics[topic].partitions:
        if partition.leader == coordinator:
            return partition.partition
    return None


def commit_run(bootstrap: Sequence[str], client: Client, count: int) -> CommitRun:
    group = new_group("commit")
    value = b"c" * VALUE_BYTES
    commit_ms: list[float] = []
    produce_ms: list[float] = []
    with (
        Consumer(
            list(bootstrap),
            group=group,
            topics=[COMMIT_TOPIC],
            session_timeout_s=CONSUME_SESSION_TIMEOUT_S,
            auto_commit=False,
        ) as consumer,
        Producer(list(bootstrap)) as producer,
    ):

        def owns_all() -> bool:
            for _ in consumer.batches(timeout_s=0.05):
                pass  # the reads carry out what the heartbeats decided
            return len(consumer.assignment()) == COMMIT_PARTITIONS

        wait_for(owns_all, SETTLE_TIMEOUT_S, "the committing member to own its partitions")
        found = coordinator_partition(client, group, COMMIT_TOPIC)
        partition = 0 if found is None else found
        tp = (COMMIT_TOPIC, partition)
        # Connections and routing before timing; then each commit moves the offset
        # one record on, never past what the produce blocks (which go first) wrote.
        base = producer.send_and_wait(COMMIT_TOPIC, value, partition=partition).offset + 1
        consumer.commit({tp: base})
        while len(commit_ms) < count:
            for _ in range(min(COMMIT_BLOCK, count - len(produce_ms))):
                started = time.perf_counter()
                producer.send_and_wait(COMMIT_TOPIC, value, partition=partition)
                produce_ms.append((time.perf_counter() - started) * 1000)
            for _ in range(min(COMMIT_BLOCK, count - len(commit_ms))):
                offset = base + len(commit_ms) + 1
                started = time.perf_counter()
                consumer.commit({tp: offset})
                commit_ms.append((time.perf_counter() - started) * 1000)
    return CommitRun(commit_ms, produce_ms, found is not None)


# ----------------------------------------------------------------------------- consume


def backlog_batches(records: int) -> int:
    """Batches per partition that hold at least ``records`` records in all."""
    return -(-records // (CONSUME_PARTITIONS * BACKLOG_BATCH_RECORDS))


def write_backlog(client: Client, topic: str, records: int) -> dict[int, int]:
    """Write ``records`` records (whole batches per partition, rounded up) into
    ``topic``'s partitions, one thread per partition, through ``Client.produce``
    (acks=all) with batches of BACKLOG_BATCH_RECORDS encoded once (faster than a
    Producer: the bench waits less). Per partition the offset after its last record."""
    batch = encode_batch(
        [b"g" * VALUE_BYTES] * BACKLOG_BATCH_RECORDS, timestamps_ms=int(time.time() * 1000)
    )
    per_partition = backlog_batches(records)

    def write(partition: int) -> int:
        end = 0
        for done in range(0, per_partition, BACKLOG_BATCHES_PER_CALL):
            count = min(BACKLOG_BATCHES_PER_CALL, per_partition - done)
            end = client.produce(topic, partition, [batch] * count)[-1] + BACKLOG_BATCH_RECORDS
        return end

    with ThreadPoolExecutor(CONSUME_PARTITIONS) as pool:
        return dict(enumerate(pool.map(write, range(CONSUME_PARTITIONS))))


@dataclass(frozen=True, slots=True)
class ConsumeRun:
    records_s: float
    elapsed_s: float
    first_batch_s: float
    """From the SIGCONT to the first batch read (heartbeat, assignment, first fetch)."""
    duplicates: int
    member_cpu_s: float
    node_cpu_s: float

    def note(self, members: int) -> str:
        used = (self.member_cpu_s + self.node_cpu_s) / self.elapsed_s
        return (
            f"{members} member(s): {self.records_s:,.0f} records/s in {self.elapsed_s:.2f} s "
            f"(first batch after {self.first_batch_s:.2f} s), {self.duplicates:,} read twice; "
            f"CPU s: members {self.member_cpu_s:.2f}, nodes {self.node_cpu_s:.2f} "
            f"= {used:.2f} of {os.cpu_count()} cores"
        )


def consume_run(env: Environment, members_count: int, records: int, topic: str) -> ConsumeRun:
    """Members join a group subscribed to ``topic`` before it exists, and are
    SIGSTOPped; the topic is created and ``records`` written, the coordinator hands
    out its partitions; the members are SIGCONTed together and read everything."""
    group = new_group(f"consume{members_count}")
    with env.fleet() as fleet:
        members = [
            fleet.start(group, topic, session_timeout_s=CONSUME_SESSION_TIMEOUT_S)
            for _ in range(members_count)
        ]
        fleet.wait_started()
        wait_settled(env.client, group, topic, 0, members_count)
        for member in members:
            member.process.pause()
        paused_s = time.monotonic()
        create_topic(env.client, topic, CONSUME_PARTITIONS)
        ends = write_backlog(env.client, topic, records)
        wait_settled(env.client, group, topic, CONSUME_PARTITIONS, members_count)
        # Stopped for longer than a heartbeat interval, every member heartbeats (and
        # learns its partitions) as soon as it continues, not up to 2 s later.
        interval_s = CONSUME_SESSION_TIMEOUT_S / HEARTBEATS_PER_SESSION
        time.sleep(max(0.0, paused_s + interval_s + 0.5 - time.monotonic()))
        pids = [m.process.pid for m in members]
        members_before = sum(cpu_s(pid) for pid in pids)
        nodes_before = sum(cpu_s(pid) for pid in env.node_pids)
        resumed_t = time.time()
        for member in members:
            member.process.resume()
        done_t = wait_read(members, ends)
        member_cpu_s = sum(cpu_s(pid) for pid in pids) - members_before
        node_cpu_s = sum(cpu_s(pid) for pid in env.node_pids) - nodes_before
    written = backlog_batches(records) * BACKLOG_BATCH_RECORDS * CONSUME_PARTITIONS
    batches = [e for m in members for e in m.tail.events if e["event"] == "batch"]
    read = sum(int(e["count"]) for e in batches)
    first_batch_s = min(float(e["t"]) for e in batches) - resumed_t
    elapsed_s = done_t - resumed_t
    return ConsumeRun(
        written / elapsed_s, elapsed_s, first_batch_s, read - written, member_cpu_s, node_cpu_s
    )


def wait_read(members: Sequence[Member], ends: dict[int, int]) -> float:
    """When the last partition was read to its end (the batch event's time)."""
    reached: dict[int, int] = {}
    done_t: dict[int, float] = {}
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while len(done_t) < len(ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"partitions {sorted(set(ends) - set(done_t))} not read")
        time.sleep(EVENT_POLL_S * 4)  # rarely: this process competes for the 2 cores
        for member in members:
            for event in member.poll():
                if event["event"] != "batch":
                    continue
                partition = int(event["partition"])
                reached[partition] = max(reached.get(partition, 0), int(event["next"]))
                if reached[partition] >= ends[partition]:
                    done_t.setdefault(partition, float(event["t"]))
    return max(done_t.values())


# ----------------------------------------------------------------------------- zombie


@dataclass(frozen=True, slots=True)
class ZombieRun:
    zombie_records: int
    lost_after_resume_s: float


def zombie_run(env: Environment, topic: str) -> ZombieRun:
    """SIGSTOP a member in the middle of a batch past its session while records
    arrive; count what it hands out of lost partitions once SIGCONTed."""
    create_topic(env.client, topic, ZOMBIE_PARTITIONS)
    group = new_group("zombie")
    with SteadyProducer(env.bootstrap, topic, ZOMBIE_PARTITIONS), env.fleet() as fleet:
        a = fleet.start(
            group, topic, session_timeout_s=SESSION_TIMEOUT_S, delay_ms_per_batch=ZOMBIE_DELAY_MS
        )
        b = fleet.start(group, topic, session_timeout_s=SESSION_TIMEOUT_S)
        fleet.wait_started()
        wait_settled(env.client, group, topic, ZOMBIE_PARTITIONS, 2)

        def processing() -> bool:
            a.poll()
            return bool(a.tail.events) and a.tail.events[-1]["event"] == "batch" and bool(a.owned)

        wait_for(processing, SETTLE_TIMEOUT_S, "a batch to pause the member in")
        a.process.pause()
        held, paused_t = set(a.owned), time.time()

        def taken_over() -> bool:
            b.poll()
            read = {
                (e["topic"], e["partition"])
                for e in b.tail.events
                if e["event"] == "batch" and e["t"] > paused_t + SESSION_TIMEOUT_S
            }
            return held <= b.owned and held <= read

        wait_for(taken_over, SETTLE_TIMEOUT_S, "the other member to read the lost partitions")
        resumed_t = time.time()
        a.process.resume()

        def rejoined() -> bool:
            a.poll()
            kinds = [e["event"] for e in a.tail.events if e["t"] >= resumed_t]
            return "lost" in kinds and "assigned" in kinds[kinds.index("lost") :]

        wait_for(rejoined, SETTLE_TIMEOUT_S, "the resumed member to be told and rejoin")
        lost_t = next(e["t"] for e in a.tail.events if e["event"] == "lost" and e["t"] >= resumed_t)
        return ZombieRun(zombie_records(a.tail.events, resumed_t, held), lost_t - resumed_t)


def run_zombie(args: argparse.Namespace, env: Environment, report: Report) -> None:
    runs = [zombie_run(env, f"{ZOMBIE_TOPIC}-{index}") for index in range(args.repeat)]
    report.add("zombie_records_after_resume", [float(r.zombie_records) for r in runs])
    report.add("zombie_lost_after_resume_s", [r.lost_after_resume_s for r in runs])
    report.notes.append(
        f"zombie: paused past a {SESSION_TIMEOUT_S:g} s session while "
        f"{ZOMBIE_PARTITIONS / STEADY_TICK_S:,.0f} records/s were produced"
    )


# ----------------------------------------------------------------------------- close


def close_run(env: Environment, topic: str, records: int, options: dict[str, Any]) -> int:
    """Members read everything and close; the group's lag afterwards."""
    create_topic(env.client, topic, CLOSE_PARTITIONS)
    ends = write_backlog(env.client, topic, records)
    group = new_group("close")
    with env.fleet() as fleet:
        members = [
            fleet.start(group, topic, session_timeout_s=SESSION_TIMEOUT_S, **options)
            for _ in range(CLOSE_MEMBERS)
        ]
        fleet.wait_started()
        wait_settled(env.client, group, topic, CLOSE_PARTITIONS, CLOSE_MEMBERS)

        def read_all() -> bool:
            reached = reached_offsets(members)
            return all(reached.get((topic, p), 0) >= end for p, end in ends.items())

        wait_for(read_all, SETTLE_TIMEOUT_S, "the members to read everything")
    committed = {
        o.partition: o.next_offset for o in env.client.fetch_offsets(group) if o.topic == topic
    }
    return sum(max(0, end - (committed.get(p) or 0)) for p, end in ends.items())


def run_close(args: argparse.Namespace, env: Environment, report: Report) -> None:
    for number, (name, options) in enumerate(CLOSE_VARIANTS.items()):
        lags = [
            float(close_run(env, f"{CLOSE_TOPIC}-{index}-{number}", args.close_records, options))
            for index in range(args.repeat)
        ]
        report.add(name, lags)
    report.notes.append(
        f"close: {CLOSE_MEMBERS} members, {args.close_records:,} records over "
        f"{CLOSE_PARTITIONS} partitions, all closed (SIGTERM) once read"
    )


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- log size (issue 27)


COMPACTION_TOPIC = "group-compaction"
COMPACTION_PARTITIONS = 200
"""Partitions of the committing member: each CommitOffsets call commits all of them
(200 commit entries, one appended batch), so a million commits take 5,000 calls."""
COMPACTION_COMMITS = 1_000_000
COMPACTION_COMMITS_QUICK = 100_000
RSS_TOPIC = "group-rss"
RSS_PARTITIONS = 6
RSS_WINDOW_S = 240.0
RSS_WINDOW_S_QUICK = 60.0
RSS_WARMUP_S = 20.0
"""Seconds of the run before the first RSS sample (start-up allocations settle)."""
RSS_SAMPLE_S = 5.0


def compaction_label(commits: int) -> str:
    """``1m``, ``100k``...: the figures name the number of commits they measured."""
    return f"{commits // 1_000_000}m" if commits % 1_000_000 == 0 else f"{commits // 1000}k"


def call_any(cluster: ProcessCluster, method: str, request: Any, timeout_s: float = 5) -> Any:
    """One call to whichever node answers it (a NOT_LEADER answer moves on), the
    nodes asked in turn until one answers or ``timeout_s`` passes: a leadership of
    ``__groups`` moving (a preferred leader taking it back) can have every node
    answer NOT_LEADER for a moment."""
    last: BaseException | None = None
    deadline = time.monotonic() + timeout_s
    while True:
        for node in cluster.nodes:
            try:
                return getattr(cluster.stub(node), method)(request, timeout=timeout_s)
            except grpc.RpcError as rpc_error:
                last = error_from_rpc(rpc_error)
                if not isinstance(last, RetriableError):
                    raise last from None
        if time.monotonic() >= deadline:
            raise last if last is not None else RuntimeError("no node")
        time.sleep(0.05)  # a round of refusals: ask again shortly, until the deadline


def groups_bytes(node: NodeProcess) -> int:
    """Bytes of every ``__groups`` replica's files on ``node`` (logs and indexes)."""
    root = Path(layout.partitions_directory(str(node.data_dir)), "__groups")
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


@dataclass(frozen=True, slots=True)
class CompactionRun:
    log_bytes: int
    """The most ``__groups`` bytes on one node after the commits."""
    peak_bytes: int
    """The most seen on one node during them (sampled every 100 calls)."""
    ready_s: float
    replay_s: float
    commit_s: float
    written_bytes: int
    """Record bytes the commits appended (what the log would hold without snapshots)."""


def compaction_run(root: Path, commits: int) -> CompactionRun:
    """One member commits ``commits`` offsets through CommitOffsets (raw gRPC, 200 per
    call); then every node is stopped (SIGTERM) and started again, and the time
    until FetchOffsets returns every committed offset is the replay figure."""
    with ProcessCluster(root, preset="local") as cluster:
        bootstrap = start_cluster(cluster)
        with Client(bootstrap) as client:
            create_topic(client, COMPACTION_TOPIC, COMPACTION_PARTITIONS)
        group = new_group("compaction")

        def heartbeat(member_id: str, epoch: int) -> Any:
            request = pb.GroupHeartbeatRequest(
                group=group,
                member_id=member_id,
                member_epoch=epoch,
                topics=[COMPACTION_TOPIC],
                session_timeout_ms=600_000,
                rebalance_timeout_ms=600_000,
            )
            return call_any(cluster, "GroupHeartbeat", request)

        answer = heartbeat("", 0)
        member_id, epoch = answer.member_id, answer.member_epoch
        owned: dict[int, int] = {}

        def owns_all() -> bool:
            owned.update(
                {p.partition: p.assignment_epoch for p in heartbeat(member_id, epoch).owned}
            )
            return len(owned) == COMPACTION_PARTITIONS

        wait_for(owns_all, SETTLE_TIMEOUT_S, "the member to own every partition")
        rounds = -(-commits // COMPACTION_PARTITIONS)
        entry = Commit(group, COMPACTION_TOPIC, 0, rounds, member_id, epoch, 1)
        written = len(encode_entry(entry)) * rounds * len(owned)  # about: one size for all
        peak_bytes = 0
        started = time.perf_counter()
        for round_ in range(1, rounds + 1):
            if round_ % 100 == 0:
                peak_bytes = max(peak_bytes, *(groups_bytes(node) for node in cluster.nodes))
            request = pb.CommitOffsetsRequest(
                group=group,
                member_id=member_id,
                member_epoch=epoch,
                offsets=[
                    pb.OffsetCommit(
                        topic=COMPACTION_TOPIC, partition=p, next_offset=round_, assignment_epoch=e
                    )
                    for p, e in owned.items()
                ],
            )
            result = call_any(cluster, "CommitOffsets", request, timeout_s=30)
            if any(r.HasField("error") for r in result.partitions):
                raise RuntimeError(f"a commit was refused: {result.partitions[0]}")
        commit_s = time.perf_counter() - started
        log_bytes = max(groups_bytes(node) for node in cluster.nodes)
        for node in cluster.nodes:
            cluster.terminate(node)
        started = time.perf_counter()
        for node in cluster.nodes:
            cluster.start(node)
        for node in cluster.nodes:
            cluster.wait_ready(node, timeout_s=120)
        ready_s = time.perf_counter() - started
        expected = dict.fromkeys(range(COMPACTION_PARTITIONS), rounds)

        def served() -> bool:
            try:
                fetched = call_any(cluster, "FetchOffsets", pb.FetchOffsetsRequest(group=group))
            except (LaminarError, grpc.RpcError):
                return False
            return {o.partition: o.next_offset for o in fetched.offsets} == expected

        wait_for(served, 300, "the restarted cluster to serve the committed offsets")
        replay_s = time.perf_counter() - started
    return CompactionRun(
        log_bytes, max(peak_bytes, log_bytes), ready_s, replay_s, commit_s, written
    )


def run_compaction(args: argparse.Namespace, env: Environment, report: Report) -> None:
    """``groups_log_bytes_after_<N>_commits`` and ``groups_replay_s_after_<N>_commits``
    (N = 1m, or 100k with ``--quick``): see :func:`compaction_run`."""
    label = compaction_label(args.compaction_commits)
    runs = [
        compaction_run(env.directory / f"compaction-{index}", args.compaction_commits)
        for index in range(args.repeat)
    ]
    report.add(f"groups_log_bytes_after_{label}_commits", [r.log_bytes for r in runs])
    report.add(f"groups_replay_s_after_{label}_commits", [r.replay_s for r in runs])
    for r in runs:
        report.notes.append(
            f"compaction: {args.compaction_commits:,} commits in {r.commit_s:.1f} s "
            f"({r.written_bytes / 2**20:,.0f} MiB of entries appended); __groups on disk "
            f"after: {r.log_bytes / 2**20:.2f} MiB (most on one node; peak seen during the "
            f"commits {r.peak_bytes / 2**20:.2f} MiB); restart: every node "
            f"answering after {r.ready_s:.2f} s, commits served after {r.replay_s:.2f} s"
        )


# ----------------------------------------------------------------------------- node memory


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def slope_per_hour(samples: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MB) samples, in MB per hour."""
    mean_t = statistics.fmean(t for t, _ in samples)
    mean_v = statistics.fmean(v for _, v in samples)
    numerator = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    denominator = sum((t - mean_t) ** 2 for t, _ in samples)
    return numerator / denominator * 3600 if denominator else 0.0


@dataclass(frozen=True, slots=True)
class MemoryRun:
    growth_mb_per_hour: float
    """The largest node's RSS slope."""
    rss_mb: list[tuple[float, float]]
    """Each node's RSS at the first and the last sample."""


def memory_run(env: Environment, committing: bool, window_s: float, index: int) -> MemoryRun:
    """The same producer (one record to each of 6 partitions every 10 ms) and one
    member process reading them: auto-committing, or (``committing`` False) never
    committing. After :data:`RSS_WARMUP_S`, every node's RSS is sampled every
    :data:`RSS_SAMPLE_S` for ``window_s``; the figure is the steepest node's slope."""
    topic = f"{RSS_TOPIC}-{index}-{int(committing)}"
    create_topic(env.client, topic, RSS_PARTITIONS)
    group = new_group("rss")
    options = {"session_timeout_s": CONSUME_SESSION_TIMEOUT_S}
    if not committing:
        options["auto_commit"] = False
    with SteadyProducer(env.bootstrap, topic, RSS_PARTITIONS), env.fleet() as fleet:
        member = fleet.start(group, topic, **options)
        wait_for(
            lambda: member.poll() is not None and len(member.owned) == RSS_PARTITIONS,
            SETTLE_TIMEOUT_S,
            "the member to read every partition",
        )
        time.sleep(RSS_WARMUP_S)
        samples: list[list[tuple[float, float]]] = [[] for _ in env.node_pids]
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            for series, pid in zip(samples, env.node_pids, strict=True):
                series.append((elapsed, rss_mb(pid)))
            member.poll()
            if elapsed >= window_s:
                break
            time.sleep(RSS_SAMPLE_S)
    return MemoryRun(
        max(slope_per_hour(series) for series in samples),
        [(series[0][1], series[-1][1]) for series in samples],
    )


def run_memory(args: argparse.Namespace, env: Environment, report: Report) -> None:
    """``node_rss_growth_mb_per_hour_committing`` and, in the same run, the baseline
    ``node_rss_growth_mb_per_hour_not_committing`` (see :func:`memory_run`)."""
    window_s = args.rss_window_s
    committing: list[MemoryRun] = []
    baseline: list[MemoryRun] = []
    for index in range(args.repeat):
        committing.append(memory_run(env, True, window_s, index))
        baseline.append(memory_run(env, False, window_s, index))
    report.add("node_rss_growth_mb_per_hour_committing", [r.growth_mb_per_hour for r in committing])
    report.add(
        "node_rss_growth_mb_per_hour_not_committing", [r.growth_mb_per_hour for r in baseline]
    )
    for name, runs in (("committing", committing), ("not committing", baseline)):
        for r in runs:
            rss = ", ".join(f"{first:.0f}->{last:.0f}" for first, last in r.rss_mb)
            report.notes.append(f"memory ({name}, {window_s:.0f} s window): node RSS MB {rss}")


@dataclass
class Report:
    results: dict[str, float] = field(default_factory=dict)
    runs: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, runs: Sequence[float], *, mean: bool = False) -> None:
        self.runs[name] = list(runs)
        self.results[name] = statistics.fmean(runs) if mean else statistics.median(runs)


def run_rebalance(args: argparse.Namespace, env: Environment, report: Report) -> None:
    runs: dict[str, list[RebalanceRun]] = {name: [] for name in REBALANCE_VARIANTS}
    for index in range(args.repeat):
        for number, (name, options) in enumerate(REBALANCE_VARIANTS.items()):
            topic = f"{REBALANCE_TOPIC}-{index}-{number}"
            runs[name].append(rebalance_run(env, topic, options))
    for name, variant in runs.items():
        report.add(name, [r.total_s for r in variant])
        if name == "rebalance_s":
            report.add("rebalance_expired_s", [r.expired_s for r in variant])
            report.add("rebalance_assigned_s", [r.assigned_s for r in variant])
            report.add("rebalance_first_batch_s", [r.first_batch_s for r in variant])
        behind = ", ".join(f"{r.behind_records:,}" for r in variant)
        report.notes.append(f"{name}: records not yet read at the kill: {behind}")
    report.notes.append(
        f"rebalance: session timeout {SESSION_TIMEOUT_S:g} s, "
        f"{REBALANCE_PARTITIONS / STEADY_TICK_S:,.0f} records/s produced meanwhile"
    )


def run_join(args: argparse.Namespace, env: Environment, report: Report) -> None:
    create_topic(env.client, JOIN_TOPIC, JOIN_PARTITIONS)
    runs: list[JoinRun] = []
    for _ in range(args.join_groups):
        with env.fleet() as fleet:
            runs.append(join_run(env.client, fleet))
    report.add("join_moved_fraction", [r.moved_fraction for r in runs], mean=True)
    report.add("join_moved_between_old", [r.moved_between_old for r in runs], mean=True)
    report.notes.append(
        f"join: mean over {args.join_groups} group ids, ideal {JOIN_IDEAL_FRACTION}, "
        f"{JOIN_PARTITIONS} partitions, 3 -> 4 members"
    )


def run_commit(args: argparse.Namespace, env: Environment, report: Report) -> None:
    create_topic(env.client, COMMIT_TOPIC, COMMIT_PARTITIONS)
    runs = [commit_run(env.bootstrap, env.client, args.commits) for _ in range(args.repeat)]
    commit_p99 = [percentile(r.commit_ms, 0.99) for r in runs]
    produce_p99 = [percentile(r.produce_ms, 0.99) for r in runs]
    report.add("commit_p99_ms", commit_p99)
    report.add("produce_p99_ms", produce_p99)
    report.add(
        "commit_p99_vs_produce_p99", [c / p for c, p in zip(commit_p99, produce_p99, strict=True)]
    )
    report.add("commit_p50_ms", [percentile(r.commit_ms, 0.5) for r in runs])
    report.add("produce_p50_ms", [percentile(r.produce_ms, 0.5) for r in runs])
    report.notes.append(
        f"commit: {args.commits:,} commits and {args.commits:,} produces per run, "
        f"alternating in blocks of {COMMIT_BLOCK}; produce partition led by the "
        f"coordinator in {sum(r.same_node for r in runs)} of {len(runs)} runs"
    )


def run_consume(args: argparse.Namespace, env: Environment, report: Report) -> None:
    one: list[ConsumeRun] = []
    many: list[ConsumeRun] = []
    for index in range(args.repeat):
        for members_count, runs in ((1, one), (CONSUME_MEMBERS, many)):
            topic = f"{CONSUME_TOPIC}-{index}-{members_count}"
            runs.append(consume_run(env, members_count, args.records, topic))
            report.notes.append("consume: " + runs[-1].note(members_count))
    report.add("group_consume_records_s", [r.records_s for r in many])
    report.add("group_consume_records_s_one_member", [r.records_s for r in one])
    report.add(
        "group_consume_three_vs_one",
        [m.records_s / o.records_s for m, o in zip(many, one, strict=True)],
    )


@dataclass
class Environment:
    bootstrap: list[str]
    client: Client
    node_pids: list[int]
    directory: Path

    @contextlib.contextmanager
    def fleet(self) -> Iterator[Fleet]:
        with Fleet(self.bootstrap, self.directory) as fleet:
            yield fleet


PHASE_RUNNERS: dict[str, Callable[[argparse.Namespace, Environment, Report], None]] = {
    "commit": run_commit,
    "consume": run_consume,
    "rebalance": run_rebalance,
    "join": run_join,
    "zombie": run_zombie,
    "close": run_close,
    "compaction": run_compaction,
    "memory": run_memory,
}


def measure(args: argparse.Namespace) -> Report:
    report = Report()
    loaded = load_average()
    with (
        tempfile.TemporaryDirectory(prefix="laminar-group-bench-") as root,
        ProcessCluster(Path(root), preset="local") as cluster,
    ):
        bootstrap = start_cluster(cluster)
        node_pids = [n.process.pid for n in cluster.nodes if n.process is not None]
        events = Path(root) / "events"
        events.mkdir()
        with Client(bootstrap) as client:
            env = Environment(bootstrap, client, node_pids, events)
            for phase in args.only:
                PHASE_RUNNERS[phase](args, env, report)
    report.notes.append(machine_note(loaded))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and records")
    parser.add_argument("--repeat", type=int, help="runs per figure (median; default 3)")
    parser.add_argument("--records", type=int, help="records for the group reads")
    parser.add_argument("--commits", type=int, help="commits (and produces) per run")
    parser.add_argument("--join-groups", type=int, help="group ids for the join figure")
    parser.add_argument("--close-records", type=int, help="records for the close figure")
    parser.add_argument(
        "--compaction-commits", type=int, help="commits before the log size and replay figures"
    )
    parser.add_argument("--rss-window-s", type=float, help="seconds of RSS samples per run")
    parser.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"comma-separated phases to run, of {', '.join(PHASES)} (default: all)",
    )
    args = parser.parse_args()
    args.repeat = args.repeat or (1 if args.quick else 3)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.records = args.records or (1_000_000 if args.quick else 3_000_000)
    args.commits = args.commits or (300 if args.quick else 2_000)
    args.join_groups = args.join_groups or (2 if args.quick else 5)
    args.close_records = args.close_records or (20_000 if args.quick else 60_000)
    args.compaction_commits = args.compaction_commits or (
        COMPACTION_COMMITS_QUICK if args.quick else COMPACTION_COMMITS
    )
    args.rss_window_s = args.rss_window_s or (RSS_WINDOW_S_QUICK if args.quick else RSS_WINDOW_S)
    args.only = [phase.strip() for phase in args.only.split(",") if phase.strip()]
    unknown = sorted(set(args.only) - set(PHASES))
    if unknown:
        parser.error(f"unknown phases {unknown}; choose from {', '.join(PHASES)}")
    tune_numpy()

    report = measure(args)
    print_report(
        report.results,
        missed=missed_targets(report.results, TARGETS),
        runs=report.runs,
        notes=report.notes,
    )


if __name__ == "__main__":
    run_main(main)
