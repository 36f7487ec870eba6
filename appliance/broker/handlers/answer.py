"""What a handler may answer besides a response body, and how an answer becomes bytes.

A leaf module: the handlers, the dispatcher and the connection all import it, it imports none
of them.
"""

from __future__ import annotations

import struct
from typing import Any

import appliance.protocol as proto
from appliance.errors import ErrorCode
from appliance.shm.layout import SlotState

__all__ = ["NO_RESPONSE", "CloseConnection", "RawBody", "encode", "unavailable_error"]

NO_RESPONSE = object()  # a handler's answer to a request that gets none (acks=0 produce)

_FRAME_HEAD = struct.Struct(">ii")  # size, correlation id (response header v0)


class CloseConnection(Exception):
    """Raised by a handler (or queued for a rejected request): answer nothing, close."""


class RawBody(bytes):
    """A response body already encoded (by the coordinator) for the request's version."""


def unavailable_error(state: int) -> int:
    """The error for a partition whose slot is not ONLINE: a failed log dir answers
    KAFKA_STORAGE_ERROR (KIP-112), a worker that is recovering NOT_LEADER_OR_FOLLOWER (both
    retriable for clients)."""
    if state == SlotState.STORAGE_ERROR:
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NOT_LEADER_OR_FOLLOWER


def encode(request: Any, body: Any) -> Any:
    """A handler's body as response chunks (None: the request gets no response)."""
    if body is NO_RESPONSE:
        return None
    if isinstance(body, RawBody):  # encoded by the coordinator: add the frame header
        return [_FRAME_HEAD.pack(len(body) + 4, request.correlation_id) + body]
    return proto.encode_response(request, body)
