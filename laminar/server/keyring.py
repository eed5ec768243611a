"""A node's gossip keyring: its file, its current state, and changes to it.

The keyring file (``[gossip_encryption] keyring_file``, default
``<data_dir>/keyring.json``; format in :mod:`laminar.membership.keyring`) is read
at start. A change (the ``GossipKeyring`` RPC) is computed on the current state,
saved atomically, and only then handed to the membership thread, one change at a
time; a change that cannot be saved is not applied. Keys never reach a log line:
logs name a key by its fingerprint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from laminar.errors import ConfigError
from laminar.logfields import fields
from laminar.membership.crypto import EncryptionConfig
from laminar.membership.keyring import (
    DEFAULT_CLUSTER_KEY,
    KeyringState,
    key_fingerprint,
    load_keyring,
    save_keyring,
)
from laminar.segment import layout
from laminar.server.gossip import ThreadedMembership

_LOG = logging.getLogger(__name__)


def keyring_path(data_dir: str, config: EncryptionConfig) -> str:
    """Where the node's keyring file is: ``keyring_file`` or the data directory's."""
    return config.keyring_file or layout.keyring_path(data_dir)


NO_KEYRING = KeyringState((), encrypt_verify_incoming=False, encrypt_verify_outgoing=False)
"""A node without a keyring file: no keys, both switches off, so that installing
the first key on a running plain cluster changes nothing until ``verify`` turns
the switches on (outgoing on every node, then incoming)."""


def load_node_keyring(path: str, cluster_key: str) -> KeyringState:
    """The saved keyring (:data:`NO_KEYRING` when there is no file); a keyring
    holding a key with the default cluster key is refused."""
    state = load_keyring(path) or NO_KEYRING
    check_cluster_key(state, cluster_key, path)
    return state


def check_cluster_key(state: KeyringState, cluster_key: str, path: str) -> None:
    if state.encrypted and cluster_key == DEFAULT_CLUSTER_KEY:
        raise ConfigError(
            f"gossip encryption is on (keyring {path} holds {len(state.keys)} key(s)) but "
            f"cluster_key is the default {DEFAULT_CLUSTER_KEY!r}: set cluster_key (the "
            "same secret on every node) or remove the keyring file"
        )


class NodeKeyring:
    """The node's keyring state, changed one change at a time (saved, then applied)."""

    def __init__(
        self, path: str, state: KeyringState, membership: ThreadedMembership, cluster_key: str
    ) -> None:
        self.path = path
        self._state = state
        self._membership = membership
        self._cluster_key = cluster_key
        self._lock = asyncio.Lock()

    @property
    def state(self) -> KeyringState:
        return self._state

    async def change(
        self, change: Callable[[KeyringState], KeyringState], node_id: str
    ) -> KeyringState:
        """Apply ``change`` (a :class:`KeyringState` method; its errors propagate)."""
        async with self._lock:
            state = change(self._state)
            check_cluster_key(state, self._cluster_key, self.path)
            if state == self._state:
                return state
            await asyncio.to_thread(save_keyring, self.path, state)
            await self._membership.set_keyring(state)
            self._state = state
        primary = state.primary
        _LOG.info(
            "gossip keyring changed node=%s keys=%d primary=%s verify_incoming=%s "
            "verify_outgoing=%s",
            node_id,
            len(state.keys),
            "none" if primary is None else key_fingerprint(primary),
            state.encrypt_verify_incoming,
            state.encrypt_verify_outgoing,
            extra=fields(node_id=node_id),
        )
        return state

    async def counters(self) -> dict[str, int]:
        """Gossip frames dropped by reason, and plain frames accepted."""
        counters = await self._membership.counters()
        return {
            name: count
            for name, count in sorted(counters.items())
            if name.startswith("dropped_") or name == "plain_accepted"
        }
