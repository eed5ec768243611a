"""Consumer groups with every member in its own OS process (issue 16).

Members are ``python -m laminar.testing.group_member`` processes
(:class:`~laminar.testing.group_member.GroupMemberProcess`), so a test can SIGKILL
one, SIGSTOP it past its session and SIGCONT it, as a crash or a stall would; the
tests read what each member did from its JSON-lines events (what it owned when,
each batch's offsets and values, each commit and refused commit). Against three
real node processes: one cluster for the module, a topic and a group per test.
Waits are on conditions with deadlines; every process a test starts is stopped by
a context manager. The test that kills a node runs last and restarts it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client, Producer
from laminar_client.producer import RecordMetadata

from laminar.errors import LaminarError
from laminar.partitioning import key_partition
from laminar.testing.group_member import GroupMemberProcess, zombie_records
from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import CLIENT_TIMEOUT_S, start_cluster, wait_leader, wait_settled

PARTITIONS = 4
SESSION_S = 3.0
WAIT_S = 30.0
GROUPS_TOPIC, GROUPS_PARTITIONS = "__groups", 8  # laminar.server.groups

Event = dict[str, Any]
TP = tuple[str, int]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("group-processes"), 3)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def client(cluster: ProcessCluster) -> Iterator[Client]:
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        yield client


def bootstrap(cluster: ProcessCluster) -> list[str]:
    return [n.grpc for n in cluster.nodes]


def create_topic(cluster: ProcessCluster, client: Client, topic: str) -> list[TP]:
    client.create_topic(topic, PARTITIONS, 3)
    for partition in range(PARTITIONS):
        wait_leader(cluster, topic, partition)
    return [(topic, partition) for partition in range(PARTITIONS)]


# ----------------------------------------------------------------------------- producing


class Produced:
    """What a test wrote: the values, and per partition the records' offsets and
    the offset after the last one (a log holds control batches too, a leader's
    first entry for one, so offsets are not record counts)."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.offsets: dict[TP, list[int]] = {}
        self.ends: dict[TP, int] = {}

    def acknowledged(self, value: str, metadata: RecordMetadata) -> None:
        self.values.append(value)
        tp = (metadata.topic, metadata.partition)
        self.offsets.setdefault(tp, []).append(metadata.offset)
        self.ends[tp] = max(self.ends.get(tp, 0), metadata.offset + 1)

    def first_record_from(self, tp: TP, offset: int) -> int:
        """The offset of the first record at or after ``offset`` (where a reader
        that starts at ``offset`` gets its first record)."""
        return min(o for o in self.offsets[tp] if o >= offset)


def produce_rounds(
    cluster: ProcessCluster, topic: str, rounds: int, tag: str, produced: Produced | None = None
) -> Produced:
    """``rounds`` times three records per partition, flushed per round, so each
    partition gets ``rounds`` stored batches (a slow member handles one at a time)."""
    produced = produced or Produced()
    with Producer(bootstrap(cluster)) as producer:
        for round_index in range(rounds):
            sent = []
            for partition in range(PARTITIONS):
                for n in range(3):
                    value = f"{tag}-{round_index}-{partition}-{n}"
                    sent.append((value, producer.send(topic, value.encode(), partition=partition)))
            producer.flush()
            for value, future in sent:
                produced.acknowledged(value, future.result(0))
    return produced


class SteadyProducer:
    """One record per partition every ``interval_s`` from a thread, flushed each
    time, until the ``with`` block ends; ``produced`` is what was acknowledged (a
    flush waits out a leader failover)."""

    def __init__(self, cluster: ProcessCluster, topic: str, tag: str, interval_s: float) -> None:
        self.producer: Producer[bytes, bytes] = Producer(bootstrap(cluster))
        self.topic, self.tag, self.interval_s = topic, tag, interval_s
        self.produced = Produced()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"produce-{tag}", daemon=True)

    def _run(self) -> None:
        sequence = 0
        try:
            while not self._stop.wait(self.interval_s):
                sent = []
                for partition in range(PARTITIONS):
                    value = f"{self.tag}-{sequence}-{partition}"
                    sent.append(
                        (value, self.producer.send(self.topic, value.encode(), partition=partition))
                    )
                self.producer.flush()
                for value, future in sent:
                    self.produced.acknowledged(value, future.result(0))
                sequence += 1
        except BaseException as error:
            self.error = error

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        self.producer.close()
        assert self.error is None, self.error


