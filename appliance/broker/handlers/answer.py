"""What a handler may answer besides a response body, and how an answer becomes bytes.

A leaf module: the handlers, the dispatcher and the connection all import it, it imports none
of them.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import appliance.protocol as proto
from appliance.errors import ErrorCode
from appliance.protocol.frames import response_header
from appliance.protocol.registry import API_BY_KEY, inter_broker_api_for_key
from appliance.shm.layout import SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["NO_RESPONSE", "CloseConnection", "RawBody", "api_name", "encode", "led_here", "unavailable_error"]

NO_RESPONSE = object()  # a handler's answer to a request that gets none (acks=0 produce)

_SIZE = struct.Struct(">i")


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


def led_here(ctx: BrokerContext, topic: str, partition: int) -> tuple[Any, int]:
    """(the partition's index entry, 0) when this broker leads it and its slot is online, else
    (None, the error a client gets: unknown, unavailable or not the leader)."""
    info = ctx.index.lookup(topic, partition)
    if info is None:  # no replica here: the cluster's metadata says whether it exists at all
        return None, ctx.view.not_served(topic, partition)
    state = ctx.table.state(info.slot)
    if state != SlotState.ONLINE:
        return None, unavailable_error(state)
    if not ctx.leads(info.slot):
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    return info, 0


def api_name(api_key: int) -> str:
    """The API's Kafka name (Produce, CreateTopics, LeaderAndIsr ...), for messages."""
    api = API_BY_KEY.get(api_key) or inter_broker_api_for_key(api_key)
    return api.__name__ if api is not None else f"API {api_key}"


def encode(request: Request, body: Any) -> Any:
    """A handler's body as response chunks (None: the request gets no response)."""
    if body is NO_RESPONSE:
        return None
    if isinstance(body, RawBody):  # encoded by the coordinator: add the frame header (v0/v1)
        api = API_BY_KEY.get(request.api_key) or inter_broker_api_for_key(request.api_key)
        head = response_header(api, request.api_version, request.correlation_id)
        return [_SIZE.pack(len(head) + len(body)) + head + body]
    return proto.encode_response(request, body)
