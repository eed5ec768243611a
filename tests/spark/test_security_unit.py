"""The reader's and writer's TLS and token options, no Spark session and no cluster:
parsing, the checks that name the option, the token kept out of every repr and
message, the client they make, and a topic hidden by authorization reported as such."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from laminar_client.metadata import ClusterMetadata
from laminar_client.tls import TlsOptions
from laminar_spark.options import ReadOptions
from laminar_spark.planner import select_partitions
from laminar_spark.producing import ClusterTarget
from laminar_spark.security import TOKEN_FILE_BYTES_MAX, ClientSecurity, open_client
from laminar_spark.write_options import WriteOptions

from laminar.errors import TopicNotAuthorizedError, UnknownTopicOrPartitionError
from laminar.security import certs
from tests.spark.test_kafka_compat import SERVERS, read, refused, write

TOKEN = "lmt_s3cret-Token.value"


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Paths of a CA, a client certificate and key it signed, another CA's key, and
    a file that is not PEM."""
    root = tmp_path_factory.mktemp("pem")
    ca = certs.make_ca("spark test CA")
    (root / "ca.pem").write_bytes(ca.cert)
    certs.make_client_cert(ca, "spark").write(root / "client.pem", root / "client.key")
    other = certs.make_ca("other CA")
    other.write(root / "other.pem", root / "other.key")
    (root / "garbage.pem").write_text("not a certificate\n")
    return {path.name: str(path) for path in root.iterdir()}


PARSERS: dict[str, Callable[..., ReadOptions | WriteOptions]] = {
    "read": read,
    "stream read": lambda **options: read(streaming=True, **options),
    "schema": lambda **options: read(streaming=None, **options),
    "write": write,
    "stream write": lambda **options: write(streaming=True, **options),
}


@pytest.fixture(params=sorted(PARSERS))
def parse(request: pytest.FixtureRequest) -> Callable[..., ReadOptions | WriteOptions]:
    return PARSERS[request.param]


def test_no_option_is_a_plaintext_client_without_a_token(parse: Callable[..., Any]) -> None:
    assert parse().security == ClientSecurity()


def test_every_entry_point_takes_tls_and_a_token(
    parse: Callable[..., Any], pem: dict[str, str]
) -> None:
    # PySpark hands the names lower-cased; the documented case works as well.
    lowered = {
        "tls.ca": pem["ca.pem"],
        "tls.cert": pem["client.pem"],
        "tls.key": pem["client.key"],
        "tls.servername": "laminar.internal",
        "token": f" {TOKEN} ",
    }
    expected = ClientSecurity(
        tls=TlsOptions(pem["ca.pem"], pem["client.pem"], pem["client.key"], "laminar.internal"),
        token=TOKEN,
    )
    assert parse(**lowered).security == expected
    assert parse(**{"tls.ca": pem["ca.pem"], "tls.serverName": "laminar.internal"}).security == (
        ClientSecurity(tls=TlsOptions(pem["ca.pem"], server_name="laminar.internal"))
    )


def test_bad_combinations_name_the_options(parse: Callable[..., Any], pem: dict[str, str]) -> None:
    ca, cert, key = pem["ca.pem"], pem["client.pem"], pem["client.key"]
    refused(lambda: parse(**{"tls.ca": ca, "tls.cert": cert}), "'tls.cert' and 'tls.key' go")
    refused(lambda: parse(**{"tls.ca": ca, "tls.key": key}), "got only 'tls.key'")
    refused(lambda: parse(**{"tls.cert": cert, "tls.key": key}), "'tls.cert' needs 'tls.ca'")
    refused(lambda: parse(**{"tls.serverName": "n"}), "'tls.serverName' needs 'tls.ca'")
    refused(
        lambda: parse(**{"tls.ca": ca, "tls.serverName": "a b"}), "'tls.serverName' must be a host"
    )
    refused(
        lambda: parse(**{"token": TOKEN, "tokenFile": "/x"}),
        "one of the options 'token' and 'tokenFile'",
    )


def test_files_are_checked_on_the_driver_naming_the_option(
    parse: Callable[..., Any], pem: dict[str, str], tmp_path: Path
) -> None:
    ca, cert = pem["ca.pem"], pem["client.pem"]
    missing = str(tmp_path / "missing.pem")
    refused(
        lambda: parse(**{"tls.ca": missing}),
        f"option 'tls.ca': no CA file {missing!r}",
        "on every executor",
    )
    refused(
        lambda: parse(**{"tls.ca": ca, "tls.cert": cert, "tls.key": missing}),
        "option 'tls.key': no key file",
    )
    refused(lambda: parse(**{"tls.ca": pem["garbage.pem"]}), "'tls.ca'", "cannot load TLS files")
    # A key that is not the certificate's.
    refused(
        lambda: parse(**{"tls.ca": ca, "tls.cert": cert, "tls.key": pem["other.key"]}),
        "cannot load TLS files",
    )
    refused(lambda: parse(tokenFile=missing), "option 'tokenFile': cannot read", missing)