# ----------------------------------------------------------------------------- members


class Members:
    """Member processes of one test: started here, stopped on exit (a context manager)."""

    def __init__(self, cluster: ProcessCluster, directory: Path, group: str, topic: str) -> None:
        self.cluster, self.directory, self.group, self.topic = cluster, directory, group, topic
        self._stack = contextlib.ExitStack()

    def start(self, name: str, **options: Any) -> GroupMemberProcess:
        options.setdefault("session_timeout_s", SESSION_S)
        member = GroupMemberProcess.start(
            bootstrap(self.cluster),
            self.group,
            [self.topic],
            self.directory / f"{self.group}-{name}.jsonl",
            log_values=True,
            **options,
        )
        return self._stack.enter_context(member)

    def __enter__(self) -> Members:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()


def member_id(member: GroupMemberProcess) -> str:
    return str(member.wait_event(lambda e: e["event"] == "started", WAIT_S, "started")["member_id"])


def owned(events: list[Event]) -> set[TP]:
    """What a member reads after ``events`` (its hooks, and partitions it lost)."""
    result: set[TP] = set()
    for event in events:
        partitions = {(t, p) for t, p in event.get("partitions", ())}
        if event["event"] == "assigned":
            result |= partitions
        elif event["event"] in ("revoked", "lost"):
            result -= partitions
    return result


def batches(events: list[Event], tp: TP | None = None) -> list[Event]:
    return [
        e
        for e in events
        if e["event"] == "batch" and (tp is None or (e["topic"], e["partition"]) == tp)
    ]


def values_read(*members: GroupMemberProcess) -> set[str]:
    return {v for m in members for e in batches(m.events()) for v in e["values"]}


def last_commits(events: list[Event]) -> dict[TP, int]:
    result: dict[TP, int] = {}
    for event in events:
        if event["event"] == "committed":
            result.update({(t, p): offset for t, p, offset in event["offsets"]})
    return result


def high_watermarks(client: Client, partitions: list[TP]) -> dict[TP, int]:
    topic = partitions[0][0]
    listed = client.list_offsets(topic, [p for _, p in partitions])
    return {(topic, p): offsets.high_watermark for p, offsets in listed.items()}


def committed(client: Client, group: str, partitions: list[TP]) -> dict[TP, int | None]:
    return {(o.topic, o.partition): o.next_offset for o in client.fetch_offsets(group, partitions)}


def wait_stable(client: Client, group: str, members: list[GroupMemberProcess]) -> None:
    """The coordinator says every partition is owned by its target, and each
    member's events say it reads exactly what the coordinator says it owns."""
    ids = {member_id(m): m for m in members}

    def stable() -> bool:
        description = client.describe_group(group)
        if description.state != "stable" or {m.member_id for m in description.members} != set(ids):
            return False
        owners: dict[str, set[TP]] = {key: set() for key in ids}
        for p in description.partitions:
            assert p.owner is not None
            owners[p.owner].add((p.topic, p.partition))
        return all(owned(m.events()) == owners[key] for key, m in ids.items())

    wait_for(stable, WAIT_S, f"group {group} to be stable")


def wait_all_read(produced: Produced, *members: GroupMemberProcess) -> None:
    wanted = set(produced.values)
    wait_for(lambda: wanted <= values_read(*members), WAIT_S, "every record read by some member")


def act_while_processing(
    member: GroupMemberProcess, action: str, *, odd_batches_min: int = 1
) -> list[Event]:
    """Once the member has committed and its newest event is a ``batch`` event, the
    ``odd_batches_min``-th or later with an odd count, ``kill`` or ``pause`` it: it
    is then sleeping in that batch's processing, before its commit (no commit in
    flight). Its events at that moment."""
    deadline_s = time.monotonic() + WAIT_S
    while time.monotonic() < deadline_s:
        events = member.events()
        kinds = [e["event"] for e in events]
        count = kinds.count("batch")
        last_is_batch = bool(kinds) and kinds[-1] == "batch"
        if last_is_batch and "committed" in kinds and count >= odd_batches_min and count % 2:
            getattr(member, action)()
            return events
        time.sleep(0.005)
    raise TimeoutError(f"no batch to {action} the member in: {member.events()[-5:]}")


