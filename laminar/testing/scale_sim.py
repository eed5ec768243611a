"""Thousands of partition groups on a few simulated nodes (issue 17).

The replica simulator (:mod:`laminar.testing.replica_sim`) checks safety with a
handful of groups; this one checks what only shows at scale: a node failure that
takes the leader from a thousand groups at once, a node that stops and comes
back, a node too busy for its timers. Each :class:`ScaleSimNode` hosts thousands
of real :class:`~laminar.replica.core.ReplicaCore` objects through the production
:class:`~laminar.server.driver.ReplicaDriver`, as
:class:`~laminar.server.host.ReplicaHost` does: its wake-up heap and tick pass,
its flush rounds (one coalesced :class:`PeerBundle` per peer per round), its
keepalives and node-level liveness (frames heard per peer, the tick loop's lag as
slowness, membership for ``peer_alive``), its founding reservations. Around it:

* founding replicas created in chunks of :data:`~laminar.server.host.FOUNDING_CHUNK`
  whose logs are written on a (simulated) thread pool; a chained creation waits
  for the one before it, as ``Node._chain_replica_change`` does;
* membership like SWIM (:class:`ScaleCluster` is the oracle): a crashed or paused
  node is declared dead after ``detect_ms``, which hints every replica it led and
  clears ``peer_alive``; after ``move_grace_ms`` placement (the real rendezvous
  function) drops it from the targets, and leaders reconfigure away from it.

A CPU model makes overload real. Everything a node does runs on its one event
loop and costs simulated CPU time (:class:`CpuModel`, multiplied by the node's
``cpu_factor`` to model a CPU hog). The loop works like asyncio's: an iteration
takes the due tick timer, the queued local commands and, from each peer, what one
read would return, and runs them one callback after the other; whatever arrives
meanwhile waits for the next iteration. A callback's messages leave when it ends
(sim time), so a burst makes messages wait and timers run late, and the tick loop
measures that lateness as the host's does. Disk syncs cost nothing (the host
runs them on a thread pool).

A :class:`ScaleClient` writes ``acks=all`` to random groups, routed by leader
hints and retried on ``NOT_LEADER``, ``UNAVAILABLE`` and timeouts, and probes
every group after a fault ("writable again" = a write to it is acknowledged).
:class:`~laminar.testing.replica_sim.History` checks safety as the run goes,
and :meth:`ScaleCluster.final_checks` that no acknowledged write was lost.

:func:`run_scenario` runs one of :data:`SCENARIOS` (``create``, ``crash``,
``pause``, ``overload``) for a seed and returns its figures; the same seed gives
the same run (``trace_hash``).
"""

from __future__ import annotations

import heapq
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from laminar.errors import LaminarError, UnknownTopicOrPartitionError
from laminar.placement import PlacementMember, partition_key, replicas
from laminar.records import encode_batch, parse_header
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore
from laminar.replica.messages import (
    ConfigChanged,
    ProduceReply,
    ProduceStatus,
    Ready,
    RoleChanged,
    TimeoutNow,
)
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.segment.storage import LogStorage
from laminar.server.driver import (
    NO_WAKE_MS,
    DriverLiveness,
    HostConfig,
    HostOwner,
    PartitionKey,
    ReplicaDriver,
    Standalone,
)
from laminar.server.host import FOUNDING_CHUNK
from laminar.testing.replica_sim import (
    History,
    ProduceRequest,
    ProduceResult,
    SimDisk,
    SimLog,
    SimReplica,
    memory_driver,
)
from laminar.testing.sim import Envelope, LinkConfig, Simulator, Step

TOPIC = "scale"
SCENARIOS = ("create", "crash", "pause", "overload")

_NEVER_MS = -(2**62)
_NO_WAKE = 2**62
_KEEPALIVE = PeerBundle((), ())
_LOCAL_COST_US = 0.2  # visiting one replica in a scan over all of them (a hint, a replan)

Callback = Callable[[int], float]
"""One piece of loop work: run at ``now_ms``, return its CPU cost in µs (at factor 1)."""


# ---------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class CpuModel:
    """What a node's event loop spends on each piece of work, in simulated µs.

    Measured on the 2-core development machine: a follower's heartbeat (``step``,
    ``ready``, ``advance``, coalescing) takes ~5 µs of core time, a leader's
    heartbeat tick with two followers ~15 µs, a ``propose`` ~17 µs; the wire
    decodes an append in 6.4 µs (design notes). Client requests come through gRPC,
    which costs far more per call than the peer transport.
    """

    callback_us: float = 20.0
    """Fixed cost of one loop callback (a socket read, the tick loop, a command)."""
    heartbeat_us: float = 5.0
    """One received heartbeat or heartbeat answer (decode and ``step``)."""
    message_us: float = 20.0
    """One other received peer message (appends, votes, answers)."""
    request_us: float = 100.0
    """One client produce request (gRPC, ``propose``)."""
    tick_us: float = 8.0
    """One core's ``tick``."""
    input_us: float = 3.0
    """A local input to one core (a hint, a target)."""
    ready_us: float = 3.0
    """Taking, carrying out and advancing one ``Ready``."""
    send_us: float = 1.5
    """Encoding one outbound message."""
    create_us: float = 150.0
    """Opening one replica's core (its log is written on the thread pool)."""
    read_items_max: int = 2_000
    """Messages one read of a peer's connection returns at most (whole bundles, at
    least one): a loop iteration takes that much from each peer."""


@dataclass
class ScaleOptions:
    groups: int = 3_000
    nodes: int = 3
    replication: int = 3
    config: ReplicaConfig = field(default_factory=ReplicaConfig.local)
    cpu: CpuModel = field(default_factory=CpuModel)
    node_liveness: bool = True
    """False: cores get a liveness without node-level signals (slowness always 1,
    no frames heard, no keepalives sent); membership still flips ``peer_alive``."""
    detect_ms: int = 1_500
    """Membership declares a stopped (crashed, paused) node dead after this long."""
    move_grace_ms: int = 10_000
    """A dead node keeps its place in placement this long (``replica_move_grace_ms``)."""
    founding_chunk_ms: int = 30
    """Thread-pool time to write one chunk of founding logs (one filesystem sync)."""
    creation_skew_ms: int = 30
    """Nodes learn of a new topic up to this far apart (metadata replication)."""
    link: LinkConfig = field(default_factory=lambda: LinkConfig(0.0, 1, 2))
    write_rate: float = 200.0
    """Background ``acks=all`` writes per second, to random groups."""
    request_timeout_ms: int = 500
    """The client retries elsewhere when a request has no answer after this long."""
    warmup_ms: int = 2_000
    pause_ms: int = 4_000
    hog_factor: float = 8.0
    hog_ms: int = 6_000
    hog_all: bool = True
    """The CPU hog slows every node (else only one)."""
    burst_share: float = 1 / 3
    """Overload: this share of the groups is created during the overload."""
    quiet_ms: int = 5_000
    """Steady state: no election for this long."""
    bound_ms: int = 30_000
    """Every wait for a condition gives up after this much simulated time."""
    rejoin: bool = False
    """Crash: restart the node after the reconfiguration, wait until it is back."""


# ---------------------------------------------------------------------- wire payloads


