"""The C library through ctypes, loaded once, for the few calls Python lacks
(``fallocate`` in :mod:`laminar.segment.fallocate`, ``mallopt`` in
:mod:`laminar.tuning`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _library() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:  # pragma: no cover - no C library to load
        return None


def function(name: str) -> Any | None:
    """The C library's function ``name`` (errno kept for ``ctypes.get_errno``), or
    None where the library or the function is missing."""
    library = _library()
    return None if library is None else getattr(library, name, None)
