"""Unit tests of the replication core, driven message by message."""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable

import msgpack
import pytest

from laminar.errors import ConfigError, OffsetOutOfRangeError
from laminar.records import decode_records, encode_batch, iter_batches, with_leader_fields
from laminar.replica.coalesce import Coalescer
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore, encode_config
from laminar.replica.epochs import Epochs
from laminar.replica.messages import (
    AppendRequest,
    AppendResponse,
    Heartbeat,
    Message,
    Outbound,
    ProduceStatus,
    Ready,
    VoteRequest,
    VoteResponse,
)
from laminar.replica.producers import ProducerTable, Verdict
from laminar.replica.quorum import majority_offset
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.memory import MemoryLog
from tests.batches import columns_beyond_payload

CONFIG = ReplicaConfig.simulation()
A, B, C = NodeId("a"), NodeId("b"), NodeId("c")
GROUP = GroupConfig((A, B, C))


class Group:
    """Three cores and a hand-driven network: nothing moves unless the test says so."""

    def __init__(self, group: GroupConfig = GROUP, config: ReplicaConfig = CONFIG) -> None:
        self.now = 0
        self.storages = {node: MemoryLog(fsync=False) for node in group.voters}
        self.cores = {
            node: ReplicaCore(
                node, self.storages[node], config, now_ms=0, rng=random.Random(node), initial=group
            )
            for node in group.voters
        }
        self.wire: deque[tuple[NodeId, Outbound]] = deque()
        self.replies: dict[NodeId, list[object]] = {node: [] for node in group.voters}
        self.readies: list[Ready] = []

    def drain(self) -> None:
        for node, core in self.cores.items():
            while core.has_ready():
                ready = core.ready()
                self.readies.append(ready)
                if ready.sync:
                    self.storages[node].sync()
                self.wire.extend((node, m) for m in ready.early_messages + ready.messages)
                self.replies[node].extend(ready.replies)
                core.advance(ready)

    def deliver_all(self, *, drop_to: set[NodeId] | None = None, limit: int = 10_000) -> None:
        for _ in range(limit):
            self.drain()
            if not self.wire:
                return
            source, outbound = self.wire.popleft()
            if drop_to and (outbound.destination in drop_to or source in drop_to):
                continue
            self.cores[outbound.destination].step(source, outbound.message, self.now)
        raise AssertionError("the network did not go quiet")

    def advance_time(self, delta_ms: int, *, drop_to: set[NodeId] | None = None) -> None:
        end = self.now + delta_ms
        while self.now < end:
            self.now += 10
            for node, core in self.cores.items():
                if drop_to and node in drop_to:
                    continue
                if core.next_wake_ms() <= self.now:
                    core.tick(self.now)
            self.deliver_all(drop_to=drop_to)

    def elect(self, node: NodeId) -> None:
        self.cores[node].hint_leader_dead(self.now)
        self.cores[node].tick(self.now + CONFIG.election_timeout_min_ms)
        self.now += CONFIG.election_timeout_min_ms
        self.deliver_all()
        assert self.cores[node].role is Role.LEADER

    def leader(self) -> ReplicaCore:
        (leader,) = [core for core in self.cores.values() if core.role is Role.LEADER]
        return leader


def _batch(value: bytes, **kwargs: int) -> bytes:
    return encode_batch([value], **kwargs)


def test_a_leader_is_elected_and_commits_its_noop() -> None:
    group = Group()
    group.elect(A)
    leader = group.cores[A]
    assert leader.term == 1 and leader.leader == A
    assert leader.high_watermark == 1  # the no-op control batch
    group.advance_time(100)
    assert all(core.high_watermark == 1 for core in group.cores.values())
    assert all(core.leader == A for core in group.cores.values())


def test_propose_commits_and_replicas_serve_reads_below_their_watermark() -> None:
    group = Group()
    group.elect(A)
    group.cores[A].propose(1, _batch(b"x"), Acks.ALL, group.now)
    group.deliver_all()
    (reply,) = group.replies[A]
    assert reply.status is ProduceStatus.OK and reply.base_offset == 1  # type: ignore[attr-defined]
    group.advance_time(100)
    for core in group.cores.values():
        data = core.read(1, 1 << 20)
        assert [h.base_offset for _, h in iter_batches(data)] == [1]
        assert core.read(2, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRangeError):
        _core_starting_at_5().read(0, 10)


