"""TLS of a client's channels: :class:`TlsOptions`, and the credentials made from them.

A client of a cluster whose nodes serve TLS (``[tls]`` in their configuration)
passes ``Client(..., tls=TlsOptions(ca_file=...))``; the producers, consumers and
groups built on that client use the same options. ``cert_file`` and ``key_file``
add a client certificate (required by nodes with ``client_auth = "require"``).

gRPC Python cannot reload a channel's certificates in place, so the transports ask
:class:`ChannelTls` for the current credentials on use: when the files changed (at
most one check every ``check_interval_s``) it hands out a new generation, the
transport builds new channels from it, and the old channels close once their calls
in flight end (or after a grace).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from laminar.errors import ConfigError
from laminar.security.tls import (
    DEFAULT_CHECK_INTERVAL_S,
    TlsFiles,
    TlsReloader,
    grpc_channel_credentials,
)

TLS_ENV = {
    "ca_file": "LAMINAR_TLS_CA",
    "cert_file": "LAMINAR_TLS_CERT",
    "key_file": "LAMINAR_TLS_KEY",
    "server_name": "LAMINAR_TLS_SERVER_NAME",
}
"""The environment variables :meth:`TlsOptions.from_env` reads (the CLI's defaults)."""

RETIRED_CHANNEL_GRACE_S = 35.0
"""How long a channel built from replaced files may finish its calls in flight (a
long-poll fetch lasts up to 30 s) before it is closed anyway."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS settings of a client (all paths to PEM files).

    - ``ca_file``: the CAs whose certificates the client trusts (the nodes'
      CA bundle); required.
    - ``cert_file`` / ``key_file``: the client's own certificate chain and key,
      both or neither; needed where nodes require client certificates.
    - ``server_name``: the name checked against every node's certificate instead
      of the host of its address (when the certificates name a service name
      rather than each node's address). Empty: each address's host.
    - ``check_interval_s``: how often, at most, the files are compared with what
      was loaded (on use); changed files that load give new channels.
    """

    ca_file: str
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    check_interval_s: float = DEFAULT_CHECK_INTERVAL_S

    def __post_init__(self) -> None:
        TlsFiles(self.ca_file, self.cert_file, self.key_file)  # checks the combination
        if not 0 <= self.check_interval_s <= 3600:
            raise ConfigError(f"check_interval_s must be in [0, 3600], got {self.check_interval_s}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TlsOptions | None:
        """The options the ``LAMINAR_TLS_*`` variables (:data:`TLS_ENV`) give, or
        None when ``LAMINAR_TLS_CA`` is unset or empty."""
        env = os.environ if environ is None else environ
        values = {name: env.get(variable, "") for name, variable in TLS_ENV.items()}
        if not values["ca_file"]:
            if any(values.values()):
                raise ConfigError(f"{TLS_ENV['ca_file']} is needed with the other LAMINAR_TLS_*")
            return None
        return cls(
            values["ca_file"], values["cert_file"], values["key_file"], values["server_name"]
        )


_REUSE_MS = 30_000
"""A certificate assertion is remade this often (laminar.security.assertion.REUSE_MS)."""


def _make_assertion(cert: bytes, key: bytes, now_ms: int) -> tuple[str, str] | None:
    try:
        from laminar.security.assertion import METADATA_KEY, make_assertion
    except ImportError:  # no cryptography: client_auth = "require" still works
        return None
    return METADATA_KEY, make_assertion(cert, key, now_ms)


class ChannelTls:
    """The current channel credentials of :class:`TlsOptions` (thread-safe).

    Raises :class:`~laminar.errors.ConfigError` at once if the files do not load.
    """

    def __init__(self, options: TlsOptions) -> None:
        self.options = options
        self._reloader = TlsReloader(
            TlsFiles(options.ca_file, options.cert_file, options.key_file),
            check_interval_s=options.check_interval_s,
            what="client",
        )
        self._generation = 0
        self._credentials: grpc.ChannelCredentials | None = None
        self._assertion: tuple[int, int, tuple[str, str] | None] | None = None
        """(generation, made at ms, metadata pair) of the last certificate assertion."""
        self._lock = threading.Lock()

    def current(self) -> tuple[int, grpc.ChannelCredentials]:
        """The files' current generation and credentials made from it."""
        state = self._reloader.current()
        credentials = self._credentials
        if state.generation != self._generation or credentials is None:
            credentials = grpc_channel_credentials(state)
            self._credentials, self._generation = credentials, state.generation
        return state.generation, credentials

    def assertion(self) -> tuple[str, str] | None:
        """The call metadata asserting the client's certificate
        (:mod:`laminar.security.assertion`: what a node with ``client_auth =
        "request"`` reads, since gRPC Python cannot ask for a certificate at the
        handshake without requiring one), remade every ``REUSE_MS`` and when the
        files change; None without a client certificate (or, in an install that
        left out the ``cryptography`` dependency, without it)."""
        if not self.options.cert_file:
            return None
        state = self._reloader.current()
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            made = self._assertion
            if made is not None and made[0] == state.generation and now_ms - made[1] < _REUSE_MS:
                return made[2]
            pair = _make_assertion(state.cert, state.key, now_ms)
            self._assertion = (state.generation, now_ms, pair)
            return pair

    def channel_options(self, options: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
        """``options`` plus the server name override, if any."""
        if not self.options.server_name:
            return options
        return (*options, ("grpc.ssl_target_name_override", self.options.server_name))
