"""Retry policy: capped exponential backoff with jitter, bounded by attempts and a deadline."""

from __future__ import annotations

import random
from dataclasses import dataclass

from laminar.errors import ConfigError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a client retries a retriable error (``UNAVAILABLE``, timeouts, no leader).

    The n-th wait (n from 0) is ``min(backoff_max_ms, backoff_initial_ms *
    backoff_multiplier**n)`` scaled by a random factor in ``[1 - jitter_ratio, 1]``,
    so that many clients retrying after the same failure do not arrive in lockstep.
    A call waits only once it has run out of candidates (the leader, or the replicas
    in turn when the leader is unknown or failing); it stops when its deadline (the
    call's ``timeout_s``) would pass during the wait, or after ``attempts_max``
    attempts (RPCs, redirects included), whichever comes first. ``redirects_max``
    bounds how many ``NOT_LEADER`` hints one call follows without waiting (hints are
    followed at once; a loop of stale hints ends here).

    A node that did not answer (connection failed, or no answer before the
    attempt's timeout) is skipped while other candidates are left (see
    :mod:`laminar_client.health`): ``node_skip_initial_ms`` after its first failure,
    doubling with each further failure in a row up to ``node_skip_max_ms``. The
    initial skip is about a leader election (~1 s), so a node that hung is not
    asked again before the cluster has had time to replace it; the cap bounds how
    long a node that came back unnoticed is avoided (one that gossip shows back,
    live with a higher incarnation, is forgiven at once).
    """

    backoff_initial_ms: float = 25.0
    backoff_max_ms: float = 1_000.0
    backoff_multiplier: float = 2.0
    jitter_ratio: float = 0.5
    attempts_max: int = 100
    redirects_max: int = 8
    node_skip_initial_ms: float = 1_000.0
    node_skip_max_ms: float = 5_000.0

    def __post_init__(self) -> None:
        if not 0.0 < self.backoff_initial_ms <= self.backoff_max_ms:
            raise ConfigError("need 0 < backoff_initial_ms <= backoff_max_ms")
        if self.backoff_multiplier < 1.0:
            raise ConfigError("backoff_multiplier must be >= 1")
        if not 0.0 <= self.jitter_ratio <= 1.0:
            raise ConfigError("jitter_ratio must be in [0, 1]")
        if self.attempts_max < 1 or self.redirects_max < 0:
            raise ConfigError("attempts_max must be >= 1 and redirects_max >= 0")
        if not 0.0 < self.node_skip_initial_ms <= self.node_skip_max_ms:
            raise ConfigError("need 0 < node_skip_initial_ms <= node_skip_max_ms")

    def backoff_ms(self, retry_index: int, rng: random.Random) -> float:
        """The wait before retry number ``retry_index`` (0 for the first retry)."""
        exponent = min(retry_index, 64)  # beyond this the cap applies anyway
        ceiling_ms = min(
            self.backoff_max_ms, self.backoff_initial_ms * self.backoff_multiplier**exponent
        )
        return ceiling_ms * (1.0 - self.jitter_ratio * rng.random())


NO_RETRY = RetryPolicy(attempts_max=1, redirects_max=0)
"""Fail on the first error (useful in tests and for operator tools that report at once)."""
