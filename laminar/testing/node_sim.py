"""Whole nodes in the deterministic simulator: membership, placement, catalogue, replicas.

:class:`NodeSimNode` is one broker node as far as its decisions go, in one process on
the simulated network (:mod:`laminar.testing.sim`), with the production code of each
part:

* membership: the SWIM core (:class:`~laminar.membership.core.MembershipCore`); its
  datagrams and push-pull streams travel as envelopes (streams ``reliable``);
* the node's record of its peers (:class:`~laminar.server.members.MemberTracker`)
  and placement's bookkeeping (:class:`~laminar.server.placement_keeper.PlacementKeeper`),
  wired to the member events by the node's own
  :func:`~laminar.server.members.react_to_event` (a replan at each event, and again
  when a departed member's graces end);
* the replica host's decisions (:class:`~laminar.server.driver.ReplicaDriver`, through
  :class:`~laminar.testing.replica_sim.ReplicaSimNode`, its shell in simulated time,
  over memory logs that lose unsynced writes on a crash); peer bundles travel as
  :class:`PeerFrame` envelopes to the peer address the member gossips;
* the catalogue: a :class:`SimCatalogue` stands in for the committed ``__cluster/0``
  log. Operator commands are the real command batches
  (:func:`~laminar.server.metadata.create_topic_command`,
  :func:`~laminar.server.metadata.maintenance_command`), applied by each node's own
  :class:`~laminar.server.metadata.MetadataState` as its follower would, and
  followed as :class:`~laminar.server.catalogue.CatalogueApplier` follows them:
  the node founds its replicas of a created topic
  (:func:`~laminar.server.catalogue.founding_groups`) once, below its founded
  offset, which survives a crash; maintenance goes to the driver; then a replan.

Why a fixed log and not the ``__cluster/0`` replica itself: the metadata follower and
the catalogue applier are asyncio shells (long-polls, a chain of tasks), and the
scenarios here are about data partitions and membership; the consensus of the
metadata partition is the same :class:`~laminar.replica.core.ReplicaCore` the
replica simulator covers. A command reaches each node a few simulated milliseconds
apart (as the follower's long-poll would bring it), and a node down at the time
reads it when it starts again.

:class:`NodeCluster` builds a converged cluster of such nodes with a topic, producer
clients (:class:`~laminar.testing.replica_sim.ProducerClient`, ``acks=all``) on
every partition, and the checks of :class:`~laminar.testing.replica_sim.History`;
it adds the operator's actions (maintenance, a graceful stop, a restart, a weight)
and what the scenarios assert (the longest time a partition went without an
acknowledgement, every configuration change). Everything is seeded: the same seed
gives the same run (``sim.trace_hash()``).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

from laminar.membership import Member, MemberEvent, MemberState
from laminar.membership.config import MembershipConfig, local
from laminar.membership.core import LocalMember, MembershipCore, Output
from laminar.membership.member import NodeId as MemberId
from laminar.records import with_leader_fields
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.messages import ConfigChanged, Ready
from laminar.replica.types import NodeId, Role
from laminar.server import rules
from laminar.server.catalogue import founding_groups
from laminar.server.driver import HostConfig, HostOwner, Retention
from laminar.server.members import PEER_META, PROTOCOL_META, MemberTracker, react_to_event
from laminar.server.metadata import (
    Change,
    MaintenanceChange,
    MetadataState,
    TopicSpec,
    create_topic_command,
    maintenance_command,
)
from laminar.server.placement_keeper import (
    PlacementKeeper,
    TopicSettings,
    retention_of,
    settings_of,
)
from laminar.server.transport import PROTOCOL_VERSION
from laminar.testing.replica_sim import (
    TOPIC,
    History,
    ProducerClient,
    ReplicaSimNode,
    SimReplica,
    sim_host_config,
)
from laminar.testing.sim import Envelope, LinkConfig, Simulator, Step

PartitionKey = tuple[str, int]
CLUSTER_KEY = b"node-sim-cluster"


@dataclass(frozen=True, slots=True)
class PeerFrame:
    """Peer bundles as the transport delivers them: the hello names the sender."""

    source: str
    bundle: PeerBundle


class SimCatalogue:
    """The committed ``__cluster/0`` log, as every node's follower would read it:
    command batches stamped at consecutive offsets (term 1)."""

    def __init__(self) -> None:
        self.log = b""
        self.end_offset = 0

    def append(self, command: bytes) -> int:
        """Commit one command batch; its offset."""
        offset = self.end_offset
        self.log += with_leader_fields(command, offset, 1)
        self.end_offset += 1
        return offset


@dataclass(frozen=True, slots=True)
class NodeGraces:
    """The node's placement graces (``NodeConfig`` fields of the same names)."""

    replica_move_grace_ms: int = 3_000
    maintenance_grace_ms: int = 60_000


