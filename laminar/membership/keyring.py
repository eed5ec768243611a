"""The gossip keyring: which AES-256 keys a node holds, and its two verify switches.

A :class:`KeyringState` is an immutable value: the keys, primary first (outgoing
gossip is sealed with the primary; every key is tried on receive), and the two
switches of hashicorp/memberlist, ``encrypt_verify_incoming`` (refuse plain
frames) and ``encrypt_verify_outgoing`` (seal what is sent). An empty keyring
means no encryption at all: plain frames are sent and accepted.

Changes (:meth:`KeyringState.install`, :meth:`~KeyringState.use`,
:meth:`~KeyringState.remove`, :meth:`~KeyringState.with_verify`) return a new
state or raise :class:`~laminar.errors.InvalidInputError`; the node persists the
new state with :func:`save_keyring` before it applies it, so a restart keeps it.

The file is JSON, written atomically (temporary file, fsync, rename, fsync of the
directory) with mode 0600, since it holds secrets::

    {"version": 1, "keys": ["<base64 primary>", "<base64>", ...],
     "encrypt_verify_incoming": true, "encrypt_verify_outgoing": true}

This module needs no ``cryptography`` (the CLI generates and parses keys with it);
:mod:`laminar.membership.crypto` does the sealing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from laminar.errors import ConfigError, InvalidInputError
from laminar.segment.layout import replace_file

KEY_BYTES = 32
"""AES-256: every key is 32 bytes (44 characters of base64)."""
KEYS_MAX = 16
"""Most keys a keyring holds: every received packet may try each, and rotation
needs two."""
KEYRING_FILE_VERSION = 1
KEYRING_FILE_BYTES_MAX = 64 * 1024
DEFAULT_CLUSTER_KEY = "laminar"
"""The default ``cluster_key``, refused once a keyring holds a key."""


@dataclass(frozen=True, slots=True)
class KeyringState:
    """Keys (primary first) and the two verify switches of one node."""

    keys: tuple[bytes, ...] = ()
    encrypt_verify_incoming: bool = True
    """Refuse plain (unencrypted) frames. Off only while a live cluster switches
    from plain to encrypted gossip (then plain and sealed frames are accepted)."""
    encrypt_verify_outgoing: bool = True
    """Seal outgoing frames with the primary key. Off: send plain frames (the first
    step of a live switch, while other nodes may hold no key yet)."""

    def __post_init__(self) -> None:
        if len(self.keys) > KEYS_MAX:
            raise InvalidInputError(f"a keyring holds at most {KEYS_MAX} keys")
        for key in self.keys:
            _check_key(key)
        if len(set(self.keys)) != len(self.keys):
            raise InvalidInputError("a keyring holds each key once")

    @property
    def primary(self) -> bytes | None:
        """The key outgoing frames are sealed with; None when the keyring is empty."""
        return self.keys[0] if self.keys else None

    @property
    def encrypted(self) -> bool:
        """True when the keyring holds a key (encryption is on)."""
        return bool(self.keys)

    def install(self, key: bytes) -> KeyringState:
        """Add ``key`` as a secondary key (received with, not sent with); the first
        key installed into an empty keyring becomes its primary. Installing a key
        already held changes nothing."""
        _check_key(key)
        if key in self.keys:
            return self
        return replace(self, keys=(*self.keys, key))

    def use(self, key: bytes) -> KeyringState:
        """Make an installed ``key`` the primary."""
        _check_key(key)
        if key not in self.keys:
            raise InvalidInputError(
                f"key {key_fingerprint(key)} is not installed: install it on every node first"
            )
        return replace(self, keys=(key, *(k for k in self.keys if k != key)))

    def remove(self, key: bytes) -> KeyringState:
        """Remove a secondary ``key``; removing the primary is refused (use another
        key first). Removing a key not held changes nothing."""
        _check_key(key)
        if key == self.primary:
            raise InvalidInputError(
                f"key {key_fingerprint(key)} is the primary key: make another key primary "
                "(keyring use) before removing it"
            )
        return replace(self, keys=tuple(k for k in self.keys if k != key))

    def with_verify(self, *, incoming: bool | None, outgoing: bool | None) -> KeyringState:
        """Set either switch (None keeps it)."""
        return replace(
            self,
            encrypt_verify_incoming=(
                self.encrypt_verify_incoming if incoming is None else incoming
            ),
            encrypt_verify_outgoing=(
                self.encrypt_verify_outgoing if outgoing is None else outgoing
            ),
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": KEYRING_FILE_VERSION,
                "keys": [format_key(key) for key in self.keys],
                "encrypt_verify_incoming": self.encrypt_verify_incoming,
                "encrypt_verify_outgoing": self.encrypt_verify_outgoing,
            },
            indent=2,
        )

    @classmethod
    def from_json(cls, text: str) -> KeyringState:
        """Parse a keyring file's text; InvalidInputError says what is wrong."""
        try:
            value = json.loads(text)
        except ValueError as error:
            raise InvalidInputError(f"not JSON: {error}") from None
        if not isinstance(value, dict) or value.get("version") != KEYRING_FILE_VERSION:
            raise InvalidInputError(f"not a version {KEYRING_FILE_VERSION} keyring object")
        keys = value.get("keys", [])
        incoming = value.get("encrypt_verify_incoming", True)
        outgoing = value.get("encrypt_verify_outgoing", True)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InvalidInputError("keys must be a list of base64 strings")
        if not isinstance(incoming, bool) or not isinstance(outgoing, bool):
            raise InvalidInputError("encrypt_verify_incoming/outgoing must be true or false")
        return cls(tuple(parse_key(k) for k in keys), incoming, outgoing)


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise InvalidInputError(f"a gossip key is {KEY_BYTES} bytes")


def parse_key(text: str) -> bytes:
    """A key from its base64 text (as ``keyring generate`` prints it)."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError("a gossip key is base64 text (see keyring generate)") from None
    if len(key) != KEY_BYTES:
        raise InvalidInputError(
            f"a gossip key is {KEY_BYTES} bytes of base64 ({len(key)} bytes given)"
        )
    return key


def format_key(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


def generate_key(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A new random key as base64 text."""
    return format_key(random_bytes(KEY_BYTES))


def key_fingerprint(key: bytes) -> str:
    """A short, non-secret name for a key in messages (never the key itself)."""
    return hashlib.blake2b(key, digest_size=4, person=b"laminar-keyfp").hexdigest()


# ------------------------------------------------------------------ persistence


def load_keyring(path: str) -> KeyringState | None:
    """The keyring saved at ``path``, or None when there is no such file."""
    try:
        with open(path, "rb") as file:
            data = file.read(KEYRING_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"cannot read keyring file {path}: {error.strerror}") from None
    if len(data) > KEYRING_FILE_BYTES_MAX:
        raise ConfigError(f"keyring file {path} is larger than {KEYRING_FILE_BYTES_MAX} bytes")
    try:
        return KeyringState.from_json(data.decode("utf-8"))
    except (InvalidInputError, UnicodeDecodeError) as error:
        raise ConfigError(f"keyring file {path}: {error}") from None


def save_keyring(path: str, state: KeyringState) -> None:
    """Replace the keyring file durably and atomically (readable by its owner only)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    replace_file(path, state.to_json().encode("utf-8"), mode=0o600)
