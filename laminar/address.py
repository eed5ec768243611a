"""Network addresses: the one parser for every ``host:port`` Laminar reads.

Listen addresses, advertised addresses, gossip seeds and client bootstrap lists all
go through :func:`parse_address`. A host is an IPv4 literal, an IPv6 literal in
brackets (``[2001:db8::7]:7100``; a bare IPv6 address is refused, its last group
would read as the port) or a host name (``node3.example``).

Resolution rule: a host name is kept as written and resolved when it is used (each
new connection, and a datagram destination at most :data:`RESOLVE_TTL_S` after the
last resolution; gRPC channels again after a failed connection, at most every
:data:`GRPC_RESOLVE_INTERVAL_MS`), never once at start-up, so a node that comes
back under the same name with a new IP address is found again once its old address
stops answering.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from laminar.errors import ConfigError

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})
"""Hosts that name every local address: fine to listen on, never to advertise."""
HOST_NAME_BYTES_MAX = 253
"""The longest DNS name (RFC 1035)."""
RESOLVE_TTL_S = 5.0
"""How long a resolved datagram destination is reused before it is resolved again:
short, so that a name that moved is followed within a few gossip rounds, long
enough that resolution costs nothing measurable."""
GRPC_RESOLVE_INTERVAL_MS = 1_000
"""``grpc.dns_min_time_between_resolutions_ms`` of every gRPC channel Laminar opens:
gRPC resolves a name again when a connection fails, but by default at most every
30 s, which would keep a client away from a moved node for that long."""

_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_NUMERIC = re.compile(r"[0-9.]+")


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed ``host:port``; ``host`` carries no brackets."""

    host: str
    port: int

    @property
    def is_wildcard(self) -> bool:
        return self.host in WILDCARD_HOSTS

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    @property
    def is_name(self) -> bool:
        """A host name (resolved when used), not an IP literal."""
        return not self.is_ipv6 and _NUMERIC.fullmatch(self.host) is None

    def __str__(self) -> str:
        host = f"[{self.host}]" if self.is_ipv6 else self.host
        return f"{host}:{self.port}"


def parse_address(text: str, *, what: str = "address", port_zero: bool = False) -> Address:
    """``host:port`` (or ``[v6]:port``) as an :class:`Address`; a :class:`ConfigError`
    naming ``what`` if it is not one. Port 0 (pick a free port) only with ``port_zero``."""
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a host:port string, got {text!r}")
    text = text.strip()
    expected = f"{what} must be host:port (IPv6 as [addr]:port), got {text!r}"
    if text.startswith("["):
        host, separator, port_text = text[1:].partition("]:")
        if not separator or not _is_ipv6(host):
            raise ConfigError(expected)
    else:
        host, separator, port_text = text.rpartition(":")
        if not separator or not host:
            raise ConfigError(expected)
        if ":" in host:
            raise ConfigError(f"{what} {text!r}: put an IPv6 address in brackets, [addr]:port")
        if not _is_host(host):
            raise ConfigError(f"{what} {text!r}: {host!r} is not an IPv4 address or a host name")
    if not port_text.isdigit() or not (0 if port_zero else 1) <= int(port_text) <= 65535:
        low = 0 if port_zero else 1
        raise ConfigError(f"{what} {text!r}: the port must be a number in [{low}, 65535]")
    return Address(host, int(port_text))


def parse_advertisable(text: str, *, what: str = "address") -> Address:
    """An address others can reach: :func:`parse_address`, and not a wildcard."""
    address = parse_address(text, what=what)
    if address.is_wildcard:
        raise ConfigError(
            f"{what} {text!r} is a wildcard, which other nodes and clients cannot "
            "reach; give a host name or address they can use"
        )
    return address


def parse_address_list(addresses: str | Sequence[str], *, what: str) -> list[str]:
    """A comma-separated list (or a sequence) of addresses others can reach, each
    checked with :func:`parse_advertisable` and kept as written (a host name stays
    a name, resolved when used); ConfigError if one is bad or none is given."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    if not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{what} must be host:port strings, got {addresses!r}")
    listed = [item.strip() for item in items if item.strip()]
    if not listed:
        raise ConfigError(f"{what} needs at least one host:port address")
    for address in listed:
        parse_advertisable(address, what=what)
    return listed


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def _is_host(host: str) -> bool:
    if _NUMERIC.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    name = host[:-1] if host.endswith(".") else host
    return len(name) <= HOST_NAME_BYTES_MAX and all(
        _LABEL.fullmatch(label) for label in name.split(".")
    )
