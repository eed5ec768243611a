"""Unit tests of the rolling-restart rules and driver (clients/laminar_cli/rolling.py), on a fake
client: the cluster as DescribeCluster answers it, scripted step by step."""

from __future__ import annotations

from dataclasses import replace

import pytest
from laminar_cli.rolling import (
    RollingRestartError,
    caught_up_refusal,
    expand_command,
    majority_refusal,
    rolling_restart,
)
from laminar_client import ClusterDescription, MemberInfo, PartitionHealth

NODES = ("a", "b", "c")


def health(
    partition: int,
    leader: str | None = "a",
    in_sync: tuple[str, ...] = NODES,
    voters: tuple[str, ...] = NODES,
) -> PartitionHealth:
    return PartitionHealth(
        "t", partition, leader, voters, voters, len(in_sync) < len(voters), in_sync
    )


def cluster(
    *partitions: PartitionHealth,
    states: dict[str, str] | None = None,
    incarnation: int = 1,
) -> ClusterDescription:
    states = states or {}
    members = tuple(
        MemberInfo(n, f"127.0.0.1:710{i}", state=states.get(n, "alive"), incarnation=incarnation)
        for i, n in enumerate(NODES)
    )
    return ClusterDescription("c", "a", members, tuple(partitions))


def test_a_node_may_stop_when_every_other_voter_is_in_sync() -> None:
    description = cluster(health(0), health(1, leader="b"))
    assert majority_refusal(description, "c") is None
    # The node's own lag does not matter: it is the one stopping.
    assert majority_refusal(cluster(health(0, in_sync=("a", "b"))), "c") is None


def test_stopping_a_node_that_a_majority_needs_is_refused() -> None:
    refusal = majority_refusal(cluster(health(0), health(1, in_sync=("a", "c"))), "c")
    assert refusal == (
        "t/1: voter b is not in sync, so stopping c would leave 1 of its 3 voters in sync"
    )
    assert majority_refusal(cluster(health(0, leader=None)), "c") == "t/0 has no leader"
    assert majority_refusal(cluster(health(0)), "z") == "z is not a member of the cluster"
    single = health(3, leader="c", in_sync=("c",), voters=("c",))
    assert majority_refusal(cluster(single), "c") == (
        "t/3 has no other replica: stopping c stops its writes and reads"
    )
    # A partition the node holds no vote in is not its concern.
    other = health(2, in_sync=("a",), voters=("a", "b"))
    assert majority_refusal(cluster(other), "c") is None


def test_a_restarted_node_is_back_once_alive_and_in_sync_everywhere() -> None:
    assert caught_up_refusal(cluster(health(0), states={"c": "dead"}), "c") == (
        "c is dead by gossip"
    )
    assert caught_up_refusal(cluster(health(0, in_sync=("a", "b"))), "c") == (
        "c is not in sync in t/0"
    )
    assert caught_up_refusal(cluster(health(0, leader=None)), "c") == "t/0 has no leader"
    assert caught_up_refusal(cluster(health(0)), "c") is None
    # Alive and in sync, but as gossip remembers the process that was stopped.
    assert caught_up_refusal(cluster(health(0)), "c", incarnation_before=1) == (
        "gossip has not seen c restart yet"
    )
    assert caught_up_refusal(cluster(health(0), incarnation=2), "c", incarnation_before=1) is None


def test_the_command_template() -> None:
    assert expand_command("systemctl restart laminar@%n", "n3", "h:1") == (
        "systemctl restart laminar@n3"
    )
    assert expand_command("x %a %% %q %", "n3", "h:1") == "x h:1 % %q %"
    assert expand_command("stop %n", "a; rm -rf /", "h:1") == "stop 'a; rm -rf /'"


