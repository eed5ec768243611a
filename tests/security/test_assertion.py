"""Certificate assertions (laminar.security.assertion): what `client_auth = request`
rests on, since grpc Python cannot ask for a client certificate without requiring it."""

from __future__ import annotations

import datetime

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from laminar.security import certs
from laminar.security.assertion import (
    WINDOW_MS,
    AssertionVerifier,
    CertAssertionError,
    make_assertion,
)

NOW_MS = 1_800_000_000_000


@pytest.fixture(scope="module")
def ca() -> certs.Pem:
    return certs.make_ca()


def test_a_node_certificate_asserted_and_verified(ca: certs.Pem) -> None:
    node = certs.make_node_cert(ca, "node7")
    verifier = AssertionVerifier.from_pem(ca.cert)
    text = make_assertion(node.cert, node.key, NOW_MS)
    verified = verifier.verify(text, NOW_MS + 1000)
    assert certs.node_ids_of(verified.certificate.public_bytes(Encoding.PEM)) == ["node7"]
    # Remembered: the same text verifies again (inside its window) ...
    assert verifier.verify(text, NOW_MS + 2000) is verified
    # ... and not once the window passed, remembered or not.
    with pytest.raises(CertAssertionError, match="time window"):
        verifier.verify(text, NOW_MS + WINDOW_MS + 1)
    with pytest.raises(CertAssertionError, match="time window"):
        AssertionVerifier.from_pem(ca.cert).verify(text, NOW_MS - WINDOW_MS - 1)


def test_refused_another_ca_a_wrong_key_an_expired_certificate_garbage(ca: certs.Pem) -> None:
    verifier = AssertionVerifier.from_pem(ca.cert)
    other_ca = certs.make_ca("another CA")
    stranger = certs.make_node_cert(other_ca, "node1")
    with pytest.raises(CertAssertionError, match="trusted CA"):
        verifier.verify(make_assertion(stranger.cert, stranger.key, NOW_MS), NOW_MS)
    # A chain of ours signed by a key that is not the certificate's.
    mine = certs.make_node_cert(ca, "node1")
    with pytest.raises(CertAssertionError, match="signature"):
        verifier.verify(make_assertion(mine.cert, stranger.key, NOW_MS), NOW_MS)
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    old = certs.make_client_cert(ca, "alice", valid_days=1, now=past)
    with pytest.raises(CertAssertionError, match="expired"):
        verifier.verify(make_assertion(old.cert, old.key, NOW_MS), NOW_MS)
    for text in ("", "v1.", "v1.!!!", "v2.abc", "v1." + "A" * 100, "x" * 20_000):
        with pytest.raises(CertAssertionError):
            verifier.verify(text, NOW_MS)


def test_a_tampered_assertion_is_refused(ca: certs.Pem) -> None:
    verifier = AssertionVerifier.from_pem(ca.cert)
    node = certs.make_node_cert(ca, "node1")
    text = make_assertion(node.cert, node.key, NOW_MS)
    # Another time under the same signature.
    later = make_assertion(node.cert, node.key, NOW_MS + 5)
    forged = text[:-40] + later[-40:]
    with pytest.raises(CertAssertionError):
        verifier.verify(forged, NOW_MS)
