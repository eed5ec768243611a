"""Membership on its own thread, so that a busy node is not declared dead.

The node's event loop runs every replica core; opening a hundred partitions or a
burst of elections can keep it busy for a while. SWIM's probes must be answered
within the probe timeout regardless, so the membership shell runs on a dedicated
thread with its own event loop. This wrapper marshals calls to it and hands events
back to the node's loop, together with a fresh snapshot of the view, so the node
reads members without touching the other thread's state. Reading the view never
waits for the membership thread: every change of a member comes with an event,
and each event carries the view after it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import Any

from laminar.membership import LocalMember, Member, MemberEvent, MembershipConfig
from laminar.membership.crypto import Keyring
from laminar.membership.keyring import KeyringState
from laminar.membership.shell import MembershipNode


class ThreadedMembership:
    """A :class:`MembershipNode` running on its own thread and event loop."""

    def __init__(
        self,
        config: MembershipConfig,
        local: LocalMember,
        cluster_key: bytes,
        *,
        bind_address: str | None = None,
        seeds: Sequence[str],
        incarnation: int,
        on_event: Callable[[MemberEvent], None],
        keyring: Keyring | None = None,
    ) -> None:
        self._args: dict[str, Any] = {
            "keyring": keyring,
            "config": config,
            "local": local,
            "cluster_key": cluster_key,
            "bind_address": bind_address,
            "seeds": seeds,
            "incarnation": incarnation,
        }
        self._on_event = on_event
        self.keyring_state = KeyringState() if keyring is None else keyring.state
        """The keyring the membership node uses (updated by :meth:`set_keyring`)."""
        self._main: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._node: MembershipNode | None = None
        self._view: tuple[Member, ...] = ()
        self._by_id: dict[str, Member] = {}
        self.local = local

    async def start(self) -> None:
        self._main = asyncio.get_running_loop()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="laminar-membership", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(ready)

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = _new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def main() -> None:
            node = MembershipNode(on_event=self._deliver, **self._args)
            self._node = node
            try:
                await node.start()
            except BaseException as error:
                ready.set_exception(error)
                return
            self.local = node.local
            self._set_view(self._snapshot())  # the node's loop waits on `ready`
            ready.set_result(None)

        loop.run_until_complete(main())
        if ready.exception() is None:
            loop.run_forever()
        loop.close()

    def _deliver(self, event: MemberEvent) -> None:
        """Runs on the membership thread: snapshot, then hand over to the node."""
        view = self._snapshot()
        assert self._main is not None
        self._main.call_soon_threadsafe(self._publish, event, view)

    def _snapshot(self) -> tuple[Member, ...]:
        assert self._node is not None
        return self._node.view()

    def _publish(self, event: MemberEvent, view: tuple[Member, ...]) -> None:
        self._view = view
        self._by_id = {member.node_id: member for member in view}
        self._on_event(event)

    # ------------------------------------------------------------------ queries

    def view(self) -> tuple[Member, ...]:
        """The latest view handed over with an event (never blocks the caller)."""
        return self._view

    def member(self, node_id: str) -> Member | None:
        """One member of :meth:`view`, or None (never blocks the caller)."""
        return self._by_id.get(node_id)

    # ------------------------------------------------------------------ commands

    def update_local(self, **changes: Any) -> None:
        """Change weight, zone, metadata or gRPC address (gossiped); returns at once."""
        assert self._loop is not None and self._node is not None
        node = self._node

        def apply() -> None:
            node.update_local(**changes)
            view = node.view()
            assert self._main is not None
            self._main.call_soon_threadsafe(self._set_view, view)

        self._loop.call_soon_threadsafe(apply)

    def _set_view(self, view: tuple[Member, ...]) -> None:
        self._view = view
        self._by_id = {member.node_id: member for member in view}

    async def set_keyring(self, state: KeyringState) -> None:
        """Apply changed gossip keys or switches on the membership thread."""

        async def apply(node: MembershipNode) -> None:
            node.set_keyring(state)

        await self._call(apply)
        self.keyring_state = state

    async def counters(self) -> dict[str, int]:
        """Membership's counters (dropped frames by reason, ...), read on its thread."""
        result: dict[str, int] = {}

        async def read(node: MembershipNode) -> None:
            result.update(node.counters())

        await self._call(read)
        return result

    async def leave(self) -> None:
        await self._call(lambda node: node.leave())

    async def stop(self, *, leave: bool = True) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._node is not None:
            await self._call(lambda node: node.stop(leave=leave))
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)

    async def _call(self, action: Callable[[MembershipNode], Any]) -> None:
        assert self._loop is not None and self._node is not None
        future = asyncio.run_coroutine_threadsafe(action(self._node), self._loop)
        await asyncio.wrap_future(future)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (less CPU, so less time holding the node's GIL)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
