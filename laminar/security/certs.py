"""TLS material: a certificate authority, node and client certificates (``cryptography``).

For tests, benchmarks and ``scripts/local_cluster.sh start --secure`` (a throwaway
CA). A production cluster uses certificates from the operator's own CA; the only
Laminar-specific part is the node identity:

A **node certificate** carries its node id as a URI subject alternative name,
``laminar:node/<id>`` (:data:`NODE_URI_PREFIX`), next to the DNS names and IP
addresses it is reached at. The peer transport compares it with the id a peer's
hello names, and the client API maps it to the principal ``node:<id>``. A client
certificate names its principal in its subject common name or a SAN (mapped by the
node's principal rules).

Keys are ECDSA P-256: small and fast to handshake. Files are PEM; private keys are
written with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from laminar.errors import ConfigError
from laminar.security.tls import NODE_URI_PREFIX

__all__ = [
    "NODE_URI_PREFIX",
    "Pem",
    "make_ca",
    "make_client_cert",
    "make_node_cert",
    "node_ids_of",
    "write_atomic",
]

DEFAULT_VALID_DAYS = 365
"""Lifetime of a generated certificate unless told otherwise."""

_BACKDATE = datetime.timedelta(minutes=5)
"""Generated certificates start this long before now (clocks of nodes differ)."""


@dataclass(frozen=True, slots=True)
class Pem:
    """A certificate and its private key, PEM-encoded."""

    cert: bytes
    key: bytes

    def write(self, cert_path: str | os.PathLike[str], key_path: str | os.PathLike[str]) -> None:
        """Write both files, each atomically (the key with mode 0600), so that a node
        reloading them on change never reads half a file."""
        _write_atomic(Path(cert_path), self.cert, 0o644)
        _write_atomic(Path(key_path), self.key, 0o600)


def node_uri(node_id: str) -> str:
    """The URI SAN of ``node_id``'s certificate."""
    return NODE_URI_PREFIX + node_id


def make_ca(
    common_name: str = "Laminar local CA",
    *,
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime.datetime | None = None,
) -> Pem:
    """A self-signed certificate authority."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = (now or _utcnow()) - _BACKDATE
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pem(_cert_pem(cert), _key_pem(key))


def make_node_cert(
    ca: Pem,
    node_id: str,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    *,
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime.datetime | None = None,
) -> Pem:
    """A certificate for node ``node_id``, valid as a server and as a client (nodes
    call each other), naming ``laminar:node/<id>`` and every host (an IP address or a
    DNS name) it is reached at."""
    if not node_id:
        raise ConfigError("a node certificate needs a node id")
    return _leaf(
        ca,
        node_id,
        [x509.UniformResourceIdentifier(node_uri(node_id)), *_host_names(hosts)],
        server=True,
        valid_days=valid_days,
        now=now,
    )


def make_client_cert(
    ca: Pem,
    common_name: str,
    *,
    uris: Sequence[str] = (),
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime.datetime | None = None,
) -> Pem:
    """A client certificate whose subject common name is ``common_name`` (and URI SANs
    ``uris``, if given): what the node's principal rules map to a principal."""
    return _leaf(
        ca,
        common_name,
        [x509.UniformResourceIdentifier(uri) for uri in uris],
        server=False,
        valid_days=valid_days,
        now=now,
    )


def node_ids_of(cert_pem: bytes) -> list[str]:
    """The node ids a PEM certificate's URI SANs name (usually one)."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        uri[len(NODE_URI_PREFIX) :]
        for uri in sans.get_values_for_type(x509.UniformResourceIdentifier)
        if uri.startswith(NODE_URI_PREFIX)
    ]


def not_after(cert_pem: bytes) -> datetime.datetime:
    """When a PEM certificate expires (UTC)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def _leaf(
    ca: Pem,
    common_name: str,
    sans: list[x509.GeneralName],
    *,
    server: bool,
    valid_days: int,
    now: datetime.datetime | None,
) -> Pem:
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ConfigError("the CA key must be an EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    start = (now or _utcnow()) - _BACKDATE
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Pem(_cert_pem(cert), _key_pem(key))


def _host_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it, so that
    a reader (a node reloading its TLS files) sees the old file or the new one."""
    _write_atomic(Path(path), data, mode)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temporary, mode)
    os.replace(temporary, path)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
