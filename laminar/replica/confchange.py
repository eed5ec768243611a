"""Configuration changes: their control batches, and the next single change.

A group changes its members one node at a time (design §6): each change is a
control batch (key :data:`CONTROL_CONFIG`, msgpack value ``{"voters": [...],
"learners": [...]}``) that takes effect when appended. Which change comes next is
:func:`next_change`, a pure function of the configuration in effect, the placement
target and what the leader knows of its peers (as etcd raft's ``confchange``);
the core decides when to ask (a stable leader, a settled target) and appends the
result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from laminar.records import BatchHeader, BatchLimits, decode_batch, encode_control_batch
from laminar.replica.types import GroupConfig, NodeId
from laminar.segment.storage import Buffer

CONTROL_NOOP = b"noop"
"""The control batch a new leader appends to commit an entry of its own term."""
CONTROL_CONFIG = b"config"
"""The control batch holding a group configuration."""


def encode_config(config: GroupConfig, timestamp_ms: int) -> bytes:
    """The control batch that makes ``config`` the group's configuration."""
    data = msgpack.packb({"voters": list(config.voters), "learners": list(config.learners)})
    return encode_control_batch(CONTROL_CONFIG, data, timestamp_ms)


def decode_config(data: bytes) -> GroupConfig:
    """The configuration in a :data:`CONTROL_CONFIG` batch's value."""
    value = msgpack.unpackb(data)
    return GroupConfig(
        tuple(NodeId(voter) for voter in value["voters"]),
        tuple(NodeId(learner) for learner in value["learners"]),
    )


def config_in(header: BatchHeader, batch: Buffer, limits: BatchLimits) -> GroupConfig | None:
    """The configuration ``batch`` holds, or None when it holds none."""
    if not header.is_control:
        return None
    decoded = decode_batch(batch, verify=False, limits=limits)
    if decoded.keys[0] != CONTROL_CONFIG:
        return None
    value = decoded.values[0]
    assert value is not None
    return decode_config(value)


@dataclass(frozen=True, slots=True)
class TransferTo:
    """The leader itself is to leave the voters: hand leadership to ``node`` first
    (the next leader then removes it)."""

    node: NodeId


def next_change(
    config: GroupConfig,
    target: tuple[NodeId, ...] | None,
    *,
    leader: NodeId,
    caught_up: Callable[[NodeId], bool],
    healing: Callable[[NodeId], bool],
) -> GroupConfig | TransferTo | None:
    """The next single change of ``config``, decided by its ``leader``; None for none.

    First a voter healing from damaged storage becomes a learner (one at a time), so
    the remaining voters hold everything committed. Then, towards ``target`` (None:
    no target to move towards yet), in order: add a missing node as a learner;
    promote a learner of the target that ``caught_up`` (and remove nothing while one
    still catches up); remove a learner, then a voter, that the target leaves out.
    The leader removes itself last, and only by handing leadership to a caught-up
    voter of the target (:class:`TransferTo`); a sole voter is never removed.

    ``caught_up`` and ``healing`` answer for a peer from the leader's progress
    (neither is asked about the leader itself).
    """
    for node in config.voters:
        if node != leader and healing(node):
            remaining = tuple(v for v in config.voters if v != node)
            return GroupConfig(remaining, (*config.learners, node))
    if target is None:
        return None
    voters, learners = list(config.voters), list(config.learners)
    for node in target:
        if node not in voters and node not in learners:
            return GroupConfig(config.voters, (*config.learners, node))
    waiting = [node for node in learners if node in target]
    ready = [node for node in waiting if caught_up(node)]
    if ready:
        node = ready[0]
        learners.remove(node)
        return GroupConfig((*config.voters, node), tuple(learners))
    if waiting:
        return None  # a replacement is catching up: remove nothing before it votes
    if leaving := [node for node in learners if node not in target]:
        learners.remove(leaving[0])
        return GroupConfig(config.voters, tuple(learners))
    if leaving := [node for node in voters if node not in target]:
        node = leaving[0] if leaving[0] != leader or len(leaving) == 1 else leaving[1]
        if node == leader:
            successor = next((n for n in target if n in voters and caught_up(n)), None)
            return TransferTo(successor) if successor is not None else None
        if len(voters) == 1:
            return None
        voters.remove(node)
        return GroupConfig(tuple(voters), config.learners)
    return None
