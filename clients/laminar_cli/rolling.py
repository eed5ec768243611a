"""Rolling restart: restart a cluster's nodes one at a time without losing a majority.

``laminar cluster rolling-restart --command CMD`` (and ``scripts/local_cluster.sh
rolling-restart``) drives :func:`rolling_restart`. For each node, in turn:

1. **Check** (:func:`majority_refusal`): every partition the node is a voter of
   has a leader, and every *other* voter is in sync with it. Stopping the node
   then leaves each group a majority of in-sync voters, so no partition stops
   taking writes for longer than a leadership hand-over, and nothing acknowledged
   depends on the stopped node alone. A voter just back (the previous node) or a
   leadership just moving may make this false for a moment, so it is asked again
   for up to ``settle_timeout_s``; then the run stops and says which partition and
   voter are the reason (before touching the node).
2. **Maintenance enter** (:meth:`laminar_client.Client.set_maintenance`): the node
   hands its leaderships to in-sync voters, and its replicas stay while it is down;
   wait until it leads nothing.
3. **Restart**: run the operator's command (which stops and starts the node, e.g.
   ``systemctl restart laminar@%n``).
4. **Caught up** (:func:`caught_up_refusal`): wait until the node is alive by gossip
   and in sync in every partition it holds.
5. **Maintenance exit**: the node may lead again; preferred-leader transfer gives
   its leaderships back. Then the next node.

A step that fails or outlasts ``step_timeout_s`` stops the run with the reason; the
node then stays as the step left it (in maintenance, if the command or the
catch-up failed: the operator decides, and ``laminar cluster maintenance exit``
ends it). The rules are pure functions of a :class:`~laminar_client.ClusterDescription`
(tested in ``tests/test_rolling.py``); the driver takes the client, the restart
action and the clock as inputs.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from laminar_client import Client, ClusterDescription

from laminar.errors import LaminarError

POLL_INTERVAL_S = 0.1
"""How often a wait asks the cluster again."""


class RollingRestartError(LaminarError):
    """The rolling restart stopped: the message says at which node and why."""


def majority_refusal(description: ClusterDescription, node_id: str) -> str | None:
    """Why stopping ``node_id`` now could cost a partition its majority, or None.

    Refused when the node is not a member, or some partition it is a voter of has
    no leader, no other voter (replication factor 1), or another voter out of sync
    with its leader (the node would then be needed for a majority, or the
    partition is in trouble already).
    """
    if node_id not in {member.node_id for member in description.members}:
        return f"{node_id} is not a member of the cluster"
    for health in description.partitions:
        if node_id not in health.voters:
            continue
        name = f"{health.topic}/{health.partition}"
        if health.leader is None:
            return f"{name} has no leader"
        if len(health.voters) == 1:
            return f"{name} has no other replica: stopping {node_id} stops its writes and reads"
        behind = [v for v in health.voters if v != node_id and v not in health.in_sync]
        if behind:
            return (
                f"{name}: voter {', '.join(behind)} is not in sync, so stopping {node_id} "
                f"would leave {len(health.voters) - 1 - len(behind)} of its "
                f"{len(health.voters)} voters in sync"
            )
    return None


def caught_up_refusal(
    description: ClusterDescription, node_id: str, incarnation_before: int = -1
) -> str | None:
    """Why ``node_id`` is not back in full yet (after its restart), or None: it must
    be alive by gossip with an incarnation above ``incarnation_before`` (its new
    process, not what gossip remembers of the old one), and in sync in every
    partition that has it as a voter or a replica, each with a leader."""
    member = next((m for m in description.members if m.node_id == node_id), None)
    if member is None or member.state != "alive":
        return f"{node_id} is {member.state if member else 'unknown'} by gossip"
    if member.incarnation <= incarnation_before:
        return f"gossip has not seen {node_id} restart yet"
    for health in description.partitions:
        if node_id not in health.voters and node_id not in health.replicas:
            continue
        name = f"{health.topic}/{health.partition}"
        if health.leader is None:
            return f"{name} has no leader"
        if node_id not in health.in_sync:
            return f"{node_id} is not in sync in {name}"
    return None


def leaderships(description: ClusterDescription, node_id: str) -> list[str]:
    return [
        f"{health.topic}/{health.partition}"
        for health in description.partitions
        if health.leader == node_id
    ]


def expand_command(template: str, node_id: str, grpc_address: str) -> str:
    """``template`` with ``%n`` the node id, ``%a`` its gRPC address, ``%%`` a ``%``;
    the node id and the address are quoted for the shell when they need it (a node
    id may hold any character but NUL)."""
    out = []
    index = 0
    while index < len(template):
        char = template[index]
        if char == "%" and index + 1 < len(template):
            code = template[index + 1]
            replacement = {
                "n": shlex.quote(node_id),
                "a": shlex.quote(grpc_address),
                "%": "%",
            }.get(code)
            if replacement is not None:
                out.append(replacement)
                index += 2
                continue
        out.append(char)
        index += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class NodeRestarted:
    """One node's restart, as timed by :func:`rolling_restart` (seconds)."""

    node_id: str
    handover_s: float
    restart_s: float
    catch_up_s: float


