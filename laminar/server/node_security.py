"""The node's credentials and its client API's access checks, built from its config.

- :func:`tls_reloader`: the node's ``[tls]`` files (refused when the certificate
  does not name the node);
- :class:`NodeCredentials`: what the node derives from them, cached per generation
  of the files: the verifier of the certificate assertions callers send
  (``client_auth = "request"``), the assertion of its own calls to other nodes,
  and when its certificate expires;
- :func:`build_auth`: the client API's authentication, authorization and audit
  (``[auth]``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from laminar.errors import ConfigError
from laminar.security.acl import Authorizer
from laminar.security.assertion import METADATA_KEY as ASSERTION_METADATA_KEY
from laminar.security.assertion import REUSE_MS as ASSERTION_REUSE_MS
from laminar.security.assertion import AssertionVerifier, make_assertion
from laminar.security.audit import AuditLog
from laminar.security.config import AuthConfig
from laminar.security.interceptor import Authenticator, AuthInterceptor
from laminar.security.principals import CertificatePrincipals
from laminar.security.tls import TlsFiles, TlsReloader
from laminar.security.tokens import TokenStore
from laminar.server.config import NodeConfig
from laminar.server.metadata import MetadataState


def tls_reloader(config: NodeConfig, node_id: str) -> TlsReloader | None:
    """The node's ``[tls]`` files, loaded (None with TLS off); a certificate that
    does not name this node (``laminar:node/<id>``) is refused: peers would refuse
    every connection from it."""
    tls = config.tls
    if not tls.enabled:
        return None
    reloader = TlsReloader(
        TlsFiles(tls.ca_file, tls.cert_file, tls.key_file),
        check_interval_s=tls.reload_check_interval_ms / 1000,
        what=f"node {node_id}",
    )
    from laminar.security.certs import node_ids_of  # cryptography: the server extra

    named = node_ids_of(reloader.current().cert)
    if node_id not in named:
        raise ConfigError(
            f"{tls.cert_file} names node(s) {named or 'none'}, not this node ({node_id}): a "
            "node certificate needs the URI SAN laminar:node/<id> (docs/operations.md, TLS)"
        )
    return reloader


class NodeCredentials:
    """What the node derives from its TLS files (None: TLS off), each cached until
    the files change (a new generation)."""

    def __init__(self, tls: TlsReloader | None, *, verify_assertions: bool) -> None:
        """``verify_assertions``: ``client_auth = "request"`` (callers may assert
        their certificate in call metadata)."""
        self.tls = tls
        self._verify_assertions = verify_assertions
        self._verifier: tuple[int, AssertionVerifier] | None = None
        self._assertion: tuple[int, int, tuple[str, str]] | None = None
        self._expiry: tuple[int, float] | None = None

    def assertion_verifier(self) -> AssertionVerifier | None:
        """With ``client_auth = "request"``: the verifier of the certificate
        assertions callers send (laminar.security.assertion), following the CA file."""
        tls = self.tls
        if tls is None or not self._verify_assertions:
            return None
        state = tls.current()
        cached = self._verifier
        if cached is None or cached[0] != state.generation:
            cached = (state.generation, AssertionVerifier.from_pem(state.ca))
            self._verifier = cached
        return cached[1]

    def call_metadata(self, now_ms: int) -> tuple[tuple[str, str], ...] | None:
        """Metadata of this node's own calls to other nodes: its certificate asserted
        (a node with ``client_auth = "request"`` learns it is ``Node:<id>`` so),
        made anew after ``ASSERTION_REUSE_MS`` (``now_ms``: Unix milliseconds)."""
        tls = self.tls
        if tls is None:
            return None
        state = tls.current()
        made = self._assertion
        if made is None or made[0] != state.generation or now_ms - made[1] >= ASSERTION_REUSE_MS:
            pair = (ASSERTION_METADATA_KEY, make_assertion(state.cert, state.key, now_ms))
            made = (state.generation, now_ms, pair)
            self._assertion = made
        return (made[2],)

    def expiry_s(self) -> float | None:
        """When the current certificate expires (Unix seconds)."""
        if self.tls is None:
            return None
        state = self.tls.current()
        cached = self._expiry
        if cached is None or cached[0] != state.generation:
            from laminar.security.certs import not_after  # cryptography: the server extra

            cached = (state.generation, not_after(state.cert).timestamp())
            self._expiry = cached
        return cached[1]


@dataclass(frozen=True, slots=True)
class Auth:
    """The client API's access checks (:func:`build_auth`)."""

    authorizer: Authorizer
    audit: AuditLog | None
    interceptor: AuthInterceptor | None
    """None with ``[auth]`` all default (no check runs, a token is ignored)."""


def build_auth(
    auth: AuthConfig,
    node_id: str,
    metadata: MetadataState,
    assertion_verifier: Callable[[], AssertionVerifier | None],
) -> Auth:
    """The client API's authentication, authorization (the ACLs of ``metadata``)
    and audit log, from ``[auth]``."""
    authorizer = Authorizer(enabled=auth.authorization, super_users=auth.super_users)
    if not (auth.authorization or auth.token_file or auth.audit_log_file):
        return Auth(authorizer, None, None)
    tokens = TokenStore(auth.token_file) if auth.token_file else None
    audit = None
    if auth.audit_log_file:
        try:
            audit = AuditLog(
                auth.audit_log_file, bytes_max=auth.audit_log_bytes_max, node_id=node_id
            )
        except OSError as error:
            raise ConfigError(
                f"cannot open the audit log {auth.audit_log_file}: {error.strerror}"
            ) from None
    interceptor = AuthInterceptor(
        Authenticator(tokens, CertificatePrincipals(auth.principal_rules), assertion_verifier),
        authorizer,
        lambda: (metadata.acls_version, metadata.acls.keys()),
        audit,
    )
    return Auth(authorizer, audit, interceptor)
