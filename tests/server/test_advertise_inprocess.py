"""Listen on a wildcard, advertise another address: what others are told.

Two whole nodes in one process listen on ``0.0.0.0`` and advertise addresses that
reach them too but differ from what they listen on: the gossip and replication
addresses as the host name ``localhost`` (so gossip datagrams, push-pull and peer
links resolve a name), the gRPC address as a loopback alias of its own. Clients
and peers must only ever see the advertised ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from laminar_client import Client, Producer

from laminar.errors import NotLeaderError
from laminar.grpc_errors import error_from_rpc
from laminar.records import encode_batch
from laminar.replica.types import Role
from laminar.server.config import NodeConfig
from laminar.server.node import Node
from laminar.testing.processes import free_ports
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server import aio
from tests.server.aio import bounded

DEADLINE_S = 20.0
TOPIC = "events"


def configs(root: Path) -> list[NodeConfig]:
    picked = free_ports("0.0.0.0", 6)
    ports = [(picked[0], picked[1], picked[2]), (picked[3], picked[4], picked[5])]
    first_gossip = f"localhost:{ports[0][0]}"
    return [
        NodeConfig.local(
            str(root / f"n{index}"),
            gossip=f"0.0.0.0:{gossip}",
            grpc=f"0.0.0.0:{grpc_port}",
            peer=f"0.0.0.0:{peer}",
            advertise_gossip=f"localhost:{gossip}",
            advertise_grpc=f"127.0.77.{index + 1}:{grpc_port}",
            advertise_peer=f"localhost:{peer}",
            node_id=f"n{index}",
            bootstrap=index == 0,
            seeds=() if index == 0 else (first_gossip,),
        )
        for index, (gossip, grpc_port, peer) in enumerate(ports)
    ]


@bounded(DEADLINE_S * 3)
async def test_clients_and_peers_see_only_advertised_addresses(tmp_path: Path) -> None:
    wanted = configs(tmp_path)
    nodes: list[Node] = []
    channels: list[grpc.aio.Channel] = []

    def stub(address: str) -> laminar_pb2_grpc.LaminarStub:
        channel = grpc.aio.insecure_channel(
            address, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        channels.append(channel)
        return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]

    try:
        for config in wanted:
            nodes.append(await Node.open(config))
        await wait_until(
            lambda: all(len(n.members()) == 2 for n in nodes), "the nodes to see each other"
        )
        advertised_grpc = {c.node_id: c.advertised_grpc for c in wanted}
        advertised_gossip = {c.node_id: c.advertised_gossip for c in wanted}
        for node in nodes:
            gossiped = {m.node_id: m.gossip_address for m in node.members()}
            assert gossiped == advertised_gossip
            assert {
                m.node_id: node.peer_address_of(m.node_id)
                for m in node.members()
                if m.node_id != node.node_id
            } == {c.node_id: c.advertised_peer for c in wanted if c.node_id != node.node_id}

        # Every call goes to an advertised gRPC address (the wildcard listener takes it).
        await wait_until(
            lambda: any(_leads(nodes, c.node_id, ("__cluster", 0)) for c in wanted),
            "a metadata leader",
        )
        admin = next(c for c in wanted if _leads(nodes, c.node_id, ("__cluster", 0)))
        await stub(admin.advertised_grpc).CreateTopic(
            pb.CreateTopicRequest(
                name=TOPIC, config=pb.TopicConfig(partitions=1, replication_factor=2)
            ),
            timeout=DEADLINE_S,
        )
        await wait_until(
            lambda: any(_leads(nodes, c.node_id, (TOPIC, 0)) for c in wanted), "a leader"
        )
        for config in wanted:
            metadata = await stub(config.advertised_grpc).Metadata(pb.MetadataRequest(), timeout=5)
            assert {m.node_id: m.grpc_address for m in metadata.members} == advertised_grpc
            described = await stub(config.advertised_grpc).DescribeCluster(
                pb.DescribeClusterRequest(), timeout=5
            )
            assert {m.node_id: m.grpc_address for m in described.members} == advertised_grpc
            assert {m.node_id: m.gossip_address for m in described.members} == advertised_gossip

        leader = next(c for c in wanted if _leads(nodes, c.node_id, (TOPIC, 0)))
        follower = next(c for c in wanted if c is not leader)
        # Replication runs over the advertised peer addresses: acks=all needs both.
        await wait_until(
            lambda: all(n.host.get((TOPIC, 0)) is not None for n in nodes), "both replicas"
        )
        request = pb.ProduceRequest(
            topic=TOPIC, partition=0, batches=[encode_batch([b"x"])], acks=pb.ACKS_ALL
        )
        await stub(leader.advertised_grpc).Produce(request, timeout=DEADLINE_S)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub(follower.advertised_grpc).Produce(request, timeout=5)
        error = error_from_rpc(caught.value)
        assert isinstance(error, NotLeaderError)
        assert (error.leader_id, error.leader_address) == (leader.node_id, leader.advertised_grpc)
    finally:
        for channel in channels:
            await channel.close()
        for node in nodes:
            await node.stop(graceful=False)


async def wait_until(condition: Callable[[], object], what: str) -> None:
    await aio.wait_until(condition, what, timeout_s=DEADLINE_S, poll_s=0.02)


def _leads(nodes: list[Node], node_id: str, key: tuple[str, int]) -> bool:
    node = next(n for n in nodes if n.node_id == node_id)
    replica = node.host.get(key)
    return replica is not None and replica.core.role is Role.LEADER


@bounded(DEADLINE_S * 3)
async def test_a_cluster_on_ipv6_literals(tmp_path: Path) -> None:
    """Listening, advertising, seeds, peer links and the client all on ``[::1]``."""
    picked = free_ports("::1", 6)  # distinct: separate picks may repeat a port
    ports = [(picked[0], picked[1], picked[2]), (picked[3], picked[4], picked[5])]
    wanted = [
        NodeConfig.local(
            str(tmp_path / f"n{index}"),
            gossip=f"[::1]:{gossip}",
            grpc=f"[::1]:{grpc_port}",
            peer=f"[::1]:{peer}",
            node_id=f"n{index}",
            bootstrap=index == 0,
            seeds=() if index == 0 else (f"[::1]:{ports[0][0]}",),
        )
        for index, (gossip, grpc_port, peer) in enumerate(ports)
    ]
    nodes: list[Node] = []
    try:
        for config in wanted:
            nodes.append(await Node.open(config))
        await wait_until(lambda: all(len(n.members()) == 2 for n in nodes), "the two to meet")
        for node in nodes:
            assert {m.gossip_address for m in node.members()} == {c.gossip for c in wanted}
        await wait_until(
            lambda: any(_leads(nodes, c.node_id, ("__cluster", 0)) for c in wanted),
            "a metadata leader",
        )

        def use_the_client() -> tuple[set[str], list[bytes | None]]:
            with Client(",".join(c.grpc for c in wanted), timeout_s=DEADLINE_S) as client:
                client.create_topic(TOPIC, 1, 2)
                with Producer(client, acks="all") as producer:
                    producer.send_and_wait(TOPIC, b"over IPv6", partition=0)
                members = client.metadata(refresh=True).members.values()
                addresses = {m.grpc_address for m in members}
                values = []
                for config in wanted:  # from each replica: replication ran over IPv6
                    deadline = time.monotonic() + DEADLINE_S
                    read: list[bytes | None] = []
                    while not read and time.monotonic() < deadline:
                        result = client.fetch(TOPIC, 0, 0, replica=config.node_id)
                        read = [record.value for record in result.records(0)]
                        time.sleep(0 if read else 0.05)
                    values += read
                return addresses, values

        addresses, values = await asyncio.to_thread(use_the_client)
        assert addresses == {c.grpc for c in wanted}
        assert values == [b"over IPv6", b"over IPv6"]
    finally:
        for node in nodes:
            await node.stop(graceful=False)
