"""TLS files reloaded on change, and mutual TLS on the peer transport (issue 31).

In-process: real TLS over loopback TCP between :class:`PeerTransport` s, on asyncio
and on uvloop (the loop nodes run on). Waits are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import tempfile
from pathlib import Path

import pytest

from laminar.errors import ConfigError
from laminar.security import certs
from laminar.security.tls import TlsFiles, TlsReloader
from laminar.server.transport import PeerTransport
from tests.server.test_transport import CONFIG, Node, bundle, eventually, run


class Pki:
    """A CA and node certificates in a directory; ``files(node)`` is a node's set."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = certs.make_ca()
        certs.write_atomic(root / "ca.pem", self.ca.cert)

    def issue(self, owner: str, named: str | None = None, ca: certs.Pem | None = None) -> None:
        """``owner``'s files: a certificate naming node ``named`` (default ``owner``)."""
        pem = certs.make_node_cert(ca or self.ca, named or owner)
        pem.write(self.root / f"{owner}.pem", self.root / f"{owner}.key")

    def files(self, owner: str, ca_file: str = "ca.pem") -> TlsFiles:
        return TlsFiles(
            str(self.root / ca_file),
            str(self.root / f"{owner}.pem"),
            str(self.root / f"{owner}.key"),
        )

    def reloader(self, owner: str, ca_file: str = "ca.pem") -> TlsReloader:
        return TlsReloader(self.files(owner, ca_file), check_interval_s=0, what=owner)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


# --------------------------------------------------------------------------- reloader


def test_reloader_keeps_the_old_pair_until_the_new_one_loads(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    pki.issue("a")
    reloader = pki.reloader("a")
    first = reloader.current()
    assert first.generation == 1
    new = certs.make_node_cert(pki.ca, "a")
    certs.write_atomic(pki.root / "a.pem", new.cert)  # the key is not written yet
    with caplog.at_level(logging.WARNING):
        assert reloader.current() is first
        assert reloader.current() is first  # the same bad version: no second warning
    warnings = [r for r in caplog.records if "do not load" in r.getMessage()]
    assert len(warnings) == 1 and "does not match" in warnings[0].getMessage()
    certs.write_atomic(pki.root / "a.key", new.key, 0o600)
    second = reloader.current()
    assert second.generation == 2 and second.cert == new.cert
    assert reloader.reloads == 1 and reloader.refusals == 1


def test_reloader_refuses_files_that_do_not_load_at_start(pki: Pki) -> None:
    pki.issue("a")
    (pki.root / "a.key").write_bytes(b"not a key")
    with pytest.raises(ConfigError, match="cannot load TLS files"):
        pki.reloader("a")


# --------------------------------------------------------------------------- peer mTLS


@run
async def test_peer_mutual_tls_delivers_bundles() -> None:
    pki = Pki(_fresh_dir())
    pki.issue("a")
    pki.issue("b")
    a = Node("a", tls=pki.reloader("a"))
    b = Node("b", tls=pki.reloader("b"))
    await b.start()
    try:
        for number in range(3):
            a.transport.send("b", b.address, bundle(number))
        await b.until(lambda: b.numbers() == [0, 1, 2])
        assert {source for source, _ in b.received} == {"a"}
        assert b.transport.counters.rejected_identity == 0
    finally:
        await a.close()
        await b.close()


@run
async def test_peer_certificate_for_another_node_is_refused_counted_and_logged() -> None:
    pki = Pki(_fresh_dir())
    pki.issue("a", named="c")  # a presents c's identity while its hello says a
    pki.issue("b")
    a = Node("a", tls=pki.reloader("a"))
    b = Node("b", tls=pki.reloader("b"))
    await b.start()
    records = _capture_warnings()
    try:
        a.transport.send("b", b.address, bundle(1))
        await eventually(lambda: b.transport.counters.rejected_identity >= 1, "the refusal")
        for number in range(2, 10):  # reconnects are refused as well
            a.transport.send("b", b.address, bundle(number))
        await eventually(lambda: b.transport.counters.rejected_identity >= 2, "more refusals")
        assert b.received == []
        lines = [r.getMessage() for r in records if "refused peer connection" in r.getMessage()]
        assert len(lines) == 1  # rate-limited
        assert "from 127.0.0.1:" in lines[0] and "'a'" in lines[0] and "['c']" in lines[0]
    finally:
        logging.getLogger("laminar.server.transport").handlers.clear()
        await a.close()
        await b.close()


@run
async def test_sender_refuses_a_listener_whose_certificate_names_another_node() -> None:
    pki = Pki(_fresh_dir())
    pki.issue("a")
    pki.issue("b", named="c")
    a = Node("a", tls=pki.reloader("a"))
    b = Node("b", tls=pki.reloader("b"))
    await b.start()
    try:
        a.transport.send("b", b.address, bundle(1))
        await eventually(lambda: a.transport.counters.rejected_identity >= 1, "the refusal")
        assert b.received == []
    finally:
        await a.close()
        await b.close()


@run
async def test_new_peer_connections_use_rotated_files() -> None:
    pki = Pki(_fresh_dir())
    pki.issue("a")
    pki.issue("b")
    a = Node("a", tls=pki.reloader("a"))
    b = Node("b", tls=pki.reloader("b"))
    await b.start()
    try:
        await _deliver(a, b, 1)
        # b's certificate is replaced by one from a CA that a does not trust yet:
        # the open link lives on, the next connection fails its handshake.
        other = certs.make_ca("Another CA")
        pki.issue("b", ca=other)
        await _deliver(a, b, 2)
        a.transport.forget("b")
        failures = a.transport.counters.tls_failures
        a.transport.send("b", b.address, bundle(3))
        await eventually(lambda: a.transport.counters.tls_failures > failures, "a failed handshake")
        # Both ends trust both CAs (b's bundle must hold the old CA: a's certificate).
        certs.write_atomic(pki.root / "ca.pem", pki.ca.cert + other.cert)
        await _deliver(a, b, 4)
    finally:
        await a.close()
        await b.close()


async def _deliver(a: Node, b: Node, number: int) -> None:
    async def keep_sending() -> None:
        while True:
            a.transport.send("b", b.address, bundle(number))
            await asyncio.sleep(0.02)

    task = asyncio.create_task(keep_sending())
    try:
        await b.until(lambda: number in b.numbers())
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_plain_transport_is_unchanged_without_tls() -> None:
    transport = PeerTransport("a", "c", lambda source, received: None, config=CONFIG)
    assert transport.tls is None


def _fresh_dir() -> Path:
    """A directory of its own for each run (``run`` runs a test on two loops),
    removed when the test process exits."""
    path = Path(tempfile.mkdtemp(prefix="laminar-tls-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def _capture_warnings() -> list[logging.LogRecord]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("laminar.server.transport")
    logger.addHandler(Keep(logging.WARNING))
    return records
