"""The node's record of its peers, kept from membership's events (no I/O, no clock).

Membership (SWIM, :mod:`laminar.membership`) says who is alive, suspect, dead or
left; the node needs more than its current view:

- *alive peers*: the members alive or suspect, the replica cores' node-level
  liveness (the host asks ``peer_alive``);
- *dead since*: when each member was declared dead (the host asks ``peer_dead``;
  a member that comes back is "returned", and wakes the quiesced groups that count
  it);
- *gone*: members declared dead or that left, with their last entry and since
  when, kept after gossip reaps them until placement's grace for them ends
  (:meth:`laminar.server.placement_keeper.PlacementKeeper.placement_members` drops
  them then): placement must not forget a member before its grace is over;
- *incompatible*: peers refused for their protocol version, by gossip or at a
  hello (at most :data:`INCOMPATIBLE_MAX`, the oldest dropped).

:class:`MemberTracker` updates these from an event and says what the node must do
about it (:class:`MemberNote`); :func:`react_to_event` carries the note out, in its
order, through :class:`MemberActions` (the node's, and the node simulator's:
:mod:`laminar.testing.node_sim`). The gossiped metadata
a member carries (its cluster id, peer address, protocol version, a full disk) is
read and written here too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from laminar.membership import EventKind, Member, MemberEvent, MemberState
from laminar.server.config import NodeConfig
from laminar.server.transport import IncompatiblePeer, compatible_versions, incompatibility

CLUSTER_META = "cluster"
PEER_META = "peer"  # the member's peer (replication) address
DISK_META = "disk"  # "full" while the member's disk is below its watermark (absent: space)
DISK_FULL = "full"
PROTOCOL_META = "proto"  # the member's peer protocol version (absent: 1, before issue 30)
INCOMPATIBLE_MAX = 1024
"""Most peers remembered as refused for their protocol version (oldest dropped)."""
EARLY_EVENTS_MAX = 10_000
"""Most membership events kept while the node is being built (oldest dropped)."""
REPLAN_MARGIN_S = 0.05
"""How long after a grace ends the node replans (so that the grace is over by then)."""


def gossip_metadata(
    config: NodeConfig, cluster_id: str | None, *, disk_full: bool = False
) -> tuple[tuple[str, str], ...]:
    """What this node gossips about itself besides its addresses."""
    entries = [
        (PEER_META, config.advertised_peer),
        (PROTOCOL_META, str(config.protocol_version)),
    ]
    if cluster_id:
        entries.insert(0, (CLUSTER_META, cluster_id))
    if disk_full:
        entries.append((DISK_META, DISK_FULL))
    return tuple(entries)


def protocol_version_of(member: Member) -> int | None:
    """The protocol version a member gossips: 1 when it gossips none (a node from
    before versions were gossiped), None when it is not a number."""
    text = member.metadata_dict().get(PROTOCOL_META, "1")
    return int(text) if text.isdigit() and len(text) <= 3 else None


def cluster_ids_seen(view: Iterable[Member], self_id: str) -> list[str]:
    """The cluster ids the other members present gossip (for the join rule)."""
    return [
        cluster_id
        for member in view
        if member.node_id != self_id
        and not member.state.is_gone
        and (cluster_id := member.metadata_dict().get(CLUSTER_META))
    ]


def full_peers(view: Iterable[Member]) -> list[str]:
    """The members present that gossip a full disk."""
    return [
        member.node_id
        for member in view
        if not member.state.is_gone and member.metadata_dict().get(DISK_META) == DISK_FULL
    ]


def protocol_problem(own_version: int, member: Member) -> tuple[int, str] | None:
    """``(version, reason)`` when ``member`` gossips a protocol version this node
    cannot speak with (0: not a number); None when it is compatible."""
    version = protocol_version_of(member)
    if version is not None and compatible_versions(own_version, version):
        return None
    if version is None:
        return 0, "gossips a protocol version that is not a number"
    return version, incompatibility(own_version, version)


class MemberEventRelay:
    """Membership's event callback, connected to the node once it exists.

    Membership must run before the node can be built (the node needs the cluster
    id it learns from gossip); events of that interval are kept (at most
    :data:`EARLY_EVENTS_MAX`) and replayed on :meth:`connect`.
    """

    def __init__(self) -> None:
        self._early: deque[MemberEvent] = deque(maxlen=EARLY_EVENTS_MAX)
        self._sink: Callable[[MemberEvent], None] | None = None

    def __call__(self, event: MemberEvent) -> None:
        if self._sink is None:
            self._early.append(event)
        else:
            self._sink(event)

    def connect(self, sink: Callable[[MemberEvent], None]) -> None:
        self._sink = sink
        while self._early:
            sink(self._early.popleft())


@dataclass(frozen=True, slots=True)
class MemberNote:
    """What the node does about one member event, in this order."""

    leader_dead: bool
    """Dead or left: the groups it led start elections now (leadership does not
    wait for placement's grace)."""
    forget_link: bool
    """Left: drop the peer link to it."""
    check_protocol: bool
    """Joined, alive again or updated: look at the protocol version it gossips."""
    returned: bool
    """Alive again after being declared dead: wake the quiesced groups counting it
    (after :meth:`MemberTracker.note_view` has it alive)."""
    replan_after_s: tuple[float, ...]
    """Dead or left: replan when placement's graces for it end (it keeps its
    replicas through the move grace, and through the maintenance grace when it is,
    or enters, maintenance and that is longer)."""


class MemberTracker:
    """The node's peers as its events and views told it (see the module docstring).

    The containers are updated in place: the replica host holds
    ``alive_peers.__contains__`` and reads ``dead_since_ms``.
    """

    def __init__(
        self,
        node_id: str,
        *,
        replica_move_grace_ms: int,
        maintenance_grace_ms: int,
        incompatible_max: int = INCOMPATIBLE_MAX,
    ) -> None:
        self.node_id = node_id
        self._replica_move_grace_ms = replica_move_grace_ms
        self._maintenance_grace_ms = maintenance_grace_ms
        self._incompatible_max = incompatible_max
        self.alive_peers: set[str] = set()
        """Members alive or suspect by gossip: the cores' node-level liveness."""
        self.dead_since_ms: dict[str, int] = {}
        self.gone: dict[str, tuple[Member, int]] = {}
        """Members declared dead or that left -> (their last entry, since when)."""
        self.incompatible: dict[str, IncompatiblePeer] = {}
        """Peers refused for their protocol version (by gossip or at a hello)."""
        self._known: set[str] = set()

    def start(self, view: Iterable[Member], now_ms: int) -> list[Member]:
        """Take the view the node starts with (members dead before it was built);
        returns the other members present, whose protocol version to check."""
        view = list(view)
        check = []
        for member in view:
            if member.state is MemberState.DEAD:
                self.dead_since_ms.setdefault(member.node_id, now_ms)
            if member.state.is_gone:
                self.gone.setdefault(member.node_id, (member, now_ms))
            elif member.node_id != self.node_id:
                check.append(member)
        self._known = {member.node_id for member in view}
        return check

    def note_event(self, event: MemberEvent, now_ms: int) -> MemberNote:
        """Record ``event``; what the node must do about it."""
        node_id = event.member.node_id
        kind = event.kind
        leaving = kind in (EventKind.DEAD, EventKind.LEFT)
        arriving = kind in (EventKind.JOINED, EventKind.ALIVE)
        replan_after_s: tuple[float, ...] = ()
        if leaving:
            since_ms = self.gone.get(node_id, (event.member, now_ms))[1]
            self.gone[node_id] = (event.member, since_ms)
            grace_s = self._replica_move_grace_ms / 1000
            maintenance_grace_s = self._maintenance_grace_ms / 1000
            replan_after_s = (grace_s + REPLAN_MARGIN_S,)
            if maintenance_grace_s > grace_s:  # in case it is (or enters) maintenance
                replan_after_s += (maintenance_grace_s + REPLAN_MARGIN_S,)
        was_dead = False
        if kind is EventKind.DEAD:
            self.dead_since_ms.setdefault(node_id, now_ms)
        elif arriving or kind is EventKind.LEFT:
            was_dead = self.dead_since_ms.pop(node_id, None) is not None
        if arriving:
            self.gone.pop(node_id, None)
        return MemberNote(
            leader_dead=leaving,
            forget_link=kind is EventKind.LEFT,
            check_protocol=arriving or kind is EventKind.UPDATED,
            returned=arriving and was_dead,
            replan_after_s=replan_after_s,
        )

    def note_view(self, view: Iterable[Member]) -> list[str]:
        """Take membership's current view (after an event); returns the members it
        reaped since the last view (their peer links go too)."""
        view = list(view)
        self.alive_peers.clear()
        self.alive_peers.update(member.node_id for member in view if not member.state.is_gone)
        current: set[str] = {member.node_id for member in view}
        reaped = sorted(self._known - current)
        for node_id in reaped:
            self.dead_since_ms.pop(node_id, None)
        self._known = current
        return reaped

    def compatible(self, node_id: str) -> None:
        """``node_id`` gossips a compatible version now (upgraded): forget its refusal."""
        self.incompatible.pop(node_id, None)

    def note_incompatible(
        self, node_id: str, version: int, reason: str, address: str, now_ms: int
    ) -> IncompatiblePeer | None:
        """Remember ``node_id`` as refused for ``version``; returns the new entry, or
        None when it was already refused for that version (nothing to log)."""
        known = self.incompatible.get(node_id)
        if known is not None and known.protocol_version == version:
            return None
        since_ms = known.since_ms if known is not None else now_ms
        peer = IncompatiblePeer(node_id, address, version, reason, since_ms)
        self.incompatible[node_id] = peer
        if len(self.incompatible) > self._incompatible_max:
            del self.incompatible[next(iter(self.incompatible))]
        return peer


class MemberActions(Protocol):
    """What the node does about member events (:func:`react_to_event`)."""

    def replan_later(self, delay_s: float) -> None:
        """Replan ``delay_s`` from now (a departed member's grace ends then)."""
        ...

    def hint_leader_dead(self, node_id: str) -> None:
        """The groups ``node_id`` led start elections now."""
        ...

    def forget_link(self, node_id: str) -> None:
        """Drop the peer link to ``node_id``."""
        ...

    def check_protocol(self, member: Member) -> None:
        """Look at the protocol version ``member`` gossips."""
        ...

    def peer_returned(self, node_id: str) -> None:
        """Wake the quiesced groups that count ``node_id``."""
        ...

    def set_full_peers(self, nodes: list[str]) -> None:
        """The members that gossip a full disk."""
        ...

    def replan(self) -> None:
        """Recompute every partition's target now."""
        ...


def react_to_event(
    tracker: MemberTracker,
    event: MemberEvent,
    now_ms: int,
    view: Callable[[], Iterable[Member]],
    actions: MemberActions,
) -> None:
    """Record ``event`` and carry out what it asks of the node, in this order: the
    replans when its graces end, elections for the groups it led, its link, its
    protocol version; then membership's current ``view`` (read after the event),
    the returned member's quiesced groups woken (once the tracker has it alive),
    the links of the members gossip reaped, the full peers, and a replan."""
    node_id = event.member.node_id
    note = tracker.note_event(event, now_ms)
    for delay_s in note.replan_after_s:
        actions.replan_later(delay_s)
    if note.leader_dead:
        actions.hint_leader_dead(node_id)
    if note.forget_link:
        actions.forget_link(node_id)
    if note.check_protocol:
        actions.check_protocol(event.member)
    current = list(view())
    reaped = tracker.note_view(current)
    if note.returned:
        actions.peer_returned(node_id)
    for gone in reaped:
        actions.forget_link(gone)
    actions.set_full_peers(full_peers(current))
    actions.replan()
