"""The generated TLS material: a CA whose node certificates name their node id and
verify with Python's ssl module, as the peer transport uses them."""

from __future__ import annotations

import datetime
import ssl

from laminar.security import certs


def test_node_certificate_names_its_node_and_verifies_against_the_ca(tmp_path) -> None:
    ca = certs.make_ca()
    node = certs.make_node_cert(ca, "node1", ["127.0.0.1", "node1.example"])
    assert certs.node_ids_of(node.cert) == ["node1"]
    node.write(tmp_path / "node.crt", tmp_path / "node.key")
    assert (tmp_path / "node.key").stat().st_mode & 0o777 == 0o600
    (tmp_path / "ca.crt").write_bytes(ca.cert)
    # The files load as a server context and verify as a client would.
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "node.crt", tmp_path / "node.key")
    client = ssl.create_default_context(cafile=tmp_path / "ca.crt")
    assert client.verify_mode == ssl.CERT_REQUIRED


def test_client_certificate_names_no_node_and_expiry_is_as_asked() -> None:
    ca = certs.make_ca()
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    client = certs.make_client_cert(ca, "alice", valid_days=1, now=past)
    assert certs.node_ids_of(client.cert) == []
    assert certs.not_after(client.cert) < datetime.datetime.now(datetime.UTC)
