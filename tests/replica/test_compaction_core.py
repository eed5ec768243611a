"""Keyed compaction agreed through the log: the core's side (the ``compact`` control
batch, its ``Compact`` event, ``compacted_through``)."""

from __future__ import annotations

import dataclasses
import random

import msgpack
import pytest

from laminar.errors import CorruptBatchError
from laminar.records import DEFAULT_LIMITS, encode_batch, iter_batches
from laminar.replica.compaction_control import CONTROL_COMPACT, command_end, compact_in
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore, StorageDamage
from laminar.replica.messages import AppendRequest, AppendResponse, Compact, InstallStart
from laminar.replica.producers import ProducerTable, Verdict
from laminar.replica.state import decode_state, encode_state
from laminar.replica.types import Acks, GroupConfig, NodeId
from laminar.segment.compaction import CompactCommand
from laminar.segment.memory import MemoryLog
from tests.replica.test_core import CONFIG, GROUP, Group

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")
NO_QUIESCE = dataclasses.replace(CONFIG, quiesce=False)


def _command(end: int, tombstones_end: int = 0, time_ms: int = 0) -> bytes:
    return CompactCommand(end, tombstones_end, codec=0, time_ms=time_ms).to_value()


class TracingGroup(Group):
    """A Group that keeps each node's Readies apart."""

    def __init__(self, config: ReplicaConfig = NO_QUIESCE) -> None:
        super().__init__(config=config)
        self.events: dict[NodeId, list[object]] = {node: [] for node in self.cores}

    def drain(self) -> None:
        for node, core in self.cores.items():
            while core.has_ready():
                ready = core.ready()
                self.events[node].extend(ready.events)
                if ready.sync:
                    self.storages[node].sync()
                self.wire.extend((node, m) for m in ready.early_messages + ready.messages)
                self.replies[node].extend(ready.replies)
                core.advance(ready)

    def compacts(self, node: NodeId) -> list[Compact]:
        return [event for event in self.events[node] if isinstance(event, Compact)]


def _produce(group: Group, count: int) -> None:
    leader = group.leader()
    for index in range(count):
        leader.propose(index, encode_batch([b"v%d" % index], keys=[b"k"]), Acks.ALL, group.now)
        group.advance_time(20)


def test_a_leader_proposes_and_every_replica_gets_the_command_once_committed() -> None:
    group = TracingGroup()
    group.elect(A)
    _produce(group, 3)
    leader = group.cores[A]
    value = _command(end=4)
    offset = leader.propose_compact(value, group.now)
    assert offset == leader.end_offset - 1 == 4
    # Appended, not committed yet: nobody compacts.
    group.drain()
    assert all(group.compacts(node) == [] for node in group.cores)
    group.advance_time(100)
    for node, core in group.cores.items():
        assert group.compacts(node) == [Compact(offset, value)], node
        assert core.compact_commands == ((offset, value),)
    # The batch is a control batch with key "compact", replicated like any other.
    for storage in group.storages.values():
        data = storage.read(offset, 1 << 20)
        ((_, header),) = list(iter_batches(data))
        assert header.is_control
        assert compact_in(header, data, DEFAULT_LIMITS) == value
    # Exactly once: more commits, more Readies, no second event.
    _produce(group, 2)
    group.advance_time(200)
    assert all(len(group.compacts(node)) == 1 for node in group.cores)


def test_only_a_leader_with_its_term_committed_may_propose() -> None:
    group = TracingGroup()
    group.elect(A)
    assert group.cores[B].propose_compact(_command(1), group.now) is None
    assert group.cores[A].propose_compact(_command(1), group.now) is not None


def test_an_uncommitted_command_truncated_away_is_never_given() -> None:
    group = TracingGroup()
    group.elect(A)
    _produce(group, 2)
    offset = group.cores[A].propose_compact(_command(3), group.now)
    group.deliver_all(drop_to={A})  # the batch stays on A alone
    assert offset is not None and group.cores[A].end_offset == offset + 1
    group.elect(B)  # B never saw the command; A's copy is truncated
    group.advance_time(300)
    assert group.cores[A].end_offset == group.cores[B].end_offset
    assert group.cores[A].compact_commands == ()
    assert all(group.compacts(node) == [] for node in group.cores)


def _restart(group: TracingGroup, node: NodeId) -> ReplicaCore:
    group.storages[node].sync()
    core = ReplicaCore(
        node, group.storages[node], NO_QUIESCE, now_ms=group.now, rng=random.Random(2)
    )
    group.cores[node] = core
    return core


