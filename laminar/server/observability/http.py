"""A small HTTP server on a thread of its own, with a route table.

Only ``GET`` and ``HEAD``, one request per connection (HTTP/1.0 style), at most
``requests_max`` at once (a connection beyond that is answered 503 and closed at
once), a bounded request head (request line and headers: 431 beyond
``request_head_bytes_max``) read within ``HEAD_TIMEOUT_S``. A route is a function
of no argument returning a :class:`Response`; one that raises is answered
``500 internal error`` on one line (the traceback goes to the node's log, never to
the client). Routes are added with :meth:`HttpServer.route` while it runs: the node
adds ``/metrics``, ``/healthz`` and ``/ready`` (:mod:`.endpoint`), and a status page
adds its own paths the same way.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from laminar.address import parse_address
from laminar.errors import ConfigError

_LOG = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to send its request head (and to read the answer)."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()
    """More headers (e.g. the status page's Content-Security-Policy)."""


Route = Callable[[], Response]


def text(status: int, line: str) -> Response:
    """A one-line plain-text answer."""
    return Response(status, (line + "\n").encode())


class HttpServer:
    """``HttpServer(address, requests_max=..., head_bytes_max=...)``, then
    :meth:`start` and :meth:`close`; :attr:`port` is the port bound (``:0`` picks one)."""

    def __init__(self, address: str, *, requests_max: int = 8, head_bytes_max: int = 8192) -> None:
        parsed = parse_address(address, what="metrics address", port_zero=True)
        self._routes: dict[str, Route] = {}
        self._slots = threading.BoundedSemaphore(requests_max)
        self._head_bytes_max = head_bytes_max
        handler = type("_BoundHandler", (_Handler,), {"owner": self})
        try:
            self._server = _Server((parsed.host, parsed.port), handler, self._slots, head_bytes_max)
        except OSError as error:
            raise ConfigError(f"cannot listen on {address} (metrics): {error.strerror}") from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    def route(self, path: str, handler: Route) -> None:
        """Serve ``path`` (exact, without the query string) with ``handler``."""
        self._routes = {**self._routes, path: handler}  # readers see one table or the other

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="laminar-http",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, close the listener; requests under way finish on their own."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def answer(self, path: str) -> Response:
        handler = self._routes.get(path.split("?", 1)[0])
        if handler is None:
            return text(HTTPStatus.NOT_FOUND, f"no page {path[:100]!r}")
        try:
            return handler()
        except Exception:
            _LOG.exception("HTTP %s failed", path[:100])
            return text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see the node log)")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[_Handler],
        slots: threading.BoundedSemaphore,
        head_bytes_max: int,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._slots = slots
        self.head_bytes_max = head_bytes_max
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        _LOG.debug("HTTP connection from %s failed", client_address, exc_info=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # Read the request first (briefly): closing with it unread would reset
            # the connection and the client could lose the answer.
            with contextlib.suppress(OSError):
                request.settimeout(_BUSY_READ_S)
                request.recv(self.head_bytes_max)
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


_DRAIN_BYTES_MAX = 1 << 20
_BUSY_READ_S = 0.2
"""How long the accepting thread waits for a refused connection's request."""
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: 22\r\n\r\ntoo many requests now\n"
)


class _Handler(BaseHTTPRequestHandler):
    owner: HttpServer
    protocol_version = "HTTP/1.0"
    timeout = HEAD_TIMEOUT_S
    server_version = "laminar"
    sys_version = ""

    def handle_one_request(self) -> None:
        try:
            head = _read_head(self.rfile, self.owner._head_bytes_max)
        except OSError:  # a timeout or a reset: nobody to answer
            self.close_connection = True
            return
        if head is None:
            self.close_connection = True
            self.request_version = "HTTP/1.0"
            self.command = self.requestline = ""
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large")
            self._drain()
            return
        self.rfile = io.BytesIO(head)  # parse_request reads the head from it
        super().handle_one_request()

    def _drain(self) -> None:
        """Read (a bounded amount of) what the client still sends before closing:
        closing with unread data resets the connection, and the client may lose
        the answer."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(1.0)
            drained = 0
            while drained < _DRAIN_BYTES_MAX and (chunk := self.rfile.read1(65536)):
                drained += len(chunk)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        response = self.owner.answer(self.path)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(response.body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A one-line plain-text error (not http.server's HTML page)."""
        body = f"{code} {message or HTTPStatus(code).phrase}\n".encode()
        with contextlib.suppress(OSError):
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Connection", "close")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        _LOG.debug("HTTP %s: " + format, self.client_address[0], *args)


def _read_head(stream: Any, bytes_max: int) -> bytes | None:
    """The request line and headers up to the blank line, or None when longer than
    ``bytes_max`` (b"" when the client sent nothing)."""
    lines = []
    size = 0
    while True:
        line = stream.readline(bytes_max + 1 - size)
        size += len(line)
        if size > bytes_max:
            return None
        lines.append(line)
        if line in (b"\r\n", b"\n", b""):
            return b"".join(lines)