def intervals(events: list[Event]) -> dict[TP, list[tuple[float, float]]]:
    """Per partition, the (start, end) times this member owned it by its events."""
    result: dict[TP, list[tuple[float, float]]] = {}
    since: dict[TP, float] = {}
    for event in events:
        for topic, partition in event.get("partitions", ()):
            tp = (topic, partition)
            if event["event"] == "assigned":
                since.setdefault(tp, event["t"])
            elif event["event"] in ("revoked", "lost") and tp in since:
                result.setdefault(tp, []).append((since.pop(tp), event["t"]))
    for tp, start in since.items():
        result.setdefault(tp, []).append((start, float("inf")))
    return result


# ----------------------------------------------------------------------------- tests


def test_a_killed_member_only_loses_its_partitions_and_they_resume_at_its_commit(
    cluster: ProcessCluster, client: Client, tmp_path: Path
) -> None:
    """``a`` commits every second batch and is SIGKILLed while processing a batch
    after its last commit: only its partitions move, the others keep theirs, and
    the new owners start at ``a``'s last commit: never below it, and re-reading
    what ``a`` read past it (at-least-once)."""
    partitions = create_topic(cluster, client, "gp-kill")
    with Members(cluster, tmp_path, "gp-kill", "gp-kill") as members:
        a = members.start("a", auto_commit=False, commit_every_batches=2, delay_ms_per_batch=500)
        others = [members.start(name) for name in ("b", "c")]
        wait_stable(client, "gp-kill", [a, *others])
        before = {m.pid: owned(m.events()) for m in others}
        produced = produce_rounds(cluster, "gp-kill", 8, "kill")
        events = act_while_processing(a, "kill", odd_batches_min=3)
        killed_at = time.time()
        assert a.events() == events, "a wrote events after the kill point"
        moved = owned(events)
        server_side = committed(client, "gp-kill", sorted(moved))
        assert server_side == {tp: last_commits(events).get(tp) for tp in moved}
        resume_at = {tp: offset for tp, offset in server_side.items() if offset is not None}
        assert resume_at.keys() == moved, "a had not committed every partition it owned"
        read_to = {tp: max((b["next"] for b in batches(events, tp)), default=0) for tp in moved}
        assert any(read_to[tp] > resume_at[tp] for tp in moved), "a read nothing past its commit"
        wait_for(
            lambda: set().union(*(owned(m.events()) for m in others)) == set(partitions),
            WAIT_S,
            "the survivors to own every partition",
        )
        wait_all_read(produced, a, *others)
        for member in others:
            after = [e for e in member.events() if e["t"] > killed_at]
            assert not [e for e in after if e["event"] in ("revoked", "lost")]
            assert owned(member.events()) - before[member.pid] <= moved
            assert before[member.pid] <= owned(member.events())
            for tp in moved & owned(member.events()):
                firsts = [b["first"] for b in batches(after, tp)]
                expected = produced.first_record_from(tp, resume_at[tp])
                assert firsts and firsts[0] == expected, (tp, firsts, resume_at)
                assert min(firsts) >= resume_at[tp]
        assert all(m.stop() == 0 for m in others)


@pytest.mark.slow  # make test-slow: a pause past the session, 10-12 s each
def test_a_member_paused_past_its_session_cannot_commit_over_the_new_owner(
    cluster: ProcessCluster, client: Client, tmp_path: Path
) -> None:
    """``a`` is SIGSTOPped while processing a batch, ``b`` takes over its partitions
    and commits; after SIGCONT ``a``'s commit of that batch is refused (FENCED) and
    leaves ``b``'s commits as they were. Records written afterwards are read too."""
    group = "gp-zombie"
    create_topic(cluster, client, group)
    with Members(cluster, tmp_path, group, group) as members:
        a = members.start("a", auto_commit=False, commit_every_batches=1, delay_ms_per_batch=1000)
        b = members.start("b", auto_commit=False, commit_every_batches=1)
        wait_stable(client, group, [a, b])
        produced = produce_rounds(cluster, group, 6, "zombie")
        paused = act_while_processing(a, "pause")
        moved = owned(paused)
        wait_for(
            lambda: all(last_commits(b.events()).get(tp) == produced.ends[tp] for tp in moved),
            WAIT_S,
            "b to read and commit a's partitions",
        )
        b_commits = {tp: last_commits(b.events())[tp] for tp in moved}
        a.resume()
        answer = a.wait_event(
            lambda e: e["event"] in ("commit_error", "committed"),
            WAIT_S,
            "a's commit after SIGCONT",
            since=len(paused),
        )
        assert answer["event"] == "commit_error", answer
        assert answer["error"].startswith("FencedMemberError"), answer
        assert committed(client, group, sorted(moved)) == b_commits
        refused = {(t, p): offset for t, p, offset in answer["offsets"]}
        assert moved <= set(refused)
        assert all(refused[tp] < b_commits[tp] for tp in moved), (refused, b_commits)
        produce_rounds(cluster, group, 2, "after", produced)
        wait_all_read(produced, a, b)
        wait_stable(client, group, [a, b])
        assert a.stop() == 0 and b.stop() == 0


