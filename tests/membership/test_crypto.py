"""Gossip encryption, sans IO: sealing, opening, keys, replay rule, verify switches."""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Callable

import pytest

from laminar.errors import ConfigError, InvalidInputError
from laminar.membership import config as presets
from laminar.membership.codec import Codec
from laminar.membership.core import MembershipCore
from laminar.membership.crypto import (
    SEAL_OVERHEAD_BYTES,
    EncryptionConfig,
    Keyring,
    OpenDrop,
)
from laminar.membership.keyring import (
    KeyringState,
    format_key,
    load_keyring,
    parse_key,
    save_keyring,
)
from laminar.membership.messages import Alive

from .helpers import KEY, as_member, local_member

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))
KEY_C = bytes(range(2, 34))
FRAME = b"\x07" * 1359  # sealed, a full 1,400-byte datagram
NOW_MS = 1_700_000_000_000


def seeded(seed: int) -> Callable[[int], bytes]:
    rng = random.Random(seed)
    return rng.randbytes


def keyring(
    *keys: bytes,
    incoming: bool = True,
    outgoing: bool = True,
    seed: int = 1,
    config: EncryptionConfig | None = None,
) -> Keyring:
    return Keyring(
        KeyringState(keys, incoming, outgoing), config or EncryptionConfig(), seeded(seed)
    )


def test_seal_open_round_trip_and_size() -> None:
    sender, receiver = keyring(KEY_A, seed=1), keyring(KEY_A, seed=2)
    packet = sender.seal(FRAME, NOW_MS)
    assert len(packet) == len(FRAME) + SEAL_OVERHEAD_BYTES == 1400
    assert FRAME[:64] not in packet  # encrypted, not merely tagged
    assert receiver.open(packet, NOW_MS + 5) == FRAME
    assert receiver.counters() == {}


def test_nonces_differ_between_packets() -> None:
    sender = keyring(KEY_A)
    first, second = sender.seal(FRAME, NOW_MS), sender.seal(FRAME, NOW_MS)
    assert first[5:17] != second[5:17]
    assert first != second


def test_unknown_key_dropped_and_counted() -> None:
    packet = keyring(KEY_A).seal(FRAME, NOW_MS)
    receiver = keyring(KEY_B)
    assert receiver.open(packet, NOW_MS) is OpenDrop.UNKNOWN_KEY
    assert receiver.counters() == {"dropped_unknown_key": 1}


@pytest.mark.parametrize("position", [0, 1, 5, 17, 30, -1])
def test_tampered_packet_dropped(position: int) -> None:
    packet = bytearray(keyring(KEY_A).seal(FRAME, NOW_MS))
    packet[position] ^= 0x01
    receiver = keyring(KEY_A)
    dropped = receiver.open(bytes(packet), NOW_MS)
    # Flipping the version byte makes it look plain; the key id byte an unknown key.
    expected = {0: OpenDrop.PLAIN, 1: OpenDrop.UNKNOWN_KEY}.get(position, OpenDrop.DECRYPT)
    assert dropped is expected
    assert receiver.counters() == {f"dropped_{expected.value}": 1}


def test_replayed_packet_dropped() -> None:
    packet = keyring(KEY_A).seal(FRAME, NOW_MS)
    receiver = keyring(KEY_A)
    assert receiver.open(packet, NOW_MS) == FRAME
    assert receiver.open(packet, NOW_MS + 1000) is OpenDrop.REPLAY
    assert receiver.counters() == {"dropped_replay": 1}


def test_packet_outside_the_window_dropped() -> None:
    config = EncryptionConfig(replay_window_ms=30_000)
    sender = keyring(KEY_A)
    old = sender.seal(FRAME, NOW_MS - 30_001)
    future = sender.seal(FRAME, NOW_MS + 30_001)
    edge = sender.seal(FRAME, NOW_MS - 30_000)
    receiver = keyring(KEY_A, config=config)
    assert receiver.open(old, NOW_MS) is OpenDrop.REPLAY_WINDOW
    assert receiver.open(future, NOW_MS) is OpenDrop.REPLAY_WINDOW
    assert receiver.open(edge, NOW_MS) == FRAME
    assert receiver.counters() == {"dropped_replay_window": 2}


def test_replay_after_the_nonce_expired_is_outside_the_window() -> None:
    """A nonce is forgotten only once its packet is too old to be accepted anyway."""
    config = EncryptionConfig(replay_window_ms=1000)
    packet = keyring(KEY_A).seal(FRAME, NOW_MS)
    receiver = keyring(KEY_A, config=config)
    assert receiver.open(packet, NOW_MS) == FRAME
    later = keyring(KEY_A, seed=9).seal(FRAME, NOW_MS + 1500)
    assert receiver.open(later, NOW_MS + 1500) == FRAME  # evicts the first nonce
    assert receiver.open(packet, NOW_MS + 1500) is OpenDrop.REPLAY_WINDOW


def test_full_nonce_set_raises_the_floor() -> None:
    config = EncryptionConfig(replay_nonces_max=3)
    sender = keyring(KEY_A)
    packets = [sender.seal(FRAME, NOW_MS + i) for i in range(5)]
    receiver = keyring(KEY_A, config=config)
    for packet in packets[1:4]:
        assert receiver.open(packet, NOW_MS) == FRAME
    assert receiver.open(packets[4], NOW_MS) == FRAME  # forgets packets[1] (sent NOW+1)
    # packets[0] was never seen, but it is older than a forgotten nonce: refused.
    assert receiver.open(packets[0], NOW_MS) is OpenDrop.REPLAY_WINDOW
    assert receiver.open(packets[1], NOW_MS) is OpenDrop.REPLAY_WINDOW
    assert receiver.open(packets[3], NOW_MS) is OpenDrop.REPLAY
    assert receiver.counters()["replay_nonces_forgotten"] == 1


