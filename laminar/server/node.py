"""The broker node: the composition root wiring membership, placement and replicas.

Start-up::

    identity (data dir: node id, cluster id, weight, zone)
    membership (SWIM over UDP) -- learns the cluster id from peers when joining
    replica host + peer transport (TCP) + gRPC server (public API, health, reflection)
    metadata loop: apply __cluster/0 (locally, or long-polled from a replica)
    placement: on every membership or catalogue change, recompute every partition's
               target replica list and hand it to the replica host

A node hosts the partitions placement gives it: founding replicas are opened when a
topic's creation is applied; a node added later gets its replica when the leader
first replicates to it; a replica is deleted when its group removed it, or when its
topic is deleted. Shutdown (SIGTERM) hands leaderships over, gossips ``left`` and
closes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from laminar.errors import ClusterIdMismatchError, ConfigError
from laminar.membership import EventKind, LocalMember, MemberEvent, MemberState
from laminar.placement import PlacementMember, partition_key, replicas
from laminar.replica.types import GroupConfig, NodeId
from laminar.segment.config import LogConfig
from laminar.server.config import NodeConfig
from laminar.server.gossip import ThreadedMembership
from laminar.server.host import PartitionKey, ReplicaHost
from laminar.server.metadata import (
    CLUSTER_TOPIC,
    METADATA_KEY,
    METADATA_REPLICATION_MAX,
    Change,
    MetadataState,
)
from laminar.server.transport import PeerTransport, TransportConfig
from laminar.v1 import laminar_pb2, laminar_pb2_grpc

_LOG = logging.getLogger(__name__)
_IDENTITY_FILE = "node.json"
_CLUSTER_META = "cluster"
_PEER_META = "peer"  # the member's peer (replication) address


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


class Node:
    """One broker node. ``await start()``, then ``await stop()``."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        os.makedirs(config.data_dir, exist_ok=True)
        self.identity = Identity.load_or_create(config)
        self.node_id = self.identity.node_id
        self.metadata = MetadataState()
        self.membership: ThreadedMembership | None = None
        self._dead_since: dict[str, float] = {}
        self._replan_handle: asyncio.TimerHandle | None = None
        self.host: ReplicaHost | None = None
        self.transport: PeerTransport | None = None
        self.server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer() if hasattr(health, "aio") else None
        self._tasks: list[asyncio.Task[None]] = []
        self._metadata_changed = asyncio.Event()
        self._metadata_committed = asyncio.Event()
        self._targets: dict[PartitionKey, tuple[str, ...]] = {}
        self._stopping = False
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._peer_addresses: dict[str, str] = {}
        self.ready = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        config = self.config
        identity = self.identity
        founding = config.bootstrap and identity.cluster_id is None
        if founding:
            identity.cluster_id = uuid.uuid4().hex
            identity.save(config.data_dir)
            _LOG.info("bootstrapping new cluster %s", identity.cluster_id)
        elif identity.cluster_id is None and not config.seeds:
            raise ConfigError("a new node needs --seeds to join, or --bootstrap to start a cluster")
        self.membership = ThreadedMembership(
            config.membership,
            LocalMember(
                node_id=self.node_id,  # type: ignore[arg-type]
                gossip_address=config.gossip,
                grpc_address=config.grpc,
                weight=identity.weight,
                zone=identity.zone,
                metadata=self._gossip_metadata(),
            ),
            config.cluster_key.encode(),
            seeds=config.seeds,
            incarnation=int(time.time()),
            on_event=self._on_member_event,
        )
        await self.membership.start()
        await self._learn_cluster_id()
        assert identity.cluster_id is not None
        self.host = ReplicaHost(
            self.node_id,
            config.data_dir,
            config.replica,
            LogConfig(),
            send=self._send_bundle,
            fsync=config.fsync,
            accept_replica=self._accept_replica,
            on_committed=self._on_committed,
            on_removed=self._on_removed,
        )
        self.transport = PeerTransport(
            self.node_id,
            identity.cluster_id,
            self.host.on_bundle,
            on_delivered=self.host.flush_now,
            config=TransportConfig.local() if config.preset == "local" else TransportConfig(),
        )
        try:
            await self.transport.listen(config.peer)
        except OSError as error:
            raise ConfigError(f"cannot listen on {config.peer}: {error.strerror}") from None
        await self.host.start()
        if founding:  # only ever once: a restarted founder rejoins its group
            self.host.open_replica(METADATA_KEY, GroupConfig((NodeId(self.node_id),)))
        await self._start_server()
        self._replan()
        self._tasks.append(asyncio.create_task(self._metadata_loop(), name="metadata"))
        self.ready.set()
        _LOG.info(
            "node %s ready: cluster %s, gossip %s, grpc %s, peer %s",
            self.node_id,
            identity.cluster_id,
            self.membership.local.gossip_address,
            config.grpc,
            config.peer,
        )

    async def stop(self, *, graceful: bool = True) -> None:
        """Hand leaderships over, gossip ``left``, and close everything."""
        if self._stopping:
            return
        self._stopping = True
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        host = self.host
        if graceful and host is not None:
            host.transfer_all_leadership()
            deadline = asyncio.get_running_loop().time() + 3
            while host.leader_count() and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        if self.membership is not None and graceful:
            with contextlib.suppress(Exception):
                await self.membership.leave()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.server is not None:
            await self.server.stop(grace=1.0)
        for channel in self._channels.values():
            await channel.close()
        if self.transport is not None:
            await self.transport.close()
        if host is not None:
            await host.close()
        if self.membership is not None:
            await self.membership.stop(leave=False)
        _LOG.info("node %s stopped", self.node_id)

    async def _learn_cluster_id(self) -> None:
        """Joining: take the cluster id gossiped by the members; refuse a different one."""
        assert self.membership is not None
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            seen = {
                cid
                for member in self.membership.view()
                if member.node_id != self.node_id
                and not member.state.is_gone
                and (cid := member.metadata_dict().get(_CLUSTER_META))
            }
            known = self.identity.cluster_id
            if known is not None and seen:
                if known not in seen:
                    raise ClusterIdMismatchError(known, ", ".join(sorted(seen)))
                return
            if known is not None and (
                not self.config.seeds
                or asyncio.get_running_loop().time() > deadline - 50  # seeds quiet for 10 s
            ):
                return  # a restart while the peers are away: start, they will come
            if len(seen) == 1:
                self.identity.cluster_id = seen.pop()
                self.identity.save(self.config.data_dir)
                self.membership.update_local(metadata=self._gossip_metadata())
                _LOG.info("joined cluster %s", self.identity.cluster_id)
                return
            if asyncio.get_running_loop().time() > deadline:
                raise ConfigError(f"no cluster found through seeds {', '.join(self.config.seeds)}")
            await asyncio.sleep(0.05)

    def _gossip_metadata(self) -> tuple[tuple[str, str], ...]:
        cluster_id = self.identity.cluster_id
        peer = ((_PEER_META, self.config.peer),)
        return ((_CLUSTER_META, cluster_id), *peer) if cluster_id else peer

    async def _start_server(self) -> None:
        from laminar.server.service import LaminarService

        limit = self.config.request_bytes_max
        options = {
            "grpc.max_receive_message_length": limit,
            "grpc.max_send_message_length": limit,
            "grpc.so_reuseport": 0,
        }
        server = grpc.aio.server(options=list(options.items()))
        laminar_pb2_grpc.add_LaminarServicer_to_server(LaminarService(self), server)  # type: ignore[no-untyped-call]
        if self._health is not None:
            health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
            await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
            await self._health.set("laminar.v1.Laminar", health_pb2.HealthCheckResponse.SERVING)
        names = (
            laminar_pb2.DESCRIPTOR.services_by_name["Laminar"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, server)
        if server.add_insecure_port(self.config.grpc) == 0:
            raise ConfigError(f"cannot listen on {self.config.grpc}")
        await server.start()
        self.server = server

    # ------------------------------------------------------------------ members

    def members(self) -> list[Any]:
        return list(self.membership.view()) if self.membership is not None else []

    def grpc_address_of(self, node_id: str | None) -> str | None:
        if node_id is None:
            return None
        if node_id == self.node_id:
            return self.config.grpc
        assert self.membership is not None
        member = self.membership.member(node_id)
        return member.grpc_address if member is not None else None

    def _on_member_event(self, event: MemberEvent) -> None:
        if self._stopping:
            return
        node_id = event.member.node_id
        _LOG.info("member %s %s", node_id, event.kind.value)
        self._peer_addresses.pop(node_id, None)  # it may have moved
        loop = asyncio.get_running_loop()
        if event.kind is EventKind.DEAD:
            self._dead_since.setdefault(node_id, loop.time())
            # Placement keeps a dead member for a grace period (a restart, a false
            # suspicion) before its replicas move; replan when it expires.
            grace_s = self.config.dead_grace_ms / 1000
            loop.call_later(grace_s + 0.05, self._replan)
        elif event.kind in (EventKind.JOINED, EventKind.ALIVE, EventKind.LEFT):
            self._dead_since.pop(node_id, None)
        if event.kind in (EventKind.DEAD, EventKind.LEFT) and self.host is not None:
            self.host.hint_leader_dead(node_id)
        if self.host is not None:
            self._replan()

    def _placement_members(self) -> list[PlacementMember]:
        members = []
        now = asyncio.get_running_loop().time()
        grace_s = self.config.dead_grace_ms / 1000
        for member in self.members():
            alive = member.state in (MemberState.ALIVE, MemberState.SUSPECT)
            if member.state is MemberState.DEAD:
                alive = now - self._dead_since.get(member.node_id, now) < grace_s
            if member.node_id == self.node_id:
                alive = True
            members.append(
                PlacementMember(member.node_id, weight=member.weight, zone=member.zone, alive=alive)
            )
        return members

    def update_self(self, weight: float | None, zone: str | None) -> None:
        """Change this node's weight or zone: saved, gossiped, and placement follows."""
        if weight is not None:
            if not (weight >= 0 and weight < float("inf")):
                raise ConfigError(f"weight must be a finite number >= 0, got {weight}")
            self.identity.weight = weight
        if zone is not None:
            self.identity.zone = zone
        self.identity.save(self.config.data_dir)
        assert self.membership is not None
        self.membership.update_local(weight=weight, zone=zone)
        self._replan()

    # ------------------------------------------------------------------ placement

    def target_of(self, key: PartitionKey) -> tuple[str, ...]:
        return self._targets.get(key, ())

    def _replan(self) -> None:
        """Recompute every partition's target replica list from the current members."""
        if self.host is None:
            return
        members = self._placement_members()
        eligible = sum(1 for m in members if m.eligible)
        targets: dict[PartitionKey, tuple[str, ...]] = {}
        k_meta = max(1, min(METADATA_REPLICATION_MAX, eligible))
        targets[METADATA_KEY] = replicas(partition_key(*METADATA_KEY), members, k_meta)
        for name, topic in self.metadata.topics.items():
            for partition in range(topic.spec.partitions):
                key = (name, partition)
                targets[key] = replicas(
                    partition_key(name, partition), members, topic.spec.replication_factor
                )
        self._targets = targets
        for key, target in targets.items():
            if target:
                self.host.set_target(key, target)

    def _accept_replica(self, key: PartitionKey) -> bool:
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

    def _on_removed(self, key: PartitionKey) -> None:
        if self.host is not None:
            self.host.delete_replica(key)

    def peer_address_of(self, node_id: str) -> str | None:
        """Where ``node_id`` accepts replication traffic (gossiped in its metadata)."""
        address = self._peer_addresses.get(node_id)
        if address is None and self.membership is not None:
            member = self.membership.member(node_id)
            if member is not None:
                address = member.metadata_dict().get(_PEER_META)
                if address is not None:
                    self._peer_addresses[node_id] = address
        return address

    def _send_bundle(self, peer: str, bundle: Any) -> None:
        address = self.peer_address_of(peer)
        if address is None or self.transport is None:
            return
        self.transport.send(peer, address, bundle)

    # ------------------------------------------------------------------ metadata

    def _on_committed(self, key: PartitionKey, start: int, end: int) -> None:
        if key == METADATA_KEY:
            self._metadata_committed.set()

    async def _metadata_loop(self) -> None:
        """Apply ``__cluster/0`` as it commits: locally when hosted, else from a replica."""
        while not self._stopping:
            try:
                replica = self.host.get(METADATA_KEY) if self.host is not None else None
                if replica is not None and replica.core.high_watermark > 0:
                    core = replica.core
                    if self.metadata.applied_offset < core.high_watermark:
                        self._apply_metadata(core.read(self.metadata.applied_offset, 1 << 20))
                        continue
                    self._metadata_committed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._metadata_committed.wait(), 1.0)
                    continue
                data = await self._fetch_metadata_remote()
                if data:
                    self._apply_metadata(data)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed fetch: try again shortly
                _LOG.debug("metadata catch-up: %s", error)
                await asyncio.sleep(0.2)

    async def _fetch_metadata_remote(self) -> bytes:
        """Long-poll ``__cluster/0`` from a node that should hold it."""
        candidates = [n for n in self._targets.get(METADATA_KEY, ()) if n != self.node_id]
        random.shuffle(candidates)
        request = laminar_pb2.FetchRequest(
            topic=CLUSTER_TOPIC,
            partition=0,
            offset=self.metadata.applied_offset,
            max_bytes=1 << 20,
            max_wait_ms=1000,
        )
        for node in candidates:
            address = self.grpc_address_of(node)
            if address is None:
                continue
            try:
                response = await self._stub(address).Fetch(request, timeout=5)
                return bytes(response.batches)
            except grpc.aio.AioRpcError as error:
                _LOG.debug("metadata fetch from %s failed: %s", node, error.details())
        await asyncio.sleep(0.2)
        return b""

    def _stub(self, address: str) -> laminar_pb2_grpc.LaminarStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address)
            self._channels[address] = channel
        return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]

    def _apply_metadata(self, data: bytes) -> None:
        changes = self.metadata.apply(data)
        for change in changes:
            self._apply_change(change)
        if changes:
            self._replan()
        self._metadata_changed.set()
        self._metadata_changed = asyncio.Event()

    def _apply_change(self, change: Change) -> None:
        assert self.host is not None
        topic = change.topic
        if change.kind == "created":
            _LOG.info("topic %s created (%d partitions)", topic.spec.name, topic.spec.partitions)
            for partition, founders in enumerate(topic.founding_replicas):
                if self.node_id in founders:
                    group = GroupConfig(tuple(NodeId(n) for n in founders))
                    self.host.open_replica((topic.spec.name, partition), group)
        else:
            _LOG.info("topic %s deleted", topic.spec.name)
            for partition in range(topic.spec.partitions):
                self.host.delete_replica((topic.spec.name, partition))

    async def wait_metadata(self, offset: int, timeout_s: float) -> None:
        """Wait until this node applied the metadata log up to ``offset``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.metadata.applied_offset < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            event = self._metadata_changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
