"""Serializers (object -> bytes) and deserializers (bytes -> object) for keys and values.

A serializer is any callable ``(value) -> bytes``; a deserializer any callable
``(bytes) -> value``. The producer applies its serializers in ``send`` (so a value
that cannot be serialized fails there, not later in a batch); the consumer applies
its deserializers to each record it hands out. ``None`` as a serializer means the
value is already ``bytes`` (the fastest path, and the default).

The ones here: raw bytes, UTF-8 text, JSON (``json`` of the standard library,
compact) and msgpack (``use_bin_type``, so ``bytes`` and ``str`` stay apart).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from laminar.errors import InvalidInputError

T = TypeVar("T")

Serializer = Callable[[T], bytes]
"""Turns a key or value into the bytes stored in the record."""
Deserializer = Callable[[bytes], T]
"""Turns a record's key or value bytes back into an object."""

__all__ = [
    "Deserializer",
    "Serializer",
    "bytes_deserializer",
    "bytes_serializer",
    "json_deserializer",
    "json_serializer",
    "msgpack_deserializer",
    "msgpack_serializer",
    "str_deserializer",
    "str_serializer",
]


def bytes_serializer(value: bytes | bytearray | memoryview) -> bytes:
    """``bytes`` as they are (a ``bytearray`` or ``memoryview`` is copied)."""
    if type(value) is bytes:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidInputError(f"expected bytes, got {type(value).__name__}")


def bytes_deserializer(data: bytes) -> bytes:
    """The bytes as stored."""
    return data


def str_serializer(value: str) -> bytes:
    """Text as UTF-8."""
    if not isinstance(value, str):
        raise InvalidInputError(f"expected str, got {type(value).__name__}")
    return value.encode()


def str_deserializer(data: bytes) -> str:
    """UTF-8 bytes as text (invalid UTF-8 raises ``UnicodeDecodeError``)."""
    return data.decode()


_JSON_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_serializer(value: Any) -> bytes:
    """Any JSON-encodable object as compact UTF-8 JSON."""
    try:
        return _JSON_ENCODER.encode(value).encode()
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"value is not JSON-encodable: {error}") from None


def json_deserializer(data: bytes) -> Any:
    """UTF-8 JSON bytes as an object."""
    return json.loads(data)


def msgpack_serializer(value: Any) -> bytes:
    """Any msgpack-encodable object (``bytes`` stay bin, ``str`` stays str)."""
    try:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidInputError(f"value is not msgpack-encodable: {error}") from None


def msgpack_deserializer(data: bytes) -> Any:
    """msgpack bytes as an object (``raw=False``: str stays str)."""
    return msgpack.unpackb(data, raw=False)
