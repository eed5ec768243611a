"""The SWIM + Lifeguard state machine, sans IO.

Theory of operation
===================

:class:`MembershipCore` is a synchronous object. The shell (or the simulator) feeds
it three kinds of input, each with the current time ``now_ms``:

* ``receive_packet(data)``: a UDP datagram; ``receive_stream(data)``: one TCP
  message (a push-pull full state, which may exceed the MTU);
* ``tick()``: time passed; the core acts on every deadline that is due;
* local commands: ``leave()``, ``update_local(...)``.

Each call returns an immutable :class:`Output`: datagrams to send, stream messages
to send, membership events, and the time at which ``tick`` must be called next.
Randomness comes from the ``random.Random`` given at construction, and members are
kept in insertion order, so the same inputs always give the same outputs.

Failure detection. Every (awareness-scaled) probe interval the core pings the next
member of a shuffled round-robin list. No ack within the probe timeout: it sends
``ping-req`` to ``indirect_checks`` random members, which ping the target and relay
its ack (and, with Lifeguard, send a nack if they get none). No ack by the end of
the interval: the target becomes *suspect*.

Suspicion. A suspect has a timer; when it fires the member is declared *dead*.
With Lifeguard the timer starts at its maximum and shrinks as independent members
report the same suspicion (at the same incarnation: a suspicion at a newer one
means the member refuted the old one, and starts a new timer). A member that hears
it is suspected *refutes* by raising its incarnation and gossiping ``alive``; one
that hears an accusation it already refuted gossips its ``alive`` again, since
somebody evidently missed it. Buddy system (Lifeguard): a probe of a suspect
carries the suspicion ahead of the ping, so the suspect's ack carries its
refutation. A suspicion still running after the minimum timeout (too few
confirmations: probably false) is checked that way by the suspecting node itself,
ahead of the round-robin and again every minimum timeout, so that a node that
missed every gossiped copy of the refutation (it happens under packet loss) still
gets it before declaring a live member dead.
Precedence (SWIM, as memberlist):
``alive(i)`` beats ``suspect(j)``/``alive(j)`` when ``i > j``; ``suspect(i)`` beats
``alive(j)`` when ``i >= j``; ``dead(i)`` beats ``alive``/``suspect`` at ``j <= i``;
nothing but a newer ``alive`` brings a dead or left member back.

Dissemination. Every accepted change is queued for piggybacking on outgoing
packets (up to the MTU) and for gossip rounds, each update retransmitted
``retransmit_mult * ceil(log10(n + 1))`` times. Periodic push-pull exchanges of
the full state with one random member repair whatever gossip missed; a joining
node does a push-pull with its seeds.

Leave and reaping. ``leave()`` gossips ``dead(self, from=self)``, which everybody
records as *left*, even a member that declared it dead at that incarnation first
(its suspicion ran out before the gossip came: unlike memberlist). Dead and left
members are forgotten ``reap_after_ms`` later.

Bad input (garbage, truncated, oversized, wrong cluster key) is dropped and
counted in :meth:`MembershipCore.counters`; it never raises.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import assert_never

from laminar.errors import ConfigError
from laminar.membership.awareness import Awareness
from laminar.membership.broadcast import BroadcastQueue
from laminar.membership.codec import (
    FRAME_OVERHEAD_BYTES,
    Codec,
    DropReason,
    validate_identity_fields,
    validate_metadata,
)
from laminar.membership.config import MembershipConfig
from laminar.membership.member import (
    EventKind,
    Member,
    MemberEvent,
    MemberState,
    Metadata,
    NodeId,
)
from laminar.membership.messages import (
    Ack,
    Alive,
    Dead,
    MemberRecord,
    Message,
    Nack,
    Ping,
    PingRequest,
    PushPull,
    Suspect,
)
from laminar.membership.suspicion import Suspicion

_SEQUENCE_MODULUS = 2**32


@dataclass(frozen=True, slots=True)
class LocalMember:
    """This node's own attributes, as first announced."""

    node_id: NodeId
    gossip_address: str
    grpc_address: str = ""
    weight: float = 1.0
    zone: str = ""
    metadata: Metadata = ()


@dataclass(frozen=True, slots=True)
class Datagram:
    """Bytes to send to a gossip address (``host:port``)."""

    address: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Output:
    """What one core call asks the shell to do."""

    packets: tuple[Datagram, ...]
    """UDP datagrams, each at most ``mtu_bytes``."""
    streams: tuple[Datagram, ...]
    """Push-pull messages for the TCP stream transport (one message per connection)."""
    events: tuple[MemberEvent, ...]
    next_deadline_ms: int
    """Call ``tick`` at (or soon after) this time."""