class NodeSimNode(ReplicaSimNode):
    """One whole node in the simulator (see the module docstring).

    Durable across a crash: the memory logs (what they synced), the node id and its
    attributes, and the founded offset. Everything else (membership, the tracker,
    placement, the catalogue state, the driver) is built again at a restart, as a
    node process does."""

    def __init__(
        self,
        node_id: str,
        address: str,
        config: ReplicaConfig,
        history: History,
        rng: random.Random,
        catalogue: SimCatalogue,
        *,
        membership_config: MembershipConfig,
        graces: NodeGraces,
        seeds: Iterable[str],
        known_members: Iterable[Member] = (),
        host_config: HostConfig | None = None,
        zone: str = "",
        on_config_changed: Callable[[str, int, ConfigChanged], None] | None = None,
    ) -> None:
        super().__init__(node_id, {}, config, history, rng, host_config)
        self.node_id = node_id
        self.sim_address = address
        self.weight = 1.0
        self.zone = zone
        self.catalogue = catalogue
        self.membership_config = membership_config
        self.graces = graces
        self.seeds = tuple(seeds)
        self._known_members = tuple(known_members)
        self.founded_offset = 0
        """Every topic creation below this catalogue offset was founded here (durable)."""
        self._on_config_changed = on_config_changed
        self.membership: MembershipCore | None = None
        self.tracker: MemberTracker | None = None
        self.placement: PlacementKeeper | None = None
        self.metadata = MetadataState()
        self._member_wake_ms: int | None = None
        self._replans: list[int] = []
        """Times at which a departed member's grace ends: replan then."""

    @property
    def address(self) -> str:
        return self.sim_address

    # ---------------------------------------------------------------- lifecycle

    def start(self, now_ms: int) -> Step:
        if self.storages:  # a node with a disk, at a new address (see move)
            return self.restart(now_ms)
        self._now_ms = now_ms
        self._new_driver()
        self._start_node(now_ms, fresh=True)
        return self._step()

    def restart(self, now_ms: int) -> Step:
        self._now_ms = now_ms
        self.incarnation += 1
        driver = self._new_driver()
        for partition in sorted(self.storages):  # what the disk kept
            driver.open_replica((TOPIC, partition), None)
        self._start_node(now_ms, fresh=False)
        return self._step()

    def crash(self) -> None:
        super().crash()
        self.membership = None
        self.tracker = self.placement = None
        self._member_wake_ms = None
        self._replans = []

    def move(self, address: str) -> None:
        """(While crashed.) The node will start at another address, with the same
        disk (:meth:`NodeCluster.start_elsewhere`)."""
        self.sim_address = address

    def _start_node(self, now_ms: int, *, fresh: bool) -> None:
        """Membership first (the node learns its cluster from gossip), then the
        node's bookkeeping from the view, the catalogue, and a replan (as
        ``Node._start``)."""
        graces = self.graces
        local_member = LocalMember(
            MemberId(self.node_id),
            self.sim_address,
            f"{self.sim_address}:9000",
            self.weight,
            self.zone,
            ((PEER_META, self.sim_address), (PROTOCOL_META, str(PROTOCOL_VERSION))),
        )
        self.membership = MembershipCore(
            self.membership_config,
            local_member,
            CLUSTER_KEY,
            self._rng,
            now_ms,
            seeds=self.seeds,
            known_members=self._known_members if fresh else (),
        )
        self.tracker = MemberTracker(
            self.node_id,
            replica_move_grace_ms=graces.replica_move_grace_ms,
            maintenance_grace_ms=graces.maintenance_grace_ms,
        )
        self.placement = PlacementKeeper(
            self.node_id,
            self.tracker,
            replica_move_grace_ms=graces.replica_move_grace_ms,
            maintenance_grace_ms=graces.maintenance_grace_ms,
        )
        self.metadata = MetadataState()
        self.tracker.start(self.membership.view(), now_ms)
        self._replan()
        self._follow_catalogue()
        self._membership_output(self.membership.tick(now_ms))

    # ---------------------------------------------------------------- the node's wiring

    def _host_owner(self) -> HostOwner:
        return _NodeOwner(self)

    def _membership_output(self, output: Output) -> None:
        self._outbox.extend(Envelope(p.address, p.data) for p in output.packets)
        self._outbox.extend(Envelope(s.address, s.data, reliable=True) for s in output.streams)
        self._member_wake_ms = output.next_deadline_ms
        for event in output.events:
            self._on_member_event(event)

    def _on_member_event(self, event: MemberEvent) -> None:
        """As ``Node._on_member_event``: :func:`react_to_event`, the node's own code."""
        assert self.tracker is not None and self.membership is not None
        self._trace.append(f"{self.node_id} member {event.member.node_id} {event.kind.value}")
        react_to_event(
            self.tracker, event, self._now_ms, self.membership.view, _MemberActions(self)
        )

    def _replan(self) -> None:
        """As ``Node._replan``: every partition's target from the members and catalogue."""
        assert self.placement is not None and self.membership is not None
        driver = self.driver
        may_not_lead = driver.full_nodes() | driver.maintenance_nodes()
        targets = self.placement.replan(
            self.membership.view(), self._now_ms, self.metadata, may_not_lead
        )
        for key, target in targets.items():
            driver.set_target(key, target)

    def _follow_catalogue(self) -> None:
        """Apply the catalogue's new commands, as the follower and the applier do."""
        changes = self.metadata.apply(self.catalogue.log)
        if not changes:
            return
        driver = self.driver
        for change in changes:
            if isinstance(change, MaintenanceChange):
                driver.set_maintenance(self.metadata.maintenance)
            elif change.kind in ("created", "partitions_added"):
                self._found(change)
            elif change.kind == "deleted":
                for partition in range(change.topic.spec.partitions):
                    self._delete((change.topic.spec.name, partition))
        self._replan()

    def _found(self, change: Change) -> None:
        """A topic (or partitions) created: found this node's replicas, once (founded offset)."""
        if change.offset < self.founded_offset:
            return  # founded before a restart; what is left was opened from disk
        for key, group in founding_groups(self.node_id, change):
            if self.driver.get(key) is None:
                self.driver.open_replica(key, group)
        self.founded_offset = max(self.founded_offset, change.offset + 1)

    def _delete(self, key: PartitionKey) -> None:
        self.driver.delete_replica(key)
        self.storages.pop(key[1], None)

    def _removed(self, key: PartitionKey) -> None:
        """As ``Node._on_removed``: reopened when placement keeps it here, else deleted."""
        assert self.placement is not None
        if self.placement.keeps(key):
            log = self.storages.get(key[1])
            if log is not None:  # closed and opened again: everything kept
                self.storages[key[1]] = log.reopened()
            self.driver.reopen_replica(key)
        else:
            self._trace.append(f"{self.node_id} p{key[1]} deleted (moved away)")
            self._delete(key)

    # ---------------------------------------------------------------- inputs

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        if isinstance(payload, bytes):
            self._at(now_ms)
            assert self.membership is not None
            if reliable:
                self._membership_output(self.membership.receive_stream(payload, now_ms))
            else:
                self._membership_output(self.membership.receive_packet(payload, now_ms))
            return self._step()
        if isinstance(payload, PeerFrame):
            self._at(now_ms)
            self.driver.on_bundle(payload.source, payload.bundle)
            return self._step()
        return super().deliver(source, payload, reliable, now_ms)

    def tick(self, now_ms: int) -> Step:
        self._at(now_ms)
        assert self.membership is not None
        if self._member_wake_ms is not None and now_ms >= self._member_wake_ms:
            self._membership_output(self.membership.tick(now_ms))
        if self._replans and self._replans[0] <= now_ms:
            while self._replans and self._replans[0] <= now_ms:
                heapq.heappop(self._replans)
            self._replan()
        return super().tick(now_ms)

    def follow_catalogue(self, now_ms: int) -> Step:
        """The follower brought new catalogue commands (a simulator command)."""
        self._at(now_ms)
        self._follow_catalogue()
        return self._step()

    def leave(self, now_ms: int) -> Step:
        """A graceful stop's first half (``Node.stop``): hand the leaderships over
        to the best other voter, and gossip ``left``."""
        self._at(now_ms)
        assert self.membership is not None
        gone = {member.node_id for member in self.membership.view() if member.state.is_gone}
        for key, replica in list(self.driver.replicas.items()):
            core = replica.core
            if core.role is not Role.LEADER or core.group_config is None:
                continue
            matches = {str(peer): offset for peer, offset in core.match_offsets().items()}
            voters = [str(voter) for voter in core.group_config.voters if voter not in gone]
            successor = rules.shutdown_successor(self.node_id, voters, matches)
            if successor is not None:
                self.driver.transfer_leadership(key, NodeId(successor))
        self._membership_output(self.membership.leave(now_ms))
        return self._step()

    def set_weight(self, weight: float, now_ms: int) -> Step:
        """``laminar node update --weight`` (``Node.update_self``): gossiped, then a replan."""
        self._at(now_ms)
        assert self.membership is not None
        self.weight = weight
        self._membership_output(self.membership.update_local(now_ms, weight=weight))
        self._replan()
        return self._step()

    # ---------------------------------------------------------------- the driver's shell

    def send_bundle(self, peer: str, bundle: PeerBundle) -> None:
        """As ``Node._send_bundle``: to the peer address the member gossips."""
        assert self.membership is not None
        member = self.membership.member(MemberId(peer))
        address = member.metadata_dict().get(PEER_META) if member is not None else None
        if address is not None:
            self._outbox.append(Envelope(address, PeerFrame(self.node_id, bundle)))

    def carried_out(self, replica: SimReplica, ready: Ready, leader_found: bool) -> None:
        super().carried_out(replica, ready, leader_found)
        if self._on_config_changed is not None:
            for event in ready.events:
                if isinstance(event, ConfigChanged):
                    self._on_config_changed(self.node_id, replica.key[1], event)

    def _step(self) -> Step:
        step = super()._step()
        wakes = [step.next_wake_ms, self._member_wake_ms]
        if self._replans:
            wakes.append(self._replans[0])
        wake = min((w for w in wakes if w is not None), default=None)
        return Step(step.messages, wake, step.trace)


