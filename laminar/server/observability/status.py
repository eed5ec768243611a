"""``/status.json``: what the status page (``GET /``, :mod:`.page`) shows.

Two steps, as for a scrape. On the node's event loop, :func:`gather_status` takes
this node's ``NodeStatus`` answer in one go (the DescribeCluster answer, counter
samples, leadership changes, groups: one instant) and the topic catalogue, then
asks every other live member for its ``NodeStatus`` in parallel, each within
``status_call_timeout_ms``. Off the loop, :func:`build_status` merges the answers
into the page's JSON (a pure function of a :class:`StatusInput`): members with
their state, maintenance, full disk and whether they answered; every partition as
its leader reports it (``DescribeCluster``'s rule: a partition of the catalogue no
answering node leads is shown leaderless and under-replicated); each node's produce
and fetch rates from its samples; groups with their lag against the leaders' high
watermarks; fenced and damaged replicas; the newest leadership changes. Every list
is capped, with a count of what was left out.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc

if TYPE_CHECKING:
    from laminar.server.node import Node

PARTITIONS_SHOWN_MAX = 500
"""Partitions listed (under-replicated first); the rest are counted."""
GROUPS_SHOWN_MAX = 200
REPLICA_PROBLEMS_SHOWN_MAX = 100
"""Fenced replicas listed, and damaged ones."""
LEADERSHIP_CHANGES_SHOWN_MAX = 50
ASKED_STATES = ("alive", "suspect")
"""Members asked for their status; the others are shown as not asked."""

Catalogue = tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]
"""Each topic (by name) with each partition's placement target."""


@dataclass(frozen=True, slots=True)
class StatusInput:
    """What :func:`build_status` merges: the serving node's own answer, the other
    members' answers (or why there is none), and the topic catalogue."""

    local: pb.NodeStatusResponse
    answers: Mapping[str, pb.NodeStatusResponse | str]
    catalogue: Catalogue


async def gather_status(node: Node, timeout_s: float) -> StatusInput:
    """Run on the node's loop: its own answer and catalogue (no await between the
    reads), then every other live member's answer, in parallel."""
    local = node.service.node_status()
    catalogue = tuple(
        (
            name,
            tuple(node.target_of((name, index)) for index in range(topic.spec.partitions)),
        )
        for name, topic in sorted(node.metadata.topics.items())
    )
    answers: dict[str, pb.NodeStatusResponse | str] = {}
    asked = []
    for member in local.cluster.members:
        if member.node_id == node.node_id:
            continue
        if member.state not in ASKED_STATES or not member.grpc_address:
            answers[member.node_id] = f"not asked: {member.state}"
        else:
            asked.append(member)
    results = await asyncio.gather(
        *(_ask(node, member.grpc_address, timeout_s) for member in asked),
        return_exceptions=True,  # one failed call (a closing channel) spoils no other
    )
    for member, result in zip(asked, results, strict=True):
        answers[member.node_id] = (
            f"failed: {type(result).__name__}: {str(result)[:200]}"
            if isinstance(result, BaseException)
            else result
        )
    return StatusInput(local, answers, catalogue)


async def _ask(node: Node, address: str, timeout_s: float) -> pb.NodeStatusResponse | str:
    stub = laminar_pb2_grpc.LaminarStub(node.channels.get(address))  # type: ignore[no-untyped-call]
    try:
        answer: pb.NodeStatusResponse = await stub.NodeStatus(
            pb.NodeStatusRequest(), timeout=timeout_s, metadata=node.node_call_metadata()
        )
    except grpc.aio.AioRpcError as error:
        code = error.code()
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"no answer within {int(timeout_s * 1000)} ms"
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return "no NodeStatus (an older version)"
        return f"{code.name.lower()}: {(error.details() or '')[:200]}"
    return answer


