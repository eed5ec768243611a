"""How a reader or writer proves itself to a secured cluster: TLS and a bearer token.

Options (names case-insensitive, as every option's):

- ``tls.ca``: a PEM file of the CAs whose certificates the client trusts; giving
  it turns TLS on (:class:`~laminar_client.tls.TlsOptions`);
- ``tls.cert`` / ``tls.key``: the client's certificate chain and its unencrypted
  key (PEM), both or neither, for nodes that ask for client certificates;
- ``tls.serverName``: the name every node's certificate is checked against instead
  of the host of its address;
- ``token``: a bearer token (``laminar token create``), or ``tokenFile``: a file
  whose first line is one (read again by each client made, so a replaced token is
  used by the next task).

The files are read where a client is made: on the driver when Spark plans or
checks, and on every executor by each task, so each path must exist on every host
(a shared mount, or the same path on each). They are checked on the driver when
the options are parsed, so a wrong path or a certificate without its key fails
the query before any task runs, naming the option.

The token is secret: :class:`ClientSecurity`'s ``repr`` shows ``<redacted>`` for
it, and no message here repeats it (nor a refused Kafka option's value, such as a
JAAS line). Spark's plans of a Python data source show no option (checked with
PySpark 4.3: ``explain(True)``). The token travels to the executors inside the
pickled reader or writer; with ``tokenFile`` only the path does.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from laminar_client.tls import ChannelTls, TlsOptions
from laminar_client.transport import TOKEN_FILE_BYTES_MAX, check_token
from laminar_client.transport import read_token_file as _read_token_file

from laminar.errors import ConfigError, InvalidInputError

if TYPE_CHECKING:
    from laminar_client.client import Client

__all__ = [
    "SECURITY_OPTIONS",
    "TOKEN_FILE_BYTES_MAX",
    "ClientSecurity",
    "open_client",
    "parse_security",
    "read_token_file",
]

log = logging.getLogger("laminar_spark")

SECURITY_OPTIONS = ("tls.ca", "tls.cert", "tls.key", "tls.serverName", "token", "tokenFile")
"""The options of this module, in their documented case."""
_TLS_FILE_OPTIONS = (("tls.ca", "CA"), ("tls.cert", "certificate"), ("tls.key", "key"))
_WHERE = "the path must exist on the driver and on every executor"


@dataclass(frozen=True, slots=True, repr=False)
class ClientSecurity:
    """The TLS options and the token (or the file holding it) of a reader or
    writer's clients; the default is a plaintext client without a token."""

    tls: TlsOptions | None = None
    token: str | None = None
    token_file: str = ""

    def __repr__(self) -> str:
        token = None if self.token is None else "<redacted>"
        return f"ClientSecurity(tls={self.tls!r}, token={token}, token_file={self.token_file!r})"

    def current_token(self) -> str | None:
        """The token: ``token``, or ``token_file``'s first line read now."""
        if self.token_file:
            return read_token_file(self.token_file)
        return self.token


def open_client(servers: str, security: ClientSecurity) -> Client:
    """A client of ``servers`` with ``security``'s TLS and token (close it)."""
    from laminar_client.client import Client

    return Client(servers, tls=security.tls, token=security.current_token())


def parse_security(named: Mapping[str, str]) -> ClientSecurity:
    """Check the options of this module among ``named`` (documented case -> value,
    as :func:`~laminar_spark.kafka_options.sort_options` gives them), loading the
    TLS files and the token file once to find a mistake now rather than in a task."""
    return ClientSecurity(tls=_tls(named), token=_token(named), token_file=_token_file(named))


def _tls(named: Mapping[str, str]) -> TlsOptions | None:
    paths = {option: named.get(option, "").strip() for option, _ in _TLS_FILE_OPTIONS}
    server_name = named.get("tls.serverName", "").strip()
    if not paths["tls.ca"]:
        given = [option for option, path in paths.items() if path]
        given += ["tls.serverName"] if server_name else []
        if given:
            raise InvalidInputError(
                f"option {given[0]!r} needs 'tls.ca' (a PEM file of the CAs the nodes' "
                "certificates are checked against): TLS is on only with it"
            )
        return None
    if bool(paths["tls.cert"]) != bool(paths["tls.key"]):
        raise InvalidInputError(
            "options 'tls.cert' and 'tls.key' go together: a client certificate needs its "
            f"key (got only {'tls.cert' if paths['tls.cert'] else 'tls.key'!r})"
        )
    for option, what in _TLS_FILE_OPTIONS:
        path = paths[option]
        if path and not os.path.isfile(path):
            raise InvalidInputError(
                f"option {option!r}: no {what} file {path!r} ({_WHERE}: the reader and "
                "writer read it on each)"
            )
    if any(c.isspace() or ord(c) < 32 for c in server_name):
        raise InvalidInputError(f"option 'tls.serverName' must be a host name, got {server_name!r}")
    options = TlsOptions(
        ca_file=paths["tls.ca"],
        cert_file=paths["tls.cert"],
        key_file=paths["tls.key"],
        server_name=server_name,
    )
    try:
        ChannelTls(options)  # loads the files as every client will
    except ConfigError as error:
        raise InvalidInputError(
            f"options 'tls.ca', 'tls.cert', 'tls.key': {error} (PEM files; the key "
            "unencrypted and matching the certificate)"
        ) from None
    if options.cert_file and importlib.util.find_spec("cryptography") is None:
        log.warning(
            "option 'tls.cert': the cryptography package is not installed, so the "
            "certificate is not asserted in calls and nodes with client_auth = "
            '"request" take this client for User:ANONYMOUS (pip install '
            "'laminar[server]' where the job runs; nodes with client_auth = \"require\" "
            "get the certificate in the handshake and need no assertion)"
        )
    return options


def _token(named: Mapping[str, str]) -> str | None:
    if "token" not in named:
        return None
    if "tokenFile" in named:
        raise InvalidInputError("give one of the options 'token' and 'tokenFile', not both")
    token = named["token"].strip()
    check_token(token, "option 'token'")
    return token


def _token_file(named: Mapping[str, str]) -> str:
    path = named.get("tokenFile", "").strip()
    if "tokenFile" in named and not path:
        raise InvalidInputError("option 'tokenFile' must be a path, got an empty string")
    if path:
        read_token_file(path)
    return path


def read_token_file(path: str) -> str:
    """The token in the first line of the file at ``path`` (as ``laminar
    --token-file`` reads it). Never puts the token in a message."""
    return _read_token_file(path, "option 'tokenFile'", _WHERE)
