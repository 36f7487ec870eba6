"""Sans-I/O connection state machines for both ends of a Kafka connection (h11 style).

The I/O shell feeds received bytes with ``receive_data(data)`` (``b""`` = the peer closed)
and pulls events with ``next_event()`` until it returns :data:`NEED_DATA`.

Server side, events are:

* :class:`Request` — a decoded request; answer it with ``frames.encode_response(req, body)``
  unless ``req.expects_response`` is False (Produce with acks=0).
* :class:`UnsupportedVersion` / :class:`UnknownApiKey` — requests we will not decode. If
  ``event.response`` is not None (ApiVersions of an unknown version) send it and carry on;
  if ``event.close_connection`` close the socket, as Kafka does.
* :data:`PEER_CLOSED` — the peer closed cleanly between frames.

Broken framing or an undecodable body raises :class:`RemoteProtocolError` (code
INVALID_REQUEST) and moves the connection to ERROR; every later call raises
:class:`LocalProtocolError`. Connections are not thread-safe: one per socket, one thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from appliance.errors import ErrorCode, UnsupportedVersionError
from appliance.protocol.errors import (
    LocalProtocolError,
    ProtocolDecodeError,
    RemoteProtocolError,
)
from appliance.protocol.frames import (
    REQUEST_HEADER,
    RESPONSE_HEADER,
    SIZE,
    FrameBuffer,
    api_versions_fallback_response,
    encode_request_frame,
    parse_request_header,
    response_body_offset,
    skip_request_header_tags,
)
from appliance.protocol.messages import ApiVersions, Produce
from appliance.protocol.registry import API_BY_KEY
from appliance.protocol.schema import ApiMessage

__all__ = [
    "NEED_DATA", "PEER_CLOSED", "ConnectionState", "Request", "RejectedRequest", "UnknownApiKey",
    "UnsupportedVersion", "Response", "ServerConnection", "ClientConnection",
    "DEFAULT_MAX_REQUEST_SIZE", "DEFAULT_MAX_RESPONSE_SIZE",
]

DEFAULT_MAX_REQUEST_SIZE = 104857600  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_RESPONSE_SIZE = 1 << 30


class _Sentinel:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


NEED_DATA: Any = _Sentinel("NEED_DATA")
PEER_CLOSED: Any = _Sentinel("PEER_CLOSED")


class ConnectionState(Enum):
    OPEN = "OPEN"
    MUST_CLOSE = "MUST_CLOSE"  # we handed out an event telling the caller to close
    CLOSED = "CLOSED"  # the peer closed cleanly
    ERROR = "ERROR"  # the peer broke the protocol


@dataclass(slots=True)
class Request:
    """A decoded request. ``size`` is the frame's payload size (header + body)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int

    @property
    def api(self) -> type[ApiMessage]:
        return API_BY_KEY[self.api_key]

    @property
    def expects_response(self) -> bool:
        """False only for Produce with acks=0, which Kafka never answers."""
        return not (self.api_key == Produce.API_KEY and self.body.acks == 0)


@dataclass(slots=True, frozen=True)
class RejectedRequest:
    """A request we do not decode. Send ``response`` if it is not None; close the connection
    if ``close_connection``. ``client_id`` is None if the header was too short to hold it."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int
    error: ErrorCode
    close_connection: bool
    response: bytes | None


@dataclass(slots=True, frozen=True)
class UnknownApiKey(RejectedRequest):
    """An api_key we do not implement (Kafka closes the connection)."""


@dataclass(slots=True, frozen=True)
class UnsupportedVersion(RejectedRequest):
    """A version outside our range. For ApiVersions ``response`` holds the v0-layout
    UNSUPPORTED_VERSION answer and the connection stays open; otherwise close."""


@dataclass(slots=True)
class Response:
    """A decoded response, matched to the request that had its correlation id."""

    correlation_id: int
    api_key: int
    api_version: int
    body: Any
    size: int


class _Connection:
    def __init__(self, max_frame_size: int) -> None:
        if max_frame_size <= 0:
            raise ValueError("max frame size must be positive")
        self._frames = FrameBuffer(max_frame_size)
        self.state = ConnectionState.OPEN

    def _check_usable(self) -> None:
        if self.state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"connection is {self.state.value}; it can no longer be used")

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the socket; ``b""`` means the peer closed its side.
        Raises LocalProtocolError after an error/close or if data follows the end."""
        self._check_usable()
        if self._frames.eof and data:
            raise LocalProtocolError("data received after the end of the stream")
        self._frames.feed(data)

    def _fail(self, message: str, cause: BaseException | None = None) -> RemoteProtocolError:
        self.state = ConnectionState.ERROR
        err = RemoteProtocolError(message)
        err.__cause__ = cause
        return err

    def _next_frame(self) -> memoryview | None:
        """Next frame, None if more data is needed; handles EOF and framing errors."""
        self._check_usable()
        try:
            frame = self._frames.next_frame()
        except RemoteProtocolError as e:
            raise self._fail(str(e)) from None
        if frame is None and self._frames.eof:
            self.state = ConnectionState.CLOSED
        return frame