class FakeClient:
    """Answers describe_cluster from a script: ``answers`` is consumed one answer per
    call (the last one repeats); set_maintenance is recorded."""

    def __init__(self, answers: list[ClusterDescription]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, object]] = []
        self.asked = 0

    def describe_cluster(self, *, timeout_s: float | None = None) -> ClusterDescription:
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        # Every answer a later incarnation: gossip sees each restart at once.
        self.asked += 1
        members = tuple(replace(m, incarnation=self.asked) for m in answer.members)
        return replace(answer, members=members)

    def set_maintenance(self, node_id: str, enter: bool) -> tuple[str, ...]:
        self.calls.append(("maintenance", (node_id, enter)))
        return (node_id,) if enter else ()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_driver_restarts_each_node_in_turn_after_it_hands_over() -> None:
    led_by_c = cluster(health(0, leader="c"))
    healthy = cluster(health(0, leader="b"))
    answers = [healthy, led_by_c, healthy, healthy, healthy]  # c hands over, then back
    client = FakeClient(answers)
    restarted: list[str] = []
    clock = Clock()

    def restart(node_id: str) -> None:
        client.calls.append(("restart", node_id))
        restarted.append(node_id)

    done = rolling_restart(
        client,  # type: ignore[arg-type]
        restart,
        nodes=["c", "a"],
        clock=clock,
        sleep=clock.sleep,
    )
    assert [step.node_id for step in done] == ["c", "a"]
    assert client.calls == [
        ("maintenance", ("c", True)),
        ("restart", "c"),
        ("maintenance", ("c", False)),
        ("maintenance", ("a", True)),
        ("restart", "a"),
        ("maintenance", ("a", False)),
    ]
    assert done[0].handover_s > 0  # it waited for the hand-over


def test_the_driver_stops_before_a_node_a_majority_needs() -> None:
    client = FakeClient([cluster(health(0, in_sync=("a", "c")))])
    clock = Clock()
    with pytest.raises(
        RollingRestartError, match=r"stopped before c \(asked for 30 s\): t/0: voter b is not"
    ):
        rolling_restart(
            client,  # type: ignore[arg-type]
            lambda node: None,
            nodes=["c"],
            clock=clock,
            sleep=clock.sleep,
        )
    assert client.calls == []  # the node was not touched


def test_the_driver_stops_when_a_node_does_not_catch_up() -> None:
    behind = cluster(health(0, in_sync=("a", "b")))
    client = FakeClient([cluster(health(0)), cluster(health(0)), behind])
    clock = Clock()
    with pytest.raises(RollingRestartError, match="timed out after 5 s waiting for c to catch"):
        rolling_restart(
            client,  # type: ignore[arg-type]
            lambda node: None,
            nodes=["c"],
            step_timeout_s=5,
            clock=clock,
            sleep=clock.sleep,
        )
    assert client.calls == [("maintenance", ("c", True))]  # left in maintenance


def test_a_failed_restart_command_stops_the_run() -> None:
    client = FakeClient([cluster(health(0))])

    def restart(node_id: str) -> None:
        raise RuntimeError("`systemctl restart laminar@c` exited with status 5")

    with pytest.raises(RollingRestartError, match=r"restarting c failed: .* status 5"):
        rolling_restart(client, restart, nodes=["c"])  # type: ignore[arg-type]


def test_a_moment_out_of_sync_before_a_node_is_waited_out() -> None:
    # The previous node just came back: b is briefly behind in t/0, then in sync.
    client = FakeClient(
        [cluster(health(0, leader="b", in_sync=("b", "c")))] * 3 + [cluster(health(0, leader="b"))]
    )
    clock = Clock()
    done = rolling_restart(
        client,  # type: ignore[arg-type]
        lambda node: None,
        nodes=["c"],
        clock=clock,
        sleep=clock.sleep,
    )
    assert [step.node_id for step in done] == ["c"]


def test_every_member_by_default() -> None:
    client = FakeClient([replace(cluster(health(0)), partitions=())])
    done = rolling_restart(client, lambda node: None)  # type: ignore[arg-type]
    assert [step.node_id for step in done] == list(NODES)