def test_primary_seals_and_every_key_opens() -> None:
    old, new = keyring(KEY_A, seed=1), keyring(KEY_B, seed=2)
    both = keyring(KEY_A, KEY_B, seed=3)  # A primary, B secondary
    assert both.open(old.seal(FRAME, NOW_MS), NOW_MS) == FRAME
    assert both.open(new.seal(FRAME, NOW_MS), NOW_MS) == FRAME
    sealed_by_both = both.seal(FRAME, NOW_MS)
    assert old.open(sealed_by_both, NOW_MS) == FRAME  # sealed with A, the primary
    assert new.open(sealed_by_both, NOW_MS) is OpenDrop.UNKNOWN_KEY
    both.set_state(both.state.use(KEY_B))
    assert new.open(both.seal(FRAME, NOW_MS), NOW_MS) == FRAME


def test_verify_switches() -> None:
    plain = FRAME
    strict = keyring(KEY_A)
    assert strict.open(plain, NOW_MS) is OpenDrop.PLAIN
    assert strict.counters() == {"dropped_plain": 1}

    lenient = keyring(KEY_A, incoming=False)
    assert lenient.open(plain, NOW_MS) == plain
    assert lenient.open(keyring(KEY_A).seal(FRAME, NOW_MS), NOW_MS) == FRAME
    # A sealed frame under an unknown key is passed on as if plain (the codec's tag
    # then refuses it), as memberlist does with its verify switch off.
    assert lenient.open(keyring(KEY_B).seal(FRAME, NOW_MS), NOW_MS) != FRAME
    assert lenient.counters() == {"plain_accepted": 2}

    quiet = keyring(KEY_A, outgoing=False)
    assert quiet.seal(FRAME, NOW_MS) == FRAME
    quiet.set_state(quiet.state.with_verify(incoming=None, outgoing=True))
    assert keyring(KEY_A).open(quiet.seal(FRAME, NOW_MS), NOW_MS) == FRAME


def test_empty_keyring_passes_everything_through() -> None:
    empty = keyring()
    assert empty.seal(FRAME, NOW_MS) == FRAME
    assert empty.open(FRAME, NOW_MS) == FRAME


def test_nonce_prefix_redrawn_when_the_counter_wraps() -> None:
    sender = keyring(KEY_A)
    first = sender.seal(FRAME, NOW_MS)
    sender._counter = 2**32
    wrapped = sender.seal(FRAME, NOW_MS)
    assert wrapped[5:13] != first[5:13]
    assert wrapped[13:17] == b"\x00\x00\x00\x00"


def test_core_leaves_room_for_the_seal() -> None:
    """With the reserve, a full datagram stays within the MTU once sealed."""
    config = presets.local()
    core = MembershipCore(
        config,
        local_member("a"),
        KEY,
        random.Random(1),
        0,
        seeds=["127.0.0.1:9"],
        frame_bytes_reserved=SEAL_OVERHEAD_BYTES,
    )
    codec = Codec(KEY, metadata_bytes_max=config.metadata_bytes_max)
    for index in range(100):  # many updates of varied sizes waiting to be piggybacked
        alive = as_member(local_member(f"n{index:03d}", metadata=(("k", "v" * (index % 37)),)))
        message = Alive(
            alive.node_id,
            1,
            alive.gossip_address,
            alive.grpc_address,
            alive.weight,
            alive.zone,
            alive.metadata,
        )
        core.receive_packet(codec.seal([codec.encode(message)]), 0)
    packets = core.tick(10_000).packets
    sizes = [len(packet.data) for packet in packets]
    assert len(sizes) >= 3
    assert max(sizes) <= config.mtu_bytes - SEAL_OVERHEAD_BYTES
    assert max(sizes) > config.mtu_bytes - SEAL_OVERHEAD_BYTES - 20  # filled


# ----------------------------------------------------------------- keyring state


def test_keyring_state_changes() -> None:
    state = KeyringState().install(KEY_A)
    assert state.primary == KEY_A
    state = state.install(KEY_B).install(KEY_B)
    assert state.keys == (KEY_A, KEY_B)
    state = state.use(KEY_B)
    assert state.keys == (KEY_B, KEY_A)
    with pytest.raises(InvalidInputError, match="primary"):
        state.remove(KEY_B)
    with pytest.raises(InvalidInputError, match="not installed"):
        state.use(KEY_C)
    assert state.remove(KEY_A).keys == (KEY_B,)
    with pytest.raises(InvalidInputError, match="32 bytes"):
        state.install(b"short")


def test_key_text() -> None:
    assert parse_key(format_key(KEY_A)) == KEY_A
    for bad in ("not base64!", format_key(b"x" * 16)):
        with pytest.raises(InvalidInputError):
            parse_key(bad)


def test_keyring_file_round_trip(tmp_path: pytest.TempPathFactory) -> None:
    path = f"{tmp_path}/keyring.json"
    assert load_keyring(path) is None
    state = KeyringState((KEY_B, KEY_A), encrypt_verify_incoming=False)
    save_keyring(path, state)
    assert load_keyring(path) == state
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "w") as file:
        file.write('{"version": 1, "keys": ["abc"]}')
    with pytest.raises(ConfigError, match="keyring file"):
        load_keyring(path)