class _MemberActions:
    """The sim node as :func:`react_to_event` acts through it (as ``Node``'s): its
    peer links and protocol versions are not simulated (every node speaks the
    same version; a link is an address)."""

    def __init__(self, node: NodeSimNode) -> None:
        self._node = node

    def replan_later(self, delay_s: float) -> None:
        node = self._node
        heapq.heappush(node._replans, node._now_ms + round(delay_s * 1000))

    def hint_leader_dead(self, node_id: str) -> None:
        self._node.driver.hint_leader_dead(node_id)

    def forget_link(self, node_id: str) -> None:
        pass

    def check_protocol(self, member: Member) -> None:
        pass

    def peer_returned(self, node_id: str) -> None:
        self._node.driver.peer_returned(node_id)

    def set_full_peers(self, nodes: list[str]) -> None:
        self._node.driver.set_full_peers(nodes)

    def replan(self) -> None:
        self._node._replan()


class _NodeOwner:
    """The sim node as its driver's :class:`HostOwner` (as ``Node``'s ``_HostOwner``)."""

    def __init__(self, node: NodeSimNode) -> None:
        self._node = node

    def accept_replica(self, key: PartitionKey) -> bool:
        node = self._node
        return node.placement is not None and node.placement.accepts(key, node.metadata)

    def replica_committed(
        self, key: PartitionKey, committed_from: int, high_watermark: int
    ) -> None:
        pass

    def replica_removed(self, key: PartitionKey) -> None:
        self._node._removed(key)

    def retention_of(self, key: PartitionKey) -> Retention:
        return retention_of(self._node.metadata, key)

    def settings_of(self, key: PartitionKey) -> TopicSettings | None:
        return settings_of(self._node.metadata, key)

    def peer_alive(self, node_id: str) -> bool:
        tracker = self._node.tracker
        return tracker is not None and node_id in tracker.alive_peers

    def peer_dead(self, node_id: str) -> bool:
        tracker = self._node.tracker
        return tracker is not None and node_id in tracker.dead_since_ms

    def disk_full_changed(self, full: bool) -> None:
        pass


