"""Cost of gossip encryption per packet (issue 31, part 4).

Run: ``.venv/bin/python -m bench.gossip_crypto_bench [--packets N] [--runs N]``

``gossip_seal_open_us``: one 1,400-byte datagram (the MTU; a 1,359-byte frame
plus the 41 bytes of sealing) sealed by one :class:`~laminar.membership.crypto.Keyring`
and opened by another holding two keys (as during a rotation), replay rule
included: microseconds per packet, the median of ``--runs`` runs of ``--packets``
packets each. ``gossip_seal_us`` and ``gossip_open_us`` split it. For scale: a
node of the ``lan`` preset sends and receives a few dozen datagrams a second.
Prints a table, then one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence

from laminar.membership.crypto import SEAL_OVERHEAD_BYTES, EncryptionConfig, Keyring
from laminar.membership.keyring import KeyringState

PACKET_BYTES = 1400


def _run(packets: int) -> tuple[float, float]:
    primary, secondary = os.urandom(32), os.urandom(32)
    sender = Keyring(KeyringState((primary,)), EncryptionConfig(), os.urandom)
    receiver = Keyring(
        KeyringState((secondary, primary)),
        EncryptionConfig(replay_nonces_max=max(packets, 1)),
        os.urandom,
    )
    frame = os.urandom(PACKET_BYTES - SEAL_OVERHEAD_BYTES)
    wall_ms = time.time_ns() // 1_000_000
    started = time.perf_counter()
    sealed = [sender.seal(frame, wall_ms) for _ in range(packets)]
    sealed_s = time.perf_counter() - started
    assert len(sealed[0]) == PACKET_BYTES
    started = time.perf_counter()
    for packet in sealed:
        if receiver.open(packet, wall_ms) != frame:
            raise AssertionError("a sealed packet did not open")
    opened_s = time.perf_counter() - started
    return sealed_s * 1e6 / packets, opened_s * 1e6 / packets


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=20_000, help="packets per run")
    parser.add_argument("--runs", type=int, default=5, help="runs (the median is reported)")
    args = parser.parse_args(argv)
    runs = [_run(args.packets) for _ in range(args.runs)]
    seal_us = statistics.median(seal for seal, _ in runs)
    open_us = statistics.median(opened for _, opened in runs)
    total_us = statistics.median(seal + opened for seal, opened in runs)
    figures = {
        "gossip_seal_open_us": round(total_us, 2),
        "gossip_seal_us": round(seal_us, 2),
        "gossip_open_us": round(open_us, 2),
    }
    print(f"{'figure':<24}{'value':>10}")
    for name, value in figures.items():
        print(f"{name:<24}{value:>10}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
