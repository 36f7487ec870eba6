"""The Kafka wire protocol, sans-I/O: types, declarative per-version schemas, framing and
connection state machines for both the broker and our client. No sockets, no asyncio, no
file access anywhere in this package: callers move the bytes."""

from __future__ import annotations

from appliance.protocol.connection import (
    NEED_DATA,
    PEER_CLOSED,
    ClientConnection,
    ConnectionState,
    RejectedRequest,
    Request,
    Response,
    ServerConnection,
    UnknownApiKey,
    UnsupportedVersion,
)
from appliance.protocol.errors import (
    LocalProtocolError,
    ProtocolDecodeError,
    ProtocolEncodeError,
    RemoteProtocolError,
)
from appliance.protocol.frames import (
    FileSlice,
    api_versions_fallback_response,
    encode_request_frame,
    encode_response,
    encode_response_bytes,
    encode_response_frame,
)
from appliance.protocol.registry import (
    API_BY_KEY,
    SUPPORTED_VERSIONS,
    api_versions_entries,
)

__all__ = [
    "NEED_DATA", "PEER_CLOSED", "ClientConnection", "ConnectionState", "RejectedRequest",
    "Request", "Response", "ServerConnection", "UnknownApiKey", "UnsupportedVersion",
    "LocalProtocolError", "ProtocolDecodeError", "ProtocolEncodeError", "RemoteProtocolError",
    "FileSlice", "api_versions_fallback_response", "encode_request_frame", "encode_response",
    "encode_response_bytes", "encode_response_frame",
    "API_BY_KEY", "SUPPORTED_VERSIONS", "api_versions_entries",
]
