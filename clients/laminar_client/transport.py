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
import time
from collections.abc import Sequence
from dataclasses import dataclass
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
    TlsHandshakeError,
    UnavailableError,
)
from laminar.grpc_errors import ERROR_METADATA_KEY, error_from_rpc
from laminar_client.tls import RETIRED_CHANNEL_GRACE_S, ChannelTls, TlsOptions

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
    "TlsHandshakeError",
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


@dataclass(slots=True)
class _Channel:
    """A channel, the TLS generation it was built from (0: plaintext), and its calls
    in flight (a channel of replaced files closes when they are done)."""

    channel: grpc.Channel
    generation: int
    in_flight: int = 0
    retired_at_s: float = 0.0


class Transport:
    """Channels to nodes by gRPC address, created on first use and reused.

    ``call`` raises the :class:`~laminar.errors.LaminarError` the server sent (via
    :func:`laminar.grpc_errors.error_from_rpc`); a failure without Laminar's typed
    detail (the node never answered) is a :class:`NodeUnreachableError` or an
    :class:`AttemptTimeoutError` (a :class:`TlsHandshakeError` when the
    connection failed at the TLS handshake). With ``tls`` the channels are TLS, and
    when its files change the next call builds new ones (the old ones close once
    their calls end). Thread-safe.
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
        self._metadata = tuple(call_metadata)
        """Sent with every call: the bearer token (:func:`token_metadata`)."""
        self._channels: dict[str, _Channel] = {}
        self._retired: list[_Channel] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def tls(self) -> TlsOptions | None:
        return None if self._tls is None else self._tls.options

    def channel(self, address: str) -> grpc.Channel:
        """The channel to ``address`` (host:port), created once (again after the TLS
        files changed)."""
        return self._acquire(address, 0).channel

    def _acquire(self, address: str, calls: int) -> _Channel:
        """The current channel to ``address``, with ``calls`` more in flight."""
        generation, credentials = (0, None) if self._tls is None else self._tls.current()
        with self._lock:
            if self._closed:
                raise RuntimeError("transport is closed")
            entry = self._channels.get(address)
            if entry is not None and entry.generation != generation:
                entry.retired_at_s = time.monotonic()
                self._retired.append(entry)
                entry = None
            if entry is None:
                if credentials is None:
                    channel = grpc.insecure_channel(address, options=self._options)
                else:
                    channel = grpc.secure_channel(address, credentials, options=self._options)
                entry = self._channels[address] = _Channel(channel, generation)
            entry.in_flight += calls
            closable = self._closable()
        for done in closable:
            done.channel.close()
        return entry

    def _closable(self) -> list[_Channel]:
        """Retired channels whose calls ended or whose grace is over (under the lock)."""
        if not self._retired:
            return []
        now_s = time.monotonic()
        done = [
            entry
            for entry in self._retired
            if entry.in_flight <= 0 or now_s - entry.retired_at_s >= RETIRED_CHANNEL_GRACE_S
        ]
        self._retired = [entry for entry in self._retired if entry not in done]
        return done

    def _release(self, entry: _Channel) -> None:
        with self._lock:
            entry.in_flight -= 1

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
        entry, callable_ = self._callable(address, method, response_type, timeout_s)
        try:
            response: _R = callable_(request, timeout=timeout_s, metadata=self._call_metadata())
        except grpc.RpcError as rpc_error:
            raise call_error(address, rpc_error, tls=self._tls is not None) from None
        finally:
            self._release(entry)
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
        entry, callable_ = self._callable(address, method, response_type, timeout_s)
        try:
            future = callable_.future(request, timeout=timeout_s, metadata=self._call_metadata())
        except BaseException:
            self._release(entry)
            raise
        future.add_done_callback(lambda _: self._release(entry))
        return PendingCall(address, future, tls=self._tls is not None)

    def _call_metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The token, and the certificate assertion of a client with a certificate
        (how a node with ``client_auth = request`` learns who calls)."""
        assertion = self._tls.assertion() if self._tls is not None else None
        metadata = self._metadata if assertion is None else (*self._metadata, assertion)
        return metadata or None

    def _callable(
        self, address: str, method: str, response_type: type[_R], timeout_s: float
    ) -> tuple[_Channel, Any]:
        if timeout_s <= 0:
            raise RequestTimeoutError(f"deadline passed before calling {method} on {address}")
        entry = self._acquire(address, 1)
        callable_ = entry.channel.unary_unary(
            SERVICE_PATH + method,
            request_serializer=serialize,
            response_deserializer=response_type.FromString,
        )
        return entry, callable_

    def close(self) -> None:
        """Close every channel; later calls raise."""
        with self._lock:
            entries = [*self._channels.values(), *self._retired]
            self._channels.clear()
            self._retired.clear()
            self._closed = True
        for entry in entries:
            entry.channel.close()


