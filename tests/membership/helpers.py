"""Small helpers for driving membership cores by hand."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from laminar.membership.codec import Codec
from laminar.membership.config import MembershipConfig
from laminar.membership.core import Datagram, LocalMember, MembershipCore, Output
from laminar.membership.member import EventKind, Member, MemberEvent, MemberState, NodeId
from laminar.membership.messages import Message

KEY = b"test-cluster-key"


def local_member(name: str, **changes: object) -> LocalMember:
    fields: dict[str, object] = {
        "node_id": NodeId(name),
        "gossip_address": f"{name}:7946",
        "grpc_address": f"{name}:9000",
        "weight": 1.0,
        "zone": "z1",
        "metadata": (),
    }
    fields.update(changes)
    return LocalMember(**fields)  # type: ignore[arg-type]


def as_member(local: LocalMember, state: MemberState = MemberState.ALIVE) -> Member:
    return Member(
        local.node_id,
        local.gossip_address,
        local.grpc_address,
        local.weight,
        local.zone,
        0,
        state,
        local.metadata,
    )


def seal(messages: Sequence[Message], key: bytes = KEY) -> bytes:
    codec = Codec(key, metadata_bytes_max=512)
    return codec.seal([codec.encode(message) for message in messages])


def open_frame(data: bytes, key: bytes = KEY) -> tuple[Message, ...]:
    opened = Codec(key, metadata_bytes_max=512).open(data, size_bytes_max=1 << 24)
    assert isinstance(opened, tuple), opened
    return opened


@dataclass
class ManualCluster:
    """Cores wired by hand: packets are queued and delivered when asked, through
    an optional filter (return False to drop)."""

    config: MembershipConfig
    names: Sequence[str]
    seeds: Sequence[str] = ()
    known: bool = True
    now_ms: int = 0
    cores: dict[str, MembershipCore] = field(default_factory=dict)
    in_flight: list[tuple[str, Datagram, bool]] = field(default_factory=list)
    events: list[tuple[str, MemberEvent]] = field(default_factory=list)
    allow: Callable[[str, str], bool] = lambda source, destination: True

    def __post_init__(self) -> None:
        locals_ = {name: local_member(name) for name in self.names}
        for index, name in enumerate(self.names):
            known = [as_member(m) for m in locals_.values()] if self.known else []
            core = MembershipCore(
                self.config,
                locals_[name],
                KEY,
                random.Random(index),
                self.now_ms,
                seeds=self.seeds,
                known_members=known,
            )
            self.cores[name] = core

    def address(self, name: str) -> str:
        return f"{name}:7946"

    def name_of(self, address: str) -> str:
        return address.split(":", maxsplit=1)[0]

    def absorb(self, source: str, output: Output) -> Output:
        for packet in output.packets:
            assert len(packet.data) <= self.config.mtu_bytes
            self.in_flight.append((source, packet, False))
        for stream in output.streams:
            self.in_flight.append((source, stream, True))
        self.events.extend((source, event) for event in output.events)
        return output

    def deliver_all(self, rounds: int = 20) -> None:
        for _ in range(rounds):
            if not self.in_flight:
                return
            batch, self.in_flight = self.in_flight, []
            for source, datagram, reliable in batch:
                destination = self.name_of(datagram.address)
                if destination not in self.cores or not self.allow(source, destination):
                    continue
                core = self.cores[destination]
                if reliable:
                    output = core.receive_stream(datagram.data, self.now_ms)
                else:
                    output = core.receive_packet(datagram.data, self.now_ms)
                self.absorb(destination, output)

    def advance(self, until_ms: int, step_ms: int = 10) -> None:
        """Tick every core every ``step_ms`` and deliver packets instantly."""
        while self.now_ms < until_ms:
            self.now_ms = min(until_ms, self.now_ms + step_ms)
            for name, core in self.cores.items():
                self.absorb(name, core.tick(self.now_ms))
            self.deliver_all()

    def state(self, observer: str, subject: str) -> MemberState | None:
        member = self.cores[observer].member(NodeId(subject))
        return None if member is None else member.state

    def kinds(self, observer: str, subject: str) -> list[EventKind]:
        return [
            event.kind
            for name, event in self.events
            if name == observer and event.member.node_id == subject
        ]
