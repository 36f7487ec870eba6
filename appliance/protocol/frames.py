"""Kafka framing: int32 size prefixes, request headers v1/v2, response headers v0/v1, frame
encoders, the ApiVersions fallback answer, and the linear frame buffer both connection sides use.

Layouts::

    frame            = size:int32  payload[size]
    request header 1 = api_key:int16 api_version:int16 correlation_id:int32 client_id:nullable string
    request header 2 = request header 1, tagged fields          (flexible versions, KIP-482)
    response header 0= correlation_id:int32
    response header 1= correlation_id:int32 tagged fields       (flexible versions but ApiVersions)

client_id stays a non-compact string in header v2 so a broker can read it before it knows
whether the version is flexible; ApiVersions always answers with header v0 (KIP-511) so a
client can read the answer whatever version the broker picked.

Nothing here does I/O; everything is pure bytes in, bytes out. The functions are thread-safe;
a FrameBuffer is not (one per connection).
"""

from __future__ import annotations

import struct
from typing import Any

from appliance.errors import ErrorCode
from appliance.protocol.errors import ProtocolDecodeError, ProtocolEncodeError, RemoteProtocolError
from appliance.protocol.messages import ApiVersions
from appliance.protocol.registry import API_BY_KEY, api_versions_entries
from appliance.protocol.schema import ApiMessage
from appliance.protocol.types import (
    FileSlice,
    decode_nullable_string,
    skip_tagged_fields,
    write_nullable_string,
)

__all__ = [
    "SIZE", "REQUEST_HEADER", "RESPONSE_HEADER", "FileSlice", "Chunk", "FrameBuffer",
    "parse_request_header", "encode_request_frame", "encode_response_frame", "encode_response",
    "encode_response_bytes", "frame_length", "api_versions_fallback_response",
    "response_header", "response_body_offset", "skip_request_header_tags",
]

SIZE = struct.Struct(">i")  # the frame size prefix
REQUEST_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id (client_id follows)
RESPONSE_HEADER = struct.Struct(">i")  # correlation_id

Chunk = bytes | bytearray | memoryview | FileSlice

# Compact the receive buffer once at least this much has been consumed and it is more than
# half of the buffer, so each byte is moved O(1) times (linear buffering).
_COMPACT_AT = 64 * 1024


def parse_request_header(frame: bytes | memoryview) -> tuple[int, int, int, str | None, int]:
    """(api_key, api_version, correlation_id, client_id, body_offset) of a request frame's
    payload. Raises ProtocolDecodeError if the header is truncated or its client_id is bad.
    Works for header v1 and for the start of header v2 (whose client_id is the same type)."""
    if len(frame) < REQUEST_HEADER.size:
        raise ProtocolDecodeError(f"request of {len(frame)} bytes is shorter than its header")
    api_key, api_version, correlation_id = REQUEST_HEADER.unpack_from(frame, 0)
    client_id, pos = decode_nullable_string(
        frame if isinstance(frame, memoryview) else memoryview(frame), REQUEST_HEADER.size)
    return api_key, api_version, correlation_id, client_id, pos


def skip_request_header_tags(frame: memoryview, pos: int) -> int:
    """The body offset of a request header v2 whose client_id ends at ``pos`` (its tagged
    fields skipped: no request header tag is defined for the APIs we serve)."""
    return skip_tagged_fields(frame, pos)


def _api(api_key: int) -> type[ApiMessage]:
    api = API_BY_KEY.get(api_key)
    if api is None:
        from appliance.protocol.registry import inter_broker_api_for_key

        api = inter_broker_api_for_key(api_key)
    if api is None:
        raise ProtocolEncodeError(f"unknown api_key {api_key}")
    return api


def response_header(api: type[ApiMessage], api_version: int, correlation_id: int) -> bytes:
    """The response header for ``api`` at ``api_version``: v1 (an empty tagged-field section
    after the correlation id) in flexible versions, v0 otherwise and always for ApiVersions."""
    head = RESPONSE_HEADER.pack(correlation_id)
    return head + b"\x00" if api.response_header_flexible(api_version) else head


def response_body_offset(api: type[ApiMessage], api_version: int, frame: memoryview) -> int:
    """Where the body starts in a response frame's payload (after header v0 or v1)."""
    if api.response_header_flexible(api_version):
        return skip_tagged_fields(frame, RESPONSE_HEADER.size)
    return RESPONSE_HEADER.size


def encode_request_frame(api_key: int, api_version: int, correlation_id: int,
                         client_id: str | None, body: Any) -> bytes:
    """A whole request frame (size, header v1 or v2 for flexible versions, body). Raises
    ProtocolEncodeError, UnsupportedVersionError. A FileSlice in a request is refused."""
    api = _api(api_key)
    out = bytearray(SIZE.size)
    out += REQUEST_HEADER.pack(api_key, api_version, correlation_id)
    write_nullable_string(client_id, out)
    if api.is_flexible(api_version):
        out += b"\x00"  # header v2: no tagged fields
    parts: list = []
    api.write_request(api_version, body, out, parts)
    if not parts:
        SIZE.pack_into(out, 0, len(out) - SIZE.size)
        return bytes(out)
    if any(isinstance(p, FileSlice) for p in parts):
        raise ProtocolEncodeError("a request cannot carry a FileSlice")
    chunks = [*parts, out]
    total = frame_length(chunks) - SIZE.size
    # the first chunk starts with the 4 reserved size bytes: replace them
    return b"".join([SIZE.pack(total), memoryview(chunks[0])[SIZE.size:], *chunks[1:]])


