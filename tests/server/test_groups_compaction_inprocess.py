"""``__groups`` stays bounded: three in-process nodes (memory logs, real gRPC).

A member commits many times with a small snapshot floor: every replica of the
group's partition deletes its log below the latest snapshot, a state rebuilt from
what is left (a restart) equals the live one, and a replica that was down while
the prefix went (the leader sends it its log start) rebuilds from the snapshot and
serves the commits once it leads.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

from laminar.server.groups import GroupPartition, group_partition
from laminar.server.node import Node
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_groups_inprocess import (
    GROUP,
    PARTITIONS,
    Client,
    commit,
    heartbeat,
    owned,
    setup,
    wait_for_async,
)
from tests.server.test_node_inprocess import (
    MemoryDisks,
    config,
    leader_of,
    run,
    start_nodes,
    stop_nodes,
    wait_until,
)

FLOOR_BYTES = 4096
"""A snapshot every few KB of commits instead of every 4 MiB."""


def rebuilt_all(part: GroupPartition, end: int) -> bool:
    """Catch up; whether everything below ``end`` is applied (polled)."""
    part.catch_up()
    return part.applied_offset >= end


def small_snapshot_floor(node: Node) -> Node:
    node.host.config = dataclasses.replace(node.host.config, snapshot_bytes_floor=FLOOR_BYTES)
    return node


@run
async def test_commits_keep_the_groups_log_bounded_and_replicas_rebuild(tmp_path: Path) -> None:
    disks = MemoryDisks()
    nodes = [small_snapshot_floor(node) for node in await start_nodes(tmp_path, disks)]
    client = Client(nodes)
    key = group_partition(GROUP)
    try:
        await setup(nodes, client)
        answer = await wait_for_async(
            lambda: client.call("GroupHeartbeat", heartbeat("m", 0, session_ms=60_000)),
            lambda a: len(owned(a)) == PARTITIONS,  # type: ignore[arg-type]
            "the member to own every partition",
        )
        epoch = answer.member_epoch  # type: ignore[attr-defined]
        epochs = owned(answer)  # type: ignore[arg-type]
        leader = leader_of(nodes, key)
        assert leader is not None
        # One follower is down while the prefix goes.
        down = next(n for n in nodes if n is not leader and n is not nodes[0])
        index = nodes.index(down)
        await down.stop(graceful=False)
        up = [n for n in nodes if n is not down]
        client.nodes = up

        next_offset = 0

        async def commit_round() -> None:
            nonlocal next_offset
            next_offset += 1
            request = commit("m", epoch, {p: (next_offset, e) for p, e in epochs.items()})
            result = await client.call("CommitOffsets", request)
            assert all(not r.HasField("error") for r in result.partitions)  # type: ignore[attr-defined]

        def starts() -> list[int]:
            return [n.host.get(key).core.start_offset for n in up]  # type: ignore[union-attr]

        for _ in range(60):  # ~40 KB of commits: several snapshots
            await commit_round()
        await wait_until(lambda: min(starts()) > 0, "the prefix deleted on the live replicas")

        def watermarks() -> set[int]:
            return {n.host.get(key).core.high_watermark for n in up}  # type: ignore[union-attr]

        await wait_until(lambda: len(watermarks()) == 1, "the live replicas to agree")
        live = leader.groups.partition(key)
        assert live is not None
        # What a restart rebuilds from the log left: the same state.
        for node in up:
            replica = node.host.get(key)
            assert replica is not None
            rebuilt = GroupPartition(key, replica, lambda offset: None)
            await wait_until(
                partial(rebuilt_all, rebuilt, replica.core.high_watermark),
                "the rebuild (the restore runs on a thread)",
            )
            assert rebuilt.replay.restored_from is not None
            assert rebuilt.state.snapshot() == live.state.snapshot()

        # The log holds about a snapshot and a tail, not 60 rounds of commits (once
        # the snapshot the last rounds started, on a thread, has cut the prefix).
        def entries() -> int:
            return leader.host.get(key).core.high_watermark - min(starts())  # type: ignore[union-attr]

        await wait_until(lambda: entries() < 60 * PARTITIONS / 2, "the log cut to a tail")

        # The follower comes back behind the leader's log start: it is sent the
        # start, rebuilds from the snapshot after it, and follows.
        back = small_snapshot_floor(
            await Node.open(config(tmp_path, index), log_factory=disks.open)
        )
        nodes[index] = back
        client.nodes = nodes
        await commit_round()

        def caught_up() -> bool:
            part = back.groups.partition(key)
            return (
                part is not None
                and part.replay.restored_from is not None
                and part.applied_offset >= leader.host.get(key).core.high_watermark  # type: ignore[union-attr]
            )

        await wait_until(caught_up, "the returning replica to rebuild from the snapshot")
        back_part = back.groups.partition(key)
        assert back_part is not None
        assert back_part.state.snapshot() == live.state.snapshot()
        # It leads next and serves every commit.
        await leader.stop(graceful=True)
        client.nodes = [n for n in nodes if n is not leader]

        async def fetch_all() -> dict[int, int]:
            fetched = await client.call("FetchOffsets", pb.FetchOffsetsRequest(group=GROUP))
            return {o.partition: o.next_offset for o in fetched.offsets}  # type: ignore[attr-defined]

        expected = dict.fromkeys(range(PARTITIONS), next_offset)
        await wait_for_async(fetch_all, lambda got: got == expected, "commits on the new leader")
    finally:
        await client.close()
        await stop_nodes([n for n in nodes if not n._stopping])
