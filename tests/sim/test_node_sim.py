"""Operator scenarios on whole simulated nodes (membership, placement, catalogue and
the replica driver in one process: :mod:`laminar.testing.node_sim`), seeded.

Each scenario runs a five-node cluster with a topic of four partitions (three
replicas each) and a producer per partition writing with ``acks=all``; waits are
bounded in simulated time (``run_for(bound, condition)``). A failing seed replays
exactly: ``NodeCluster(seed)`` and the same script give the same trace hash.
"""

from __future__ import annotations

import pytest

from laminar.testing.node_sim import NodeCluster, NodeGraces, NodeSimOptions
from laminar.testing.sim import LinkConfig

SEEDS = (1, 2, 3)
GRACES = NodeGraces(replica_move_grace_ms=3_000, maintenance_grace_ms=60_000)
LEADERLESS_MAX_MS = 500
"""Longest a partition may go without a live leader: a hand-over (a transfer takes
a round trip or two), never an election, nor a stopped node's absence."""
LEADERLESS_LOSSY_MAX_MS = 1_200
"""Over a lossy network a hand-over may lose a vote: the candidate tries again after
an election timeout (the simulation preset's: 300-600 ms)."""
ACK_GAP_MAX_MS = 2_000
"""Longest a partition's producer may go without an acknowledgement: a hand-over
plus the simulated client's retries (a 400 ms timeout, then a random node, which
answers "not leader" without a hint when it holds no replica)."""


LOSSY = LinkConfig(loss=0.02, delay_min_ms=1, delay_max_ms=20)
"""2% of datagrams and peer bundles lost, 1-20 ms delays (so reordered)."""
CLEAN = LinkConfig(loss=0.0, delay_min_ms=1, delay_max_ms=5)
LINKS = [pytest.param(CLEAN, id="clean"), pytest.param(LOSSY, id="lossy")]


def _cluster(seed: int, link: LinkConfig = CLEAN) -> NodeCluster:
    cluster = NodeCluster(seed, NodeSimOptions(graces=GRACES, link=link))
    assert cluster.sim.run_until(1_000, cluster.all_led)
    cluster.sim.run_until(1_000)
    return cluster


def _check_writable(cluster: NodeCluster, link: LinkConfig) -> None:
    """Every partition led throughout but for hand-overs (a lost vote adds an
    election timeout); on a clean network its producer acknowledged all along too
    (over a lossy one a lost request costs the simulated client its 400 ms
    timeout, and a few in a row add up)."""
    bound_ms = LEADERLESS_MAX_MS if link.loss == 0.0 else LEADERLESS_LOSSY_MAX_MS
    assert max(cluster.leaderless_ms.values()) < bound_ms, cluster.leaderless_ms
    if link.loss == 0.0:
        assert max(cluster.ack_gap_ms.values()) < ACK_GAP_MAX_MS, cluster.ack_gap_ms


def _busiest_leader(cluster: NodeCluster) -> str:
    return max(cluster.node_ids, key=lambda node_id: (cluster.leaderships(node_id), node_id))


def _acked(cluster: NodeCluster) -> list[int]:
    return [client.acked for client in cluster.clients]


def _settle(cluster: NodeCluster, bound_ms: int = 10_000) -> None:
    """Stop the producers and wait until every voter holds its leader's whole log."""
    for client in cluster.clients:
        client.enabled = False
    assert cluster.sim.run_for(bound_ms, lambda: all(c.idle for c in cluster.clients))
    assert cluster.sim.run_for(bound_ms, cluster.caught_up)


def _maintenance(
    seed: int, *, maintenance: bool, link: LinkConfig = CLEAN
) -> tuple[NodeCluster, str, list[frozenset[str]]]:
    """A node (the one leading most partitions) enters maintenance (or not), is
    stopped gracefully for twice the move grace, and is started again; returns the
    cluster, the node, and each partition's voters just before it started again."""
    cluster = _cluster(seed, link)
    sim = cluster.sim
    node_id = _busiest_leader(cluster)
    assert cluster.leaderships(node_id) > 0
    if maintenance:
        cluster.maintenance(node_id, True)
        # It hands its leaderships over (disk_handover_delay_ms, then a transfer each).
        assert sim.run_for(3_000, lambda: cluster.leaderships(node_id) == 0)
    cluster.stop(node_id)
    stopped_ms = sim.now_ms
    acked_before = _acked(cluster)
    sim.run_for(2 * GRACES.replica_move_grace_ms)

    def past_move_grace() -> bool:
        """Every other node has known it gone (left, or dead: a peer the leave's
        gossip missed declares it dead a few seconds later) for the move grace."""
        since_max_ms = sim.now_ms - GRACES.replica_move_grace_ms - 500  # and a replan
        for other in cluster.node_ids:
            tracker = cluster.nodes[other].tracker
            if other != node_id and tracker is not None:
                gone = tracker.gone.get(node_id)
                if gone is None or gone[1] > since_max_ms:
                    return False
        return True

    assert sim.run_for(10_000, past_move_grace)
    # Every partition took writes while it was away.
    assert all(after > before for after, before in zip(_acked(cluster), acked_before, strict=True))
    assert sim.now_ms - stopped_ms > GRACES.replica_move_grace_ms
    voters_away = [cluster.voters(p) for p in range(cluster.options.partitions)]
    cluster.start_again(node_id)
    if maintenance:
        sim.run_for(1_000)
        cluster.maintenance(node_id, False)
    sim.run_for(2_000)
    return cluster, node_id, voters_away


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("seed", SEEDS)
def test_maintenance_keeps_replicas_through_a_stop_past_the_move_grace(
    seed: int, link: LinkConfig
) -> None:
    cluster, node_id, voters_away = _maintenance(seed, maintenance=True, link=link)
    # No replica moved: no group changed its configuration, placement still puts
    # every partition where it was founded, and the node holds its replicas again.
    assert cluster.config_changes == []
    assert voters_away == [frozenset(founders) for founders in cluster.founders]
    for partition, founders in enumerate(cluster.founders):
        assert cluster.voters(partition) == frozenset(founders)
        for node in cluster.nodes.values():
            assert node.placement is not None
            assert set(node.placement.target_of(("sim", partition))) == set(founders)
    held = [p for p, founders in enumerate(cluster.founders) if node_id in founders]
    assert sorted(cluster.nodes[node_id].cores) == held
    # Writable throughout but for the hand-overs; nothing acknowledged was lost.
    _check_writable(cluster, link)
    _settle(cluster)
    assert cluster.final_checks() == []


