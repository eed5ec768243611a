"""Placement remembers a dead member after gossip forgets it (issue 30).

Gossip reaps a dead member ``reap_after_ms`` after declaring it (15-30 s), long
before ``replica_move_grace_ms`` (minutes with ``lan``) or ``maintenance_grace_ms``
(hours) end; placement must keep counting it until its grace is over, or its
replicas move at the next member event. Three whole nodes in one process (the
harness of ``test_node_inprocess``), with a 0.4 s reap and a 60 s move grace.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from pathlib import Path

from laminar.membership import config as membership_presets
from laminar.server.node import Node
from tests.server.test_node_inprocess import DEADLINE_S, MemoryDisks, config, run, wait_until


@run
async def test_a_member_gossip_reaped_keeps_its_place_until_its_grace_ends(tmp_path: Path) -> None:
    membership = dataclasses.replace(
        membership_presets.local(), gossip_to_dead_ms=300, reap_after_ms=400
    )
    disks = MemoryDisks()
    nodes: list[Node] = []
    try:
        for index in range(3):
            node_config = config(
                tmp_path, index, membership=membership, replica_move_grace_ms=60_000
            )
            nodes.append(await Node.open(node_config, log_factory=disks.open))
        await wait_until(
            lambda: all(len(n.members()) == 3 for n in nodes), "every node to see the others"
        )
        observer, other, victim = nodes
        await victim.stop(graceful=False)  # a crash: declared dead, then reaped

        # Each weight change is a member event that hands the observer a fresh view;
        # once gossip has reaped the victim, that view no longer holds it.
        weights = itertools.cycle((2.0, 1.0))
        deadline = time.monotonic() + DEADLINE_S
        while any(m.node_id == "n2" for m in observer.members()):
            assert time.monotonic() < deadline, "gossip never forgot n2"
            other.update_self(next(weights), None)
            await asyncio.sleep(0.2)
        placed = {m.node_id: m.alive for m in observer.placement_members()}
        assert placed == {"n0": True, "n1": True, "n2": True}  # within its move grace
    finally:
        for node in nodes:
            await node.stop(graceful=False)
