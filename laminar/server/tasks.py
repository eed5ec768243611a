"""Stopping the node's background tasks."""

from __future__ import annotations

import asyncio
from typing import Any

CANCEL_AGAIN_S = 0.5
"""How long :func:`cancel_and_wait` waits for a cancelled task before cancelling it
again."""


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to stop) and wait until it has ended; how it
    ended (cancelled, or an error of its own) does not matter to a stopping node.

    A task can swallow one cancellation and go on: on Python 3.11, an
    ``asyncio.wait_for`` whose inner future completes as the cancellation arrives
    returns its result instead of raising (CPython gh-86296), and a loop around it
    then never ends. So the task is cancelled again every ``CANCEL_AGAIN_S`` until it
    has ended (a node's SIGTERM once waited for ever in the metadata follower's
    loop)."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_S)
    if not task.cancelled():
        task.exception()  # retrieved: an error of its own is not logged as unhandled
