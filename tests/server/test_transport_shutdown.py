"""The peer transport stops its links within a bound, whatever the peers do.

Issue 13, point 8: on Python 3.11, ``asyncio.wait_for(create_connection(...))``
returns the connection's outcome instead of raising ``CancelledError`` when the
cancel lands in the instant the connect completes, so a link that relied on the
cancel kept reconnecting for ever and ``PeerTransport.close`` waited on it for
ever. The deterministic tests run on a loop whose ``create_connection`` calls the
test back in exactly that instant (the connect has completed, the link task has
not resumed yet); one test stresses the same race on real refused connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import random
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from laminar.replica.coalesce import PeerBundle
from laminar.replica.messages import Heartbeat
from laminar.replica.types import NodeId
from laminar.server.transport import LinkState, PeerTransport, TransportConfig

DEADLINE_S = 10.0
CLUSTER = "cluster-1"
CLOSE_TIMEOUT_MS = 2_000
CONFIG = TransportConfig(
    connect_timeout_ms=300,
    backoff_initial_ms=1,  # reconnect at once: closes often land as a connect fails
    backoff_max_ms=1,
    keepalive_time_ms=1_000,
    keepalive_timeout_ms=1_000,
    close_timeout_ms=CLOSE_TIMEOUT_MS,
)


class RacingLoop(asyncio.SelectorEventLoop):
    """A loop whose ``create_connection`` runs ``on_connect_done`` once the connect
    has completed (refused, or open when ``accept`` is set) and just before the
    caller learns of it: a cancel issued there lands as the connect completes."""

    on_connect_done: Callable[[], None] | None = None
    accept = False
    stuck: asyncio.Event | None = None
    ending = False

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self.ending:  # the test is over: end the links even if they ignore cancels
            raise asyncio.CancelledError
        if self.stuck is not None:
            await ignore_cancellation_until(self.stuck)
        result = await super().create_connection(*args, **kwargs) if self.accept else None
        callback, self.on_connect_done = self.on_connect_done, None
        if callback is not None:
            callback()
        if result is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "refused by the test loop")
        return result


async def ignore_cancellation_until(event: asyncio.Event) -> None:
    """Model a connect that does not end when cancelled (until ``event`` is set)."""
    while not event.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await event.wait()


def run_on_racing_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def wrapper() -> None:
        async def bounded() -> None:
            async with asyncio.timeout(DEADLINE_S * 3):
                await test()

        with asyncio.Runner(loop_factory=RacingLoop) as runner:
            try:
                runner.run(bounded())
            finally:
                loop = runner.get_loop()
                assert isinstance(loop, RacingLoop)
                loop.ending = True

    return wrapper


def racing_loop() -> RacingLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, RacingLoop)
    return loop


def bundle(number: int) -> PeerBundle:
    return PeerBundle(((("events", 0), Heartbeat(1, NodeId("a"), number)),), ())


def transport(**options: Any) -> PeerTransport:
    return PeerTransport("a", CLUSTER, lambda source, received: None, config=CONFIG, **options)


def link_tasks() -> list[asyncio.Task[Any]]:
    return [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("laminar-peer-link") and not task.done()
    ]


def refused_address() -> str:
    """An address on which nobody listens: connections to it are refused."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{unused.getsockname()[1]}"


async def ended(tasks: list[asyncio.Task[Any]], timeout_s: float) -> bool:
    """Whether every task in ``tasks`` ended within ``timeout_s``."""
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    return not pending


# ---------------------------------------------------------------- tests


@run_on_racing_loop
async def test_forget_ends_a_link_whose_cancel_lands_as_the_connect_is_refused() -> None:
    a = transport()
    racing_loop().on_connect_done = lambda: a.forget("b")
    try:
        a.send("b", refused_address(), bundle(0))
        tasks = link_tasks()
        assert len(tasks) == 1
        assert await ended(tasks, 2.0), "the forgotten link kept reconnecting"
        assert a.link_state("b") is None
    finally:
        await a.close()