class ServerConnection(_Connection):
    """The broker's end: bytes in -> Request events; see the module docstring."""

    def __init__(self, max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
                 extra_apis: dict[int, type[ApiMessage]] | None = None) -> None:
        super().__init__(max_request_size)
        # cluster mode: the inter-broker APIs (LeaderAndIsr ...), decoded but never advertised
        self.extra_apis = extra_apis

    def frame_at(self, data: bytes | memoryview, pos: int) -> memoryview | None:
        """The payload of the whole frame of an allowed size that starts at ``pos`` in
        ``data``, when nothing is buffered (then the caller may read it itself instead of
        feeding it, and feed only what follows it: the stream state is unchanged either way);
        None otherwise (feed ``data[pos:]`` with :meth:`receive_data`)."""
        n = len(data)
        if n - pos < 8 or self.state is not ConnectionState.OPEN or self._frames.pending():
            return None
        (size,) = SIZE.unpack_from(data, pos)
        end = pos + 4 + size
        if end > n or not self._frames.allows(size):
            return None
        return memoryview(data)[pos + 4:end]

    def next_raw_frame(self) -> Any:
        """The next frame's payload as bytes, undecoded (SASL tokens after a v0 SaslHandshake
        travel as bare size-prefixed frames), NEED_DATA, or PEER_CLOSED."""
        frame = self._next_frame()
        if frame is None:
            return PEER_CLOSED if self.state is ConnectionState.CLOSED else NEED_DATA
        return bytes(frame)

    def next_event(self) -> Any:
        """The next Request / RejectedRequest event, NEED_DATA, or PEER_CLOSED.

        Raises RemoteProtocolError (connection now ERROR) for a bad size prefix, a stream
        that ended mid-frame, or a request that does not decode; LocalProtocolError if the
        connection is no longer usable (after ERROR, MUST_CLOSE or PEER_CLOSED)."""
        frame = self._next_frame()
        if frame is None:
            return PEER_CLOSED if self.state is ConnectionState.CLOSED else NEED_DATA
        size = len(frame)
        if size < REQUEST_HEADER.size:
            raise self._fail(f"request of {size} bytes is shorter than the request header")
        api_key, api_version, correlation_id = REQUEST_HEADER.unpack_from(frame, 0)
        api = API_BY_KEY.get(api_key)
        if api is None and self.extra_apis is not None:
            api = self.extra_apis.get(api_key)
        if api is None or not api.MIN_VERSION <= api_version <= api.MAX_VERSION:
            return self._reject(api, frame, api_key, api_version, correlation_id)
        try:
            _, _, _, client_id, pos = parse_request_header(frame)
            flexible = api.is_flexible(api_version)
            if flexible:
                pos = skip_request_header_tags(frame, pos)
            # flexible versions: trailing bytes are ignored, as Kafka's own parser does
            body = api.decode_request(api_version, frame, pos, trailing_ok=flexible)
        except ProtocolDecodeError as e:
            raise self._fail(f"cannot decode {api.__name__} v{api_version} request "
                             f"(correlation id {correlation_id}): {e}", e) from None
        return Request(api_key, api_version, correlation_id, client_id, body, size)

    def _reject(self, api: type[ApiMessage] | None, frame: memoryview, api_key: int, api_version: int,
                correlation_id: int) -> RejectedRequest:
        try:  # header v1 and v2 both start with client_id as int16 string; best effort
            client_id = parse_request_header(frame)[3]
        except ProtocolDecodeError:
            client_id = None
        common = (api_key, api_version, correlation_id, client_id, len(frame))
        if api is None:
            self.state = ConnectionState.MUST_CLOSE
            return UnknownApiKey(*common, ErrorCode.INVALID_REQUEST, True, None)
        if api is ApiVersions:
            # Kafka answers in the v0 layout so the client can retry with a version we list.
            return UnsupportedVersion(*common, ErrorCode.UNSUPPORTED_VERSION, False,
                                      api_versions_fallback_response(correlation_id))
        self.state = ConnectionState.MUST_CLOSE
        return UnsupportedVersion(*common, ErrorCode.UNSUPPORTED_VERSION, True, None)


