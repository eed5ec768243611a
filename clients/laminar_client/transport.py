"""Transport: one gRPC channel per node address, and one typed unary call.

This layer knows addresses, channels and the error table, nothing about leaders,
metadata or retries; the API objects above it make those decisions. A batching
producer or a consumer group reuses the same :class:`Transport`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from laminar.errors import RequestTimeoutError
from laminar.grpc_errors import error_from_rpc

_SERVICE_PATH = "/laminar.v1.Laminar/"

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
)

_R = TypeVar("_R", bound=Message)


class Transport:
    """Channels to nodes by gRPC address, created on first use and reused.

    ``call`` raises the :class:`~laminar.errors.LaminarError` the server sent (via
    :func:`laminar.grpc_errors.error_from_rpc`); an unreachable node is an
    :class:`~laminar.errors.UnavailableError`. Thread-safe.
    """

    def __init__(self, *, channel_options: Sequence[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS):
        self._options = tuple(channel_options)
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
        if timeout_s <= 0:
            raise RequestTimeoutError(f"deadline passed before calling {method} on {address}")
        callable_ = self.channel(address).unary_unary(
            _SERVICE_PATH + method,
            request_serializer=_serialize,
            response_deserializer=response_type.FromString,
        )
        try:
            response: _R = callable_(request, timeout=timeout_s)
        except grpc.RpcError as rpc_error:
            error = error_from_rpc(rpc_error)
            error.args = (f"{address}: {error}",) if error.args else error.args
            raise error from None
        return response

    def close(self) -> None:
        """Close every channel; later calls raise."""
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._closed = True
        for channel in channels:
            channel.close()


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
