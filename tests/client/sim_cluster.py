"""An in-memory cluster behind the client's transport interface, on a manual clock.

Unlike `fake_server.FakeCluster` (real gRPC servers sharing one truth), every
`SimNode` here answers from its *own* view, as real nodes do: which partitions it
hosts, whom it believes leads each, and how it sees the members. So a test can
say "n3 hosts nothing and keeps naming placement's first replica", "n0 is cut
off and still believes it leads", "n1 and n2 elected n1 at t=11".

A node is `up`, `down` (connection refused: the call fails at once) or `hung`
(stopped or cut off from the client: the call takes its whole timeout). Every call
moves the clock by `rpc_s`; `clock.at(time_s, change)` schedules a change (an
election, a gossip update). The client's `sleep` moves the same clock, so a test
runs instantly and its timings are exact.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from laminar_client.transport import AttemptTimeoutError, NodeUnreachableError

from laminar.errors import (
    NotLeaderError,
    RequestTimeoutError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import parse_header
from laminar.v1 import laminar_pb2 as pb

Key = tuple[str, int]


class ManualClock:
    """Seconds that pass only when told to; runs scheduled changes as it passes them."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now_s = start_s
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now_s

    def at(self, time_s: float, change: Callable[[], None]) -> None:
        heapq.heappush(self._events, (time_s, next(self._order), change))

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        until_s = self.now_s + seconds
        while self._events and self._events[0][0] <= until_s:
            time_s, _, change = heapq.heappop(self._events)
            self.now_s = max(self.now_s, time_s)
            change()
        self.now_s = until_s

    sleep = advance


@dataclass
class SimNode:
    node_id: str
    address: str
    state: str = "up"  # up | down | hung
    # Partitions this node hosts, and whom it believes leads each ("" = unknown).
    leaders: dict[Key, str] = field(default_factory=dict)
    # Its gossip view of every member: alive | suspect | dead | left.
    members: dict[str, str] = field(default_factory=dict)
    # A leader that cannot reach its followers answers a produce after its timeout.
    cut_off: bool = False


@dataclass
class SimPartition:
    replicas: list[str]
    end_offset: int = 0
    written_by: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    at_s: float
    node_id: str
    method: str
    timeout_s: float
    request: Any


