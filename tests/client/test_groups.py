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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from laminar_client import AsyncConsumer, Client, Consumer, Producer
from laminar_client.consumer import TopicPartition

from laminar.errors import FencedMemberError, GroupNotEmptyError
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
