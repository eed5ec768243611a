"""Transport: one gRPC channel per node address, and one typed unary call.

This layer knows addresses, channels and the error table, nothing about leaders,
metadata or retries; the API objects above it make those decisions. A batching
producer or a consumer group reuses the same :class:`Transport`.

It tells apart a node that answered with an error (the answer carries Laminar's
typed detail: the node is up, it just cannot do this now) from a call that got no
answer from Laminar at all (:class:`NoAnswerError`: the connection failed, or the
attempt's deadline passed first), because routing treats them differently: the
first node is still a good source of metadata, the second is skipped for a while.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from laminar.address import GRPC_RESOLVE_INTERVAL_MS
from laminar.errors import (
    AttemptTimeoutError,
    InvalidInputError,
    LaminarError,
    NoAnswerError,
    NodeRefusedError,
    NodeUnreachableError,
    RequestTimeoutError,
    UnavailableError,
)
from laminar.grpc_errors import ERROR_METADATA_KEY, error_from_rpc

SERVICE_PATH = "/laminar.v1.Laminar/"
"""The prefix of every method's gRPC path."""

MESSAGE_BYTES_MAX = 64 * 1024 * 1024
"""Largest message the client sends or accepts (a produce request or fetch response)."""

DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    # Reconnect quickly to a node that restarts (the gRPC default backs off to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Resolve a node's host name again soon after its address stops answering (a
    # node back under the same name with a new IP); gRPC's default waits 30 s.
    ("grpc.dns_min_time_between_resolutions_ms", GRPC_RESOLVE_INTERVAL_MS),
)

_R = TypeVar("_R", bound=Message)

__all__ = [
    "AttemptTimeoutError",
    "NoAnswerError",
    "NodeRefusedError",
    "NodeUnreachableError",
    "Transport",
    "UnaryTransport",
]


class UnaryTransport(Protocol):
    """What the client needs from a transport: one typed call by address, and close.

    :class:`Transport` is the gRPC one; tests pass an in-memory one. ``call``
    raises the node's :class:`~laminar.errors.LaminarError`, or a
    :class:`NoAnswerError` when the node did not answer.
    """

    def call(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_R],
        *,
        timeout_s: float,
    ) -> _R: ...

    def close(self) -> None: ...


class Transport:
    """Channels to nodes by gRPC address, created on first use and reused.

    ``call`` raises the :class:`~laminar.errors.LaminarError` the server sent (via
    :func:`laminar.grpc_errors.error_from_rpc`); a failure without Laminar's typed
    detail (the node never answered) is a :class:`NodeUnreachableError` or an
    :class:`AttemptTimeoutError`. Thread-safe.
    """

    def __init__(
        self,
        *,
        channel_options: Sequence[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS,
        call_metadata: Sequence[tuple[str, str]] = (),
    ):
        self._options = tuple(channel_options)
        self._metadata = tuple(call_metadata) or None
        """Sent with every call: the bearer token (:func:`token_metadata`)."""
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()
        self._closed = False

    def channel(self, address: str) -> grpc.Channel:
        """The channel to ``address`` (host:port), created once."""
        with self._lock:
            if self._closed:
                raise RuntimeError("transport is closed")
            channel = self._channels.get(address)
            if channel is None:
                channel = grpc.insecure_channel(address, options=self._options)
                self._channels[address] = channel
            return channel

    def call(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_R],
        *,
        timeout_s: float,
    ) -> _R:
        """Call ``Laminar/<method>`` on ``address`` with a deadline of ``timeout_s``."""
        callable_ = self._callable(address, method, response_type, timeout_s)
        try:
            response: _R = callable_(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as rpc_error:
            raise call_error(address, rpc_error) from None
        return response

    def start(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_R],
        *,
        timeout_s: float,
    ) -> PendingCall[_R]:
        """Start the call :meth:`call` makes, without waiting for it."""
        callable_ = self._callable(address, method, response_type, timeout_s)
        future = callable_.future(request, timeout=timeout_s, metadata=self._metadata)
        return PendingCall(address, future)

    def _callable(
        self, address: str, method: str, response_type: type[_R], timeout_s: float
    ) -> Any:
        if timeout_s <= 0:
            raise RequestTimeoutError(f"deadline passed before calling {method} on {address}")
        return self.channel(address).unary_unary(
            SERVICE_PATH + method,
            request_serializer=serialize,
            response_deserializer=response_type.FromString,
        )

    def close(self) -> None:
        """Close every channel; later calls raise."""
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._closed = True
        for channel in channels:
            channel.close()


class PendingCall(Generic[_R]):
    """A call under way (:meth:`Transport.start`): wait for it in steps, or cancel it."""

    __slots__ = ("_address", "_future")

    def __init__(self, address: str, future: Any) -> None:
        self._address = address
        self._future = future

    def result(self, wait_s: float) -> _R | None:
        """The answer if it comes within ``wait_s``, else None (still under way); the
        errors :meth:`Transport.call` raises."""
        try:
            response: _R = self._future.result(timeout=max(0.0, wait_s))
        except grpc.FutureTimeoutError:
            return None
        except grpc.RpcError as rpc_error:
            raise call_error(self._address, rpc_error) from None
        return response

    def cancel(self) -> None:
        self._future.cancel()


def call_error(address: str, rpc_error: grpc.RpcError) -> LaminarError:
    """The error to raise for a failed call to ``address`` (sync or ``grpc.aio``): the
    node's typed error, or :class:`NoAnswerError` (see :func:`no_answer`), with the
    address in front of its message."""
    error = no_answer(error_from_rpc(rpc_error), rpc_error)
    error.args = (f"{address}: {error}",) if error.args else error.args
    return error


_REFUSED = re.compile(r"connection refused|errors resolving|dns resolution failed", re.IGNORECASE)
"""gRPC core's words for an address where nothing listens (``ECONNREFUSED``) or a
name that does not resolve, in an ``UNAVAILABLE`` it raised itself."""


def no_answer(error: LaminarError, rpc_error: grpc.RpcError) -> LaminarError:
    """``error`` as a :class:`NoAnswerError` when no Laminar code answered the call.

    Every error a node sends carries the typed detail in its trailing metadata;
    an ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` without it came from gRPC itself
    (:class:`NodeRefusedError` when nothing listens at the address).
    """
    method = getattr(rpc_error, "trailing_metadata", None)  # grpc.Call or aio's AioRpcError
    trailing = method() if callable(method) else None
    if any(key == ERROR_METADATA_KEY for key, _ in trailing or ()):
        return error
    if type(error) is UnavailableError:
        if _REFUSED.search(str(error)):
            return NodeRefusedError(*error.args)
        return NodeUnreachableError(*error.args)
    if type(error) is RequestTimeoutError:
        return AttemptTimeoutError(*error.args)
    return error


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The call metadata carrying a bearer token (none without one)."""
    if token is None:
        return ()
    if not token or any(c.isspace() for c in token):
        raise InvalidInputError("a token is a non-empty string without spaces")
    return (("authorization", f"Bearer {token}"),)


def serialize(message: Message) -> bytes:
    """A request's wire bytes (the request serializer of every call)."""
    return message.SerializeToString()