def test_followers_in_step_share_one_read_of_the_new_batches() -> None:
    group = Group()
    group.elect(A)
    leader_log = group.storages[A]
    reads: list[int] = []
    original_read = leader_log.read

    def counting_read(offset: int, max_bytes: int) -> bytes:
        reads.append(offset)
        return original_read(offset, max_bytes)

    leader_log.read = counting_read  # type: ignore[method-assign]
    group.cores[A].propose(1, _batch(b"x"), Acks.ALL, group.now)
    ready = group.cores[A].ready()
    appends = [m for m in ready.early_messages if isinstance(m.message, AppendRequest)]
    assert sorted(m.destination for m in appends) == [B, C]
    assert reads == [1]  # one read for both followers
    assert appends[0].message == appends[1].message
    assert next(iter(iter_batches(appends[0].message.batches)))[1].base_offset == 1
    group.cores[A].advance(ready)
    group.wire.extend((A, m) for m in ready.early_messages + ready.messages)
    group.advance_time(100)
    assert all(core.high_watermark == 2 for core in group.cores.values())


def _core_starting_at_5() -> ReplicaCore:
    storage = MemoryLog(5, fsync=False)
    return ReplicaCore(A, storage, CONFIG, now_ms=0, rng=random.Random(1), initial=GROUP)


def test_commit_needs_a_majority_of_durable_copies() -> None:
    group = Group()
    group.elect(A)
    group.cores[A].propose(1, _batch(b"x"), Acks.ALL, group.now)
    group.deliver_all(drop_to={B, C})
    assert group.cores[A].high_watermark == 1
    assert group.replies[A] == []
    group.advance_time(CONFIG.election_timeout_min_ms)  # lost appends are sent again
    assert group.cores[A].high_watermark == 2


def test_term_and_vote_survive_a_restart_before_any_answer() -> None:
    storage = MemoryLog(fsync=False)
    core = ReplicaCore(B, storage, CONFIG, now_ms=0, rng=random.Random(1), initial=GROUP)
    core.step(A, VoteRequest(3, A, 0, -1, pre_vote=False), 0)
    ready = core.ready()
    assert [m.message for m in ready.messages] == [VoteResponse(3, B, True, False)]
    assert ready.sync  # the vote must be durable before the answer leaves
    # Crash before the sync: the vote was never sent, and it is forgotten; what
    # remains is the founding state (term 1 belongs to the first voter, A).
    forgot = ReplicaCore(B, storage.crash(), CONFIG, now_ms=0, rng=random.Random(1))
    assert (forgot.term, forgot.voted_for) == (1, A)
    storage.sync()
    restarted = ReplicaCore(
        B, storage.crash(), CONFIG, now_ms=0, rng=random.Random(1), initial=None
    )
    assert (restarted.term, restarted.voted_for) == (3, A)
    assert restarted.group_config == GROUP
    restarted.step(C, VoteRequest(3, C, 0, -1, pre_vote=False), 0)
    assert [m.message for m in restarted.ready().messages] == [VoteResponse(3, B, False, False)]


def test_vote_only_for_an_up_to_date_log() -> None:
    group = Group()
    group.elect(A)
    group.cores[A].propose(1, _batch(b"x"), Acks.ALL, group.now)
    group.deliver_all()
    b = group.cores[B]
    b.hint_leader_dead(group.now)  # drop the lease
    b.step(C, VoteRequest(5, C, end_offset=1, last_term=1, pre_vote=False), group.now)
    (message,) = [m.message for m in b.ready().messages]
    assert isinstance(message, VoteResponse) and not message.granted
    assert b.term == 5  # a higher term is adopted even when the vote is refused


def test_pre_vote_does_not_raise_terms_and_the_lease_refuses_disruption() -> None:
    group = Group()
    group.elect(A)
    group.advance_time(100)
    b = group.cores[B]
    term = b.term
    # C was cut off and comes back wanting an election: B still hears from A.
    b.step(C, VoteRequest(term + 1, C, 10**6, 10**6, pre_vote=True), group.now)
    (message,) = [m.message for m in b.ready().messages]
    assert isinstance(message, VoteResponse) and not message.granted
    assert b.term == term and group.cores[A].role is Role.LEADER


def test_isolated_follower_does_not_depose_the_leader_on_return() -> None:
    group = Group()
    group.elect(A)
    group.advance_time(3_000, drop_to={C})  # C times out again and again (pre-votes only)
    assert group.cores[C].term == group.cores[A].term
    group.advance_time(500)
    assert group.cores[A].role is Role.LEADER and group.cores[C].leader == A


