"""Applies the metadata log ``__cluster/0`` to this node's catalogue as it commits.

A node that holds a replica of ``__cluster/0`` reads it locally, woken by each
commit; the others long-poll it from a node that holds one (the ordinary ``Fetch``
call, see ``docs/design.md``, "Metadata catch-up by long-poll"). Every batch read is
applied to the :class:`~laminar.server.metadata.MetadataState` in offset order, and
the changes it made are handed to ``on_changes``. When the log (local or remote)
starts past what was applied (snapshots let the prefix go), the state rebuilds from
the first snapshot after the start; once a snapshot is applied, ``advance_start``
lets the local replica delete its log below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from laminar.errors import OffsetOutOfRangeError
from laminar.replica.core import ReplicaCore
from laminar.server.metadata import MetadataChange, MetadataState
from laminar.server.tasks import cancel_and_wait

_LOG = logging.getLogger(__name__)

READ_BYTES_MAX = 1 << 20
"""The most metadata log read or fetched at once."""
_RETRY_S = 0.2


class MetadataFollower:
    """Keeps ``state`` up to date with ``__cluster/0``.

    ``local()`` returns this node's replica core of ``__cluster/0`` or None;
    ``fetch_remote(offset)`` long-polls another node for batches from ``offset``
    (b"" when there is nothing new or nobody answered; OffsetOutOfRangeError when
    its log starts past ``offset``). ``advance_start(offset)`` asks the local
    replica to delete its log below ``offset``. Call :meth:`committed` whenever the
    local replica's high watermark moves.
    """

    def __init__(
        self,
        state: MetadataState,
        local: Callable[[], ReplicaCore | None],
        fetch_remote: Callable[[int], Awaitable[bytes]],
        on_changes: Callable[[list[MetadataChange]], None],
        advance_start: Callable[[int], None] = lambda offset: None,
    ) -> None:
        self.state = state
        self._local = local
        self._fetch_remote = fetch_remote
        self._on_changes = on_changes
        self._advance_start = advance_start
        self._committed = asyncio.Event()
        self._applied = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metadata")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    def committed(self) -> None:
        """The local replica of ``__cluster/0`` committed more."""
        self._committed.set()

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Wait until the catalogue applied the log up to ``offset``; TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.state.applied_offset < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            event = self._applied
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a failed fetch or read: try again shortly
                _LOG.debug("metadata catch-up: %s", error)
                await asyncio.sleep(_RETRY_S)

    async def _step(self) -> None:
        state = self.state
        core = self._local()
        if core is not None and core.high_watermark > 0:
            if state.read_offset < core.start_offset:
                state.rebuild_from(core.start_offset)
            if state.read_offset < core.high_watermark:
                self.apply(core.read(state.read_offset, READ_BYTES_MAX))
                return
            self._committed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._committed.wait(), 1.0)
            return
        try:
            data = await self._fetch_remote(state.read_offset)
        except OffsetOutOfRangeError as error:
            if error.start_offset > state.read_offset:
                state.rebuild_from(error.start_offset)
            return
        if data:
            self.apply(data)

    def apply(self, data: bytes) -> None:
        """Apply a read of ``__cluster/0`` and publish what changed."""
        changes = self.state.apply(data)
        if changes:
            self._on_changes(changes)
        for snapshot in self.state.take_snapshots():
            self._advance_start(snapshot.as_of_offset)
        self._applied.set()
        self._applied = asyncio.Event()
