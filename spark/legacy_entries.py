"""The legacy (magic 0/1) messages of a run, scanned by :func:`native.legacy_decode.scan_legacy`,
into one :class:`native.decode.DecodeOutput`: the same rows a v2 batch of them would give.

Consecutive uncompressed messages make one section the kernel reads where they lie (in the
mmap'd segment or the Fetch answer); a compressed wrapper's value is inflated here (gzip,
snappy, lz4; magic 0's lz4 with Kafka 0.8's broken frame checksum is accepted, see
:mod:`appliance.records.compression`) and becomes a section of its own, whose inner messages
the kernel checks and numbers. A wrapper wholly below the wanted range is not inflated.

Errors: CorruptRecordError naming the segment file (or the Fetch answer) and the byte position
of the message. Stateless, thread-safe.
"""

from __future__ import annotations

import numpy as np

from appliance.errors import CorruptRecordError
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED, decompress
from native import legacy_layout as LL
from native.decode import DecodeOutput
from native.legacy_decode import LEGACY_ERRORS, LEGACY_OK, LegacyScan, decode_legacy

__all__ = ["decode_legacy_scanned"]


def decode_legacy_scanned(buf: np.ndarray, base_pos: int, scan: LegacyScan, path: str,
                          file_pos0: int, lo: int, hi: int,
                          include_headers: bool) -> DecodeOutput | None:
    """Decode the messages ``scan`` found in ``buf`` keeping ``lo <= offset < hi``; None when
    there is nothing to decode. Byte positions in errors are ``file_pos0 + pos - base_pos``."""
    if scan.count == 0:
        return None
    pos = scan.positions
    ends = pos + scan.sizes
    codecs = scan.attributes & LL.CODEC_MASK
    sections: list[tuple[int, int, int, int, int, int, int]] = []  # start, end, inner, ...
    entry_of: list[int] = []  # the first entry of each section, for error messages
    if not codecs.any():
        sections.append((int(pos[0]), int(ends[-1]), 0, 0, 0, 0, 0))
        entry_of.append(0)
        work = buf
    else:
        # Inflated sets and the plain runs between them side by side: one kernel call.
        parts: list[bytes | memoryview] = []
        at = 0
        mv = memoryview(buf)
        i = 0
        while i < scan.count:
            if codecs[i] == 0:
                j = i
                while j + 1 < scan.count and codecs[j + 1] == 0:
                    j += 1
                raw = mv[int(pos[i]):int(ends[j])]
                sections.append((at, at + len(raw), 0, 0, 0, 0, 0))
            elif int(scan.offsets[i]) < lo:
                i += 1  # every inner offset is at most the wrapper's
                continue
            else:
                j = i
                vs = int(scan.value_starts[i])
                try:
                    raw = decompress(int(codecs[i]), mv[vs:vs + int(scan.value_sizes[i])],
                                     DEFAULT_MAX_DECOMPRESSED)
                except Exception as e:  # noqa: BLE001 - every codec failure means corrupt data
                    raise CorruptRecordError(
                        f"{path}: message at byte {file_pos0 + int(pos[i]) - base_pos} "
                        f"(offset {int(scan.offsets[i])}) does not decompress: {e}") from None
                lat = int(scan.attributes[i]) & LL.TIMESTAMP_TYPE_BIT
                sections.append((at, at + len(raw), 1, int(scan.offsets[i]),
                                 int(scan.magics[i]), int(scan.timestamps[i]), 1 if lat else 0))
            parts.append(raw)
            entry_of.append(i)
            at += len(raw)
            i = j + 1
        if not sections:
            return None
        work = np.frombuffer(b"".join(parts), np.uint8)
    cols = list(zip(*sections, strict=True))
    out, status, bad = decode_legacy(
        work, np.array(cols[0], np.int64), np.array(cols[1], np.int64),
        np.array(cols[2], np.uint8), np.array(cols[3], np.int64), np.array(cols[4], np.int64),
        np.array(cols[5], np.int64), np.array(cols[6], np.uint8), lo, hi, include_headers)
    if status != LEGACY_OK:
        i = entry_of[bad]
        raise CorruptRecordError(
            f"{path}: message at byte {file_pos0 + int(pos[i]) - base_pos} "
            f"(offset {int(scan.offsets[i])}): "
            f"{LEGACY_ERRORS.get(status, f'decode status {status}')}")
    return out