def test_check_quorum_makes_an_isolated_leader_step_down_and_refuse_writes() -> None:
    group = Group()
    group.elect(A)
    group.advance_time(CONFIG.election_timeout_max_ms + 50, drop_to={B, C})
    leader = group.cores[A]
    assert leader.role is Role.FOLLOWER
    leader.propose(9, _batch(b"x"), Acks.ALL, group.now)
    assert leader.ready().replies[0].status is ProduceStatus.NOT_LEADER


def test_divergent_suffix_is_truncated_by_term_matching() -> None:
    group = Group()
    group.elect(A)
    # A appends three batches that nobody else sees.
    for index in range(3):
        group.cores[A].propose(index, _batch(b"lost%d" % index), Acks.ALL, group.now)
    group.drain()
    group.wire.clear()
    group.advance_time(2 * CONFIG.election_timeout_max_ms, drop_to={A})
    (new,) = [n for n in (B, C) if group.cores[n].role is Role.LEADER]
    for index in range(2):
        group.cores[new].propose(10 + index, _batch(b"kept%d" % index), Acks.ALL, group.now)
    group.advance_time(300)
    a, b = group.cores[A], group.cores[new]
    assert a.role is Role.FOLLOWER and a.leader == new
    assert a.end_offset == b.end_offset == b.high_watermark == a.high_watermark
    assert a.read(0, 1 << 20) == b.read(0, 1 << 20)
    assert [r.status for r in group.replies[A]] == [ProduceStatus.NOT_LEADER] * 3  # type: ignore[attr-defined]


def test_follower_rejects_a_gap_and_reports_its_end() -> None:
    group = Group()
    b = group.cores[B]
    request = AppendRequest(1, A, prev_end_offset=5, prev_term=1, batches=b"", end_offset=5,
                            commit_offset=0)  # fmt: skip
    b.step(A, request, 0)
    (message,) = [m.message for m in b.ready().messages]
    assert isinstance(message, AppendResponse)
    assert not message.success and message.end_offset == 0 and message.prev_end_offset == 5


def test_heartbeat_commit_never_passes_the_follower_log() -> None:
    group = Group()
    b = group.cores[B]
    b.step(A, Heartbeat(1, A, commit_offset=50), 0)
    assert b.high_watermark == 0 and b.leader == A


def test_malformed_append_batches_are_dropped() -> None:
    group = Group()
    b = group.cores[B]
    request = AppendRequest(1, A, prev_end_offset=0, prev_term=-1, batches=b"\x01" * 100,
                            end_offset=1, commit_offset=0)  # fmt: skip
    b.step(A, request, 0)
    assert b.end_offset == 0
    assert not [m for m in b.ready().messages if isinstance(m.message, AppendResponse)]


def test_single_voter_group_commits_on_its_own() -> None:
    solo = GroupConfig((A,))
    storage = MemoryLog(fsync=False)
    core = ReplicaCore(A, storage, CONFIG, now_ms=0, rng=random.Random(1), initial=solo)
    core.tick(CONFIG.election_timeout_max_ms)
    assert core.role is Role.LEADER
    core.propose(1, _batch(b"x"), Acks.ALL, CONFIG.election_timeout_max_ms)
    replies = []
    while core.has_ready():
        ready = core.ready()
        storage.sync()
        replies.extend(ready.replies)
        core.advance(ready)
    assert [r.status for r in replies] == [ProduceStatus.OK]
    assert core.high_watermark == 2


def test_configuration_history_is_restored_and_cut_at_the_log_end() -> None:
    storage = MemoryLog(fsync=False)
    core = ReplicaCore(A, storage, CONFIG, now_ms=0, rng=random.Random(1), initial=GROUP)
    core.tick(CONFIG.election_timeout_max_ms)
    state = msgpack.unpackb(storage.load_state())
    assert state["configs"] == [[-1, ["a", "b", "c"], []]]
    # A follower appends a configuration batch, then crashes before syncing it.
    follower_storage = MemoryLog(fsync=False)
    follower = ReplicaCore(B, follower_storage, CONFIG, now_ms=0, rng=random.Random(2),
                           initial=GROUP)  # fmt: skip
    change = GroupConfig((A, B, C), (NodeId("d"),))
    batch = encode_config(change, 0)
    stamped = with_leader_fields(batch, 0, 1)
    follower.step(A, AppendRequest(1, A, 0, -1, stamped, 1, 0), 0)
    assert follower.group_config == change
    survivor = follower_storage.crash()
    again = ReplicaCore(B, survivor, CONFIG, now_ms=0, rng=random.Random(2), initial=None)
    assert again.group_config == GROUP


