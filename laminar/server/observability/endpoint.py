"""``/metrics``, ``/healthz``, ``/ready`` and the status page (``/``,
``/status.json``) of a node, on its :class:`~.http.HttpServer`.

The server starts before the node joins (``/healthz`` answers from the start, and
``/ready`` says the node is joining); :meth:`MetricsEndpoint.attach` connects the
node once it exists. Each scrape or readiness check runs one coroutine on the
node's event loop (``run_coroutine_threadsafe``) and waits at most
``scrape_timeout_ms`` for it; the exposition text is built on the HTTP thread, and
so is ``/status.json`` (:mod:`.status`: the other nodes' answers are gathered on
the loop, merged on the HTTP thread).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from laminar.server.observability.collector import NodeCollector
from laminar.server.observability.config import MetricsConfig
from laminar.server.observability.http import HttpServer, Response, text
from laminar.server.observability.page import CONTENT_SECURITY_POLICY, PAGE
from laminar.server.observability.snapshot import (
    NodeSnapshot,
    Readiness,
    readiness,
    take_snapshot,
)
from laminar.server.observability.status import build_status, gather_status

if TYPE_CHECKING:
    from laminar.server.node import Node

_T = TypeVar("_T")


class LoopBusyError(Exception):
    """The node's event loop did not run the snapshot within the scrape timeout."""


class MetricsEndpoint:
    """The node's HTTP endpoint (``--metrics``): started by :meth:`start` on the
    node's event loop, closed by :meth:`close`; :attr:`server` takes more routes."""

    def __init__(self, config: MetricsConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self._loop = loop
        self._node: Node | None = None
        self.server = HttpServer(
            config.address,
            requests_max=config.requests_max,
            head_bytes_max=config.request_head_bytes_max,
        )
        self._collector = NodeCollector(self.snapshot)
        self.server.route("/metrics", self._metrics)
        self.server.route("/healthz", lambda: text(HTTPStatus.OK, "ok"))
        self.server.route("/ready", self._ready)
        self.server.route("/", self._page)
        self.server.route("/status.json", self._status)

    @classmethod
    def start(cls, config: MetricsConfig) -> MetricsEndpoint:
        """Listen on ``config.address`` and serve (call on the node's event loop)."""
        endpoint = cls(config, asyncio.get_running_loop())
        endpoint.server.start()
        return endpoint

    def attach(self, node: Node) -> None:
        self._node = node

    def close(self) -> None:
        self.server.close()

    @property
    def port(self) -> int:
        return self.server.port

    # ------------------------------------------------------------------ routes

    def snapshot(self) -> NodeSnapshot:
        """The node's state now (taken on its loop); LoopBusyError, or RuntimeError
        before the node exists."""
        node = self._node
        if node is None:
            raise RuntimeError("the node is starting")
        return self._on_loop(lambda: take_snapshot(node, self.config.partition_series))

    def _on_loop(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        future = asyncio.run_coroutine_threadsafe(make(), self._loop)
        try:
            return future.result(self.config.scrape_timeout_ms / 1000)
        except TimeoutError:
            future.cancel()
            raise LoopBusyError(
                f"the node's event loop did not answer within {self.config.scrape_timeout_ms} ms"
            ) from None

    def _metrics(self) -> Response:
        try:
            body = generate_latest(self._collector)
        except (LoopBusyError, RuntimeError) as error:
            return text(HTTPStatus.SERVICE_UNAVAILABLE, str(error))
        return Response(HTTPStatus.OK, body, CONTENT_TYPE_LATEST)

    def _page(self) -> Response:
        return Response(
            HTTPStatus.OK,
            PAGE,
            "text/html; charset=utf-8",
            (("Content-Security-Policy", CONTENT_SECURITY_POLICY),),
        )

    def _status(self) -> Response:
        node = self._node
        if node is None:
            return text(HTTPStatus.SERVICE_UNAVAILABLE, "the node is starting")
        config = self.config
        timeout_s = min(config.status_call_timeout_ms, config.scrape_timeout_ms // 2) / 1000
        try:
            gathered = self._on_loop(lambda: gather_status(node, timeout_s))
        except LoopBusyError as error:
            return text(HTTPStatus.SERVICE_UNAVAILABLE, str(error))
        body = json.dumps(build_status(gathered), separators=(",", ":")).encode()
        return Response(HTTPStatus.OK, body, "application/json")

    def _ready(self) -> Response:
        node = self._node
        if node is None:
            answer = Readiness(False, "joining the cluster")
        else:
            try:
                answer = self._on_loop(lambda: _readiness(node))
            except (LoopBusyError, RuntimeError) as error:
                answer = Readiness(False, str(error))
        status = HTTPStatus.OK if answer.ready else HTTPStatus.SERVICE_UNAVAILABLE
        body = json.dumps({"ready": answer.ready, "reason": answer.reason}) + "\n"
        return Response(status, body.encode(), "application/json")


async def _readiness(node: Node) -> Readiness:
    return readiness(node)
