"""Finding the live leader after a failure (issue 13, point 6), on a simulated cluster.

Each test runs on `SimCluster` with a manual clock: nodes answer from their own
views, dead nodes refuse at once, hung nodes take the whole timeout, and times
are exact. The bound asserted is the issue's: writes resume within about a
second of the election, whatever the bootstrap order and whichever node answers.
"""

from __future__ import annotations

import random

import pytest
from laminar_client import Client, RetryPolicy
from laminar_client.health import NodeHealth
from laminar_client.metadata import ClusterMetadata, answers_settled, merge_answers

from laminar.errors import LaminarError, UnavailableError
from laminar.records import encode_batch
from laminar.v1 import laminar_pb2 as pb
from tests.client.sim_cluster import ManualClock, SimCluster

KEY = ("t", 0)
DEATH_S = 10.0
ELECTION_S = DEATH_S + 1.0  # the `local` preset elects within about a second
GOSSIP_DEAD_S = DEATH_S + 2.0
WITHIN_S = 1.0  # the bound after the election


def make_client(sim: SimCluster, bootstrap: list[str], **kwargs) -> Client:
    return Client(
        bootstrap,
        transport=sim,
        clock=sim.clock,
        sleep=sim.clock.sleep,
        rng=random.Random(7),
        **kwargs,
    )


def batch(value: bytes) -> bytes:
    return encode_batch([value])


def three_replicas_and_a_bystander() -> SimCluster:
    """t/0 on n0 (leader), n1, n2; n3 hosts nothing and names placement's first."""
    sim = SimCluster(ManualClock(), 4)
    sim.add_partition("t", 0, ["n0", "n1", "n2"], leader="n0")
    return sim


def kill_and_elect(sim: SimCluster, how: str = "down") -> None:
    """n0 stops at DEATH_S; n1 is elected at ELECTION_S; gossip says dead at GOSSIP_DEAD_S."""
    sim.clock.at(DEATH_S, lambda: setattr(sim.nodes["n0"], "state", how))
    sim.clock.at(ELECTION_S, lambda: sim.elect(KEY, "n1", "n1", "n2"))
    sim.clock.at(GOSSIP_DEAD_S, lambda: sim.gossip("n0", "dead", "n1", "n2", "n3"))


# --------------------------------------------------------------------------- (a)


@pytest.mark.parametrize(
    "order",
    [
        ("n0", "n1", "n2", "n3"),
        ("n0", "n3", "n1", "n2"),
        ("n3", "n0", "n1", "n2"),
        ("n3", "n2", "n1", "n0"),
    ],
)
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_writes_resume_within_a_second_of_the_election(order, warm) -> None:
    sim = three_replicas_and_a_bystander()
    kill_and_elect(sim)
    with make_client(sim, sim.bootstrap(*order)) as client:
        if warm:
            assert client.produce("t", 0, batch(b"before")) == [0]
        sim.clock.advance(DEATH_S - sim.clock())
        offsets = client.produce("t", 0, batch(b"after"))
        done_s = sim.clock()
    assert offsets == [1 if warm else 0]
    assert sim.partitions[KEY].written_by[-1] == "n1"
    assert done_s <= ELECTION_S + WITHIN_S, f"writes resumed at {done_s:.3f} s"


def test_a_hung_leader_costs_one_attempt_timeout() -> None:
    sim = three_replicas_and_a_bystander()
    kill_and_elect(sim, how="hung")
    with make_client(sim, sim.bootstrap("n3", "n0", "n1", "n2"), attempt_timeout_s=2.0) as client:
        client.produce("t", 0, batch(b"before"))
        sim.clock.advance(DEATH_S - sim.clock())
        client.produce("t", 0, batch(b"after"))
        done_s = sim.clock()
    produces = [c for c in sim.calls if c.method == "Produce"]
    assert {c.timeout_s for c in produces} == {2.0}
    assert {c.request.timeout_ms for c in produces} == {1500}  # the server gives up first
    # The attempt to n0 ends at DEATH_S + 2 s, after the election: n1 at once.
    assert done_s <= DEATH_S + 2.0 + WITHIN_S
    assert sim.calls_to("Produce", since_s=DEATH_S).count("n0") == 1


