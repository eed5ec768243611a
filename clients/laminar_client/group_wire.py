"""Consumer groups on the wire: the ``__groups`` partition that coordinates a group,
the typed results of the group calls, and the conversions between the protobuf
messages and the sans-IO dataclasses of :mod:`laminar.groups` (heartbeats, their
answers, commit results). No I/O and no session: :class:`~laminar_client.client.Client`
makes the calls with these, :class:`~laminar_client.groups.GroupSession` drives a
member with the client (every name here is re-exported by
:mod:`laminar_client.groups`)."""

from __future__ import annotations

from dataclasses import dataclass

from laminar.errors import InvalidInputError, LaminarError
from laminar.groups.coordinator import AnswerMember, HeartbeatAnswer, HeartbeatRequest
from laminar.grpc_errors import error_from_detail
from laminar.partitioning import key_partition
from laminar.v1 import laminar_pb2 as pb

__all__ = [
    "GROUPS_PARTITIONS",
    "GROUPS_TOPIC",
    "GROUP_PARTITIONS_PER_CALL_MAX",
    "CommittedOffset",
    "GroupDescription",
    "GroupMemberInfo",
    "GroupPartitionInfo",
    "GroupSummary",
    "answer_from_proto",
    "check_partition_count",
    "commit_results",
    "group_partition",
    "heartbeat_to_proto",
]

GROUPS_TOPIC = "__groups"
"""The internal topic holding the groups (``laminar.server.groups.GROUPS_TOPIC``)."""
GROUPS_PARTITIONS = 8
"""Its partition count, fixed for a cluster's life (``laminar.server.groups``)."""
GROUP_PARTITIONS_PER_CALL_MAX = 10_000
"""Most partitions one commit, fetch or reset names (the server's limit)."""


def group_partition(group: str) -> tuple[str, int]:
    """The ``__groups`` partition whose leader coordinates ``group``."""
    return GROUPS_TOPIC, key_partition(group.encode(), GROUPS_PARTITIONS)


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A partition's committed position (``next_offset`` None: nothing committed)."""

    topic: str
    partition: int
    next_offset: int | None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One line of :meth:`Client.list_groups`."""

    group: str
    state: str
    member_count: int
    coordinator: str


@dataclass(frozen=True, slots=True)
class GroupMemberInfo:
    """A member as the coordinator holds it."""

    member_id: str
    instance_id: str | None
    weight: float
    member_epoch: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    host: str | None = None
    """``host:port`` it last heartbeated from (None: not heard by this coordinator yet)."""


@dataclass(frozen=True, slots=True)
class GroupPartitionInfo:
    """A partition of the group: confirmed owner, target and committed position."""

    topic: str
    partition: int
    owner: str | None
    assignment_epoch: int
    target: str | None
    committed_offset: int | None
    metadata: str


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """:meth:`Client.describe_group`: state is dead, empty, stable or reconciling."""

    group: str
    state: str
    group_epoch: int
    coordinator: str
    topics: tuple[str, ...]
    pattern: str | None
    members: tuple[GroupMemberInfo, ...]
    partitions: tuple[GroupPartitionInfo, ...]

    @classmethod
    def from_proto(cls, answer: pb.DescribeGroupResponse) -> GroupDescription:
        return cls(
            group=answer.group,
            state=answer.state,
            group_epoch=answer.group_epoch,
            coordinator=answer.coordinator,
            topics=tuple(answer.topics),
            pattern=answer.pattern or None,
            members=tuple(
                GroupMemberInfo(
                    m.member_id,
                    m.instance_id or None,
                    m.weight,
                    m.member_epoch,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.host or None,
                )
                for m in answer.members
            ),
            partitions=tuple(
                GroupPartitionInfo(
                    p.topic,
                    p.partition,
                    p.owner or None,
                    p.assignment_epoch,
                    p.target or None,
                    p.committed_offset if p.HasField("committed_offset") else None,
                    p.metadata,
                )
                for p in answer.partitions
            ),
        )


# ----------------------------------------------------------------------------- wire


def heartbeat_to_proto(request: HeartbeatRequest) -> pb.GroupHeartbeatRequest:
    """The wire form of a sans-IO heartbeat (``leave`` is LeaveGroup's, not sent)."""
    subscription = request.subscription
    return pb.GroupHeartbeatRequest(
        group=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id or "",
        weight=request.weight,
        topics=list(subscription.topics),
        pattern=subscription.pattern or "",
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        released=[
            pb.GroupPartitionEpoch(topic=topic, partition=index, assignment_epoch=epoch)
            for topic, index, epoch in request.released
        ],
    )


def answer_from_proto(group: str, response: pb.GroupHeartbeatResponse) -> HeartbeatAnswer:
    """The sans-IO answer :meth:`GroupMember.on_answer` takes."""
    return HeartbeatAnswer(
        group_id=group,
        member_id=response.member_id,
        fenced=False,
        group_epoch=response.group_epoch,
        member_epoch=response.member_epoch,
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        members=tuple(AnswerMember(m.member_id, m.key, m.weight) for m in response.members),
        partition_counts=tuple((t.topic, t.partitions) for t in response.topics),
        owned=tuple((p.topic, p.partition, p.assignment_epoch) for p in response.owned),
        committed=tuple(
            (p.topic, p.partition, p.committed_offset)
            for p in response.owned
            if p.HasField("committed_offset")
        ),
        assigned=tuple((p.topic, p.partition) for p in response.assigned),
    )


def commit_results(
    response: pb.CommitOffsetsResponse,
) -> dict[tuple[str, int], LaminarError | None]:
    """Per partition: None when the commit applied, else its typed error."""
    return {
        (p.topic, p.partition): error_from_detail(p.error) if p.HasField("error") else None
        for p in response.partitions
    }


def check_partition_count(count: int, what: str) -> None:
    if not 1 <= count <= GROUP_PARTITIONS_PER_CALL_MAX:
        raise InvalidInputError(
            f"{what} names 1 to {GROUP_PARTITIONS_PER_CALL_MAX} partitions, got {count}"
        )
