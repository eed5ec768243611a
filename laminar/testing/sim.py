"""A seeded, deterministic simulator for sans-IO cores (design §9, tier 3).

Many nodes' real cores run in one process against a manual clock and a simulated
network. Everything is driven by one event queue ordered by ``(time_ms,
sequence)``; all randomness (loss, delay) comes from one ``random.Random(seed)``,
so the same seed and the same script give the same run, event for event. The
trace hash (:meth:`Simulator.trace_hash`) makes that checkable.

Plugging a core in. The simulator knows nothing about membership: a node is any
object satisfying :class:`SimNode`. It returns a :class:`Step` from every call —
the opaque messages to send (to other nodes' addresses), the absolute time it
wants its next ``tick``, and optional trace lines. The network carries payloads as
they are (no copying, no parsing). Faults:

* **loss, delay, reordering**: per-link :class:`LinkConfig` (independent random
  delays reorder messages); ``reliable`` messages (a stream transport, e.g. TCP)
  are not lost at random but are cut by partitions and crashes;
* **partition** / **heal**: groups of addresses that cannot reach each other;
* **crash** / **restart**: the node drops its volatile state (``crash()``), and
  ``restart(now_ms)`` rebuilds it from whatever it treats as durable;
* **pause** / **resume** (like SIGSTOP/SIGCONT): no ticks, and incoming messages
  wait in a bounded queue (overflow is dropped) that is delivered on resume
  before the node's next tick.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

_DELIVER = 0
_TICK = 1
_CALL = 2


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message a node wants sent."""

    destination: str
    payload: object
    reliable: bool = False
    """Stream-like: immune to random loss (still cut by partitions and crashes)."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a node returns from every call."""

    messages: Sequence[Envelope] = ()
    next_wake_ms: int | None = None
    """Absolute time of the next wanted ``tick`` (None: no timer)."""
    trace: Sequence[str] = ()
    """Lines worth recording in the trace (state changes, not every packet)."""


class SimNode(Protocol):
    """The seam between the simulator and a core adapter."""

    @property
    def address(self) -> str:
        """Where other nodes send to reach this one (unique in the simulation)."""
        ...

    def start(self, now_ms: int) -> Step:
        """First call, at the node's start time."""
        ...

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        """A message from ``source`` arrives."""
        ...

    def tick(self, now_ms: int) -> Step:
        """The time asked for in ``next_wake_ms`` has come (or passed)."""
        ...

    def crash(self) -> None:
        """Lose every volatile state (the process died)."""
        ...

    def restart(self, now_ms: int) -> Step:
        """Start again from durable state after a crash."""
        ...


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Behaviour of one directed link."""

    loss: float = 0.0
    """Probability that an unreliable message is dropped."""
    delay_min_ms: int = 1
    delay_max_ms: int = 5
    """Each message's delay is uniform in ``[delay_min_ms, delay_max_ms]``."""

    def __post_init__(self) -> None:
        assert 0.0 <= self.loss <= 1.0, self.loss
        assert 0 <= self.delay_min_ms <= self.delay_max_ms


@dataclass(slots=True)
class NetworkCounters:
    """What the network did, for benchmarks and assertions."""

    sent: int = 0
    sent_reliable: int = 0
    delivered: int = 0
    dropped_loss: int = 0
    dropped_partition: int = 0
    dropped_down: int = 0
    dropped_pause_overflow: int = 0
    sent_by_source: dict[str, int] = field(default_factory=dict)


_UP = 0
_PAUSED = 1
_CRASHED = 2


@dataclass(slots=True)
class _Slot:
    node: SimNode
    status: int = _CRASHED
    started: bool = False
    paused_queue: list[tuple[str, object, bool]] = field(default_factory=list)
    wake_ms: int | None = None
    missed_tick: bool = False