def test_a_restart_gives_again_the_commands_past_compacted_through() -> None:
    group = TracingGroup()
    group.elect(A)
    _produce(group, 2)
    first = group.cores[A].propose_compact(_command(3), group.now)
    group.advance_time(100)
    second = group.cores[A].propose_compact(_command(4), group.now)
    group.advance_time(100)
    assert first is not None and second is not None
    assert [event.offset for event in group.compacts(B)] == [first, second]
    # B applied the first only; C applied both; neither ran A's.
    group.cores[B].compaction_done(first)
    group.cores[C].compaction_done(second)
    group.advance_time(50)  # the staged saves are synced
    restarted_b = _restart(group, B)
    restarted_c = _restart(group, C)
    assert restarted_b.compacted_through == first
    assert restarted_c.compacted_through == second
    group.events[B].clear()
    group.events[C].clear()
    group.advance_time(300)  # the leader's heartbeats move their watermarks again
    assert restarted_b.high_watermark > second
    assert [event.offset for event in group.compacts(B)] == [second]
    assert group.compacts(C) == []
    # Every command is still known for the decision's history.
    assert [offset for offset, _ in restarted_c.compact_commands] == [first, second]


@pytest.mark.timeout(30)
def test_a_log_ending_in_a_gap_opens() -> None:
    """A sealed segment whose last batches compaction removed, and an empty active
    segment after it (rolled for the command, its unsynced batches lost in a
    crash): the log ends in a gap, where a read returns nothing. Opening a core on
    it must not read there for ever (it did: the simulator's seed 32 hung)."""
    group = TracingGroup()
    group.elect(A)
    _produce(group, 4)
    log = group.storages[C]
    end = log.end_offset
    log.roll()
    ((base, sealed_end),) = [(b, e) for b, e in log.sealed_segments() if b < end < e + 1]
    kept = list(log.read_segment(base))[:-2]  # the last two records' batches go
    log.replace_segment(base, kept)
    assert log.end_offset == sealed_end == end and log.read(end - 1, 1 << 20) == b""
    restarted = _restart(group, C)
    assert restarted.end_offset == end
    group.advance_time(300)
    assert restarted.high_watermark == group.cores[A].high_watermark


def test_the_shell_prunes_only_commands_already_given() -> None:
    group = TracingGroup()
    group.elect(A)
    first = group.cores[A].propose_compact(_command(1), group.now)
    group.advance_time(100)
    second = group.cores[A].propose_compact(_command(2), group.now)
    group.drain()  # appended, not committed
    leader = group.cores[A]
    leader.prune_compact_commands(second + 1)  # type: ignore[operator]
    assert [offset for offset, _ in leader.compact_commands] == [second]
    assert first is not None


def test_compacted_through_is_kept_in_the_state_and_old_states_read_as_none() -> None:
    state = encode_state(3, A, [(-1, GROUP)], [], None, 17)
    assert decode_state(state).compacted_through == 17
    older = encode_state(3, A, [(-1, GROUP)], [])
    assert "compacted" not in msgpack.unpackb(older)
    assert decode_state(older).compacted_through == -1


def test_command_end_reads_the_end_and_refuses_garbage() -> None:
    assert command_end(_command(42)) == 42
    for bad in (b"", b"\x01", msgpack.packb({"v": 1}), msgpack.packb({"end": -1})):
        with pytest.raises(CorruptBatchError):
            command_end(bad)


def test_producers_below_a_command_end_are_forgotten_so_no_false_out_of_order() -> None:
    # Compaction may trim a producer's last batch below E: the trimmed run keeps
    # the original base sequence, so its record count no longer predicts the next
    # sequence. The table forgets what lies below E (risk 7 of the plan).
    table = ProducerTable(5, 100)
    table.record(7, 0, 1, 0)
    table.record(7, 1, 1, 5)  # a run trimmed from a batch of sequences 1..4
    table.record(8, 0, 2, 20)
    assert table.check(7, 5, 1).verdict is Verdict.OUT_OF_ORDER
    table.forget_before(10)
    assert table.check(7, 5, 1).verdict is Verdict.NEW  # unknown producer: accepted
    assert table.check(8, 0, 2).verdict is Verdict.DUPLICATE  # above E: still known