def test_configurations_are_read_back_from_the_log_whatever_the_state_says() -> None:
    """Configuration saves are staged (no fsync on the loop per change), so on
    restart the log is the truth for the configurations it holds."""
    storage = MemoryLog(fsync=False)
    follower = ReplicaCore(B, storage, CONFIG, now_ms=0, rng=random.Random(2), initial=GROUP)
    change = GroupConfig((A, B, C), (NodeId("d"),))
    stamped = with_leader_fields(encode_config(change, 0), 0, 1)
    follower.step(A, AppendRequest(1, A, 0, -1, stamped, 1, 0), 0)
    # The batch's page reached the disk, the staged state did not.
    storage._synced_count = len(storage._batches)
    survivor = storage.crash()
    assert msgpack.unpackb(survivor.load_state())["configs"] == [[-1, ["a", "b", "c"], []]]
    again = ReplicaCore(B, survivor, CONFIG, now_ms=0, rng=random.Random(2), initial=None)
    assert again.group_config == change
    # A state that names a configuration the log no longer holds (truncated and
    # overwritten before the state was saved) loses it on restart.
    stale = MemoryLog(fsync=False)
    stale.save_state(
        msgpack.packb(
            {
                "v": 1,
                "term": 1,
                "vote": None,
                "configs": [[-1, ["a", "b", "c"], []], [0, ["a", "b", "c"], ["d"]]],
                "start": [],
            }
        )
    )
    stale.append(with_leader_fields(_batch(b"data"), 0, 1), term=1)
    restarted = ReplicaCore(B, stale, CONFIG, now_ms=0, rng=random.Random(2), initial=None)
    assert restarted.group_config == GROUP


# ---------------------------------------------------------------------- small parts


def test_majority_offset() -> None:
    assert majority_offset([5]) == 5
    assert majority_offset([5, 3, 9]) == 5
    assert majority_offset([1, 2, 3, 4]) == 2
    assert majority_offset([7, -1, -1]) == -1


def test_epochs_track_terms() -> None:
    epochs = Epochs()
    epochs.note_append(1, 0)
    epochs.note_append(1, 3)
    epochs.note_append(4, 5)
    assert epochs.as_list() == [(1, 0), (4, 5)]
    assert [epochs.term_at(o) for o in (-1, 0, 4, 5, 100)] == [-1, 1, 1, 4, 4]
    assert epochs.end_of(1, 9) == 5 and epochs.end_of(3, 9) == 5 and epochs.end_of(4, 9) == 9
    assert epochs.start_of(4) == 5 and epochs.start_of(2) == -1
    epochs.truncate(5)
    assert epochs.as_list() == [(1, 0)]


def test_epochs_from_storage() -> None:
    storage = MemoryLog()
    for term, count in ((1, 3), (2, 1), (5, 4)):
        for _ in range(count):
            storage.append(_batch(b"v"), term=term)
    assert Epochs.from_storage(storage).as_list() == [(1, 0), (2, 3), (5, 4)]


def test_producer_table() -> None:
    table = ProducerTable(window=2, producers_max=2)
    assert table.check(1, 0, 3).verdict is Verdict.NEW
    table.record(1, 0, 3, 100)
    assert table.check(1, 0, 3).base_offset == 100
    assert table.check(1, 4, 1).expected_sequence == 3
    assert table.check(1, 3, 1).verdict is Verdict.NEW
    table.record(1, 3, 1, 103)
    table.record(1, 4, 1, 104)  # the window forgets sequence 0
    assert table.check(1, 0, 3).verdict is Verdict.OUT_OF_ORDER
    table.truncate(104)
    assert table.check(1, 4, 1).verdict is Verdict.NEW
    table.record(2, 0, 1, 5)
    table.record(3, 0, 1, 6)  # two producers at most: producer 1 is forgotten
    assert len(table) == 2 and table.check(1, 77, 1).verdict is Verdict.NEW


def test_coalescer_makes_one_bundle_per_peer() -> None:
    coalescer = Coalescer()
    for partition in range(100):
        coalescer.add(partition, Outbound(B, Heartbeat(1, A, 0)))
        coalescer.add(partition, Outbound(C, Heartbeat(1, A, 0)))
    coalescer.add(7, Outbound(B, VoteResponse(1, A, True, False)))
    bundles = coalescer.drain()
    assert sorted(bundles) == [B, C]
    assert len(bundles[B]) == 101 and len(bundles[C]) == 100
    assert isinstance(bundles[B].items()[0][1], VoteResponse)  # non-heartbeats first
    assert coalescer.drain() == {}


