"""Gossip encryption, sans IO: AES-256-GCM around every membership frame.

Theory of operation
===================

The codec's frame (BLAKE2b tag, version, messages; :mod:`~laminar.membership.codec`)
is unchanged. When the keyring holds a key and ``encrypt_verify_outgoing`` is on,
the shell seals each frame, UDP datagram or TCP push-pull message alike, into::

    version (1) | key id (4) | nonce (12) | AES-256-GCM( sent_ms (8) | frame ) with tag (16)

hashicorp/memberlist's framing (version, nonce, ciphertext with tag) plus two things
it lacks. The *key id*, a 4-byte BLAKE2b hash of the key, names the key the frame
was sealed with: the receiver opens it with that key only (every key of the keyring
is still accepted), and can tell a frame under a key it does not hold
(``dropped_unknown_key``) from a forged or damaged one (``dropped_decrypt``). The
version byte and key id are authenticated as associated data. *sent_ms*, the
sender's wall clock, is the replay rule's input:

* a frame whose ``sent_ms`` is more than ``replay_window_ms`` away from the
  receiver's clock is dropped (``dropped_replay_window``): clocks must agree within
  the window (NTP keeps them within milliseconds);
* inside the window the receiver remembers each accepted frame's key id and nonce
  until its ``sent_ms`` leaves the window; a pair seen again is dropped
  (``dropped_replay``).
  At most ``replay_nonces_max`` are kept: when full, the oldest is forgotten and
  from then on any frame sent at or before it is dropped as well, since it can no
  longer be told from a replay.

Nonces are an 8-byte random prefix and a 4-byte counter; a new prefix is drawn
when the counter wraps. The prefix comes from the ``random_bytes`` given at
construction (``os.urandom`` in the shell, a seeded source in tests), so this
module is deterministic under test.

Receiving with encryption on: a frame that does not start with the version byte
is plain; it is refused (``dropped_plain``) while ``encrypt_verify_incoming`` is
on, else passed on (``plain_accepted``) and the codec's tag decides. A sealed
frame that fails to open is dropped, or with ``encrypt_verify_incoming`` off
passed on as if plain (memberlist does the same: one plain frame in 256 starts
with the version byte). With an empty keyring everything passes through untouched.
"""

from __future__ import annotations

import enum
import hashlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from laminar.errors import ConfigError
from laminar.membership.keyring import KeyringState

ENCRYPTION_VERSION = 1
KEY_ID_BYTES = 4
NONCE_BYTES = 12
NONCE_PREFIX_BYTES = 8
TIMESTAMP_BYTES = 8
GCM_TAG_BYTES = 16
HEADER_BYTES = 1 + KEY_ID_BYTES
SEAL_OVERHEAD_BYTES = HEADER_BYTES + NONCE_BYTES + TIMESTAMP_BYTES + GCM_TAG_BYTES
"""Bytes sealing adds to a frame (41); the core leaves this room below the MTU."""
_COUNTER_MAX = 2 ** (8 * (NONCE_BYTES - NONCE_PREFIX_BYTES)) - 1


@dataclass(frozen=True, slots=True)
class EncryptionConfig:
    """Gossip encryption: where the keyring lives and the replay rule's limits.

    Encryption is on when the keyring holds a key: install one on a running node
    with ``laminar cluster keyring install``, or start from a keyring file made by
    ``laminar cluster keyring generate --keyring-file``. docs/operations.md, "Gossip
    encryption", has the procedures."""

    keyring_file: str = ""
    """Path of the node's keyring file (keys and the two verify switches; written
    whenever they change, so a restart keeps them). Empty: ``<data_dir>/keyring.json``."""
    replay_window_ms: int = 30_000
    """A sealed frame stamped more than this far from the receiver's wall clock is
    dropped as a possible replay (ms); inside it, a nonce seen twice is. Node clocks
    must agree within it (run NTP), with room for delivery delay."""
    replay_nonces_max: int = 65_536
    """Most nonces remembered for the replay rule. When full, frames older than the
    oldest forgotten one are dropped too; 65,536 in a 30 s window covers about
    2,000 gossip frames received per second (a node receives tens)."""

    def __post_init__(self) -> None:
        if not isinstance(self.keyring_file, str):
            raise ConfigError("keyring_file must be a string")
        for name in ("replay_window_ms", "replay_nonces_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")


class OpenDrop(enum.Enum):
    """Why :meth:`Keyring.open` dropped a frame (each counted as ``dropped_<value>``)."""

    UNKNOWN_KEY = "unknown_key"
    DECRYPT = "decrypt"
    REPLAY = "replay"
    REPLAY_WINDOW = "replay_window"
    PLAIN = "plain"


def key_id(key: bytes) -> bytes:
    """The key's 4-byte id on the wire (names a key without revealing it)."""
    return hashlib.blake2b(key, digest_size=KEY_ID_BYTES, person=b"laminar-keyid").digest()