class PendingCall(Generic[_R]):
    """A call under way (:meth:`Transport.start`): wait for it in steps, or cancel it."""

    __slots__ = ("_address", "_future", "_tls")

    def __init__(self, address: str, future: Any, *, tls: bool = False) -> None:
        self._address = address
        self._future = future
        self._tls = tls

    def result(self, wait_s: float) -> _R | None:
        """The answer if it comes within ``wait_s``, else None (still under way); the
        errors :meth:`Transport.call` raises."""
        try:
            response: _R = self._future.result(timeout=max(0.0, wait_s))
        except grpc.FutureTimeoutError:
            return None
        except grpc.RpcError as rpc_error:
            raise call_error(self._address, rpc_error, tls=self._tls) from None
        return response

    def cancel(self) -> None:
        self._future.cancel()


def call_error(address: str, rpc_error: grpc.RpcError, *, tls: bool = False) -> LaminarError:
    """The error to raise for a failed call to ``address`` (sync or ``grpc.aio``): the
    node's typed error, or :class:`NoAnswerError` (see :func:`no_answer`), with the
    address in front of its message. ``tls``: whether the channel was TLS."""
    error = no_answer(error_from_rpc(rpc_error), rpc_error, tls=tls)
    error.args = (f"{address}: {error}",) if error.args else error.args
    return error


_REFUSED = re.compile(r"connection refused|errors resolving|dns resolution failed", re.IGNORECASE)
"""gRPC core's words for an address where nothing listens (``ECONNREFUSED``) or a
name that does not resolve, in an ``UNAVAILABLE`` it raised itself."""


_CONNECT_FAILED = "failed to connect to all addresses"
"""gRPC core's words for a call that found no connection to make it on."""

_TLS_CAUSES = (
    (
        re.compile(r"certificate has expired", re.IGNORECASE),
        "the node's certificate has expired (or is not valid yet)",
    ),
    (
        re.compile(r"WRONG_VERSION_NUMBER|packet length too long", re.IGNORECASE),
        "the node does not speak TLS at this address (a plaintext port?)",
    ),
    (
        re.compile(r"not in peer certificate", re.IGNORECASE),
        "the node's certificate does not name this address's host (set a server name?)",
    ),
    (
        re.compile(r"CERTIFICATE_VERIFY_FAILED", re.IGNORECASE),
        "the node's certificate is not signed by a CA in the client's CA file (wrong CA?)",
    ),
    (re.compile(r"handshake fail|SSL_ERROR|TSI_", re.IGNORECASE), "see the detail"),
)
"""What gRPC core's TLS error text says, in order: its cause in plain words."""

_CLOSED_AT_HANDSHAKE_TLS = (
    "the node closed the connection during the handshake: it refused this client's "
    "certificate (none given where one is required, expired, or from a CA it does not trust)"
)
_CLOSED_AT_HANDSHAKE_PLAIN = (
    "the node closed the connection at once: it probably serves TLS only (give the client "
    "the cluster's CA file: --tls-ca, LAMINAR_TLS_CA or TlsOptions)"
)


