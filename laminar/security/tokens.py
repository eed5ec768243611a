"""Bearer tokens: the token file, making entries, and checking a presented token.

A client sends ``authorization: Bearer <token>`` in each call's metadata
(``Client(token=...)``, ``laminar --token``). A token is ``lmt.<id>.<secret>``:
``id`` finds its entry in the node's token file, ``secret`` is checked against the
entry's salted scrypt hash (``cryptography``'s :class:`Scrypt`, n=2^14, r=8, p=1:
about 50 ms, so a stolen file does not give the tokens away quickly). The file
holds no secret; only ``laminar token create`` ever sees the token, and prints it
once.

The token file (TOML, ``[auth] token_file``)::

    [[tokens]]
    id = "5c1f0e3b9a7d42e1"          # the token's public part
    principal = "User:alice"
    salt = "<base64>"
    hash = "<base64>"                # scrypt(secret, salt)
    scrypt_n = 16384
    scrypt_r = 8
    scrypt_p = 1

Several entries may name one principal (a new token before the old one is removed).
The node reads the file again when it changes (checked at most once a second, on
use); a file that no longer parses is reported and the previous entries are kept.
To revoke a token, delete its entry.

Checked tokens are remembered (keyed by a SHA-256 of the token, never the token
itself) until the file changes, so a producer pays scrypt once, not per call.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
import threading
import time
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from laminar.errors import AuthenticationError, ConfigError
from laminar.security.acl import validate_principal

_LOG = logging.getLogger(__name__)

TOKEN_PREFIX = "lmt"
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
_HASH_BYTES = 32
_SALT_BYTES = 16
_SECRET_BYTES = 32
TOKEN_BYTES_MAX = 512
"""A presented token longer than this is refused before any work."""
TOKENS_MAX = 10_000
"""Most entries a token file may hold."""
CHECKED_KEPT_MAX = 10_000
"""Checked tokens remembered (successes and failures)."""
CHECK_INTERVAL_S = 1.0
"""How often, at most, the file is looked at for a change."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    token_id: str
    principal: str
    salt: bytes
    hash: bytes
    scrypt_n: int = SCRYPT_N
    scrypt_r: int = SCRYPT_R
    scrypt_p: int = SCRYPT_P

    def matches(self, secret: str) -> bool:
        kdf = Scrypt(
            salt=self.salt, length=len(self.hash), n=self.scrypt_n, r=self.scrypt_r, p=self.scrypt_p
        )
        try:
            kdf.verify(secret.encode(), self.hash)
        except InvalidKey:
            return False
        return True

    def toml(self) -> str:
        return (
            "[[tokens]]\n"
            f'id = "{self.token_id}"\n'
            f"principal = {_toml_string(self.principal)}\n"
            f'salt = "{base64.b64encode(self.salt).decode()}"\n'
            f'hash = "{base64.b64encode(self.hash).decode()}"\n'
            f"scrypt_n = {self.scrypt_n}\n"
            f"scrypt_r = {self.scrypt_r}\n"
            f"scrypt_p = {self.scrypt_p}\n"
        )


def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def principal_for(name: str) -> str:
    """``NAME`` as a principal: ``User:NAME`` unless it already names a type."""
    principal = name if ":" in name else f"User:{name}"
    validate_principal(principal)
    return principal


