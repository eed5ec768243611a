"""What a replica persists besides its log: the state file's content.

The state holds the current term, the vote cast in it, the history of the group's
configurations (each with the offset of its control batch; the founding one at
:data:`BOOTSTRAP_OFFSET`), the terms just below the log start (retention deleted
their batches) and, while the replica heals from damaged storage, where the damage
was found. It is msgpack, version :data:`STATE_VERSION`::

    {"v": 1, "term": int, "vote": str | None,
     "configs": [[offset, [voter, ...], [learner, ...]], ...],   # offset order
     "start": [[term, offset], ...],                             # offset order
     "heal": int,                                                # only while healing
     "compacted": int}                                           # once compacted

``compacted`` is the offset of the last ``compact`` control batch the replica's
shell applied (keyed compaction, :mod:`laminar.replica.compaction_control`); the
core gives the shell again every committed command past it after a restart. A node
that predates it ignores the key (it only re-runs commands: they are idempotent).

When it is saved (staged for the next sync, or written at once) is the core's
decision (:meth:`~laminar.replica.core.ReplicaCore._save_state`); the storage
keeps it durable (two checksummed slots, :mod:`laminar.segment.statefile`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import msgpack

from laminar.replica.types import GroupConfig, NodeId

STATE_VERSION = 1
BOOTSTRAP_OFFSET = -1
"""The offset of the configuration a group was created with: it precedes the log."""


@dataclass(frozen=True, slots=True)
class PersistedState:
    """A state file's content, as read back."""

    term: int
    vote: NodeId | None
    configs: list[tuple[int, GroupConfig]]
    start_epochs: list[list[int]]
    """(term, offset) pairs: the term of the entries from ``offset`` on, below the
    log start."""
    healing_since: int | None = None
    """The log end when storage damage was found, while the replica heals."""
    compacted_through: int = -1
    """The offset of the last keyed compaction command applied (-1: none)."""


def _check(term: int, configs: Sequence[tuple[int, GroupConfig]]) -> str | None:
    """What is wrong with a state's term and configurations, or None: the invariants
    asserted before a write and checked after a read."""
    if term < 0:
        return f"negative term {term}"
    offsets = [offset for offset, _ in configs]
    if any(later <= earlier for earlier, later in pairwise(offsets)):
        return f"configuration offsets not increasing: {offsets}"
    if offsets and offsets[0] < BOOTSTRAP_OFFSET:
        return f"configuration offset below the bootstrap one: {offsets[0]}"
    return None


def encode_state(
    term: int,
    vote: NodeId | None,
    configs: Sequence[tuple[int, GroupConfig]],
    start_epochs: Sequence[Sequence[int]],
    healing_since: int | None = None,
    compacted_through: int = -1,
) -> bytes:
    """The state file's content (``heal`` only while healing)."""
    problem = _check(term, configs)
    assert problem is None, problem
    state: dict[str, object] = {
        "v": STATE_VERSION,
        "term": term,
        "vote": vote,
        "configs": [[o, list(c.voters), list(c.learners)] for o, c in configs],
        "start": [list(pair) for pair in start_epochs],
    }
    if healing_since is not None:
        state["heal"] = healing_since
    if compacted_through >= 0:
        state["compacted"] = compacted_through
    packed: bytes = msgpack.packb(state)
    return packed


def decode_state(saved: bytes) -> PersistedState:
    """A state file's content; ValueError for another version or impossible values."""
    state = msgpack.unpackb(saved)
    if state.get("v") != STATE_VERSION:
        raise ValueError(f"unsupported replica state version {state.get('v')!r}")
    term = int(state["term"])
    vote = state["vote"]
    configs = [
        (int(o), GroupConfig(tuple(map(NodeId, v)), tuple(map(NodeId, lr))))
        for o, v, lr in state["configs"]
    ]
    problem = _check(term, configs)
    if problem is not None:
        raise ValueError(f"replica state: {problem}")
    heal = state.get("heal")
    compacted = int(state.get("compacted", -1))
    if compacted < -1:
        raise ValueError(f"replica state: compacted offset {compacted}")
    return PersistedState(
        term=term,
        vote=NodeId(vote) if vote is not None else None,
        configs=configs,
        start_epochs=[[int(t), int(o)] for t, o in state.get("start", [])],
        healing_since=None if heal is None else int(heal),
        compacted_through=compacted,
    )


def founding_state(initial: GroupConfig) -> bytes:
    """The state of a founding replica of a new group: term 1, voted for the first
    voter, the founding configuration. Term 1 belongs to the first voter by
    construction, so a new group needs no election; every later one is for term 2+.

    A node may act on it only when it first creates the replica: a replica deleted
    and created again must not lead term 1 a second time with a different log (the
    node keeps a founded-offset marker for that; see ``laminar.server.node``).
    """
    return encode_state(1, initial.voters[0], [(BOOTSTRAP_OFFSET, initial)], [])
