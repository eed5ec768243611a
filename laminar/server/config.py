"""Configuration of a broker node: command-line options, an optional TOML file, presets.

Precedence: command-line option > TOML file > preset default. The TOML file holds
the same keys as the long options (``data_dir``, ``gossip``, ``grpc``, ``peer``,
``advertise_gossip``, ``advertise_grpc``, ``advertise_peer``, ``seeds``, ``bootstrap``,
``weight``, ``zone``, ``preset``, ``cluster_key``, ``fsync``, ``node_id``,
``log_format``), the
node's own fields below (``replica_move_grace_ms`` ...), and optional tables for
the parts of a node, whose keys are the fields of their config classes:
``[replica]`` (:class:`~laminar.replica.config.ReplicaConfig`),
``[membership]`` (:class:`~laminar.membership.config.MembershipConfig`), ``[host]``
(:class:`~laminar.server.host.HostConfig`), ``[service]`` (:class:`ServiceConfig`),
``[transport]`` (:class:`~laminar.server.transport.TransportConfig`), ``[log]``
(:class:`~laminar.segment.config.LogConfig`; retention comes from each topic),
``[gossip_encryption]`` (:class:`~laminar.membership.crypto.EncryptionConfig`),
``[tls]`` and ``[auth]`` (:mod:`laminar.security.config`), ``[metrics]``
(:class:`~laminar.server.observability.config.MetricsConfig`) and ``[tracing]``
(:class:`~laminar.server.tracing.TracingConfig`).
``laminar node config --defaults`` (:mod:`laminar.server.config_file`) prints every
key with its default and documentation; ``--check FILE`` validates a file. A bad
value is one :class:`~laminar.errors.ConfigError` line naming where it is (``[host]
recovery_bytes_per_s``), the value, and the rule it breaks.

Two presets: ``lan`` (a data-centre network: the libraries' LAN defaults, and
replicas of a dead node move only after five minutes; the default of ``laminar node
start`` and :func:`build_config`) and ``local`` (nodes on one machine: fast failure
detection and failover, short graces; for tests, demos and
``scripts/local_cluster.sh``, which pass ``--preset local``). The dataclass defaults
and :meth:`NodeConfig.local` are the ``local`` preset (what in-process tests build).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from laminar.address import parse_address, parse_address_list, parse_advertisable
from laminar.errors import ConfigError
from laminar.membership import config as membership_presets
from laminar.membership.config import MembershipConfig
from laminar.membership.crypto import EncryptionConfig
from laminar.replica.config import ReplicaConfig
from laminar.security.config import AuthConfig, TlsConfig
from laminar.segment.config import LogConfig
from laminar.server.host import HostConfig
from laminar.server.logs import LOG_FORMATS
from laminar.server.metadata import PARTITIONS_MAX, REPLICATION_FACTOR_MAX
from laminar.server.observability.config import MetricsConfig
from laminar.server.tracing import TracingConfig
from laminar.server.transport import PROTOCOL_VERSION, TransportConfig

PRESETS = ("local", "lan")
DEFAULT_PRESET = "lan"
"""The preset of ``laminar node start`` without ``--preset`` (production timings)."""


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """Limits and defaults of the public gRPC API (``laminar.v1.Laminar``)."""

    produce_timeout_ms: int = 10_000
    """Default time a produce waits for its acknowledgement (``timeout_ms`` 0)."""
    produce_timeout_max_ms: int = 100_000
    """The longest ``timeout_ms`` a produce may ask for; longer values are capped."""
    fetch_bytes_max: int = 16 * 1024 * 1024
    """The largest fetch response (and the default ``max_bytes``)."""
    fetch_wait_ms_max: int = 30_000
    """The longest a fetch may long-poll; a longer ``max_wait_ms`` is capped."""
    request_bytes_max: int = 64 * 1024 * 1024
    """The largest gRPC message accepted or sent."""
    batches_per_produce_max: int = 10_000
    """The most batches one produce request may carry."""
    admin_timeout_ms: int = 15_000
    """How long a topic creation or deletion waits for its commit and application."""
    calls_max: int = 10_000
    """gRPC calls handled at once; more are refused with ``UNAVAILABLE`` (counted)."""
    channels_max: int = 64
    """gRPC channels this node keeps open to other nodes (metadata catch-up); the
    least recently used is closed beyond it."""
    log_interval_ms: int = 10_000
    """At most one log line per kind (malformed request, internal error) this often;
    the lines skipped are counted in the next one."""
    default_partitions: int = 1
    """Partitions of a topic created without a partition count (Kafka's
    ``num.partitions``, 1 there too). The node leading ``__cluster/0`` applies its
    own value: set it alike on every node."""
    default_replication_factor: int = 3
    """Replication factor of a topic created without one (Kafka's
    ``default.replication.factor``), capped at the live nodes with weight > 0 when
    the topic is created (a one-node cluster gets 1). Set it alike on every node."""

    def __post_init__(self) -> None:
        for name in (
            "produce_timeout_ms",
            "batches_per_produce_max",
            "admin_timeout_ms",
            "calls_max",
            "channels_max",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.produce_timeout_max_ms < self.produce_timeout_ms:
            raise ConfigError("produce_timeout_max_ms must be >= produce_timeout_ms")
        if self.fetch_wait_ms_max < 0 or self.log_interval_ms < 0:
            raise ConfigError("fetch_wait_ms_max and log_interval_ms must be >= 0")
        if not 0 < self.fetch_bytes_max <= self.request_bytes_max:
            raise ConfigError("need 0 < fetch_bytes_max <= request_bytes_max")
        if not 1 <= self.default_partitions <= PARTITIONS_MAX:
            raise ConfigError(f"default_partitions must be in [1, {PARTITIONS_MAX}]")
        if not 1 <= self.default_replication_factor <= REPLICATION_FACTOR_MAX:
            raise ConfigError(
                f"default_replication_factor must be in [1, {REPLICATION_FACTOR_MAX}]"
            )


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything a node needs; build one with :meth:`local`, :meth:`lan` or
    :func:`build_config` (which also reads options and TOML)."""

    data_dir: str
    """Directory of the node's id, cluster id and every replica's log; only this
    node may use it. Back it up (or restore it) only while the node is stopped."""
    gossip: str = "127.0.0.1:7000"
    """``host:port`` to listen on for SWIM gossip (UDP, with TCP push-pull on the
    same port). Outgoing gossip leaves from this host too (the system picks the
    source when it is a wildcard, ``0.0.0.0`` or ``[::]``)."""
    grpc: str = "127.0.0.1:7100"
    """``host:port`` to listen on for the gRPC API (clients and admin tools)."""
    peer: str = "127.0.0.1:7200"
    """``host:port`` (TCP) to listen on for other nodes' replication traffic.
    Outgoing replication connections leave from this host too (or the system's
    choice for a wildcard)."""
    advertise_gossip: str | None = None
    """The gossip address other nodes use to reach this one (behind NAT, in a
    container, or when listening on a wildcard); None: the listen address, which
    must then not be a wildcard. A host name is resolved by the others when used."""
    advertise_grpc: str | None = None
    """The gRPC address clients and other nodes are told (cluster metadata,
    ``NOT_LEADER`` hints, ``cluster status``); None: the listen address."""
    advertise_peer: str | None = None
    """The replication address other nodes connect to; None: the listen address."""
    seeds: tuple[str, ...] = ()
    """Gossip addresses (IP or host name) of nodes to join through."""
    bootstrap: bool = False
    """Start a new cluster (only the very first node of a cluster)."""
    weight: float | None = None
    """Placement weight (0 drains); None keeps the saved value (default 1)."""
    zone: str | None = None
    """Failure-domain label; None keeps the saved value (default empty)."""
    node_id: str | None = None
    """Only used at first start; later the id saved in the data dir wins."""
    cluster_key: str = "laminar"
    """Shared secret authenticating gossip packets (keyed BLAKE2b); set it to keep
    clusters apart. Not a security boundary on its own: gossip encryption (a keyring,
    ``[gossip_encryption]``) is, and a node whose keyring holds a key refuses to start
    with this default."""
    fsync: bool = True
    """Fsync appended batches before acknowledging them. Turning it off trades the
    durability of acknowledged writes on power loss for speed."""
    preset: str = "local"
    """Which preset the defaults came from (``local`` or ``lan``)."""
    log_format: str = "text"
    """How the node writes its log to stderr (``--log-format``): ``text``, one line
    ``time LEVEL logger: message`` each, or ``json``, one JSON object per line with
    ``time``, ``level``, ``logger``, ``message``, ``node_id`` and, where they apply,
    ``topic``, ``partition``, ``term`` and ``peer`` (docs/operations.md, "Log format")."""
    replica_move_grace_ms: int = 10_000
    """How long a member that membership declared dead keeps its replicas (a slow
    restart or a short partition should not re-copy its partitions); after it, its
    replicas are placed elsewhere. Leadership does not wait for it: the groups a
    dead node led elect a new leader within about an election timeout. A member that
    left gracefully is replaced at once. ``local`` 10 s, ``lan`` 5 min (Redpanda's
    node-availability timeout plays the same part)."""
    maintenance_grace_ms: int = 14_400_000
    """How long a dead member in maintenance (``laminar cluster maintenance enter``)
    keeps its replicas, when longer than ``replica_move_grace_ms``: an OS upgrade or
    a disk swap should not re-copy every partition the node held; it catches up from
    where it was when it returns. 4 hours in both presets. Each node applies its
    own value: set the same on every node."""
    join_wait_ms: int = 60_000
    """A new node gives up joining when its seeds show no cluster for this long."""
    restart_wait_ms: int = 10_000
    """A restarted node (it has a cluster id) waits this long for its seeds to
    confirm the id, then starts anyway (the peers may be down too)."""
    handover_timeout_ms: int = 3_000
    """On shutdown, how long to wait for leaderships to move to other replicas."""
    shutdown_timeout_ms: int = 5_000
    """Shutdown closes the gRPC server, the peer links and the logs within about
    this long whatever the peers do (on top of the handover)."""
    metadata_wait_ms: int = 1_000
    """A node without a replica of ``__cluster/0`` long-polls it this long per call."""
    metadata_call_timeout_ms: int = 5_000
    """The deadline of one metadata catch-up call to another node."""
    protocol_version: int = PROTOCOL_VERSION
    """The peer protocol version the node speaks and gossips. A test hook (the
    environment variable ``LAMINAR_TEST_PROTOCOL_VERSION`` of ``laminar node
    start``), not a setting: a node only speaks its own version's protocol."""
    replica: ReplicaConfig = field(default_factory=ReplicaConfig.local)
    membership: MembershipConfig = field(default_factory=membership_presets.local)
    host: HostConfig = field(default_factory=HostConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    transport: TransportConfig = field(default_factory=TransportConfig.local)
    log: LogConfig = field(default_factory=LogConfig)
    """Segment settings of every replica's log; retention comes from each topic."""
    gossip_encryption: EncryptionConfig = field(default_factory=EncryptionConfig)
    """Gossip encryption: the keyring file and the replay rule (docs/operations.md,
    "Gossip encryption")."""
    tls: TlsConfig = field(default_factory=TlsConfig)
    """TLS of the client API and peer ports (off unless ``cert_file`` is given)."""
    auth: AuthConfig = field(default_factory=AuthConfig)
    """Principals, ACLs and the audit log (authorization off by default)."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """Prometheus metrics, ``/healthz`` and ``/ready`` over HTTP (off by default)."""
    tracing: TracingConfig = field(default_factory=TracingConfig)
    """OpenTelemetry traces (off unless ``enabled``; the ``laminar[otel]`` extra)."""

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ConfigError("--data-dir is required")
        for name in ("gossip", "grpc", "peer"):
            _check_addresses(name, getattr(self, name), getattr(self, f"advertise_{name}"))
        for addresses, kind in (
            ((self.gossip, self.grpc, self.peer), "listen"),
            ((self.advertised_gossip, self.advertised_grpc, self.advertised_peer), "advertised"),
        ):
            if len({str(parse_address(a)) for a in addresses}) < 3:
                raise ConfigError(
                    f"the {kind} gossip ({addresses[0]}), grpc ({addresses[1]}) and peer "
                    f"({addresses[2]}) addresses must differ"
                )
        if self.metrics.enabled and str(parse_address(self.metrics.address)) in {
            str(parse_address(address)) for address in (self.gossip, self.grpc, self.peer)
        }:
            raise ConfigError(
                f"the metrics address ({self.metrics.address}) must differ from the gossip, "
                "grpc and peer addresses"
            )
        for seed in self.seeds:
            parse_advertisable(seed, what="seed")
        if self.weight is not None and not (self.weight >= 0 and self.weight < float("inf")):
            raise ConfigError(f"weight must be a finite number >= 0, got {self.weight}")
        if self.preset not in PRESETS:
            raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(
                f"log_format must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}"
            )
        for name in (
            "replica_move_grace_ms",
            "maintenance_grace_ms",
            "join_wait_ms",
            "restart_wait_ms",
            "handover_timeout_ms",
            "shutdown_timeout_ms",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if not 1 <= self.protocol_version <= 255:
            raise ConfigError(f"protocol_version must be in [1, 255], got {self.protocol_version}")
        if self.metadata_wait_ms < 0 or self.metadata_call_timeout_ms <= self.metadata_wait_ms:
            raise ConfigError("need 0 <= metadata_wait_ms < metadata_call_timeout_ms")
        if self.auth.authorization and not (
            self.tls.enabled and self.tls.client_auth in ("request", "require")
        ):
            # Nodes call each other's API (metadata catch-up) and are recognised by
            # their certificates; without them authorization would refuse the cluster.
            raise ConfigError(
                "[auth] authorization = true needs the nodes to authenticate each other: "
                'turn [tls] on (cert_file, key_file, ca_file) with client_auth = "request" '
                'or "require"'
            )

    @property
    def advertised_gossip(self) -> str:
        """The gossip address others are told: ``advertise_gossip`` or ``gossip``."""
        return self.advertise_gossip or self.gossip

    @property
    def advertised_grpc(self) -> str:
        """The gRPC address clients are told: ``advertise_grpc`` or ``grpc``."""
        return self.advertise_grpc or self.grpc

    @property
    def advertised_peer(self) -> str:
        """The replication address others are told: ``advertise_peer`` or ``peer``."""
        return self.advertise_peer or self.peer

    @classmethod
    def local(cls, data_dir: str, **changes: Any) -> NodeConfig:
        """Nodes on one machine: fast failover, short graces (tests, local clusters)."""
        return cls(data_dir=data_dir, **changes)

    @classmethod
    def lan(cls, data_dir: str, **changes: Any) -> NodeConfig:
        """Nodes on a data-centre network (the default of ``laminar node start``)."""
        values: dict[str, Any] = {
            "preset": "lan",
            "replica_move_grace_ms": 300_000,
            "replica": ReplicaConfig.lan(),
            "membership": membership_presets.lan(),
            "transport": TransportConfig(),
        }
        values.update(changes)
        return cls(data_dir=data_dir, **values)


def _check_addresses(name: str, listen: str, advertise: str | None) -> None:
    """A listen address, and the advertised one if given; a wildcard listen address
    needs an advertised one (others cannot reach a wildcard)."""
    if advertise is not None:
        parse_address(listen, what=f"{name} address")
        parse_advertisable(advertise, what=f"advertise_{name} address")
    elif parse_address(listen, what=f"{name} address").is_wildcard:
        raise ConfigError(
            f"{name} address {listen!r} is a wildcard; give the address other nodes "
            f"and clients should use with --advertise-{name} (advertise_{name} in the "
            "config file), or listen on that address"
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
    "advertise_gossip": str,
    "advertise_grpc": str,
    "advertise_peer": str,
    "seeds": list,
    "bootstrap": bool,
    "weight": (int, float),
    "zone": str,
    "node_id": str,
    "cluster_key": str,
    "fsync": bool,
    "preset": str,
    "log_format": str,
    "replica_move_grace_ms": int,
    "maintenance_grace_ms": int,
    "join_wait_ms": int,
    "restart_wait_ms": int,
    "handover_timeout_ms": int,
    "shutdown_timeout_ms": int,
    "metadata_wait_ms": int,
    "metadata_call_timeout_ms": int,
}
TABLES = (
    "replica",
    "membership",
    "host",
    "service",
    "transport",
    "log",
    "gossip_encryption",
    "tls",
    "auth",
    "metrics",
    "tracing",
)
"""The TOML tables, each the fields of the :class:`NodeConfig` field of its name."""
_TABLE_OPTIONS = {
    "disk_free_bytes_min": ("host", "disk_free_bytes_min"),
    "disk_free_percent_min": ("host", "disk_free_percent_min"),
    "metrics": ("metrics", "address"),
}
"""Command-line options that set a field of a part's table (over the file's value):
option -> (table, field)."""
NOT_IN_FILE: dict[str, dict[str, str]] = {
    "": {
        "protocol_version": (
            "a test hook (LAMINAR_TEST_PROTOCOL_VERSION): a node speaks its release's protocol"
        ),
    },
    "log": {
        "fsync_policy": "the node fsyncs each write itself: see the top-level fsync key",
        "fsync_interval_ms": "the node fsyncs each write itself: see the top-level fsync key",
        "retention_bytes": "retention is set per topic (laminar topic create --retention-bytes)",
        "retention_ms": "retention is set per topic (laminar topic create --retention-ms)",
    },
}
"""Fields of a part's config that a node sets itself: refused in the file, with why."""
_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def build_config(options: dict[str, Any], file_values: dict[str, Any] | None = None) -> NodeConfig:
    """Merge command-line ``options`` (None = not given) over TOML ``file_values``
    over the preset's defaults (:data:`DEFAULT_PRESET` unless ``preset`` is given).

    A bad value raises :class:`ConfigError` naming where it is (``[host]
    recovery_bytes_per_s``), the value, and what is allowed, on one line."""
    values: dict[str, Any] = {}
    file_values = dict(file_values or {})
    tables = {name: file_values.pop(name, {}) for name in TABLES}
    options = dict(options)
    for key, (table, name) in _TABLE_OPTIONS.items():
        value = options.pop(key, None)
        if value is not None:
            if not isinstance(tables[table], dict):
                raise ConfigError(f"[{table}] must be a table, got {toml_value(tables[table])}")
            tables[table] = {**tables[table], name: value}
    for key, value in file_values.items():
        expected = _TOP_LEVEL.get(key)
        if expected is None:
            raise ConfigError(
                f"unknown config key {key!r}{_suggestion(key, [*_TOP_LEVEL, *TABLES])}"
            )
        if not isinstance(value, expected) or isinstance(value, bool) is not (expected is bool):
            raise ConfigError(
                f"config key {key} = {toml_value(value)} has the wrong type: expected "
                f"{_describe_type(expected)}"
            )
        values[key] = value
    for key, value in options.items():
        if value is not None:
            values[key] = value
    if "seeds" in values:  # "" or [] means none
        seeds = values["seeds"]
        empty = not (seeds.strip() if isinstance(seeds, str) else seeds)
        values["seeds"] = () if empty else tuple(parse_address_list(seeds, what="seed"))
    if "weight" in values and values["weight"] is not None:
        values["weight"] = float(values["weight"])
    preset = values.pop("preset", DEFAULT_PRESET)
    if preset not in PRESETS:
        raise ConfigError(f"preset = {toml_value(preset)}: must be one of {', '.join(PRESETS)}")
    if "data_dir" not in values:
        raise ConfigError("--data-dir is required (or data_dir in the config file)")
    data_dir = values.pop("data_dir")
    base = NodeConfig.local(data_dir) if preset == "local" else NodeConfig.lan(data_dir)
    for name, overrides in tables.items():
        values[name] = _override(getattr(base, name), overrides, name)
    try:
        return dataclasses.replace(base, **values)
    except (TypeError, ValueError) as error:
        raise ConfigError(_located(None, base, values, error)) from None


