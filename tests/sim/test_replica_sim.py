"""Replication proven in deterministic simulation: seed sweeps and scripted scenarios.

Every scenario runs real :class:`ReplicaCore` objects, driven by the production
:class:`~laminar.server.driver.ReplicaDriver`, over the simulated network and
memory disks that lose unsynced writes on a crash (and fail or stall their syncs
when a test says so); :class:`History` checks safety
after every step (see :mod:`laminar.testing.replica_sim`). Waits are bounded in
simulated time: ``run_for(bound, condition)`` stops as soon as the condition holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import pytest

from laminar.records import decode_records, encode_batch, iter_batches
from laminar.replica.core import ReplicaCore, StorageDamage
from laminar.replica.messages import ProduceStatus
from laminar.replica.progress import Progress
from laminar.replica.types import Acks, NodeId, Role
from laminar.server import driver as driver_module
from laminar.server.driver import HostConfig
from laminar.testing import replica_sim
from laminar.testing.replica_sim import (
    TOPIC,
    Cluster,
    CompactionStats,
    ReplicaSimNode,
    SeedOptions,
    run_seed,
    sim_host_config,
)

SEEDS_PER_CHUNK = 25
SEED_CHUNKS = 12  # 300 seeds with random faults
FAST_CHUNKS = 4
"""Chunks in make test (100 seeds); the others are marked slow (make test-slow, CI)."""


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(
            chunk * SEEDS_PER_CHUNK, marks=[pytest.mark.slow] if chunk >= FAST_CHUNKS else []
        )
        for chunk in range(SEED_CHUNKS)
    ],
)
def test_random_faults(first: int) -> None:
    failures = {}
    reconfigured = fenced = 0
    # Keyed compaction (half the seeds) only in the slow chunks: it costs about
    # 2.5 times the CPU of a seed without; make test runs its own few seeds.
    options = SeedOptions(compaction=None if first >= FAST_CHUNKS * SEEDS_PER_CHUNK else False)
    for seed in range(first, first + SEEDS_PER_CHUNK):
        result = run_seed(seed, options)
        reconfigured += result.reconfigured
        fenced += result.fenced
        assert result.acked > 0
        if result.violations:
            failures[seed] = result.violations[:3]
    assert not failures, f"replay with: python -m tests.sim.replica --replay SEED: {failures}"
    assert reconfigured > 0
    assert fenced > 0  # failed fsyncs fenced replicas (the seeds with disk faults)


def test_same_seed_same_run() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.trace_hash == second.trace_hash
    assert (first.acked, first.reads, first.elections) == (
        second.acked,
        second.reads,
        second.elections,
    )
    assert run_seed(8).trace_hash != first.trace_hash


# ---------------------------------------------------------------------- keyed compaction

COMPACTION_SEEDS_FAST = (2, 7, 32, 127)
"""Seeds of the compaction sweep in make test: 2 found a follower getting a deleted
key back (T not held to the match offsets), 32 a core that hung opening a log
ending in a gap, 127 a T that went back; the slow tier sweeps 200 seeds."""


def _compaction_sweep(seeds: Iterable[int]) -> tuple[dict[int, list[str]], CompactionStats, int]:
    failures: dict[int, list[str]] = {}
    stats = CompactionStats()
    applied = 0
    for seed in seeds:
        result = run_seed(seed, SeedOptions(compaction=True))
        assert result.compaction and result.acked > 0
        stats.add(result.compaction_stats)
        applied += result.compactions_applied
        if result.violations:
            failures[seed] = result.violations[:3]
    return failures, stats, applied


def test_keyed_compaction_seeds_keep_replicas_identical_and_every_newest_value() -> None:
    """A keyed workload with tombstones on a compact topic, per-node segment sizes
    and key map budgets, the driver's rule and random extra commands, crashes in
    the middle of jobs, and the other faults: replicas that applied the same
    commands hold the same bytes, and each holds exactly what the rule keeps."""
    failures, stats, applied = _compaction_sweep(COMPACTION_SEEDS_FAST)
    assert failures == {}, f"replay with: python -m tests.sim.replica --replay SEED: {failures}"
    assert applied > 0 and stats.jobs > 0
    assert stats.multi_pass_jobs > 0  # some nodes' key maps held only a few keys
    assert stats.crashes_mid_compaction > 0
    assert stats.extra_triggers > 0


@pytest.mark.slow
@pytest.mark.parametrize("first", [0, 50, 100, 150])
def test_keyed_compaction_sweep(first: int) -> None:
    failures, stats, _ = _compaction_sweep(range(first, first + 50))
    assert failures == {}, f"replay with: python -m tests.sim.replica --replay SEED: {failures}"
    assert stats.crashes_mid_compaction > 0 and stats.multi_pass_jobs > 0


def test_the_checker_finds_a_deleted_key_back_without_the_tombstone_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With T not held to the followers' match offsets (the bug the simulator found in
    seed 2), seed 36 has a follower that fetched the leader's range without a
    tombstone keep the key's older record: the checker reports it. (In seed 2 the
    follower's progress is new after an election, so the leader's check of a
    forgotten log, ``InstallStart.discard``, now restarts its log instead.)"""

    def unbounded(core: object, tombstones_end: int) -> int:
        return tombstones_end

    monkeypatch.setattr(driver_module, "tombstones_end_for", unbounded)
    monkeypatch.setattr(replica_sim, "tombstones_end_for", unbounded)
    violations = run_seed(36, SeedOptions(compaction=True)).violations
    assert any("keeps Record" in v or "hold different bytes" in v for v in violations), violations


