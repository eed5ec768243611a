"""Headless Chromium for the status page's tests: the DOM after the page's script
ran, and screenshots. No WebDriver: ``chromium --headless --dump-dom
--virtual-time-budget=MS`` loads the page, runs its timers and fetches for that
much virtual time and prints the DOM.

Each call starts its own browser with a new empty profile (removed afterwards)
and ends it within ``timeout_s``. :func:`chromium` is None where the Debian
package ``chromium`` is not installed (tests skip).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium() -> str | None:
    """The Chromium binary, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(arguments: list[str], timeout_s: float) -> str:
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="laminar-chromium-") as profile:
        completed = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *arguments],
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    if completed.returncode != 0:
        raise RuntimeError(
            f"chromium exited {completed.returncode}: {completed.stderr.decode()[-2000:]}"
        )
    return completed.stdout.decode()


def dump_dom(url: str, *, budget_ms: int = 3_000, timeout_s: float = 30) -> str:
    """The DOM of ``url`` after ``budget_ms`` of virtual time, serialised."""
    return _run(["--dump-dom", f"--virtual-time-budget={budget_ms}", url], timeout_s)


def screenshot(
    url: str, path: Path, *, budget_ms: int = 3_000, size: str = "1280,900", timeout_s: float = 30
) -> None:
    """A PNG of ``url`` after ``budget_ms`` of virtual time, written to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _run(
        [
            f"--screenshot={path}",
            f"--window-size={size}",
            "--hide-scrollbars",
            f"--virtual-time-budget={budget_ms}",
            url,
        ],
        timeout_s,
    )


@dataclass
class Element:
    tag: str
    attributes: dict[str, str]
    text: list[str] = field(default_factory=list)

    @property
    def content(self) -> str:
        """The text inside the element (its descendants' too)."""
        return "".join(self.text)


class Dom(HTMLParser):
    """Every element of a serialised DOM, in document order, with its text."""

    _VOID = frozenset(
        ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source")
    )

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs})
        self.elements.append(element)
        if tag not in self._VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index].tag == tag:
                del self._open[index:]
                return

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text.append(data)

    def find(self, attribute: str, value: str | None = None) -> list[Element]:
        """Elements with ``attribute`` (equal to ``value`` when given)."""
        return [
            element
            for element in self.elements
            if attribute in element.attributes
            and (value is None or element.attributes[attribute] == value)
        ]

    def one(self, attribute: str, value: str) -> Element:
        found = self.find(attribute, value)
        assert len(found) == 1, (attribute, value, found)
        return found[0]