def test_a_rebuilt_producer_table_forgets_below_the_newest_command_end() -> None:
    group = TracingGroup()
    group.elect(A)
    leader = group.cores[A]
    for sequence in range(2):
        batch = encode_batch([b"x"], keys=[b"k"], producer_id=9, base_sequence=sequence)
        leader.propose(sequence, batch, Acks.ALL, group.now)
        group.advance_time(20)
    retry = encode_batch([b"x"], keys=[b"k"], producer_id=9, base_sequence=1)
    assert leader._producers.check(9, 1, 1).verdict is Verdict.DUPLICATE
    end = leader.end_offset
    leader.propose_compact(_command(end), group.now)
    group.advance_time(100)
    # Forgotten at once on every replica whose watermark passed the command...
    assert group.cores[B]._producers.check(9, 1, 1).verdict is Verdict.NEW
    # ... and on a restart, from the commands in the log.
    restarted = _restart(group, C)
    assert restarted._producers.check(9, 1, 1).verdict is Verdict.NEW
    assert retry  # (the batch a producer would retry)


def test_a_compact_batch_is_not_taken_for_a_configuration() -> None:
    storage = MemoryLog(fsync=False)
    core = ReplicaCore(
        A, storage, CONFIG, now_ms=0, rng=random.Random(1), initial=GroupConfig((A,))
    )
    while core.has_ready():
        core.advance(core.ready())
    assert core.propose_compact(_command(1), 10) == 1
    assert core.group_config == GroupConfig((A,))
    events = []
    while core.has_ready():  # a group of one commits once its own log is durable
        ready = core.ready()
        events.extend(event for event in ready.events if isinstance(event, Compact))
        core.advance(ready)
    assert events == [Compact(1, _command(1))]
    assert CONTROL_COMPACT == b"compact"


def test_a_new_replica_takes_the_leaders_gapped_log_and_acknowledges_it() -> None:
    # The leader's log after compaction: some data batches gone, offsets kept. A
    # replica added now (a learner: an empty log, no configuration) is sent it from
    # the start and must append past its end where the leader's log has gaps.
    group = TracingGroup()
    group.elect(A)
    _produce(group, 6)
    leader = group.cores[A]
    data = leader.read(0, 1 << 20)
    kept = [
        bytes(data[position : position + header.length])
        for position, header in iter_batches(data)
        if header.is_control or header.base_offset % 2 == 0  # drop odd data batches
    ]
    gapped = b"".join(kept)
    storage = MemoryLog(fsync=False)
    learner = ReplicaCore(NodeId("d"), storage, NO_QUIESCE, now_ms=group.now, rng=random.Random(3))
    request = AppendRequest(
        term=leader.term,
        leader=A,
        prev_end_offset=0,
        prev_term=-1,
        batches=gapped,
        end_offset=leader.end_offset,
        commit_offset=leader.high_watermark,
    )
    learner.step(A, request, group.now)
    answers = [m.message for m in learner.ready().messages]
    assert answers and all(isinstance(a, AppendResponse) and a.success for a in answers)
    assert storage.end_offset == leader.end_offset
    assert storage.read(0, 1 << 20) == gapped
    # Terms in the gaps are those of the batches before them: log matching holds.
    assert [storage.term_at(o) for o in range(leader.end_offset)] == [
        group.storages[A].term_at(o) for o in range(leader.end_offset)
    ]


# ------------------------------------------------------------ a log the leader forgot


def _reconfiguring_group() -> TracingGroup:
    return TracingGroup(dataclasses.replace(NO_QUIESCE, reconfigure_stable_ms=0))


def _sent_to(group: TracingGroup, peer: NodeId) -> list[object]:
    """Every message the group's wire carries to ``peer`` from now on (a spy on
    delivery)."""
    seen: list[object] = []
    core = group.cores[peer]
    real_step = core.step

    def step(source: NodeId, message: object, now_ms: int) -> None:
        seen.append(message)
        real_step(source, message, now_ms)  # type: ignore[arg-type]

    core.step = step  # type: ignore[method-assign]
    return seen


def test_a_replica_re_added_with_an_old_log_below_removed_tombstones_restarts_past_it() -> None:
    """C is removed and keeps its log; while it is away the others append a command
    whose tombstones_end T lies past C's log end, so the leader's copy of the range
    between has tombstones removed. Re-added with its old log, C must not take that
    range on top of its own older records (a key deleted there would come back on
    C alone): the leader sends it nothing until it restarted its log past its own
    records (InstallStart.discard), then replicates as usual."""
    group = _reconfiguring_group()
    group.elect(A)
    _produce(group, 4)
    leader = group.cores[A]
    leader.set_target((A, B), group.now)
    group.advance_time(2_000)
    assert group.cores[C].removed
    held = group.storages[C].end_offset
    _produce(group, 4)
    tombstones_end = leader.high_watermark
    assert tombstones_end > held
    offset = leader.propose_compact(_command(tombstones_end, tombstones_end), group.now)
    group.advance_time(200)
    assert offset is not None and leader.high_watermark > offset
    # C comes back on its old log: a fresh core, as the node opens it.
    storage = group.storages[C]
    group.cores[C] = ReplicaCore(C, storage, NO_QUIESCE, now_ms=group.now, rng=random.Random(3))
    seen = _sent_to(group, C)
    leader.set_target((A, B, C), group.now)
    group.advance_time(3_000)
    assert set(leader.group_config.voters) == {A, B, C}  # type: ignore[union-attr]
    installs = [m for m in seen if isinstance(m, InstallStart)]
    assert installs and all(m.discard for m in installs)
    restart = installs[0].start_offset
    assert restart >= held
    # Nothing of the leader's log went to C below T before its log restarted.
    before = seen[: seen.index(installs[0])]
    assert all(
        not m.batches or m.prev_end_offset >= tombstones_end
        for m in before
        if isinstance(m, AppendRequest)
    )
    assert storage.start_offset == restart
    assert group.cores[C].end_offset == leader.end_offset
    assert storage.read(restart, 1 << 20) == group.storages[A].read(restart, 1 << 20)