def test_config_validation() -> None:
    for bad in (
        {"election_timeout_min_ms": 0},
        {"election_timeout_min_ms": 500, "election_timeout_max_ms": 400},
        {"heartbeat_interval_ms": 5_000},
        {"inflight_appends_max": 0},
        {"pending_produce_max": 0},
        {"transfer_timeout_ms": 0},
    ):
        with pytest.raises(ConfigError):
            ReplicaConfig(**bad)  # type: ignore[arg-type]
    for preset in (ReplicaConfig.lan(), ReplicaConfig.local(), ReplicaConfig.simulation()):
        assert preset.heartbeat_interval_ms < preset.election_timeout_min_ms


def _append_answer(core: ReplicaCore) -> AppendResponse:
    """The one append answer in ``core``'s next Ready."""
    (answer,) = [o.message for o in core.ready().messages if isinstance(o.message, AppendResponse)]
    return answer


def _replies_of(group: Group, node: NodeId) -> dict[int, ProduceStatus]:
    group.deliver_all()
    return {reply.request_id: reply.status for reply in group.replies[node]}  # type: ignore[attr-defined]


def test_a_request_with_one_bad_batch_appends_none_of_its_batches() -> None:
    group = Group()
    group.elect(A)
    leader = group.cores[A]
    end = leader.end_offset
    good = _batch(b"good")
    corrupt = bytearray(_batch(b"bad"))
    corrupt[-1] ^= 0xFF  # payload checksum no longer matches
    leader.propose_batches((1, 2), (good, bytes(corrupt)), Acks.ALL, group.now)
    assert _replies_of(group, A) == {1: ProduceStatus.INVALID, 2: ProduceStatus.INVALID}
    assert leader.end_offset == end
    leader.propose_batches((3, 4), (good, _batch(b"second")), Acks.ALL, group.now)
    assert _replies_of(group, A)[4] is ProduceStatus.OK
    assert leader.end_offset == end + 2


def test_a_batch_whose_columns_do_not_fit_its_payload_is_refused_on_receipt() -> None:
    group = Group()
    group.elect(A)
    leader = group.cores[A]
    end = leader.end_offset
    leader.propose(1, columns_beyond_payload(), Acks.ALL, group.now)
    assert _replies_of(group, A) == {1: ProduceStatus.INVALID}
    assert leader.end_offset == end


def test_batches_of_one_producer_in_a_request_must_follow_each_other() -> None:
    group = Group()
    group.elect(A)
    leader = group.cores[A]
    end = leader.end_offset
    first = _batch(b"s0", producer_id=7, base_sequence=0)
    second = _batch(b"s1", producer_id=7, base_sequence=1)
    gap = _batch(b"s5", producer_id=7, base_sequence=5)
    leader.propose_batches((1, 2), (first, gap), Acks.ALL, group.now)
    assert set(_replies_of(group, A).values()) == {ProduceStatus.INVALID}
    assert leader.end_offset == end
    leader.propose_batches((3, 4), (first, second), Acks.ALL, group.now)
    replies = _replies_of(group, A)
    assert (replies[3], replies[4]) == (ProduceStatus.OK, ProduceStatus.OK)
    # A retry of the whole request is recognised batch by batch, and a request that
    # retries one batch and adds the next is accepted whole.
    third = _batch(b"s2", producer_id=7, base_sequence=2)
    leader.propose_batches((5, 6, 7), (first, second, third), Acks.ALL, group.now)
    replies = _replies_of(group, A)
    assert (replies[5], replies[6], replies[7]) == (
        ProduceStatus.DUPLICATE,
        ProduceStatus.DUPLICATE,
        ProduceStatus.OK,
    )
    assert leader.end_offset == end + 3


def test_a_silent_follower_of_an_idle_group_drops_out_of_sync() -> None:
    group = Group(config=dataclasses.replace(CONFIG, quiesce=False))
    group.elect(A)
    group.advance_time(200)
    leader = group.cores[A]
    assert leader.in_sync_voters(group.now) == (A, B, C)
    # C dies: nothing is written, so its match offset still equals the watermark.
    group.advance_time(CONFIG.replica_lag_max_ms + 500, drop_to={C})
    assert leader.match_offsets()[C] == leader.high_watermark
    assert leader.in_sync_voters(group.now) == (A, B)
    assert group.cores[B].in_sync_voters(group.now) == ()  # only a leader knows