def frame_length(chunks: list[Chunk]) -> int:
    """Total bytes the chunks put on the wire (FileSlices count their length)."""
    return sum(c.length if isinstance(c, FileSlice) else c.nbytes if isinstance(c, memoryview) else len(c)
               for c in chunks)


def encode_response_frame(api_key: int, api_version: int, correlation_id: int, body: Any) -> list[Chunk]:
    """A whole response frame (size, header v0/v1, body) as chunks to write in order: bytes-like
    pieces (joined wherever possible) and the FileSlices the body's Records fields held, which
    are not read — only their lengths are counted into the size prefix. Large in-memory
    Records values (>= types.RECORDS_INLINE_LIMIT) are passed through uncopied as their own
    chunk. Raises ProtocolEncodeError, UnsupportedVersionError."""
    api = _api(api_key)
    out = bytearray(SIZE.size)
    out += response_header(api, api_version, correlation_id)
    parts: list[Chunk] = []
    api.write_response(api_version, body, out, parts)
    if not parts:
        SIZE.pack_into(out, 0, len(out) - SIZE.size)
        return [bytes(out)]
    if out:
        parts.append(bytes(out))
    total = frame_length(parts) - SIZE.size
    if total > 0x7FFFFFFF:
        raise ProtocolEncodeError(f"response of {total} bytes exceeds the int32 frame size")
    first = bytearray(parts[0])  # always the bytes holding the reserved size prefix
    SIZE.pack_into(first, 0, total)
    parts[0] = bytes(first)
    return parts


def encode_response(request: Any, body: Any) -> list[Chunk]:
    """Encode ``body`` as the response to ``request`` (anything with api_key, api_version and
    correlation_id, e.g. a connection.Request). See encode_response_frame."""
    return encode_response_frame(request.api_key, request.api_version, request.correlation_id, body)


def encode_response_bytes(request: Any, body: Any) -> bytes:
    """encode_response joined into one bytes object. Raises ProtocolEncodeError if the body
    holds a FileSlice."""
    chunks = encode_response(request, body)
    if len(chunks) == 1:
        return bytes(chunks[0])  # type: ignore[arg-type]
    if any(isinstance(c, FileSlice) for c in chunks):
        raise ProtocolEncodeError("response holds a FileSlice; use encode_response")
    return b"".join(chunks)  # type: ignore[arg-type]


def api_versions_fallback_response(correlation_id: int) -> bytes:
    """The whole frame answering an ApiVersions request of a version we do not support:
    error UNSUPPORTED_VERSION in the v0 body layout (error_code, then our api_keys array; no
    throttle time, no tagged fields) behind a v0 response header, as Kafka sends it so that
    clients retry with a version from the list."""
    body = ApiVersions.encode_response(0, {
        "error_code": int(ErrorCode.UNSUPPORTED_VERSION), "api_keys": api_versions_entries()})
    return SIZE.pack(RESPONSE_HEADER.size + len(body)) + RESPONSE_HEADER.pack(correlation_id) + body


class FrameBuffer:
    """Accumulates received bytes and cuts them into size-prefixed frames.

    Consumed bytes are tracked by an offset and compacted only occasionally, so total work is
    linear in the bytes received however they are chunked. Frames are returned as read-only
    memoryviews that never alias bytes the buffer will reuse, so zero-copy slices of them
    (Records) stay valid for as long as they are held. Not thread-safe.
    """

    __slots__ = ("_buf", "_pos", "_max", "eof")

    def __init__(self, max_frame_size: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._max = max_frame_size
        self.eof = False

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; an empty ``data`` marks the end of the stream."""
        if not data:
            self.eof = True
        else:
            self._buf += data

    def pending(self) -> bool:
        """True when bytes are buffered or the stream has ended (the next frame is not
        simply the next bytes received)."""
        return self.eof or len(self._buf) > self._pos

    def allows(self, size: int) -> bool:
        """Whether a frame of ``size`` payload bytes is within the limits."""
        return 0 < size <= self._max

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned in a frame."""
        return len(self._buf) - self._pos

    def next_frame(self) -> memoryview | None:
        """The next whole frame's payload (without its size prefix) as a read-only
        memoryview that stays valid however the buffer changes later, or None if more bytes
        are needed. When the frame ends the buffered data (the usual case) the buffer itself is
        handed over without copying; otherwise the frame is copied out once.

        Raises RemoteProtocolError for a size <= 0 or above the maximum (checked as soon as
        the 4 size bytes arrive) and for a stream that ended inside a frame."""
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < SIZE.size:
            if self.eof and avail:
                raise RemoteProtocolError(f"connection closed inside a frame size ({avail} bytes)")
            return None
        (size,) = SIZE.unpack_from(buf, pos)
        if size <= 0 or size > self._max:
            raise RemoteProtocolError(f"invalid frame size {size} (allowed 1..{self._max})")
        end = pos + SIZE.size + size
        if end > len(buf):
            if self.eof:
                raise RemoteProtocolError(
                    f"connection closed inside a frame ({avail - SIZE.size} of {size} bytes)")
            return None
        if end == len(buf):
            # Hand the whole buffer to the frame (its view pins it) and start a new one.
            self._buf = bytearray()
            self._pos = 0
            return memoryview(buf)[pos + SIZE.size:end].toreadonly()
        with memoryview(buf) as view:
            frame = view[pos + SIZE.size:end].tobytes()
        if end >= _COMPACT_AT and end * 2 >= len(buf):
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return memoryview(frame)