class SimCluster:
    """Nodes `n0`.. with their own views, answering like Laminar nodes do."""

    def __init__(self, clock: ManualClock, node_count: int, *, rpc_s: float = 0.001) -> None:
        self.clock = clock
        self.rpc_s = rpc_s
        ids = [f"n{index}" for index in range(node_count)]
        self.nodes = {
            node_id: SimNode(node_id, f"sim-{node_id}:9092", members=dict.fromkeys(ids, "alive"))
            for node_id in ids
        }
        self.partitions: dict[Key, SimPartition] = {}
        self.incarnations = dict.fromkeys(ids, 0)  # as every node gossips them
        self.calls: list[Call] = []

    # ------------------------------------------------------------------ scripting

    def bootstrap(self, *node_ids: str) -> list[str]:
        return [self.nodes[node_id].address for node_id in node_ids]

    def add_partition(self, topic: str, index: int, replicas: list[str], leader: str) -> None:
        key = (topic, index)
        self.partitions[key] = SimPartition(list(replicas))
        for node_id in replicas:
            self.nodes[node_id].leaders[key] = leader

    def elect(self, key: Key, leader: str, *voters: str) -> None:
        """``voters`` (the new leader included) now know that ``leader`` leads."""
        for node_id in voters:
            self.nodes[node_id].leaders[key] = leader

    def gossip(self, node_id: str, state: str, *observers: str) -> None:
        """``observers`` now see ``node_id`` in ``state``."""
        for observer in observers:
            self.nodes[observer].members[node_id] = state

    def restart(self, node_id: str) -> None:
        """``node_id`` is up again and refutes its death: everyone sees it alive, newer."""
        self.nodes[node_id].state = "up"
        self.incarnations[node_id] += 1
        self.gossip(node_id, "alive", *self.nodes)

    def calls_to(self, method: str, since_s: float = float("-inf")) -> list[str]:
        return [c.node_id for c in self.calls if c.method == method and c.at_s >= since_s]

    # ------------------------------------------------------------------ transport

    def call(
        self,
        address: str,
        method: str,
        request: Any,
        response_type: type[Any],
        *,
        timeout_s: float,
    ) -> Any:
        node = next(n for n in self.nodes.values() if n.address == address)
        self.calls.append(Call(self.clock(), node.node_id, method, timeout_s, request))
        if node.state == "down":
            self.clock.advance(self.rpc_s)
            raise NodeUnreachableError(f"{address}: connection refused")
        if node.state == "hung":
            self.clock.advance(timeout_s)
            raise AttemptTimeoutError(f"{address}: deadline exceeded")
        self.clock.advance(self.rpc_s)
        handler = getattr(self, f"_{method.lower()}")
        return handler(node, request, timeout_s)

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ handlers

    def _metadata(self, node: SimNode, request: Any, timeout_s: float) -> pb.MetadataResponse:
        members = [
            pb.Member(
                node_id=n,
                grpc_address=self.nodes[n].address,
                weight=1.0,
                state=state,
                incarnation=self.incarnations[n],
            )
            for n, state in sorted(node.members.items())
        ]
        topics: dict[str, list[pb.PartitionInfo]] = {}
        for (topic, index), part in sorted(self.partitions.items()):
            hosted = (topic, index) in node.leaders
            topics.setdefault(topic, []).append(
                pb.PartitionInfo(
                    partition=index,
                    replicas=part.replicas,
                    leader=node.leaders.get((topic, index), ""),
                    high_watermark=part.end_offset if hosted else -1,
                    voters=part.replicas if hosted else [],
                )
            )
        infos = [
            pb.TopicInfo(
                name=name,
                config=pb.TopicConfig(
                    partitions=len(parts),
                    replication_factor=len(self.partitions[(name, 0)].replicas),
                    retention_bytes=-1,
                    retention_ms=-1,
                ),
                partitions=parts,
            )
            for name, parts in topics.items()
        ]
        return pb.MetadataResponse(
            cluster_id="sim", node_id=node.node_id, members=members, topics=infos
        )

    def _produce(self, node: SimNode, request: Any, timeout_s: float) -> pb.ProduceResponse:
        key = (request.topic, request.partition)
        part = self.partitions.get(key)
        if part is None:
            raise UnknownTopicOrPartitionError(f"no {key}")
        if key not in node.leaders:  # no replica here: placement's first, dead or not
            first = part.replicas[0]
            raise NotLeaderError(first, self.nodes[first].address)
        leader = node.leaders[key]
        if leader != node.node_id:
            if not leader:
                raise UnavailableError(f"{node.node_id} knows no leader for {key}")
            raise NotLeaderError(leader, self.nodes[leader].address)
        if node.cut_off:
            self.clock.advance(min(request.timeout_ms / 1000, timeout_s))
            raise RequestTimeoutError(f"{node.node_id}: no quorum before the timeout")
        offsets = []
        for raw in request.batches:
            offsets.append(part.end_offset)
            part.end_offset += parse_header(raw).record_count
            part.written_by.append(node.node_id)
        return pb.ProduceResponse(base_offsets=offsets)

    def _fetch(self, node: SimNode, request: Any, timeout_s: float) -> pb.FetchResponse:
        key = (request.topic, request.partition)
        part = self.partitions[key]
        if key not in node.leaders:
            raise UnknownTopicOrPartitionError(f"{key} has no replica on {node.node_id}")
        return pb.FetchResponse(batches=b"", high_watermark=part.end_offset, served_by=node.node_id)