def test_a_new_empty_replica_is_not_restarted_by_removed_tombstones() -> None:
    """An empty log holds nothing of its own: a replica added after a command with
    T > 0 copies the leader's log from its start, all of it."""
    group = _reconfiguring_group()
    group.elect(A)
    leader = group.cores[A]
    leader.set_target((A, B), group.now)
    group.advance_time(2_000)
    _produce(group, 4)
    offset = leader.propose_compact(_command(4, 4), group.now)
    group.advance_time(200)
    assert offset is not None
    storage = MemoryLog(fsync=False)
    group.storages[C] = storage
    group.cores[C] = ReplicaCore(C, storage, NO_QUIESCE, now_ms=group.now, rng=random.Random(3))
    seen = _sent_to(group, C)
    leader.set_target((A, B, C), group.now)
    group.advance_time(3_000)
    assert set(leader.group_config.voters) == {A, B, C}  # type: ignore[union-attr]
    assert not [m for m in seen if isinstance(m, InstallStart)]
    assert storage.start_offset == 0
    assert storage.read(0, 1 << 20) == group.storages[A].read(0, 1 << 20)


def test_a_discard_is_ignored_below_the_followers_watermark_and_taken_at_it() -> None:
    group = TracingGroup()
    group.elect(A)
    _produce(group, 4)
    leader, follower = group.cores[A], group.cores[B]
    group.advance_time(200)
    watermark = follower.high_watermark
    assert watermark == leader.high_watermark > 2
    config = msgpack.packb([-1, list(GROUP.voters), []])
    start_term = leader._term_before(watermark - 1)
    follower.step(
        A,
        InstallStart(leader.term, A, watermark - 1, start_term, config, watermark, discard=True),
        group.now,
    )
    assert follower.start_offset == 0  # ignored: it would take its watermark back
    assert not [m for m in follower.ready().messages if isinstance(m.message, AppendResponse)]
    follower.step(
        A,
        InstallStart(
            leader.term, A, watermark, leader._term_before(watermark), config, watermark, True
        ),
        group.now,
    )
    # Its log matches there, and is restarted all the same.
    assert follower.start_offset == follower.end_offset == watermark
    (answer,) = [m.message for m in follower.ready().messages]
    assert isinstance(answer, AppendResponse) and answer.success
    assert answer.match_offset == answer.log_start == watermark


def test_a_command_lost_with_the_end_of_the_log_is_applied_again_when_it_comes_back() -> None:
    """B applied a command, then lost the end of its log holding it (damaged storage,
    or entries not synced yet) while its state kept ``compacted_through``. The
    entries and the command come back from the leader uncompacted on B: the command
    must be given again, or B keeps what it removes (the simulator's seed 815 with
    --compaction --damage)."""
    group = TracingGroup()
    group.elect(A)
    _produce(group, 3)
    offset = group.cores[A].propose_compact(_command(3), group.now)
    group.advance_time(100)
    assert offset is not None
    assert [event.offset for event in group.compacts(B)] == [offset]
    group.cores[B].compaction_done(offset)
    group.advance_time(50)  # the staged save is synced
    storage = group.storages[B]
    storage.truncate_suffix(offset - 1)  # the command and the batch before it
    storage.sync()
    restarted = ReplicaCore(
        B,
        storage,
        NO_QUIESCE,
        now_ms=group.now,
        rng=random.Random(2),
        damage=StorageDamage(lost_entries=True, lost_state=False),
    )
    group.cores[B] = restarted
    assert restarted.compacted_through < offset
    group.events[B].clear()
    group.advance_time(300)
    assert restarted.end_offset == group.cores[A].end_offset
    assert [event.offset for event in group.compacts(B)] == [offset]
