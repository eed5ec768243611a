"""Helpers for in-process asyncio tests of the server: a bounded test runner and
waiting on a condition with a deadline (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

AsyncTest = Callable[[Path], Coroutine[Any, Any, None]]


def bounded(timeout_s: float) -> Callable[[AsyncTest], Callable[[Path], None]]:
    """Run an ``async def test(tmp_path)`` with ``asyncio.run``, failing after
    ``timeout_s``."""

    def decorate(test: AsyncTest) -> Callable[[Path], None]:
        @functools.wraps(test)
        def wrapper(tmp_path: Path) -> None:
            async def run() -> None:
                async with asyncio.timeout(timeout_s):
                    await test(tmp_path)

            asyncio.run(run())

        return wrapper

    return decorate


async def wait_until(
    condition: Callable[[], object], what: str, *, timeout_s: float, poll_s: float = 0.005
) -> None:
    """Poll ``condition`` until it is truthy; fail naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(poll_s)