def test_a_quiesced_group_counts_followers_that_hold_the_whole_log() -> None:
    # A quiesced group exchanges nothing; the node adds "alive by gossip".
    group = Group()
    group.elect(A)
    group.advance_time(CONFIG.replica_lag_max_ms + 500)
    leader = group.cores[A]
    assert leader.quiesced
    assert leader.in_sync_voters(group.now) == (A, B, C)


def test_a_quiesced_follower_grants_its_restarted_leader_a_pre_vote() -> None:
    # A quiesced follower trusts its leader until membership says it died; a leader
    # restarted within the failure-detection time is never declared dead. Its own
    # pre-vote says it no longer leads.
    group = Group()
    group.elect(A)
    group.advance_time(CONFIG.replica_lag_max_ms + 500)
    b, c = group.cores[B], group.cores[C]
    assert b.quiesced and c.quiesced and b.leader == A
    group.storages[A] = group.storages[A].crash()
    group.cores[A] = ReplicaCore(
        A, group.storages[A], CONFIG, now_ms=group.now, rng=random.Random(2)
    )
    restarted = group.cores[A]
    assert restarted.role is Role.FOLLOWER and restarted.leader is None
    term, end = b.term, b.end_offset
    b.step(A, VoteRequest(term + 1, A, end, term, pre_vote=True), group.now)
    (message,) = [m.message for m in b.ready().messages]
    assert message == VoteResponse(term + 1, B, granted=True, pre_vote=True)
    assert not b.quiesced and b.term == term  # a pre-vote changes no term
    # Someone leads within a few election timeouts, with nothing from membership.
    group.advance_time(3 * CONFIG.election_timeout_max_ms)
    assert group.leader().term > term
    assert {core.leader for core in group.cores.values()} == {group.leader().node_id}


def test_a_quiesced_follower_still_refuses_another_members_pre_vote() -> None:
    group = Group()
    group.elect(A)
    group.advance_time(CONFIG.replica_lag_max_ms + 500)
    b = group.cores[B]
    assert b.quiesced
    # C restarted (or was cut off) and campaigns: A still leads, B keeps its lease.
    b.step(C, VoteRequest(b.term + 1, C, 10**6, 10**6, pre_vote=True), group.now)
    (message,) = [m.message for m in b.ready().messages]
    assert isinstance(message, VoteResponse) and not message.granted
    assert b.quiesced and b.leader == A


def _data_values(core: ReplicaCore) -> list[bytes]:
    values = []
    offset = core.start_offset
    while offset < core.high_watermark:
        data = core.read(offset, 1 << 20)
        for position, header in iter_batches(data):
            if not header.is_control:
                batch = data[position : position + header.length]
                values.extend(r.value or b"" for r in decode_records(batch))
            offset = header.next_offset
    return values


def test_a_follower_below_the_leaders_log_start_restarts_its_log_there() -> None:
    group = Group(config=dataclasses.replace(CONFIG, quiesce=False))
    group.elect(A)
    leader = group.cores[A]
    for index in range(5):
        leader.propose(index, _batch(b"old%d" % index), Acks.ALL, group.now)
        group.advance_time(20, drop_to={C})
    assert leader.high_watermark == leader.end_offset == 6  # the no-op and 5 batches
    assert group.cores[C].end_offset == 1
    # Retention: every replica drops what it holds below its watermark.
    leader.advance_start(4, group.now)
    group.cores[B].advance_start(4, group.now)
    assert leader.start_offset == 4 and group.storages[A].start_offset == 4
    with pytest.raises(OffsetOutOfRangeError):
        leader.read(2, 1 << 20)
    group.advance_time(500)  # C is back: it cannot get offsets 1-3 any more
    follower = group.cores[C]
    assert follower.start_offset == 4 and follower.end_offset == 6
    assert follower.high_watermark == 6
    leader.propose(9, _batch(b"new"), Acks.ALL, group.now)
    group.advance_time(200)
    assert _data_values(follower) == [b"old3", b"old4", b"new"]
    assert _data_values(follower) == _data_values(leader)
    assert follower.group_config == leader.group_config


