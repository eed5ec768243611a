"""The node's credentials and access checks (laminar.server.node_security), built
from files in a temporary directory: no process, no gRPC server."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.errors import ConfigError
from laminar.security import certs
from laminar.security.assertion import METADATA_KEY, REUSE_MS
from laminar.security.config import AuthConfig
from laminar.security.tls import TlsFiles, TlsReloader
from laminar.server.metadata import MetadataState
from laminar.server.node_security import NodeCredentials, build_auth

NOW_MS = 1_800_000_000_000


def reloader(tmp_path: Path, node_id: str) -> TlsReloader:
    ca = certs.make_ca()
    (tmp_path / "ca.crt").write_bytes(ca.cert)
    certs.make_node_cert(ca, node_id).write(tmp_path / "node.crt", tmp_path / "node.key")
    files = TlsFiles(
        str(tmp_path / "ca.crt"), str(tmp_path / "node.crt"), str(tmp_path / "node.key")
    )
    return TlsReloader(files, check_interval_s=0)


def test_without_tls_there_is_nothing_to_assert_verify_or_expire() -> None:
    credentials = NodeCredentials(None, verify_assertions=True)
    assert credentials.assertion_verifier() is None
    assert credentials.call_metadata(NOW_MS) is None
    assert credentials.expiry_s() is None


def test_the_nodes_own_calls_assert_its_certificate_reused_for_a_while(tmp_path: Path) -> None:
    tls = reloader(tmp_path, "n1")
    credentials = NodeCredentials(tls, verify_assertions=True)
    first = credentials.call_metadata(NOW_MS)
    assert first is not None and first[0][0] == METADATA_KEY
    assert credentials.call_metadata(NOW_MS + REUSE_MS - 1) == first
    assert credentials.call_metadata(NOW_MS + REUSE_MS) != first  # made anew
    verifier = credentials.assertion_verifier()
    assert verifier is not None and credentials.assertion_verifier() is verifier  # cached
    verified = verifier.verify(first[0][1], NOW_MS + 1)
    assert verified is not None
    expiry_s = credentials.expiry_s()
    assert expiry_s is not None and expiry_s == certs.not_after(tls.current().cert).timestamp()


def test_assertions_are_not_verified_unless_client_auth_requests_them(tmp_path: Path) -> None:
    credentials = NodeCredentials(reloader(tmp_path, "n1"), verify_assertions=False)
    assert credentials.assertion_verifier() is None


def test_default_auth_checks_nothing_and_an_unwritable_audit_log_is_refused(
    tmp_path: Path,
) -> None:
    auth = build_auth(AuthConfig(), "n1", MetadataState(), lambda: None)
    assert auth.interceptor is None and auth.audit is None
    assert not auth.authorizer.enabled
    audited = build_auth(
        AuthConfig(audit_log_file=str(tmp_path / "audit.log")), "n1", MetadataState(), lambda: None
    )
    assert audited.interceptor is not None and audited.audit is not None
    audited.audit.close(1.0)
    a_directory = str(tmp_path)
    with pytest.raises(ConfigError, match="cannot open the audit log"):
        build_auth(AuthConfig(audit_log_file=a_directory), "n1", MetadataState(), lambda: None)