DAMAGE_COMPACTION_SEEDS_FAST = (218, 289, 308, 815, 1141)
"""Seeds of keyed compaction with disk damage in make test: in 308 a replica that
lost 66 of its 108 batches took the leader's range without the tombstones removed
below T on top of its own older records (a deleted key back on it alone); in 218 a
replica whose state file was lost holds a command's result that its state no longer
counts as applied (the checker compares it once healed); in 289 a replica that lost
47 of 48 batches holds the leader's compacted range past its own high watermark, so
a read below that watermark can fall in a gap (the checker accepts an empty read
there); in 815 a replica lost the end of its log with the last command it had
applied, fetched that range again uncompacted, and skipped the command when it came
back (its state still counted it applied); in 1141 replicas whose logs restarted
past the last commands never apply them (nothing of their range is left there: the
checker counts a command below a replica's log start as applied)."""


def _damage_compaction_failures(seeds: Iterable[int]) -> dict[int, list[str]]:
    failures: dict[int, list[str]] = {}
    for seed in seeds:
        result = run_seed(seed, SeedOptions(compaction=True, damage=True))
        assert result.compaction and result.acked > 0
        if result.violations:
            failures[seed] = result.violations[:3]
    return failures


def test_keyed_compaction_with_disk_damage_keeps_replicas_identical() -> None:
    failures = _damage_compaction_failures(DAMAGE_COMPACTION_SEEDS_FAST)
    assert failures == {}, (
        f"replay with: python -m tests.sim.replica --compaction --damage --replay SEED: {failures}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("first", [0, 50])
def test_keyed_compaction_with_disk_damage_sweep(first: int) -> None:
    failures = _damage_compaction_failures(range(first, first + 50))
    assert failures == {}, (
        f"replay with: python -m tests.sim.replica --compaction --damage --replay SEED: {failures}"
    )


def test_the_checker_finds_a_deleted_key_back_on_a_damaged_replica_without_the_discard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the leader's check of a forgotten log against removed tombstones
    (``InstallStart.discard``), seed 308's damaged replica keeps a deleted key."""

    def trust(core: object, peer: object, progress: Progress, response: object) -> bool:
        progress.log_checked = True
        return True

    monkeypatch.setattr(ReplicaCore, "_check_peer_log", trust)
    violations = run_seed(308, SeedOptions(compaction=True, damage=True)).violations
    assert any("hold different bytes" in v or "keeps Record" in v for v in violations), violations


def test_compaction_is_decided_by_the_seed_unless_set() -> None:
    assert Cluster(0, SeedOptions()).compaction
    assert not Cluster(2, SeedOptions()).compaction
    assert Cluster(2, SeedOptions(compaction=True)).compaction


# ---------------------------------------------------------------------- helpers


def _cluster(*, nodes: int = 3, seed: int = 1, host: HostConfig | None = None) -> Cluster:
    # No keyed compaction in the scripted scenarios: an idle compact partition
    # proposes one more command (its dirty tail) before it is quiet again.
    options = SeedOptions(nodes=nodes, partitions=1, faults=False, compaction=False)
    if host is not None:
        options.host = host
    cluster = Cluster(seed, options)
    cluster.schedule_reads(10**9)
    _wait(cluster, lambda: _leader(cluster) is not None and _acked(cluster) >= 20)
    return cluster


def _wait(cluster: Cluster, condition: object, bound_ms: int = 10_000) -> None:
    assert callable(condition)
    assert cluster.sim.run_for(bound_ms, condition), f"not within {bound_ms} ms"


def _leader(cluster: Cluster) -> ReplicaCore | None:
    return cluster.leader_of(0)


def _leader_id(cluster: Cluster) -> str:
    leader = _leader(cluster)
    assert leader is not None
    return str(leader.node_id)


def _core(cluster: Cluster, node: str) -> ReplicaCore:
    return cluster.nodes[node].cores[0]


def _acked(cluster: Cluster) -> int:
    return sum(client.acked for client in cluster.clients)


def _values(core: ReplicaCore, upper: int | None = None) -> list[bytes]:
    data = core._storage.read(core.start_offset, 1 << 30, upper_offset=upper)
    values = []
    for position, header in iter_batches(data):
        if not header.is_control:
            batch = data[position : position + header.length]
            values.extend(r.value for r in decode_records(batch) if r.value is not None)
    return values


def _propose(cluster: Cluster, node: str, request_id: int, batch: bytes, acks: Acks) -> None:
    target: ReplicaSimNode = cluster.nodes[node]
    cluster.sim.invoke(node, lambda now: target.propose(0, request_id, batch, acks, now))


def _finish(cluster: Cluster) -> None:
    """Heal, let writes settle, and run the end-of-run checks."""
    cluster.heal_all()
    for client in cluster.clients:
        client.enabled = True
        cluster.sim.invoke(client.address, client.tick)
    before = {client.address: client.acked for client in cluster.clients}
    _wait(cluster, lambda: cluster.settled(before), 20_000)
    for client in cluster.clients:
        client.enabled = False
    cluster.sim.run_for(1_000, lambda: all(client.idle for client in cluster.clients))
    cluster.sim.run_for(5_000, cluster.voters_caught_up)
    cluster.final_checks()
    assert not cluster.history.violations, cluster.history.violations


# ---------------------------------------------------------------------- scenarios


def test_isolated_leader_suffix_is_truncated_and_nothing_acknowledged_is_lost() -> None:
    cluster = _cluster()
    old = _leader_id(cluster)
    others = [n for n in cluster.node_ids if n != old]
    clients = [client.address for client in cluster.clients]
    cluster.sim.partition([[old], [*others, *clients]])
    for index in range(3):  # appended by the isolated leader, never replicated
        batch = encode_batch([f"isolated-{index}".encode()])
        _propose(cluster, old, 900 + index, batch, Acks.ALL)
    old_core = _core(cluster, old)
    assert old_core.end_offset > old_core.high_watermark
    acked_at_cut = _acked(cluster)
    _wait(cluster, lambda: _leader_id(cluster) in others and _acked(cluster) > acked_at_cut + 10)
    # The old leader steps down on its own (check-quorum) and answers "outcome unknown".
    _wait(cluster, lambda: _core(cluster, old).role is not Role.LEADER)
    replies = cluster.nodes[old].local_replies
    assert sorted(reply.request_id for reply in replies) == [900, 901, 902]
    assert {reply.status for reply in replies} == {ProduceStatus.NOT_LEADER}
    cluster.sim.heal()
    new = _leader_id(cluster)

    def rejoined() -> bool:
        core, leader = _core(cluster, old), _core(cluster, new)
        return core.end_offset == leader.end_offset and core.high_watermark == leader.high_watermark

    _wait(cluster, rejoined)
    assert not any(v.startswith(b"isolated") for v in _values(_core(cluster, old)))
    assert _values(_core(cluster, old)) == _values(_core(cluster, new))
    _finish(cluster)


def test_two_quick_failovers_lose_nothing() -> None:
    cluster = _cluster()
    first = _leader_id(cluster)
    cluster.sim.crash(first)
    _wait(cluster, lambda: _leader(cluster) is not None)
    second = _leader_id(cluster)
    assert second != first
    cluster.sim.crash(second)  # before it could settle anything
    cluster.sim.restart(first)
    _wait(cluster, lambda: _leader(cluster) is not None)
    assert _leader_id(cluster) not in (second,)
    cluster.sim.restart(second)
    _finish(cluster)


def test_crash_of_every_node_keeps_acknowledged_records() -> None:
    cluster = _cluster()
    acked = _acked(cluster)
    for node in cluster.node_ids:
        cluster.sim.crash(node)
    cluster.sim.run_for(500)
    for node in cluster.node_ids:
        cluster.sim.restart(node)
    _wait(cluster, lambda: _leader(cluster) is not None and _acked(cluster) > acked + 10)
    _finish(cluster)


def test_minority_partition_acknowledges_nothing() -> None:
    cluster = _cluster(nodes=5)
    leader = _leader_id(cluster)
    voters = [str(v) for v in cluster.groups[0].voters]
    minority_client, majority_client = cluster.clients
    cluster.sim.partition(
        [
            [leader, minority_client.address, *(n for n in cluster.node_ids if n not in voters)],
            [*(v for v in voters if v != leader), majority_client.address],
        ]
    )
    cluster.sim.run_for(100)  # answers already on the wire may still arrive
    acked_after_cut = minority_client.acked
    majority_before = majority_client.acked
    cluster.sim.run_for(5_000)
    assert minority_client.acked == acked_after_cut
    assert majority_client.acked > majority_before + 10  # the majority elected a leader
    _finish(cluster)


def test_leader_hint_from_membership_speeds_up_election() -> None:
    cluster = _cluster()
    leader = _leader_id(cluster)
    cluster.sim.crash(leader)
    crashed_at = cluster.sim.now_ms
    for node in cluster.node_ids:
        if node != leader:
            survivor = cluster.nodes[node]
            cluster.sim.invoke(node, lambda now, s=survivor: s.hint_leader_dead(leader, now))
    _wait(cluster, lambda: _leader(cluster) is not None)
    assert cluster.sim.now_ms - crashed_at < cluster.options.config.election_timeout_min_ms
    cluster.sim.restart(leader)
    _finish(cluster)


def test_duplicate_is_answered_with_the_original_offset_by_a_new_leader() -> None:
    cluster = _cluster()
    for client in cluster.clients:
        client.enabled = False
    _wait(cluster, lambda: all(client.idle for client in cluster.clients))
    first = _leader_id(cluster)
    batch = encode_batch([b"once"], producer_id=777, base_sequence=0)
    _propose(cluster, first, 1, batch, Acks.ALL)
    node = cluster.nodes[first]
    _wait(cluster, lambda: bool(node.local_replies))
    original = node.local_replies[0]
    assert original.status is ProduceStatus.OK
    # Make sure every replica has it committed, then fail over.
    _wait(
        cluster,
        lambda: all(
            _core(cluster, n).high_watermark > original.base_offset for n in cluster.node_ids
        ),
    )
    cluster.sim.crash(first)
    _wait(cluster, lambda: _leader(cluster) is not None)
    second = _leader_id(cluster)
    _propose(cluster, second, 2, batch, Acks.ALL)
    _wait(cluster, lambda: bool(cluster.nodes[second].local_replies))
    retry = cluster.nodes[second].local_replies[0]
    assert retry.status is ProduceStatus.DUPLICATE
    assert retry.base_offset == original.base_offset
    gap = encode_batch([b"gap"], producer_id=777, base_sequence=5)
    _propose(cluster, second, 3, gap, Acks.ALL)
    assert cluster.nodes[second].local_replies[1].status is ProduceStatus.OUT_OF_ORDER_SEQUENCE
    assert _values(_core(cluster, second)).count(b"once") == 1
    cluster.sim.restart(first)
    _finish(cluster)


def test_acks_leader_and_none_answer_before_commit() -> None:
    cluster = _cluster()
    leader = _leader_id(cluster)
    others = [n for n in cluster.node_ids if n != leader]
    for node in others:
        cluster.sim.crash(node)  # nothing can commit now
    node = cluster.nodes[leader]
    _propose(cluster, leader, 1, encode_batch([b"l"]), Acks.LEADER)
    _propose(cluster, leader, 2, encode_batch([b"n"]), Acks.NONE)
    _propose(cluster, leader, 3, encode_batch([b"a"]), Acks.ALL)
    statuses = {reply.request_id: reply.status for reply in node.local_replies}
    assert statuses == {1: ProduceStatus.OK, 2: ProduceStatus.OK}
    for other in others:
        cluster.sim.restart(other)
    _wait(cluster, lambda: len(node.local_replies) == 3)
    assert node.local_replies[2].status in (ProduceStatus.OK, ProduceStatus.NOT_LEADER)
    _finish(cluster)


def test_invalid_batch_is_refused_without_harm() -> None:
    cluster = _cluster()
    leader = _leader_id(cluster)
    node = cluster.nodes[leader]
    good = encode_batch([b"x"])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    _propose(cluster, leader, 1, bytes(corrupt), Acks.ALL)
    _propose(cluster, leader, 2, b"garbage", Acks.ALL)
    _propose(cluster, leader, 3, good + b"\x00", Acks.ALL)
    assert [reply.status for reply in node.local_replies] == [ProduceStatus.INVALID] * 3
    _finish(cluster)


def test_follower_redirects_to_the_leader() -> None:
    cluster = _cluster()
    leader = _leader_id(cluster)
    follower = next(n for n in cluster.node_ids if n != leader)
    _propose(cluster, follower, 1, encode_batch([b"x"]), Acks.ALL)
    reply = cluster.nodes[follower].local_replies[0]
    assert reply.status is ProduceStatus.NOT_LEADER
    assert reply.leader_hint == leader


# ---------------------------------------------------------------------- reconfiguration


def _reconfigure(cluster: Cluster, target: tuple[str, ...]) -> None:
    cluster.set_target(0, target)

    def reached() -> bool:
        leader = _leader(cluster)
        if leader is None or leader.group_config is None:
            return False
        config = leader.group_config
        return set(config.voters) == set(target) and not config.learners

    _wait(cluster, reached, 20_000)


def test_replace_a_dead_replica() -> None:
    cluster = _cluster(nodes=5)
    voters = [str(v) for v in cluster.groups[0].voters]
    dead = next(v for v in voters if v != _leader_id(cluster))
    spare = next(n for n in cluster.node_ids if n not in voters)
    cluster.sim.crash(dead)
    cluster.dead_for_good.add(dead)
    target = tuple(spare if v == dead else v for v in voters)
    _reconfigure(cluster, target)
    _finish(cluster)
    assert _values(_core(cluster, spare)) == _values(_leader(cluster))  # type: ignore[arg-type]


def test_add_a_replica_then_drain_the_leader() -> None:
    cluster = _cluster(nodes=5)
    voters = [str(v) for v in cluster.groups[0].voters]
    spare = next(n for n in cluster.node_ids if n not in voters)
    _reconfigure(cluster, (*voters, spare))
    leader = _leader_id(cluster)
    drained = tuple(n for n in (*voters, spare) if n != leader)
    _reconfigure(cluster, drained)
    assert _leader_id(cluster) != leader  # leadership moved away before removal
    _wait(cluster, lambda: cluster.nodes[leader].cores[0].removed)
    _finish(cluster)


def test_preferred_leader_takes_over_when_caught_up() -> None:
    cluster = _cluster()
    leader = _leader_id(cluster)
    preferred = next(n for n in cluster.node_ids if n != leader)
    target = (preferred, *(n for n in cluster.node_ids if n != preferred))
    cluster.set_target(0, target)
    _wait(cluster, lambda: _leader_id(cluster) == preferred if _leader(cluster) else False)
    # It stays there: the old leader does not take leadership back.
    cluster.sim.run_for(3_000)
    assert _leader_id(cluster) == preferred
    _finish(cluster)


def test_set_target_is_ignored_by_followers() -> None:
    cluster = _cluster()
    follower = next(n for n in cluster.node_ids if n != _leader_id(cluster))
    node = cluster.nodes[follower]
    cluster.sim.invoke(follower, partial(node.set_target, 0, ("zz",)))
    cluster.sim.run_for(2_000)
    leader = _leader(cluster)
    assert leader is not None and leader.group_config is not None
    assert NodeId("zz") not in leader.group_config.members


# ---------------------------------------------------------------------- quiescence


def _quiet(cluster: Cluster) -> None:
    for client in cluster.clients:
        client.enabled = False
    _wait(cluster, lambda: all(client.idle for client in cluster.clients))
    _wait(cluster, lambda: all(_core(cluster, n).quiesced for n in cluster.node_ids))


def test_idle_partition_stops_heartbeating_and_wakes_on_a_write() -> None:
    cluster = _cluster()
    _quiet(cluster)
    nodes = cluster.nodes.values()
    bundles = sum(node.counter("bundles_sent") for node in nodes)
    keepalives = sum(node.counter("keepalives_sent") for node in nodes)
    cluster.sim.run_for(10_000)
    # Nothing of the group on the wire while idle: only the nodes' keepalives.
    assert sum(node.counter("bundles_sent") for node in nodes) == bundles
    assert sum(node.counter("keepalives_sent") for node in nodes) > keepalives
    leader = _leader_id(cluster)
    _propose(cluster, leader, 1, encode_batch([b"wake"]), Acks.ALL)
    node = cluster.nodes[leader]
    _wait(cluster, lambda: bool(node.local_replies), 2_000)
    assert node.local_replies[0].status is ProduceStatus.OK
    _finish(cluster)


def test_quiesced_followers_elect_when_membership_reports_the_leader_dead() -> None:
    cluster = _cluster()
    _quiet(cluster)
    old = _leader_id(cluster)
    cluster.sim.crash(old)
    crashed_at = cluster.sim.now_ms
    _wait(cluster, lambda: _leader(cluster) is not None and _leader_id(cluster) != old)
    # Detection (the membership stand-in reports after 1 s) plus a quick election.
    assert (
        cluster.sim.now_ms - crashed_at
        < 1_000 + 200 + cluster.options.config.election_timeout_max_ms
    )
    cluster.sim.restart(old)
    _finish(cluster)


def test_a_leader_restarted_before_membership_notices_is_replaced() -> None:
    """The leader of a quiesced group dies and is back before membership declares
    it dead (no ``dead`` event, hence no hint): its followers, which trust a
    quiesced leader until membership says otherwise, must still elect someone when
    it campaigns, instead of refusing its pre-votes for ever."""
    cluster = _cluster()
    _quiet(cluster)
    old = _leader_id(cluster)
    cluster.sim.crash(old)
    cluster.sim.run_for(200)  # well under the membership stand-in's 1 s detection
    cluster.sim.restart(old)
    restarted_at = cluster.sim.now_ms
    _wait(cluster, lambda: _leader(cluster) is not None, 5_000)
    assert cluster.sim.now_ms - restarted_at < 3 * cluster.options.config.election_timeout_max_ms
    _finish(cluster)


def test_a_restarted_follower_wakes_a_quiesced_group() -> None:
    cluster = _cluster()
    _quiet(cluster)
    leader = _leader_id(cluster)
    follower = next(n for n in cluster.node_ids if n != leader)
    cluster.sim.crash(follower)
    cluster.sim.restart(follower)
    _wait(cluster, lambda: _core(cluster, follower).leader == leader, 5_000)
    assert _leader_id(cluster) == leader  # no election: the leader was woken, not deposed
    _finish(cluster)


# ---------------------------------------------------------------------- damaged storage


def test_without_the_repair_rule_a_damaged_replica_loses_an_acknowledged_record() -> None:
    """The rule is needed: seed 47 damages a replica that had acknowledged records;
    told nothing, it votes with what is left and an acknowledged record is replaced.
    With the rule (the default) the same seed is clean."""
    broken = run_seed(47, SeedOptions(damage=True, heal=False))
    assert any("commits another batch at acknowledged offset" in v for v in broken.violations)
    assert run_seed(47, SeedOptions(damage=True)).violations == []


def test_a_damaged_follower_heals_as_a_learner_and_is_promoted_back() -> None:
    """A follower loses the end of its log (acknowledged records among it): it
    restarts healing, never votes, is moved to the learners, catches up and is a
    voter again; nothing acknowledged is lost."""
    cluster = _cluster()
    leader = _leader_id(cluster)
    victim = next(n for n in cluster.node_ids if n != leader)
    voters_before = set(_core(cluster, leader).group_config.voters)  # type: ignore[union-attr]
    _wait(cluster, lambda: _core(cluster, victim).high_watermark > 10)
    cluster.sim.crash(victim)
    node = cluster.nodes[victim]
    node.storages[0].damage(batches_kept=2, lose_state=False)
    node.damaged[0] = StorageDamage(lost_entries=True)
    cluster.sim.restart(victim)
    assert _core(cluster, victim).healing
    _wait(
        cluster,
        lambda: victim in _core(cluster, _leader_id(cluster)).group_config.learners,  # type: ignore[union-attr]
    )
    _wait(cluster, lambda: not _core(cluster, victim).healing, 20_000)
    leader_core = _core(cluster, _leader_id(cluster))
    assert set(leader_core.group_config.voters) == voters_before  # type: ignore[union-attr]
    assert not any(
        node_id == victim for (_, _, node_id, _) in cluster.history.elections[1:]
    )  # it never led
    _finish(cluster)


@pytest.mark.parametrize(
    ("batches_kept", "lose_state"),
    [pytest.param(None, True, id="state-lost"), pytest.param(3, False, id="entries-lost")],
)
def test_a_damaged_follower_of_a_quiesced_group_heals(
    batches_kept: int | None, lose_state: bool
) -> None:
    """The group is idle and quiesced when a follower restarts damaged: the leader
    only heartbeats it (it believes that log whole), so the follower must say it is
    healing in answer, and the leader wakes, demotes and promotes it back. (Found by
    the real-process damage suite: the replica stayed healing for good.)"""
    cluster = _cluster()
    _quiet(cluster)
    leader = _leader_id(cluster)
    victim = next(n for n in cluster.node_ids if n != leader)
    cluster.sim.crash(victim)
    cluster.sim.run_for(2_000)  # membership declares it dead; when it is back, the
    # leader wakes (peer_returned) before it hears of the damage
    node = cluster.nodes[victim]
    node.storages[0].damage(batches_kept=batches_kept, lose_state=lose_state)
    node.damaged[0] = StorageDamage(lost_entries=batches_kept is not None, lost_state=lose_state)
    cluster.sim.restart(victim)
    assert _core(cluster, victim).healing
    _wait(cluster, lambda: not _core(cluster, victim).healing, 10_000)
    assert _leader_id(cluster) == leader
    assert victim in _core(cluster, leader).group_config.voters  # type: ignore[union-attr]
    _finish(cluster)


def test_a_majority_damaged_waits_for_the_operator_to_accept_the_loss() -> None:
    """Two of three replicas damaged: they do not vote, so nobody leads (offline,
    not silently shortened); once an operator accepts the loss on them they elect a
    leader and take writes again."""
    cluster = _cluster()
    leader = _leader_id(cluster)
    for node_id in cluster.node_ids:
        cluster.sim.crash(node_id)
    damaged = [n for n in cluster.node_ids if n != leader]
    for node_id in damaged:
        node = cluster.nodes[node_id]
        node.storages[0].damage(batches_kept=1, lose_state=True)
        node.damaged[0] = StorageDamage(lost_entries=True, lost_state=True)
    cluster.sim.restart(damaged[0])
    cluster.sim.restart(damaged[1])
    assert not cluster.sim.run_for(5_000, lambda: _leader(cluster) is not None)
    members = [NodeId(n) for n in cluster.node_ids]  # their founding configuration is gone
    for node_id in damaged:
        node = cluster.nodes[node_id]
        cluster.sim.invoke(node_id, partial(node.accept_data_loss, 0, members))
        assert not _core(cluster, node_id).healing
    _wait(cluster, lambda: _leader(cluster) is not None)
    before = _acked(cluster)
    _wait(cluster, lambda: _acked(cluster) > before + 5)


# ---------------------------------------------------------------------- the host's disk faults


def test_a_failed_fsync_fences_the_leader_its_group_elects_another_and_it_rejoins() -> None:
    """The leader's next fsync fails: nothing of that round is acknowledged, the
    replica is fenced (closed: it neither leads nor votes), hands its leadership to
    a caught-up peer, and is reopened from what its disk kept after
    ``storage_retry_ms``; it catches up and nothing acknowledged is lost."""
    cluster = _cluster()
    old = _leader_id(cluster)
    node = cluster.nodes[old]
    node.disk.failing_syncs = 1
    _wait(cluster, lambda: node.counter("storage_failures") == 1)
    assert node.driver.is_fenced((TOPIC, 0)) and 0 not in node.cores
    _wait(cluster, lambda: _leader(cluster) is not None and _leader_id(cluster) != old)
    acked = _acked(cluster)
    _wait(cluster, lambda: 0 in node.cores and not node.driver.is_fenced((TOPIC, 0)))
    assert node.counter("storage_failures") == 1  # the reopen succeeded at once
    _wait(cluster, lambda: _acked(cluster) > acked + 10)
    _wait(cluster, lambda: _core(cluster, old).high_watermark >= 10)
    _finish(cluster)


def test_fsyncs_that_keep_failing_keep_the_replica_fenced_with_backoff() -> None:
    """A disk whose syncs keep failing: each reopen fails too (its sync), and the
    retries back off (300, 600, 1,200 ms ...) instead of hammering the disk."""
    cluster = _cluster()
    victim = next(n for n in cluster.node_ids if n != _leader_id(cluster))
    node = cluster.nodes[victim]
    node.disk.failing_syncs = 1_000_000
    _wait(cluster, lambda: node.counter("storage_failures") >= 1)
    (fenced,) = node.driver.fenced()
    _wait(cluster, lambda: node.driver.fenced()[0].attempts >= 3, 5_000)
    (again,) = node.driver.fenced()
    assert again.retry_at_ms - cluster.sim.now_ms > fenced.retry_at_ms - fenced.since_ms
    acked = _acked(cluster)
    _wait(cluster, lambda: _acked(cluster) > acked + 10)  # the other two commit
    node.disk.failing_syncs = 0
    _wait(cluster, lambda: 0 in node.cores, 10_000)
    _finish(cluster)


def test_a_slow_disk_fills_a_busy_replicas_input_queue_and_peer_messages_are_dropped() -> None:
    """A follower's syncs take a second: its replica stays busy through each round,
    and the leader's messages beyond its input queue are dropped (counted), not
    queued without bound; consensus retransmits them once the disk is fast again."""
    cluster = _cluster(host=HostConfig(**{**_host_fields(), "queued_inputs_max": 2}))
    victim = next(n for n in cluster.node_ids if n != _leader_id(cluster))
    node = cluster.nodes[victim]
    node.disk.sync_delay_ms = 1_000
    _wait(cluster, lambda: node.counter("inputs_dropped") > 0, 5_000)
    node.disk.sync_delay_ms = 0
    _wait(cluster, lambda: _core(cluster, victim).high_watermark == _leader(cluster).high_watermark)  # type: ignore[union-attr]
    _finish(cluster)


def test_produce_calls_beyond_the_limit_are_refused_while_the_leaders_disk_is_slow() -> None:
    """The leader's disk is slow: produce calls wait for their round; beyond
    ``produce_calls_max`` waiting on the replica the next is refused UNAVAILABLE at
    once (counted), and the ones admitted are answered once the disk is back."""
    cluster = _cluster(host=HostConfig(**{**_host_fields(), "produce_calls_max": 2}))
    for client in cluster.clients:
        client.enabled = False
    _wait(cluster, lambda: all(client.idle for client in cluster.clients))
    leader = _leader_id(cluster)
    node = cluster.nodes[leader]
    node.disk.sync_delay_ms = 500
    for index in range(3):
        _propose(cluster, leader, 700 + index, encode_batch([f"slow-{index}".encode()]), Acks.ALL)
    (refused,) = node.local_replies
    assert refused.request_id == 702 and refused.status is ProduceStatus.UNAVAILABLE
    assert node.counter("produce_refused") == 1
    node.disk.sync_delay_ms = 0
    _wait(cluster, lambda: len(node.local_replies) == 3)
    assert {r.request_id: r.status for r in node.local_replies[1:]} == {
        700: ProduceStatus.OK,
        701: ProduceStatus.OK,
    }
    _finish(cluster)


def test_disk_faults_in_random_seeds_keep_every_safety_check() -> None:
    """Failed and slow fsyncs mixed with the other faults: every seed clean, and
    the faults happened (replicas fenced and reopened)."""
    results = [run_seed(seed, SeedOptions(disk_faults=True)) for seed in range(900, 910)]
    assert {r.seed: r.violations[:3] for r in results if r.violations} == {}
    assert sum(r.fenced for r in results) > 0
    assert all(r.acked > 0 for r in results)


def _host_fields() -> dict[str, object]:
    config = sim_host_config()
    return {name: getattr(config, name) for name in HostConfig.__dataclass_fields__}
