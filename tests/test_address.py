"""Unit tests of the one address parser (listen, advertised, seeds, bootstrap)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from laminar_client import Client
from laminar_spark.options import parse_options
from laminar_spark.write_options import parse_write_options

from laminar.address import Address, parse_address, parse_address_list, parse_advertisable
from laminar.errors import ConfigError, InvalidInputError


@pytest.mark.parametrize(
    ("text", "host", "port", "name"),
    [
        ("127.0.0.1:7100", "127.0.0.1", 7100, False),
        (" 10.77.0.3:7000 ", "10.77.0.3", 7000, False),
        ("node3.example:7100", "node3.example", 7100, True),
        ("localhost:1", "localhost", 1, True),
        ("my_node-1.svc.cluster.local.:7200", "my_node-1.svc.cluster.local.", 7200, True),
        ("[::1]:7100", "::1", 7100, False),
        ("[2001:db8::7]:65535", "2001:db8::7", 65535, False),
        ("[fe80::1%eth0]:7000", "fe80::1%eth0", 7000, False),
        ("0.0.0.0:7000", "0.0.0.0", 7000, False),
        ("[::]:7000", "::", 7000, False),
    ],
)
def test_parses_ipv4_ipv6_and_names(text: str, host: str, port: int, name: bool) -> None:
    address = parse_address(text)
    assert (address.host, address.port, address.is_name) == (host, port, name)


@pytest.mark.parametrize(
    ("address", "text"),
    [
        (Address("10.0.0.1", 7100), "10.0.0.1:7100"),
        (Address("2001:db8::7", 7100), "[2001:db8::7]:7100"),
        (Address("node3.example", 1), "node3.example:1"),
    ],
)
def test_round_trips(address: Address, text: str) -> None:
    assert str(address) == text
    assert parse_address(text) == address


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nohost", "must be host:port"),
        (":7100", "must be host:port"),
        ("::1:7100", "brackets"),
        ("2001:db8::7", "brackets"),
        ("[::1]7100", "must be host:port"),
        ("[not-v6]:7100", "must be host:port"),
        ("[::1]:", "port must be"),
        ("h:70000", "port must be"),
        ("h:-1", "port must be"),
        ("h:0", r"\[1, 65535\]"),
        ("h:port", "port must be"),
        ("999.1.1.1:7100", "not an IPv4 address or a host name"),
        ("bad host:7100", "not an IPv4 address or a host name"),
        ("-lead.example:7100", "not an IPv4 address or a host name"),
        ("a..b:7100", "not an IPv4 address or a host name"),
        ("x" * 254 + ":7100", "not an IPv4 address or a host name"),
    ],
)
def test_refuses_bad_addresses_clearly(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_address(text, what="seed")


def test_the_error_names_what_was_parsed() -> None:
    with pytest.raises(ConfigError, match=r"^advertise_grpc address must be host\:port"):
        parse_address("x", what="advertise_grpc address")


def test_port_zero_only_where_allowed() -> None:
    assert parse_address("127.0.0.1:0", port_zero=True).port == 0
    with pytest.raises(ConfigError):
        parse_address("127.0.0.1:0")


@pytest.mark.parametrize("text", ["0.0.0.0:7100", "[::]:7100"])
def test_a_wildcard_cannot_be_advertised(text: str) -> None:
    assert parse_address(text).is_wildcard
    with pytest.raises(ConfigError, match="wildcard"):
        parse_advertisable(text, what="advertise_grpc address")


def test_refuses_what_is_not_a_string() -> None:
    with pytest.raises(ConfigError, match="string"):
        parse_address(7100)  # type: ignore[arg-type]


def test_address_lists_keep_names_and_ipv6_as_written() -> None:
    listed = parse_address_list(" n1.example:7100, [2001:db8::2]:7100 ,,10.0.0.3:7100", what="x")
    assert listed == ["n1.example:7100", "[2001:db8::2]:7100", "10.0.0.3:7100"]
    for bad, message in (
        ("", "at least one"),
        ("a:1,::1:7100", "brackets"),
        ("0.0.0.0:1", "wildcard"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_address_list(bad, what="bootstrap")


@pytest.mark.parametrize(
    "parse",
    [
        Client,
        lambda servers: parse_options({"servers": servers, "subscribe": "t"}),
        lambda servers: parse_write_options({"servers": servers, "topic": "t"}, streaming=False),
    ],
    ids=["client", "spark-read", "spark-write"],
)
def test_client_and_spark_refuse_a_bad_server_list_before_connecting(
    parse: Callable[[str], object],
) -> None:
    with pytest.raises(InvalidInputError, match=r"brackets, \[addr\]:port"):
        parse("n1.example:7100,::1:7100")
    with pytest.raises(InvalidInputError, match="not an IPv4 address or a host name"):
        parse("node one:7100")