@dataclass(slots=True)
class _Entry:
    node_id: NodeId
    gossip_address: str
    grpc_address: str
    weight: float
    zone: str
    metadata: Metadata
    incarnation: int
    state: MemberState
    state_change_ms: int
    record_key: tuple[int, MemberState] | None = None
    """(incarnation, state) that ``record_bytes`` encodes. Attributes change only
    with the incarnation, so this key says whether the cached encoding is current."""
    record_bytes: bytes = b""

    def snapshot(self) -> Member:
        return Member(
            node_id=self.node_id,
            gossip_address=self.gossip_address,
            grpc_address=self.grpc_address,
            weight=self.weight,
            zone=self.zone,
            incarnation=self.incarnation,
            state=self.state,
            metadata=self.metadata,
        )

    def alive_message(self) -> Alive:
        return Alive(
            node_id=self.node_id,
            incarnation=self.incarnation,
            gossip_address=self.gossip_address,
            grpc_address=self.grpc_address,
            weight=self.weight,
            zone=self.zone,
            metadata=self.metadata,
        )

    def same_attributes(self, alive: Alive) -> bool:
        return (
            self.gossip_address == alive.gossip_address
            and self.grpc_address == alive.grpc_address
            and self.weight == alive.weight
            and self.zone == alive.zone
            and self.metadata == alive.metadata
        )


@dataclass(slots=True)
class _Probe:
    sequence: int
    target_id: NodeId
    target_address: str
    indirect_at_ms: int
    fail_at_ms: int
    indirect_sent: bool = False
    expected_nacks: int = 0
    nacks: int = 0


@dataclass(slots=True)
class _Relay:
    requester_address: str
    requester_sequence: int
    target_id: NodeId
    nack_at_ms: int | None
    expires_at_ms: int


