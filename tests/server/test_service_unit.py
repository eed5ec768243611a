"""The gRPC service against a fake node (``laminar.server.api.NodeApi``): no
process, no replica, no consensus core; the calls go through the handlers with a
fake servicer context that records the abort."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pytest

from laminar.errors import LaminarError, NotLeaderError
from laminar.grpc_errors import ERROR_METADATA_KEY, error_from_detail
from laminar.ids import NodeId, TopicPartition
from laminar.membership import Member, MemberState
from laminar.placement import PlacementMember
from laminar.records import encode_batch
from laminar.replica.types import Acks, Role
from laminar.server.api import GroupCoordinators, NodeApi, PartitionHost, ReplicaStatus
from laminar.server.config import ServiceConfig
from laminar.server.disk import DiskStatus
from laminar.server.host import DamagedReplica, FencedReplica, ProduceResult
from laminar.server.keyring import NodeKeyring
from laminar.server.members import PROTOCOL_META
from laminar.server.metadata import METADATA_KEY, MetadataState, TopicSpec, TopicState
from laminar.server.observability.history import CounterHistory, LeadershipLog
from laminar.server.service import LaminarService
from laminar.server.transport import IncompatiblePeer
from laminar.v1 import laminar_pb2 as pb

NOW_MS = 1_000_000


def member(node_id: str, state: MemberState = MemberState.ALIVE, protocol: int = 2) -> Member:
    """A member as a node of this release gossips it (its peer protocol version)."""
    metadata = ((PROTOCOL_META, str(protocol)),)
    return Member(NodeId(node_id), "g", f"{node_id}:7100", 1.0, "", 1, state, metadata)


@dataclass
class FakeHost:
    """The few PartitionHost calls these tests make; produce answers offset 0."""

    produced: list[tuple[TopicPartition, bytes]] = field(default_factory=list)
    keys: list[TopicPartition] = field(default_factory=list)
    leadership_log: LeadershipLog = field(default_factory=LeadershipLog)

    def now_ms(self) -> int:
        return NOW_MS

    def replica_keys(self) -> list[TopicPartition]:
        return list(self.keys)

    def is_fenced(self, key: TopicPartition) -> bool:
        return False

    def fenced(self) -> list[FencedReplica]:
        return []

    def damaged(self) -> list[DamagedReplica]:
        return []

    def disk_status(self) -> DiskStatus:
        return DiskStatus(10, 20, 1, False)

    def full_nodes(self) -> frozenset[str]:
        return frozenset()

    async def produce(
        self, key: TopicPartition, batch: bytes, acks: Acks, timeout_s: float
    ) -> ProduceResult:
        self.produced.append((key, batch))
        return ProduceResult(0, False)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the service called host.{name}, which this test does not expect")


@dataclass
class FakeNode:
    """A NodeApi whose replicas are :class:`ReplicaStatus` values in a dict."""

    node_id: str = "n1"
    cluster_id: str = "c"
    view: list[Member] = field(default_factory=lambda: [member("n1"), member("n2")])
    replicas: dict[TopicPartition, ReplicaStatus] = field(default_factory=dict)
    in_sync: dict[TopicPartition, list[str]] = field(default_factory=dict)
    targets: dict[TopicPartition, tuple[str, ...]] = field(default_factory=dict)
    metadata: MetadataState = field(default_factory=MetadataState)
    fake_host: FakeHost = field(default_factory=FakeHost)
    protocol_version: int = 2

    @property
    def host(self) -> PartitionHost:
        return self.fake_host  # type: ignore[return-value]

    @property
    def groups(self) -> GroupCoordinators:
        raise AssertionError("no group call in these tests")

    @property
    def keyring(self) -> NodeKeyring:
        raise AssertionError("no keyring call in these tests")

    @property
    def counter_history(self) -> CounterHistory:
        return CounterHistory(1000)

    def serves(self, key: TopicPartition) -> bool:
        return key in self.replicas

    def replica_status(self, key: TopicPartition) -> ReplicaStatus | None:
        return self.replicas.get(key)

    def in_sync_voters(self, key: TopicPartition, now_ms: int) -> list[str]:
        return self.in_sync.get(key, [])

    def members(self) -> list[Member]:
        return list(self.view)

    def target_of(self, key: TopicPartition) -> tuple[str, ...]:
        return self.targets.get(key, ())

    def grpc_address_of(self, node_id: str | None) -> str | None:
        return None if node_id is None else f"{node_id}:7100"

    def placement_members(self) -> list[PlacementMember]:
        return []

    def incompatible_peers(self) -> list[IncompatiblePeer]:
        return []

    def update_self(self, weight: float | None, zone: str | None) -> Member:
        raise AssertionError("no update in these tests")

    async def wait_metadata(self, offset: int, timeout_s: float) -> None:
        return None


class AbortedError(Exception):
    pass


class FakeContext:
    """What ``abort_with`` uses of a servicer context: the error detail it sets."""

    def __init__(self) -> None:
        self.trailing: Sequence[tuple[str, Any]] = ()

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, Any]]) -> None:
        self.trailing = metadata

    async def abort(self, code: Any, details: str) -> NoReturn:
        raise AbortedError(code, details)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5000"


def call(service: LaminarService, method: str, request: Any) -> tuple[Any, LaminarError | None]:
    """Run one handler; its answer, or the Laminar error it aborted with."""
    context = FakeContext()
    try:
        answer = asyncio.run(getattr(service, method)(request, context))
    except AbortedError:
        (key, value), *_ = context.trailing
        assert key == ERROR_METADATA_KEY
        return None, error_from_detail(pb.ErrorDetail.FromString(value))
    return answer, None


def status(role: Role, leader: str | None, voters: tuple[str, ...] = ("n1", "n2")) -> ReplicaStatus:
    return ReplicaStatus(role, leader, 3, 42, voters, ())


def topic(name: str, partitions: int, replication_factor: int = 2) -> TopicState:
    return TopicState(TopicSpec(name, partitions, replication_factor), (), "id", 0)


def service_of(node: FakeNode) -> LaminarService:
    api: NodeApi = node  # the fake is checked against the protocol (mypy)
    return LaminarService(api, ServiceConfig())


def test_produce_goes_to_the_host_when_the_partition_is_served_here() -> None:
    node = FakeNode(replicas={("t", 0): status(Role.LEADER, "n1")})
    node.metadata.topics["t"] = topic("t", 2)
    batch = encode_batch([b"a"], timestamps_ms=1_700_000_000_000)
    request = pb.ProduceRequest(topic="t", partition=0, batches=[batch], acks=pb.ACKS_ALL)
    answer, error = call(service_of(node), "Produce", request)
    assert error is None and list(answer.base_offsets) == [0]
    assert node.fake_host.produced == [(("t", 0), batch)]


def test_produce_takes_each_batch_out_of_the_request_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading a repeated bytes field of a parsed message copies the bytes (upb), a
    whole batch each time (issue 33 point 8): the header check and the host must
    see the one copy the service took, not copies of their own."""
    from laminar.records import check_produced_header
    from laminar.server import service as service_module

    checked: list[bytes] = []

    def check(batch: bytes) -> Any:
        checked.append(batch)
        return check_produced_header(batch)

    monkeypatch.setattr(service_module, "check_produced_header", check)
    node = FakeNode(replicas={("t", 0): status(Role.LEADER, "n1")})
    node.metadata.topics["t"] = topic("t", 2)
    batch = encode_batch([b"a" * 1000], timestamps_ms=1_700_000_000_000)
    request = pb.ProduceRequest.FromString(
        pb.ProduceRequest(
            topic="t", partition=0, batches=[batch], acks=pb.ACKS_ALL
        ).SerializeToString()
    )
    assert request.batches[0] is not request.batches[0]  # each read a copy
    answer, error = call(service_of(node), "Produce", request)
    assert error is None and list(answer.base_offsets) == [0]
    ((_, produced),) = node.fake_host.produced
    assert produced == batch and produced is checked[0]