def pause_while_processing(member: GroupMemberProcess) -> list[Event]:
    """SIGSTOP ``member`` once its newest event is a ``batch`` event (it is then
    sleeping in that batch's processing); its events at that moment."""
    deadline_s = time.monotonic() + WAIT_S
    while time.monotonic() < deadline_s:
        events = member.events()
        if events and events[-1]["event"] == "batch" and owned(events):
            member.pause()
            return events
        time.sleep(0.005)
    raise TimeoutError(f"no batch to pause the member in: {member.events()[-5:]}")


@pytest.mark.slow  # make test-slow: a pause past the session, 10-12 s each
def test_a_member_paused_past_its_session_hands_out_nothing_it_lost(
    cluster: ProcessCluster, client: Client, tmp_path: Path
) -> None:
    """``a`` (auto-commit) is SIGSTOPped in the middle of a batch while records keep
    arriving, ``b`` takes its partitions over and reads on; after SIGCONT, ``a``'s
    lease has lapsed: its very next event is ``lost`` with everything it read (no
    record of those partitions is handed out, not even the prefetched ones), and it
    reads again only what a later ``on_assigned`` gives it."""
    group = "gp-lease"
    create_topic(cluster, client, group)
    with (
        Members(cluster, tmp_path, group, group) as members,
        SteadyProducer(cluster, group, "lease", 0.05) as steady,
    ):
        a = members.start("a", delay_ms_per_batch=1000)
        b = members.start("b")
        wait_stable(client, group, [a, b])
        paused = pause_while_processing(a)
        held = owned(paused)
        b_before = len(b.events())
        wait_for(
            lambda: (
                held <= owned(b.events())
                and {(e["topic"], e["partition"]) for e in batches(b.events()[b_before:])} >= held
            ),
            WAIT_S,
            "b to own and read a's partitions",
        )
        resumed_t = time.time()
        a.resume()
        after = a.wait_event(lambda e: True, WAIT_S, "a's first event", since=len(paused))
        assert after["event"] == "lost", after
        assert {(t, p) for t, p in after["partitions"]} == held
        rejoined = a.wait_event(
            lambda e: e["event"] == "assigned", WAIT_S, "a's rejoin", since=len(paused)
        )
        assert rejoined["t"] > after["t"]
        wait_stable(client, group, [a, b])
        events = a.events()
        assert zombie_records(events, resumed_t, held) == 0
        kinds = [e["event"] for e in events[len(paused) :] if e["event"] != "batch"]
        assert kinds[:2] == ["lost", "assigned"], kinds
        assert steady.produced.values
        assert a.stop() == 0 and b.stop() == 0  # a checked assignment() against its hooks


