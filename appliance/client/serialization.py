"""Encoders (serializers) and decoders (deserializers) for keys and values.

The 0.8 design's ``Encoder<T>.toMessage`` becomes ``to_bytes(obj) -> bytes``; consumers use the
mirror ``from_bytes(data) -> obj``. A plain callable is accepted wherever an encoder is.
Encoders must be thread-safe (the producer calls them from the sending thread).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Encoder", "Decoder", "DefaultEncoder", "StringEncoder", "JsonEncoder", "StringDecoder",
           "JsonDecoder", "as_encoder", "as_decoder"]


class Encoder(Protocol):
    def to_bytes(self, obj: Any) -> bytes | None: ...


class Decoder(Protocol):
    def from_bytes(self, data: bytes | None) -> Any: ...


class DefaultEncoder:
    """Bytes-like objects as they are, str as UTF-8, None as null. Anything else: TypeError."""

    def to_bytes(self, obj: Any) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        if isinstance(obj, str):
            return obj.encode("utf-8")
        raise TypeError(f"cannot send a {type(obj).__name__} without an encoder (key.serializer / "
                        "value.serializer): expected bytes or str")


class StringEncoder:
    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def to_bytes(self, obj: Any) -> bytes | None:
        return None if obj is None else str(obj).encode(self.encoding)


class JsonEncoder:
    def to_bytes(self, obj: Any) -> bytes | None:
        return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()


class StringDecoder:
    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def from_bytes(self, data: bytes | None) -> Any:
        return None if data is None else data.decode(self.encoding)


class JsonDecoder:
    def from_bytes(self, data: bytes | None) -> Any:
        return None if data is None else json.loads(data)


class _CallableEncoder:
    def __init__(self, fn: Callable[[Any], bytes | None]) -> None:
        self.fn = fn

    def to_bytes(self, obj: Any) -> bytes | None:
        return self.fn(obj)


class _CallableDecoder:
    def __init__(self, fn: Callable[[bytes | None], Any]) -> None:
        self.fn = fn

    def from_bytes(self, data: bytes | None) -> Any:
        return self.fn(data)


def as_encoder(x: Any) -> Encoder:
    """An Encoder from an Encoder, a callable, or None (DefaultEncoder). Raises TypeError."""
    if x is None:
        return DefaultEncoder()
    if hasattr(x, "to_bytes") and not isinstance(x, type):
        return x
    if isinstance(x, type) and hasattr(x, "to_bytes"):
        return x()
    if callable(x):
        return _CallableEncoder(x)
    raise TypeError(f"{x!r} is not an Encoder (needs to_bytes(obj)) nor a callable")


def as_decoder(x: Any) -> Decoder | None:
    """A Decoder from a Decoder, a callable, or None (no decoding)."""
    if x is None:
        return None
    if isinstance(x, type) and hasattr(x, "from_bytes"):
        return x()
    if hasattr(x, "from_bytes"):
        return x
    if callable(x):
        return _CallableDecoder(x)
    raise TypeError(f"{x!r} is not a Decoder (needs from_bytes(data)) nor a callable")