def test_produce_to_a_partition_not_served_here_names_placements_live_replica() -> None:
    node = FakeNode(view=[member("n1"), member("n2", MemberState.DEAD), member("n3")])
    node.metadata.topics["t"] = topic("t", 2)
    node.targets[("t", 1)] = ("n2", "n3")
    batch = encode_batch([b"a"], timestamps_ms=1_700_000_000_000)
    request = pb.ProduceRequest(topic="t", partition=1, batches=[batch], acks=pb.ACKS_ALL)
    _, error = call(service_of(node), "Produce", request)
    assert isinstance(error, NotLeaderError)
    assert (error.leader_id, error.leader_address) == ("n3", "n3:7100")
    assert node.fake_host.produced == []


@pytest.mark.parametrize(
    ("replica", "expected"),
    [
        (status(Role.FOLLOWER, "n2"), ("n2", "n2:7100")),  # the leader its replica knows
        (status(Role.FOLLOWER, None), ("n3", "n3:7100")),  # an election: placement's hint
        (None, ("n3", "n3:7100")),  # no replica here: placement's hint
    ],
)
def test_an_admin_call_off_the_metadata_leader_is_refused_with_a_hint(
    replica: ReplicaStatus | None, expected: tuple[str, str]
) -> None:
    node = FakeNode(view=[member("n1"), member("n2"), member("n3")])
    if replica is not None:
        node.replicas[METADATA_KEY] = replica
    node.targets[METADATA_KEY] = ("n1", "n3", "n2")
    request = pb.SetMaintenanceRequest(node_id="n2", enter=True)
    _, error = call(service_of(node), "SetMaintenance", request)
    assert isinstance(error, NotLeaderError)
    assert (error.leader_id, error.leader_address) == expected