def test_a_rebalance_during_commits_loses_no_commit_and_never_shares_a_partition(
    cluster: ProcessCluster, client: Client, tmp_path: Path
) -> None:
    """``a`` commits after every batch under a steady write load when ``b`` joins:
    the partitions that move start at ``b`` exactly where ``a`` stopped, no two
    members own a partition at once, and after both close the committed offsets
    are the ends of the logs."""
    group = "gp-rebalance"
    partitions = create_topic(cluster, client, group)
    with Members(cluster, tmp_path, group, group) as members:
        options: dict[str, Any] = {"commit_every_batches": 1, "delay_ms_per_batch": 20}
        a = members.start("a", **options)
        with SteadyProducer(cluster, group, "steady", 0.05) as producer:
            wait_for(
                lambda: (
                    owned(a.events()) == set(partitions)
                    and len(last_commits(a.events())) == PARTITIONS
                ),
                WAIT_S,
                "a to own and commit every partition",
            )
            b = members.start("b", **options)
            wait_stable(client, group, [a, b])
            wait_for(lambda: len(last_commits(b.events())) >= 1, WAIT_S, "b to commit")
        wait_all_read(producer.produced, a, b)
        assert a.stop() == 0 and b.stop() == 0
        every = [a.events(), b.events()]
        for events in every:
            assert events[-1]["event"] == "closed"
            assert not [e for e in events if e["event"] in ("commit_error", "lost", "error")]
        ends = {
            tp: max(e["next"] for events in every for e in batches(events, tp)) for tp in partitions
        }
        assert ends == producer.produced.ends
        assert committed(client, group, partitions) == ends
        for tp in partitions:
            spans = sorted(span for events in every for span in intervals(events).get(tp, []))
            for earlier, later in itertools.pairwise(spans):
                assert earlier[1] <= later[0], (tp, spans)
        for tp in intervals(b.events()):
            handed_over = [e["next"] for e in batches(a.events(), tp)]
            taken = batches(b.events(), tp)
            if handed_over and taken:
                assert taken[0]["first"] == max(handed_over), (tp, handed_over, taken[0])


def test_killing_the_coordinators_node_mid_commit_keeps_commits_monotonic(
    cluster: ProcessCluster, client: Client, tmp_path: Path
) -> None:
    """The node leading the group's ``__groups`` partition is SIGKILLed while the
    member commits after every batch: the member keeps its partitions (or gets
    them back), its commits go on through the new coordinator, and the committed
    offsets never go back nor pass the end of the log. Last in the module: it
    restarts the node and waits until the cluster is settled again."""
    group = "gp-coordinator"
    partitions = create_topic(cluster, client, group)
    samples: list[dict[TP, int | None]] = []
    sampling = threading.Event()

    def sample() -> None:
        with Client(bootstrap(cluster), timeout_s=2.0) as sampler:
            while not sampling.wait(0.1):
                with contextlib.suppress(LaminarError):
                    samples.append(committed(sampler, group, partitions))

    sampler = threading.Thread(target=sample, name="sample-commits", daemon=True)
    coordinator = wait_leader(
        cluster, GROUPS_TOPIC, key_partition(group.encode(), GROUPS_PARTITIONS)
    )
    try:
        with Members(cluster, tmp_path, group, group) as members:
            a = members.start("a", commit_every_batches=1, delay_ms_per_batch=20)
            with SteadyProducer(cluster, group, "failover", 0.05) as producer:
                sampler.start()
                wait_for(
                    lambda: (
                        len(last_commits(a.events())) == PARTITIONS
                        and sum(e["event"] == "committed" for e in a.events()) >= 10
                        and len(samples) >= 3
                    ),
                    WAIT_S,
                    "a's commits, sampled",
                )
                killed_at = time.time()
                cluster.kill(coordinator)

                def commits_after_kill() -> int:
                    return sum(
                        1 for e in a.events() if e["event"] == "committed" and e["t"] > killed_at
                    )

                wait_for(lambda: commits_after_kill() >= 10, WAIT_S, "commits after the kill")
            wait_all_read(producer.produced, a)
            assert owned(a.events()) == set(partitions)
            assert a.stop() == 0
        sampling.set()
        sampler.join(WAIT_S)
        # A leader change may end a log with a control batch, which the member's
        # position (so its commit) may pass: between the records' end and the log's.
        final = committed(client, group, partitions)
        assert all((final[tp] or 0) >= producer.produced.ends[tp] for tp in partitions), final
        ends: dict[TP, int] = {}

        def commits_within_the_logs() -> bool:
            for tp, high_watermark in high_watermarks(client, partitions).items():
                ends[tp] = max(ends.get(tp, 0), high_watermark)  # a replica's may trail
            return all((final[tp] or 0) <= ends[tp] for tp in partitions)

        wait_for(commits_within_the_logs, WAIT_S, "the high watermarks to reach the commits")
        assert len(samples) >= 5
        for tp in partitions:
            series = [offset for s in samples if (offset := s.get(tp)) is not None]
            assert series == sorted(series), (tp, series)
            assert all(offset <= ends[tp] for offset in series), (tp, series, ends[tp])
    finally:
        sampling.set()
        if not coordinator.running:
            cluster.start(coordinator)
            cluster.wait_ready(coordinator)
            wait_settled(cluster)
