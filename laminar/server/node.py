"""The broker node: the composition root that builds each part and wires them.

:meth:`Node.open` does the start-up in order and returns a node whose parts all
exist (no field is filled in later)::

    identity (data dir: node id, cluster id, weight, zone; node_files.py)
    membership (SWIM over UDP, on its own thread) -- learns the cluster id from
               peers when joining (rules.join_decision)
    Node(...): replica host (log factory, clock) + peer transport (TCP) + metadata
               follower (applies __cluster/0) + gRPC service and server
    start: listen, open the replicas on disk, serve, follow the metadata

The node holds no controller logic of its own; each concern is a module it wires:

- :mod:`~laminar.server.members`: the peers as membership's events tell them
  (alive, dead since, gone, incompatible) and what to do about an event;
- :mod:`~laminar.server.placement_keeper`: every partition's target replicas,
  which replicas a message may create and which removed ones stay;
- :mod:`~laminar.server.catalogue`: this node's replicas follow the topics the
  metadata log creates and deletes (the founded offset in
  :mod:`~laminar.server.node_files`);
- :mod:`~laminar.server.metadata_fetch` and :mod:`~laminar.server.metadata_duties`:
  following ``__cluster/0`` from other nodes, and what its leader does (create
  ``__groups``, snapshot the catalogue);
- :mod:`~laminar.server.service`: the gRPC API, on the narrow
  :class:`~laminar.server.api.NodeApi` this class implements.

Every protocol decision is a pure function in :mod:`laminar.server.rules` or one of
those modules (placement targets with the two graces, the cluster-id join rule,
topic planning, the shutdown successor, the not-leader hint); the node gathers
their inputs and acts on the results. A node hosts the partitions placement gives
it: founding replicas are opened when a topic's creation is applied; a node added
later gets its replica when the leader first replicates to it; a replica is deleted
when its group removed it and placement does not want it back, or when its topic
is deleted. Shutdown (SIGTERM) hands leaderships over, gossips ``left`` and closes
everything, each step bounded in time whatever the peers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from laminar.address import parse_address
from laminar.errors import ClusterIdMismatchError, ConfigError, InvalidInputError
from laminar.ids import TopicPartition
from laminar.logfields import fields
from laminar.membership import LocalMember, Member, MemberEvent
from laminar.membership.crypto import Keyring
from laminar.placement import PlacementMember
from laminar.replica.core import ReplicaCore
from laminar.replica.types import GroupConfig, NodeId, Role
from laminar.security.tls import TlsReloader, grpc_server_credentials
from laminar.segment.layout import quarantine_directory
from laminar.segment.log import SegmentLog
from laminar.segment.quarantine import quarantined_bytes
from laminar.server import rules
from laminar.server.api import ReplicaStatus
from laminar.server.catalogue import CatalogueApplier
from laminar.server.channels import ChannelCache
from laminar.server.config import NodeConfig
from laminar.server.disk import DiskUsage
from laminar.server.follower import MetadataFollower
from laminar.server.gossip import ThreadedMembership
from laminar.server.groups import GROUPS_TOPIC, TICK_INTERVAL_MS, GroupHost
from laminar.server.host import LogFactory, ReplicaHost
from laminar.server.keyring import NodeKeyring, keyring_path, load_node_keyring
from laminar.server.members import (
    PEER_META,
    MemberEventRelay,
    MemberTracker,
    cluster_ids_seen,
    gossip_metadata,
    protocol_problem,
    react_to_event,
)
from laminar.server.metadata import METADATA_KEY, MetadataState
from laminar.server.metadata_duties import MetadataDuties
from laminar.server.metadata_fetch import RemoteMetadataFetch
from laminar.server.node_files import Identity
from laminar.server.node_security import NodeCredentials, build_auth, tls_reloader
from laminar.server.observability.history import CounterHistory
from laminar.server.placement_keeper import (
    PlacementKeeper,
    TopicSettings,
    partition_counts,
    retention_of,
    settings_of,
)
from laminar.server.service import LaminarService, add_to_server
from laminar.server.tasks import cancel_and_wait
from laminar.server.tracing import Tracing
from laminar.server.transport import IncompatiblePeer, PeerTransport, incompatibility
from laminar.v1 import laminar_pb2

if TYPE_CHECKING:
    from laminar.server.observability.endpoint import MetricsEndpoint

_LOG = logging.getLogger(__name__)
_JOIN_POLL_S = 0.05


class Node:
    """One broker node: ``node = await Node.open(config)``, then ``await node.stop()``.

    ``log_factory`` opens each replica's log (a memory log in tests) and ``clock``
    (seconds, monotonic) drives the replica host; both default to the real ones.
    """

    def __init__(
        self,
        config: NodeConfig,
        identity: Identity,
        membership: ThreadedMembership,
        events: MemberEventRelay,
        *,
        log_factory: LogFactory,
        clock: Callable[[], float] | None,
        disk_usage: Callable[[], DiskUsage] | None = None,
        metrics: MetricsEndpoint | None = None,
        tracer_provider: object = None,
    ) -> None:
        """``metrics``: the ``--metrics`` endpoint, started before the node joined
        (it serves ``/healthz`` meanwhile); the node attaches itself to it."""
        assert identity.cluster_id is not None
        self.config = config
        self.identity = identity
        self.node_id = identity.node_id
        self.cluster_id: str = identity.cluster_id
        self.membership = membership
        self.keyring = NodeKeyring(
            keyring_path(config.data_dir, config.gossip_encryption),
            membership.keyring_state,
            membership,
            config.cluster_key,
        )
        self.metadata = MetadataState()
        self.tracker = MemberTracker(
            self.node_id,
            replica_move_grace_ms=config.replica_move_grace_ms,
            maintenance_grace_ms=config.maintenance_grace_ms,
        )
        self.placement = PlacementKeeper(
            self.node_id,
            self.tracker,
            replica_move_grace_ms=config.replica_move_grace_ms,
            maintenance_grace_ms=config.maintenance_grace_ms,
        )
        self._alive_peers = self.tracker.alive_peers
        self._dead_since_ms = self.tracker.dead_since_ms
        self.host = ReplicaHost(
            self.node_id,
            config.data_dir,
            config.replica,
            config.log,
            send=self._send_bundle,
            owner=_HostOwner(self),
            fsync=config.fsync,
            host_config=config.host,
            log_factory=log_factory,
            clock=clock,
            disk_usage=disk_usage,
        )
        self.tracing = (
            Tracing.open(config.tracing, self.node_id, tracer_provider)
            if config.tracing.enabled
            else None
        )
        self.host.tracing = self.tracing
        self.tls = tls_reloader(config, self.node_id)
        self.credentials = NodeCredentials(
            self.tls, verify_assertions=config.tls.client_auth == "request"
        )
        self.transport = PeerTransport(
            self.node_id,
            self.cluster_id,
            self.host.on_bundle,
            on_delivered=self.host.flush_now,
            config=config.transport,
            local_host=parse_address(config.peer).host,
            protocol_version=config.protocol_version,
            on_incompatible=self._refused_hello,
            tls=self.tls,
        )
        self.channels = ChannelCache(
            config.service.channels_max,
            tls=self.tls,
            interceptors=self.tracing.client_interceptors() if self.tracing else (),
        )
        self.catalogue = CatalogueApplier(
            self.node_id, config.data_dir, self.host, self.metadata, self._replan
        )
        self.metadata_fetch = RemoteMetadataFetch(
            self.node_id,
            partial(self.target_of, METADATA_KEY),
            self.grpc_address_of,
            self.channels,
            self.node_call_metadata,
            wait_ms=config.metadata_wait_ms,
            call_timeout_ms=config.metadata_call_timeout_ms,
            rng=random.Random(),
        )
        self.follower = MetadataFollower(
            self.metadata,
            self._metadata_core,
            self.metadata_fetch,
            self.catalogue.on_changes,
            partial(self.host.advance_start, METADATA_KEY),
        )
        self.metadata_duties = MetadataDuties(
            self.node_id,
            self.host,
            self.metadata,
            committed_end=self._metadata_committed_end,
            placement_members=self.placement_members,
            wait_metadata=self.wait_metadata,
            snapshot_bytes_floor=lambda: self.host.config.snapshot_bytes_floor,
        )
        self.groups = GroupHost(self.host, self._partition_counts, self.grpc_address_of)
        self._groups_task: asyncio.Task[None] | None = None
        self._tls_task: asyncio.Task[None] | None = None
        self.counter_history = CounterHistory(config.metrics.sample_interval_ms)
        """Produce and fetch counters sampled for the status page (``NodeStatus``)."""
        self._sampler_task: asyncio.Task[None] | None = None
        self.service = LaminarService(self, config.service)
        self._health = health.aio.HealthServicer()
        auth = build_auth(
            config.auth, self.node_id, self.metadata, self.credentials.assertion_verifier
        )
        self.authorizer = auth.authorizer
        self.audit = auth.audit
        self.auth_interceptor = auth.interceptor
        self.server = self._build_server()
        self._peer_addresses: dict[str, str] = {}
        self._stopping = False
        self.ready = asyncio.Event()
        self.metrics = metrics
        self._member_actions = _MemberActions(self)
        events.connect(self._on_member_event)
        if metrics is not None:
            metrics.attach(self)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(
        cls,
        config: NodeConfig,
        *,
        log_factory: LogFactory = SegmentLog.open,
        clock: Callable[[], float] | None = None,
        disk_usage: Callable[[], DiskUsage] | None = None,
        on_identity: Callable[[str], None] | None = None,
        tracer_provider: object = None,
    ) -> Node:
        """Start membership, learn the cluster id, build the node and start it.
        ``disk_usage``: the data directory's free space (default ``statvfs``; tests
        inject their own). ``on_identity``: told the node's id as soon as it is
        known, before anything else is logged (the process's log filter).
        ``tracer_provider``: an OpenTelemetry ``TracerProvider`` to trace with when
        ``[tracing]`` is on, instead of one built from the config (tests)."""
        os.makedirs(config.data_dir, exist_ok=True)
        keyring_file = keyring_path(config.data_dir, config.gossip_encryption)
        keyring = load_node_keyring(keyring_file, config.cluster_key)  # before anything is saved
        identity = Identity.load_or_create(config)
        if on_identity is not None:
            on_identity(identity.node_id)
        held = quarantined_bytes(config.data_dir)
        if held:
            _LOG.warning(
                "%s holds %d bytes of damaged files set aside earlier (see each note.json; "
                "delete them once looked at)",
                quarantine_directory(config.data_dir),
                held,
            )
        metrics = None
        if config.metrics.enabled:  # first: /healthz answers while the node joins
            from laminar.server.observability.endpoint import MetricsEndpoint

            metrics = MetricsEndpoint.start(config.metrics)
        founding = config.bootstrap and identity.cluster_id is None
        if founding:
            identity.cluster_id = uuid.uuid4().hex
            identity.save(config.data_dir)
            _LOG.info("bootstrapping new cluster %s", identity.cluster_id)
        elif identity.cluster_id is None and not config.seeds:
            if metrics is not None:
                metrics.close()
            raise ConfigError("a new node needs --seeds to join, or --bootstrap to start a cluster")
        events = MemberEventRelay()
        membership = ThreadedMembership(
            config.membership,
            LocalMember(
                node_id=NodeId(identity.node_id),
                gossip_address=config.advertised_gossip,
                grpc_address=config.advertised_grpc,
                weight=identity.weight,
                zone=identity.zone,
                metadata=gossip_metadata(config, identity.cluster_id),
            ),
            config.cluster_key.encode(),
            bind_address=config.gossip,
            seeds=config.seeds,
            incarnation=int(time.time()),
            on_event=events,
            keyring=Keyring(keyring, config.gossip_encryption, os.urandom),
        )
        try:
            await membership.start()
        except BaseException:
            if metrics is not None:
                metrics.close()
            raise
        node: Node | None = None
        try:
            await _learn_cluster_id(config, identity, membership)
            node = cls(
                config,
                identity,
                membership,
                events,
                log_factory=log_factory,
                clock=clock,
                disk_usage=disk_usage,
                metrics=metrics,
                tracer_provider=tracer_provider,
            )
            await node._start(founding)
        except BaseException:
            if node is not None:
                await node.stop(graceful=False)
            else:
                await membership.stop(leave=False)
                if metrics is not None:
                    metrics.close()
            raise
        return node

    async def _start(self, founding: bool) -> None:
        config = self.config
        try:
            await self.transport.listen(config.peer)
        except OSError as error:
            raise ConfigError(f"cannot listen on {config.peer}: {error.strerror}") from None
        await self.host.start()
        if founding:  # only ever once: a restarted founder rejoins its group
            self.host.open_replica(METADATA_KEY, GroupConfig((NodeId(self.node_id),)))
        if self.tls is not None:
            credentials = grpc_server_credentials(
                self.tls, require_client_auth=config.tls.client_auth == "require"
            )
            port = self.server.add_secure_port(config.grpc, credentials)
        else:
            port = self.server.add_insecure_port(config.grpc)
        if port == 0:
            raise ConfigError(f"cannot listen on {config.grpc}")
        await self.server.start()
        await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._health.set("laminar.v1.Laminar", health_pb2.HealthCheckResponse.SERVING)
        # Members dead before this node was built; the others' protocol versions.
        for member in self.tracker.start(self.membership.view(), self.host.now_ms()):
            self._check_protocol(member)
        self._replan()
        self.follower.start()
        if self.tls is not None:
            self._tls_task = asyncio.get_running_loop().create_task(
                self._tls_loop(self.tls), name="tls-reload"
            )
        self._groups_task = asyncio.get_running_loop().create_task(
            self._groups_loop(), name="groups"
        )
        self._sampler_task = asyncio.get_running_loop().create_task(
            self._sampler_loop(), name="counter-sampler"
        )
        self.ready.set()
        _LOG.info(
            "node %s ready: cluster %s, gossip %s, grpc %s, peer %s "
            "(listening on gossip %s, grpc %s, peer %s)",
            self.node_id,
            self.cluster_id,
            self.membership.local.gossip_address,
            config.advertised_grpc,
            config.advertised_peer,
            config.gossip,
            config.grpc,
            config.peer,
            extra=fields(node_id=self.node_id),
        )

    def node_call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """Metadata of this node's own calls to other nodes: its certificate asserted
        (:meth:`NodeCredentials.call_metadata`)."""
        return self.credentials.call_metadata(time.time_ns() // 1_000_000)

    def _build_server(self) -> grpc.aio.Server:
        limit = self.config.service.request_bytes_max
        options = {
            "grpc.max_receive_message_length": limit,
            "grpc.max_send_message_length": limit,
            "grpc.so_reuseport": 0,
        }
        interceptors: list[Any] = []
        if self.tracing is not None:  # outermost: refused calls are traced too
            interceptors.append(self.tracing.server_interceptor())
        if self.auth_interceptor is not None:
            interceptors.append(self.auth_interceptor)
        server = grpc.aio.server(options=list(options.items()), interceptors=interceptors)
        add_to_server(self.service, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = (
            laminar_pb2.DESCRIPTOR.services_by_name["Laminar"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, server)
        return server

    async def stop(self, *, graceful: bool = True) -> None:
        """Hand leaderships over, gossip ``left``, and close everything.

        Bounded: the handover takes at most ``handover_timeout_ms``, the rest about
        ``shutdown_timeout_ms``, whatever the peers do.
        """
        if self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        await self._health.enter_graceful_shutdown()
        host = self.host
        if graceful:
            handed = self._hand_over_leaderships()
            deadline = loop.time() + self.config.handover_timeout_ms / 1000
            while any(host.leads(key) for key in handed) and loop.time() < deadline:
                await asyncio.sleep(0.05)
        deadline = loop.time() + self.config.shutdown_timeout_ms / 1000

        def remaining_s() -> float:
            return max(0.1, deadline - loop.time())

        if graceful:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.membership.leave(), remaining_s())
        await self.follower.stop()
        await self.catalogue.close()
        await self.metadata_duties.close()
        for task in (self._tls_task, self._groups_task, self._sampler_task):
            await cancel_and_wait(task)
        self._tls_task = self._groups_task = self._sampler_task = None
        await self.server.stop(grace=min(1.0, remaining_s()))
        await self.channels.close(remaining_s())
        await self.transport.close()
        await host.close(timeout_s=remaining_s())
        if self.audit is not None:
            await asyncio.to_thread(self.audit.close, remaining_s())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.membership.stop(leave=False), remaining_s())
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.close)
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)
        _LOG.info("node %s stopped", self.node_id, extra=fields(node_id=self.node_id))

    def _hand_over_leaderships(self) -> list[TopicPartition]:
        """Hand every leadership to the best other live voter (graceful shutdown);
        returns the partitions whose leadership is on its way."""
        gone = {member.node_id for member in self.membership.view() if member.state.is_gone}
        handed = []
        for key in self.host.replica_keys():
            replica = self.host.get(key)
            if replica is None or replica.core.role is not Role.LEADER:
                continue
            config = replica.core.group_config
            if config is None:
                continue
            voters = [voter for voter in config.voters if voter not in gone]
            matches = {str(peer): offset for peer, offset in replica.core.match_offsets().items()}
            successor = rules.shutdown_successor(self.node_id, voters, matches)
            if successor is not None:
                self.host.transfer_leadership(key, NodeId(successor))
                handed.append(key)
        return handed

    # ------------------------------------------------------------------ observability

    @property
    def stopping(self) -> bool:
        return self._stopping

    def metadata_offset_seen(self) -> int | None:
        """The metadata log's high watermark as this node knows it: its own replica's
        when it holds one that has committed, else what the node it long-polls
        answered last (None: nobody has answered yet)."""
        replica = self.host.get(METADATA_KEY)
        local = replica.core.high_watermark if replica is not None else 0
        remote = self.metadata_fetch.high_watermark_seen
        if local > 0:
            return max(local, remote or 0)
        return remote

    def tls_expiry_s(self) -> float | None:
        """When the node's current ``[tls]`` certificate expires (Unix seconds)."""
        return self.credentials.expiry_s()

    # ------------------------------------------------------------------ replicas (NodeApi)

    def serves(self, key: TopicPartition) -> bool:
        """Whether a replica of ``key`` is here, fenced or not."""
        return self.host.get(key) is not None or self.host.is_fenced(key)

    def replica_status(self, key: TopicPartition) -> ReplicaStatus | None:
        replica = self.host.get(key)
        if replica is None:
            return None
        core = replica.core
        config = core.group_config
        return ReplicaStatus(
            role=core.role,
            leader=core.leader,
            term=core.term,
            high_watermark=core.high_watermark,
            voters=config.voters if config is not None else (),
            learners=config.learners if config is not None else (),
        )

    def in_sync_voters(self, key: TopicPartition, now_ms: int) -> list[str]:
        replica = self.host.get(key)
        return list(replica.core.in_sync_voters(now_ms)) if replica is not None else []

    # ------------------------------------------------------------------ members

    def members(self) -> list[Member]:
        return list(self.membership.view())

    def grpc_address_of(self, node_id: str | None) -> str | None:
        if node_id is None:
            return None
        if node_id == self.node_id:
            return self.config.advertised_grpc
        member = self.membership.member(node_id)
        return member.grpc_address if member is not None else None

    def _on_member_event(self, event: MemberEvent) -> None:
        if self._stopping:
            return
        node_id = event.member.node_id
        _LOG.info(
            "member %s %s",
            node_id,
            event.kind.value,
            extra=fields(node_id=self.node_id, peer=node_id),
        )
        self._peer_addresses.pop(node_id, None)  # it may have moved
        react_to_event(
            self.tracker, event, self.host.now_ms(), self.membership.view, self._member_actions
        )

    # ------------------------------------------------------------------ protocol versions

    @property
    def protocol_version(self) -> int:
        return self.config.protocol_version

    def incompatible_peers(self) -> list[IncompatiblePeer]:
        return list(self.tracker.incompatible.values())

    def _check_protocol(self, member: Member) -> None:
        """Note (and log, once) a member that gossips an incompatible protocol
        version; forget it once it gossips a compatible one (upgraded)."""
        problem = protocol_problem(self.config.protocol_version, member)
        if problem is None:
            self.tracker.compatible(member.node_id)
            return
        version, reason = problem
        self._note_incompatible(member.node_id, version, reason, "gossip")

    def _refused_hello(self, source: str, version: int) -> None:
        """The transport refused a connection from ``source`` for its version."""
        self._note_incompatible(
            source, version, incompatibility(self.config.protocol_version, version), "hello"
        )

    def _note_incompatible(self, node_id: str, version: int, reason: str, seen_in: str) -> None:
        address = self.peer_address_of(node_id) or ""
        peer = self.tracker.note_incompatible(node_id, version, reason, address, self.host.now_ms())
        if peer is None:
            return  # refused for this version already
        _LOG.warning(
            "incompatible peer node=%s peer=%s address=%s seen_in=%s: %s; refused",
            self.node_id,
            node_id,
            address or "-",
            seen_in,
            reason,
            extra=fields(node_id=self.node_id, peer=node_id),
        )
        self._replan()  # it holds no replicas

    def _on_disk_full(self, full: bool) -> None:
        """The host found this node's disk full, or with space again: gossip it (peers
        stop handing it leaderships, and refuse writes without a majority with
        space), and move it last in the targets (not the preferred leader)."""
        if self._stopping:
            return
        self.membership.update_local(
            metadata=gossip_metadata(self.config, self.cluster_id, disk_full=full)
        )
        self._replan()

    def placement_members(self) -> list[PlacementMember]:
        """The members as placement sees them (:meth:`PlacementKeeper.placement_members`)."""
        return self.placement.placement_members(
            self.membership.view(), self.host.now_ms(), self.metadata.maintenance
        )

    def update_self(self, weight: float | None, zone: str | None) -> Member:
        """Change this node's weight or zone: saved, gossiped, and placement follows.

        Returns this node as a member with the new values (gossip applies them
        asynchronously)."""
        if weight is not None:
            if not (weight >= 0 and weight < float("inf")):
                raise InvalidInputError(f"weight must be a finite number >= 0, got {weight}")
            self.identity.weight = weight
        if zone is not None:
            if len(zone.encode()) > 64 or "\x00" in zone:
                raise InvalidInputError("zone must be at most 64 bytes without NUL")
            self.identity.zone = zone
        self.identity.save(self.config.data_dir)
        self.membership.update_local(weight=weight, zone=zone)
        self._replan()
        me = self.membership.member(self.node_id)
        assert me is not None
        return dataclasses.replace(me, weight=self.identity.weight, zone=self.identity.zone)

    # ------------------------------------------------------------------ placement

    def target_of(self, key: TopicPartition) -> tuple[str, ...]:
        return self.placement.target_of(key)

    def _replan(self) -> None:
        """Recompute every partition's target replica list from the current members."""
        if self._stopping:
            return
        may_not_lead = self.host.full_nodes() | self.host.maintenance_nodes()
        targets = self.placement.replan(
            self.membership.view(), self.host.now_ms(), self.metadata, may_not_lead
        )
        for key, target in targets.items():
            self.host.set_target(key, target)

    def _accept_replica(self, key: TopicPartition) -> bool:
        return self.placement.accepts(key, self.metadata)

    def _retention_of(self, key: TopicPartition) -> tuple[int | None, int | None]:
        return retention_of(self.metadata, key)

    def _settings_of(self, key: TopicPartition) -> TopicSettings | None:
        return settings_of(self.metadata, key)

    def _on_removed(self, key: TopicPartition) -> None:
        """The group removed this replica: delete it, unless placement keeps it here."""
        if self.placement.keeps(key):
            self.host.reopen_replica(key)
        else:
            self.host.delete_replica(key)

    def peer_address_of(self, node_id: str) -> str | None:
        """Where ``node_id`` accepts replication traffic (gossiped in its metadata)."""
        address = self._peer_addresses.get(node_id)
        if address is None:
            member = self.membership.member(node_id)
            if member is not None:
                address = member.metadata_dict().get(PEER_META)
                if address is not None:
                    self._peer_addresses[node_id] = address
        return address

    def _send_bundle(self, peer: str, bundle: Any) -> None:
        address = self.peer_address_of(peer)
        if address is not None:
            self.transport.send(peer, address, bundle)

    # ------------------------------------------------------------------ metadata

    def _metadata_core(self) -> ReplicaCore | None:
        replica = self.host.get(METADATA_KEY)
        return replica.core if replica is not None else None

    def _on_committed(self, key: TopicPartition, start: int, end: int) -> None:
        if key == METADATA_KEY:
            self.follower.committed()
        elif key[0] == GROUPS_TOPIC:
            self.groups.committed(key)

    def _partition_counts(self) -> dict[str, int]:
        return partition_counts(self.metadata)

    # ------------------------------------------------------------------ background loops

    async def _sampler_loop(self) -> None:
        """Sample the produce and fetch counters every ``sample_interval_ms``."""
        history = self.counter_history
        stats = self.service.stats
        while True:
            history.sample(self.host.now_ms(), stats.produced_records, stats.fetched_records)
            await asyncio.sleep(history.interval_ms / 1000)

    async def _tls_loop(self, tls: TlsReloader) -> None:
        """Look at the TLS files every check interval even while no connection opens,
        so that a rotation is loaded (and logged, or refused) when it happens rather
        than at the next handshake."""
        interval_s = max(0.05, self.config.tls.reload_check_interval_ms / 1000)
        while True:
            await asyncio.sleep(interval_s)
            tls.current()

    async def _groups_loop(self) -> None:
        """Every ``TICK_INTERVAL_MS``: create ``__groups`` if this node should, and run
        the coordinators' ticks (expiries, fencing, hand-outs)."""
        timeout_s = self.config.service.admin_timeout_ms / 1000
        while True:
            try:
                await self.metadata_duties.ensure_groups_topic(timeout_s)
                self.metadata_duties.maybe_snapshot(timeout_s)
                await self.groups.tick(timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost leadership, a timeout: next round
                _LOG.debug(
                    "node %s: groups round failed: %s",
                    self.node_id,
                    error,
                    extra=fields(node_id=self.node_id),
                )
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)

    def _metadata_committed_end(self) -> int | None:
        """The high watermark of this node's replica of ``__cluster/0`` when its own
        term is committed there (:mod:`laminar.server.metadata_duties`)."""
        replica = self.host.get(METADATA_KEY)
        if replica is None or not replica.core.term_committed:
            return None
        return replica.core.high_watermark

    async def wait_metadata(self, offset: int, timeout_s: float) -> None:
        """Wait until this node applied the metadata log up to ``offset``."""
        await self.follower.wait_applied(offset, timeout_s)


async def _learn_cluster_id(
    config: NodeConfig, identity: Identity, membership: ThreadedMembership
) -> None:
    """Joining: take the cluster id gossiped by the members; refuse a different one."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        seen = cluster_ids_seen(membership.view(), identity.node_id)
        decision = rules.join_decision(
            identity.cluster_id,
            seen,
            has_seeds=bool(config.seeds),
            waited_ms=int((loop.time() - started) * 1000),
            restart_wait_ms=config.restart_wait_ms,
            join_wait_ms=config.join_wait_ms,
        )
        match decision.action:
            case rules.Join.START:
                return
            case rules.Join.MISMATCH:
                assert identity.cluster_id is not None
                raise ClusterIdMismatchError(identity.cluster_id, ", ".join(sorted(set(seen))))
            case rules.Join.ADOPT:
                identity.cluster_id = decision.cluster_id
                identity.save(config.data_dir)
                membership.update_local(metadata=gossip_metadata(config, identity.cluster_id))
                _LOG.info("joined cluster %s", identity.cluster_id)
                return
            case rules.Join.NO_CLUSTER:
                raise ConfigError(f"no cluster found through seeds {', '.join(config.seeds)}")
            case rules.Join.WAIT:
                await asyncio.sleep(_JOIN_POLL_S)


class _MemberActions:
    """The node as :func:`~laminar.server.members.react_to_event` acts through it."""

    def __init__(self, node: Node) -> None:
        self._node = node

    def replan_later(self, delay_s: float) -> None:
        asyncio.get_running_loop().call_later(delay_s, self._node._replan)

    def hint_leader_dead(self, node_id: str) -> None:
        self._node.host.hint_leader_dead(node_id)

    def forget_link(self, node_id: str) -> None:
        self._node.transport.forget(node_id)

    def check_protocol(self, member: Member) -> None:
        self._node._check_protocol(member)

    def peer_returned(self, node_id: str) -> None:
        self._node.host.peer_returned(node_id)

    def set_full_peers(self, nodes: list[str]) -> None:
        self._node.host.set_full_peers(nodes)

    def replan(self) -> None:
        self._node._replan()


class _HostOwner:
    """The node as its replica host's :class:`~laminar.server.driver.HostOwner`:
    placement's say on new replicas, retention, membership, and what the host
    tells the node (commits, removals, the disk turning full)."""

    def __init__(self, node: Node) -> None:
        self._node = node

    def accept_replica(self, key: TopicPartition) -> bool:
        return self._node._accept_replica(key)

    def replica_committed(
        self, key: TopicPartition, committed_from: int, high_watermark: int
    ) -> None:
        self._node._on_committed(key, committed_from, high_watermark)

    def replica_removed(self, key: TopicPartition) -> None:
        self._node._on_removed(key)

    def retention_of(self, key: TopicPartition) -> tuple[int | None, int | None]:
        return self._node._retention_of(key)

    def settings_of(self, key: TopicPartition) -> TopicSettings | None:
        """The topic's settings now (read at every retention and compaction check)."""
        return self._node._settings_of(key)

    def peer_alive(self, node_id: str) -> bool:
        return node_id in self._node._alive_peers

    def peer_dead(self, node_id: str) -> bool:
        return node_id in self._node._dead_since_ms

    def disk_full_changed(self, full: bool) -> None:
        self._node._on_disk_full(full)
