"""Principals from client certificates: Kafka's ``ssl.principal.mapping.rules``.

A caller of the client API is one principal, ``Type:name``:

- a **node** certificate (a URI SAN ``laminar:node/<id>``, :mod:`laminar.security.certs`)
  is ``Node:<id>``, whatever the rules say: nodes call each other's API (metadata
  catch-up) and are allowed everything;
- a **bearer token** (:mod:`laminar.security.tokens`) is the principal its entry names;
- another **client certificate** is ``User:<name>``, the name given by the first
  of the ordered ``principal_rules`` that matches one of its names;
- a caller with neither is ``User:ANONYMOUS``.

Rules (``[auth] principal_rules``), tried in order, each against the certificate's
names in order: its subject distinguished name in RFC 4514 form (``CN=alice,O=corp``,
most specific first, as Kafka's), then each subject alternative name as
``URI:<uri>``, ``DNS:<name>`` or ``EMAIL:<address>``. The first rule matching a
name wins:

- ``RULE:<pattern>/<replacement>/[L|U]``: ``pattern`` (a Python regular expression)
  must match the whole name; the name becomes ``replacement`` with ``$1``, ``$2``
  ... standing for the pattern's groups, lower-cased with ``L``, upper-cased with
  ``U``. A ``/`` inside the pattern or replacement is written ``\\/``.
- ``DEFAULT``: the subject distinguished name as it is.

No rule matching is an authentication failure (the certificate names nobody).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

from cryptography import x509

from laminar.errors import ConfigError
from laminar.security.certs import NODE_URI_PREFIX

_RULE = re.compile(r"^RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)$")
_GROUP_REFERENCE = re.compile(r"\$(\d+)")
CERTIFICATES_KEPT_MAX = 1024
"""Certificates whose principal is remembered (parsing one costs about 50 µs)."""


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One parsed mapping rule; ``pattern`` None for ``DEFAULT``."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""

    def apply(self, name: str, *, is_subject: bool) -> str | None:
        """The mapped name, or None when the rule does not match ``name``."""
        if self.pattern is None:
            return name if is_subject else None
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        groups = match.groups()

        def group(reference: re.Match[str]) -> str:
            index = int(reference.group(1))
            if index == 0:
                return match.group(0)
            return (groups[index - 1] or "") if index <= len(groups) else ""

        mapped = _GROUP_REFERENCE.sub(group, self.replacement)
        if self.case == "L":
            return mapped.lower()
        if self.case == "U":
            return mapped.upper()
        return mapped


def parse_rules(rules: tuple[str, ...]) -> tuple[PrincipalRule, ...]:
    """Parse ``principal_rules``; :class:`ConfigError` naming a bad one."""
    if not rules:
        raise ConfigError("principal_rules needs at least one rule (DEFAULT)")
    parsed = []
    for text in rules:
        if text.strip() == "DEFAULT":
            parsed.append(PrincipalRule(None))
            continue
        found = _RULE.match(text.strip())
        if found is None:
            raise ConfigError(
                f"principal rule {text!r} is neither DEFAULT nor RULE:pattern/replacement/[LU]"
            )
        pattern, replacement, case = (part.replace("\\/", "/") for part in found.groups())
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise ConfigError(f"principal rule {text!r}: bad pattern: {error}") from None
        parsed.append(PrincipalRule(compiled, replacement, case))
    return tuple(parsed)


@dataclass(frozen=True, slots=True)
class CertificateNames:
    """The names of a certificate that rules match: its subject and its SANs."""

    subject: str
    alternative: tuple[str, ...]
    node_ids: tuple[str, ...]


def certificate_names(cert_pem: bytes) -> CertificateNames:
    cert = x509.load_pem_x509_certificate(cert_pem)
    alternative: list[str] = []
    node_ids: list[str] = []
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = None
    if sans is not None:
        for uri in sans.get_values_for_type(x509.UniformResourceIdentifier):
            alternative.append(f"URI:{uri}")
            if uri.startswith(NODE_URI_PREFIX):
                node_ids.append(uri[len(NODE_URI_PREFIX) :])
        alternative += [f"DNS:{name}" for name in sans.get_values_for_type(x509.DNSName)]
        alternative += [f"EMAIL:{name}" for name in sans.get_values_for_type(x509.RFC822Name)]
    return CertificateNames(cert.subject.rfc4514_string(), tuple(alternative), tuple(node_ids))


def map_certificate(names: CertificateNames, rules: tuple[PrincipalRule, ...]) -> str | None:
    """The principal of a certificate with ``names``; None when no rule matches."""
    if names.node_ids:
        return "Node:" + names.node_ids[0]
    for rule in rules:
        mapped = rule.apply(names.subject, is_subject=True)
        if mapped is None:
            for name in names.alternative:
                mapped = rule.apply(name, is_subject=False)
                if mapped is not None:
                    break
        if mapped:
            return "User:" + mapped
    return None


class CertificatePrincipals:
    """Principals of client certificates (PEM as ``grpc`` gives them), remembered."""

    def __init__(self, rules: tuple[str, ...]) -> None:
        self._rules = parse_rules(rules)
        self._known: OrderedDict[bytes, str | None] = OrderedDict()

    def principal_of(self, cert_pem: bytes) -> str | None:
        """The principal of the certificate, None when no rule maps it."""
        if cert_pem in self._known:
            self._known.move_to_end(cert_pem)
            return self._known[cert_pem]
        try:
            principal = map_certificate(certificate_names(cert_pem), self._rules)
        except ValueError:
            principal = None
        self._known[cert_pem] = principal
        if len(self._known) > CERTIFICATES_KEPT_MAX:
            self._known.popitem(last=False)
        return principal
