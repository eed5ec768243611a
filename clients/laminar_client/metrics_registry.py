"""Registering a producer's or consumer's metrics with a ``prometheus_client``
registry the application owns (:func:`register_metrics`), and unregistering them
when it closes (:class:`Registrations`).

This module does not import ``prometheus_client`` (``import laminar_client`` must
not need it): :func:`register_metrics` imports :mod:`laminar_client._prometheus`,
which does, when it is first called (the optional extra ``laminar[metrics]``).
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any

from laminar.errors import ClientClosedError, InvalidInputError
from laminar_client.metrics import MetricsSource

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["CLIENT_ID_CHARACTERS_MAX", "Registrations", "check_client_id", "register_metrics"]

CLIENT_ID_CHARACTERS_MAX = 128
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:@/-]+")


class Registrations:
    """The registries a client's collectors were registered with, unregistered
    together when the client closes (:meth:`close`)."""

    __slots__ = ("_closed", "_entries")

    def __init__(self) -> None:
        self._entries: list[tuple[CollectorRegistry, Any]] = []
        self._closed = False

    def add(self, registry: CollectorRegistry, collector: Any) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed: its metrics cannot be registered")
        if any(known is registry for known, _ in self._entries):
            raise InvalidInputError("this client's metrics are registered with that registry")
        registry.register(collector)
        self._entries.append((registry, collector))

    def close(self) -> None:
        """Unregister every collector (idempotent)."""
        self._closed = True
        entries, self._entries = self._entries, []
        for registry, collector in entries:
            with contextlib.suppress(KeyError):  # the application unregistered it
                registry.unregister(collector)


def check_client_id(client_id: str) -> str:
    """``client_id`` if it is a usable label value, else :class:`InvalidInputError`."""
    if (
        not isinstance(client_id, str)
        or len(client_id) > CLIENT_ID_CHARACTERS_MAX
        or not _CLIENT_ID.fullmatch(client_id)
    ):
        raise InvalidInputError(
            f"client_id must be 1 to {CLIENT_ID_CHARACTERS_MAX} characters of letters, "
            f"digits and . _ : @ / -, got {client_id!r}"
        )
    return client_id


def register_metrics(
    source: MetricsSource,
    registrations: Registrations,
    registry: CollectorRegistry,
    client_id: str,
) -> None:
    """Register a collector reading ``source.metrics()`` at each scrape with
    ``registry`` (what :meth:`Producer.register_metrics` and
    :meth:`Consumer.register_metrics` do); it is unregistered when the client closes.
    Raises :class:`InvalidInputError` when ``prometheus_client`` is not installed
    (the ``laminar[metrics]`` extra)."""
    check_client_id(client_id)
    try:
        from laminar_client._prometheus import collector_for
    except ImportError as error:
        raise InvalidInputError(
            "register_metrics needs prometheus_client: pip install 'laminar[metrics]'"
        ) from error
    registrations.add(registry, collector_for(source, client_id))
