"""One facade step, written once, driven by the synchronous facade and by the asyncio one.

A *step* is a generator: it decides, and yields an *effect* (a value that names
what must be done: a call on the core's loop, a blocking network call, a wait) each
time the two facades would do it differently; it is sent the effect's result, or
has the effect's exception thrown in at that ``yield``, so its ``try`` /
``finally`` blocks hold as in straight-line code. :func:`drive` carries the
effects out in the caller's thread, :func:`drive_async` on the running event loop
(the facade's ``perform`` says how); :func:`iterate` and :func:`iterate_async` do
the same for a step that also hands items out to the application
(:class:`HandOut`: the consumer's records and batches). :class:`~laminar_client.groups.GroupSession`
writes its handover the same way (its steps are :mod:`laminar.groups.member`'s).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["HandOut", "Steps", "drive", "drive_async", "iterate", "iterate_async"]

_E = TypeVar("_E")
_T = TypeVar("_T")

Steps = Generator[_E, Any, _T]
"""A step: yields effects ``_E``, is sent their results, returns ``_T``."""


def drive(steps: Steps[_E, _T], perform: Callable[[_E], Any]) -> _T:
    """Run ``steps`` to the end, carrying out each effect with ``perform``."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            result: _T = stop.value
            return result
        value = error = None
        try:
            value = perform(effect)
        except BaseException as caught:  # Ctrl-C too: the step's finally blocks run
            error = caught


async def drive_async(steps: Steps[_E, _T], perform: Callable[[_E], Awaitable[Any]]) -> _T:
    """:func:`drive` on the running event loop: each effect is awaited."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            result: _T = stop.value
            return result
        value = error = None
        try:
            value = await perform(effect)
        except BaseException as caught:  # cancellation too: the step's finally blocks run
            error = caught


@dataclass(frozen=True, slots=True)
class HandOut:
    """Not an effect: ``items`` to hand out to whoever iterates the step."""

    items: Iterator[Any]


def iterate(steps: Steps[Any, None], perform: Callable[[Any], Any]) -> Iterator[Any]:
    """:func:`drive` for a step that hands items out: yields them (``yield from``:
    closing this generator closes the one it is in, then the step)."""
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                effect = steps.send(value) if error is None else steps.throw(error)
            except StopIteration:
                return
            value = error = None
            if isinstance(effect, HandOut):
                yield from effect.items
                continue
            try:
                value = perform(effect)
            except BaseException as caught:
                error = caught
    finally:
        steps.close()


async def iterate_async(
    steps: Steps[Any, None], perform: Callable[[Any], Awaitable[Any]]
) -> AsyncIterator[Any]:
    """:func:`iterate` on the running event loop (an async generator, which cannot
    ``yield from``: the items are yielded one by one)."""
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                effect = steps.send(value) if error is None else steps.throw(error)
            except StopIteration:
                return
            value = error = None
            if isinstance(effect, HandOut):
                for item in effect.items:
                    yield item
                continue
            try:
                value = await perform(effect)
            except BaseException as caught:
                error = caught
    finally:
        steps.close()
