"""Timing and limits of one partition's consensus group."""

from __future__ import annotations

from dataclasses import dataclass

from laminar.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Every field is in milliseconds, bytes or a count, as its name says."""

    election_timeout_min_ms: int = 1000
    """A follower that hears nothing from a leader for a random time between the
    minimum and maximum starts a (pre-)election. Also the leader lease: a voter
    that heard from a leader this recently refuses to vote for anyone else."""

    election_timeout_max_ms: int = 2000
    """Upper bound of the randomized election timeout (spreads candidates apart)."""

    heartbeat_interval_ms: int = 100
    """How often a leader tells followers it is alive and where the commit is; a
    follower's high watermark lags the leader's by at most about this much."""

    pre_vote: bool = True
    """Ask for votes without raising the term first, so that a node returning from
    a partition cannot depose a healthy leader."""

    check_quorum: bool = True
    """A leader that has not heard from a majority for an election timeout steps
    down (and refuses writes with UNAVAILABLE meanwhile)."""

    inflight_appends_max: int = 8
    """Append requests in flight per follower (pipelining window)."""

    append_bytes_max: int = 4 * 1024 * 1024
    """Most batch bytes in one append request (a single larger batch is sent alone)."""

    pending_produce_max: int = 10_000
    """Most produce requests awaiting commit; beyond it writes are refused."""

    producer_window: int = 5
    """Recent batches remembered per idempotent producer for duplicate detection."""

    producers_max: int = 100_000
    """Idempotent producers remembered per partition (least recently used forgotten)."""

    reconfigure_stable_ms: int = 2000
    """A target replica set must stay unchanged this long before the leader acts."""

    catch_up_lag_offsets_max: int = 0
    """A learner is promoted (and a preferred leader receives leadership) only when
    it is within this many offsets of the leader's end."""

    transfer_timeout_ms: int = 2000
    """A leadership transfer that has not completed by then is abandoned."""

    replica_lag_max_ms: int = 10_000
    """A follower counts as in sync (for ``cluster status``, not for commits) while it
    answered within this long and held the leader's whole log within it (Kafka's
    ``replica.lag.time.max.ms``)."""

    quiesce: bool = True
    """An idle partition whose replicas all hold the whole committed log stops
    heartbeating (like CockroachDB's quiesced ranges), so idle partitions cost
    nothing. Its followers then rely on membership (``hint_leader_dead``) to learn
    that the leader died; any write, or a vote request, wakes the group."""

    def __post_init__(self) -> None:
        if not 0 < self.election_timeout_min_ms < self.election_timeout_max_ms:
            raise ConfigError("need 0 < election_timeout_min_ms < election_timeout_max_ms")
        if not 0 < self.heartbeat_interval_ms < self.election_timeout_min_ms:
            raise ConfigError("heartbeat_interval_ms must be below election_timeout_min_ms")
        if self.inflight_appends_max < 1 or self.append_bytes_max < 1:
            raise ConfigError("inflight_appends_max and append_bytes_max must be positive")
        if self.pending_produce_max < 1 or self.producer_window < 1 or self.producers_max < 1:
            raise ConfigError("pending_produce_max, producer_window, producers_max >= 1")
        if self.reconfigure_stable_ms < 0 or self.catch_up_lag_offsets_max < 0:
            raise ConfigError("reconfigure_stable_ms and catch_up_lag_offsets_max >= 0")
        if self.transfer_timeout_ms <= 0:
            raise ConfigError("transfer_timeout_ms must be positive")
        if self.replica_lag_max_ms < self.election_timeout_min_ms:
            raise ConfigError("replica_lag_max_ms must be at least election_timeout_min_ms")

    @classmethod
    def lan(cls) -> ReplicaConfig:
        """Defaults for a data-centre network."""
        return cls()

    @classmethod
    def local(cls) -> ReplicaConfig:
        """Fast failover for tests and a cluster on one machine."""
        return cls(
            election_timeout_min_ms=500,
            election_timeout_max_ms=1000,
            heartbeat_interval_ms=50,
            reconfigure_stable_ms=500,
            transfer_timeout_ms=1000,
            replica_lag_max_ms=2_000,
        )

    @classmethod
    def simulation(cls) -> ReplicaConfig:
        """For the deterministic simulator: same shape as ``lan``, shorter waits."""
        return cls(
            election_timeout_min_ms=300,
            election_timeout_max_ms=600,
            heartbeat_interval_ms=50,
            reconfigure_stable_ms=300,
            transfer_timeout_ms=600,
            replica_lag_max_ms=2_000,
        )