def test_describe_cluster_reports_the_partitions_led_here_from_their_status() -> None:
    led, followed = ("t", 0), ("t", 1)
    node = FakeNode(
        replicas={led: status(Role.LEADER, "n1"), followed: status(Role.FOLLOWER, "n2")},
        in_sync={led: ["n1"]},
        targets={led: ("n1", "n2")},
    )
    node.fake_host.keys = [followed, led]
    node.metadata.topics["t"] = topic("t", 2)
    answer, error = call(service_of(node), "DescribeCluster", pb.DescribeClusterRequest())
    assert error is None
    (health,) = answer.partitions
    assert (health.topic, health.partition, health.leader) == ("t", 0, "n1")
    assert list(health.voters) == ["n1", "n2"] and list(health.in_sync) == ["n1"]
    assert health.under_replicated  # one in sync of a replication factor of two
    assert (health.term, health.high_watermark) == (3, 42)


def test_metadata_shows_each_partition_from_its_status_or_none_here() -> None:
    node = FakeNode(
        replicas={("t", 0): status(Role.FOLLOWER, "n2")}, targets={("t", 0): ("n2", "n1")}
    )
    node.metadata.topics["t"] = topic("t", 2)
    answer, error = call(service_of(node), "Metadata", pb.MetadataRequest(topics=["t"]))
    assert error is None
    here, elsewhere = answer.topics[0].partitions
    assert (here.leader, here.high_watermark, list(here.voters)) == ("n2", 42, ["n1", "n2"])
    assert list(here.replicas) == ["n2", "n1"]
    assert (elsewhere.leader, elsewhere.high_watermark) == ("", -1)


def test_only_the_data_path_is_registered_with_the_grpc_server() -> None:
    """grpc.aio's server waits on one pending request per registered method at every
    call it takes (issue 33 point 8): the data path is registered, every method is
    served through the generic handler."""
    from laminar.server.service import REGISTERED_METHODS, SERVICE_NAME, add_to_server

    class RecordingServer:
        def __init__(self) -> None:
            self.generic: list[Any] = []
            self.registered: dict[str, Any] = {}

        def add_generic_rpc_handlers(self, handlers: Sequence[Any]) -> None:
            self.generic.extend(handlers)

        def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
            assert service == SERVICE_NAME
            self.registered.update(handlers)

    server = RecordingServer()
    add_to_server(service_of(FakeNode()), server)  # type: ignore[arg-type]
    assert sorted(server.registered) == sorted(REGISTERED_METHODS)
    assert {"Produce", "Fetch"} <= set(REGISTERED_METHODS)
    (generic,) = server.generic
    methods = pb.DESCRIPTOR.services_by_name["Laminar"].methods
    for method in methods:  # every method through the generic handler, the same handler
        details = type("Details", (), {"method": f"/{SERVICE_NAME}/{method.name}"})()
        handler = generic.service(details)
        assert handler is not None, method.name
        if method.name in server.registered:
            assert server.registered[method.name] is handler
