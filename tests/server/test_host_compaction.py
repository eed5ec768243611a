"""Keyed compaction on three replica hosts in one process: real segment logs (each
node with its own segment size), the compaction thread, bundles delivered on the
event loop. Every replica compacts the range its leader's command names and serves
the same batches for every offset."""

from __future__ import annotations

import asyncio
from pathlib import Path

from laminar.records import decode_records, encode_batch, parse_header
from laminar.replica.coalesce import PeerBundle
from laminar.replica.config import ReplicaConfig
from laminar.replica.types import Acks, GroupConfig, NodeId, Role
from laminar.segment.config import LogConfig
from laminar.server.driver import HostConfig
from laminar.server.host import ReplicaHost
from tests.server.aio import bounded, wait_until
from tests.server.test_driver_compaction import COMPACT, _batches, _Owner

KEY = ("changelog", 0)
NODES = ("n1", "n2", "n3")
DEADLINE_S = 20.0


@bounded(DEADLINE_S * 3)
async def test_three_hosts_compact_alike_and_serve_the_same_batches(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    hosts: dict[str, ReplicaHost] = {}

    def sender(source: str) -> object:
        def send(peer: str, bundle: PeerBundle) -> None:
            loop.call_soon(lambda: hosts[peer].on_bundle(source, bundle))

        return send

    host_config = HostConfig(
        retention_check_ms=200, disk_free_bytes_min=0, disk_free_percent_min=0.0
    )
    for index, node in enumerate(NODES):
        log_config = LogConfig(segment_bytes_max=2_000 + 700 * index, preallocate_bytes_max=0)
        hosts[node] = ReplicaHost(
            node,
            str(tmp_path / node),
            ReplicaConfig.local(),
            log_config,
            send=sender(node),  # type: ignore[arg-type]
            owner=_Owner(COMPACT),
            fsync=False,
            host_config=host_config,
        )
    try:
        group = GroupConfig(tuple(NodeId(n) for n in NODES))
        for host in hosts.values():
            await host.start()
            host.open_replica(KEY, group)
        leader = hosts["n1"]
        await wait_until(
            lambda: leader.get(KEY).core.role is Role.LEADER,  # type: ignore[union-attr]
            "n1 leads",
            timeout_s=DEADLINE_S,
        )
        for index in range(120):
            key = b"k%d" % (index % 10)
            value = None if index == 100 else b"value-%d" % index  # one tombstone
            batch = encode_batch([value], keys=[key], timestamps_ms=1)
            await leader.produce(KEY, batch, Acks.ALL, DEADLINE_S)

        def compacted_alike() -> bool:
            replicas = [host.get(KEY) for host in hosts.values()]
            if any(r is None or r.compacting for r in replicas):
                return False
            done = {r.core.compacted_through for r in replicas}  # type: ignore[union-attr]
            ends = {r.log.end_offset for r in replicas}  # type: ignore[union-attr]
            return len(done) == 1 and done != {-1} and len(ends) == 1

        await wait_until(compacted_alike, "every replica applied the same commands",
                         timeout_s=DEADLINE_S)  # fmt: skip
        logs = [_batches(host.get(KEY).log) for host in hosts.values()]  # type: ignore[union-attr]
        assert logs[0] == logs[1] == logs[2]
        records = [
            (record.offset, record.key)
            for batch in logs[0]
            if not parse_header(batch).is_control
            for record in decode_records(batch)
        ]
        assert len(records) < 120  # superseded records are gone, offsets kept
        assert sorted({key for _, key in records}) == [b"k%d" % i for i in range(10)]
        sealed = [host.get(KEY).log.sealed_segments() for host in hosts.values()]  # type: ignore[union-attr]
        assert sealed[0] != sealed[1]  # different segment boundaries, same bytes
    finally:
        for host in hosts.values():
            await host.close()