def test_hints_towards_the_failed_leader_are_not_followed() -> None:
    sim = three_replicas_and_a_bystander()
    kill_and_elect(sim)
    with make_client(sim, sim.bootstrap("n3", "n0", "n1", "n2")) as client:
        client.produce("t", 0, batch(b"before"))
        sim.clock.advance(DEATH_S - sim.clock())
        client.produce("t", 0, batch(b"after"))
    # n1 and n2 keep naming n0 until the election: n0 refused once, then is skipped
    # for node_skip_initial_ms, and its retry after the skip refused again.
    assert sim.calls_to("Produce", since_s=DEATH_S).count("n0") <= 2
    assert "n3" not in sim.calls_to("Produce")


def test_a_node_that_comes_back_and_leads_is_not_skipped() -> None:
    sim = three_replicas_and_a_bystander()
    kill_and_elect(sim)
    with make_client(sim, sim.bootstrap("n0", "n1", "n2", "n3")) as client:
        client.produce("t", 0, batch(b"before"))
        sim.clock.advance(DEATH_S - sim.clock())
        client.produce("t", 0, batch(b"during"))
        for _ in range(3):  # n0 kept failing: skipped for the next 5 s (the cap)
            client.cache.node_failed(sim.nodes["n0"].address)
        sim.restart("n0")
        sim.elect(KEY, "n0", "n0", "n1", "n2")  # placement's first takes leadership back
        start_s = sim.clock()
        client.produce("t", 0, batch(b"after"))
        done_s = sim.clock()
    assert sim.partitions[KEY].written_by == ["n0", "n1", "n0"]
    assert done_s - start_s < 0.1  # its higher incarnation ended the skip


# --------------------------------------------------------------------------- (b)


@pytest.mark.parametrize("stale_view", ["", "n0"], ids=["leader-unknown", "still-leader"])
def test_a_cut_off_node_that_keeps_answering_is_outvoted(stale_view) -> None:
    """n0 led t/0 and is cut off from n1 and n2 (not from the client) at DEATH_S.

    It keeps answering Metadata: with "leader unknown" if it stepped down, or
    naming itself if it did not (its produce then times out: no quorum).
    """
    sim = SimCluster(ManualClock(), 3)
    sim.add_partition("t", 0, ["n0", "n1", "n2"], leader="n0")

    def cut() -> None:
        sim.nodes["n0"].leaders[KEY] = stale_view
        sim.nodes["n0"].cut_off = True
        sim.gossip("n1", "suspect", "n0")
        sim.gossip("n2", "suspect", "n0")

    sim.clock.at(DEATH_S, cut)
    sim.clock.at(ELECTION_S, lambda: sim.elect(KEY, "n1", "n1", "n2"))
    sim.clock.at(GOSSIP_DEAD_S, lambda: sim.gossip("n0", "dead", "n1", "n2"))
    with make_client(sim, sim.bootstrap("n0", "n1", "n2")) as client:
        client.produce("t", 0, batch(b"before"))
        sim.clock.advance(DEATH_S - sim.clock())
        client.produce("t", 0, batch(b"after"))
        done_s = sim.clock()
        leader = client.metadata().partition("t", 0).leader
    assert sim.partitions[KEY].written_by == ["n0", "n1"]
    assert leader == "n1"
    # A self-named leader that cannot commit costs its server timeout (2.5 s) once.
    bound_s = ELECTION_S + WITHIN_S if stale_view == "" else DEATH_S + 3.0 + WITHIN_S
    assert done_s <= bound_s, f"writes resumed at {done_s:.3f} s"


def test_a_stale_first_answer_does_not_decide_the_leader() -> None:
    """n3 hosts nothing and answers first: the hosting replicas are asked too."""
    sim = three_replicas_and_a_bystander()
    sim.elect(KEY, "n2", "n1", "n2")  # n0 is behind: still names itself
    sim.nodes["n0"].leaders[KEY] = "n0"
    with make_client(sim, sim.bootstrap("n3", "n0", "n1", "n2")) as client:
        metadata = client.metadata()
        assert client.produce("t", 0, batch(b"x")) == [0]
    assert metadata.partition("t", 0).leader == "n2"
    assert sim.calls_to("Produce") == ["n2"]
    assert sim.calls_to("Metadata") == ["n3", "n0", "n1", "n2"]  # metadata_answers_max


