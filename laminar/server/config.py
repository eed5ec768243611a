"""Configuration of a broker node: command-line options, an optional TOML file, presets.

Precedence: command-line option > TOML file > preset default. The TOML file holds
the same keys as the long options (``data_dir``, ``gossip``, ``grpc``, ``peer``, ``seeds``,
``bootstrap``, ``weight``, ``zone``, ``preset``, ``cluster_key``, ``fsync``,
``node_id``) plus optional ``[replica]`` and ``[membership]`` tables whose keys are
fields of :class:`~laminar.replica.config.ReplicaConfig` and
:class:`~laminar.membership.config.MembershipConfig`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from typing import Any

from laminar.errors import ConfigError
from laminar.membership import config as membership_presets
from laminar.membership.config import MembershipConfig
from laminar.replica.config import ReplicaConfig

PRESETS = ("local", "lan")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    data_dir: str
    gossip: str = "127.0.0.1:7000"
    """``host:port`` for SWIM gossip (UDP, with TCP push-pull on the same port)."""
    grpc: str = "127.0.0.1:7100"
    """``host:port`` of the gRPC API (clients and admin tools)."""
    peer: str = "127.0.0.1:7200"
    """``host:port`` (TCP) where other nodes send replication traffic."""
    seeds: tuple[str, ...] = ()
    """Gossip addresses of nodes to join through."""
    bootstrap: bool = False
    """Start a new cluster (only the very first node of a cluster)."""
    weight: float | None = None
    """Placement weight (0 drains); None keeps the saved value (default 1)."""
    zone: str | None = None
    """Failure-domain label; None keeps the saved value (default empty)."""
    node_id: str | None = None
    """Only used at first start; later the id saved in the data dir wins."""
    cluster_key: str = "laminar"
    """Shared secret authenticating gossip packets (HMAC). Not a security boundary
    until gossip encryption lands; set it to keep clusters apart."""
    fsync: bool = True
    """Fsync appended batches before acknowledging them. Turning it off trades the
    durability of acknowledged writes on power loss for speed."""
    preset: str = "local"
    replica: ReplicaConfig = field(default_factory=ReplicaConfig.local)
    membership: MembershipConfig = field(default_factory=membership_presets.local)
    dead_grace_ms: int = 10_000
    """How long placement keeps a member that membership declared dead (a restart
    or a false suspicion should not move its replicas); after it, the member's
    replicas are replaced. A member that left gracefully is replaced at once."""
    produce_timeout_ms: int = 10_000
    """Default time a produce waits for its acknowledgement."""
    fetch_bytes_max: int = 16 * 1024 * 1024
    """The largest fetch response (and the default ``max_bytes``)."""
    fetch_wait_ms_max: int = 30_000
    """The longest a fetch may long-poll."""
    request_bytes_max: int = 64 * 1024 * 1024
    """The largest gRPC message accepted."""

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ConfigError("--data-dir is required")
        for name in ("gossip", "grpc", "peer"):
            _check_address(name, getattr(self, name))
        if len({self.gossip, self.grpc, self.peer}) < 3:
            raise ConfigError(
                f"gossip ({self.gossip}), grpc ({self.grpc}) and peer ({self.peer}) "
                "addresses must differ"
            )
        for seed in self.seeds:
            _check_address("seed", seed)
        if self.weight is not None and not (self.weight >= 0 and self.weight < float("inf")):
            raise ConfigError(f"weight must be a finite number >= 0, got {self.weight}")
        if self.preset not in PRESETS:
            raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.dead_grace_ms < 0:
            raise ConfigError("dead_grace_ms must be >= 0")
        if self.produce_timeout_ms <= 0 or self.fetch_wait_ms_max < 0:
            raise ConfigError("produce_timeout_ms must be > 0 and fetch_wait_ms_max >= 0")
        if not 0 < self.fetch_bytes_max <= self.request_bytes_max:
            raise ConfigError("need 0 < fetch_bytes_max <= request_bytes_max")


def _check_address(name: str, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{name} address must be host:port, got {address!r}")
    if host in ("0.0.0.0", "::", "[::]"):
        raise ConfigError(
            f"{name} address {address!r} is a wildcard; give the address other nodes "
            "and clients should use"
        )


def load_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"config file {path} is not valid TOML: {error}") from None


_TOP_LEVEL: dict[str, type | tuple[type, ...]] = {
    "data_dir": str,
    "gossip": str,
    "grpc": str,
    "peer": str,
    "seeds": list,
    "bootstrap": bool,
    "weight": (int, float),
    "zone": str,
    "node_id": str,
    "cluster_key": str,
    "fsync": bool,
    "preset": str,
    "produce_timeout_ms": int,
    "dead_grace_ms": int,
    "fetch_bytes_max": int,
    "fetch_wait_ms_max": int,
    "request_bytes_max": int,
}


def build_config(options: dict[str, Any], file_values: dict[str, Any] | None = None) -> NodeConfig:
    """Merge command-line ``options`` (None = not given) over TOML ``file_values``."""
    values: dict[str, Any] = {}
    file_values = dict(file_values or {})
    replica_overrides = file_values.pop("replica", {})
    membership_overrides = file_values.pop("membership", {})
    for key, value in file_values.items():
        expected = _TOP_LEVEL.get(key)
        if expected is None:
            raise ConfigError(f"unknown config key {key!r}")
        if not isinstance(value, expected) or isinstance(value, bool) is not (expected is bool):
            raise ConfigError(f"config key {key!r} has the wrong type: {value!r}")
        values[key] = value
    for key, value in options.items():
        if value is not None:
            values[key] = value
    if "seeds" in values:
        seeds = values["seeds"]
        if isinstance(seeds, str):
            seeds = [s for s in seeds.split(",") if s.strip()]
        values["seeds"] = tuple(str(s).strip() for s in seeds)
    if "weight" in values and values["weight"] is not None:
        values["weight"] = float(values["weight"])
    preset = values.get("preset", "local")
    if preset not in PRESETS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    replica = ReplicaConfig.local() if preset == "local" else ReplicaConfig.lan()
    membership = membership_presets.local() if preset == "local" else membership_presets.lan()
    values["replica"] = _override(replica, replica_overrides, "replica")
    values["membership"] = _override(membership, membership_overrides, "membership")
    if "data_dir" not in values:
        raise ConfigError("--data-dir is required (or data_dir in the config file)")
    return NodeConfig(**values)


def _override(base: Any, overrides: dict[str, Any], table: str) -> Any:
    if not isinstance(overrides, dict):
        raise ConfigError(f"[{table}] must be a table")
    names = {f.name for f in dataclasses.fields(base)}
    for key, value in overrides.items():
        if key not in names:
            raise ConfigError(f"unknown key {key!r} in [{table}]")
        if type(value) is not type(getattr(base, key)):
            raise ConfigError(f"[{table}] {key} has the wrong type: {value!r}")
    try:
        return dataclasses.replace(base, **overrides)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[{table}]: {error}") from None