# ---------------------------------------------------------------------- the cluster


@dataclass
class NodeSimOptions:
    nodes: int = 5
    partitions: int = 4
    replication: int = 3
    graces: NodeGraces = field(default_factory=NodeGraces)
    membership: MembershipConfig = field(default_factory=local)
    config: ReplicaConfig = field(default_factory=ReplicaConfig.simulation)
    host: HostConfig = field(default_factory=sim_host_config)
    link: LinkConfig = field(default_factory=lambda: LinkConfig(0.0, 1, 5))
    sample_every_ms: int = 50


class NodeCluster:
    """Whole simulated nodes, a topic on them, producers, and what the checks need."""

    def __init__(self, seed: int, options: NodeSimOptions | None = None) -> None:
        options = options or NodeSimOptions()
        self.seed = seed
        self.options = options
        self.rng = random.Random(seed)
        self.sim = Simulator(seed, default_link=options.link)
        self.history = History()
        self.catalogue = SimCatalogue()
        self.node_ids = [f"n{index}" for index in range(options.nodes)]
        self.config_changes: list[tuple[int, str, int, ConfigChanged]] = []
        """(time, node, partition, event): every configuration a replica took."""
        known = tuple(
            Member(
                MemberId(node_id),
                node_id,
                f"{node_id}:9000",
                1.0,
                f"zone-{index % 3}",
                0,
                MemberState.ALIVE,
                ((PEER_META, node_id), (PROTOCOL_META, str(PROTOCOL_VERSION))),
            )
            for index, node_id in enumerate(self.node_ids)
        )
        self.nodes: dict[str, NodeSimNode] = {}
        for index, node_id in enumerate(self.node_ids):
            node = NodeSimNode(
                node_id,
                node_id,
                options.config,
                self.history,
                self.sim.node_rng(node_id),
                self.catalogue,
                membership_config=options.membership,
                graces=options.graces,
                seeds=[other for other in self.node_ids if other != node_id],
                known_members=known,
                host_config=options.host,
                zone=f"zone-{index % 3}",
                on_config_changed=self._config_changed,
            )
            self.nodes[node_id] = node
        # The topic, created before the nodes start, founded where placement says
        # (as ``LaminarService.create_topic`` plans it).
        members = rules.placement_members(known, self.node_ids[0], {}, 0, 0)
        self.founders = rules.plan_topic(TOPIC, options.partitions, options.replication, members)
        self.catalogue.append(
            create_topic_command(
                TopicSpec(TOPIC, options.partitions, options.replication), self.founders, "topic"
            )
        )
        for node in self.nodes.values():
            self.sim.add_node(node)
        self.clients: list[ProducerClient] = []
        for partition in range(options.partitions):
            name = f"c{partition}"
            client = ProducerClient(
                name, partition, partition + 1, self.node_ids, self.history,
                self.sim.node_rng(name),
            )  # fmt: skip
            self.clients.append(client)
            self.sim.add_node(client)
        self.ack_gap_ms: dict[int, int] = {p: 0 for p in range(options.partitions)}
        """Per partition: the longest time its producer went without an ack, sampled."""
        self._last_ack_ms = {p: 0 for p in range(options.partitions)}
        self.leaderless_ms: dict[int, int] = {p: 0 for p in range(options.partitions)}
        """Per partition: the longest time it had no live leader, sampled (the
        hand-overs and elections, as the servers see them; the clients' retries
        add their timeouts to ``ack_gap_ms``)."""
        self._led_ms = {p: 0 for p in range(options.partitions)}
        self._sample()

    # ---------------------------------------------------------------- operator actions

    def command(self, batch: bytes) -> None:
        """Commit an operator's command to the catalogue; each node up follows it a
        few milliseconds later (its follower's long-poll)."""
        self.catalogue.append(batch)
        self.sim.record(f"catalogue {self.catalogue.end_offset - 1}")
        for node in self.nodes.values():
            delay_ms = self.rng.randint(1, 20)
            self.sim.at(
                self.sim.now_ms + delay_ms,
                partial(self.sim.invoke, node.address, node.follow_catalogue),
            )

    def maintenance(self, node_id: str, enter: bool) -> None:
        """``laminar cluster maintenance enter|exit NODE``."""
        self.command(maintenance_command(node_id, enter, f"maintenance-{node_id}-{enter}"))

    def stop(self, node_id: str, leave_ms: int = 600) -> None:
        """Stop a node gracefully: hand over, gossip ``left``, and exit ``leave_ms`` later."""
        node = self.nodes[node_id]
        self.sim.invoke(node.address, node.leave)
        self.sim.at(self.sim.now_ms + leave_ms, lambda: self.sim.crash(node.address))

    def start_again(self, node_id: str) -> None:
        """Start a stopped node again from what its disk kept."""
        self.sim.restart(self.nodes[node_id].address)

    def start_elsewhere(self, node_id: str, address: str) -> None:
        """Start a stopped node again from what its disk kept, at a new address
        (gossip, peer and client traffic alike)."""
        node = self.nodes[node_id]
        assert not self.sim.is_up(node.address), f"{node_id} is up"
        node.move(address)
        self.sim.add_node(node)
        for client in self.clients:
            client.moved(node_id, address)

    def crash(self, node_id: str) -> None:
        """The node's process dies (no hand-over, no ``left``)."""
        self.sim.crash(self.nodes[node_id].address)

    def set_weight(self, node_id: str, weight: float) -> None:
        node = self.nodes[node_id]
        self.sim.invoke(node.address, lambda now_ms: node.set_weight(weight, now_ms))

    # ---------------------------------------------------------------- observations

    def _config_changed(self, node_id: str, partition: int, event: ConfigChanged) -> None:
        self.config_changes.append((self.sim.now_ms, node_id, partition, event))

    def _sample(self) -> None:
        """Every ``sample_every_ms``: the longest gap between acks and the longest
        time without a leader, per partition."""
        now_ms = self.sim.now_ms
        for client in self.clients:
            partition = client.partition
            last = max(client.last_ack_ms, self._last_ack_ms[partition])
            self._last_ack_ms[partition] = last
            if client.enabled:
                self.ack_gap_ms[partition] = max(self.ack_gap_ms[partition], now_ms - last)
        for partition in self._led_ms:
            if self.leader_of(partition) is not None:
                self._led_ms[partition] = now_ms
            gap_ms = now_ms - self._led_ms[partition]
            self.leaderless_ms[partition] = max(self.leaderless_ms[partition], gap_ms)
        self.sim.at(now_ms + self.options.sample_every_ms, self._sample)

    def up(self, node_id: str) -> bool:
        return self.sim.is_up(self.nodes[node_id].address)

    def leader_of(self, partition: int) -> tuple[str, SimReplica] | None:
        """The live leader of the highest term (None: none)."""
        found: tuple[str, SimReplica] | None = None
        for node_id, node in self.nodes.items():
            if not self.up(node_id) or node._driver is None:
                continue
            replica = node._driver.get((TOPIC, partition))
            if replica is None or replica.core.role is not Role.LEADER:
                continue
            if found is None or replica.core.term > found[1].core.term:
                found = (node_id, replica)
        return found

    def voters(self, partition: int) -> frozenset[str]:
        """The voters of the partition's group as its leader has them (empty: none)."""
        leader = self.leader_of(partition)
        if leader is None or leader[1].core.group_config is None:
            return frozenset()
        return frozenset(str(voter) for voter in leader[1].core.group_config.voters)

    def all_led(self) -> bool:
        return all(self.leader_of(p) is not None for p in range(self.options.partitions))

    def leaderships(self, node_id: str) -> int:
        node = self.nodes[node_id]
        if not self.up(node_id) or node._driver is None:
            return 0
        return sum(1 for key in node._driver.replicas if node._driver.leads(key))

    def in_sync(self, node_id: str) -> bool:
        """Every partition ``node_id`` votes in has a leader that counts it in sync
        (as ``laminar cluster rolling-restart`` asks before and after each node)."""
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if leader is None:
                return False
            core = leader[1].core
            config = core.group_config
            votes = config is not None and node_id in config.voters
            if votes and node_id not in core.in_sync_voters(self.sim.now_ms):
                return False
        return True

    def seen_alive(self, node_id: str, incarnation_above: int = -1) -> bool:
        """Every other node up sees ``node_id`` alive at its current address, with
        an incarnation above ``incarnation_above``."""
        address = self.nodes[node_id].address
        for other, node in self.nodes.items():
            if other == node_id or not self.up(other) or node.membership is None:
                continue
            member = node.membership.member(MemberId(node_id))
            if (
                member is None
                or member.state is not MemberState.ALIVE
                or member.gossip_address != address
                or member.metadata_dict().get(PEER_META) != address
                or member.incarnation <= incarnation_above
            ):
                return False
        return True

    def incarnation_seen(self, node_id: str) -> int:
        """The highest incarnation of ``node_id`` any other node up knows (-1: none)."""
        seen = -1
        for other, node in self.nodes.items():
            if other != node_id and self.up(other) and node.membership is not None:
                member = node.membership.member(MemberId(node_id))
                if member is not None:
                    seen = max(seen, member.incarnation)
        return seen

    def caught_up(self) -> bool:
        """Every partition led, its whole log committed, and every voter holding it."""
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if leader is None:
                return False
            core = leader[1].core
            if core.high_watermark < core.end_offset or core.group_config is None:
                return False
            for voter in core.group_config.voters:
                node = self.nodes.get(str(voter))
                if node is None or not self.up(str(voter)):
                    return False
                other = node.cores.get(partition)
                if other is None or other.high_watermark < core.high_watermark:
                    return False
        return True

    def final_checks(self) -> list[str]:
        """Every acknowledged value in its leader's log at its offset; the violations."""
        for partition in range(self.options.partitions):
            leader = self.leader_of(partition)
            if leader is None:
                self.history.violation(f"p{partition}: no leader at the end")
                continue
            core = leader[1].core
            data = core.read(core.start_offset, 1 << 30) if core.high_watermark else b""
            self.history.check_acknowledged(f"p{partition}", partition, data, core.start_offset)
        return self.history.violations
