"""TLS files read again when they change: the one loader of nodes and clients.

A node (``[tls]``) and a client (:class:`laminar_client.TlsOptions`) name a CA
bundle and, optionally, a certificate chain and its key. :class:`TlsReloader` holds
the last *good* set of them and, when asked (:meth:`TlsReloader.current`, at most
every ``check_interval_s``), compares each file's signature (mtime, size, inode)
with the one it loaded; on a change it reads all three again and builds
``ssl.SSLContext`` s from them. Only a set that loads (the key matches the
certificate, the CA bundle parses, the files did not change while being read)
replaces the old one; otherwise the old one stays in use and one WARNING line says
why (once per bad version of the files), so a half-written pair is never served.
Each good set gets a new ``generation``: the users rebuild what they made from the
old one (gRPC credentials, channels, peer contexts).

No ``cryptography`` here (clients do not depend on it): the stdlib ``ssl`` module
validates the files, and :func:`node_ids_of_peercert` reads the node id of a
verified peer certificate (``laminar:node/<id>``, :mod:`laminar.security.certs`).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from laminar.errors import ConfigError

_LOG = logging.getLogger(__name__)

NODE_URI_PREFIX = "laminar:node/"
"""A node certificate's URI SAN: this prefix and the node id (as in ``certs``)."""

DEFAULT_CHECK_INTERVAL_S = 1.0
"""How often, at most, the files' signatures are compared (on use)."""

TLS_FILE_BYTES_MAX = 1024 * 1024
"""Largest CA bundle, certificate chain or key file read."""

_Signature = tuple[tuple[int, int, int] | None, ...]


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Paths of a TLS set: a CA bundle, and a certificate chain with its key (both
    empty for a client that presents no certificate)."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if not self.ca_file:
            raise ConfigError("TLS needs a CA file (the CAs whose certificates are trusted)")
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("a TLS certificate file and its key file go together")

    def paths(self) -> tuple[str, ...]:
        return tuple(path for path in (self.ca_file, self.cert_file, self.key_file) if path)


@dataclass(frozen=True, slots=True)
class TlsState:
    """One good set of files: their bytes, the contexts built from them, and its
    generation (1 for the first; +1 for each reload)."""

    ca: bytes
    cert: bytes
    key: bytes
    server_context: ssl.SSLContext | None
    """Peer transport listener: presents ``cert``, requires and verifies client
    certificates against ``ca``. None without a certificate."""
    client_context: ssl.SSLContext
    """Outgoing connections: verifies the server against ``ca`` (no host name check:
    the caller checks the node id), presents ``cert`` when there is one."""
    generation: int


