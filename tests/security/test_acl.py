"""The authorizer's rules, the token file and the audit log, as units."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from laminar.errors import AuthenticationError, ConfigError, InvalidInputError
from laminar.security.acl import Acl, AclFilter, Authorizer
from laminar.security.audit import AuditLog
from laminar.security.config import AuthConfig, TlsConfig
from laminar.security.tokens import TokenStore, add_token
from laminar.server.config import NodeConfig


def authorizer(*acls: Acl, super_users: tuple[str, ...] = ()) -> Authorizer:
    result = Authorizer(enabled=True, super_users=super_users)
    result.update(1, acls)
    return result


def test_nothing_is_allowed_without_an_acl_once_authorization_is_on() -> None:
    assert not authorizer().check("User:bob", "read", "topic", "t").allowed
    assert Authorizer(enabled=False).check("User:bob", "read", "topic", "t").allowed


def test_literal_prefixed_and_wildcard_acls() -> None:
    checks = authorizer(
        Acl("User:bob", "write", "topic", "orders"),
        Acl("User:bob", "read", "topic", "logs.", "prefixed"),
        Acl("User:*", "read", "topic", "public"),
        Acl("User:carol", "read", "group", "*"),
    )
    assert checks.check("User:bob", "write", "topic", "orders").allowed
    assert not checks.check("User:bob", "write", "topic", "orders2").allowed
    assert checks.check("User:bob", "read", "topic", "logs.app").allowed
    assert not checks.check("User:bob", "read", "topic", "logs").allowed
    assert checks.check("User:anyone", "read", "topic", "public").allowed
    assert checks.check("User:carol", "read", "group", "g1").allowed
    assert not checks.check("User:carol", "read", "topic", "g1").allowed


def test_deny_over_allow_and_what_describe_implies() -> None:
    checks = authorizer(
        Acl("User:bob", "read", "topic", "orders", "prefixed"),
        Acl("User:bob", "read", "topic", "orders-secret", permission="deny"),
        Acl("User:*", "write", "topic", "audit", permission="deny"),
        Acl("User:bob", "write", "topic", "audit"),
    )
    assert checks.check("User:bob", "read", "topic", "orders-eu").allowed
    assert not checks.check("User:bob", "read", "topic", "orders-secret").allowed
    assert not checks.check("User:bob", "write", "topic", "audit").allowed  # User:* deny
    # read implies describe; a deny of read does not deny describe
    assert checks.check("User:bob", "describe", "topic", "orders-eu").allowed
    assert checks.check("User:bob", "describe", "topic", "orders-secret").allowed
    assert not checks.check("User:bob", "create", "topic", "orders-eu").allowed


def test_super_users_and_nodes_are_allowed_everything() -> None:
    checks = authorizer(
        Acl("User:admin", "alter", "cluster", "cluster", permission="deny"),
        super_users=("User:admin",),
    )
    assert checks.check("User:admin", "alter", "cluster", "cluster").allowed
    assert checks.check("Node:n1", "cluster_action", "cluster", "cluster").allowed


def test_a_changed_acl_set_replaces_remembered_answers() -> None:
    checks = authorizer(Acl("User:bob", "read", "topic", "t"))
    assert checks.check("User:bob", "read", "topic", "t").allowed
    checks.update(2, [])
    assert not checks.check("User:bob", "read", "topic", "t").allowed


@pytest.mark.parametrize(
    "acl",
    [
        Acl("bob", "read", "topic", "t"),
        Acl("User:bob", "fly", "topic", "t"),
        Acl("User:bob", "read", "table", "t"),
        Acl("User:bob", "read", "cluster", "other"),
        Acl("User:bob", "read", "topic", "*", "prefixed"),
        Acl("User:bob", "read", "topic", ""),
    ],
)
def test_bad_acls_are_refused(acl: Acl) -> None:
    with pytest.raises(InvalidInputError):
        acl.validate()


def test_a_filter_matches_the_fields_it_sets() -> None:
    acl = Acl("User:bob", "read", "topic", "t")
    assert AclFilter().matches(acl) and AclFilter(principal="User:bob").matches(acl)
    assert not AclFilter(operation="write").matches(acl)


def test_a_token_checks_once_and_the_file_is_reloaded_on_change(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    bob = add_token(path, "bob")
    assert path.stat().st_mode & 0o777 == 0o600
    assert bob not in path.read_text()  # only the hash is stored
    now = [0.0]
    store = TokenStore(str(path), clock=lambda: now[0])
    assert store.remembered(bob) is None
    assert store.check(bob) == "User:bob"
    assert store.remembered(bob) == "User:bob"  # no scrypt the second time
    with pytest.raises(AuthenticationError):
        store.check(bob[:-1] + ("A" if bob[-1] != "A" else "B"))
    with pytest.raises(AuthenticationError):
        store.check("not-a-token")
    # Revoked: the entry removed from the file, seen after the check interval.
    path.write_text("# empty\n")
    now[0] = 10.0
    assert store.remembered(bob) is None
    with pytest.raises(AuthenticationError):
        store.check(bob)


def test_a_broken_token_file_is_a_config_error_at_start(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text("[[tokens]]\nid = 1\n")
    with pytest.raises(ConfigError, match="entry 1"):
        TokenStore(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        TokenStore(str(tmp_path / "missing.toml"))


def test_the_audit_log_writes_json_lines_and_rotates(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(str(path), bytes_max=4096, node_id="n1")
    for index in range(100):
        audit.record("denied", principal="User:bob", method="Produce", index=index)
    audit.close()
    rotated = tmp_path / "audit.jsonl.1"
    assert rotated.exists() and path.stat().st_size <= 4096 and rotated.stat().st_size <= 4096
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[-1]["index"] == 99 and lines[-1]["node"] == "n1"
    assert lines[-1]["event"] == "denied" and lines[-1]["principal"] == "User:bob"
    first_kept = json.loads(rotated.read_text().splitlines()[0])["index"]
    assert first_kept > 0  # older lines went with the earlier rotations


def test_the_audit_log_never_blocks_and_counts_what_it_dropped(tmp_path: Path) -> None:
    audit = AuditLog(str(tmp_path / "a.jsonl"), bytes_max=1 << 20, queue_lines_max=1)
    started = time.monotonic()
    for _ in range(1000):
        audit.record("admin")
    assert time.monotonic() - started < 1.0
    audit.close()
    assert audit.dropped > 0


def test_authorization_needs_tls_with_client_certificates(tmp_path: Path) -> None:
    auth = AuthConfig(authorization=True)
    with pytest.raises(ConfigError, match="client_auth"):
        NodeConfig.local(str(tmp_path), auth=auth)
    tls = TlsConfig(cert_file="c", key_file="k", ca_file="ca", client_auth="none")
    with pytest.raises(ConfigError, match="client_auth"):
        NodeConfig.local(str(tmp_path), auth=auth, tls=tls)
    tls = TlsConfig(cert_file="c", key_file="k", ca_file="ca", client_auth="request")
    assert NodeConfig.local(str(tmp_path), auth=auth, tls=tls).auth.authorization


def test_auth_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        AuthConfig(principal_rules=("RULE:bad",))
    with pytest.raises(ConfigError):
        AuthConfig(super_users=("admin",))