# --------------------------------------------------------------------------- (c)


def test_an_unresponsive_bootstrap_node_costs_one_metadata_timeout_then_is_skipped() -> None:
    sim = three_replicas_and_a_bystander()
    sim.nodes["n0"].state = "hung"
    with make_client(sim, sim.bootstrap("n0", "n1", "n2", "n3")) as client:
        client.metadata()
        first_s = sim.clock()
        client.metadata(refresh=True)
        second_s = sim.clock() - first_s
    assert first_s <= 1.0 + 0.1
    hung = [c for c in sim.calls if c.node_id == "n0"]
    assert [c.timeout_s for c in hung] == [1.0]  # one Metadata, within its bound
    assert second_s < 0.1  # skipped on the next refresh


def test_a_hung_bootstrap_node_does_not_delay_the_first_write() -> None:
    sim = three_replicas_and_a_bystander()
    sim.nodes["n1"].state = "hung"
    with make_client(sim, sim.bootstrap("n1", "n0", "n2", "n3")) as client:
        assert client.produce("t", 0, batch(b"x")) == [0]
        assert sim.clock() <= 1.0 + 0.1
        client.cache.invalidate()
        client.produce("t", 0, batch(b"y"))
    assert sim.calls_to("Metadata").count("n1") == 1


def test_a_long_poll_attempt_includes_its_wait() -> None:
    sim = three_replicas_and_a_bystander()
    with make_client(sim, sim.bootstrap("n0"), attempt_timeout_s=2.0) as client:
        client.fetch("t", 0, 0, max_wait_s=5.0)
    (fetch,) = [c for c in sim.calls if c.method == "Fetch"]
    assert fetch.timeout_s == 7.0


def test_all_nodes_hung_gives_up_at_the_deadline() -> None:
    sim = three_replicas_and_a_bystander()
    for node in sim.nodes.values():
        node.state = "hung"
    with (
        make_client(sim, sim.bootstrap("n0", "n1"), timeout_s=5.0) as client,
        pytest.raises(UnavailableError),
    ):
        client.produce("t", 0, batch(b"x"))
    assert sim.clock() <= 5.0 + 1.0


# --------------------------------------------------------------------------- cores


def answer(node_id: str, leader: str, *, hosting: bool = True, **states: str):
    members = [
        pb.Member(node_id=n, grpc_address=f"{n}:1", state=states.get(n, "alive"))
        for n in ("n0", "n1", "n2", "n3")
    ]
    info = pb.PartitionInfo(
        partition=0,
        replicas=["n0", "n1", "n2"],
        leader=leader,
        high_watermark=5 if hosting else -1,
    )
    config = pb.TopicConfig(partitions=1, replication_factor=3)
    topic = pb.TopicInfo(name="t", config=config, partitions=[info])
    response = pb.MetadataResponse(cluster_id="c", node_id=node_id, members=members, topics=[topic])
    return ClusterMetadata.from_proto(response)


def test_merge_prefers_hosting_nodes_and_the_majority() -> None:
    answers = [
        answer("n3", "n0", hosting=False),
        answer("n0", "n0"),
        answer("n1", "n1"),
        answer("n2", "n1"),
    ]
    merged = merge_answers(answers)
    assert merged.partition("t", 0).leader == "n1"
    assert merged.answered_by == ("n3", "n0", "n1", "n2")
    assert merge_answers(answers[:1]).partition("t", 0).leader == "n0"  # nothing better


def test_merge_does_not_trust_a_dead_leader() -> None:
    answers = [answer("n1", "n0", n0="dead"), answer("n2", "n0", n0="dead")]
    merged = merge_answers(answers)
    assert merged.partition("t", 0).leader is None
    assert merged.preferred_leader("t", 0) == "n1"
    assert merged.live_replicas("t", 0) == ("n1", "n2")


