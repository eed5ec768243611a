"""cancel_and_wait: a stopping node's tasks end, even one that swallows a
cancellation (Python 3.11's ``asyncio.wait_for`` can: CPython gh-86296)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from laminar.server.tasks import cancel_and_wait

STOP_S = 5.0  # far above CANCEL_AGAIN_S: the old single cancel waited for ever


async def stops_within(task: asyncio.Task[None], seconds: float) -> bool:
    """Whether cancel_and_wait(task) returns within ``seconds``."""
    stopping = asyncio.ensure_future(cancel_and_wait(task))
    done, _ = await asyncio.wait({stopping}, timeout=seconds)
    if not done:
        stopping.cancel()
    return bool(done)


def test_a_loop_whose_wait_for_swallows_the_cancellation_still_stops() -> None:
    """The metadata follower's shape: a loop around ``wait_for(event.wait(), ...)``.
    The event is set in the same loop pass as the cancellation arrives, so on 3.11
    ``wait_for`` returns instead of raising, and the loop goes on: one cancel()
    would wait for it for ever (a node's SIGTERM did, once, in CI)."""

    async def main() -> int:
        event = asyncio.Event()
        rounds = 0

        async def follower() -> None:
            nonlocal rounds
            while True:
                rounds += 1
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), 1.0)

        task = asyncio.create_task(follower())
        await asyncio.sleep(0.01)
        event.set()  # the inner wait completes ...
        assert await stops_within(task, STOP_S)  # ... as the cancel arrives
        assert task.cancelled()
        return rounds

    assert asyncio.run(main()) >= 1


def test_a_task_that_swallows_every_first_cancellation_is_cancelled_again() -> None:
    async def main() -> None:
        swallowed = 0

        async def stubborn() -> None:
            nonlocal swallowed
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1  # and carries on
            await asyncio.sleep(3600)

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        assert await stops_within(task, STOP_S)
        assert task.cancelled() and swallowed == 1

    asyncio.run(main())


def test_a_task_that_failed_or_is_none_is_waited_for_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async def failing() -> None:
            raise ValueError("its own error")

        task = asyncio.create_task(failing())
        await asyncio.sleep(0)
        await cancel_and_wait(task)
        await cancel_and_wait(None)

    asyncio.run(main())
    assert "never retrieved" not in caplog.text
