"""Certificate assertions: a caller proves it holds a certificate inside the call.

Why: grpc Python's server credentials either require a client certificate at the
TLS handshake or never ask for one; there is no "ask, and verify when given"
(OpenSSL's ``SSL_VERIFY_PEER`` without ``FAIL_IF_NO_PEER_CERT``). With
``[tls] client_auth = "request"`` a node serves clients without certificates (they
authenticate by token) and still needs to know the nodes calling it (their
certificates name ``laminar:node/<id>``). So a caller with a certificate sends, in
the call metadata :data:`METADATA_KEY`, its certificate chain and a signature by its
private key over a fixed label, the time, and the chain's hash; the node verifies
the chain against its ``ca_file``, the certificate's validity and client-auth use,
the signature, and that the time is within :data:`WINDOW_MS` of its own clock.

It travels only inside a TLS channel whose server the caller verified against the
same CA, so nobody on the network sees it; a node that received one could present
it to another node for the rest of the window, which gains nothing a node does not
already have (a node is a super user). An assertion is made once and reused for
:data:`REUSE_MS`; the server remembers the ones it verified, so a call pays one
dictionary lookup.

Text form: ``v1.<base64url(msgpack([sent_ms, [der, ...], signature]))>``.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import msgpack
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

METADATA_KEY = "x-laminar-cert-assertion"
WINDOW_MS = 120_000
"""An assertion is accepted while its time is this close to the receiver's clock."""
REUSE_MS = 30_000
"""A caller makes a new assertion this often (well inside the window)."""
ASSERTION_BYTES_MAX = 16 * 1024
CHAIN_CERTS_MAX = 4
REMEMBERED_MAX = 4096
_LABEL = b"laminar-cert-assertion/v1"
_PREFIX = "v1."


class CertAssertionError(Exception):
    """An assertion that does not prove a certificate (the reason in the message)."""


@dataclass(frozen=True, slots=True)
class Verified:
    """A verified assertion: the caller's certificate (the leaf of its chain)."""

    certificate: x509.Certificate


def make_assertion(cert_chain_pem: bytes, key_pem: bytes, now_ms: int) -> str:
    """An assertion of the certificate chain ``cert_chain_pem`` (leaf first), signed
    with its private key ``key_pem``, made at ``now_ms`` (wall clock)."""
    chain = x509.load_pem_x509_certificates(cert_chain_pem)[:CHAIN_CERTS_MAX]
    ders = [c.public_bytes(serialization.Encoding.DER) for c in chain]
    key = serialization.load_pem_private_key(key_pem, password=None)
    message = _message(now_ms, ders)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
    elif isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
    elif isinstance(key, ed25519.Ed25519PrivateKey):
        signature = key.sign(message)
    else:
        raise ValueError(f"unsupported private key type {type(key).__name__}")
    body = msgpack.packb([now_ms, ders, signature], use_bin_type=True)
    return _PREFIX + base64.urlsafe_b64encode(body).decode("ascii").rstrip("=")


class AssertionVerifier:
    """Verifies assertions against a CA bundle (remembering the ones it verified
    until their window ends). ``cas`` are the trusted CA certificates."""

    def __init__(self, cas: Sequence[x509.Certificate], window_ms: int = WINDOW_MS) -> None:
        self._cas = list(cas)
        self._window_ms = window_ms
        self._remembered: OrderedDict[bytes, tuple[int, Verified]] = OrderedDict()

    @classmethod
    def from_pem(cls, ca_pem: bytes, window_ms: int = WINDOW_MS) -> AssertionVerifier:
        return cls(x509.load_pem_x509_certificates(ca_pem), window_ms)

    def verify(self, text: str, now_ms: int) -> Verified:
        """The certificate ``text`` proves, or :class:`CertAssertionError`."""
        if len(text) > ASSERTION_BYTES_MAX:
            raise CertAssertionError("certificate assertion too large")
        digest = hashlib.sha256(text.encode("ascii", "replace")).digest()
        remembered = self._remembered.get(digest)
        if remembered is not None:
            sent_ms, verified = remembered
            self._check_time(sent_ms, now_ms)
            self._check_validity(verified.certificate, now_ms)
            return verified
        sent_ms, ders, signature = _decode(text)
        self._check_time(sent_ms, now_ms)
        try:
            chain = [x509.load_der_x509_certificate(der) for der in ders]
        except ValueError:
            raise CertAssertionError(
                "certificate assertion: a certificate does not parse"
            ) from None
        leaf = chain[0]
        for cert in chain:
            self._check_validity(cert, now_ms)
        self._check_client_use(leaf)
        self._check_issued(chain)
        _check_signature(leaf, signature, _message(sent_ms, ders))
        verified = Verified(leaf)
        self._remembered[digest] = (sent_ms, verified)
        while len(self._remembered) > REMEMBERED_MAX:
            self._remembered.popitem(last=False)
        return verified

    def _check_time(self, sent_ms: int, now_ms: int) -> None:
        if abs(now_ms - sent_ms) > self._window_ms:
            raise CertAssertionError(
                "certificate assertion outside its time window (clocks more than "
                f"{self._window_ms // 1000} s apart, or replayed)"
            )

    def _check_issued(self, chain: list[x509.Certificate]) -> None:
        """Each certificate is issued by the next; the last by a trusted CA."""
        for cert, issuer in itertools.pairwise(chain):
            if not _issued_by(cert, issuer):
                raise CertAssertionError("certificate assertion: the chain is broken")
        top = chain[-1]
        if not any(_issued_by(top, ca) for ca in self._cas):
            raise CertAssertionError("certificate assertion: not issued by a trusted CA")

    @staticmethod
    def _check_validity(cert: x509.Certificate, now_ms: int) -> None:
        now = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise CertAssertionError(
                "certificate assertion: a certificate is expired or not yet valid"
            )

    @staticmethod
    def _check_client_use(cert: x509.Certificate) -> None:
        try:
            usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        except x509.ExtensionNotFound:
            return  # no restriction
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
            raise CertAssertionError("certificate assertion: the certificate is not for clients")


def _message(sent_ms: int, ders: Sequence[bytes]) -> bytes:
    chain_hash = hashlib.sha256(b"".join(hashlib.sha256(d).digest() for d in ders)).digest()
    return _LABEL + sent_ms.to_bytes(8, "big", signed=True) + chain_hash


def _decode(text: str) -> tuple[int, list[bytes], bytes]:
    if not text.startswith(_PREFIX):
        raise CertAssertionError("certificate assertion: unknown version")
    try:
        body = base64.urlsafe_b64decode(text[len(_PREFIX) :] + "=" * (-len(text) % 4))
        sent_ms, ders, signature = msgpack.unpackb(body, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise CertAssertionError("certificate assertion: malformed") from None
    if (
        not isinstance(sent_ms, int)
        or not isinstance(ders, list)
        or not 1 <= len(ders) <= CHAIN_CERTS_MAX
        or not all(isinstance(d, bytes) for d in ders)
        or not isinstance(signature, bytes)
    ):
        raise CertAssertionError("certificate assertion: malformed")
    return sent_ms, ders, signature


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _check_signature(leaf: x509.Certificate, signature: bytes, message: bytes) -> None:
    key = leaf.public_key()
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            raise CertAssertionError("certificate assertion: unsupported key type")
    except InvalidSignature:
        raise CertAssertionError("certificate assertion: the signature does not verify") from None
