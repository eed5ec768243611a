"""Consumer groups over gRPC on three in-process nodes (memory logs, real sockets).

One scenario, in the order a group lives through it: a member joins and gets every
partition, commits; a second member joins and partitions move only after the first
releases them; FetchOffsets returns the commits; the first member stops
heartbeating, expires, and its late commit is FENCED; the coordinator's node stops
and the commits survive on the new leader. Waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from laminar.errors import FencedMemberError, GroupNotEmptyError, NotLeaderError, RetriableError
from laminar.groups.assignment import AssignmentMember, target_assignment
from laminar.grpc_errors import error_from_detail, error_from_rpc
from laminar.server.groups import GROUPS_TOPIC, group_partition
from laminar.server.node import Node
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server.test_node_inprocess import (
    MemoryDisks,
    leader_of,
    run,
    start_nodes,
    stop_nodes,
    wait_until,
)

TOPIC = "orders"
PARTITIONS = 4
GROUP = "billing"
T = TypeVar("T")


class Client:
    """Calls a group's coordinator, following NOT_LEADER hints like a real client."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str) -> laminar_pb2_grpc.LaminarStub:
        channel = self.channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(
                address, options=[("grpc.use_local_subchannel_pool", 1)]
            )
            self.channels[address] = channel
        return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]

    async def call(self, method: str, request: object) -> object:
        """``method`` on the coordinator, following not-leader hints; a hint without
        an address (the leader named is a node just stopped, or an election is under
        way) is retried from the first node after a pause, as a client would, until
        a deadline."""
        address = self.nodes[0].config.grpc
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            try:
                return await getattr(self.stub(address), method)(request, timeout=10)
            except grpc.aio.AioRpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                if not isinstance(error, NotLeaderError):
                    raise error from None
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError(f"{method}: no leader found ({error})") from None
                if error.leader_address:
                    address = error.leader_address
                else:
                    address = self.nodes[0].config.grpc
                    await asyncio.sleep(0.1)

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()


def heartbeat(
    member_id: str, epoch: int, *, session_ms: int, released: tuple[tuple[str, int, int], ...] = ()
) -> pb.GroupHeartbeatRequest:
    return pb.GroupHeartbeatRequest(
        group=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        topics=[TOPIC],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=30_000,
        released=[
            pb.GroupPartitionEpoch(topic=t, partition=p, assignment_epoch=e) for t, p, e in released
        ],
    )


def owned(answer: pb.GroupHeartbeatResponse) -> dict[int, int]:
    return {p.partition: p.assignment_epoch for p in answer.owned}


def target_of(answer: pb.GroupHeartbeatResponse, member_id: str) -> set[int]:
    members = [AssignmentMember(m.key, m.weight) for m in answer.members]
    partitions = [(t.topic, index) for t in answer.topics for index in range(t.partitions)]
    target = target_assignment(GROUP, members, partitions)
    return {index for (_, index), key in target.items() if key == member_id}


def commit(member_id: str, epoch: int, offsets: dict[int, tuple[int, int]]) -> object:
    return pb.CommitOffsetsRequest(
        group=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        offsets=[
            pb.OffsetCommit(
                topic=TOPIC, partition=p, next_offset=offset, assignment_epoch=a, metadata="m"
            )
            for p, (offset, a) in offsets.items()
        ],
    )


async def setup(nodes: list[Node], client: Client) -> None:
    await wait_until(lambda: leader_of(nodes, ("__cluster", 0)), "a metadata leader")
    await client.call(
        "CreateTopic",
        pb.CreateTopicRequest(
            name=TOPIC,
            config=pb.TopicConfig(
                partitions=PARTITIONS, replication_factor=3, retention_bytes=-1, retention_ms=-1
            ),
        ),
    )
    key = group_partition(GROUP)
    await wait_until(
        lambda: all(GROUPS_TOPIC in n.metadata.topics for n in nodes), "__groups everywhere"
    )
    await wait_until(
        lambda: sum(1 for n in nodes if n.host.get(key) is not None) == 3 and leader_of(nodes, key),
        "three replicas of the group's partition and a leader",
    )