def test_merge_members_self_report_and_majority() -> None:
    # n0 is cut off and thinks n1, n2 dead; n1 and n2 think n0 dead.
    answers = [
        answer("n0", "", n1="dead", n2="dead"),
        answer("n1", "n1", n0="dead"),
        answer("n2", "n1", n0="dead"),
    ]
    merged = merge_answers(answers)
    states = {node_id: m.state for node_id, m in merged.members.items()}
    assert states == {"n0": "alive", "n1": "alive", "n2": "alive", "n3": "alive"}
    assert merged.partition("t", 0).leader == "n1"
    tie = merge_answers([answer("n3", "", hosting=False, n1="dead"), answer("n2", "", n1="alive")])
    assert tie.members["n1"].state == "alive"


def test_merge_tie_goes_to_the_self_named_leader() -> None:
    merged = merge_answers([answer("n1", "n0"), answer("n2", "n2")])
    assert merged.partition("t", 0).leader == "n2"


def test_settled_needs_two_agreeing_hosting_answers() -> None:
    stale = answer("n3", "", hosting=False)
    assert not answers_settled([stale], KEY)
    assert not answers_settled([stale, answer("n1", "n1")], KEY)
    assert answers_settled([stale, answer("n1", "n1"), answer("n2", "n1")], KEY)
    assert not answers_settled([answer("n0", "n0"), answer("n1", "n1")], KEY)
    assert not answers_settled([answer("n1", "n1")], None)
    assert answers_settled([answer("n1", "n1"), answer("n2", "n1")], None)
    assert not answers_settled([answer("n1", "n1"), answer("n0", "n0")], None)


def test_node_health_skips_exponentially_and_falls_back() -> None:
    health = NodeHealth(RetryPolicy(node_skip_initial_ms=100, node_skip_max_ms=300))
    health.failed("a", now_s=0.0)
    assert health.skipped("a", 0.09) and not health.skipped("a", 0.1)
    health.failed("a", now_s=1.0)
    assert health.skipped("a", 1.19) and not health.skipped("a", 1.2)
    health.failed("a", now_s=2.0)
    health.failed("a", now_s=3.0)
    assert health.skipped("a", 3.29) and not health.skipped("a", 3.3)  # capped
    health.failed("b", now_s=3.0)
    assert health.usable(["a", "b", "c"], 3.0) == ["c"]
    assert health.usable(["b", "a"], 3.0) == ["b"]  # all skipped: the first to end
    health.answered("a")
    assert health.usable(["b", "a"], 3.0) == ["a"]


# --------------------------------------------------------------------------- seeded


@pytest.mark.parametrize("seed", range(200))
def test_any_mix_of_views_ends_within_the_deadline(seed) -> None:
    """Random states and views (gossip that contradicts replication included).

    A produce fails cleanly or succeeds on a node that believes it leads, within the
    deadline and the attempt bound; it succeeds whenever such a node is reachable.
    """
    rng = random.Random(seed)
    sim = SimCluster(ManualClock(), 5)
    sim.add_partition("t", 0, ["n0", "n1", "n2"], leader="")
    for node in sim.nodes.values():
        node.state = rng.choice(["up", "up", "up", "down", "hung"])
        if KEY in node.leaders:
            node.leaders[KEY] = rng.choice(["n0", "n1", "n2", ""])
        for other in sim.nodes:
            if other != node.node_id:
                node.members[other] = rng.choice(["alive", "alive", "suspect", "dead"])
    reachable_leader = any(
        node.state == "up" and node.leaders.get(KEY) == node.node_id for node in sim.nodes.values()
    )
    order = list(sim.nodes)
    rng.shuffle(order)
    with make_client(sim, sim.bootstrap(*order), timeout_s=10.0) as client:
        try:
            client.produce("t", 0, batch(b"x"))
        except LaminarError:
            assert not reachable_leader
        else:
            leader = sim.partitions[KEY].written_by[-1]
            assert sim.nodes[leader].leaders[KEY] == leader
    assert sim.clock() <= 10.0 + client.attempt_timeout_s
    assert len(sim.calls) <= RetryPolicy().attempts_max * 6