class Keyring:
    """Seals and opens membership frames under a :class:`KeyringState`."""

    __slots__ = (
        "_ciphers",
        "_config",
        "_counter",
        "_counters",
        "_floor_ms",
        "_nonce_prefix",
        "_primary",
        "_random_bytes",
        "_seen",
        "_seen_order",
        "_state",
    )

    def __init__(
        self,
        state: KeyringState,
        config: EncryptionConfig,
        random_bytes: Callable[[int], bytes],
    ) -> None:
        self._config = config
        self._random_bytes = random_bytes
        self._nonce_prefix = random_bytes(NONCE_PREFIX_BYTES)
        self._counter = 0
        self._seen: dict[bytes, int] = {}  # key id + nonce -> sent_ms
        self._seen_order: list[tuple[int, bytes]] = []
        self._floor_ms = -1
        self._counters: dict[str, int] = {}
        self._state = state
        self._ciphers: dict[bytes, list[AESGCM]] = {}
        self._primary: tuple[bytes, AESGCM] | None = None
        self.set_state(state)

    @property
    def state(self) -> KeyringState:
        return self._state

    def set_state(self, state: KeyringState) -> None:
        """Apply a changed keyring (keys or switches) from the next frame on."""
        ciphers: dict[bytes, list[AESGCM]] = {}
        for key in state.keys:
            ciphers.setdefault(key_id(key), []).append(AESGCM(key))
        self._ciphers = ciphers
        primary = state.primary
        self._primary = None if primary is None else (key_id(primary), AESGCM(primary))
        self._state = state

    def counters(self) -> dict[str, int]:
        return dict(self._counters)

    def seal(self, frame: bytes, wall_ms: int) -> bytes:
        """``frame`` as it goes on the wire: sealed under the primary key, or
        unchanged with an empty keyring or ``encrypt_verify_outgoing`` off."""
        primary = self._primary
        if primary is None or not self._state.encrypt_verify_outgoing:
            return frame
        identifier, cipher = primary
        header = bytes([ENCRYPTION_VERSION]) + identifier
        nonce = self._next_nonce()
        stamp = max(0, wall_ms).to_bytes(TIMESTAMP_BYTES, "big")
        return header + nonce + cipher.encrypt(nonce, stamp + frame, header)

    def open(self, packet: bytes, wall_ms: int) -> bytes | OpenDrop:
        """The frame inside ``packet`` (``packet`` itself when plain and accepted),
        or why it was dropped. Never raises."""
        state = self._state
        if not state.keys:
            return packet
        verify = state.encrypt_verify_incoming
        sealed = len(packet) >= SEAL_OVERHEAD_BYTES and packet[0] == ENCRYPTION_VERSION
        if not sealed:
            if verify:
                return self._drop(OpenDrop.PLAIN)
            self._count("plain_accepted")
            return packet
        opened = self._decrypt(packet)
        if isinstance(opened, OpenDrop):
            if not verify:  # perhaps a plain frame that starts with the version byte
                self._count("plain_accepted")
                return packet
            return self._drop(opened)
        sent_ms = int.from_bytes(opened[:TIMESTAMP_BYTES], "big")
        key_and_nonce = packet[1 : HEADER_BYTES + NONCE_BYTES]  # a nonce is unique per key
        replay = self._check_replay(key_and_nonce, sent_ms, wall_ms)
        if replay is not None:
            return self._drop(replay)
        return opened[TIMESTAMP_BYTES:]

    # --------------------------------------------------------------- internals

    def _decrypt(self, packet: bytes) -> bytes | OpenDrop:
        header = packet[:HEADER_BYTES]
        candidates = self._ciphers.get(header[1:])
        if candidates is None:
            return OpenDrop.UNKNOWN_KEY
        nonce = packet[HEADER_BYTES : HEADER_BYTES + NONCE_BYTES]
        ciphertext = packet[HEADER_BYTES + NONCE_BYTES :]
        for cipher in candidates:  # two keys may share an id (1 in 2**32)
            try:
                return cipher.decrypt(nonce, ciphertext, header)
            except InvalidTag:
                continue
        return OpenDrop.DECRYPT

    def _check_replay(self, nonce: bytes, sent_ms: int, wall_ms: int) -> OpenDrop | None:
        window_ms = self._config.replay_window_ms
        if abs(wall_ms - sent_ms) > window_ms or sent_ms <= self._floor_ms:
            return OpenDrop.REPLAY_WINDOW
        order = self._seen_order
        while order and order[0][0] < wall_ms - window_ms:
            _, old = heapq.heappop(order)
            del self._seen[old]
        if nonce in self._seen:
            return OpenDrop.REPLAY
        if len(order) >= self._config.replay_nonces_max:
            forgotten_ms, old = heapq.heappop(order)
            del self._seen[old]
            self._floor_ms = max(self._floor_ms, forgotten_ms)
            self._count("replay_nonces_forgotten")
            if sent_ms <= self._floor_ms:
                return OpenDrop.REPLAY_WINDOW
        self._seen[nonce] = sent_ms
        heapq.heappush(order, (sent_ms, nonce))
        return None

    def _next_nonce(self) -> bytes:
        if self._counter > _COUNTER_MAX:
            self._nonce_prefix = self._random_bytes(NONCE_PREFIX_BYTES)
            self._counter = 0
        counter = self._counter
        self._counter += 1
        return self._nonce_prefix + counter.to_bytes(NONCE_BYTES - NONCE_PREFIX_BYTES, "big")

    def _drop(self, reason: OpenDrop) -> OpenDrop:
        self._count(f"dropped_{reason.value}")
        return reason

    def _count(self, name: str) -> None:
        self._counters[name] = self._counters.get(name, 0) + 1