@run
async def test_a_group_joins_commits_rebalances_fences_and_survives_failover(
    tmp_path: Path,
) -> None:
    disks = MemoryDisks()
    nodes = await start_nodes(tmp_path, disks)
    client = Client(nodes)
    try:
        await setup(nodes, client)
        listed = await client.call("ListTopics", pb.ListTopicsRequest())
        assert [t.name for t in listed.topics] == [TOPIC]  # type: ignore[attr-defined]

        # A joins and, heartbeating, is confirmed owner of every partition.
        a = await client.call("GroupHeartbeat", heartbeat("", 0, session_ms=3_000))
        a_id, a_epoch = a.member_id, a.member_epoch  # type: ignore[attr-defined]
        assert a_id and a_epoch >= 1
        state: dict[str, pb.GroupHeartbeatResponse] = {}

        async def beat_a(released: tuple[tuple[str, int, int], ...] = ()) -> dict[int, int]:
            answer = await client.call(
                "GroupHeartbeat", heartbeat(a_id, a_epoch, session_ms=3_000, released=released)
            )
            assert isinstance(answer, pb.GroupHeartbeatResponse)
            state["a"] = answer
            return owned(answer)

        await wait_for_async(beat_a, lambda o: len(o) == PARTITIONS, "A owns all")
        a_owned = owned(state["a"])
        result = await client.call(
            "CommitOffsets",
            commit(a_id, a_epoch, {p: (10 + p, epoch) for p, epoch in a_owned.items()}),
        )
        assert all(not r.HasField("error") for r in result.partitions)  # type: ignore[attr-defined]

        # B joins: nothing moves until A releases what is no longer its target.
        b = await client.call("GroupHeartbeat", heartbeat("member-b", 0, session_ms=30_000))
        assert isinstance(b, pb.GroupHeartbeatResponse)
        b_epoch = b.member_epoch
        assert owned(b) == {}
        await beat_a()
        moving = set(a_owned) - target_of(state["a"], a_id)
        assert moving and set(owned(state["a"])) == set(a_owned)
        b = await client.call("GroupHeartbeat", heartbeat("member-b", b_epoch, session_ms=30_000))
        assert owned(b) == {}  # type: ignore[arg-type]
        await beat_a(tuple((TOPIC, p, a_owned[p]) for p in sorted(moving)))

        async def beat_b() -> dict[int, int]:
            answer = await client.call(
                "GroupHeartbeat", heartbeat("member-b", b_epoch, session_ms=30_000)
            )
            assert isinstance(answer, pb.GroupHeartbeatResponse)
            state["b"] = answer
            return owned(answer)

        await wait_for_async(beat_b, lambda o: set(o) == moving, "B owns what A released")
        b_owned = owned(state["b"])
        assert all(p.committed_offset == 10 + p.partition for p in state["b"].owned)
        result = await client.call(
            "CommitOffsets",
            commit("member-b", b_epoch, {p: (20 + p, e) for p, e in b_owned.items()}),
        )
        assert all(not r.HasField("error") for r in result.partitions)  # type: ignore[attr-defined]

        fetched = await client.call("FetchOffsets", pb.FetchOffsetsRequest(group=GROUP))
        expected = {p: (20 + p if p in moving else 10 + p) for p in range(PARTITIONS)}
        assert {o.partition: o.next_offset for o in fetched.offsets} == expected  # type: ignore[attr-defined]

        # A stops heartbeating; B goes on. A expires, and its late commit is FENCED.
        kept = set(a_owned) - moving

        async def members_left() -> int:
            await beat_b()
            described = await client.call("DescribeGroup", pb.DescribeGroupRequest(group=GROUP))
            return len(described.members)  # type: ignore[attr-defined]

        await wait_for_async(members_left, lambda count: count == 1, "A to expire")
        late = await client.call(
            "CommitOffsets", commit(a_id, a_epoch, {p: (99, a_owned[p]) for p in kept})
        )
        errors = [error_from_detail(r.error) for r in late.partitions]  # type: ignore[attr-defined]
        assert errors and all(isinstance(e, FencedMemberError) for e in errors)
        with pytest.raises(FencedMemberError):
            await client.call("GroupHeartbeat", heartbeat(a_id, a_epoch, session_ms=3_000))
        with pytest.raises(GroupNotEmptyError):
            await client.call("DeleteGroup", pb.DeleteGroupRequest(group=GROUP))
        await wait_for_async(beat_b, lambda o: len(o) == PARTITIONS, "B owns everything")

        # The coordinator's node stops: the new leader has every commit.
        coordinator = leader_of(nodes, group_partition(GROUP))
        assert coordinator is not None
        survivors = [n for n in nodes if n is not coordinator]
        await coordinator.stop(graceful=False)
        client.nodes = survivors
        await wait_until(lambda: leader_of(survivors, group_partition(GROUP)), "a new leader")

        async def fetch_all() -> dict[int, int]:
            fetched = await client.call("FetchOffsets", pb.FetchOffsetsRequest(group=GROUP))
            return {o.partition: o.next_offset for o in fetched.offsets}  # type: ignore[attr-defined]

        await wait_for_async(fetch_all, lambda got: got == expected, "commits on the new leader")
        assert len(await beat_b()) == PARTITIONS  # a fresh session, nothing moved
    finally:
        await client.close()
        await stop_nodes(nodes)


async def wait_for_async(
    call: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str, timeout_s: float = 20.0
) -> T:
    """Repeat ``await call()`` until ``done(result)`` or the deadline; retriable errors
    (an election in progress) are retried, polling every 50 ms."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: object = None
    while loop.time() < deadline:
        try:
            result = await call()
            if done(result):
                return result
            last = result
        except RetriableError as error:
            last = error
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
