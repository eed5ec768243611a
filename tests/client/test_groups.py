"""Consumer groups through the client against three real node processes (issue 16).

One cluster for the module (starting one costs seconds on two cores); each test
uses its own group. Consumers run in threads, one consumer per thread; waits are
on conditions with deadlines, and every consumer and process is stopped in a
``finally``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from laminar_client import AsyncConsumer, Client, Consumer, Producer
from laminar_client.consumer import TopicPartition
from laminar_client.serializers import json_deserializer

from laminar.errors import (
    ClientClosedError,
    FencedMemberError,
    GroupNotEmptyError,
    InvalidInputError,
    RecordDeserializationError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.testing.processes import ProcessCluster, wait_for
from tests.server.test_cluster import CLIENT_TIMEOUT_S, start_cluster, wait_leader

TOPIC = "events"
PARTITIONS = 4
SESSION_S = 3.0
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root: Path = tmp_path_factory.mktemp("groups")
    cluster = start_cluster(root, 3)
    try:
        with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
            client.create_topic(TOPIC, PARTITIONS, 3)
        for partition in range(PARTITIONS):
            wait_leader(cluster, TOPIC, partition)
        yield cluster
    finally:
        cluster.close()


def bootstrap(cluster: ProcessCluster) -> list[str]:
    return [n.grpc for n in cluster.nodes]


def produce(cluster: ProcessCluster, count: int, tag: str) -> set[bytes]:
    values = {f"{tag}-{n}".encode() for n in range(count)}
    with Producer(bootstrap(cluster)) as producer:
        for n, value in enumerate(sorted(values)):
            producer.send(TOPIC, value, partition=n % PARTITIONS)
        producer.flush()
    return values


class Member:
    """A group consumer in its own thread, recording what it read and owns."""

    def __init__(
        self,
        cluster: ProcessCluster,
        group: str,
        name: str,
        ledger: Ledger,
        *,
        pause_after: Callable[[Member], bool] | None = None,
        instance_id: str | None = None,
        session_s: float = SESSION_S,
        pattern: str | None = None,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.seen: list[tuple[int, int, bytes]] = []
        self.owned: set[TopicPartition] = set()
        self.revocations = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.consumer: Consumer[bytes, bytes] = Consumer(
            bootstrap(cluster),
            group=group,
            topics=[] if pattern else [TOPIC],
            pattern=pattern,
            instance_id=instance_id,
            session_timeout_s=session_s,
            rebalance_timeout_s=session_s * 2,
            fetch_wait_s=0.2,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.ledger.take(self.name, partitions)
        self.owned.update(partitions)

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        self.revocations += 1
        self.ledger.give(self.name, partitions)
        self.owned.difference_update(partitions)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                for record in self.consumer.records(timeout_s=0.2):
                    assert record.value is not None
                    self.seen.append((record.partition, record.offset, record.value))
                    if self.stop.is_set():
                        break
        except BaseException as error:
            self.error = error

    def values(self) -> set[bytes]:
        return {value for _, _, value in list(self.seen)}

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=WAIT_S)
        self.consumer.close()


class Ledger:
    """Who reads which partition between on_assigned and on_revoked; records any
    moment two members held one partition (the invariant under test)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[TopicPartition, str] = {}
        self.overlaps: list[str] = []

    def take(self, name: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                other = self.holder.get(tp)
                if other is not None and other != name:
                    self.overlaps.append(f"{name} took {tp} while {other} held it")
                self.holder[tp] = name

    def give(self, name: str, partitions: list[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                if self.holder.get(tp) == name:
                    del self.holder[tp]

    def forget(self, name: str) -> None:
        """A fenced member lost its partitions without a hook."""
        with self.lock:
            for tp in [tp for tp, holder in self.holder.items() if holder == name]:
                del self.holder[tp]


def close_all(members: list[Member]) -> None:
    for member in members:
        member.close()


def test_two_members_split_the_partitions_and_read_everything(cluster: ProcessCluster) -> None:
    ledger = Ledger()
    expected = produce(cluster, 200, "split")
    members: list[Member] = []
    try:
        members.append(Member(cluster, "split", "a", ledger))
        wait_for(lambda: len(members[0].owned) == PARTITIONS, WAIT_S, "a owns every partition")
        members.append(Member(cluster, "split", "b", ledger))
        wait_for(
            lambda: len(members[0].owned) == 2 and len(members[1].owned) == 2,
            WAIT_S,
            "two partitions each",
        )
        expected |= produce(cluster, 200, "after")
        wait_for(
            lambda: expected <= members[0].values() | members[1].values(),
            WAIT_S,
            "every record read by some member",
        )
        assert not ledger.overlaps
        assert members[0].owned.isdisjoint(members[1].owned)
        assert all(m.error is None for m in members), [m.error for m in members]
    finally:
        close_all(members)


def test_commits_survive_a_restart(cluster: ProcessCluster) -> None:
    ledger = Ledger()
    first = produce(cluster, 100, "restart")
    member = Member(cluster, "restart", "first", ledger)
    try:
        wait_for(lambda: first <= member.values(), WAIT_S, "the first member reads everything")
    finally:
        member.close()  # the final commit, then leave
    ends: dict[int, int] = {}
    for partition, offset, _ in member.seen:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    with Client(bootstrap(cluster)) as client:
        committed = {o.partition: o.next_offset for o in client.fetch_offsets("restart")}
    assert committed == ends
    second_batch = produce(cluster, 40, "second")
    member = Member(cluster, "restart", "second", ledger)
    try:
        wait_for(lambda: second_batch <= member.values(), WAIT_S, "the restart reads the new ones")
        firsts: dict[int, int] = {}
        for partition, offset, _ in member.seen:
            firsts.setdefault(partition, offset)
        assert firsts == ends  # resumed at the last commit: nothing re-read
        assert not member.values() & first
    finally:
        member.close()


def test_a_member_that_stops_heartbeating_is_fenced_and_its_partitions_move(
    cluster: ProcessCluster,
) -> None:
    ledger = Ledger()
    produce(cluster, 40, "fence")
    members: list[Member] = []
    try:
        members.append(Member(cluster, "fence", "a", ledger))
        wait_for(lambda: len(members[0].owned) == PARTITIONS, WAIT_S, "a owns every partition")
        members.append(Member(cluster, "fence", "b", ledger))
        wait_for(lambda: len(members[1].owned) == 2, WAIT_S, "b owns two")
        zombie = members[0]
        session = zombie.consumer.group_session
        assert session is not None
        zombie.stop.set()
        zombie.thread.join(timeout=WAIT_S)
        session.pause_heartbeats()
        ledger.forget("a")
        wait_for(lambda: len(members[1].owned) == PARTITIONS, WAIT_S, "b owns every partition")
        offsets = {tp: 0 for tp in session.owned()}
        assert offsets, "the zombie still believes it owns partitions"
        with pytest.raises(FencedMemberError):
            zombie.consumer.commit(offsets)
        assert not ledger.overlaps
    finally:
        close_all(members)


def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    cluster: ProcessCluster,
) -> None:
    """Member ``a`` (instance id "a") stops without leaving, as a crashed process
    would, and a new consumer with the same instance id joins well within the
    session: it replaces the old member and gets the same partitions; ``b``'s
    partitions never move."""
    ledger = Ledger()
    produce(cluster, 40, "static")
    members: list[Member] = []
    session_s = 15.0  # the restart must come within it, even on a loaded machine
    try:
        members.append(Member(cluster, "static", "a", ledger, instance_id="a", session_s=session_s))
        members.append(Member(cluster, "static", "b", ledger, instance_id="b", session_s=session_s))
        old, other = members
        wait_for(
            lambda: len(old.owned) == 2 and len(other.owned) == 2, WAIT_S, "two partitions each"
        )
        kept, before = set(old.owned), other.revocations
        session = old.consumer.group_session
        assert session is not None
        old.stop.set()
        old.thread.join(timeout=WAIT_S)
        session.pause_heartbeats()  # the process "died": no leave, no more heartbeats
        ledger.forget("a")
        members.append(Member(cluster, "static", "a", ledger, instance_id="a", session_s=session_s))
        new = members[-1]
        wait_for(lambda: new.owned == kept, WAIT_S, "the restarted member owns its partitions")
        assert other.revocations == before and len(other.owned) == 2
        assert not ledger.overlaps
    finally:
        close_all(members)


def test_a_new_topic_matching_the_pattern_gets_owners(cluster: ProcessCluster) -> None:
    """A group subscribed by pattern: partitions of a topic created later, whose
    name matches, get an owner and are read; other topics are left alone."""
    ledger = Ledger()
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        client.create_topic("pat-a", 2, 3)
        wait_leader(cluster, "pat-a", 0)
        wait_leader(cluster, "pat-a", 1)
    member = Member(cluster, "pattern", "a", ledger, pattern="pat-.*")
    try:
        wait_for(lambda: len(member.owned) == 2, WAIT_S, "a owns pat-a's partitions")
        with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
            client.create_topic("pat-b", 3, 3)
            for partition in range(3):
                wait_leader(cluster, "pat-b", partition)
            with Producer(bootstrap(cluster)) as producer:
                for partition in range(3):
                    producer.send("pat-b", b"new-%d" % partition, partition=partition)
        wanted = {("pat-a", 0), ("pat-a", 1), ("pat-b", 0), ("pat-b", 1), ("pat-b", 2)}
        wait_for(lambda: {tuple(tp) for tp in member.owned} == wanted, WAIT_S, "pat-b owned too")
        wait_for(
            lambda: {b"new-0", b"new-1", b"new-2"} <= member.values(),
            WAIT_S,
            "pat-b's records read",
        )
        assert all(tp[0] != TOPIC for tp in member.owned)
    finally:
        member.close()


def test_admin_calls_refuse_while_members_are_active(cluster: ProcessCluster) -> None:
    ledger = Ledger()
    produce(cluster, 8, "admin")
    member = Member(cluster, "admin", "a", ledger)
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        try:
            wait_for(lambda: len(member.owned) == PARTITIONS, WAIT_S, "a owns every partition")
            listed = {g.group: g for g in client.list_groups()}
            assert listed["admin"].member_count == 1
            described = client.describe_group("admin")
            assert described.state in ("stable", "reconciling")
            assert len(described.members) == 1
            with pytest.raises(GroupNotEmptyError):
                client.reset_offsets("admin", {(TOPIC, 0): 0})
            with pytest.raises(GroupNotEmptyError):
                client.delete_group("admin")
        finally:
            member.close()
        wait_for(lambda: not client.describe_group("admin").members, WAIT_S, "a has left")
        client.reset_offsets("admin", dict.fromkeys(((TOPIC, p) for p in range(PARTITIONS)), 0))
        assert {o.next_offset for o in client.fetch_offsets("admin")} == {0}
        client.delete_group("admin")
        assert client.describe_group("admin").state == "dead"


def test_cli_lists_describes_and_refuses_to_reset_an_active_group(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from laminar import cli

    address = ["--bootstrap", ",".join(bootstrap(cluster))]
    produce(cluster, 20, "cli")
    member = Member(cluster, "cli", "a", Ledger())
    try:
        wait_for(lambda: len(member.owned) == PARTITIONS, WAIT_S, "a owns every partition")
        wait_for(lambda: len(member.values()) >= 20, WAIT_S, "a reads")
        capsys.readouterr()
        assert cli.main([*address, "group", "list"]) == 0
        assert "cli" in capsys.readouterr().out
        assert cli.main([*address, "group", "describe", "cli", "--format", "json"]) == 0
        described = json.loads(capsys.readouterr().out)
        assert described["members"] == 1 and described["state"] in ("stable", "reconciling")
        rows = described["partitions"]
        assert {row["partition"] for row in rows} == set(range(PARTITIONS))
        assert all(row["owner"] and row["assignment_epoch"] >= 1 for row in rows)
        assert all(row["host"].startswith("127.") for row in rows)  # where it heartbeats from
        assert described["total_lag"] == sum(row["lag"] for row in rows)
        assert cli.main([*address, "group", "describe", "cli"]) == 0
        text = capsys.readouterr().out
        assert "OWNER" in text and "HOST" in text and "total_lag=" in text
        assert cli.main([*address, "group", "reset-offsets", "cli", "--to", "earliest"]) == 1
        assert "still has 1 member" in capsys.readouterr().err
        assert cli.main([*address, "group", "delete", "cli"]) == 1
        capsys.readouterr()
    finally:
        member.close()
    with Client(bootstrap(cluster)) as client:
        wait_for(lambda: not client.describe_group("cli").members, WAIT_S, "a has left")
    reset = [*address, "group", "reset-offsets", "cli", "--to", "offset", "--offset", "1"]
    assert cli.main([*reset, "--dry-run"]) == 0
    assert "would reset 4 partition(s)" in capsys.readouterr().out
    assert cli.main(reset) == 0
    capsys.readouterr()
    assert cli.main([*address, "group", "describe", "cli", "--format", "json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["state"] == "empty"
    assert {row["committed"] for row in described["partitions"]} == {1}
    assert cli.main([*address, "group", "delete", "cli"]) == 0
    assert "deleted group cli" in capsys.readouterr().out
    assert cli.main([*address, "group", "describe", "cli"]) == 1  # it is gone
    assert "group 'cli' does not exist" in capsys.readouterr().err


def test_draining_the_coordinators_node_moves_the_group_without_losing_commits(
    cluster: ProcessCluster,
) -> None:
    """The node leading the group's ``__groups`` partition is drained (weight 0):
    the coordinator moves with the leadership, the member keeps its partitions,
    and its commits go on from where they were. Last in the module: it changes
    the shared cluster (the weight is restored at the end)."""
    from laminar.partitioning import key_partition
    from laminar.server.groups import GROUPS_PARTITIONS, GROUPS_TOPIC

    ledger = Ledger()
    first = produce(cluster, 40, "drain")
    member = Member(cluster, "drain", "a", ledger)
    group_partition = key_partition(b"drain", GROUPS_PARTITIONS)
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        drained = None
        try:
            wait_for(lambda: first <= member.values(), WAIT_S, "a reads everything")

            def committed() -> int:
                return sum(o.next_offset for o in client.fetch_offsets("drain"))

            wait_for(lambda: committed() >= 40, WAIT_S, "a's commits of the first records")
            before = committed()
            drained = wait_leader(cluster, GROUPS_TOPIC, group_partition)
            client.update_node(drained.grpc, weight=0)
            wait_for(
                lambda: (
                    (leader := wait_leader(cluster, GROUPS_TOPIC, group_partition)) is not drained
                    and leader.grpc != drained.grpc
                ),
                WAIT_S,
                "the group's partition to be led elsewhere",
            )
            second = produce(cluster, 40, "drained")
            wait_for(lambda: second <= member.values(), WAIT_S, "a reads on")
            wait_for(lambda: committed() >= before + 40, WAIT_S, "commits through the new leader")
            assert member.revocations == 0 and len(member.owned) == PARTITIONS
            assert member.error is None
        finally:
            member.close()
            if drained is not None:
                client.update_node(drained.grpc, weight=1.0)
                for partition in range(PARTITIONS):
                    wait_leader(cluster, TOPIC, partition)


def test_async_consumers_split_commit_and_resume(cluster: ProcessCluster) -> None:
    """AsyncConsumer(group=...): async hooks, commit() and close() on the event loop."""
    expected = produce(cluster, 100, "async")

    async def until(condition: Callable[[], bool], what: str) -> None:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
            await asyncio.sleep(0.02)

    async def drain(
        consumer: AsyncConsumer[bytes, bytes], sink: list[tuple[int, int, bytes]]
    ) -> None:
        while True:
            async for record in consumer.records(timeout_s=0.2):
                assert record.value is not None
                sink.append((record.partition, record.offset, record.value))

    def tagged(seen: list[tuple[int, int, bytes]], tag: str) -> set[bytes]:
        return {value for _, _, value in seen if value.startswith(tag.encode())}

    async def scenario() -> None:
        revoked: list[list[TopicPartition]] = []

        async def on_revoked(partitions: list[TopicPartition]) -> None:
            await asyncio.sleep(0)  # a coroutine hook is awaited
            revoked.append(partitions)

        options: dict[str, Any] = {
            "group": "async",
            "topics": [TOPIC],
            "session_timeout_s": SESSION_S,
            "rebalance_timeout_s": SESSION_S * 2,
            "fetch_wait_s": 0.2,
        }
        a_seen: list[tuple[int, int, bytes]] = []
        b_seen: list[tuple[int, int, bytes]] = []
        a: AsyncConsumer[bytes, bytes] = AsyncConsumer(
            bootstrap(cluster),
            on_revoked=on_revoked,
            **options,
        )
        a_task = asyncio.create_task(drain(a, a_seen))
        b: AsyncConsumer[bytes, bytes] | None = None
        b_task: asyncio.Task[None] | None = None
        try:
            await until(lambda: expected <= tagged(a_seen, "async"), "a reads everything")
            await a.commit()
            b = AsyncConsumer(bootstrap(cluster), **options)
            b_task = asyncio.create_task(drain(b, b_seen))
            b_session = b.group_session
            assert b_session is not None
            await until(lambda: len(b_session.owned()) == 2, "b owns two partitions")
            assert [len(partitions) for partitions in revoked] == [2]  # a gave two away
            more = await asyncio.to_thread(produce, cluster, 40, "asyncmore")
            await until(
                lambda: more <= tagged(a_seen, "asyncmore") | tagged(b_seen, "asyncmore"),
                "the two read the new records",
            )
            assert set(await a.lag()) <= {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
        finally:
            tasks = [task for task in (a_task, b_task) if task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await a.close()  # final commit, on_revoked, leave
            if b is not None:
                await b.close()
        assert len(revoked) == 2  # the join's revocation, then close()
        ends: dict[int, int] = {}
        for partition, offset, _ in a_seen + b_seen:
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        with Client(bootstrap(cluster)) as client:
            committed = {o.partition: o.next_offset for o in client.fetch_offsets("async")}
            assert committed.keys() == ends.keys()
            for partition, end in ends.items():
                # Every record handed out was committed at close, and nothing past
                # them but control batches (a new leader's first entry, read and
                # stepped over, when an election happened on a loaded machine).
                assert committed[partition] >= end
                skipped = list(client.records(TOPIC, partition, end, committed[partition]))
                assert skipped == [], (partition, end, committed[partition])

    asyncio.run(scenario())


def test_auto_commit_runs_beside_the_reads_not_in_front_of_them(cluster: ProcessCluster) -> None:
    """Auto-commit hands positions to a committer thread: the application's thread
    never waits for a commit while it reads (a synchronous commit per chunk capped a
    member at one chunk per commit round trip), yet everything read is committed."""
    ledger = Ledger()
    member = Member(cluster, "background", "reader", ledger)
    calls: list[str] = []
    client = member.consumer.client
    original = client.commit_offsets

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(threading.current_thread().name)
        return original(*args, **kwargs)

    client.commit_offsets = recording  # type: ignore[method-assign]
    try:
        wait_for(lambda: len(member.owned) == PARTITIONS, WAIT_S, "the member owns everything")
        values = produce(cluster, 60, "background")
        wait_for(lambda: values <= member.values(), WAIT_S, "the member reads everything")
        session = member.consumer.group_session
        assert session is not None
        ends = {tp: position for tp, position in session._positions().items()}
        wait_for(lambda: session.committed() == ends, WAIT_S, "the reads are committed")
        assert calls and all(name.startswith("laminar-commit-") for name in calls), calls
    finally:
        member.close()


# ----------------------------------------------------------------------------- issue 27


def test_a_member_whose_lease_lapses_hands_out_nothing_more_and_is_told(
    cluster: ProcessCluster,
) -> None:
    """The coordinator stops answering one member (its heartbeats fail) while
    records keep arriving: from the moment its lease lapses (its own clock, from
    the send time of the last acknowledged heartbeat) the member hands out no
    record, ``on_lost`` names everything it read, ``assignment()`` follows the
    hooks, and once heartbeats get through again it rejoins (``on_assigned``)."""
    events: list[tuple[str, float, Any]] = []
    lock = threading.Lock()

    def note(kind: str, value: Any) -> None:
        with lock:
            events.append((kind, time.monotonic(), value))

    consumer: Consumer[bytes, bytes] = Consumer(
        bootstrap(cluster),
        group="lease",
        topics=[TOPIC],
        session_timeout_s=1.0,
        fetch_wait_s=0.1,
        on_assigned=lambda tps: note("assigned", sorted(tps)),
        on_revoked=lambda tps: note("revoked", sorted(tps)),
        on_lost=lambda tps: note("lost", (sorted(tps), consumer.assignment())),
    )
    session = consumer.group_session
    assert session is not None
    real_heartbeat = session._client.group_heartbeat
    blocked = threading.Event()

    def heartbeat(*args: Any, **kwargs: Any) -> Any:
        if blocked.is_set():
            raise UnavailableError("test: the coordinator is unreachable")
        return real_heartbeat(*args, **kwargs)

    session._client.group_heartbeat = heartbeat  # type: ignore[method-assign]
    stop = threading.Event()
    try:
        with Producer(bootstrap(cluster), linger_s=0.0) as producer:

            def produce_steadily() -> None:
                n = 0
                while not stop.wait(0.01):
                    producer.send(TOPIC, f"lease-{n}".encode(), partition=n % PARTITIONS)
                    n += 1

            writer = threading.Thread(target=produce_steadily, daemon=True)
            writer.start()
            records = consumer.records(timeout_s=0.05)
            deadline = time.monotonic() + WAIT_S

            def read_until(condition: Callable[[], bool], what: str) -> None:
                nonlocal records
                while not condition():
                    assert time.monotonic() < deadline, f"timed out waiting for {what}"
                    for record in records:
                        note("record", (record.partition, session.lease_until_s))
                        break
                    else:
                        records = consumer.records(timeout_s=0.05)

            def seen(kind: str) -> bool:
                with lock:
                    return any(e[0] == kind for e in events)

            read_until(lambda: seen("assigned") and seen("record"), "the first records")
            blocked.set()
            read_until(lambda: seen("lost"), "on_lost")
            lapsed_at = time.monotonic()
            read_until(lambda: time.monotonic() > lapsed_at + 0.5, "records after the lapse")
            assert consumer.assignment() == frozenset()
            blocked.clear()
            read_until(lambda: [e[0] for e in events].count("assigned") >= 2, "the rejoin")
            stop.set()
            writer.join(timeout=WAIT_S)
    finally:
        stop.set()
        consumer.close()
    with lock:
        kinds = [e[0] for e in events]
        lost_index = kinds.index("lost")
        rejoined_index = kinds.index("assigned", lost_index)
        zombie = [e for e in events[lost_index:rejoined_index] if e[0] == "record"]
        late = [e for e in events[:lost_index] if e[0] == "record" and e[1] > e[2][1] + 0.05]
        first = events[kinds.index("assigned")][2]
        lost_partitions, assignment_in_hook = events[lost_index][2]
    assert zombie == []  # nothing handed out between the lapse and the rejoin
    assert late == []  # nothing handed out past its lease (50 ms for the bookkeeping)
    assert lost_partitions == first and assignment_in_hook == frozenset()
    assert "revoked" not in kinds[: rejoined_index + 1]  # lost, not revoked
    assert kinds.index("assigned") < lost_index < rejoined_index


@pytest.mark.parametrize("auto_commit", [False, True])
def test_close_commits_from_on_revoked_and_auto_commit_leaves_no_lag(
    cluster: ProcessCluster, auto_commit: bool
) -> None:
    """``close()`` revokes while the member still owns its partitions: an explicit
    commit inside ``on_revoked`` is applied, and an auto-committing member commits
    what it handed out, so a group whose members all read everything and closed
    has no lag."""
    ends = produce_acknowledged(cluster, 40, f"close-{auto_commit}")
    group = f"close-{auto_commit}"
    revoked: list[list[TopicPartition]] = []

    def on_revoked(partitions: list[TopicPartition]) -> None:
        revoked.append(partitions)
        if not auto_commit:
            consumer.commit()  # the final commit, as Kafka users write it

    consumer: Consumer[bytes, bytes] = Consumer(
        bootstrap(cluster),
        group=group,
        topics=[TOPIC],
        auto_commit=auto_commit,
        session_timeout_s=SESSION_S,
        on_revoked=on_revoked,
    )
    try:
        read_to = read_everything(consumer, ends)
    finally:
        consumer.close()
    assert sorted(revoked[-1]) == sorted(ends)
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        committed = {(o.topic, o.partition): o.next_offset for o in client.fetch_offsets(group)}
    assert committed == read_to, "lag after close"


def read_everything(
    consumer: Consumer[Any, Any], ends: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Read until every partition's position reaches ``ends``; the positions."""

    def positions() -> dict[TopicPartition, int]:
        return {tp: consumer.position(tp) for tp in consumer.assignment()}

    deadline = time.monotonic() + WAIT_S
    while not (
        positions().keys() == ends.keys()
        and all(positions()[tp] >= end for tp, end in ends.items())
    ):
        assert time.monotonic() < deadline, f"reading everything: {positions()}"
        for _ in consumer.records(timeout_s=0.2):
            pass
    return positions()


def produce_acknowledged(
    cluster: ProcessCluster, count: int, tag: str
) -> dict[TopicPartition, int]:
    """Produce ``count`` records; the offset after the last one per partition."""
    ends: dict[TopicPartition, int] = {}
    with Producer(bootstrap(cluster)) as producer:
        futures = [
            producer.send(TOPIC, f"{tag}-{n}".encode(), partition=n % PARTITIONS)
            for n in range(count)
        ]
        producer.flush()
        for future in futures:
            metadata = future.result(timeout=0)
            tp = TopicPartition(metadata.topic, metadata.partition)
            ends[tp] = max(ends.get(tp, 0), metadata.offset + 1)
    return ends


@pytest.mark.parametrize("group", ["", "g" * 300, "a\x00b"])
def test_a_bad_group_name_is_refused_when_the_consumer_is_made(group: str) -> None:
    with pytest.raises(InvalidInputError, match="group id"):
        Consumer("127.0.0.1:1", group=group, topics=[TOPIC])


def test_a_subscription_needs_topics_or_a_pattern(cluster: ProcessCluster) -> None:
    with Consumer(bootstrap(cluster), group="no-topics") as consumer:
        with pytest.raises(InvalidInputError, match="needs topics or a pattern"):
            consumer.subscribe([])
        with pytest.raises(InvalidInputError, match="not both"):
            consumer.subscribe([TOPIC], pattern="e.*")
    with pytest.raises(InvalidInputError, match="need a group"):
        Consumer(bootstrap(cluster), topics=[TOPIC])


def test_an_unknown_topic_is_raised_from_the_iteration(cluster: ProcessCluster) -> None:
    """A group subscribed to a topic that does not exist, and a consumer assigned a
    partition of one, both raise UnknownTopicOrPartitionError from the iteration
    (after the couple of seconds a new topic may take to spread), not 0 records."""
    with Consumer(bootstrap(cluster), group="unknown", topics=["no-such-topic"]) as member:
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="no-such-topic"):
            for _ in member.records(timeout_s=WAIT_S):
                pass
        assert time.monotonic() - started < 10
    with Consumer(bootstrap(cluster)) as consumer:
        consumer.assign([("no-such-topic", 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            for _ in consumer.records(timeout_s=WAIT_S):
                pass


def test_a_closed_consumer_refuses_every_call(cluster: ProcessCluster) -> None:
    consumer: Consumer[bytes, bytes] = Consumer(bootstrap(cluster), group="closed", topics=[TOPIC])
    consumer.close()
    for call in (consumer.assignment, consumer.lag, consumer.commit, consumer.committed_lag):
        with pytest.raises(ClientClosedError):
            call()
    with pytest.raises(ClientClosedError):
        consumer.assign([(TOPIC, 0)])


def test_a_subscribed_member_refuses_assign_but_seeks_what_it_owns(
    cluster: ProcessCluster,
) -> None:
    """As in Kafka: ``assign`` and ``subscribe`` are exclusive; ``seek`` moves the
    position of an owned partition and the next commit commits it."""
    ends = produce_acknowledged(cluster, 8, "seek")
    with Consumer(bootstrap(cluster), group="seeker", topics=[TOPIC], auto_commit=False) as c:
        wait_for_assignment(c, PARTITIONS)
        with pytest.raises(InvalidInputError, match="unsubscribe"):
            c.assign([(TOPIC, 0)])
        tp = TopicPartition(TOPIC, 0)
        for other in c.assignment() - {tp}:
            c.pause(other)
        c.seek(tp, ends[tp] - 1)
        record = next(iter(c.records(timeout_s=WAIT_S)))
        assert (record.partition, record.offset) == (0, ends[tp] - 1)
        c.commit()
        assert c.committed([tp]) == {tp: ends[tp]}
        c.unsubscribe()
        assert c.assignment() == frozenset()
        c.assign([tp])  # allowed again once unsubscribed
        assert c.assignment() == {tp}
        with pytest.raises(InvalidInputError, match="assign"):
            c.subscribe(TOPIC)


def test_subscribe_unsubscribe_and_the_offsets_calls(cluster: ProcessCluster) -> None:
    """Kafka's names: ``subscribe`` (topics or a pattern) joins, ``unsubscribe``
    leaves (revoking with the hooks), ``committed``, ``beginning_offsets`` and
    ``end_offsets`` answer for any partition."""
    ends = produce_acknowledged(cluster, 8, "subscribe")
    hooks: list[str] = []
    with Consumer(
        bootstrap(cluster),
        group="subscriber",
        on_assigned=lambda tps: hooks.append("assigned"),
        on_revoked=lambda tps: hooks.append("revoked"),
    ) as consumer:
        assert consumer.assignment() == frozenset() and consumer.group_session is None
        consumer.subscribe(pattern="even.*")  # nothing to read yet
        consumer.subscribe(TOPIC)  # another subscription: leave, then join
        wait_for_assignment(consumer, PARTITIONS)
        assert consumer.end_offsets(ends) == ends
        assert set(consumer.beginning_offsets(ends).values()) == {0}
        assert consumer.committed(ends) == dict.fromkeys(ends)  # nothing committed yet
        read_to = read_everything(consumer, ends)
        consumer.unsubscribe()  # revokes: auto-commit, on_revoked
        assert consumer.assignment() == frozenset() and hooks == ["assigned", "revoked"]
        assert consumer.committed(ends) == read_to


def test_a_deserializer_error_names_the_record_and_holds_the_position(
    cluster: ProcessCluster,
) -> None:
    """A value the deserializer refuses raises RecordDeserializationError with its
    topic, partition and offset once the records before it were handed out; it is
    raised again until the application seeks past it, as in Kafka."""
    topic = "poison"
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        client.create_topic(topic, 1, 3)
    wait_leader(cluster, topic, 0)
    values = [b'{"n": 1}', b'{"n": 2}', b"not json", b'{"n": 4}']
    with Producer(bootstrap(cluster)) as producer:
        for value in values:
            producer.send(topic, value, partition=0)
    with Consumer(bootstrap(cluster), value_deserializer=json_deserializer) as consumer:
        consumer.assign([(topic, 0)])
        got = []
        with pytest.raises(RecordDeserializationError) as raised:
            for record in consumer.records(timeout_s=WAIT_S):
                got.append(record.value)
        error = raised.value
        assert got == [{"n": 1}, {"n": 2}]
        assert (error.topic, error.partition, error.field) == (topic, 0, "value")
        assert f"offset {error.offset}" in str(error) and isinstance(error.__cause__, ValueError)
        assert consumer.position((topic, 0)) == error.offset
        with pytest.raises(RecordDeserializationError):
            next(iter(consumer.records(timeout_s=WAIT_S)))
        consumer.seek((topic, 0), error.offset + 1)
        assert next(iter(consumer.records(timeout_s=WAIT_S))).value == {"n": 4}


def test_every_error_is_exported_from_laminar_client() -> None:
    import laminar_client

    from laminar import errors

    public = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.LaminarError)
    }
    assert public <= set(laminar_client.__all__)
    assert all(getattr(laminar_client, name) is getattr(errors, name) for name in public)


def wait_for_assignment(consumer: Consumer[Any, Any], count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(consumer.assignment()) < count:
        assert time.monotonic() < deadline, "the group did not assign the partitions"
        for _ in consumer.records(timeout_s=0.1):
            break


def test_the_async_consumer_keeps_the_lease_and_commits_at_close(cluster: ProcessCluster) -> None:
    """:class:`AsyncConsumer` runs the same steps: after ``subscribe`` it reads, a
    lapsed lease stops it at once and awaits the ``on_lost`` coroutine, and
    ``close`` awaits ``on_revoked``, which can still commit."""
    ends = produce_acknowledged(cluster, 8, "async-lease")
    hooks: list[tuple[str, float]] = []
    handed: list[float] = []

    async def main() -> dict[TopicPartition, int]:
        async def on_lost(partitions: list[TopicPartition]) -> None:
            hooks.append(("lost", time.monotonic()))

        async def on_revoked(partitions: list[TopicPartition]) -> None:
            hooks.append(("revoked", time.monotonic()))
            await consumer.commit()

        consumer: AsyncConsumer[bytes, bytes] = AsyncConsumer(
            bootstrap(cluster),
            group="async-lease",
            session_timeout_s=1.0,
            auto_commit=False,
            on_assigned=lambda tps: hooks.append(("assigned", time.monotonic())),
            on_revoked=on_revoked,
            on_lost=on_lost,
        )
        try:
            await consumer.subscribe([TOPIC])
            session = consumer.group_session
            assert session is not None
            real = session._client.group_heartbeat

            def refused(*args: Any, **kwargs: Any) -> Any:
                raise UnavailableError("test: the coordinator is unreachable")

            async def read_until(what: str, done: Callable[[], bool]) -> None:
                deadline = time.monotonic() + WAIT_S
                while not done():
                    assert time.monotonic() < deadline, (what, hooks)
                    async for _ in consumer.records(timeout_s=0.1):
                        handed.append(time.monotonic())
                        break

            await read_until("assigned", lambda: any(h[0] == "assigned" for h in hooks))
            session._client.group_heartbeat = refused  # type: ignore[method-assign]
            await read_until("lost", lambda: any(h[0] == "lost" for h in hooks))
            session._client.group_heartbeat = real  # type: ignore[method-assign]
            await read_until("rejoin", lambda: [h[0] for h in hooks].count("assigned") == 2)
            positions: dict[TopicPartition, int] = {}
            deadline = time.monotonic() + WAIT_S
            while positions.keys() != ends.keys() or any(
                positions[tp] < end for tp, end in ends.items()
            ):
                assert time.monotonic() < deadline, f"reading everything: {positions}"
                async for _ in consumer.records(timeout_s=0.2):
                    pass
                positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
            return positions
        finally:
            await consumer.close()

    read_to = asyncio.run(main())
    kinds = [kind for kind, _ in hooks]
    assert kinds == ["assigned", "lost", "assigned", "revoked"], kinds
    lost_at, rejoined_at = hooks[1][1], hooks[2][1]
    assert not [t for t in handed if lost_at <= t < rejoined_at]
    with Client(bootstrap(cluster), timeout_s=CLIENT_TIMEOUT_S) as client:
        committed = {
            (o.topic, o.partition): o.next_offset for o in client.fetch_offsets("async-lease")
        }
    assert committed == read_to


def test_a_member_with_another_subscription_is_told_not_left_retrying(
    cluster: ProcessCluster,
) -> None:
    """Mixed subscriptions in one group are not supported: the second member's join
    is refused, and its iteration raises that instead of yielding nothing while its
    heartbeats retry for ever."""
    with Consumer(bootstrap(cluster), group="mixed", topics=[TOPIC]) as first:
        wait_for_assignment(first, PARTITIONS)
        with (
            Consumer(bootstrap(cluster), group="mixed", pattern="ev.*") as second,
            pytest.raises(InvalidInputError, match="one group has one subscription"),
        ):
            for _ in second.records(timeout_s=WAIT_S):
                pass