def test_the_term_before_the_log_start_survives_a_restart() -> None:
    group = Group(config=dataclasses.replace(CONFIG, quiesce=False))
    group.elect(A)
    leader = group.cores[A]
    for index in range(3):
        leader.propose(index, _batch(b"v%d" % index), Acks.ALL, group.now)
        group.advance_time(20)
    leader.advance_start(leader.high_watermark, group.now)  # everything committed goes
    storage = group.storages[A]
    assert storage.start_offset == storage.end_offset == 4
    restarted = ReplicaCore(A, storage, CONFIG, now_ms=group.now, rng=random.Random(1))
    assert restarted._term_before(4) == leader.term
    # A follower holding the same log matches at the start: an append there is taken.
    group.cores[B].step(
        A,
        AppendRequest(leader.term, A, 4, leader.term, b"", 4, 4),
        group.now,
    )
    answer = _append_answer(group.cores[B])
    assert answer.success


def test_an_append_below_the_followers_own_log_start_is_taken_past_the_start() -> None:
    # A follower whose retention deleted more than the leader probes: everything
    # below its start was committed, so it matches, and the rest is appended.
    group = Group(config=dataclasses.replace(CONFIG, quiesce=False))
    group.elect(A)
    leader = group.cores[A]
    for index in range(5):
        leader.propose(index, _batch(b"v%d" % index), Acks.ALL, group.now)
        group.advance_time(20, drop_to={C} if index >= 3 else None)
    follower = group.cores[C]
    assert follower.end_offset == 4 and follower.high_watermark == 3
    follower.advance_start(3, group.now)
    assert follower.start_offset == 3
    data = leader.read(1, 1 << 20)  # batches 1..5, the first two below C's start
    follower.step(A, AppendRequest(leader.term, A, 1, 1, data, 6, 6), group.now)
    answer = _append_answer(follower)
    assert answer.success and answer.match_offset == 6
    assert follower.end_offset == 6 and follower.start_offset == 3


def test_a_removed_replica_reopened_on_its_log_catches_up_from_where_it_is() -> None:
    # What the node does when placement wants back a replica its group removed while
    # it was away: a fresh core on the same log, not an empty log.
    group = Group(config=dataclasses.replace(CONFIG, reconfigure_stable_ms=0))
    group.elect(A)
    leader = group.cores[A]
    for index in range(5):
        leader.propose(index, _batch(b"v%d" % index), Acks.ALL, group.now)
        group.advance_time(20)
    leader.set_target((A, B), group.now)
    group.advance_time(2_000)
    assert leader.group_config == GroupConfig((A, B))
    assert group.cores[C].removed
    held = group.storages[C].end_offset
    resets: list[int] = []
    storage = group.storages[C]
    real_reset, real_truncate = storage.reset, storage.truncate_suffix
    storage.reset = lambda offset: resets.append(offset) or real_reset(offset)  # type: ignore[method-assign]
    storage.truncate_suffix = lambda offset: resets.append(offset) or real_truncate(offset)  # type: ignore[method-assign]
    group.cores[C] = ReplicaCore(C, storage, CONFIG, now_ms=group.now, rng=random.Random(3))
    leader.propose(9, _batch(b"while away"), Acks.ALL, group.now)
    leader.set_target((A, B, C), group.now)
    group.advance_time(3_000)
    assert set(leader.group_config.voters) == {A, B, C}  # type: ignore[union-attr]
    follower = group.cores[C]
    assert follower.end_offset == leader.end_offset > held
    assert resets == []  # nothing it held was thrown away: it caught up from there
    assert _data_values(follower)[:6] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"while away"]


def test_a_new_group_has_its_first_voter_as_leader_of_term_1_without_an_election() -> None:
    group = Group()
    leader = group.cores[A]
    assert (leader.role, leader.term, leader.leader) == (Role.LEADER, 1, A)
    for follower in (B, C):
        core = group.cores[follower]
        assert (core.role, core.term, core.leader, core.voted_for) == (Role.FOLLOWER, 1, A, A)
    group.deliver_all()
    votes = [
        m
        for ready in group.readies
        for m in ready.messages + ready.early_messages
        if isinstance(m.message, VoteRequest)
    ]
    assert votes == []  # no pre-vote, no vote: the term-1 leader needs none
    assert leader.high_watermark == 1  # its no-op is committed by B and C
    leader.propose(1, _batch(b"x"), Acks.ALL, group.now)
    group.deliver_all()
    assert leader.high_watermark == 2


def test_founders_elect_at_term_2_when_the_term_1_leader_never_shows_up() -> None:
    group = Group()
    group.advance_time(CONFIG.election_timeout_max_ms * 3, drop_to={A})
    leaders = [n for n in (B, C) if group.cores[n].role is Role.LEADER]
    assert len(leaders) == 1
    assert group.cores[leaders[0]].term >= 2  # term 1 was A's: nobody else can win it