@pytest.mark.parametrize("seed", SEEDS)
def test_without_maintenance_the_same_stop_moves_replicas_away(seed: int) -> None:
    """The control of the test above: the same stop, not in maintenance, and the
    groups replace the node (a member that left holds no replicas); placement
    brings them back once it returns."""
    cluster, node_id, voters_away = _maintenance(seed, maintenance=False)
    assert cluster.config_changes != []
    for voters in voters_away:
        assert len(voters) == cluster.options.replication
        assert node_id not in voters
    _settle(cluster)
    assert cluster.final_checks() == []


@pytest.mark.parametrize("seed", SEEDS)
def test_drain_moves_replicas_away_one_member_at_a_time(seed: int) -> None:
    cluster = _cluster(seed)
    sim = cluster.sim
    node_id = _busiest_leader(cluster)
    partitions = range(cluster.options.partitions)
    cluster.set_weight(node_id, 0.0)

    def drained() -> bool:
        return not cluster.nodes[node_id].cores and all(
            cluster.voters(p) and node_id not in cluster.voters(p) for p in partitions
        )

    assert sim.run_for(10_000, drained)
    # Each group changed one member at a time: a learner added, made a voter, the
    # drained node removed; never fewer voters than the replication factor.
    for partition in partitions:
        configs = [event.config for _, _, p, event in cluster.config_changes if p == partition]
        assert configs, f"p{partition} never reconfigured"
        previous = set(cluster.founders[partition])
        for config in dict.fromkeys(configs):
            voters = set(config.voters)
            assert len(voters ^ previous) <= 1, (partition, previous, config)
            assert len(voters) >= cluster.options.replication
            previous = voters
        assert node_id not in previous
    _check_writable(cluster, CLEAN)
    _settle(cluster)
    assert cluster.final_checks() == []


def test_a_seed_replays_exactly() -> None:
    hashes = [_maintenance(7, maintenance=True)[0].sim.trace_hash() for _ in range(2)]
    assert hashes[0] == hashes[1]
    assert _maintenance(8, maintenance=True)[0].sim.trace_hash() != hashes[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_node_returning_at_a_new_address(seed: int) -> None:
    """A node's process dies, and it starts again at another address with the same
    disk, within the move grace: gossip carries its new address, its peers
    replicate to it there, and its replicas catch up where they are."""
    cluster = _cluster(seed)
    sim = cluster.sim
    node_id = _busiest_leader(cluster)
    cluster.crash(node_id)
    sim.run_for(1_500)
    cluster.start_elsewhere(node_id, f"{node_id}-moved")
    assert sim.run_for(5_000, lambda: cluster.seen_alive(node_id))
    sim.run_for(1_000)
    _settle(cluster)  # every voter, the moved one included, holds its leader's log
    assert cluster.config_changes == []
    held = [p for p, founders in enumerate(cluster.founders) if node_id in founders]
    assert sorted(cluster.nodes[node_id].cores) == held
    assert cluster.final_checks() == []


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rolling_restart_moves_no_replica_and_keeps_every_partition_writable(
    seed: int, link: LinkConfig
) -> None:
    """Every node in turn, as ``laminar cluster rolling-restart`` does it: the others
    in sync, maintenance enter, wait until it leads nothing, stop and start it, wait
    until gossip has its new incarnation and it is in sync, maintenance exit."""
    cluster = _cluster(seed, link)
    sim = cluster.sim
    for node_id in cluster.node_ids:
        _restart_in_maintenance(cluster, node_id)
    assert all(node.incarnation == 1 for node in cluster.nodes.values())
    assert cluster.config_changes == []
    _check_writable(cluster, link)
    # Preferred-leader transfer gives each partition back to its first replica.
    assert sim.run_for(5_000, lambda: all(
        (leader := cluster.leader_of(p)) is not None and leader[0] == founders[0]
        for p, founders in enumerate(cluster.founders)
    ))  # fmt: skip
    _settle(cluster)
    assert cluster.final_checks() == []


def _restart_in_maintenance(cluster: NodeCluster, node_id: str) -> None:
    """One node's turn in a rolling restart (``clients/laminar_cli/rolling.py``)."""
    sim = cluster.sim
    others = [other for other in cluster.node_ids if other != node_id]
    assert sim.run_for(10_000, lambda: all(cluster.in_sync(other) for other in others))
    cluster.maintenance(node_id, True)
    assert sim.run_for(3_000, lambda: cluster.leaderships(node_id) == 0)
    incarnation = cluster.incarnation_seen(node_id)
    cluster.stop(node_id)
    sim.run_for(1_000)
    assert not cluster.up(node_id)
    cluster.start_again(node_id)
    assert sim.run_for(
        10_000,
        lambda: cluster.seen_alive(node_id, incarnation) and cluster.in_sync(node_id),
    )
    cluster.maintenance(node_id, False)
