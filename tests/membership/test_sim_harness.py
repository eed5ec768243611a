"""The simulator on its own, with a toy core: what any core plugged into it gets."""

from __future__ import annotations

from dataclasses import dataclass, field

from laminar.testing.sim import Envelope, LinkConfig, Simulator, Step


@dataclass
class Counter:
    """Counts to ``goal`` by sending a number to ``peer``, which adds one and sends
    it back. Durable state: the highest number seen (survives crashes)."""

    address: str
    peer: str
    goal: int = 50
    durable_highest: int = 0
    volatile: list[int] = field(default_factory=list)
    ticks: int = 0
    log: list[tuple[int, str, int]] = field(default_factory=list)

    def start(self, now_ms: int) -> Step:
        return Step([Envelope(self.peer, 1)] if self.address == "a" else [], now_ms + 100)

    def deliver(self, source: str, payload: object, reliable: bool, now_ms: int) -> Step:
        assert isinstance(payload, int)
        self.log.append((now_ms, source, payload))
        self.volatile.append(payload)
        self.durable_highest = max(self.durable_highest, payload)
        if payload >= self.goal:
            return Step(trace=[f"{self.address} done {payload}"])
        return Step([Envelope(self.peer, payload + 1, reliable=reliable)])

    def tick(self, now_ms: int) -> Step:
        self.ticks += 1
        return Step(next_wake_ms=now_ms + 100, trace=[f"{self.address} tick"])

    def crash(self) -> None:
        self.volatile = []

    def restart(self, now_ms: int) -> Step:
        return Step([Envelope(self.peer, self.durable_highest + 1)], now_ms + 100)


def test_messages_flow_ticks_fire_and_trace_is_reproducible() -> None:
    hashes = set()
    for _ in range(2):
        simulator = Simulator(seed=3, default_link=LinkConfig(delay_min_ms=1, delay_max_ms=9))
        a, b = Counter("a", "b"), Counter("b", "a")
        simulator.add_node(a)
        simulator.add_node(b)
        simulator.run_until(2000)
        assert a.durable_highest == 50 and b.durable_highest == 49
        assert 19 <= a.ticks <= 21  # one tick every 100 ms
        hashes.add(simulator.trace_hash())
    assert len(hashes) == 1


def test_loss_partition_crash_restart_and_pause() -> None:
    simulator = Simulator(seed=4, default_link=LinkConfig(loss=1.0))
    a, b = Counter("a", "b"), Counter("b", "a")
    simulator.add_node(a)
    simulator.add_node(b)
    simulator.run_until(500)
    assert b.log == [] and simulator.counters.dropped_loss == 1
    # Reliable messages survive loss but not partitions.
    simulator.set_default_link(LinkConfig())
    simulator.partition([["a"], ["b"]])
    simulator.invoke("a", lambda now: Step([Envelope("b", 10, reliable=True)]))
    simulator.run_for(100)
    assert b.log == [] and simulator.counters.dropped_partition == 1
    simulator.heal()
    # A paused node queues messages and gets them (then its tick) on resume.
    simulator.pause("b")
    ticks_before = b.ticks
    simulator.invoke("a", lambda now: Step([Envelope("b", 20)]))
    simulator.run_for(1000)
    assert b.log == [] and b.ticks == ticks_before
    simulator.resume("b")
    assert [payload for _, _, payload in b.log] == [20]
    assert b.ticks == ticks_before + 1
    simulator.run_for(1000)
    assert max(a.durable_highest, b.durable_highest) == 50
    # Crash drops volatile state and messages in flight; restart uses durable state.
    simulator.crash("b")
    assert b.volatile == [] and not simulator.is_up("b")
    simulator.invoke("a", lambda now: Step([Envelope("b", 30)]))
    simulator.run_for(100)
    assert simulator.counters.dropped_down == 1
    simulator.restart("b")
    simulator.run_for(1000)
    assert a.log[-1][1:] == ("b", b.durable_highest + 1)  # resumed from durable state


def test_scheduled_actions_run_at_their_time() -> None:
    simulator = Simulator(seed=5)
    a, b = Counter("a", "b", goal=10_000), Counter("b", "a", goal=10_000)
    simulator.add_node(a)
    simulator.add_node(b, start_at_ms=50)
    simulator.at(300, lambda: simulator.crash("b"))
    simulator.run_until(1000)
    assert not simulator.is_up("b")
    assert all(time_ms <= 300 for time_ms, _, _ in b.log)


def test_random_delays_reorder_and_per_link_settings_apply() -> None:
    simulator = Simulator(seed=6, default_link=LinkConfig(delay_min_ms=1, delay_max_ms=50))
    # Not named "a": such a Counter sends nothing on its own at start.
    a, b, c = Counter("x", "y", goal=0), Counter("y", "x", goal=0), Counter("z", "x", goal=0)
    for node in (a, b, c):
        simulator.add_node(node)
    simulator.run_for(1)
    # Only the z → x link loses everything.
    simulator.set_link("z", "x", LinkConfig(loss=1.0))
    burst = [Envelope("y", number) for number in range(100)]
    simulator.invoke("x", lambda now: Step(burst))
    simulator.invoke("z", lambda now: Step([Envelope("x", 7), Envelope("y", 8)]))
    simulator.run_for(100)
    received = [payload for _, source, payload in b.log if source == "x"]
    assert sorted(received) == list(range(100))  # all delivered ...
    assert received != list(range(100))  # ... but not in the order sent
    assert [payload for _, source, payload in b.log if source == "z"] == [8]
    assert [payload for _, source, payload in a.log if source == "z"] == []
