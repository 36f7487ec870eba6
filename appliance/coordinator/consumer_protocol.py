"""The "consumer" embedded protocol's assignment bytes (ConsumerProtocolAssignment v0-3).

Layout: int16 version, array of (string topic, array of int32 partition), bytes user_data
(plus, from v1, nothing the tools need). Used by consumer-groups --describe to show which member
owns which partition.
"""

from __future__ import annotations

import struct

__all__ = ["decode_assignment", "encode_assignment"]


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """Raises ValueError on bytes that are not a consumer assignment."""
    try:
        pos = 2  # version
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or n > len(data):
            raise ValueError("bad topic count")
        out = []
        for _ in range(n):
            (tlen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + tlen].decode()
            pos += tlen
            (pn,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if pn < 0 or pn * 4 > len(data) - pos:
                raise ValueError("bad partition count")
            parts = list(struct.unpack_from(f">{pn}i", data, pos))
            pos += 4 * pn
            out.append((topic, parts))
        return out
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer assignment: {e}") from e


def encode_assignment(assignment: list[tuple[str, list[int]]], user_data: bytes = b"", version: int = 0) -> bytes:
    out = bytearray(struct.pack(">hi", version, len(assignment)))
    for topic, parts in assignment:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    out += struct.pack(">i", len(user_data)) + user_data
    return bytes(out)