@dataclass(frozen=True, slots=True)
class ClientRequests:
    """Produce requests a client sends to one node in one step (one connection)."""

    requests: tuple[ProduceRequest, ...]


@dataclass(frozen=True, slots=True)
class ClientReplies:
    results: tuple[ProduceResult, ...]


# ---------------------------------------------------------------------- metrics


@dataclass(frozen=True, slots=True)
class Campaign:
    time_ms: int
    group: int
    node: str
    term: int
    transfer: bool
    """Handed leadership (``TimeoutNow``, a preferred-leader move), not a failure."""


class ScaleMetrics:
    """What the nodes report as the run goes (elections, replication, lag)."""

    def __init__(self) -> None:
        self.campaigns: list[Campaign] = []
        self.pre_votes: list[tuple[int, int]] = []  # (time, group)
        self.leaders: list[tuple[int, int, str, int]] = []  # (time, group, node, term)
        self.replicated: dict[tuple[int, str], int] = {}  # (group, node) -> first hw >= 1
        self.max_lag_ms: dict[str, int] = {}  # per node: the tick loop's worst lag
        self.max_slowness: dict[str, float] = {}
        self.max_inbox = 0

    def reset_load(self) -> None:
        self.max_lag_ms.clear()
        self.max_slowness.clear()
        self.max_inbox = 0

    def note_loop(self, node: str, lag_ms: int, slowness: float) -> None:
        if lag_ms > self.max_lag_ms.get(node, 0):
            self.max_lag_ms[node] = lag_ms
        if slowness >= self.max_slowness.get(node, 1.0):
            self.max_slowness[node] = slowness

    def elections_since(self, since_ms: int, *, transfers: bool = False) -> list[Campaign]:
        return [c for c in self.campaigns if c.time_ms >= since_ms and c.transfer == transfers]

    def last_campaign_ms(self) -> int:
        return self.campaigns[-1].time_ms if self.campaigns else _NEVER_MS


# ---------------------------------------------------------------------- placement


class Placement:
    """Targets of every group for a set of live nodes (rendezvous, as the node's
    placement computes them), cached per set."""

    def __init__(self, replication: int) -> None:
        self._replication = replication
        self._tables: dict[tuple[tuple[str, ...], int], list[tuple[NodeId, ...]]] = {}

    def targets(self, live: Sequence[str], groups: int) -> list[tuple[NodeId, ...]]:
        key = (tuple(sorted(live)), groups)
        table = self._tables.get(key)
        if table is None:
            members = [PlacementMember(node) for node in key[0]]
            table = [
                tuple(
                    NodeId(n) for n in replicas(partition_key(TOPIC, g), members, self._replication)
                )
                for g in range(groups)
            ]
            self._tables[key] = table
        return table


# ---------------------------------------------------------------------- the node


class _GroupSignalsOnly(DriverLiveness):
    """The comparison baseline (``ScaleOptions.node_liveness`` False): the cores get
    no node-level signal (nothing heard, never slow, no keepalives sent); membership
    still flips ``peer_alive``. The loop's lag is measured all the same."""

    def __init__(self, driver: ReplicaDriver[SimReplica], owner: HostOwner) -> None:
        super().__init__(driver, owner)
        self.keepalive_ms = NO_WAKE_MS

    def peer_heard_ms(self, peer: NodeId) -> int:
        return _NEVER_MS

    def slowness(self) -> float:
        return 1.0


class _ScaleMembership(Standalone):
    """What the node around a scale node's driver says: membership (the cluster's
    oracle), placement's targets, and the removals it acts on."""

    def __init__(self, node: ScaleSimNode, peers: Sequence[str]) -> None:
        self._node = node
        self.alive: dict[str, bool] = {peer: True for peer in peers}
        self.dead_since: dict[str, int] = {}  # membership declared these dead (and when)

    def accept_replica(self, key: PartitionKey) -> bool:
        return key[1] in self._node.targets  # else not ours (placement's say)

    def replica_removed(self, key: PartitionKey) -> None:
        self._node._on_removed(key[1])

    def peer_alive(self, node_id: str) -> bool:
        return self.alive.get(node_id, False)

    def peer_dead(self, node_id: str) -> bool:
        return node_id in self.dead_since


