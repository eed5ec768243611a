"""The node's protocol decisions as pure functions (no I/O, no clock, no state).

The node (:mod:`laminar.server.node`) is a shell: it gathers inputs (the membership
view, the catalogue, the time) and acts on what these functions decide. Each has
table tests in ``tests/server/test_rules.py``.

- :func:`placement_members` and :func:`placement_targets`: which nodes should hold
  each partition. Two graces apply to a member that membership declared dead:
  *leadership* moves at once (its groups elect a new leader within about an
  election timeout, and a non-hosting node stops naming it as leader), while its
  *replicas* move only after ``replica_move_grace_ms`` (minutes on a LAN, like
  Redpanda's node-availability timeout), so that a slow restart or a short
  partition does not re-copy every partition it held. A member in maintenance
  (the cluster metadata says so) keeps them for ``maintenance_grace_ms`` instead,
  when that is longer (hours: an OS upgrade, a disk swap).
- :func:`join_decision`: what a starting node does about the cluster id.
- :func:`plan_topic`: the founding replicas of a new topic, or of the partitions
  added to one (never on a node out of disk space).
- :func:`shutdown_successor`: to whom a stopping leader hands a partition.
- :func:`leader_hint`: whom a ``NOT_LEADER`` answer names, so that the client goes
  there next (the service adds that node's gRPC address).
- :func:`full_last`: a target as given to the replica host, nodes that may not
  lead (out of disk space, in maintenance) moved last (never the preferred
  leader, yet still replicas).
- The in-sync rule lives with the commit rule, :func:`laminar.replica.quorum.in_sync`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from laminar.errors import InvalidTopicError
from laminar.ids import TopicPartition
from laminar.membership import Member, MemberState
from laminar.placement import PlacementMember, partition_key, replicas

METADATA_PARTITION: TopicPartition = ("__cluster", 0)
METADATA_REPLICATION_MAX = 3


def placement_members(
    view: Iterable[Member],
    self_id: str,
    dead_since_ms: Mapping[str, int],
    now_ms: int,
    replica_move_grace_ms: int,
    maintenance: Collection[str] = (),
    maintenance_grace_ms: int = 0,
    refused: Collection[str] = (),
) -> list[PlacementMember]:
    """The membership view as placement sees it.

    Alive and suspect members hold replicas; a dead one keeps them until it has been
    dead for ``replica_move_grace_ms`` (``dead_since_ms`` says since when), or for
    ``maintenance_grace_ms`` when it is in ``maintenance`` and that is longer; a
    member that left holds none, unless it is in maintenance (then it is as dead:
    a graceful stop). ``view`` may hold members gossip already reaped: their
    grace is not over. A member in ``refused`` (its protocol version is
    incompatible: no replication with it) holds none. This node always counts as
    alive.
    """
    members = []
    for member in view:
        if member.node_id == self_id:
            alive = True
        elif member.node_id in refused:
            alive = False
        elif member.state is MemberState.DEAD or (
            member.state is MemberState.LEFT and member.node_id in maintenance
        ):
            since = dead_since_ms.get(member.node_id, now_ms)
            grace_ms = replica_move_grace_ms
            if member.node_id in maintenance:
                grace_ms = max(grace_ms, maintenance_grace_ms)
            alive = now_ms - since < grace_ms
        else:
            alive = member.state in (MemberState.ALIVE, MemberState.SUSPECT)
        members.append(
            PlacementMember(member.node_id, weight=member.weight, zone=member.zone, alive=alive)
        )
    return members


def placement_targets(
    members: Sequence[PlacementMember],
    topics: Mapping[str, tuple[int, int]],
) -> dict[TopicPartition, tuple[str, ...]]:
    """Each partition's target replica list, preferred leader first.

    ``topics`` maps a topic name to ``(partitions, replication_factor)``. The
    metadata partition has ``min(3, eligible members)`` replicas (at least one).
    """
    eligible = sum(1 for member in members if member.eligible)
    k_metadata = max(1, min(METADATA_REPLICATION_MAX, eligible))
    targets = {
        METADATA_PARTITION: replicas(partition_key(*METADATA_PARTITION), members, k_metadata)
    }
    for name, (partitions, factor) in topics.items():
        for partition in range(partitions):
            targets[(name, partition)] = replicas(partition_key(name, partition), members, factor)
    return targets


def plan_topic(
    name: str,
    partitions: int,
    replication_factor: int,
    members: Sequence[PlacementMember],
    full: Collection[str] = (),
    *,
    first_partition: int = 0,
) -> list[tuple[str, ...]]:
    """The founding replicas of each partition of a new topic (of partitions
    ``first_partition`` up to ``partitions``: those added to a topic).

    Members in ``full`` (out of disk space) found nothing: placement ranks the
    others, and once a full node has space again the leaders move the replicas
    placement gives it there. Raises :class:`InvalidTopicError` when fewer members
    than the replication factor can hold replicas (alive, weight > 0, not full).
    """
    eligible_ids = sorted(member.node_id for member in members if member.eligible)
    full_ids = [node for node in eligible_ids if node in full]
    if full_ids:
        members = [member for member in members if member.node_id not in full]
    eligible = len(eligible_ids) - len(full_ids)
    if replication_factor > eligible:
        out_of_space = f" ({', '.join(full_ids)} out of disk space)" if full_ids else ""
        raise InvalidTopicError(
            f"replication_factor {replication_factor} needs as many nodes with weight > 0 "
            f"and disk space; the cluster has {eligible}{out_of_space}"
        )
    return [
        replicas(partition_key(name, partition), members, replication_factor)
        for partition in range(first_partition, partitions)
    ]


class Join(enum.Enum):
    """What a starting node does about the cluster id (see :func:`join_decision`)."""

    START = "start"
    """Start with the id it has."""
    ADOPT = "adopt"
    """Take the one id the cluster gossips, save it, and start."""
    WAIT = "wait"
    """Keep listening to gossip."""
    MISMATCH = "mismatch"
    """It belongs to another cluster than its peers: refuse to start."""
    NO_CLUSTER = "no_cluster"
    """A new node found no cluster through its seeds in time: refuse to start."""


@dataclass(frozen=True, slots=True)
class JoinDecision:
    action: Join
    cluster_id: str | None = None


def join_decision(
    known: str | None,
    seen: Iterable[str],
    *,
    has_seeds: bool,
    waited_ms: int,
    restart_wait_ms: int,
    join_wait_ms: int,
) -> JoinDecision:
    """Decide from the cluster ids ``seen`` in the peers' gossip.

    A node with an id (``known``) starts once a peer confirms it, or at once
    without seeds, or after ``restart_wait_ms`` of quiet seeds (a restart while the
    peers are away: they will come). Any peer with a different id and none with its
    own is a mismatch. A new node adopts the one id its peers agree on, and gives up
    after ``join_wait_ms``; peers gossiping several ids make it wait.
    """
    ids = sorted(set(seen))
    if known is not None:
        if ids:
            return JoinDecision(Join.START if known in ids else Join.MISMATCH, known)
        if not has_seeds or waited_ms >= restart_wait_ms:
            return JoinDecision(Join.START, known)
        return JoinDecision(Join.WAIT)
    if len(ids) == 1:
        return JoinDecision(Join.ADOPT, ids[0])
    if waited_ms >= join_wait_ms:
        return JoinDecision(Join.NO_CLUSTER)
    return JoinDecision(Join.WAIT)


def full_last(target: tuple[str, ...], full: Collection[str]) -> tuple[str, ...]:
    """``target`` with the nodes in ``full`` (that may not lead: out of disk space, or
    in maintenance) moved to its end, in their order: the first replica is the
    preferred leader, and the successor of a dead leader is the next one, so neither
    is a node that may not lead. The set of replicas does not change (a full node
    keeps its replicas)."""
    if not full or not any(node in full for node in target):
        return target
    return tuple(n for n in target if n not in full) + tuple(n for n in target if n in full)


def shutdown_successor(
    self_id: str, voters: Sequence[str], match_offsets: Mapping[str, int]
) -> str | None:
    """The voter a stopping leader hands leadership to: the one whose log matches
    furthest (ties to the smaller node id), or None when it is the only voter."""
    others = sorted(
        (voter for voter in voters if voter != self_id),
        key=lambda voter: (-match_offsets.get(voter, -1), voter),
    )
    return others[0] if others else None


def leader_hint(
    self_id: str, known_leader: str | None, target: Sequence[str], gone: Collection[str]
) -> str | None:
    """Whom a node that does not lead a partition names in its ``NOT_LEADER`` answer.

    The leader its replica knows, if it has one that knows; else placement's first
    replica (``target``) that gossip does not call dead or gone (a dead node keeps
    its place in the target through the replica move grace, but leads nothing), and
    never this node: it may be in the target without a replica yet (catching up on
    the catalogue), and naming itself would send the client straight back. None
    when there is nobody to name (the client asks another node for metadata)."""
    if known_leader is not None:
        return known_leader
    for replica in target:
        if replica != self_id and replica not in gone:
            return replica
    return None