def _run_holding(
    group: Group, node: NodeId, held: list[Message], until: Callable[[], bool]
) -> None:
    """Advance time (10 ms steps, at most 3 s) until ``until()``, delivering every
    message except those to ``node``, which are kept in ``held``; ``node`` never ticks."""
    for _ in range(300):
        if until():
            return
        group.now += 10
        for name, core in group.cores.items():
            if name != node and core.next_wake_ms() <= group.now:
                core.tick(group.now)
        group.drain()
        while group.wire:
            source, outbound = group.wire.popleft()
            if outbound.destination == node:
                held.append(outbound.message)
            else:
                group.cores[outbound.destination].step(source, outbound.message, group.now)
            group.drain()
    raise AssertionError("condition not reached in 3 s")


def test_a_learner_re_added_while_its_removal_is_in_flight_gets_the_re_adding_entry() -> None:
    # Issue 34 (node1 of __cluster/0, a learner for good): a node restarts while its
    # group removes it; the leader re-adds it (placement wants it back) before the
    # removal's append reaches it. Its answer to that old append (it holds the log up
    # to the re-adding entry) comes back after the re-add, while the leader's probe
    # at its log end is lost (the node reopens its removed replica meanwhile). The
    # leader must still send the re-adding entry: the group is idle, nothing else will.
    group = Group(config=dataclasses.replace(CONFIG, reconfigure_stable_ms=0))
    group.elect(A)
    leader = group.cores[A]
    leader.propose(0, _batch(b"v"), Acks.ALL, group.now)
    group.advance_time(100)
    held: list[Message] = []
    leader.set_target((A, B), group.now)
    _run_holding(
        group,
        C,
        held,
        lambda: (
            leader.group_config == GroupConfig((A, B))
            and leader.high_watermark == leader.end_offset
        ),
    )
    removal_end = leader.end_offset
    leader.set_target((A, B, C), group.now)
    _run_holding(group, C, held, lambda: leader.group_config == GroupConfig((A, B), (C,)))
    assert leader.end_offset == removal_end + 1  # the entry re-adding C
    # C gets the removal (one of the appends the leader sent before the re-add).
    removal = [m for m in held if isinstance(m, AppendRequest) and m.end_offset == removal_end][-1]
    group.cores[C].step(A, removal, group.now)
    group.drain()
    assert group.storages[C].end_offset == removal_end
    # Its answer reaches the leader; whatever the leader sends C next is lost while C
    # reopens its replica: a fresh core on the same log.
    while group.wire:
        source, outbound = group.wire.popleft()
        if outbound.destination != C:
            group.cores[outbound.destination].step(source, outbound.message, group.now)
        group.drain()
    group.cores[C] = ReplicaCore(
        C, group.storages[C], CONFIG, now_ms=group.now, rng=random.Random(3)
    )
    group.advance_time(3_000)
    assert group.storages[C].end_offset == leader.end_offset
    assert set(leader.group_config.voters) == {A, B, C}  # type: ignore[union-attr]


def test_a_follower_whose_leader_keeps_pre_voting_with_a_shorter_log_still_campaigns() -> None:
    """The leader's replica reopened (a failed fsync) without its unsynced last
    entry: it pre-votes for the next term again and again, and C, which holds that
    entry, refuses. C is not the successor (B is, and is cut off), so it waits two
    election timeouts once; each pre-vote of its old leader used to push that wait
    again, and nobody ever led (the simulator's seed 485 with --compaction
    --damage)."""
    group = Group(config=dataclasses.replace(CONFIG, quiesce=False))
    group.elect(A)
    leader = group.cores[A]
    leader.propose(1, _batch(b"v"), Acks.ALL, group.now)
    group.advance_time(100)
    follower = group.cores[C]
    assert follower.leader == A and follower.end_offset == leader.end_offset
    term, shorter = leader.term, leader.end_offset - 1
    start, campaigned_at = group.now, None
    for _ in range(100):
        group.now += 100
        pre_vote = VoteRequest(term + 1, A, shorter, term, pre_vote=True)
        follower.step(A, pre_vote, group.now)
        follower.tick(group.now)
        while follower.has_ready():
            follower.advance(follower.ready())
        if follower.role is not Role.FOLLOWER:
            campaigned_at = group.now
            break
    timeout = CONFIG.election_timeout_max_ms
    assert campaigned_at is not None, "C never campaigned"
    assert campaigned_at - start <= 3 * timeout