class ClientConnection(_Connection):
    """Our client's end: ``send_request`` builds frames and remembers each correlation id's
    api/version so ``next_event`` can decode the matching response. Responses must arrive in
    request order (Kafka guarantees it per connection); anything else is a RemoteProtocolError."""

    def __init__(self, client_id: str | None = "appliance",
                 max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE) -> None:
        super().__init__(max_response_size)
        self.client_id = client_id
        self._next_correlation_id = 0
        self._pending: dict[int, tuple[int, int]] = {}

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not arrived yet."""
        return len(self._pending)

    def send_request(self, api_key: int, api_version: int, body: Any, client_id: str | None = None,
                     expect_response: bool | None = None) -> tuple[int, bytes]:
        """Encode a request frame; returns (correlation_id, frame bytes to send).

        ``expect_response`` defaults to False for Produce with acks=0 and True otherwise.
        Raises UnsupportedVersionError for an api/version we do not speak,
        ProtocolEncodeError if the body does not fit the schema, LocalProtocolError if the
        connection is unusable."""
        self._check_usable()
        api = API_BY_KEY.get(api_key)
        if api is None:
            raise UnsupportedVersionError(f"unknown api_key {api_key}")
        correlation_id = self._next_correlation_id
        frame = encode_request_frame(api_key, api_version, correlation_id,
                                     self.client_id if client_id is None else client_id, body)
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        if expect_response is None:
            acks = body.get("acks") if isinstance(body, dict) else getattr(body, "acks", None)
            expect_response = not (api_key == Produce.API_KEY and acks == 0)
        if expect_response:
            self._pending[correlation_id] = (api_key, api_version)
        return correlation_id, frame

    def next_event(self) -> Any:
        """The next Response, NEED_DATA, or PEER_CLOSED. Raises RemoteProtocolError for bad
        framing, an unexpected correlation id or an undecodable body (connection now ERROR)."""
        frame = self._next_frame()
        if frame is None:
            return PEER_CLOSED if self.state is ConnectionState.CLOSED else NEED_DATA
        if len(frame) < RESPONSE_HEADER.size:
            raise self._fail(f"response of {len(frame)} bytes is shorter than its header")
        (correlation_id,) = RESPONSE_HEADER.unpack_from(frame, 0)
        expected = next(iter(self._pending), None)
        if correlation_id != expected:
            raise self._fail(f"response correlation id {correlation_id}, expected {expected}")
        api_key, api_version = self._pending.pop(correlation_id)
        api = API_BY_KEY[api_key]
        try:
            body = api.decode_response(api_version, frame, response_body_offset(api, api_version, frame))
        except ProtocolDecodeError as e:
            body = self._api_versions_fallback(api_key, api_version, frame)
            if body is None:
                raise self._fail(f"cannot decode {api.__name__} v{api_version} response: {e}", e) from None
        return Response(correlation_id, api_key, api_version, body, len(frame))

    @staticmethod
    def _api_versions_fallback(api_key: int, api_version: int, frame: memoryview) -> Any:
        """A broker that does not support our ApiVersions version answers in the v0 layout
        with UNSUPPORTED_VERSION (as we do); decode that instead of failing."""
        if api_key != ApiVersions.API_KEY or api_version == 0:
            return None
        try:
            body = ApiVersions.decode_response(0, frame, RESPONSE_HEADER.size)
        except ProtocolDecodeError:
            return None
        return body if body.error_code == ErrorCode.UNSUPPORTED_VERSION else None