class MembershipCore:
    """One node's SWIM + Lifeguard membership, driven by packets and ticks."""

    def __init__(
        self,
        config: MembershipConfig,
        local: LocalMember,
        cluster_key: bytes,
        rng: random.Random,
        now_ms: int,
        *,
        seeds: Sequence[str] = (),
        incarnation: int = 0,
        known_members: Sequence[Member] = (),
        frame_bytes_reserved: int = 0,
    ) -> None:
        """``seeds`` are gossip addresses to join through (our own is ignored).

        ``frame_bytes_reserved``: room the shell adds to every frame (gossip
        encryption's overhead); datagrams and push-pull messages are built this much
        below ``mtu_bytes`` and ``stream_bytes_max``.

        ``incarnation`` lets a restarted node start above its previous life (it
        also refutes any older state it hears about itself). ``known_members``
        pre-loads a view (a snapshot, or the simulator starting a converged
        cluster); they produce no events."""
        validate_identity_fields(
            local.node_id, local.gossip_address, local.grpc_address, local.weight, local.zone
        )
        validate_metadata(local.metadata, config.metadata_bytes_max)
        if incarnation < 0:
            raise ConfigError("incarnation must be >= 0")
        if not 0 <= frame_bytes_reserved <= 256:
            raise ConfigError("frame_bytes_reserved must be in [0, 256]")
        self._config = config
        self._packet_bytes_max = config.mtu_bytes - frame_bytes_reserved
        self._stream_bytes_max = config.stream_bytes_max - frame_bytes_reserved
        self._codec = Codec(cluster_key, metadata_bytes_max=config.metadata_bytes_max)
        self._rng = rng
        self._local_id = local.node_id
        self._self = _Entry(
            node_id=local.node_id,
            gossip_address=local.gossip_address,
            grpc_address=local.grpc_address,
            weight=float(local.weight),
            zone=local.zone,
            metadata=tuple(sorted(local.metadata)),
            incarnation=incarnation,
            state=MemberState.ALIVE,
            state_change_ms=now_ms,
        )
        self._members: dict[NodeId, _Entry] = {local.node_id: self._self}
        self._probe_order: list[NodeId] = []
        self._probe_index = 0
        self._broadcasts = BroadcastQueue()
        self._awareness = Awareness(
            config.awareness_max_multiplier, enabled=config.lifeguard_enabled
        )
        self._suspicions: dict[NodeId, Suspicion] = {}
        self._reap_queue: deque[tuple[int, NodeId]] = deque()
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._sequence = rng.randrange(_SEQUENCE_MODULUS)
        self._seeds = tuple(s for s in seeds if s != local.gossip_address)
        self._joined = not self._seeds
        self._leaving = False
        self._counters: dict[str, int] = {}
        self._packets: list[Datagram] = []
        self._streams: list[Datagram] = []
        self._events: list[MemberEvent] = []
        self._next_probe_ms = now_ms + rng.randrange(config.probe_interval_ms)
        self._next_gossip_ms = now_ms + config.gossip_interval_ms
        self._next_push_pull_ms = now_ms + config.push_pull_interval_ms
        self._next_reconnect_ms = now_ms + config.reconnect_interval_ms
        self._next_join_ms = now_ms
        for member in known_members:
            self._load(member, now_ms)
        self._broadcasts.queue(self._local_id, self._codec.encode(self._self.alive_message()))

    # ------------------------------------------------------------------ queries

    @property
    def node_id(self) -> NodeId:
        return self._local_id

    @property
    def incarnation(self) -> int:
        return self._self.incarnation

    @property
    def health_score(self) -> int:
        """Lifeguard's local health score (0 is healthy)."""
        return self._awareness.score

    @property
    def joined(self) -> bool:
        """True once a seed answered the join (or there were no seeds)."""
        return self._joined

    def view(self) -> tuple[Member, ...]:
        """Every known member, including this node and not yet reaped dead/left ones,
        sorted by node id."""
        return tuple(self._members[node_id].snapshot() for node_id in sorted(self._members))

    def member(self, node_id: NodeId) -> Member | None:
        entry = self._members.get(node_id)
        return None if entry is None else entry.snapshot()

    def counters(self) -> dict[str, int]:
        """Counts of notable happenings (dropped packets by reason, ...)."""
        return dict(self._counters)

    def is_leave_complete(self) -> bool:
        """After ``leave()``: the ``left`` update was sent its full retransmit count
        (or nobody is left to tell)."""
        if not self._leaving:
            return False
        if self._broadcasts.pending_transmits(self._local_id) is None:
            return True
        return not any(
            not entry.state.is_gone
            for node_id, entry in self._members.items()
            if node_id != self._local_id
        )

    # ------------------------------------------------------------------- inputs

    def receive_packet(self, data: bytes, now_ms: int) -> Output:
        """Handle one UDP datagram."""
        self._receive(data, self._config.mtu_bytes, now_ms)
        return self._flush(now_ms)

    def receive_stream(self, data: bytes, now_ms: int) -> Output:
        """Handle one message received over the stream (TCP) transport."""
        self._receive(data, self._config.stream_bytes_max, now_ms)
        return self._flush(now_ms)

    def tick(self, now_ms: int) -> Output:
        """Act on every deadline that is due at ``now_ms``."""
        self._expire_suspicions(now_ms)
        if not self._leaving:
            self._run_probe(now_ms)
        self._expire_relays(now_ms)
        if now_ms >= self._next_gossip_ms:
            self._next_gossip_ms = now_ms + self._config.gossip_interval_ms
            self._gossip(now_ms)
        if not self._leaving:
            self._run_push_pull(now_ms)
        self._reap(now_ms)
        return self._flush(now_ms)

    def leave(self, now_ms: int) -> Output:
        """Start a graceful leave: gossip ``left`` and stop probing. Keep ticking
        until :meth:`is_leave_complete` (or the leave timeout), then stop."""
        if not self._leaving:
            self._leaving = True
            self._probe = None
            self._self.state = MemberState.LEFT
            self._self.state_change_ms = now_ms
            dead = Dead(self._local_id, self._self.incarnation, self._local_id)
            self._broadcasts.queue(self._local_id, self._codec.encode(dead))
            self._gossip(now_ms)
        return self._flush(now_ms)

    def update_local(
        self,
        now_ms: int,
        *,
        weight: float | None = None,
        zone: str | None = None,
        metadata: Metadata | None = None,
        grpc_address: str | None = None,
    ) -> Output:
        """Change this node's attributes; gossiped with a raised incarnation."""
        entry = self._self
        new_weight = entry.weight if weight is None else float(weight)
        new_zone = entry.zone if zone is None else zone
        new_grpc = entry.grpc_address if grpc_address is None else grpc_address
        new_metadata = entry.metadata if metadata is None else tuple(sorted(metadata))
        validate_identity_fields(
            entry.node_id, entry.gossip_address, new_grpc, new_weight, new_zone
        )
        validate_metadata(new_metadata, self._config.metadata_bytes_max)
        if self._leaving:
            return self._flush(now_ms)
        entry.weight, entry.zone, entry.grpc_address = new_weight, new_zone, new_grpc
        entry.metadata = new_metadata
        entry.incarnation += 1
        self._queue_update(self._local_id, entry.alive_message())
        self._emit(EventKind.UPDATED, entry, now_ms)
        return self._flush(now_ms)

    # ----------------------------------------------------------------- receive

    def _receive(self, data: bytes, size_bytes_max: int, now_ms: int) -> None:
        opened = self._codec.open(data, size_bytes_max=size_bytes_max)
        if isinstance(opened, DropReason):
            self._count(f"dropped_{opened.value}")
            return
        self._count("frames_received")
        for message in opened:
            self._dispatch(message, now_ms)

    def _dispatch(self, message: Message, now_ms: int) -> None:
        match message:
            case Ping():
                self._on_ping(message)
            case Ack():
                self._on_ack(message)
            case Nack():
                self._on_nack(message)
            case PingRequest():
                self._on_ping_request(message, now_ms)
            case Alive():
                self._on_alive(message, now_ms)
            case Suspect():
                self._on_suspect(message, now_ms)
            case Dead():
                self._on_dead(message, now_ms)
            case PushPull():
                self._on_push_pull(message, now_ms)
            case _:
                assert_never(message)

    def _on_ping(self, ping: Ping) -> None:
        if ping.target_id != self._local_id:
            self._count("pings_misdirected")
            return
        self._send(ping.source_address, [Ack(ping.sequence, self._local_id)])

    def _on_ack(self, ack: Ack) -> None:
        probe = self._probe
        if probe is not None and ack.sequence == probe.sequence:
            if ack.source_id == probe.target_id:
                if not probe.indirect_sent:
                    self._awareness.apply_delta(-1)
                self._probe = None
                suspicion = self._suspicions.get(probe.target_id)
                if suspicion is not None and probe.indirect_sent:
                    # It answers, but through a relay: that ack carries no refutation
                    # (a direct one does, in the same packet). Ask again next probe.
                    suspicion.verify_at_ms = 0
            return
        relay = self._relays.get(ack.sequence)
        if relay is not None and ack.source_id == relay.target_id:
            del self._relays[ack.sequence]
            self._send(relay.requester_address, [Ack(relay.requester_sequence, ack.source_id)])

    def _on_nack(self, nack: Nack) -> None:
        probe = self._probe
        if probe is not None and nack.sequence == probe.sequence:
            probe.nacks += 1

    def _on_ping_request(self, request: PingRequest, now_ms: int) -> None:
        if len(self._relays) >= self._config.relays_max:
            self._count("relays_dropped")
            return
        sequence = self._next_sequence()
        nack_at_ms = now_ms + self._config.probe_timeout_ms if request.want_nack else None
        self._relays[sequence] = _Relay(
            requester_address=request.source_address,
            requester_sequence=request.sequence,
            target_id=request.target_id,
            nack_at_ms=nack_at_ms,
            expires_at_ms=now_ms + self._config.probe_interval_ms,
        )
        ping = Ping(sequence, request.target_id, self._local_id, self._self.gossip_address)
        self._send(request.target_address, [ping])

    def _on_alive(self, alive: Alive, now_ms: int) -> None:
        if alive.node_id == self._local_id:
            self._on_alive_about_self(alive)
            return
        entry = self._members.get(alive.node_id)
        if entry is None:
            self._add_member(alive, now_ms)
            return
        if alive.incarnation <= entry.incarnation:
            return
        old_state = entry.state
        changed = not entry.same_attributes(alive)
        entry.gossip_address, entry.grpc_address = alive.gossip_address, alive.grpc_address
        entry.weight, entry.zone, entry.metadata = alive.weight, alive.zone, alive.metadata
        entry.incarnation = alive.incarnation
        entry.state = MemberState.ALIVE
        self._suspicions.pop(entry.node_id, None)
        if old_state is not MemberState.ALIVE:
            entry.state_change_ms = now_ms
        if old_state.is_gone:
            self._emit(EventKind.JOINED, entry, now_ms)
        else:
            if old_state is MemberState.SUSPECT:
                self._emit(EventKind.ALIVE, entry, now_ms)
            if changed:
                self._emit(EventKind.UPDATED, entry, now_ms)
        self._queue_update(entry.node_id, alive)

    def _add_member(self, alive: Alive, now_ms: int) -> None:
        if len(self._members) >= self._config.members_max:
            self._count("members_dropped")
            return
        entry = _Entry(
            node_id=alive.node_id,
            gossip_address=alive.gossip_address,
            grpc_address=alive.grpc_address,
            weight=alive.weight,
            zone=alive.zone,
            metadata=alive.metadata,
            incarnation=alive.incarnation,
            state=MemberState.ALIVE,
            state_change_ms=now_ms,
        )
        self._insert(entry)
        self._emit(EventKind.JOINED, entry, now_ms)
        self._queue_update(entry.node_id, alive)

    def _insert(self, entry: _Entry) -> None:
        self._members[entry.node_id] = entry
        # A random position keeps the round-robin order unpredictable (memberlist).
        position = self._rng.randrange(len(self._probe_order) + 1)
        self._probe_order.insert(position, entry.node_id)
        if position < self._probe_index:
            self._probe_index += 1

    def _on_alive_about_self(self, alive: Alive) -> None:
        if self._leaving:
            return
        entry = self._self
        if alive.incarnation > entry.incarnation or (
            alive.incarnation == entry.incarnation and not entry.same_attributes(alive)
        ):
            # Someone holds a state of ours we never published (a previous life).
            self._refute(alive.incarnation)

    def _on_suspect(self, suspect: Suspect, now_ms: int) -> None:
        if suspect.node_id == self._local_id:
            self._on_accusation(suspect.incarnation)
            return
        entry = self._members.get(suspect.node_id)
        if entry is None or suspect.incarnation < entry.incarnation:
            return
        suspicion = self._suspicions.get(suspect.node_id)
        if suspicion is not None and suspect.incarnation == entry.incarnation:
            if suspicion.confirm(suspect.from_id, now_ms):
                self._queue_update(suspect.node_id, suspect)
            return
        # A suspicion at a newer incarnation than the one we suspect means the member
        # refuted our suspicion (we missed the ``alive``) and was accused again: it
        # starts a new timer rather than confirming (and shortening) the stale one.
        if suspicion is None and entry.state is not MemberState.ALIVE:
            return
        entry.incarnation = suspect.incarnation
        entry.state = MemberState.SUSPECT
        entry.state_change_ms = now_ms
        self._suspicions[entry.node_id] = self._new_suspicion(suspect.from_id, now_ms)
        self._emit(EventKind.SUSPECT, entry, now_ms)
        self._queue_update(entry.node_id, suspect)

    def _on_accusation(self, incarnation: int) -> None:
        """Somebody says we are suspect or dead at ``incarnation``."""
        if self._leaving:
            return
        if incarnation >= self._self.incarnation:
            self._refute(incarnation)
            return
        # Stale: we already refuted it, but the sender (or whoever it relays) still
        # holds the old state, maybe because it missed every copy of our ``alive``.
        # Send the refutation around again (and in our answer to a buddy probe).
        self._count("refutations_repeated")
        self._queue_update(self._local_id, self._self.alive_message())

    def _new_suspicion(self, from_id: NodeId, now_ms: int) -> Suspicion:
        config = self._config
        member_count = len(self._members)
        min_ms = config.suspicion_min_ms(member_count)
        if not config.lifeguard_enabled:
            return Suspicion(from_id, 0, min_ms, min_ms, now_ms)
        expected = config.suspicion_mult - 2
        if member_count - 2 < expected:
            expected = 0
        max_ms = config.suspicion_max_timeout_mult * min_ms
        return Suspicion(from_id, expected, min_ms, max_ms, now_ms)

    def _on_dead(self, dead: Dead, now_ms: int) -> None:
        if dead.node_id == self._local_id:
            self._on_accusation(dead.incarnation)
            return
        entry = self._members.get(dead.node_id)
        if entry is None or dead.incarnation < entry.incarnation:
            return
        left = dead.from_id == dead.node_id
        if entry.state.is_gone:
            # The node's own word that it left, after we (or a peer) declared it dead
            # at that incarnation: it stopped answering once its leave was sent, and
            # our suspicion ran out before the gossip reached us. It left.
            if left and entry.state is MemberState.DEAD and dead.incarnation == entry.incarnation:
                entry.state = MemberState.LEFT
                entry.state_change_ms = now_ms
                self._emit(EventKind.LEFT, entry, now_ms)
                self._queue_update(entry.node_id, dead)
            return
        self._suspicions.pop(entry.node_id, None)
        entry.incarnation = dead.incarnation
        entry.state = MemberState.LEFT if left else MemberState.DEAD
        entry.state_change_ms = now_ms
        self._reap_queue.append((now_ms + self._config.reap_after_ms, entry.node_id))
        if self._probe is not None and self._probe.target_id == entry.node_id:
            self._probe = None
        self._emit(EventKind.LEFT if left else EventKind.DEAD, entry, now_ms)
        self._queue_update(entry.node_id, dead)

    def _refute(self, observed_incarnation: int) -> None:
        entry = self._self
        entry.incarnation = max(entry.incarnation, observed_incarnation) + 1
        self._count("refutations")
        # Being suspected is a hint that we are the slow one (Lifeguard).
        self._awareness.apply_delta(1)
        self._queue_update(self._local_id, entry.alive_message())

    def _on_push_pull(self, push_pull: PushPull, now_ms: int) -> None:
        if push_pull.source_id == self._local_id:
            return
        for record in push_pull.members:
            self._merge(record, push_pull.source_id, now_ms)
        # Reply after merging, so that a refutation the request caused is in it.
        if push_pull.is_reply:
            self._joined = True
        else:
            self._send_push_pull(push_pull.source_address, is_join=push_pull.is_join, reply=True)

    def _merge(self, record: MemberRecord, source_id: NodeId, now_ms: int) -> None:
        alive = record.alive
        match record.state:
            case MemberState.ALIVE:
                self._on_alive(alive, now_ms)
            case MemberState.SUSPECT:
                if alive.node_id not in self._members:
                    self._on_alive(alive, now_ms)
                self._on_suspect(Suspect(alive.node_id, alive.incarnation, source_id), now_ms)
            case MemberState.DEAD:
                # Someone else's verdict becomes only a suspicion here (memberlist).
                self._on_suspect(Suspect(alive.node_id, alive.incarnation, source_id), now_ms)
            case MemberState.LEFT:
                self._on_dead(Dead(alive.node_id, alive.incarnation, alive.node_id), now_ms)
            case _:
                assert_never(record.state)

    # --------------------------------------------------------------- timers

    def _expire_suspicions(self, now_ms: int) -> None:
        if not self._suspicions:
            return
        due = [
            node_id
            for node_id, suspicion in self._suspicions.items()
            if suspicion.deadline_ms <= now_ms
        ]
        for node_id in due:
            del self._suspicions[node_id]
            entry = self._members[node_id]
            if entry.state is MemberState.SUSPECT:
                self._count("suspicions_expired")
                self._on_dead(Dead(node_id, entry.incarnation, self._local_id), now_ms)

    def _run_probe(self, now_ms: int) -> None:
        probe = self._probe
        if probe is not None:
            if not probe.indirect_sent and now_ms >= probe.indirect_at_ms:
                self._probe_indirect(probe)
            if now_ms >= probe.fail_at_ms:
                self._probe_failed(probe, now_ms)
        if self._probe is None and now_ms >= self._next_probe_ms:
            self._start_probe(now_ms)

    def _start_probe(self, now_ms: int) -> None:
        interval_ms = self._awareness.scale_ms(self._config.probe_interval_ms)
        self._next_probe_ms = now_ms + interval_ms
        target = self._next_probe_target(now_ms)
        if target is None:
            return
        sequence = self._next_sequence()
        self._probe = _Probe(
            sequence=sequence,
            target_id=target.node_id,
            target_address=target.gossip_address,
            indirect_at_ms=now_ms + self._awareness.scale_ms(self._config.probe_timeout_ms),
            fail_at_ms=now_ms + interval_ms,
        )
        messages: list[Message] = []
        if self._config.lifeguard_enabled and target.state is MemberState.SUSPECT:
            # Buddy system: tell a suspect directly that it is suspected. The
            # suspicion goes first, so that the target's ack (sent when it handles
            # the ping) piggybacks its refutation.
            messages.append(Suspect(target.node_id, target.incarnation, self._local_id))
        messages.append(Ping(sequence, target.node_id, self._local_id, self._self.gossip_address))
        self._count("probes")
        self._send(target.gossip_address, messages)

    def _next_probe_target(self, now_ms: int) -> _Entry | None:
        if self._config.lifeguard_enabled:
            # Buddy system: a suspicion that outlived the minimum timeout was not
            # confirmed by enough members, so it is probably false, and the suspect
            # has probably refuted it; if we are still suspecting, we may have missed
            # every copy of the refutation. Ask the suspect itself (the suspicion
            # rides ahead of the ping, so its ack carries the refutation) before the
            # timer runs out; again every minimum timeout while it lasts.
            for node_id, suspicion in self._suspicions.items():
                if suspicion.verify_at_ms <= now_ms:
                    suspicion.verify_at_ms = now_ms + suspicion.min_ms
                    return self._members[node_id]
        order = self._probe_order
        for _ in range(len(order)):
            if self._probe_index >= len(order):
                self._rng.shuffle(order)
                self._probe_index = 0
            entry = self._members[order[self._probe_index]]
            self._probe_index += 1
            if not entry.state.is_gone:
                return entry
        return None

    def _probe_indirect(self, probe: _Probe) -> None:
        probe.indirect_sent = True
        relays = self._random_members(
            self._config.indirect_checks,
            lambda entry: entry.state is MemberState.ALIVE and entry.node_id != probe.target_id,
        )
        want_nack = self._config.lifeguard_enabled
        for relay in relays:
            request = PingRequest(
                probe.sequence,
                probe.target_id,
                probe.target_address,
                self._local_id,
                self._self.gossip_address,
                want_nack,
            )
            self._send(relay.gossip_address, [request])
        probe.expected_nacks = len(relays) if want_nack else 0

    def _probe_failed(self, probe: _Probe, now_ms: int) -> None:
        self._probe = None
        self._count("probes_failed")
        # Lifeguard: missing nacks mean *we* may be the slow one.
        if probe.expected_nacks > 0:
            self._awareness.apply_delta(max(0, probe.expected_nacks - probe.nacks))
        else:
            self._awareness.apply_delta(1)
        entry = self._members.get(probe.target_id)
        if entry is None or entry.state.is_gone:
            return
        self._on_suspect(Suspect(entry.node_id, entry.incarnation, self._local_id), now_ms)

    def _expire_relays(self, now_ms: int) -> None:
        if not self._relays:
            return
        for sequence, relay in list(self._relays.items()):
            if relay.nack_at_ms is not None and now_ms >= relay.nack_at_ms:
                relay.nack_at_ms = None
                self._send(
                    relay.requester_address, [Nack(relay.requester_sequence, self._local_id)]
                )
            if now_ms >= relay.expires_at_ms:
                del self._relays[sequence]

    def _gossip(self, now_ms: int) -> None:
        if not self._broadcasts:
            return
        gossip_to_dead_ms = self._config.gossip_to_dead_ms

        def accept(entry: _Entry) -> bool:
            if entry.state is MemberState.DEAD:
                return now_ms - entry.state_change_ms <= gossip_to_dead_ms
            return entry.state is not MemberState.LEFT

        limit = self._config.retransmit_limit(len(self._members))
        budget = self._packet_bytes_max - FRAME_OVERHEAD_BYTES
        for target in self._random_members(self._config.gossip_nodes, accept):
            updates = self._broadcasts.take(budget, limit)
            if not updates:
                break
            self._packets.append(Datagram(target.gossip_address, self._codec.seal(updates)))

    def _run_push_pull(self, now_ms: int) -> None:
        if not self._joined and now_ms >= self._next_join_ms:
            self._next_join_ms = now_ms + self._config.join_retry_interval_ms
            for seed in self._seeds:
                self._send_push_pull(seed, is_join=True, reply=False)
        if self._config.push_pull_interval_ms > 0 and now_ms >= self._next_push_pull_ms:
            interval_ms = self._config.push_pull_interval_scaled_ms(len(self._members))
            self._next_push_pull_ms = now_ms + interval_ms
            peers = self._random_members(1, lambda entry: entry.state is MemberState.ALIVE)
            for peer in peers:
                self._send_push_pull(peer.gossip_address, is_join=False, reply=False)
        if self._config.reconnect_interval_ms > 0 and now_ms >= self._next_reconnect_ms:
            self._next_reconnect_ms = now_ms + self._config.reconnect_interval_ms
            self._reconnect()

    def _reconnect(self) -> None:
        # Usually nobody is dead: a scan is cheaper than 3n rejected random draws.
        dead = [entry for entry in self._members.values() if entry.state is MemberState.DEAD]
        if dead:
            self._count("reconnects")
            target = dead[self._rng.randrange(len(dead))]
            self._send_push_pull(target.gossip_address, is_join=False, reply=False)
            return
        if not self._seeds:
            return
        seen_alive = {
            entry.gossip_address for entry in self._members.values() if not entry.state.is_gone
        }
        missing = [seed for seed in self._seeds if seed not in seen_alive]
        if missing:
            self._count("reconnects")
            seed = missing[self._rng.randrange(len(missing))]
            self._send_push_pull(seed, is_join=False, reply=False)

    def _reap(self, now_ms: int) -> None:
        queue = self._reap_queue
        while queue and queue[0][0] <= now_ms:
            _, node_id = queue.popleft()
            entry = self._members.get(node_id)
            if entry is None or not entry.state.is_gone:
                continue  # came back since
            if now_ms - entry.state_change_ms < self._config.reap_after_ms:
                continue  # died again later; a later queue item covers it
            del self._members[node_id]
            self._suspicions.pop(node_id, None)
            self._broadcasts.discard(node_id)
            position = self._probe_order.index(node_id)
            del self._probe_order[position]
            if position < self._probe_index:
                self._probe_index -= 1
            self._count("members_reaped")

    # ---------------------------------------------------------------- output

    def _send(self, address: str, messages: Sequence[Message]) -> None:
        """One datagram: the given messages, then piggybacked updates up to the MTU."""
        encoded = [self._codec.encode(message) for message in messages]
        budget = self._packet_bytes_max - FRAME_OVERHEAD_BYTES - sum(map(len, encoded))
        limit = self._config.retransmit_limit(len(self._members))
        encoded.extend(self._broadcasts.take(budget, limit))
        self._packets.append(Datagram(address, self._codec.seal(encoded)))

    def _send_push_pull(self, address: str, *, is_join: bool, reply: bool) -> None:
        message = self._codec.encode_push_pull(
            self._local_id,
            self._self.gossip_address,
            is_join=is_join,
            is_reply=reply,
            encoded_records=[self._encoded_record(entry) for entry in self._members.values()],
        )
        frame = self._codec.seal([message])
        if len(frame) > self._stream_bytes_max:
            self._count("push_pull_too_large")
            return
        self._count("push_pulls_sent")
        self._streams.append(Datagram(address, frame))

    def _encoded_record(self, entry: _Entry) -> bytes:
        key = (entry.incarnation, entry.state)
        if entry.record_key != key:
            record = MemberRecord(entry.alive_message(), entry.state)
            entry.record_bytes = self._codec.encode_record(record)
            entry.record_key = key
        return entry.record_bytes

    def _queue_update(self, node_id: NodeId, message: Alive | Suspect | Dead) -> None:
        self._broadcasts.queue(node_id, self._codec.encode(message))

    def _emit(self, kind: EventKind, entry: _Entry, now_ms: int) -> None:
        self._events.append(MemberEvent(kind, entry.snapshot(), now_ms))

    def _count(self, name: str) -> None:
        self._counters[name] = self._counters.get(name, 0) + 1

    def _next_sequence(self) -> int:
        self._sequence = (self._sequence + 1) % _SEQUENCE_MODULUS
        return self._sequence

    def _random_members(self, count: int, accept: Callable[[_Entry], bool]) -> list[_Entry]:
        """Up to ``count`` distinct random members passing ``accept`` (memberlist's
        ``kRandomNodes``: random draws, at most three times the member count)."""
        order = self._probe_order
        size = len(order)
        chosen: list[_Entry] = []
        seen: set[NodeId] = set()
        if count <= 0 or size == 0:
            return chosen
        for _ in range(3 * size):
            node_id = order[self._rng.randrange(size)]
            if node_id in seen:
                continue
            seen.add(node_id)
            entry = self._members[node_id]
            if accept(entry):
                chosen.append(entry)
                if len(chosen) >= count:
                    break
        return chosen

    def _load(self, member: Member, now_ms: int) -> None:
        if member.node_id == self._local_id or member.node_id in self._members:
            return
        entry = _Entry(
            node_id=member.node_id,
            gossip_address=member.gossip_address,
            grpc_address=member.grpc_address,
            weight=member.weight,
            zone=member.zone,
            metadata=member.metadata,
            incarnation=member.incarnation,
            state=member.state,
            state_change_ms=now_ms,
        )
        self._insert(entry)
        if entry.state.is_gone:
            self._reap_queue.append((now_ms + self._config.reap_after_ms, entry.node_id))
        elif entry.state is MemberState.SUSPECT:
            self._suspicions[entry.node_id] = self._new_suspicion(self._local_id, now_ms)

    def _flush(self, now_ms: int) -> Output:
        output = Output(
            packets=tuple(self._packets),
            streams=tuple(self._streams),
            events=tuple(self._events),
            next_deadline_ms=max(now_ms, self._next_deadline_ms()),
        )
        self._packets.clear()
        self._streams.clear()
        self._events.clear()
        return output

    def _next_deadline_ms(self) -> int:
        deadline = self._next_gossip_ms if self._broadcasts else _FAR_FUTURE_MS
        if not self._leaving:
            deadline = min(deadline, self._next_probe_ms)
            if self._config.push_pull_interval_ms > 0:
                deadline = min(deadline, self._next_push_pull_ms)
            if self._config.reconnect_interval_ms > 0:
                deadline = min(deadline, self._next_reconnect_ms)
            if not self._joined:
                deadline = min(deadline, self._next_join_ms)
        probe = self._probe
        if probe is not None:
            if not probe.indirect_sent:
                deadline = min(deadline, probe.indirect_at_ms)
            deadline = min(deadline, probe.fail_at_ms)
        for relay in self._relays.values():
            if relay.nack_at_ms is not None:
                deadline = min(deadline, relay.nack_at_ms)
            deadline = min(deadline, relay.expires_at_ms)
        for suspicion in self._suspicions.values():
            deadline = min(deadline, suspicion.deadline_ms)
        if self._reap_queue:
            deadline = min(deadline, self._reap_queue[0][0])
        return deadline


_FAR_FUTURE_MS = 2**62
