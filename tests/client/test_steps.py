"""laminar_client._steps: one step, driven in the caller's thread and on a loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from laminar_client._steps import HandOut, Steps, drive, drive_async, iterate, iterate_async


def close_like(log: list[str]) -> Steps[str, str]:
    """Two effects in a try, one more in its finally (as Consumer.close)."""
    try:
        first = yield "revoke"
        log.append(f"revoke -> {first}")
        yield "fail"
    finally:
        log.append("finally")
        yield "stop core"
    return "never"


def perform_sync(log: list[str]) -> Any:
    def perform(effect: str) -> str:
        log.append(effect)
        if effect == "fail":
            raise KeyError("boom")
        return effect.upper()

    return perform


def test_an_effects_error_is_raised_inside_the_step_so_its_finally_still_acts() -> None:
    log: list[str] = []
    with pytest.raises(KeyError, match="boom"):
        drive(close_like(log), perform_sync(log))
    assert log == ["revoke", "revoke -> REVOKE", "fail", "finally", "stop core"]


def test_the_async_driver_does_the_same_with_awaited_effects() -> None:
    log: list[str] = []
    sync = perform_sync(log)

    async def perform(effect: str) -> str:
        await asyncio.sleep(0)
        return str(sync(effect))

    with pytest.raises(KeyError, match="boom"):
        asyncio.run(drive_async(close_like(log), perform))
    assert log == ["revoke", "revoke -> REVOKE", "fail", "finally", "stop core"]


def test_a_step_returns_its_value() -> None:
    def steps() -> Steps[int, int]:
        a = yield 1
        b = yield 2
        return int(a) + int(b)

    assert drive(steps(), lambda effect: effect * 10) == 30


def reading(handed_out: list[Iterator[int]]) -> Steps[Any, None]:
    for chunk in ([1, 2], [3]):
        size = yield "wait"
        assert size == "WAIT"
        items = iter(chunk)
        handed_out.append(items)
        yield HandOut(items)


def test_iterate_hands_items_out_between_effects_and_closes_the_step() -> None:
    handed: list[Iterator[int]] = []
    assert list(iterate(reading(handed), str.upper)) == [1, 2, 3]
    steps = reading([])
    iterator = iterate(steps, str.upper)
    assert next(iterator) == 1
    iterator.close()  # leaving early closes the step too
    assert steps.gi_frame is None


def test_iterate_async_hands_the_same_items_out() -> None:
    async def perform(effect: str) -> str:
        return effect.upper()

    async def collect() -> list[int]:
        return [item async for item in iterate_async(reading([]), perform)]

    assert asyncio.run(collect()) == [1, 2, 3]
