"""What a handler may answer besides a response body, and how an answer becomes bytes.

A leaf module: the handlers, the dispatcher and the connection all import it, it imports none
of them.
"""

from __future__ import annotations

import struct
from typing import Any

import appliance.protocol as proto

__all__ = ["NO_RESPONSE", "CloseConnection", "RawBody", "encode"]

NO_RESPONSE = object()  # a handler's answer to a request that gets none (acks=0 produce)

_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id (response header v0)


class CloseConnection(Exception):
    """Raised by a handler (or queued for a rejected request): answer nothing, close."""


class RawBody(bytes):
    """A response body already encoded (by the coordinator) for the request's version."""


def encode(request: Any, body: Any) -> Any:
    """A handler's body as response chunks (None: the request gets no response)."""
    if body is NO_RESPONSE:
        return None
    if isinstance(body, RawBody):  # encoded by the coordinator: add the frame header
        return [_FRAME_HEAD.pack(len(body) + 4, request.correlation_id) + body]
    return proto.encode_response(request, body)