class ScaleSimNode:
    """One node's replicas, event loop and CPU, as a simulator node: the production
    :class:`~laminar.server.driver.ReplicaDriver` decides, this shell runs its
    flush rounds and tick pass on a simulated event loop that charges CPU time."""

    def __init__(self, node_id: str, cluster: ScaleCluster, rng: random.Random) -> None:
        self.node_id = NodeId(node_id)
        self._cluster = cluster
        self._options = cluster.options
        self._cpu = cluster.options.cpu
        self._config = cluster.options.config
        self._rng = rng
        self._history = cluster.history
        self._metrics = cluster.metrics
        self.cpu_factor = 1.0
        self.busy_us = 0.0  # CPU time spent so far (for utilisation figures)
        self.incarnation = 0
        self._disk = SimDisk()
        self.storages: dict[int, SimLog] = {}
        self.targets: dict[int, tuple[NodeId, ...]] = {}  # placement's view (durable-ish)
        self.config_offsets: dict[int, int] = {}  # group -> offset of its latest config entry
        self._reopened: dict[int, int] = {}  # group -> times its replica was closed
        self._founding_chain: deque[list[tuple[int, GroupConfig]]] = deque()
        self._reset_volatile()

    def _reset_volatile(self) -> None:
        peers = [peer for peer in self._cluster.node_ids if peer != self.node_id]
        self.membership = _ScaleMembership(self, peers)
        self._now_ms = 0
        self.driver: ReplicaDriver[SimReplica] = memory_driver(
            self.node_id,
            self._config,
            owner=self.membership,
            shell=self,
            clock=self._clock,
            rng=self._rng,
            host_config=HostConfig(disk_free_bytes_min=0, disk_free_percent_min=0.0),
            log_factory=self._open_log,
            liveness=DriverLiveness if self._options.node_liveness else _GroupSignalsOnly,
        )
        self._inbox: dict[str, deque[object]] = {}
        self._inbox_items = 0
        self._controls: deque[Callback] = deque()
        self._iteration: deque[Callback] = deque()
        self._delayed: list[tuple[int, int, Callback]] = []  # (due, sequence, callback)
        self._delayed_sequence = 0
        self._busy_us = 0.0
        self._held: list[Envelope] = []
        self._release_ms = 0
        self._timer_at = _NO_WAKE
        self._timer_nominal = _NO_WAKE
        self._timer_ran = False
        self._replies: dict[str, list[ProduceResult]] = {}
        self._founding_busy = False
        self._timeout_now: set[int] = set()
        self._closed_logs: set[int] = set()  # closed by the driver: a reopen keeps them
        self._trace: list[str] = []
        self._out: list[Envelope] = []
        self._readies = 0
        self._sent = 0

    @property
    def address(self) -> str:
        return self.node_id

    @property
    def cores(self) -> dict[int, ReplicaCore]:
        """The open replicas' cores, by group (a fresh dict: for tests and figures)."""
        return {key[1]: replica.core for key, replica in self.driver.replicas.items()}

    def core(self, group: int) -> ReplicaCore | None:
        replica = self.driver.replicas.get((TOPIC, group))
        return None if replica is None else replica.core

    def _clock(self) -> int:
        return self._now_ms

    def _open_log(self, directory: str, config: LogConfig) -> LogStorage:
        group = int(directory.rsplit("/", 1)[1])
        log = self.storages.get(group)
        if log is None:
            log = SimLog(self._disk)
        elif group in self._closed_logs:  # reopened: the same log, everything kept
            log = log.reopened()
        self._closed_logs.discard(group)
        self.storages[group] = log
        return log

    # ---------------------------------------------------------------- SimNode

    def start(self, now_ms: int) -> Step:
        self._start_timer(now_ms)
        return self._run(now_ms)

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        self._inbox.setdefault(source, deque()).append(payload)
        self._inbox_items += 1
        self._metrics.max_inbox = max(self._metrics.max_inbox, self._inbox_items)
        return self._run(now_ms)

    def tick(self, now_ms: int) -> Step:
        return self._run(now_ms)

    def crash(self) -> None:
        self.storages = {group: log.crash() for group, log in self.storages.items()}
        self._founding_chain.clear()
        self._reset_volatile()

    def restart(self, now_ms: int) -> Step:
        self.incarnation += 1
        self._now_ms = now_ms
        self._start_timer(now_ms)
        driver = self.driver
        for group, target in sorted(self.targets.items()):
            driver.set_target((TOPIC, group), tuple(target))
        for group in sorted(self.storages):
            driver.open_replica((TOPIC, group), None)
        return self._run(now_ms)

    # ---------------------------------------------------------------- commands

    def command(self, action: Callback, now_ms: int) -> Step:
        """A local command (membership, placement, a topic creation) for the loop."""
        self._controls.append(action)
        return self._run(now_ms)

    def found(self, groups: list[tuple[int, GroupConfig]], now_ms: int) -> Step:
        """A new topic's founding replicas on this node (``CatalogueApplier.apply_change``):
        placement learns of them at once, their creation is chained after any
        creation still running (``_chain_replica_change``)."""

        def learn(now: int) -> float:
            self._replan(now)
            self._founding_chain.append(groups)
            self._next_founding(now)
            return _LOCAL_COST_US * len(groups)

        return self.command(learn, now_ms)

    def member_event(self, peer: str, alive: bool, now_ms: int) -> Step:
        """Membership declared ``peer`` dead or alive again (``members.react_to_event``)."""
        return self.command(partial(self._on_member_event, peer, alive), now_ms)

    # ---------------------------------------------------------------- the loop

    def _start_timer(self, now_ms: int) -> None:
        self._timer_at = self._timer_nominal = now_ms + self.driver.tick_interval_ms

    def _run(self, now_ms: int) -> Step:
        """Run the loop's callbacks that the CPU gets to within this millisecond."""
        out: list[Envelope] = []
        if self._held and now_ms >= self._release_ms:
            out.extend(self._held)
            self._held = []
        if not self._held:
            cursor = max(self._busy_us, now_ms * 1000.0)
            limit = (now_ms + 1) * 1000.0
            while cursor < limit:
                callback = self._next_callback(now_ms)
                if callback is None:
                    break
                self._now_ms = now_ms
                cost = self._cpu.callback_us + callback(now_ms)
                if self._timer_ran:  # the tick loop sleeps from the end of its pass
                    self._timer_ran = False
                    ended_ms = int((cursor + cost * self.cpu_factor) // 1000)
                    until = self.driver.sleep_until(ended_ms)
                    self._timer_at = self._timer_nominal = until
                    self.driver.sleep_until_ms = until
                cost += self._flush()
                cursor += cost * self.cpu_factor
                self.busy_us += cost * self.cpu_factor
                messages, self._out = self._out, []
                release = int(cursor // 1000)
                if release <= now_ms:
                    out.extend(messages)
                else:
                    self._held, self._release_ms = messages, release
            self._busy_us = cursor
        trace, self._trace = self._trace, []
        return Step(out, self._next_wake(now_ms), trace)

    def _next_wake(self, now_ms: int) -> int:
        if self._held:
            return self._release_ms
        if self._iteration or self._controls or self._inbox_items:
            return max(now_ms + 1, int(self._busy_us // 1000))
        wake = self._timer_at
        if self._delayed:
            wake = min(wake, self._delayed[0][0])
        return max(wake, int(self._busy_us // 1000))

    def _next_callback(self, now_ms: int) -> Callback | None:
        if not self._iteration:
            self._begin_iteration(now_ms)
        return self._iteration.popleft() if self._iteration else None

    def _begin_iteration(self, now_ms: int) -> None:
        """What one pass of the event loop runs: due timers, local commands, and
        one read from each peer's connection."""
        iteration = self._iteration
        if self._timer_at <= now_ms:
            self._timer_at = _NO_WAKE
            iteration.append(self._on_timer)
        delayed = self._delayed
        while delayed and delayed[0][0] <= now_ms:
            iteration.append(heapq.heappop(delayed)[2])
        iteration.extend(self._controls)
        self._controls.clear()
        for source in list(self._inbox):
            queue = self._inbox[source]
            taken: list[object] = []
            items = 0
            while queue and (not taken or items < self._cpu.read_items_max):
                payload = queue.popleft()
                taken.append(payload)
                items += len(payload) if isinstance(payload, PeerBundle) else 1
            self._inbox_items -= len(taken)
            if not queue:
                del self._inbox[source]
            iteration.append(partial(self._on_read, source, taken))

    def _later(self, due_ms: int, callback: Callback) -> None:
        self._delayed_sequence += 1
        heapq.heappush(self._delayed, (due_ms, self._delayed_sequence, callback))

    # ---------------------------------------------------------------- callbacks

    def _on_timer(self, now_ms: int) -> float:
        """The host's tick loop: the driver's tick pass (lag measured when the pass
        runs on its timer, not woken early)."""
        self._timer_ran = True
        driver = self.driver
        driver.sleep_until_ms = NO_WAKE_MS
        lag = now_ms - self._timer_nominal if now_ms >= self._timer_nominal else None
        keepalives = driver.counters["keepalives_sent"]
        ticked = driver.tick(now_ms, lag)
        if lag is not None:
            self._metrics.note_loop(self.node_id, lag, driver.liveness.lag.slowness(now_ms))
        keepalives = driver.counters["keepalives_sent"] - keepalives
        return ticked * self._cpu.tick_us + keepalives * self._cpu.send_us

    def _on_read(self, source: str, payloads: list[object], now_ms: int) -> float:
        cost = 0.0
        for payload in payloads:
            if isinstance(payload, PeerBundle):
                cost += self._on_bundle(source, payload)
            elif isinstance(payload, ClientRequests):
                cost += self._on_requests(source, payload)
        return cost

    def _on_bundle(self, source: str, bundle: PeerBundle) -> float:
        for item, message in bundle.items():
            if isinstance(message, TimeoutNow):
                assert isinstance(item, tuple)
                self._timeout_now.add(item[1])
        opened = len(self.driver.replicas)
        self.driver.on_bundle(source, bundle)
        cost = max(0, len(self.driver.replicas) - opened) * self._cpu.create_us
        beats = len(bundle.heartbeats)
        return cost + beats * self._cpu.heartbeat_us + (len(bundle) - beats) * self._cpu.message_us

    def _on_requests(self, source: str, batch: ClientRequests) -> float:
        driver = self.driver
        for request in batch.requests:
            try:
                replica = driver.admit((TOPIC, request.partition), 1)
            except UnknownTopicOrPartitionError:
                reply = ProduceReply(request.request_id, ProduceStatus.NOT_LEADER)
                self._replies.setdefault(source, []).append(ProduceResult(request.partition, reply))
                continue
            except LaminarError as error:
                reply = ProduceReply(
                    request.request_id, ProduceStatus.UNAVAILABLE, detail=str(error)
                )
                self._replies.setdefault(source, []).append(ProduceResult(request.partition, reply))
                continue
            replica.calls[request.request_id] = source
            driver.propose(replica, request.request_id, request.batch, request.acks)
        return len(batch.requests) * self._cpu.request_us

    def _on_member_event(self, peer: str, alive: bool, now_ms: int) -> float:
        membership = self.membership
        membership.alive[peer] = alive
        cost = _LOCAL_COST_US * len(self.driver.replicas)
        if alive:
            if membership.dead_since.pop(peer, None) is not None:
                cost += self._peer_returned(peer)
            return cost + self._replan(now_ms)
        membership.dead_since.setdefault(peer, now_ms)
        led = sum(1 for replica in self.driver.replicas.values() if replica.core.led_by(peer))
        self.driver.hint_leader_dead(peer)
        # Placement keeps the dead node's replicas through the grace; replan then.
        self._later(now_ms + self._options.move_grace_ms + 50, self._replan)
        return cost + led * self._cpu.input_us

    def _peer_returned(self, peer: str) -> float:
        """Wake the quiesced leaders that may have quiesced without ``peer`` while it
        was dead (``ReplicaHost.peer_returned``)."""
        woken = sum(
            1
            for replica in self.driver.replicas.values()
            if replica.core.role is Role.LEADER and replica.core.quiesced
        )
        self.driver.peer_returned(peer)
        return woken * self._cpu.input_us

    def _replan(self, now_ms: int) -> float:
        """Every group's target from the members placement counts now (a dead one
        through its grace), set where it changed."""
        grace = self._options.move_grace_ms
        membership = self.membership
        live = [
            n
            for n in self._cluster.node_ids
            if n == self.node_id
            or membership.alive.get(n, False)
            or now_ms - membership.dead_since.get(n, now_ms) < grace
        ]
        table = self._cluster.placement.targets(live, self._cluster.group_count)
        cost = _LOCAL_COST_US * len(table)
        replicas = self.driver.replicas
        for group, target in enumerate(table):
            key = (TOPIC, group)
            if self.node_id not in target and key not in replicas:
                continue
            if self.targets.get(group) == target:
                continue
            self.targets[group] = target
            self.driver.set_target(key, tuple(target))
            if key in replicas:
                cost += self._cpu.input_us
        return cost

    # ---------------------------------------------------------------- founding

    def _next_founding(self, now_ms: int) -> None:
        """Start the next chained creation (``ReplicaHost.open_founding``) unless one runs."""
        if self._founding_busy or not self._founding_chain:
            return
        groups = self._founding_chain.popleft()
        driver = self.driver
        fresh = [
            (g, c)
            for g, c in groups
            if (TOPIC, g) not in driver.replicas and not driver.creating((TOPIC, g))
        ]
        self._founding_busy = True
        driver.reserve_founding((TOPIC, g) for g, _ in fresh)
        self._later(now_ms + self._options.founding_chunk_ms, partial(self._open_chunk, fresh, 0))

    def _open_chunk(self, fresh: list[tuple[int, GroupConfig]], start: int, now_ms: int) -> float:
        """A chunk's logs are written (on the pool): open their cores on the loop."""
        chunk = fresh[start : start + FOUNDING_CHUNK]
        driver = self.driver
        for group, config in chunk:
            key = (TOPIC, group)
            driver.founding_done([key])
            if key not in driver.replicas:
                driver.open_replica(key, config)
        following = start + FOUNDING_CHUNK
        if following < len(fresh):
            self._later(
                now_ms + self._options.founding_chunk_ms,
                partial(self._open_chunk, fresh, following),
            )
        else:
            self._founding_busy = False
            self._next_founding(now_ms)
        return len(chunk) * self._cpu.create_us

    def _on_removed(self, group: int) -> None:
        """The group removed this replica (``Node._on_removed``): open it again on the
        same log when placement wants it here (it was removed while away and is
        back), else delete it."""
        if self.node_id in self.targets.get(group, ()):
            self.driver.reopen_replica((TOPIC, group))
        else:
            self.driver.delete_replica((TOPIC, group))
            del self.storages[group]

    # ---------------------------------------------------------------- the driver's shell

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        self._sent += max(1, len(bundle))  # a keepalive costs a send too
        self._out.append(Envelope(peer, bundle))

    def flush_wanted(self) -> None:
        pass  # every callback ends with the rounds it made due (_flush)

    def wake_early(self) -> None:
        if self.driver.sleep_until_ms == NO_WAKE_MS:
            return  # in its pass, or woken already: nothing sleeps
        self._timer_at = self._now_ms
        self.driver.sleep_until_ms = NO_WAKE_MS

    def carried_out(self, replica: SimReplica, ready: Ready, leader_found: bool) -> None:
        group = replica.key[1]
        self._readies += 1
        for reply in ready.replies:
            client = replica.calls.pop(reply.request_id, None)
            if client is not None:
                self._replies.setdefault(client, []).append(ProduceResult(group, reply))
        self._observe(group, replica, ready)
        self._timeout_now.discard(group)

    def replica_closed(self, replica: SimReplica, error: Exception | None) -> None:
        group = replica.key[1]
        self._closed_logs.add(group)
        self._reopened[group] = self._reopened.get(group, 0) + 1

    # ---------------------------------------------------------------- outputs

    def _flush(self) -> float:
        """The flush rounds the callback made due (one bundle per peer per round);
        disk syncs cost nothing (the host runs them on a thread pool)."""
        driver = self.driver
        self._readies = 0
        self._sent = 0
        while driver.dirty:
            round_ = driver.begin_round()
            if round_ is None:
                continue
            results: list[object] = []
            for replica in round_.syncs:
                replica.log.sync()
                results.append(None)
            driver.complete(round_, results, 0.0 if round_.syncs else None)
        for client, results_ in self._replies.items():
            self._out.append(Envelope(client, ClientReplies(tuple(results_))))
        self._replies.clear()
        return self._readies * self._cpu.ready_us + self._sent * self._cpu.send_us

    def _observe(self, group: int, replica: SimReplica, ready: Ready) -> None:
        history, metrics, node = self._history, self._metrics, str(self.node_id)
        now_ms = self._now_ms
        for event in ready.events:
            if isinstance(event, ConfigChanged):
                self.config_offsets[group] = event.offset
            if not isinstance(event, RoleChanged):
                continue
            role = event.role
            if role is Role.LEADER:
                self._trace.append(f"{node} g{group} leader t{event.term}")
                history.became_leader(group, event.term, node, now_ms)
                metrics.leaders.append((now_ms, group, node, event.term))
            elif role is Role.CANDIDATE:
                transfer = group in self._timeout_now
                metrics.campaigns.append(Campaign(now_ms, group, node, event.term, transfer))
            elif role is Role.PRE_CANDIDATE:
                metrics.pre_votes.append((now_ms, group))
        # A reopened core starts from its log's start again, like a restarted one.
        incarnation = self.incarnation * 1_000 + self._reopened.get(group, 0)
        history.watermark(node, incarnation, group, ready.high_watermark)
        storage = replica.log
        committed_from = max(ready.committed_from, storage.start_offset)
        if ready.high_watermark > committed_from:
            data = storage.read(committed_from, 1 << 30, upper_offset=ready.high_watermark)
            history.check_committed(node, group, data)
        if ready.high_watermark >= 1:
            metrics.replicated.setdefault((group, node), now_ms)


# ---------------------------------------------------------------------- the client


@dataclass(slots=True)
class _Write:
    group: int
    producer: int
    sequence: int
    value: bytes
    batch: bytes
    started_ms: int
    probe: bool
    request_id: int = 0
    destination: str = ""
    retry_at_ms: int = 0


class ScaleClient:
    """Writes ``acks=all`` to the groups: a background rate to random groups, and
    probes (one write to each of many groups at once, timed).

    Each group has two idempotent producers, one for the background and one for
    probes, with at most one batch outstanding each; a retry resends the same batch.
    Requests go to the group's presumed leader, learned from ``NOT_LEADER`` hints; a
    request without an answer after ``request_timeout_ms`` goes to another node,
    and its node is avoided for a while.
    """

    _SUSPECT_MS = 2_000
    _STEP_MS = 10

    def __init__(self, cluster: ScaleCluster, rng: random.Random) -> None:
        self._cluster = cluster
        self._history = cluster.history
        self._rng = rng
        self._nodes = list(cluster.node_ids)
        self._timeout_ms = cluster.options.request_timeout_ms
        self.rate = 0.0
        self.guess: dict[int, str] = {}
        self._sequences: dict[int, int] = {}
        self.writes: dict[int, _Write] = {}  # producer -> its outstanding write
        self._attempts: dict[int, tuple[int, int]] = {}  # request id -> (producer, sequence)
        self._timers: list[tuple[int, int, int, int]] = []  # (time, seq, producer, request)
        self._timer_sequence = 0
        self._next_request = 0
        self._suspect: dict[str, int] = {}
        self._outgoing: dict[str, list[ProduceRequest]] = {}
        self._next_step_ms = 0
        self._credit = 0.0
        self.acked = 0
        self.probe_started_ms: int | None = None
        self.probe_acked: dict[int, int] = {}  # group -> ack time of its probe

    @property
    def address(self) -> str:
        return "client"

    @property
    def idle(self) -> bool:
        return not self.writes

    def add_groups(self, leaders: dict[int, str]) -> None:
        self.guess.update(leaders)

    # ---------------------------------------------------------------- SimNode

    def start(self, now_ms: int) -> Step:
        self._next_step_ms = now_ms + self._STEP_MS
        return Step((), self._wake())

    def crash(self) -> None:  # the client does not crash
        pass

    def restart(self, now_ms: int) -> Step:
        return self.start(now_ms)

    def tick(self, now_ms: int) -> Step:
        if now_ms >= self._next_step_ms:
            self._next_step_ms = now_ms + self._STEP_MS
            self._start_background(now_ms)
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            _, _, producer, request_id = heapq.heappop(timers)
            write = self.writes.get(producer)
            if write is None:
                continue
            if request_id == 0 and write.request_id == 0 and write.retry_at_ms <= now_ms:
                self._send(write, now_ms)
            elif request_id != 0 and write.request_id == request_id:
                self._timed_out(write, now_ms)
        return self._step()

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        if isinstance(payload, ClientReplies):
            for result in payload.results:
                self._on_reply(source, result.reply, now_ms)
        return self._step()

    def probe(self, groups: Sequence[int], now_ms: int) -> Step:
        """One write to each of ``groups`` now; :attr:`probe_acked` times them."""
        self.probe_started_ms = now_ms
        self.probe_acked.clear()
        for group in groups:
            self._begin(group, 2 * group + 2, now_ms, probe=True)
        return self._step()

    # ---------------------------------------------------------------- writes

    def _start_background(self, now_ms: int) -> None:
        if self.rate <= 0 or not self.guess:
            return
        self._credit += self.rate * self._STEP_MS / 1000
        groups = len(self.guess)
        while self._credit >= 1:
            self._credit -= 1
            group = self._rng.randrange(groups)
            if 2 * group + 1 not in self.writes:
                self._begin(group, 2 * group + 1, now_ms, probe=False)

    def _begin(self, group: int, producer: int, now_ms: int, *, probe: bool) -> None:
        if producer in self.writes:
            return
        sequence = self._sequences.get(producer, 0)
        value = f"g{group}/p{producer}/{sequence}".encode()
        batch = encode_batch([value], producer_id=producer, base_sequence=sequence)
        write = _Write(group, producer, sequence, value, batch, now_ms, probe)
        self.writes[producer] = write
        self._send(write, now_ms)

    def _send(self, write: _Write, now_ms: int) -> None:
        destination = self.guess.get(write.group) or self._rng.choice(self._nodes)
        self._next_request += 1
        request_id = self._next_request
        write.request_id = request_id
        write.destination = destination
        self._attempts[request_id] = (write.producer, write.sequence)
        self._push_timer(now_ms + self._timeout_ms, write.producer, request_id)
        request = ProduceRequest(write.group, request_id, write.batch, Acks.ALL)
        self._outgoing.setdefault(destination, []).append(request)

    def _retry(self, write: _Write, now_ms: int, delay_ms: int, destination: str) -> None:
        self.guess[write.group] = destination
        write.request_id = 0
        write.retry_at_ms = now_ms + delay_ms
        if delay_ms <= 0:
            self._send(write, now_ms)
        else:
            self._push_timer(write.retry_at_ms, write.producer, 0)

    def _push_timer(self, at_ms: int, producer: int, request_id: int) -> None:
        self._timer_sequence += 1
        heapq.heappush(self._timers, (at_ms, self._timer_sequence, producer, request_id))

    def _timed_out(self, write: _Write, now_ms: int) -> None:
        self._suspect[write.destination] = now_ms
        self._retry(write, now_ms, 0, self._other_node(write.destination, now_ms))

    def _other_node(self, avoid: str, now_ms: int) -> str:
        others = [n for n in self._nodes if n != avoid]
        trusted = [n for n in others if now_ms - self._suspect.get(n, _NEVER_MS) > self._SUSPECT_MS]
        return self._rng.choice(trusted or others)

    def _on_reply(self, source: str, reply: ProduceReply, now_ms: int) -> None:
        attempt = self._attempts.pop(reply.request_id, None)
        if attempt is None:
            return
        producer, sequence = attempt
        write = self.writes.get(producer)
        if write is None or write.sequence != sequence:
            return
        status = reply.status
        if status in (ProduceStatus.OK, ProduceStatus.DUPLICATE):
            self._acknowledged(write, source, reply.base_offset, now_ms)
            return
        if write.request_id != reply.request_id:
            return  # an older attempt's refusal: the current one is under way
        hint = reply.leader_hint
        if status is ProduceStatus.NOT_LEADER:
            suspected = hint is not None and (
                now_ms - self._suspect.get(hint, _NEVER_MS) <= self._SUSPECT_MS
            )
            if hint is not None and hint != source and not suspected:
                self._retry(write, now_ms, 0, hint)
            else:
                delay = self._rng.randint(20, 50)
                self._retry(write, now_ms, delay, self._other_node(source, now_ms))
        elif status is ProduceStatus.UNAVAILABLE:
            self._retry(write, now_ms, self._rng.randint(50, 100), source)
        else:
            self._history.violation(f"client: unexpected {status} {reply.detail}")
            del self.writes[producer]

    def _acknowledged(self, write: _Write, source: str, offset: int, now_ms: int) -> None:
        checksum = parse_header(write.batch).payload_checksum
        self._history.ack(write.group, write.value, offset, checksum)
        del self.writes[write.producer]
        self._sequences[write.producer] = write.sequence + 1
        self.guess[write.group] = source
        self.acked += 1
        if write.probe:
            self.probe_acked.setdefault(write.group, now_ms)

    def _step(self) -> Step:
        messages = [
            Envelope(destination, ClientRequests(tuple(requests)))
            for destination, requests in self._outgoing.items()
        ]
        self._outgoing.clear()
        return Step(messages, self._wake())

    def _wake(self) -> int | None:
        wake = self._next_step_ms if self.rate > 0 else None
        if self._timers:
            wake = self._timers[0][0] if wake is None else min(wake, self._timers[0][0])
        return wake


# ---------------------------------------------------------------------- the cluster


class ScaleCluster:
    """Nodes, the client, the membership oracle and the checks."""

    _MEMBERSHIP_PERIOD_MS = 100

    def __init__(self, seed: int, options: ScaleOptions) -> None:
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.sim = Simulator(seed, default_link=options.link, paused_queue_max=1 << 20)
        self.history = History()
        self.metrics = ScaleMetrics()
        self.placement = Placement(options.replication)
        self.node_ids = [f"n{index}" for index in range(options.nodes)]
        self.group_count = 0
        self.nodes: dict[str, ScaleSimNode] = {}
        for node_id in self.node_ids:
            node = ScaleSimNode(node_id, self, self.sim.node_rng(node_id))
            self.nodes[node_id] = node
            self.sim.add_node(node)
        self.client = ScaleClient(self, self.sim.node_rng("client"))
        self.sim.add_node(self.client)
        self._down_since: dict[tuple[str, str], int] = {}
        self._declared_dead: set[tuple[str, str]] = set()
        self.sim.at(self._MEMBERSHIP_PERIOD_MS, self._check_membership)

    # ---------------------------------------------------------------- actions

    def create_groups(self, count: int) -> range:
        """A topic grows by ``count`` groups now: every founding node learns of them
        (with some skew) and creates its replicas."""
        first = self.group_count
        self.group_count += count
        created = range(first, first + count)
        table = self.placement.targets(self.node_ids, self.group_count)
        configs = {g: GroupConfig(table[g]) for g in created}
        self.client.add_groups({g: str(configs[g].voters[0]) for g in created})
        now = self.sim.now_ms
        for node_id, node in self.nodes.items():
            mine = [(g, c) for g, c in configs.items() if node_id in c.voters]
            skew = self.rng.randint(0, self.options.creation_skew_ms)
            self.sim.at(now + skew, partial(self.sim.invoke, node_id, partial(node.found, mine)))
        return created

    def set_cpu_factor(self, node_ids: Sequence[str], factor: float) -> None:
        for node_id in node_ids:
            self.nodes[node_id].cpu_factor = factor
        self.sim.record(f"cpu x{factor} on {list(node_ids)}")

    def probe(self, groups: Sequence[int]) -> None:
        self.sim.invoke(self.client.address, partial(self.client.probe, groups))

    def set_write_rate(self, rate: float) -> None:
        self.client.rate = rate
        self.sim.invoke(self.client.address, self.client.tick)

    def _check_membership(self) -> None:
        """SWIM, as an oracle: an up node declares another dead once it has been
        stopped (crashed or paused) for ``detect_ms``, and alive when it runs again."""
        sim = self.sim
        now = sim.now_ms
        for observer in self.node_ids:
            if not sim.is_up(observer):
                continue
            for peer in self.node_ids:
                if peer == observer:
                    continue
                pair = (observer, peer)
                if sim.is_up(peer):
                    self._down_since.pop(pair, None)
                    if pair in self._declared_dead:
                        self._declared_dead.discard(pair)
                        self._tell(observer, peer, alive=True)
                    continue
                since = self._down_since.setdefault(pair, now)
                if pair not in self._declared_dead and now - since >= self.options.detect_ms:
                    self._declared_dead.add(pair)
                    self._tell(observer, peer, alive=False)
        sim.at(now + self._MEMBERSHIP_PERIOD_MS, self._check_membership)

    def _tell(self, observer: str, peer: str, *, alive: bool) -> None:
        self.sim.record(f"{observer} sees {peer} {'alive' if alive else 'dead'}")
        node = self.nodes[observer]
        self.sim.invoke(observer, partial(node.member_event, peer, alive))

    # ---------------------------------------------------------------- waiting

    def wait(self, condition: Callable[[], bool], bound_ms: int, poll_ms: int = 100) -> int | None:
        """Run until ``condition`` holds (checked every ``poll_ms``); the simulated
        time it took, or None after ``bound_ms``."""
        start = self.sim.now_ms
        while True:
            if condition():
                return self.sim.now_ms - start
            if self.sim.now_ms - start >= bound_ms:
                return None
            self.sim.run_for(poll_ms)

    def running(self) -> list[ScaleSimNode]:
        return [node for node_id, node in self.nodes.items() if self.sim.is_up(node_id)]

    def leader_of(self, group: int) -> ReplicaCore | None:
        """The leader of the highest term among the running replicas of ``group``."""
        best: ReplicaCore | None = None
        for node in self.running():
            core = node.core(group)
            if (
                core is not None
                and core.role is Role.LEADER
                and (best is None or core.term > best.term)
            ):
                best = core
        return best

    def leaderless(self) -> list[int]:
        """Groups without a leader at the highest term of their running replicas."""
        running = self.running()
        missing = []
        for group in range(self.group_count):
            term, led = -1, False
            for node in running:
                core = node.core(group)
                if core is None:
                    continue
                if core.term > term:
                    term, led = core.term, core.role is Role.LEADER
                elif core.term == term and core.role is Role.LEADER:
                    led = True
            if not led:
                missing.append(group)
        return missing

    def fully_replicated(self, groups: range) -> bool:
        """Every founding replica of every group in ``groups`` knows a commit."""
        replicated = self.metrics.replicated
        table = self.placement.targets(self.node_ids, self.group_count)
        return all((g, str(n)) in replicated for g in groups for n in table[g])

    def settle_time(self, groups: range) -> int:
        """When the last founding replica of ``groups`` learned its first commit."""
        replicated = self.metrics.replicated
        table = self.placement.targets(self.node_ids, self.group_count)
        return max(replicated[(g, str(n))] for g in groups for n in table[g])

    def quiesced(self) -> bool:
        return all(
            replica.core.quiesced
            for node in self.running()
            for replica in node.driver.replicas.values()
        )

    def reconfigured(self, voters: Sequence[str]) -> bool:
        """Every group's voters are ``voters``, no learners, the change committed."""
        expected = set(voters)
        for group in range(self.group_count):
            leader = self.leader_of(group)
            if leader is None:
                return False
            config = leader.group_config
            offset = self.nodes[leader.node_id].config_offsets.get(group, -1)
            if (
                config is None
                or set(config.voters) != expected
                or config.learners
                or offset >= leader.high_watermark
            ):
                return False
        return True

    def steady(self, quiet_ms: int) -> bool:
        """No election for ``quiet_ms``, and every group led."""
        if self.sim.now_ms - self.metrics.last_campaign_ms() < quiet_ms:
            return False
        return not self.leaderless()

    def voters_caught_up(self) -> bool:
        for group in range(self.group_count):
            leader = self.leader_of(group)
            if leader is None or leader.group_config is None:
                return False
            for voter in leader.group_config.voters:
                if not self.sim.is_up(voter):
                    continue
                core = self.nodes[voter].core(group)
                if core is None or core.high_watermark < leader.high_watermark:
                    return False
        return True

    def final_checks(self) -> None:
        """Every acknowledged value sits once, at its offset, in its leader's log."""
        history = self.history
        for group in range(self.group_count):
            leader = self.leader_of(group)
            if leader is None:
                history.violation(f"g{group}: no leader at the end")
                continue
            data = leader.read(leader.start_offset, 1 << 30)
            # No retention here: start_offset stays 0, so nothing acknowledged is excused.
            history.check_acknowledged(f"g{group}", group, data, leader.start_offset)


# ---------------------------------------------------------------------- scenarios


@dataclass
class ScaleResult:
    scenario: str
    seed: int
    groups: int
    node_liveness: bool
    violations: list[str] = field(default_factory=list)
    trace_hash: str = ""
    wall_s: float = 0.0
    simulated_ms: int = 0
    settle_ms: int | None = None
    """create: from the creation until every replica of every group knows a commit;
    overload: the same for the groups created during the overload."""
    elections: int = 0
    """Campaigns (each raises a term) since the fault, transfers excluded."""
    transfers: int = 0
    """Leadership hand-overs (preferred leader) since the fault."""
    pre_votes: int = 0
    affected: int = 0
    """Groups the fault took the leader from."""
    writable_ms: int | None = None
    """crash, pause: from the fault until the last group acknowledged a probe write."""
    writable_p50_ms: int | None = None
    writable_p99_ms: int | None = None
    reconfigured_ms: int | None = None
    """crash: from the end of the move grace until every group's voters are the live nodes."""
    rejoined_ms: int | None = None
    """crash with ``rejoin``: from the restart until the node is a voter of every group."""
    last_election_ms: int | None = None
    """pause, overload: the last election after the fault ended (0: none)."""
    steady_ms: int | None = None
    """pause, overload: from the end of the fault until the last election or
    transfer, after which none came for ``quiet_ms`` and every group was led."""
    elections_after_fault: int = 0
    """pause, overload: elections after the fault ended (a collapse keeps them going)."""
    max_lag_ms: dict[str, int] = field(default_factory=dict)
    """Per node: the tick loop's worst lag since the fault."""
    max_slowness: dict[str, float] = field(default_factory=dict)
    max_inbox: int = 0
    """Most payloads waiting in one node's inbox since the fault."""
    acked: int = 0
    messages: int = 0
    failures: list[str] = field(default_factory=list)
    """Bounds the run missed (a condition not reached within ``bound_ms``)."""

    @property
    def elections_per_group(self) -> float:
        return self.elections / self.groups if self.groups else 0.0

    @property
    def elections_per_affected(self) -> float:
        return self.elections / self.affected if self.affected else 0.0

    def lines(self) -> list[str]:
        """A human-readable summary."""
        head = (
            f"{self.scenario} seed={self.seed} groups={self.groups} "
            f"liveness={'node' if self.node_liveness else 'group-only'}"
        )
        figures = [
            ("settle_ms", self.settle_ms),
            ("writable_ms", self.writable_ms),
            ("writable_p50_ms", self.writable_p50_ms),
            ("writable_p99_ms", self.writable_p99_ms),
            ("reconfigured_ms", self.reconfigured_ms),
            ("rejoined_ms", self.rejoined_ms),
            ("steady_ms", self.steady_ms),
            ("last_election_ms", self.last_election_ms),
        ]
        shown = [f"{name}={value}" for name, value in figures if value is not None]
        counts = (
            f"elections={self.elections} ({self.elections_per_group:.3f}/group"
            + (
                f", {self.elections_per_affected:.2f}/affected of {self.affected}"
                if self.affected
                else ""
            )
            + f") transfers={self.transfers} pre_votes={self.pre_votes}"
            + f" after_fault={self.elections_after_fault}"
        )
        load = (
            f"max_lag_ms={self.max_lag_ms} max_slowness={self.max_slowness} "
            f"max_inbox={self.max_inbox} acked={self.acked} messages={self.messages} "
            f"sim_ms={self.simulated_ms} wall_s={self.wall_s:.1f}"
        )
        lines = [head, "  " + " ".join(shown), "  " + counts, "  " + load]
        lines += [f"  MISSED: {failure}" for failure in self.failures]
        lines += [f"  VIOLATION: {violation}" for violation in self.violations[:5]]
        return lines


def run_scenario(scenario: str, seed: int = 1, options: ScaleOptions | None = None) -> ScaleResult:
    """Run one of :data:`SCENARIOS`; a failed assertion inside a core is a violation."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {SCENARIOS}")
    options = options or ScaleOptions()
    started = time.perf_counter()
    cluster = ScaleCluster(seed, options)
    result = ScaleResult(scenario, seed, options.groups, options.node_liveness)
    try:
        _SCENARIO_RUNNERS[scenario](cluster, result)
        _finish(cluster, result)
    except Exception as error:  # a core's assertion is a finding, not a crash
        cluster.history.violation(f"exception at {cluster.sim.now_ms} ms: {error!r}")
    result.violations = cluster.history.violations
    result.trace_hash = cluster.sim.trace_hash()
    result.simulated_ms = cluster.sim.now_ms
    result.acked = cluster.client.acked
    result.messages = cluster.sim.counters.delivered
    result.wall_s = time.perf_counter() - started
    return result


def _miss(result: ScaleResult, what: str) -> None:
    result.failures.append(what)


def _create(cluster: ScaleCluster, result: ScaleResult, count: int) -> range:
    """Create ``count`` groups and wait until they are replicated; the settle time
    goes to ``result`` when every group of the run is created here."""
    start = cluster.sim.now_ms
    groups = cluster.create_groups(count)
    bound = cluster.options.bound_ms
    if cluster.wait(lambda: cluster.fully_replicated(groups), bound) is None:
        _miss(result, f"{count} groups not replicated within {bound} ms of their creation")
        return groups
    if count == result.groups:
        result.settle_ms = cluster.settle_time(groups) - start
    return groups


def _settle_and_load(cluster: ScaleCluster, result: ScaleResult, count: int) -> None:
    """Groups created and idle (quiesced), then the background writes for a while."""
    _create(cluster, result, count)
    if cluster.wait(cluster.quiesced, cluster.options.bound_ms) is None:
        _miss(result, "groups not quiesced after creation")
    cluster.set_write_rate(cluster.options.write_rate)
    cluster.sim.run_for(cluster.options.warmup_ms)


def _leaders_on(cluster: ScaleCluster, node_id: str) -> list[int]:
    node = cluster.nodes[node_id]
    return [g for g, core in node.cores.items() if core.role is Role.LEADER]


def _run_create(cluster: ScaleCluster, result: ScaleResult) -> None:
    cluster.sim.run_for(100)
    start = cluster.sim.now_ms
    _create(cluster, result, cluster.options.groups)
    cluster.set_write_rate(cluster.options.write_rate)
    cluster.sim.run_for(cluster.options.warmup_ms)
    _count_elections(cluster, result, start)


def _probe_writability(cluster: ScaleCluster, result: ScaleResult, fault_ms: int) -> None:
    """Probe every group at the fault; wait until every probe is acknowledged."""
    client = cluster.client
    groups = range(cluster.group_count)
    bound = cluster.options.bound_ms
    if cluster.wait(lambda: len(client.probe_acked) == len(groups), bound, poll_ms=50) is None:
        missing = [g for g in groups if g not in client.probe_acked]
        _miss(result, f"{len(missing)} groups not writable within {bound} ms, e.g. {missing[:5]}")
        return
    times = sorted(at - fault_ms for at in client.probe_acked.values())
    result.writable_ms = times[-1]
    result.writable_p50_ms = times[len(times) // 2]
    result.writable_p99_ms = times[min(len(times) - 1, len(times) * 99 // 100)]


def _victim(cluster: ScaleCluster) -> str:
    return cluster.rng.choice(cluster.node_ids)


def _settle_and_pick_victim(cluster: ScaleCluster, result: ScaleResult) -> str:
    """Settle every group under load, pick the node to fail and count the groups it
    leads; the load metrics start afresh from here."""
    _settle_and_load(cluster, result, cluster.options.groups)
    victim = _victim(cluster)
    result.affected = len(_leaders_on(cluster, victim))
    cluster.metrics.reset_load()
    return victim


def _run_crash(cluster: ScaleCluster, result: ScaleResult) -> None:
    options = cluster.options
    sim = cluster.sim
    victim = _settle_and_pick_victim(cluster, result)
    fault = sim.now_ms
    sim.crash(victim)
    cluster.probe(range(cluster.group_count))
    _probe_writability(cluster, result, fault)
    grace_end = fault + options.detect_ms + options.move_grace_ms
    sim.run_until(max(sim.now_ms, grace_end))
    survivors = [n for n in cluster.node_ids if n != victim]
    waited = cluster.wait(lambda: cluster.reconfigured(survivors), options.bound_ms)
    if waited is None:
        _miss(result, f"not reconfigured within {options.bound_ms} ms after the grace")
    else:
        result.reconfigured_ms = sim.now_ms - grace_end
    if options.rejoin:
        sim.restart(victim)
        result.rejoined_ms = cluster.wait(
            lambda: cluster.reconfigured(cluster.node_ids), options.bound_ms
        )
        if result.rejoined_ms is None:
            _miss(result, f"{victim} not back in every group within {options.bound_ms} ms")
    _count_elections(cluster, result, fault)


def _run_pause(cluster: ScaleCluster, result: ScaleResult) -> None:
    options = cluster.options
    sim = cluster.sim
    victim = _settle_and_pick_victim(cluster, result)
    fault = sim.now_ms
    sim.pause(victim)
    sim.at(fault + options.pause_ms, lambda: sim.resume(victim))
    cluster.probe(range(cluster.group_count))
    _probe_writability(cluster, result, fault)
    sim.run_until(max(sim.now_ms, fault + options.pause_ms))
    _wait_steady(cluster, result, fault + options.pause_ms)
    _count_elections(cluster, result, fault)


def _run_overload(cluster: ScaleCluster, result: ScaleResult) -> None:
    options = cluster.options
    sim = cluster.sim
    burst = max(1, int(options.groups * options.burst_share))
    _settle_and_load(cluster, result, options.groups - burst)
    hogged = cluster.node_ids if options.hog_all else [_victim(cluster)]
    cluster.metrics.reset_load()
    fault = sim.now_ms
    cluster.set_cpu_factor(hogged, options.hog_factor)
    sim.at(fault + options.hog_ms, lambda: cluster.set_cpu_factor(hogged, 1.0))
    created = cluster.create_groups(burst)
    sim.run_until(fault + options.hog_ms)
    _wait_steady(cluster, result, fault + options.hog_ms)
    if cluster.fully_replicated(created):
        result.settle_ms = cluster.settle_time(created) - fault
    else:
        _miss(result, "groups created during the overload not replicated")
    _count_elections(cluster, result, fault)


def _wait_steady(cluster: ScaleCluster, result: ScaleResult, fault_end: int) -> None:
    quiet = cluster.options.quiet_ms
    bound = cluster.options.bound_ms + quiet
    if cluster.wait(lambda: cluster.steady(quiet), bound, poll_ms=250) is None:
        _miss(result, f"not steady within {bound} ms after the fault ended")
    else:
        result.steady_ms = max(cluster.metrics.last_campaign_ms(), fault_end) - fault_end
    after = [c for c in cluster.metrics.campaigns if c.time_ms >= fault_end and not c.transfer]
    result.elections_after_fault = len(after)
    result.last_election_ms = max((c.time_ms - fault_end for c in after), default=0)


def _count_elections(cluster: ScaleCluster, result: ScaleResult, since_ms: int) -> None:
    metrics = cluster.metrics
    result.elections = len(metrics.elections_since(since_ms))
    result.transfers = len(metrics.elections_since(since_ms, transfers=True))
    result.pre_votes = sum(1 for at, _ in metrics.pre_votes if at >= since_ms)
    result.max_lag_ms = dict(sorted(metrics.max_lag_ms.items()))
    result.max_slowness = {n: round(v, 1) for n, v in sorted(metrics.max_slowness.items())}
    result.max_inbox = metrics.max_inbox


def _finish(cluster: ScaleCluster, result: ScaleResult) -> None:
    """Stop writing, let outstanding writes finish and voters catch up, then check."""
    cluster.client.rate = 0.0
    bound = cluster.options.bound_ms
    if cluster.wait(lambda: cluster.client.idle, bound) is None:
        _miss(result, f"{len(cluster.client.writes)} writes still outstanding at the end")
    if cluster.wait(cluster.voters_caught_up, bound) is None:
        _miss(result, "voters not caught up at the end")
    cluster.final_checks()


_SCENARIO_RUNNERS: dict[str, Callable[[ScaleCluster, ScaleResult], None]] = {
    "create": _run_create,
    "crash": _run_crash,
    "pause": _run_pause,
    "overload": _run_overload,
}
