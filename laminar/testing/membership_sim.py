"""Membership cores as simulator nodes, plus helpers for membership scenarios.

In the simulation a node's gossip address *is* its simulator address, and a
push-pull stream message is a ``reliable`` envelope.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence

from laminar.membership.config import MembershipConfig
from laminar.membership.core import LocalMember, MembershipCore, Output
from laminar.membership.member import Member, MemberEvent, MemberState, NodeId
from laminar.testing.sim import Envelope, Simulator, Step

EventListener = Callable[[str, MemberEvent], None]
"""Called with (observer address, event) for every membership event."""


class MembershipSimNode:
    """Adapts :class:`MembershipCore` to :class:`~laminar.testing.sim.SimNode`.

    Durable state is the node id and attributes only: a restart builds a fresh
    core (incarnation 0) that rejoins through its seeds and refutes any older
    state the cluster holds about it."""

    def __init__(
        self,
        config: MembershipConfig,
        local: LocalMember,
        cluster_key: bytes,
        rng: random.Random,
        *,
        seeds: Sequence[str] = (),
        known_members: Sequence[Member] = (),
        on_event: EventListener | None = None,
        trace_events: bool = True,
    ) -> None:
        self._config = config
        self._local = local
        self._cluster_key = cluster_key
        self._rng = rng
        self._seeds = tuple(seeds)
        self._known_members = tuple(known_members)
        self._on_event = on_event
        self._trace_events = trace_events
        self.core: MembershipCore | None = None
        self.generation = 0

    @property
    def address(self) -> str:
        return self._local.gossip_address

    @property
    def node_id(self) -> NodeId:
        return self._local.node_id

    def start(self, now_ms: int) -> Step:
        self.core = MembershipCore(
            self._config,
            self._local,
            self._cluster_key,
            self._rng,
            now_ms,
            seeds=self._seeds,
            known_members=self._known_members if self.generation == 0 else (),
        )
        return self._step(self.core.tick(now_ms))

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        core = self.core
        assert core is not None and isinstance(payload, bytes)
        if reliable:
            return self._step(core.receive_stream(payload, now_ms))
        return self._step(core.receive_packet(payload, now_ms))

    def tick(self, now_ms: int) -> Step:
        assert self.core is not None
        return self._step(self.core.tick(now_ms))

    def crash(self) -> None:
        self.core = None

    def restart(self, now_ms: int) -> Step:
        self.generation += 1
        return self.start(now_ms)

    def leave(self, now_ms: int) -> Step:
        assert self.core is not None
        return self._step(self.core.leave(now_ms))

    def run_command(
        self, command: Callable[[MembershipCore, int], Output]
    ) -> Callable[[int], Step]:
        """Wrap a core command for :meth:`Simulator.invoke`."""

        def run(now_ms: int) -> Step:
            assert self.core is not None
            return self._step(command(self.core, now_ms))

        return run

    def _step(self, output: Output) -> Step:
        messages = [Envelope(p.address, p.data) for p in output.packets]
        messages.extend(Envelope(s.address, s.data, reliable=True) for s in output.streams)
        trace: list[str] = []
        for event in output.events:
            if self._on_event is not None:
                self._on_event(self.address, event)
            if self._trace_events:
                member = event.member
                trace.append(
                    f"{self.address} {event.kind.value} {member.node_id} {member.incarnation}"
                )
        return Step(messages, output.next_deadline_ms, trace)


def sim_address(index: int) -> str:
    return f"n{index:04d}"


def build_cluster(
    simulator: Simulator,
    config: MembershipConfig,
    count: int,
    *,
    cluster_key: bytes = b"sim-cluster",
    converged: bool = False,
    seed_count: int = 1,
    start_spread_ms: int = 0,
    on_event: EventListener | None = None,
    trace_events: bool = True,
) -> list[MembershipSimNode]:
    """Add ``count`` membership nodes named ``n0000``, ``n0001``, ...

    ``converged``: every node starts knowing every other as alive (a cluster that
    has already formed; cheap for large n). Otherwise nodes join through the first
    ``seed_count`` nodes, starting at random times within ``start_spread_ms``."""
    addresses = [sim_address(index) for index in range(count)]
    locals_ = [
        LocalMember(NodeId(address), address, f"{address}:9000", 1.0, f"zone-{index % 3}")
        for index, address in enumerate(addresses)
    ]
    known: tuple[Member, ...] = ()
    if converged:
        known = tuple(
            Member(
                local.node_id,
                local.gossip_address,
                local.grpc_address,
                local.weight,
                local.zone,
                0,
                MemberState.ALIVE,
                (),
            )
            for local in locals_
        )
    nodes: list[MembershipSimNode] = []
    seeds = addresses[:seed_count]
    for local in locals_:
        node = MembershipSimNode(
            config,
            local,
            cluster_key,
            simulator.node_rng(local.gossip_address),
            seeds=() if converged else seeds,
            known_members=known,
            on_event=on_event,
            trace_events=trace_events,
        )
        start_at_ms = simulator.now_ms
        if start_spread_ms > 0:
            start_at_ms += simulator.node_rng(local.gossip_address + "/start").randrange(
                start_spread_ms
            )
        simulator.add_node(node, start_at_ms=start_at_ms)
        nodes.append(node)
    return nodes


def schedule_pauses(
    simulator: Simulator,
    nodes: Sequence[MembershipSimNode],
    rng: random.Random,
    *,
    until_ms: int,
    every_ms: int,
    pause_min_ms: int,
    pause_max_ms: int,
) -> None:
    """Every ``every_ms`` (from a random offset), pause one random node for a random
    ``[pause_min_ms, pause_max_ms]`` (as by SIGSTOP/SIGCONT), until ``until_ms``."""
    start_ms = rng.randrange(every_ms)
    for pause_at_ms in range(start_ms, until_ms, every_ms):
        address = nodes[rng.randrange(len(nodes))].address
        resume_at_ms = pause_at_ms + rng.randint(pause_min_ms, pause_max_ms)
        simulator.at(pause_at_ms, functools.partial(simulator.pause, address))
        simulator.at(resume_at_ms, functools.partial(simulator.resume, address))


def view_states(node: MembershipSimNode) -> dict[NodeId, MemberState]:
    """Node id → state in this node's current view (empty if crashed)."""
    if node.core is None:
        return {}
    return {member.node_id: member.state for member in node.core.view()}


def converged(live: Sequence[MembershipSimNode]) -> bool:
    """Every live node sees every live node alive and nobody else alive/suspect."""
    live_ids = {node.node_id for node in live}
    for node in live:
        states = view_states(node)
        for node_id in live_ids:
            if states.get(node_id) is not MemberState.ALIVE:
                return False
        for node_id, state in states.items():
            if node_id not in live_ids and not state.is_gone:
                return False
    return True