def tls_failure(text: str, *, tls: bool) -> TlsHandshakeError | None:
    """The :class:`TlsHandshakeError` gRPC core's message ``text`` (of a call that
    got no Laminar answer) describes, or None if it is not a handshake failure. A
    connection closed as soon as it opened counts as one: with TLS, the node refused
    the client's certificate (TLS 1.3 tells the client no more); without, a TLS-only
    node reads the client's plaintext and hangs up."""
    if _CONNECT_FAILED not in text:
        return None
    for pattern, cause in _TLS_CAUSES:
        if pattern.search(text):
            return _tls_error(cause, text)
    if "socket closed" in text.lower():
        return _tls_error(_CLOSED_AT_HANDSHAKE_TLS if tls else _CLOSED_AT_HANDSHAKE_PLAIN, text)
    return None


def _tls_error(cause: str, text: str) -> TlsHandshakeError:
    detail = text.split("last error:", 1)[-1].strip()
    return TlsHandshakeError(f"TLS handshake failed: {cause} ({detail:.300})", cause=cause)


def no_answer(error: LaminarError, rpc_error: grpc.RpcError, *, tls: bool = False) -> LaminarError:
    """``error`` as a :class:`NoAnswerError` when no Laminar code answered the call.

    Every error a node sends carries the typed detail in its trailing metadata;
    an ``UNAVAILABLE`` or ``DEADLINE_EXCEEDED`` without it came from gRPC itself
    (:class:`NodeRefusedError` when nothing listens at the address,
    :class:`TlsHandshakeError` when the TLS handshake failed: :func:`tls_failure`).
    """
    method = getattr(rpc_error, "trailing_metadata", None)  # grpc.Call or aio's AioRpcError
    trailing = method() if callable(method) else None
    if any(key == ERROR_METADATA_KEY for key, _ in trailing or ()):
        return error
    if type(error) is UnavailableError:
        handshake = tls_failure(str(error), tls=tls)
        if handshake is not None:
            return handshake
        if _REFUSED.search(str(error)):
            return NodeRefusedError(*error.args)
        return NodeUnreachableError(*error.args)
    if type(error) is RequestTimeoutError:
        return AttemptTimeoutError(*error.args)
    return error


TOKEN_FILE_BYTES_MAX = 64 * 1024
"""Largest token file read (a token is a few dozen bytes)."""


def check_token(token: str, what: str) -> None:
    """A token is what a client sends: non-empty, printable ASCII without white space
    (gRPC metadata cannot carry the rest). The message names ``what``, never the token."""
    if not token:
        raise InvalidInputError(f"{what}: the token is empty")
    if any(c.isspace() or ord(c) < 32 or ord(c) > 126 for c in token):
        raise InvalidInputError(
            f"{what}: a token is printable ASCII without spaces (the value is not shown: "
            "it is a secret)"
        )


def read_token_file(path: str, what: str, where: str = "") -> str:
    """The token in the first line of the file at ``path`` (``laminar --token-file``,
    Spark's ``tokenFile``); errors name ``what`` (and ``where`` the file must be),
    never the token."""
    hint = f"; {where}" if where else ""
    try:
        with open(path, "rb") as file:
            data = file.read(TOKEN_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise InvalidInputError(f"{what}: cannot read {path!r} ({error.strerror}{hint})") from None
    if len(data) > TOKEN_FILE_BYTES_MAX:
        raise InvalidInputError(
            f"{what}: {path!r} is larger than {TOKEN_FILE_BYTES_MAX} bytes: "
            "not a token file (its first line is the token)"
        )
    try:
        first_line = data.decode("utf-8").split("\n", 1)[0].strip()
    except UnicodeDecodeError:
        raise InvalidInputError(f"{what}: {path!r} is not UTF-8 text") from None
    check_token(first_line, f"{what} ({path!r}, its first line)")
    return first_line


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