def rolling_restart(
    client: Client,
    restart: Callable[[str], None],
    *,
    nodes: Sequence[str] | None = None,
    step_timeout_s: float = 300.0,
    settle_timeout_s: float = 30.0,
    report: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[NodeRestarted]:
    """Restart ``nodes`` (default: every member, by node id) one at a time (module
    docstring); ``restart(node_id)`` stops and starts one and returns when it has
    (raising when it failed). Raises :class:`RollingRestartError` at the first node
    whose check, hand-over, restart or catch-up fails."""
    if nodes is None:
        nodes = sorted(member.node_id for member in client.describe_cluster().members)
    done: list[NodeRestarted] = []
    for node_id in nodes:
        refusal = _wait(
            client, partial(majority_refusal, node_id=node_id), settle_timeout_s, clock, sleep
        )
        if refusal is not None:
            raise RollingRestartError(
                f"stopped before {node_id} (asked for {settle_timeout_s:g} s): {refusal}"
            )
        started = clock()
        client.set_maintenance(node_id, True)
        report(f"{node_id}: in maintenance, handing over its leaderships")
        refusal = _wait(client, partial(_led, node_id=node_id), step_timeout_s, clock, sleep)
        if refusal is not None:
            raise RollingRestartError(
                f"timed out after {step_timeout_s:g} s waiting for {node_id} to hand over "
                f"its leaderships (it stays in maintenance): {refusal}"
            )
        handed = clock()
        report(f"{node_id}: leads nothing; restarting")
        incarnation = _incarnation(client.describe_cluster(), node_id)
        try:
            restart(node_id)
        except Exception as error:
            raise RollingRestartError(
                f"restarting {node_id} failed: {error} (it stays in maintenance; "
                f"`laminar cluster maintenance exit {node_id}` ends it)"
            ) from error
        restarted = clock()
        report(f"{node_id}: restarted; waiting until it is in sync everywhere")
        refusal = _wait(
            client,
            partial(caught_up_refusal, node_id=node_id, incarnation_before=incarnation),
            step_timeout_s,
            clock,
            sleep,
        )
        if refusal is not None:
            raise RollingRestartError(
                f"timed out after {step_timeout_s:g} s waiting for {node_id} to catch up (it "
                f"stays in maintenance; `laminar cluster maintenance exit {node_id}` ends "
                f"it): {refusal}"
            )
        caught_up = clock()
        client.set_maintenance(node_id, False)
        report(f"{node_id}: in sync everywhere, out of maintenance")
        done.append(
            NodeRestarted(node_id, handed - started, restarted - handed, caught_up - restarted)
        )
    return done


def _incarnation(description: ClusterDescription, node_id: str) -> int:
    member = next((m for m in description.members if m.node_id == node_id), None)
    return member.incarnation if member is not None else -1


def _led(description: ClusterDescription, node_id: str) -> str | None:
    led = leaderships(description, node_id)
    return f"{node_id} still leads {', '.join(led[:5])}" if led else None


def _wait(
    client: Client,
    refusal: Callable[[ClusterDescription], str | None],
    timeout_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> str | None:
    """Ask the cluster until ``refusal`` says nothing (None), for up to ``timeout_s``
    (at least once); then its last word."""
    deadline = clock() + timeout_s
    last: str | None = "no answer yet"
    while True:
        try:
            last = refusal(client.describe_cluster(timeout_s=max(1.0, deadline - clock())))
        except LaminarError as error:
            last = str(error)
        if last is None or clock() >= deadline:
            return last
        sleep(POLL_INTERVAL_S)