def test_the_token_is_in_no_repr_and_no_message(
    parse: Callable[..., Any], pem: dict[str, str], tmp_path: Path
) -> None:
    parsed = parse(token=TOKEN, **{"tls.ca": pem["ca.pem"]})
    assert parsed.security.token == TOKEN
    assert TOKEN not in repr(parsed) and TOKEN not in str(parsed)
    assert "token=<redacted>" in repr(parsed)
    # Spark pickles the options to the executors: the token goes with them.
    assert pickle.loads(pickle.dumps(parsed)).security.token == TOKEN
    for bad in (f"{TOKEN} more", f"{TOKEN}\u00e9", "   "):
        message = refused(lambda bad=bad: parse(token=bad), "option 'token'")
        assert TOKEN not in message
    spaced = tmp_path / "spaced"
    spaced.write_text(f"{TOKEN} x\n")
    assert TOKEN not in refused(lambda: parse(tokenFile=str(spaced)), "printable ASCII")


def test_a_token_file_gives_its_first_line_read_again_by_each_client(
    parse: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n# a comment line\n")
    parsed = parse(tokenFile=str(path))
    assert parsed.security == ClientSecurity(token_file=str(path))
    assert TOKEN not in repr(parsed)
    assert parsed.security.current_token() == TOKEN
    path.write_text("lmt_rotated\n")
    assert parsed.security.current_token() == "lmt_rotated"
    path.write_text("\n")
    refused(lambda: parse(tokenFile=str(path)), "the token is empty")
    path.write_bytes(b"x" * (TOKEN_FILE_BYTES_MAX + 1))
    refused(lambda: parse(tokenFile=str(path)), f"larger than {TOKEN_FILE_BYTES_MAX} bytes")


def test_the_client_made_has_the_tls_and_the_token(pem: dict[str, str], tmp_path: Path) -> None:
    tls = TlsOptions(pem["ca.pem"], server_name="laminar.internal")
    with open_client(SERVERS, ClientSecurity(tls=tls, token=TOKEN)) as client:
        assert client.tls == tls
        assert client.call_metadata == (("authorization", f"Bearer {TOKEN}"),)
    path = tmp_path / "token"
    path.write_text("lmt_from_file\n")
    with open_client(SERVERS, ClientSecurity(token_file=str(path))) as client:
        assert client.tls is None
        assert client.call_metadata == (("authorization", "Bearer lmt_from_file"),)
    with open_client(SERVERS, ClientSecurity()) as client:
        assert client.tls is None and client.call_metadata == ()


def test_a_topic_hidden_by_authorization_is_reported_as_such() -> None:
    counts = {"visible": 2}
    for options in (read(subscribe="visible,hidden"), read(assign='{"hidden": [0]}')):
        with pytest.raises(TopicNotAuthorizedError, match="not authorized to describe"):
            select_partitions(options, counts, filtered=True)
        with pytest.raises(UnknownTopicOrPartitionError) as caught:
            select_partitions(options, counts)
        assert not isinstance(caught.value, TopicNotAuthorizedError)
    pattern = read(subscribePattern=".*")
    assert select_partitions(pattern, counts, filtered=True) == {"visible": [0, 1]}


class _Metadata:
    """A client whose metadata shows no topic (``filtered`` as given)."""

    def __init__(self, filtered: bool) -> None:
        self.filtered = filtered

    def metadata(self, refresh: bool = False) -> ClusterMetadata:
        return ClusterMetadata("c", "n", {}, {}, filtered=self.filtered)


@pytest.mark.parametrize("filtered", [True, False])
def test_a_write_to_a_hidden_topic_says_not_authorized(filtered: bool) -> None:
    times = iter(float(i) for i in range(1000))
    target = ClusterTarget(_Metadata(filtered), sleep=lambda _: None, clock=lambda: next(times))  # type: ignore[arg-type]
    with pytest.raises(UnknownTopicOrPartitionError) as caught:
        target.partition_count("orders")
    assert isinstance(caught.value, TopicNotAuthorizedError) == filtered


def test_a_certificate_without_cryptography_is_warned_about(
    pem: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without ``cryptography`` a certificate cannot be asserted in calls, so nodes
    with ``client_auth = "request"`` would take the job for anonymous: said once."""
    import importlib.util

    given = {"tls.ca": pem["ca.pem"], "tls.cert": pem["client.pem"], "tls.key": pem["client.key"]}
    with caplog.at_level(logging.WARNING, logger="laminar_spark"):
        read(**given)
    assert not caplog.records
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "cryptography" else real(name, *args),
    )
    with caplog.at_level(logging.WARNING, logger="laminar_spark"):
        read(**given)
        read(**{"tls.ca": pem["ca.pem"]})  # no certificate: nothing to assert
    assert len(caplog.records) == 1
    assert "User:ANONYMOUS" in caplog.records[0].getMessage()


def test_the_stream_readers_driver_client_has_the_tls_and_the_token(pem: dict[str, str]) -> None:
    """The batch paths are run against a secured cluster (test_secure.py); the
    streaming read's driver client is made here."""
    from laminar_spark.source import spark_schema
    from laminar_spark.stream import LaminarStreamReader

    options = {"servers": SERVERS, "subscribe": "t", "tls.ca": pem["ca.pem"], "token": TOKEN}
    stream = LaminarStreamReader(options, spark_schema())
    try:
        client = stream._connect()
        assert client.tls == TlsOptions(pem["ca.pem"])
        assert client.call_metadata == (("authorization", f"Bearer {TOKEN}"),)
        assert TOKEN not in repr(pickle.loads(pickle.dumps(stream)).options)
    finally:
        stream.stop()
