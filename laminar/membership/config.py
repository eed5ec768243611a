"""Membership configuration: one frozen dataclass and its presets.

Every field says what it means, its unit, and why it has its default. The defaults
follow hashicorp/memberlist's ``DefaultLANConfig``; ``local()`` is a fast variant for
tests and the local cluster script; ``simulation()`` is tuned for the deterministic
simulator (LAN timing, but nothing that depends on real sockets).

All nodes of one cluster must use the same ``mtu_bytes`` and ``metadata_bytes_max``:
a packet larger than the receiver's MTU is dropped as oversized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from laminar.errors import ConfigError

# Worst-case encoded size of one member record without its metadata: node id,
# two addresses and a zone at their maximum lengths plus msgpack framing. The MTU
# must leave room for one such record so that any single update can be sent.
MEMBER_RECORD_BYTES_MAX_WITHOUT_METADATA = 64 + 128 + 128 + 64 + 64


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Timing, fan-out and size limits of the SWIM + Lifeguard protocol."""

    probe_interval_ms: int = 1000
    """Time between two failure-detection probes started by this node (ms).

    Each interval the node pings one member, round-robin over a shuffled list, so a
    dead member is first probed after about one interval by somebody in the cluster
    whatever the cluster size. Lifeguard's awareness multiplies it when unhealthy."""

    probe_timeout_ms: int = 500
    """Time to wait for a direct ack before asking ``indirect_checks`` others (ms).

    Should be above the 99th percentile round-trip time; must be below the probe
    interval, because the indirect probes must finish inside the interval."""

    indirect_checks: int = 3
    """Members asked to ping the target on our behalf (``ping-req``) when the direct
    ping gets no ack. More of them make a false suspicion from one lossy link rarer."""

    suspicion_mult: int = 4
    """Multiplier of the minimum suspicion timeout.

    ``min = suspicion_mult * max(1, log10(n)) * probe_interval``; the log term gives
    gossip time to reach a larger cluster before a suspect is declared dead. With
    Lifeguard, ``suspicion_mult - 2`` independent confirmations shrink the timeout
    from its maximum to this minimum."""

    suspicion_max_timeout_mult: int = 6
    """Lifeguard: the maximum suspicion timeout is this many times the minimum.

    A suspect that nobody else confirms gets this long to refute, which is what
    keeps a busy (slow, not dead) member from being declared dead."""

    retransmit_mult: int = 4
    """Each update is piggybacked ``retransmit_mult * ceil(log10(n + 1))`` times.

    Infection-style dissemination reaches every member with high probability after
    O(log n) retransmissions; a larger multiplier trades bandwidth for certainty."""

    gossip_interval_ms: int = 200
    """Time between two gossip rounds (ms). A round sends pending updates (if any)
    to ``gossip_nodes`` random members, which spreads news faster than piggybacking
    on probes alone. Nothing is sent when there is no pending update."""

    gossip_nodes: int = 3
    """Members each gossip round sends to (fan-out)."""

    gossip_to_dead_ms: int = 30_000
    """For this long after a member is declared dead, gossip rounds may still pick it
    (ms), so that a member that was only paused learns it was declared dead and
    refutes; without it a resumed member could stay dead in everyone's view."""

    push_pull_interval_ms: int = 30_000
    """Time between two full-state exchanges with one random member (ms), the
    anti-entropy that repairs any update gossip lost. Scaled up for clusters above
    32 members (memberlist's ``pushPullScale``) so the cost per member stays flat.
    0 disables periodic push-pull (join still uses it)."""

    reconnect_interval_ms: int = 10_000
    """Every this often (ms) the node attempts a push-pull with one random *dead*
    member (Serf's reconnect), or, if there is none, with a seed it does not see
    alive. This is what re-merges the two sides of a healed partition: each side
    learns that the other declared it dead and refutes. 0 disables."""

    join_retry_interval_ms: int = 2000
    """Until a push-pull answer arrives from a seed, the join request is resent to
    every seed this often (ms), so that nodes may start in any order."""

    reap_after_ms: int = 30_000
    """A dead or left member is forgotten this long after it was declared (ms).
    Must be at least ``gossip_to_dead_ms``. A forgotten member that comes back is a
    new member."""

    leave_propagate_ms: int = 1000
    """After ``leave()``, how long the shell keeps gossiping before it stops (ms), so
    that the ``left`` update reaches the cluster; the core reports it done earlier
    when the update has been sent its full retransmit count."""

    awareness_max_multiplier: int = 8
    """Lifeguard's local health: the probe interval and timeout are multiplied by
    ``1 + health score``, the score rising to ``awareness_max_multiplier - 1`` when
    this node misses acks and nacks, i.e. when it is probably the slow one."""

    lifeguard_enabled: bool = True
    """Lifeguard refinements on or off: dynamic suspicion timeout, local health
    awareness, nacks and the buddy system. Off gives plain SWIM with a fixed
    suspicion timeout (the minimum above), for the benchmark comparison."""

    mtu_bytes: int = 1400
    """Largest UDP packet sent or accepted (bytes), chosen to fit an Ethernet frame
    without IP fragmentation. Piggybacked updates fill packets up to this size."""

    stream_bytes_max: int = 4 * 1024 * 1024
    """Largest push-pull (full state) message sent or accepted over TCP (bytes)."""

    members_max: int = 10_000
    """Most members (including dead ones not yet reaped) this node keeps; updates
    about further unknown members are dropped and counted. Bounds memory against a
    flood of forged or buggy updates, and the full state against the stream limit."""

    metadata_bytes_max: int = 512
    """Most bytes of a member's metadata map (keys plus values, UTF-8)."""

    relays_max: int = 64
    """Most ``ping-req`` relays in flight at once on this node; further requests
    are dropped (the requester then counts it as a missing nack)."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "lifeguard_enabled":
                if not isinstance(value, bool):
                    raise ConfigError("lifeguard_enabled must be a bool")
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{field.name} must be an int, got {value!r}")
        positive = (
            "probe_interval_ms",
            "probe_timeout_ms",
            "suspicion_mult",
            "suspicion_max_timeout_mult",
            "retransmit_mult",
            "gossip_interval_ms",
            "join_retry_interval_ms",
            "awareness_max_multiplier",
            "members_max",
            "relays_max",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        non_negative = (
            "indirect_checks",
            "gossip_nodes",
            "gossip_to_dead_ms",
            "push_pull_interval_ms",
            "reconnect_interval_ms",
            "reap_after_ms",
            "leave_propagate_ms",
            "metadata_bytes_max",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.probe_timeout_ms >= self.probe_interval_ms:
            raise ConfigError(
                f"probe_timeout_ms ({self.probe_timeout_ms}) must be below "
                f"probe_interval_ms ({self.probe_interval_ms}): indirect probes need time"
            )
        if self.suspicion_mult < 2 and self.lifeguard_enabled:
            raise ConfigError("suspicion_mult must be >= 2 with Lifeguard")
        if self.reap_after_ms < self.gossip_to_dead_ms:
            raise ConfigError(
                f"reap_after_ms ({self.reap_after_ms}) must be >= gossip_to_dead_ms "
                f"({self.gossip_to_dead_ms}): a reaped member can no longer be told it is dead"
            )
        if self.metadata_bytes_max > 4096:
            raise ConfigError("metadata_bytes_max must be <= 4096 (it rides in UDP packets)")
        needed = MEMBER_RECORD_BYTES_MAX_WITHOUT_METADATA + self.metadata_bytes_max + 64
        if not needed <= self.mtu_bytes <= 65_507:
            raise ConfigError(
                f"mtu_bytes must be in [{needed}, 65507] for metadata_bytes_max="
                f"{self.metadata_bytes_max}, got {self.mtu_bytes}"
            )
        if self.stream_bytes_max < self.mtu_bytes:
            raise ConfigError("stream_bytes_max must be >= mtu_bytes")

    # Derived quantities (pure functions of the config and the cluster size).

    def retransmit_limit(self, member_count: int) -> int:
        """How many times one update is piggybacked in a cluster of ``member_count``."""
        return self.retransmit_mult * max(1, math.ceil(math.log10(member_count + 1)))

    def suspicion_min_ms(self, member_count: int) -> int:
        """Lifeguard's (and SWIM's fixed) minimum suspicion timeout (ms)."""
        node_scale = max(1.0, math.log10(max(1, member_count)))
        return int(self.suspicion_mult * node_scale * self.probe_interval_ms)

    def push_pull_interval_scaled_ms(self, member_count: int) -> int:
        """memberlist's ``pushPullScale``: one more interval per doubling above 32."""
        if member_count <= 32:
            return self.push_pull_interval_ms
        multiplier = math.ceil(math.log2(member_count) - math.log2(32)) + 1
        return self.push_pull_interval_ms * multiplier


def lan() -> MembershipConfig:
    """Defaults for a LAN (memberlist's DefaultLANConfig)."""
    return MembershipConfig()


def local() -> MembershipConfig:
    """Fast timing for one machine: tests and the local cluster script.

    A crashed node is detected in about two seconds; not for real networks."""
    return MembershipConfig(
        probe_interval_ms=200,
        probe_timeout_ms=80,
        suspicion_mult=3,
        suspicion_max_timeout_mult=4,
        retransmit_mult=3,
        gossip_interval_ms=50,
        gossip_to_dead_ms=10_000,
        push_pull_interval_ms=5_000,
        reconnect_interval_ms=1000,
        join_retry_interval_ms=300,
        reap_after_ms=15_000,
        leave_propagate_ms=500,
    )


def simulation() -> MembershipConfig:
    """For the deterministic simulator: LAN timing (so simulated figures mean what
    they would on a LAN) with a shorter join retry, since simulated nodes start
    in arbitrary order."""
    return MembershipConfig(join_retry_interval_ms=500)


PRESETS = {"lan": lan, "local": local, "simulation": simulation}
