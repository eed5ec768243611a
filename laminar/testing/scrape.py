"""Reading a node's ``/metrics``, ``/healthz`` and ``/ready`` in tests and benchmarks."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class Samples:
    """One scrape: every sample by name and labels."""

    values: dict[tuple[str, frozenset[tuple[str, str]]], float]
    text: str

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name{labels}`` (KeyError when absent)."""
        return self.values[name, frozenset(labels.items())]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples named ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, sample_labels), value in self.values.items()
            if sample == name and wanted <= sample_labels
        )

    def series(self) -> int:
        """How many samples the scrape holds."""
        return len(self.values)


def get(address: str, path: str, *, method: str = "GET", timeout_s: float = 10) -> tuple[int, str]:
    """``(status, body)`` of ``method path`` at ``address`` (``host:port``)."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def scrape(address: str, *, timeout_s: float = 10) -> Samples:
    """``/metrics`` of the node at ``address``, parsed; AssertionError unless 200."""
    status, body = get(address, "/metrics", timeout_s=timeout_s)
    assert status == 200, (status, body)
    return parse(body)


def parse(text: str) -> Samples:
    values = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return Samples(values, text)


def ready(address: str, *, timeout_s: float = 10) -> tuple[bool, str]:
    """``/ready``: whether the node is ready, and the reason it gives."""
    status, body = get(address, "/ready", timeout_s=timeout_s)
    answer = json.loads(body)
    assert (status == 200) is answer["ready"], (status, body)
    return bool(answer["ready"]), str(answer["reason"])