def build_status(status: StatusInput) -> dict[str, Any]:
    """The page's JSON (module docstring); pure."""
    local = status.local
    answered = {local.cluster.node_id: local}
    answered.update(
        (node_id, answer)
        for node_id, answer in sorted(status.answers.items())
        if isinstance(answer, pb.NodeStatusResponse)
    )
    partitions = _partitions(answered, status.catalogue)
    shown = sorted(partitions.values(), key=_partition_order)
    visible = [p for p in shown if not p["topic"].startswith("__") or p["under_replicated"]]
    groups, groups_more = _groups(answered, partitions)
    fenced, fenced_more = _replica_problems(answered, "fenced")
    damaged, damaged_more = _replica_problems(answered, "damaged")
    return {
        "cluster_id": local.cluster.cluster_id,
        "node_id": local.cluster.node_id,
        "members": _members(status),
        "partitions_total": len(partitions),
        "under_replicated": sum(1 for p in partitions.values() if p["under_replicated"]),
        "leaderless": sum(1 for p in partitions.values() if p["leader"] is None),
        "partitions": visible[:PARTITIONS_SHOWN_MAX],
        "partitions_more": max(0, len(visible) - PARTITIONS_SHOWN_MAX),
        "rates": _rates(status, answered),
        "groups": groups,
        "groups_more": groups_more,
        "fenced": fenced,
        "fenced_more": fenced_more,
        "damaged": damaged,
        "damaged_more": damaged_more,
        "leadership_changes": _leadership_changes(answered),
    }


def _members(status: StatusInput) -> list[dict[str, Any]]:
    local = status.local.cluster
    maintenance = set(local.maintenance)
    members = []
    for member in sorted(local.members, key=lambda m: m.node_id):
        answer = (
            status.local
            if member.node_id == local.node_id
            else status.answers.get(member.node_id, "not asked")
        )
        reply = answer if isinstance(answer, pb.NodeStatusResponse) else None
        members.append(
            {
                "node_id": member.node_id,
                "state": member.state,
                "grpc_address": member.grpc_address,
                "zone": member.zone,
                "weight": member.weight,
                "maintenance": member.node_id in maintenance,
                "disk_full": None if reply is None else reply.cluster.disk.full,
                "answered": reply is not None,
                "error": None if isinstance(answer, pb.NodeStatusResponse) else answer,
                "serving": member.node_id == local.node_id,
            }
        )
    return members


def _partitions(
    answered: Mapping[str, pb.NodeStatusResponse], catalogue: Catalogue
) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition as its leader reports it (the highest term where two nodes
    both still think they lead), then the catalogue's partitions nobody leads."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for answer in answered.values():
        for health in answer.cluster.partitions:
            key = (health.topic, health.partition)
            known = found.get(key)
            if known is not None and known["term"] >= health.term:
                continue
            found[key] = {
                "id": f"{health.topic}/{health.partition}",
                "topic": health.topic,
                "partition": health.partition,
                "leader": health.leader,
                "replicas": list(health.replicas),
                "in_sync": list(health.in_sync),
                "high_watermark": health.high_watermark,
                "under_replicated": health.under_replicated,
                "term": health.term,
            }
    for topic, targets in catalogue:
        for index, target in enumerate(targets):
            found.setdefault(
                (topic, index),
                {
                    "id": f"{topic}/{index}",
                    "topic": topic,
                    "partition": index,
                    "leader": None,
                    "replicas": list(target),
                    "in_sync": [],
                    "high_watermark": None,
                    "under_replicated": True,
                    "term": None,
                },
            )
    return found


def _partition_order(partition: dict[str, Any]) -> tuple[bool, str, int]:
    return (not partition["under_replicated"], partition["topic"], partition["partition"])


def _rates(
    status: StatusInput, answered: Mapping[str, pb.NodeStatusResponse]
) -> list[dict[str, Any]]:
    """Each member's produce and fetch rates (records/s) between its samples,
    newest last; an interval over a restart (a counter went down) is left out."""
    rates: list[dict[str, Any]] = []
    for member in sorted(status.local.cluster.members, key=lambda m: m.node_id):
        answer = answered.get(member.node_id)
        if answer is None:
            reason = status.answers.get(member.node_id, "not asked")
            rates.append({"node_id": member.node_id, "points": [], "error": str(reason)})
            continue
        points = []
        samples = list(answer.samples)
        for before, after in itertools.pairwise(samples):
            elapsed_ms = before.age_ms - after.age_ms
            if elapsed_ms <= 0 or after.produced_records < before.produced_records:
                continue
            if after.fetched_records < before.fetched_records:
                continue
            points.append(
                {
                    "ago_s": round(after.age_ms / 1000, 1),
                    "produce": round(
                        (after.produced_records - before.produced_records) * 1000 / elapsed_ms, 1
                    ),
                    "fetch": round(
                        (after.fetched_records - before.fetched_records) * 1000 / elapsed_ms, 1
                    ),
                }
            )
        rates.append(
            {
                "node_id": member.node_id,
                "interval_ms": answer.sample_interval_ms,
                "points": points,
                "error": None,
            }
        )
    return rates


