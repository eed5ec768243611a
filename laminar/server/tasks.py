"""Stopping the node's background tasks."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it has ended; how it
    ended (cancelled, or an error of its own) does not matter to a stopping node."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
