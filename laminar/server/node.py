"""The broker node: the composition root that builds each part and wires them.

:meth:`Node.open` does the start-up in order and returns a node whose parts all
exist (no field is filled in later)::

    identity (data dir: node id, cluster id, weight, zone)
    membership (SWIM over UDP, on its own thread) -- learns the cluster id from
               peers when joining (rules.join_decision)
    Node(...): replica host (log factory, clock) + peer transport (TCP) + metadata
               follower (applies __cluster/0) + gRPC service and server
    start: listen, open the replicas on disk, serve, follow the metadata

Every protocol decision the node makes is a pure function in
:mod:`laminar.server.rules` (placement targets with the two graces, the cluster-id
join rule, topic planning, the shutdown successor); the node gathers their inputs
and acts on the results. A node hosts the partitions placement gives it: founding
replicas are opened when a topic's creation is applied; a node added later gets its
replica when the leader first replicates to it; a replica is deleted when its group
removed it and placement does not want it back, or when its topic is deleted.
Shutdown (SIGTERM) hands leaderships over, gossips ``left`` and closes everything,
each step bounded in time whatever the peers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from laminar.address import parse_address
from laminar.errors import (
    ClusterIdMismatchError,
    ConfigError,
    InvalidInputError,
    LaminarError,
    OffsetOutOfRangeError,
)
from laminar.groups.replay import snapshot_due
from laminar.grpc_errors import error_from_rpc
from laminar.ids import TopicPartition
from laminar.logfields import fields
from laminar.membership import EventKind, LocalMember, Member, MemberEvent, MemberState
from laminar.membership.crypto import Keyring
from laminar.placement import PlacementMember
from laminar.records import encode_batch
from laminar.replica.core import ReplicaCore
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.security.acl import Authorizer
from laminar.security.assertion import METADATA_KEY as ASSERTION_METADATA_KEY
from laminar.security.assertion import REUSE_MS as ASSERTION_REUSE_MS
from laminar.security.assertion import AssertionVerifier, make_assertion
from laminar.security.audit import AuditLog
from laminar.security.interceptor import Authenticator, AuthInterceptor
from laminar.security.principals import CertificatePrincipals
from laminar.security.tls import TlsFiles, TlsReloader, grpc_server_credentials
from laminar.security.tokens import TokenStore
from laminar.segment.log import SegmentLog
from laminar.segment.quarantine import QUARANTINE_DIR, quarantined_bytes
from laminar.server import rules
from laminar.server.channels import ChannelCache
from laminar.server.config import NodeConfig
from laminar.server.disk import DiskUsage
from laminar.server.follower import READ_BYTES_MAX, MetadataFollower
from laminar.server.gossip import ThreadedMembership
from laminar.server.groups import (
    GROUPS_PARTITIONS,
    GROUPS_REPLICATION_MAX,
    GROUPS_TOPIC,
    TICK_INTERVAL_MS,
    GroupHost,
)
from laminar.server.host import LogFactory, ReplicaHost
from laminar.server.keyring import NodeKeyring, keyring_path, load_node_keyring
from laminar.server.metadata import (
    CLUSTER_TOPIC,
    METADATA_KEY,
    Change,
    MaintenanceChange,
    MetadataChange,
    MetadataState,
    TopicSpec,
    create_topic_command,
    snapshot_commands,
)
from laminar.server.observability.history import CounterHistory
from laminar.server.service import LaminarService, add_to_server
from laminar.server.tracing import Tracing
from laminar.server.transport import (
    IncompatiblePeer,
    PeerTransport,
    compatible_versions,
    incompatibility,
)
from laminar.v1 import laminar_pb2, laminar_pb2_grpc

if TYPE_CHECKING:
    from laminar.server.observability.endpoint import MetricsEndpoint

_LOG = logging.getLogger(__name__)
_IDENTITY_FILE = "node.json"
_CLUSTER_META = "cluster"
_PEER_META = "peer"  # the member's peer (replication) address
_DISK_META = "disk"  # "full" while the member's disk is below its watermark (absent: space)
_DISK_FULL = "full"
_PROTOCOL_META = "proto"  # the member's peer protocol version (absent: 1, before issue 30)
_INCOMPATIBLE_MAX = 1024
"""Most peers remembered as refused for their protocol version (oldest dropped)."""
_JOIN_POLL_S = 0.05
_EARLY_EVENTS_MAX = 10_000
_SNAPSHOT_CHUNKS_PER_BATCH = 3
"""Snapshot chunks (256 KiB each) per appended batch: about the 1 MiB of a groups
append."""


_FOUNDED_FILE = "founded"
"""The node's founded offset: every topic creation below this metadata offset has
had its founding replicas created here, so replaying it after a restart must not
found them again (see :meth:`Node._apply_change`)."""


def _tls_reloader(config: NodeConfig, node_id: str) -> TlsReloader | None:
    """The node's ``[tls]`` files, loaded (None with TLS off); a certificate that
    does not name this node (``laminar:node/<id>``) is refused: peers would refuse
    every connection from it."""
    tls = config.tls
    if not tls.enabled:
        return None
    reloader = TlsReloader(
        TlsFiles(tls.ca_file, tls.cert_file, tls.key_file),
        check_interval_s=tls.reload_check_interval_ms / 1000,
        what=f"node {node_id}",
    )
    from laminar.security.certs import node_ids_of  # cryptography: the server extra

    named = node_ids_of(reloader.current().cert)
    if node_id not in named:
        raise ConfigError(
            f"{tls.cert_file} names node(s) {named or 'none'}, not this node ({node_id}): a "
            "node certificate needs the URI SAN laminar:node/<id> (docs/operations.md, TLS)"
        )
    return reloader


def _read_founded(data_dir: str) -> int:
    try:
        with open(os.path.join(data_dir, _FOUNDED_FILE), encoding="ascii") as file:
            return int(file.read().strip() or 0)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {_FOUNDED_FILE} in {data_dir}: {error}") from None


def _write_founded(data_dir: str, offset: int) -> None:
    """Replace the founded offset durably (after the replicas it covers are)."""
    path = os.path.join(data_dir, _FOUNDED_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="ascii") as file:
        file.write(str(offset))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    descriptor = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@dataclass
class Identity:
    node_id: str
    cluster_id: str | None
    weight: float
    zone: str

    @classmethod
    def load_or_create(cls, config: NodeConfig) -> Identity:
        path = os.path.join(config.data_dir, _IDENTITY_FILE)
        try:
            with open(path, encoding="utf-8") as file:
                saved = json.load(file)
            identity = cls(
                str(saved["node_id"]),
                saved.get("cluster_id"),
                float(saved.get("weight", 1.0)),
                str(saved.get("zone", "")),
            )
        except FileNotFoundError:
            node_id = config.node_id or f"n-{uuid.uuid4().hex[:10]}"
            identity = cls(node_id, None, 1.0, "")
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ConfigError(f"cannot read {path}: {error}") from None
        if config.weight is not None:
            identity.weight = config.weight
        if config.zone is not None:
            identity.zone = config.zone
        identity.save(config.data_dir)
        return identity

    def save(self, data_dir: str) -> None:
        os.makedirs(data_dir, exist_ok=True)
        path = os.path.join(data_dir, _IDENTITY_FILE)
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(
                {
                    "node_id": self.node_id,
                    "cluster_id": self.cluster_id,
                    "weight": self.weight,
                    "zone": self.zone,
                },
                file,
            )
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)


class MemberEventRelay:
    """Membership's event callback, connected to the node once it exists.

    Membership must run before the node can be built (the node needs the cluster
    id it learns from gossip); events of that interval are kept (at most
    ``_EARLY_EVENTS_MAX``) and replayed on :meth:`connect`.
    """

    def __init__(self) -> None:
        self._early: deque[MemberEvent] = deque(maxlen=_EARLY_EVENTS_MAX)
        self._sink: Callable[[MemberEvent], None] | None = None

    def __call__(self, event: MemberEvent) -> None:
        if self._sink is None:
            self._early.append(event)
        else:
            self._sink(event)

    def connect(self, sink: Callable[[MemberEvent], None]) -> None:
        self._sink = sink
        while self._early:
            sink(self._early.popleft())


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
        self._alive_peers: set[str] = set()
        """Members alive or suspect by gossip: the cores' node-level liveness."""
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
        self.tls = _tls_reloader(config, self.node_id)
        self._verifier: tuple[int, AssertionVerifier] | None = None
        self._assertion: tuple[int, int, tuple[str, str]] | None = None
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
        self.follower = MetadataFollower(
            self.metadata,
            self._metadata_core,
            self._fetch_metadata_remote,
            self._on_changes,
            partial(self.host.advance_start, METADATA_KEY),
        )
        self._metadata_snapshot: asyncio.Task[None] | None = None
        self.groups = GroupHost(self.host, self._partition_counts, self.grpc_address_of)
        self._groups_task: asyncio.Task[None] | None = None
        self._tls_task: asyncio.Task[None] | None = None
        self.counter_history = CounterHistory(config.metrics.sample_interval_ms)
        """Produce and fetch counters sampled for the status page (``NodeStatus``)."""
        self._sampler_task: asyncio.Task[None] | None = None
        self._founded_offset = _read_founded(config.data_dir)
        self._replica_changes: asyncio.Task[None] | None = None
        self.service = LaminarService(self, config.service)
        self._health = health.aio.HealthServicer()
        auth = config.auth
        self.authorizer = Authorizer(enabled=auth.authorization, super_users=auth.super_users)
        self.audit: AuditLog | None = None
        self.auth_interceptor = self._build_interceptor()
        self.server = self._build_server()
        self._dead_since_ms: dict[str, int] = {}
        self._incompatible: dict[str, IncompatiblePeer] = {}
        """Peers refused for their protocol version (by gossip or at a hello)."""
        self._gone: dict[str, tuple[Member, int]] = {}
        """Members declared dead or that left -> (their last entry, since when), kept
        after gossip reaps them (``reap_after_ms``, seconds) until placement's grace
        for them ends (minutes, or hours in maintenance): placement must not forget
        a member before its grace is over."""
        self._targets: dict[TopicPartition, tuple[str, ...]] = {}
        self._peer_addresses: dict[str, str] = {}
        self._known_members: set[NodeId] = set()
        self._stopping = False
        self._metadata_offset_remote: int | None = None
        """The metadata log's high watermark as the node long-polled last answered."""
        self.ready = asyncio.Event()
        self.metrics = metrics
        self._tls_expiry: tuple[int, float] | None = None
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
                os.path.join(config.data_dir, QUARANTINE_DIR),
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
                metadata=_gossip_metadata(config, identity.cluster_id),
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
        now_ms = self.host.now_ms()
        for member in self.membership.view():  # dead before this node was built
            if member.state is MemberState.DEAD:
                self._dead_since_ms.setdefault(member.node_id, now_ms)
            if member.state.is_gone:
                self._gone.setdefault(member.node_id, (member, now_ms))
            elif member.node_id != self.node_id:
                self._check_protocol(member)
        self._known_members = {member.node_id for member in self.membership.view()}
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

    def _build_interceptor(self) -> AuthInterceptor | None:
        """The client API's authentication, authorization and audit; None with
        ``[auth]`` all default (no check runs, a token is ignored)."""
        auth = self.config.auth
        if not (auth.authorization or auth.token_file or auth.audit_log_file):
            return None
        tokens = TokenStore(auth.token_file) if auth.token_file else None
        if auth.audit_log_file:
            try:
                self.audit = AuditLog(
                    auth.audit_log_file, bytes_max=auth.audit_log_bytes_max, node_id=self.node_id
                )
            except OSError as error:
                raise ConfigError(
                    f"cannot open the audit log {auth.audit_log_file}: {error.strerror}"
                ) from None
        metadata = self.metadata
        return AuthInterceptor(
            Authenticator(
                tokens, CertificatePrincipals(auth.principal_rules), self._assertion_verifier
            ),
            self.authorizer,
            lambda: (metadata.acls_version, metadata.acls.keys()),
            self.audit,
        )

    def _assertion_verifier(self) -> AssertionVerifier | None:
        """With ``client_auth = "request"``: the verifier of the certificate
        assertions callers send (laminar.security.assertion), following the CA file."""
        tls = self.tls
        if tls is None or self.config.tls.client_auth != "request":
            return None
        state = tls.current()
        cached = self._verifier
        if cached is None or cached[0] != state.generation:
            cached = (state.generation, AssertionVerifier.from_pem(state.ca))
            self._verifier = cached
        return cached[1]

    def node_call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """Metadata of this node's own calls to other nodes: its certificate asserted
        (a node with ``client_auth = "request"`` learns it is ``Node:<id>`` so)."""
        tls = self.tls
        if tls is None:
            return None
        state = tls.current()
        now_ms = time.time_ns() // 1_000_000
        made = self._assertion
        if made is None or made[0] != state.generation or now_ms - made[1] >= ASSERTION_REUSE_MS:
            pair = (ASSERTION_METADATA_KEY, make_assertion(state.cert, state.key, now_ms))
            made = (state.generation, now_ms, pair)
            self._assertion = made
        return (made[2],)

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
        changes, self._replica_changes = self._replica_changes, None
        if changes is not None:
            changes.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await changes
        snapshot, self._metadata_snapshot = self._metadata_snapshot, None
        if snapshot is not None:
            snapshot.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await snapshot
        tls_task, self._tls_task = self._tls_task, None
        if tls_task is not None:
            tls_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tls_task
        for task in (self._groups_task, self._sampler_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._groups_task = self._sampler_task = None
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
        remote = self._metadata_offset_remote
        if local > 0:
            return max(local, remote or 0)
        return remote

    def tls_expiry_s(self) -> float | None:
        """When the node's current ``[tls]`` certificate expires (Unix seconds)."""
        if self.tls is None:
            return None
        state = self.tls.current()
        cached = self._tls_expiry
        if cached is None or cached[0] != state.generation:
            from laminar.security.certs import not_after  # cryptography: the server extra

            cached = (state.generation, not_after(state.cert).timestamp())
            self._tls_expiry = cached
        return cached[1]

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
        loop = asyncio.get_running_loop()
        was_dead = False
        if event.kind in (EventKind.DEAD, EventKind.LEFT):
            since_ms = self._gone.get(node_id, (event.member, self.host.now_ms()))[1]
            self._gone[node_id] = (event.member, since_ms)
            # Placement keeps a dead member's replicas through the move grace (a
            # restart, a short partition), one in maintenance through the
            # maintenance grace even when it left; replan when they expire.
            # Leadership does not wait: the hint below starts elections in the
            # groups it led.
            grace_s = self.config.replica_move_grace_ms / 1000
            loop.call_later(grace_s + 0.05, self._replan)
            maintenance_grace_s = self.config.maintenance_grace_ms / 1000
            if maintenance_grace_s > grace_s:  # in case it is (or enters) maintenance
                loop.call_later(maintenance_grace_s + 0.05, self._replan)
        if event.kind is EventKind.DEAD:
            self._dead_since_ms.setdefault(node_id, self.host.now_ms())
        elif event.kind in (EventKind.JOINED, EventKind.ALIVE, EventKind.LEFT):
            was_dead = self._dead_since_ms.pop(node_id, None) is not None
        if event.kind in (EventKind.JOINED, EventKind.ALIVE):
            self._gone.pop(node_id, None)
        if event.kind in (EventKind.DEAD, EventKind.LEFT):
            self.host.hint_leader_dead(node_id)
        if event.kind is EventKind.LEFT:
            self.transport.forget(node_id)
        if event.kind in (EventKind.JOINED, EventKind.ALIVE, EventKind.UPDATED):
            self._check_protocol(event.member)
        view = self.membership.view()
        self._alive_peers.clear()
        self._alive_peers.update(m.node_id for m in view if not m.state.is_gone)
        if event.kind in (EventKind.JOINED, EventKind.ALIVE) and was_dead:
            self.host.peer_returned(node_id)  # after _alive_peers says so
        current = {member.node_id for member in view}
        for gone in self._known_members - current:  # reaped: its link goes too
            self.transport.forget(gone)
            self._dead_since_ms.pop(gone, None)
        self._known_members = current
        self.host.set_full_peers(
            m.node_id
            for m in view
            if not m.state.is_gone and m.metadata_dict().get(_DISK_META) == _DISK_FULL
        )
        self._replan()

    # ------------------------------------------------------------------ protocol versions

    @property
    def protocol_version(self) -> int:
        return self.config.protocol_version

    def incompatible_peers(self) -> list[IncompatiblePeer]:
        return list(self._incompatible.values())

    def _check_protocol(self, member: Member) -> None:
        """Note (and log, once) a member that gossips an incompatible protocol
        version; forget it once it gossips a compatible one (upgraded)."""
        version = _protocol_version_of(member)
        own = self.config.protocol_version
        if version is not None and compatible_versions(own, version):
            self._incompatible.pop(member.node_id, None)
            return
        reason = (
            incompatibility(own, version)
            if version is not None
            else "gossips a protocol version that is not a number"
        )
        self._note_incompatible(member.node_id, version or 0, reason, "gossip")

    def _refused_hello(self, source: str, version: int) -> None:
        """The transport refused a connection from ``source`` for its version."""
        self._note_incompatible(
            source, version, incompatibility(self.config.protocol_version, version), "hello"
        )

    def _note_incompatible(self, node_id: str, version: int, reason: str, seen_in: str) -> None:
        known = self._incompatible.get(node_id)
        if known is not None and known.protocol_version == version:
            return
        address = self.peer_address_of(node_id) or ""
        _LOG.warning(
            "incompatible peer node=%s peer=%s address=%s seen_in=%s: %s; refused",
            self.node_id,
            node_id,
            address or "-",
            seen_in,
            reason,
            extra=fields(node_id=self.node_id, peer=node_id),
        )
        since_ms = known.since_ms if known is not None else self.host.now_ms()
        self._incompatible[node_id] = IncompatiblePeer(node_id, address, version, reason, since_ms)
        if len(self._incompatible) > _INCOMPATIBLE_MAX:
            del self._incompatible[next(iter(self._incompatible))]
        self._replan()  # it holds no replicas

    def _on_disk_full(self, full: bool) -> None:
        """The host found this node's disk full, or with space again: gossip it (peers
        stop handing it leaderships, and refuse writes without a majority with
        space), and move it last in the targets (not the preferred leader)."""
        if self._stopping:
            return
        self.membership.update_local(
            metadata=_gossip_metadata(self.config, self.cluster_id, disk_full=full)
        )
        self._replan()

    def placement_members(self) -> list[PlacementMember]:
        """The members as placement sees them: the view, and the members gossip
        reaped while their grace lasts (dropped once it is over)."""
        view = list(self.membership.view())
        in_view = {member.node_id for member in view}
        now_ms = self.host.now_ms()
        view += [member for node_id, (member, _) in self._gone.items() if node_id not in in_view]
        members = rules.placement_members(
            view,
            self.node_id,
            {node_id: since_ms for node_id, (_member, since_ms) in self._gone.items()},
            now_ms,
            self.config.replica_move_grace_ms,
            self.metadata.maintenance,
            self.config.maintenance_grace_ms,
            self._incompatible,
        )
        for placed in members:
            if not placed.alive and placed.node_id not in in_view:
                del self._gone[placed.node_id]  # reaped, and its grace is over
        return members

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
        return self._targets.get(key, ())

    def _replan(self) -> None:
        """Recompute every partition's target replica list from the current members."""
        if self._stopping:
            return
        topics = {
            name: (topic.spec.partitions, topic.spec.replication_factor)
            for name, topic in self.metadata.topics.items()
        }
        self._targets = rules.placement_targets(self.placement_members(), topics)
        full = self.host.full_nodes() | self.host.maintenance_nodes()  # may not lead
        for key, target in self._targets.items():
            if target:
                self.host.set_target(key, rules.full_last(target, full))

    def _accept_replica(self, key: TopicPartition) -> bool:
        """Whether a message for a partition this node lacks may create its replica.

        Only when placement assigns the partition to this node: a leader adding us
        agrees with our own placement, while messages still in flight to a replica
        that was just removed (drained, moved) must not resurrect it empty.
        """
        if key != METADATA_KEY and (
            key[0] not in self.metadata.topics
            or not 0 <= key[1] < self.metadata.topics[key[0]].spec.partitions
        ):
            return False
        return self.node_id in self._targets.get(key, ())

    def _retention_of(self, key: TopicPartition) -> tuple[int | None, int | None]:
        """The topic's retention, ``(bytes, ms)`` with None for unlimited."""
        topic = self.metadata.topics.get(key[0])
        if topic is None:
            return None, None
        spec = topic.spec
        return (
            spec.retention_bytes if spec.retention_bytes > 0 else None,
            spec.retention_ms if spec.retention_ms > 0 else None,
        )

    def _on_removed(self, key: TopicPartition) -> None:
        """The group removed this replica: delete it, unless placement wants it here
        (it was removed while unreachable and is back): then keep its log, so that it
        catches up from where it matches when the leader adds it again."""
        if self.node_id in self._targets.get(key, ()):
            self.host.reopen_replica(key)
        else:
            self.host.delete_replica(key)

    def peer_address_of(self, node_id: str) -> str | None:
        """Where ``node_id`` accepts replication traffic (gossiped in its metadata)."""
        address = self._peer_addresses.get(node_id)
        if address is None:
            member = self.membership.member(node_id)
            if member is not None:
                address = member.metadata_dict().get(_PEER_META)
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

    async def _fetch_metadata_remote(self, offset: int) -> bytes:
        """Long-poll ``__cluster/0`` from a node that should hold it."""
        candidates = [n for n in self._targets.get(METADATA_KEY, ()) if n != self.node_id]
        random.shuffle(candidates)
        request = laminar_pb2.FetchRequest(
            topic=CLUSTER_TOPIC,
            partition=0,
            offset=offset,
            max_bytes=READ_BYTES_MAX,
            max_wait_ms=self.config.metadata_wait_ms,
        )
        timeout_s = self.config.metadata_call_timeout_ms / 1000
        for node in candidates:
            address = self.grpc_address_of(node)
            if address is None:
                continue
            stub = laminar_pb2_grpc.LaminarStub(self.channels.get(address))  # type: ignore[no-untyped-call]
            try:
                response = await stub.Fetch(
                    request, timeout=timeout_s, metadata=self.node_call_metadata()
                )
                self._metadata_offset_remote = response.high_watermark
                return bytes(response.batches)
            except grpc.aio.AioRpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                if isinstance(error, OffsetOutOfRangeError):
                    raise error from None  # its log starts past ``offset``: a snapshot
                _LOG.debug("metadata fetch from %s failed: %s", node, rpc_error.details())
        await asyncio.sleep(0.2)
        return b""

    def _on_changes(self, changes: list[MetadataChange]) -> None:
        for change in changes:
            if isinstance(change, MaintenanceChange):
                self.host.set_maintenance(self.metadata.maintenance)
            else:
                self._apply_change(change)
        self._replan()

    def _apply_change(self, change: Change) -> None:
        """Create or delete this node's replicas of a topic, in metadata order.

        Founding replicas are created off the loop in batches
        (:meth:`ReplicaHost.open_founding`); creations and deletions run one after
        the other on one chain of tasks, so that a topic deleted right after its
        creation is not created after its deletion. A creation the node applied
        before a restart (below its founded offset) is not founded again: the
        replicas that still exist were opened from disk, and one deleted since (moved
        away) must not come back as the term-1 leader of a group that has moved on.
        """
        topic = change.topic
        if change.kind == "created":
            _LOG.info("topic %s created (%d partitions)", topic.spec.name, topic.spec.partitions)
            if change.offset < self._founded_offset:
                return
            groups = [
                ((topic.spec.name, partition), GroupConfig(tuple(NodeId(n) for n in founders)))
                for partition, founders in enumerate(topic.founding_replicas)
                if self.node_id in founders
            ]
            self.host.reserve_founding([key for key, _ in groups])  # before the replan
            self._chain_replica_change(self._found(groups, change.offset))
        else:
            _LOG.info("topic %s deleted", topic.spec.name)
            keys = [(topic.spec.name, partition) for partition in range(topic.spec.partitions)]
            self._chain_replica_change(self._delete(keys))

    def _chain_replica_change(self, step: Coroutine[Any, Any, None]) -> None:
        previous = self._replica_changes

        async def run() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            await step

        self._replica_changes = asyncio.get_running_loop().create_task(run())

    async def _found(self, groups: list[tuple[TopicPartition, GroupConfig]], offset: int) -> None:
        await self.host.open_founding(groups)
        self._founded_offset = max(self._founded_offset, offset + 1)
        await asyncio.to_thread(_write_founded, self.config.data_dir, self._founded_offset)

    async def _delete(self, keys: list[TopicPartition]) -> None:
        for key in keys:
            self.host.delete_replica(key)

    def _partition_counts(self) -> dict[str, int]:
        """Each topic's partition count, for the group coordinators."""
        return {name: topic.spec.partitions for name, topic in self.metadata.topics.items()}

    # ------------------------------------------------------------------ groups

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
                await self._ensure_groups_topic(timeout_s)
                self._maybe_snapshot_metadata(timeout_s)
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

    async def _ensure_groups_topic(self, timeout_s: float) -> None:
        """The leader of ``__cluster/0`` creates ``__groups`` once its catalogue is
        complete (its own term committed and applied) and does not have it.

        Its spec says :data:`GROUPS_REPLICATION_MAX` replicas; the founding ones are
        as many as the cluster has now (at least one), and placement adds the rest
        as nodes join, as for ``__cluster/0``. Applying a creation is idempotent, so
        a second leader racing this one changes nothing.
        """
        if GROUPS_TOPIC in self.metadata.topics:
            return
        replica = self.host.get(METADATA_KEY)
        if replica is None or not replica.core.term_committed:
            return
        if self.metadata.applied_offset < replica.core.high_watermark:
            return
        members = self.placement_members()
        full = self.host.full_nodes()
        eligible = sum(1 for member in members if member.eligible and member.node_id not in full)
        spec = TopicSpec(GROUPS_TOPIC, GROUPS_PARTITIONS, GROUPS_REPLICATION_MAX)
        founders = rules.plan_topic(
            GROUPS_TOPIC,
            GROUPS_PARTITIONS,
            max(1, min(GROUPS_REPLICATION_MAX, eligible)),
            members,
            full,
        )
        batch = create_topic_command(spec, founders, uuid.uuid4().hex)
        result = await self.host.produce(METADATA_KEY, batch, Acks.ALL, timeout_s)
        await self.wait_metadata(result.base_offset + 1, timeout_s)
        _LOG.info(
            "node %s: created %s", self.node_id, GROUPS_TOPIC, extra=fields(node_id=self.node_id)
        )

    def _maybe_snapshot_metadata(self, timeout_s: float) -> None:
        """The leader of ``__cluster/0`` writes a snapshot of the catalogue when one is
        due (the rule of ``__groups``: :func:`~laminar.groups.replay.snapshot_due`)."""
        if self._metadata_snapshot is not None and not self._metadata_snapshot.done():
            return
        replica = self.host.get(METADATA_KEY)
        state = self.metadata
        if replica is None or not replica.core.term_committed or state.seeking:
            return
        if state.applied_offset < replica.core.high_watermark or not snapshot_due(
            state.bytes_since_snapshot,
            state.last_snapshot_bytes,
            self.host.config.snapshot_bytes_floor,
        ):
            return
        self._metadata_snapshot = asyncio.get_running_loop().create_task(
            self._write_metadata_snapshot(timeout_s), name="metadata snapshot"
        )

    async def _write_metadata_snapshot(self, timeout_s: float) -> None:
        """Append the snapshot's chunks (acks=all) and wait until it is applied here;
        a failure (a lost leadership) leaves a torn snapshot that readers ignore."""
        state = self.metadata
        as_of = state.applied_offset
        values = snapshot_commands(state, uuid.uuid4().hex)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        end = as_of
        try:
            for start in range(0, len(values), _SNAPSHOT_CHUNKS_PER_BATCH):
                batch = encode_batch(values[start : start + _SNAPSHOT_CHUNKS_PER_BATCH])
                remaining = max(0.0, deadline - loop.time())
                result = await self.host.produce(METADATA_KEY, batch, Acks.ALL, remaining)
                end = result.base_offset + min(_SNAPSHOT_CHUNKS_PER_BATCH, len(values) - start)
            await self.wait_metadata(end, max(0.1, deadline - loop.time()))
        except (LaminarError, TimeoutError) as error:
            _LOG.info(
                "node %s: metadata snapshot as of %d abandoned: %s",
                self.node_id,
                as_of,
                error,
                extra=fields(node_id=self.node_id),
            )
            return
        _LOG.info(
            "node %s: metadata snapshot as of %d written (%d chunks)",
            self.node_id,
            as_of,
            len(values),
            extra=fields(node_id=self.node_id),
        )

    async def wait_metadata(self, offset: int, timeout_s: float) -> None:
        """Wait until this node applied the metadata log up to ``offset``."""
        await self.follower.wait_applied(offset, timeout_s)


def _gossip_metadata(
    config: NodeConfig, cluster_id: str | None, *, disk_full: bool = False
) -> tuple[tuple[str, str], ...]:
    entries = [
        (_PEER_META, config.advertised_peer),
        (_PROTOCOL_META, str(config.protocol_version)),
    ]
    if cluster_id:
        entries.insert(0, (_CLUSTER_META, cluster_id))
    if disk_full:
        entries.append((_DISK_META, _DISK_FULL))
    return tuple(entries)


def _protocol_version_of(member: Member) -> int | None:
    """The protocol version a member gossips: 1 when it gossips none (a node from
    before versions were gossiped), None when it is not a number."""
    text = member.metadata_dict().get(_PROTOCOL_META, "1")
    return int(text) if text.isdigit() and len(text) <= 3 else None


async def _learn_cluster_id(
    config: NodeConfig, identity: Identity, membership: ThreadedMembership
) -> None:
    """Joining: take the cluster id gossiped by the members; refuse a different one."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        seen = [
            cluster_id
            for member in membership.view()
            if member.node_id != identity.node_id
            and not member.state.is_gone
            and (cluster_id := member.metadata_dict().get(_CLUSTER_META))
        ]
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
                membership.update_local(metadata=_gossip_metadata(config, identity.cluster_id))
                _LOG.info("joined cluster %s", identity.cluster_id)
                return
            case rules.Join.NO_CLUSTER:
                raise ConfigError(f"no cluster found through seeds {', '.join(config.seeds)}")
            case rules.Join.WAIT:
                await asyncio.sleep(_JOIN_POLL_S)


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

    def peer_alive(self, node_id: str) -> bool:
        return node_id in self._node._alive_peers

    def peer_dead(self, node_id: str) -> bool:
        return node_id in self._node._dead_since_ms

    def disk_full_changed(self, full: bool) -> None:
        self._node._on_disk_full(full)