def toml_value(value: object) -> str:
    """``value`` written as TOML (integers with ``_`` every three digits)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:_}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return repr(value)


def _override(base: Any, overrides: object, table: str) -> Any:
    if not isinstance(overrides, dict):
        raise ConfigError(f"[{table}] must be a table, got {toml_value(overrides)}")
    names = [f.name for f in dataclasses.fields(base)]
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in names:
            raise ConfigError(f"unknown key {key!r} in [{table}]{_suggestion(key, names)}")
        reason = NOT_IN_FILE.get(table, {}).get(key)
        if reason is not None:
            raise ConfigError(f"[{table}] {key} cannot be set in the node's file: {reason}")
        current = getattr(base, key)
        if dataclasses.is_dataclass(current):
            changes[key] = _override(current, value, f"{table}.{key}")
        else:
            changes[key] = _coerce(table, key, value, current)
    try:
        return dataclasses.replace(base, **changes)
    except (TypeError, ValueError) as error:  # ConfigError and BatchLimitError are both
        raise ConfigError(_located(table, base, changes, error)) from None


def _coerce(table: str, key: str, value: object, current: object) -> object:
    """``value`` as the type of the field's ``current`` value, or a clear error."""
    expected = type(current)
    if expected is float and type(value) is int:
        return float(value)  # TOML writes 5 for 5.0
    if expected is tuple:  # a list of strings
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(
                f"[{table}] {key} = {toml_value(value)} has the wrong type: expected "
                "a list of strings"
            )
        return tuple(value)
    if type(value) is not expected:
        raise ConfigError(
            f"[{table}] {key} = {toml_value(value)} has the wrong type: expected "
            f"{_describe_type(expected)}"
        )
    return value


def _located(table: str | None, base: Any, changes: dict[str, Any], error: Exception) -> str:
    """The error of a config class's ``__post_init__`` prefixed with the settings
    that caused it: ``[host] recovery_bytes_per_s = -1: ... (other_field is 5)``."""
    message = str(error)
    mentioned = [f.name for f in dataclasses.fields(base) if _mentions(message, f.name)]
    scalar = [k for k, v in changes.items() if not dataclasses.is_dataclass(v)]
    blamed = [k for k in scalar if k in mentioned] or scalar
    settings = ", ".join(f"{key} = {toml_value(changes[key])}" for key in blamed)
    where = f"[{table}] " if table is not None else ""
    others = [
        f"{name} is {toml_value(getattr(base, name))}"
        for name in mentioned
        if name not in changes and not dataclasses.is_dataclass(getattr(base, name))
    ]
    context = f" ({', '.join(others)})" if others else ""
    return f"{where}{settings}: {message}{context}" if settings else f"{where}{message}"


def _mentions(message: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message) is not None


def _suggestion(key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe_type(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return "a number"
    if expected is list or expected is tuple:
        return "an array"
    return _EXPECTED.get(expected, expected.__name__)
