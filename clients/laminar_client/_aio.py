"""The asyncio side of the client: gRPC calls on an event loop, and the loop thread
that runs them for the synchronous facades.

:class:`AsyncTransport` is :class:`~laminar_client.transport.Transport` on
``grpc.aio``: one channel per address, one typed call, the same error table and the
same "no answer" rule. :class:`LoopThread` is the one private event loop a
synchronous :class:`~laminar_client.producer.Producer` or
:class:`~laminar_client.consumer.Consumer` runs its asyncio core on; the caller's
thread never hops through it per record (see ``docs/design.md``, "Client").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from laminar.errors import RequestTimeoutError
from laminar_client.tls import RETIRED_CHANNEL_GRACE_S, ChannelTls, TlsOptions
from laminar_client.transport import DEFAULT_CHANNEL_OPTIONS, SERVICE_PATH, call_error, serialize

_R = TypeVar("_R", bound=Message)
_T = TypeVar("_T")


class Unimplemented(Exception):  # noqa: N818 - what the server said, not an error of ours
    """The node does not know the method (it predates it)."""


class AsyncTransport:
    """``grpc.aio`` channels by address, created on first use on the running loop.

    ``call`` raises the node's :class:`~laminar.errors.LaminarError`, or a
    :class:`~laminar.errors.NoAnswerError` when no Laminar answer came back. With
    ``tls`` (the client's :class:`TlsOptions`) the channels are TLS, rebuilt on first
    use after the files changed; the old ones close once their calls end (at most
    after a grace). Use it from one event loop only.
    """

    def __init__(
        self,
        *,
        channel_options: Sequence[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS,
        call_metadata: Sequence[tuple[str, str]] = (),
        tls: TlsOptions | None = None,
    ):
        self._tls = ChannelTls(tls) if tls is not None else None
        self._options = tuple(channel_options)
        if self._tls is not None:
            self._options = self._tls.channel_options(self._options)
        self._metadata = tuple(call_metadata)  # the bearer token, if any
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._callables: dict[tuple[str, str], grpc.aio.UnaryUnaryMultiCallable] = {}
        self._generation = 0
        self._retiring: set[asyncio.Task[None]] = set()
        self._retired: set[grpc.aio.Channel] = set()
        self._closed = False

    def _check_tls(self) -> grpc.ChannelCredentials | None:
        """The current credentials; on a new generation every channel is retired."""
        if self._tls is None:
            return None
        generation, credentials = self._tls.current()
        if generation != self._generation:
            self._generation = generation
            old = list(self._channels.values())
            self._channels.clear()
            self._callables.clear()
            loop = asyncio.get_running_loop()
            for channel in old:  # close() with a grace waits for the calls in flight
                self._retired.add(channel)
                task = loop.create_task(channel.close(RETIRED_CHANNEL_GRACE_S))
                self._retiring.add(task)
                task.add_done_callback(self._retiring.discard)
                task.add_done_callback(partial(self._forget_retired, channel))
        return credentials

    def _forget_retired(self, channel: grpc.aio.Channel, _: object) -> None:
        self._retired.discard(channel)

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The token, and the certificate assertion of a client with a certificate."""
        assertion = self._tls.assertion() if self._tls is not None else None
        metadata = self._metadata if assertion is None else (*self._metadata, assertion)
        return metadata or None

    def _callable(
        self, address: str, method: str, response_type: type[Message]
    ) -> grpc.aio.UnaryUnaryMultiCallable:
        credentials = self._check_tls()
        key = (address, method)
        callable_ = self._callables.get(key)
        if callable_ is None:
            if self._closed:
                raise RuntimeError("transport is closed")
            channel = self._channels.get(address)
            if channel is None:
                if credentials is None:
                    channel = grpc.aio.insecure_channel(address, options=self._options)
                else:
                    channel = grpc.aio.secure_channel(address, credentials, options=self._options)
                self._channels[address] = channel
            callable_ = channel.unary_unary(
                SERVICE_PATH + method,
                request_serializer=serialize,
                response_deserializer=response_type.FromString,
            )
            self._callables[key] = callable_
        return callable_

    async def call(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_R],
        *,
        timeout_s: float,
    ) -> _R:
        """Call ``Laminar/<method>`` on ``address`` with a deadline of ``timeout_s``."""
        if timeout_s <= 0:
            raise RequestTimeoutError(f"deadline passed before calling {method} on {address}")
        callable_ = self._callable(address, method, response_type)
        try:
            response: _R = await callable_(
                request, timeout=timeout_s, metadata=self._call_metadata()
            )
        except grpc.aio.AioRpcError as rpc_error:
            if rpc_error.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise Unimplemented(f"{address}: no {method}") from None
            raise call_error(address, rpc_error, tls=self._tls is not None) from None
        return response

    async def close(self) -> None:
        """Close every channel (calls in progress are cancelled)."""
        self._closed = True
        channels = list(self._channels.values())
        self._channels.clear()
        self._callables.clear()
        for channel in channels:
            await channel.close()
        retiring = list(self._retiring)
        for task in retiring:
            task.cancel()
        await asyncio.gather(*retiring, return_exceptions=True)
        retired, self._retired = list(self._retired), set()
        for channel in retired:
            await channel.close()


class LoopThread:
    """A daemon thread running one asyncio event loop, for a synchronous facade.

    :meth:`run` hands a coroutine to the loop and waits for its result in the
    calling thread; the wait can be interrupted with Ctrl-C (the coroutine is then
    cancelled). :meth:`call_soon` schedules a plain callback from any thread.
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Start ``coroutine`` on the loop; its future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        """Run ``coroutine`` on the loop and return its result (``TimeoutError`` after
        ``timeout_s``; either way, and on Ctrl-C, the coroutine is cancelled)."""
        if self.in_loop_thread:
            raise RuntimeError("a synchronous call cannot run on the client's own loop thread")
        future = self.submit(coroutine)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, callback: Any, *args: Any) -> None:
        """Schedule ``callback(*args)`` on the loop from any thread (no-op once closed)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (after its default executor) and join the thread."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.submit(self.loop.shutdown_default_executor()).result(timeout_s)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()