class Simulator:
    """Runs :class:`SimNode` objects over a simulated network and clock."""

    def __init__(
        self,
        seed: int,
        *,
        default_link: LinkConfig | None = None,
        paused_queue_max: int = 4096,
        count_by_source: bool = False,
    ) -> None:
        self.seed = seed
        self.now_ms = 0
        self.counters = NetworkCounters()
        self._rng = random.Random(seed)
        self._default_link = default_link or LinkConfig()
        self._links: dict[tuple[str, str], LinkConfig] = {}
        self._groups: dict[str, int] | None = None
        self._slots: dict[str, _Slot] = {}
        self._queue: list[tuple[int, int, int, str, object, object, object]] = []
        self._sequence = 0
        self._paused_queue_max = paused_queue_max
        self._count_by_source = count_by_source
        self._trace = hashlib.blake2b(digest_size=16)
        self._trace_lines = 0

    # ---------------------------------------------------------------- set-up

    def node_rng(self, address: str) -> random.Random:
        """A per-node generator derived from the seed (independent of the others)."""
        return random.Random(f"{self.seed}/{address}")

    def add_node(self, node: SimNode, *, start_at_ms: int | None = None) -> None:
        """Register ``node``; it starts at ``start_at_ms`` (default: now)."""
        address = node.address
        assert address not in self._slots, f"duplicate address {address}"
        self._slots[address] = _Slot(node)
        self._push(self.now_ms if start_at_ms is None else start_at_ms, _CALL, address,
                   _start_node, None, None)  # fmt: skip

    def node(self, address: str) -> SimNode:
        return self._slots[address].node

    def addresses(self) -> list[str]:
        return list(self._slots)

    def is_up(self, address: str) -> bool:
        return self._slots[address].status == _UP

    def set_default_link(self, link: LinkConfig) -> None:
        self._default_link = link

    def set_link(self, source: str, destination: str, link: LinkConfig) -> None:
        self._links[(source, destination)] = link

    # ---------------------------------------------------------------- faults

    def partition(self, groups: Sequence[Iterable[str]]) -> None:
        """Cut every link between different groups (unlisted nodes form one more)."""
        self._groups = {address: index for index, group in enumerate(groups) for address in group}
        self._record(f"partition {[sorted(group) for group in groups]}")

    def heal(self) -> None:
        self._groups = None
        self._record("heal")

    def crash(self, address: str) -> None:
        slot = self._slots[address]
        slot.node.crash()
        slot.status = _CRASHED
        slot.paused_queue.clear()
        slot.wake_ms = None
        self._record(f"crash {address}")

    def restart(self, address: str) -> None:
        slot = self._slots[address]
        assert slot.status == _CRASHED, f"{address} is not crashed"
        slot.status = _UP
        self._record(f"restart {address}")
        self._apply(address, slot.node.restart(self.now_ms))

    def pause(self, address: str) -> None:
        slot = self._slots[address]
        if slot.status == _UP:
            slot.status = _PAUSED
            self._record(f"pause {address}")

    def resume(self, address: str) -> None:
        slot = self._slots[address]
        if slot.status != _PAUSED:
            return
        slot.status = _UP
        self._record(f"resume {address}")
        queued, slot.paused_queue = slot.paused_queue, []
        for source, payload, reliable in queued:
            if slot.status != _UP:
                break
            self._apply(address, slot.node.deliver(source, payload, reliable, self.now_ms))
        if slot.status == _UP and slot.missed_tick:
            slot.missed_tick = False
            self._apply(address, slot.node.tick(self.now_ms))

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` (a fault, a command) at simulated ``time_ms``."""
        self._push(max(time_ms, self.now_ms), _CALL, "", _run_action, action, None)

    def invoke(self, address: str, command: Callable[[int], Step]) -> None:
        """Run a command on a node now (e.g. ``lambda now: node.leave(now)``) and
        carry out the :class:`Step` it returns. Ignored if the node is not up."""
        if self._slots[address].status == _UP:
            self._apply(address, command(self.now_ms))

    # ------------------------------------------------------------------- run

    def run_until(self, time_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to ``time_ms``; with ``stop``, return True as soon as
        it holds (checked after every event). The clock ends at ``time_ms``
        unless stopped early."""
        queue = self._queue
        while queue and queue[0][0] <= time_ms:
            event = heapq.heappop(queue)
            self.now_ms = event[0]
            self._handle(event)
            if stop is not None and stop():
                return True
        self.now_ms = max(self.now_ms, time_ms)
        return stop is not None and stop()

    def run_for(self, duration_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        return self.run_until(self.now_ms + duration_ms, stop)

    def record(self, line: str) -> None:
        """Add a line (with the time) to the trace."""
        self._record(line)

    def trace_hash(self) -> str:
        """Hash of every trace line so far: equal seeds give equal hashes."""
        return self._trace.copy().hexdigest()

    @property
    def trace_line_count(self) -> int:
        return self._trace_lines

    # -------------------------------------------------------------- internals

    def _push(self, time_ms: int, kind: int, address: str, a: object, b: object, c: object) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, (time_ms, self._sequence, kind, address, a, b, c))

    def _handle(self, event: tuple[int, int, int, str, object, object, object]) -> None:
        _, _, kind, address, a, b, c = event
        if kind == _DELIVER:
            self._deliver(address, a, b, c)
        elif kind == _TICK:
            self._tick(address, event[0])
        else:
            assert callable(a)
            a(self, address, b)

    def _deliver(self, address: str, source: object, payload: object, reliable: object) -> None:
        slot = self._slots.get(address)
        assert isinstance(source, str) and isinstance(reliable, bool)
        if slot is None or slot.status == _CRASHED:
            self.counters.dropped_down += 1
            return
        if slot.status == _PAUSED:
            if len(slot.paused_queue) >= self._paused_queue_max:
                self.counters.dropped_pause_overflow += 1
            else:
                slot.paused_queue.append((source, payload, reliable))
            return
        self.counters.delivered += 1
        self._apply(address, slot.node.deliver(source, payload, reliable, self.now_ms))

    def _tick(self, address: str, time_ms: int) -> None:
        slot = self._slots[address]
        if slot.wake_ms != time_ms:
            return  # superseded by an earlier wake-up
        slot.wake_ms = None
        if slot.status == _PAUSED:
            slot.missed_tick = True
            return
        if slot.status == _UP:
            self._apply(address, slot.node.tick(self.now_ms))

    def _apply(self, address: str, step: Step) -> None:
        for line in step.trace:
            self._record(line)
        for envelope in step.messages:
            self._send(address, envelope)
        wake_ms = step.next_wake_ms
        if wake_ms is not None:
            slot = self._slots[address]
            wake_ms = max(wake_ms, self.now_ms)
            if slot.wake_ms is None or wake_ms < slot.wake_ms:
                slot.wake_ms = wake_ms
                self._push(wake_ms, _TICK, address, None, None, None)

    def _send(self, source: str, envelope: Envelope) -> None:
        counters = self.counters
        counters.sent += 1
        if envelope.reliable:
            counters.sent_reliable += 1
        if self._count_by_source:
            counters.sent_by_source[source] = counters.sent_by_source.get(source, 0) + 1
        destination = envelope.destination
        groups = self._groups
        if groups is not None and groups.get(source, -1) != groups.get(destination, -1):
            counters.dropped_partition += 1
            return
        link = (
            self._links.get((source, destination), self._default_link)
            if self._links
            else (self._default_link)
        )
        if not envelope.reliable and link.loss > 0.0 and self._rng.random() < link.loss:
            counters.dropped_loss += 1
            return
        delay_ms = link.delay_min_ms
        if link.delay_max_ms > link.delay_min_ms:
            delay_ms = self._rng.randint(link.delay_min_ms, link.delay_max_ms)
        self._push(
            self.now_ms + delay_ms, _DELIVER, destination, source, envelope.payload,
            envelope.reliable,
        )  # fmt: skip

    def _record(self, line: str) -> None:
        self._trace.update(f"{self.now_ms} {line}\n".encode())
        self._trace_lines += 1


def _start_node(simulator: Simulator, address: str, _: object) -> None:
    slot = simulator._slots[address]
    if slot.started:
        return
    slot.started = True
    slot.status = _UP
    simulator._apply(address, slot.node.start(simulator.now_ms))


def _run_action(simulator: Simulator, address: str, action: object) -> None:
    assert callable(action)
    action()