def _groups(
    answered: Mapping[str, pb.NodeStatusResponse],
    partitions: Mapping[tuple[str, int], dict[str, Any]],
) -> tuple[list[dict[str, Any]], int]:
    """Each group once (its coordinator's answer), with its lag: the sum over its
    committed partitions of the leader's high watermark minus the committed offset
    (a partition whose leader did not answer is counted in ``lag_unknown``)."""
    groups: dict[str, dict[str, Any]] = {}
    more = 0
    for node_id, answer in answered.items():
        more += answer.groups_more
        for group in answer.groups:
            if group.group in groups:
                continue
            lag = lag_max = unknown = 0
            for committed in group.committed:
                head = partitions.get((committed.topic, committed.partition), {}).get(
                    "high_watermark"
                )
                if head is None:
                    unknown += 1
                    continue
                behind = max(0, head - committed.committed_offset)
                lag += behind
                lag_max = max(lag_max, behind)
            groups[group.group] = {
                "group": group.group,
                "coordinator": node_id,
                "state": group.state,
                "members": group.member_count,
                "partitions": len(group.committed) + group.committed_more,
                "lag_records": lag,
                "lag_max_records": lag_max,
                "lag_unknown": unknown + group.committed_more,
            }
    listed = [groups[name] for name in sorted(groups)]
    return listed[:GROUPS_SHOWN_MAX], more + max(0, len(listed) - GROUPS_SHOWN_MAX)


def _replica_problems(
    answered: Mapping[str, pb.NodeStatusResponse], kind: str
) -> tuple[list[dict[str, Any]], int]:
    """The fenced (or damaged) replicas of every answering node."""
    found = []
    for node_id, answer in answered.items():
        for replica in getattr(answer.cluster, kind):
            for_ms = replica.fenced_for_ms if kind == "fenced" else replica.damaged_for_ms
            found.append(
                {
                    "node_id": node_id,
                    "topic": replica.topic,
                    "partition": replica.partition,
                    "reason": replica.reason,
                    "for_s": round(for_ms / 1000, 1),
                }
            )
    found.sort(key=lambda item: (item["topic"], item["partition"], item["node_id"]))
    return found[:REPLICA_PROBLEMS_SHOWN_MAX], max(0, len(found) - REPLICA_PROBLEMS_SHOWN_MAX)


def _leadership_changes(answered: Mapping[str, pb.NodeStatusResponse]) -> list[dict[str, Any]]:
    """The newest changes, each once (every replica of a partition sees it: the
    earliest sighting dates it), newest first."""
    changes: dict[tuple[str, int, int, str], dict[str, Any]] = {}
    for node_id, answer in answered.items():
        for change in answer.leadership_changes:
            key = (change.topic, change.partition, change.term, change.leader)
            known = changes.get(key)
            if known is None:
                changes[key] = known = {
                    "id": f"{change.topic}/{change.partition}",
                    "topic": change.topic,
                    "partition": change.partition,
                    "leader": change.leader,
                    "term": change.term,
                    "ago_s": round(change.age_ms / 1000, 1),
                    "seen_by": [],
                }
            known["ago_s"] = max(known["ago_s"], round(change.age_ms / 1000, 1))
            known["seen_by"].append(node_id)
    newest = sorted(changes.values(), key=lambda c: (c["ago_s"], c["topic"], c["partition"]))
    return newest[:LEADERSHIP_CHANGES_SHOWN_MAX]