class TlsReloader:
    """The current good :class:`TlsState` of ``files``, reloaded on change.

    Thread-safe. ``what`` names the set in log lines (``node a``, ``client``).
    Raises :class:`~laminar.errors.ConfigError` if the files do not load at first.
    """

    def __init__(
        self,
        files: TlsFiles,
        *,
        check_interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        what: str = "tls",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if check_interval_s < 0:
            raise ConfigError("the TLS check interval must be >= 0")
        self.files = files
        self._check_interval_s = check_interval_s
        self._what = what
        self._clock = clock
        self._lock = threading.Lock()
        signature = _signature(files)
        loaded = _load(files, signature, 1)
        if isinstance(loaded, str):
            raise ConfigError(f"{what}: cannot load TLS files: {loaded}")
        self._state = loaded
        self._signature = signature
        self._refused: _Signature | None = None
        self._checked_at_s = clock()
        self.reloads = 0
        """Sets loaded after the first."""
        self.refusals = 0
        """Changed sets that did not load (the old set stayed in use)."""

    def current(self) -> TlsState:
        """The good set in use, after reloading it if the files changed (compared at
        most every ``check_interval_s``)."""
        with self._lock:
            now_s = self._clock()
            if now_s - self._checked_at_s >= self._check_interval_s:
                self._checked_at_s = now_s
                self._check()
            return self._state

    def _check(self) -> None:
        signature = _signature(self.files)
        if signature in (self._signature, self._refused):
            return
        loaded = _load(self.files, signature, self._state.generation + 1)
        if isinstance(loaded, str):
            self._refused = signature
            self.refusals += 1
            _LOG.warning(
                "%s: changed TLS files do not load, still using the previous ones: %s",
                self._what,
                loaded,
            )
            return
        self._state = loaded
        self._signature = signature
        self._refused = None
        self.reloads += 1
        _LOG.info("%s: TLS files reloaded generation=%d", self._what, loaded.generation)


def _signature(files: TlsFiles) -> _Signature:
    signature: list[tuple[int, int, int] | None] = []
    for path in files.paths():
        try:
            stat = os.stat(path)
        except OSError:
            signature.append(None)
        else:
            signature.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(signature)


def _load(files: TlsFiles, signature: _Signature, generation: int) -> TlsState | str:
    """The set the files hold, or why it does not load. The contexts are built from
    the paths (``ssl`` loads a key only from a file), so the bytes are read before
    and compared after: a file replaced meanwhile makes this attempt fail, and the
    next check loads the new version."""
    try:
        ca, cert, key = (_read(path) if path else b"" for path in _three(files))
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False  # the node id (or gRPC's own check) identifies
        server: ssl.SSLContext | None = None
        contexts = [client]
        if files.cert_file:
            server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            contexts.append(server)
        for context in contexts:
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=files.ca_file)
            if files.cert_file:
                context.load_cert_chain(files.cert_file, files.key_file)
        again = tuple(_read(path) if path else b"" for path in _three(files))
    except (OSError, ssl.SSLError, ValueError) as error:
        return _describe(error)
    if again != (ca, cert, key) or _signature(files) != signature:
        return "the files changed while being read (retried at the next check)"
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        return f"{files.ca_file}: no PEM certificate"
    return TlsState(ca, cert, key, server, client, generation)


def _three(files: TlsFiles) -> tuple[str, str, str]:
    return files.ca_file, files.cert_file, files.key_file


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        data = file.read(TLS_FILE_BYTES_MAX + 1)
    if len(data) > TLS_FILE_BYTES_MAX:
        raise ValueError(f"{path}: larger than {TLS_FILE_BYTES_MAX} bytes")
    return data


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"{error.filename}: {error.strerror}"
    if isinstance(error, ssl.SSLError):
        reason = error.reason or str(error)
        if reason == "KEY_VALUES_MISMATCH":
            return "the key does not match the certificate (one of the pair not written yet?)"
        return f"{reason}: {error}"
    return str(error)


def node_ids_of_peercert(peercert: dict[str, Any] | None) -> list[str]:
    """The node ids a verified peer certificate names (``ssl``'s ``getpeercert()``
    dict): its URI SANs ``laminar:node/<id>``."""
    if not peercert:
        return []
    return [
        value[len(NODE_URI_PREFIX) :]
        for kind, value in peercert.get("subjectAltName", ())
        if kind == "URI" and value.startswith(NODE_URI_PREFIX)
    ]


def grpc_server_credentials(reloader: TlsReloader, *, require_client_auth: bool) -> Any:
    """``grpc.ServerCredentials`` serving ``reloader``'s certificate: gRPC asks the
    fetcher before each new connection's handshake, and it hands over the set
    reloaded since (None: no change). ``require_client_auth``: refuse clients without
    a certificate signed by a CA of the bundle."""
    import grpc  # a base dependency; imported here so that ssl-only users skip it

    def configuration(state: TlsState) -> Any:
        return grpc.ssl_server_certificate_configuration(
            [(state.key, state.cert)], root_certificates=state.ca
        )

    state = reloader.current()
    served = [state.generation]

    def fetch() -> Any:
        current = reloader.current()
        if current.generation == served[0]:
            return None
        served[0] = current.generation
        return configuration(current)

    return grpc.dynamic_ssl_server_credentials(
        configuration(state), fetch, require_client_authentication=require_client_auth
    )


def grpc_channel_credentials(state: TlsState) -> Any:
    """``grpc.ChannelCredentials`` of ``state``: its CA bundle, and its certificate
    and key when it has them (a node calling another, a client with a certificate)."""
    import grpc

    return grpc.ssl_channel_credentials(
        root_certificates=state.ca,
        private_key=state.key or None,
        certificate_chain=state.cert or None,
    )