@run_on_racing_loop
async def test_close_ends_a_link_whose_cancel_lands_as_the_connect_is_refused() -> None:
    loop = racing_loop()
    a = transport()
    closing: list[asyncio.Task[None]] = []
    loop.on_connect_done = lambda: closing.append(loop.create_task(a.close()))
    a.send("b", refused_address(), bundle(0))
    tasks = link_tasks()
    deadline = loop.time() + DEADLINE_S
    while not closing:  # until the link's first connect completes
        assert loop.time() < deadline
        await asyncio.sleep(0.001)
    started = loop.time()
    done, _ = await asyncio.wait(closing, timeout=DEADLINE_S)
    assert done, "close() never returned"
    # Not merely bounded: the link ended, long before close() would give up on it.
    assert (loop.time() - started) * 1000 < CLOSE_TIMEOUT_MS / 2
    assert all(task.done() for task in tasks)
    assert link_tasks() == []


@run_on_racing_loop
async def test_forget_closes_a_connection_that_opens_as_the_cancel_lands() -> None:
    # The other side of the same race: the connect succeeds in that instant, and a
    # link that missed the cancel would sit on the open connection for ever.
    loop = racing_loop()
    accepted: list[asyncio.Transport] = []
    lost = asyncio.Event()

    class Peer(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            accepted.append(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            lost.set()

    server = await loop.create_server(Peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    a = transport()
    loop.accept = True
    loop.on_connect_done = lambda: a.forget("b")
    try:
        a.send("b", f"127.0.0.1:{port}", bundle(0))
        tasks = link_tasks()
        assert await ended(tasks, 2.0), "the forgotten link kept its connection"
        await asyncio.wait_for(lost.wait(), DEADLINE_S)  # and closed it
        assert len(accepted) == 1
    finally:
        await a.close()
        server.close()


def test_close_gives_up_after_its_bound_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    @run_on_racing_loop
    async def scenario() -> None:
        loop = racing_loop()
        stuck = asyncio.Event()
        loop.stuck = stuck  # the link's connect ignores its cancel
        a = transport()
        a.send("b", refused_address(), bundle(0))
        tasks = link_tasks()
        await asyncio.sleep(0)  # the link task is now inside the connect
        started = loop.time()
        try:
            with caplog.at_level(logging.WARNING, logger="laminar.server.transport"):
                await asyncio.wait_for(a.close(timeout_ms=200), DEADLINE_S)
            elapsed_ms = (loop.time() - started) * 1000
            assert 190 <= elapsed_ms < 2_000
            assert not tasks[0].done()  # given up on, not waited for
        finally:
            stuck.set()
            loop.stuck = None
            assert await ended(tasks, DEADLINE_S)

    scenario()
    assert [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()] == [
        "peer links did not stop in time node=a links=1 timeout_ms=200"
    ]


def run_on_both_loops(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def wrapper() -> None:
        async def bounded() -> None:
            async with asyncio.timeout(DEADLINE_S * 3):
                await test()

        asyncio.run(bounded())
        uvloop.run(bounded())

    return wrapper


@run_on_both_loops
async def test_forget_ends_a_link_to_a_peer_that_refuses() -> None:
    a = transport()
    try:
        a.send("b", refused_address(), bundle(0))
        tasks = link_tasks()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while a.link_state("b") is not LinkState.BACKOFF:
            assert loop.time() < deadline
            await asyncio.sleep(0.001)
        a.forget("b")
        assert a.link_state("b") is None
        assert await ended(tasks, 2.0)
    finally:
        await a.close()


@run_on_both_loops
async def test_close_is_prompt_with_peers_that_refuse_whenever_it_lands() -> None:
    # Real refused connections, reconnecting every millisecond, closed after a
    # random delay: some closes land as a connect fails.
    rng = random.Random(13)
    loop = asyncio.get_running_loop()
    addresses = [refused_address() for _ in range(4)]
    for _ in range(40):
        a = transport()
        for number, address in enumerate(addresses):
            a.send(f"peer-{number}", address, bundle(0))
        await asyncio.sleep(rng.random() * 0.003)
        started = loop.time()
        await a.close()
        assert (loop.time() - started) * 1000 < CLOSE_TIMEOUT_MS / 2
        assert link_tasks() == []