def new_token(principal: str) -> tuple[str, TokenEntry]:
    """A fresh token for ``principal`` and its file entry."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(_SECRET_BYTES)
    salt = secrets.token_bytes(_SALT_BYTES)
    kdf = Scrypt(salt=salt, length=_HASH_BYTES, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    entry = TokenEntry(token_id, principal, salt, kdf.derive(secret.encode()))
    return f"{TOKEN_PREFIX}.{token_id}.{secret}", entry


def add_token(path: str | os.PathLike[str], name: str) -> str:
    """Make a token for ``name``, append its entry to the token file (created with
    mode 0600 if missing) and return the token (shown once: it is not stored)."""
    principal = principal_for(name)
    file = Path(path)
    existing = file.read_text(encoding="utf-8") if file.exists() else ""
    if existing:
        parse_token_file(existing, str(file))  # refuse to append to a broken file
    token, entry = new_token(principal)
    text = existing
    if text and not text.endswith("\n"):
        text += "\n"
    if not text:
        text = "# Laminar bearer tokens (laminar token create). Holds no secret.\n"
    text += "\n" + entry.toml()
    temporary = file.with_name(f".{file.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, text.encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, file)
    return token


def parse_token_file(text: str, path: str) -> dict[str, TokenEntry]:
    """The entries of a token file by id; :class:`ConfigError` naming the problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"token file {path} is not valid TOML: {error}") from None
    tables = document.get("tokens", [])
    if not isinstance(tables, list) or len(tables) > TOKENS_MAX:
        raise ConfigError(f"token file {path}: [[tokens]] entries expected, at most {TOKENS_MAX}")
    entries: dict[str, TokenEntry] = {}
    for index, table in enumerate(tables):
        try:
            entry = TokenEntry(
                str(table["id"]),
                str(table["principal"]),
                base64.b64decode(table["salt"], validate=True),
                base64.b64decode(table["hash"], validate=True),
                int(table.get("scrypt_n", SCRYPT_N)),
                int(table.get("scrypt_r", SCRYPT_R)),
                int(table.get("scrypt_p", SCRYPT_P)),
            )
            validate_principal(entry.principal)
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"token file {path}: entry {index + 1}: {error}") from None
        if entry.token_id in entries:
            raise ConfigError(f"token file {path}: id {entry.token_id} appears twice")
        entries[entry.token_id] = entry
    return entries


_FAILED = ""
"""What the remembered answer of a token that matched no entry is."""


class TokenStore:
    """The node's token file, read again when it changes; checks presented tokens.

    :meth:`remembered` answers from memory (on the event loop); :meth:`check` may
    run scrypt (call it off the loop). Thread-safe.
    """

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        self.path = path
        self._clock = clock
        self._check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._checked: OrderedDict[bytes, str] = OrderedDict()
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = clock()
        self.entries = self._read()  # raises ConfigError at start-up

    def _read(self) -> dict[str, TokenEntry]:
        try:
            stat = os.stat(self.path)
            with open(self.path, encoding="utf-8") as file:
                text = file.read()
        except OSError as error:
            raise ConfigError(f"cannot read token file {self.path}: {error.strerror}") from None
        entries = parse_token_file(text, self.path)
        self._stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        return entries

    def _maybe_reload(self) -> None:
        now = self._clock()
        if now - self._checked_at < self._check_interval_s:
            return
        self._checked_at = now
        try:
            stat = os.stat(self.path)
        except OSError as error:
            _LOG.error("token file %s: %s; keeping the tokens read before", self.path, error)
            return
        if (stat.st_mtime_ns, stat.st_size, stat.st_ino) == self._stamp:
            return
        try:
            entries = self._read()
        except ConfigError as error:
            _LOG.error("%s; keeping the tokens read before", error)
            return
        with self._lock:
            self.entries = entries
            self._checked.clear()
        _LOG.info("token file %s reloaded: %d tokens", self.path, len(entries))

    def remembered(self, token: str) -> str | None:
        """The principal of a token checked before; ``""`` if it failed; None: unknown
        (call :meth:`check`)."""
        self._maybe_reload()
        with self._lock:
            return self._checked.get(_digest(token))

    def check(self, token: str) -> str:
        """The principal of ``token``; :class:`AuthenticationError` if it is not valid."""
        digest = _digest(token)
        with self._lock:
            entries = self.entries
        principal = _FAILED
        parts = token.split(".")
        if len(token) <= TOKEN_BYTES_MAX and len(parts) == 3 and parts[0] == TOKEN_PREFIX:
            entry = entries.get(parts[1])
            if entry is not None and entry.matches(parts[2]):
                principal = entry.principal
        with self._lock:
            if self.entries is entries:  # not reloaded meanwhile
                self._checked[digest] = principal
                if len(self._checked) > CHECKED_KEPT_MAX:
                    self._checked.popitem(last=False)
        if not principal:
            raise AuthenticationError("the bearer token is not valid")
        return principal


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode(errors="replace")).digest()
