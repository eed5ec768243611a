"""Security settings of a node: the ``[tls]`` and ``[auth]`` tables of its TOML file.

Both are off by default (``--preset local`` and the demo's first steps run in the
clear); ``scripts/local_cluster.sh start --secure`` turns them on with a throwaway
CA and token. docs/operations.md ("Security") shows a production set-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar.errors import ConfigError

CLIENT_AUTH_MODES = ("none", "request", "require")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS of the node's ports: the client API (gRPC) and peer replication.

    Off while ``cert_file`` is empty. On, the gRPC port serves TLS only, the peer
    port requires mutual TLS (each node's certificate names its node id), and the
    node's own calls to other nodes present its certificate. The files are read
    again when they change, so a rotated certificate is used by the next connection
    with no restart."""

    cert_file: str = ""
    """PEM certificate chain of this node (server and client use). Empty: TLS off."""
    key_file: str = ""
    """PEM private key of ``cert_file``."""
    ca_file: str = ""
    """PEM bundle of the CAs whose certificates this node trusts (peers and, with
    ``client_auth``, clients). Required with TLS on."""
    client_auth: str = "none"
    """Client certificates on the gRPC port: ``none`` (not asked for), ``request``
    (verified when given; clients without one authenticate by token) or ``require``
    (a client without a valid certificate is refused at the handshake). gRPC Python
    cannot ask for a certificate at the handshake without requiring it, so under
    ``request`` a client proves its certificate inside each call (a signed
    assertion, laminar.security.assertion); see docs/operations.md, "TLS"."""
    reload_check_interval_ms: int = 1000
    """How often, at most, the three files' signatures (mtime, size, inode) are
    compared, on the next handshake or call; a changed set that loads replaces the
    old one for new connections (one that does not load is logged and ignored)."""

    def __post_init__(self) -> None:
        if not 0 <= self.reload_check_interval_ms <= 3_600_000:
            raise ConfigError("reload_check_interval_ms must be in 0..3600000")
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("cert_file and key_file must be given together")
        if self.client_auth not in CLIENT_AUTH_MODES:
            raise ConfigError(
                f"client_auth must be one of {', '.join(CLIENT_AUTH_MODES)}, "
                f"got {self.client_auth!r}"
            )
        if self.enabled and not self.ca_file:
            raise ConfigError("ca_file is required with TLS on (it verifies the peers)")
        if not self.enabled and (self.ca_file or self.client_auth != "none"):
            raise ConfigError("ca_file and client_auth need cert_file and key_file (TLS on)")

    @property
    def enabled(self) -> bool:
        """Whether the node's ports serve TLS."""
        return bool(self.cert_file)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """Who is calling the client API (principals) and what they may do (ACLs)."""

    token_file: str = ""
    """File of bearer tokens (a salted, slow hash of each, with its principal); read
    again when it changes. Empty: no token is accepted."""
    principal_rules: tuple[str, ...] = ("DEFAULT",)
    """Ordered rules mapping a client certificate to a principal ``User:<name>``, as
    Kafka's ``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[L|U]`` (the
    pattern matching the subject DN ``CN=alice,O=corp`` or a SAN ``URI:...``,
    ``DNS:...``, ``EMAIL:...``; ``$1`` in the replacement is its first group) or
    ``DEFAULT`` (the subject DN as it is); the first that matches applies
    (:mod:`laminar.security.principals`). A node certificate is always
    ``Node:<id>``."""
    authorization: bool = False
    """With ``true``, every RPC is checked against the ACLs (``laminar acl``): what no
    ACL allows is denied, except to ``super_users`` and nodes. Needs ``[tls]`` on
    with ``client_auth`` ``request`` or ``require`` (nodes are recognised by their
    certificates). With ``false`` every call is allowed (tokens are still checked
    when ``token_file`` is set)."""
    super_users: tuple[str, ...] = ()
    """Principals allowed everything (``User:admin``), whatever the ACLs say."""
    audit_log_file: str = ""
    """JSON-lines file of authentication failures, denials and admin operations
    (:mod:`laminar.security.audit`). Empty: no audit log."""
    audit_log_bytes_max: int = 100 * 1024 * 1024
    """The audit log's size bound (bytes): past it the file is renamed
    ``<file>.1`` (replacing the previous one) and a new one started."""

    def __post_init__(self) -> None:
        if self.audit_log_bytes_max < 4096:
            raise ConfigError("audit_log_bytes_max must be >= 4096")
        from laminar.security.acl import validate_principal  # imported here: cryptography
        from laminar.security.principals import parse_rules

        parse_rules(self.principal_rules)
        for principal in self.super_users:
            try:
                validate_principal(principal)
            except ValueError as error:
                raise ConfigError(f"super_users: {error}") from None
