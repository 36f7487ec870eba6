"""v2 batches -> a magic 0/1 message set, with the numba kernel (:mod:`native.down_convert`).

Same contract and same bytes as :func:`appliance.records.convert.v2_to_legacy`, its pure-Python
twin: offsets kept, keys, values, timestamps (magic 1) and each batch's codec kept (one wrapper
message per compressed batch), headers dropped, control batches skipped. The kernel converts
uncompressed batches by itself; this module decompresses and recompresses, grows the output and,
when the kernel finds something malformed, runs the twin for the precise error. One deliberate
difference: the twin decodes header keys as UTF-8 and refuses a batch whose keys are not; the
kernel drops headers unread, as Kafka does (it decodes header keys leniently and drops them
too). Stateless, thread-safe (the kernels release the GIL).
"""

from __future__ import annotations

import numpy as np

from appliance.errors import CorruptRecordError, UnsupportedCompressionTypeError
from appliance.records.batch import read_header
from appliance.records.compression import DEFAULT_MAX_DECOMPRESSED, compress, decompress
from appliance.records.convert import v2_to_legacy
from appliance.records.legacy import (
    HEADER_V0,
    HEADER_V1,
    LOG_OVERHEAD,
    build_message_set,
    iter_entries,
)
from appliance.records.record_types import Record
from native import batch_layout as B
from native import legacy_layout as LL
from native.buffers import as_u8
from native.crc import crc32
from native.down_convert import (
    DC_BAD,
    DC_COMPRESSED,
    DC_OK,
    DC_OUT_FULL,
    DC_STATUS,
    DC_ZSTD,
    convert_batches,
    convert_records,
    records_bound,
)
from native.scan import scan_batches

__all__ = ["down_convert_batches", "down_convert_stored"]

# First guess of the output size: 100-byte records grow by ~25 %; the kernel asks for more
# (DC_OUT_FULL) rather than overrun, so a low guess only costs a copy.
_GROWTH_GUESS = 1.5
_I32 = LL.LENGTH_SIZE


def _grow(out: np.ndarray, q: int, need: int) -> np.ndarray:
    bigger = np.empty(max(2 * out.shape[0], q + need), np.uint8)
    bigger[:q] = out[:q]
    return bigger


def _wrapper(magic: int, codec: int, log_append: bool, last_offset: int, max_ts: int,
             payload: bytes) -> bytes:
    """The wrapper message of a compressed inner set (the twin's legacy._encode, key null)."""
    attrs = codec | (LL.TIMESTAMP_TYPE_BIT if magic and log_append else 0)
    hdr = HEADER_V1 if magic else HEADER_V0
    msg = bytearray(hdr.size + 2 * _I32 + len(payload))
    size = len(msg) - LOG_OVERHEAD
    if magic:
        hdr.pack_into(msg, 0, last_offset, size, 0, magic, attrs, max_ts)
    else:
        hdr.pack_into(msg, 0, last_offset, size, 0, magic, attrs)
    p = hdr.size
    msg[p:p + _I32] = b"\xff\xff\xff\xff"  # null key
    msg[p + _I32:p + 2 * _I32] = len(payload).to_bytes(_I32, "big")
    msg[p + 2 * _I32:] = payload
    msg[LL.CRC_OFFSET:LL.CRC_OFFSET + 4] = crc32(msg, LL.MAGIC_OFFSET).to_bytes(4, "big")
    return bytes(msg)


def _compressed(src: np.ndarray, pos: int, magic: int, max_decompressed: int,
                refuse_headers: bool = False) -> bytes | None:
    """The wrapper message for the compressed batch at ``pos`` (its CRC already checked), b""
    for a batch with no records, None if its records are malformed."""
    h = read_header(src, pos)
    codec = h.attributes & B.COMPRESSION_CODEC_MASK
    data = decompress(codec, memoryview(src)[pos + B.HEADER_SIZE:pos + h.size], max_decompressed)
    inner = np.empty(records_bound(len(data)), np.uint8)
    log_append = bool(h.attributes & B.TIMESTAMP_TYPE_MASK)
    ok, q, n, last, top = convert_records(
        data, h.records_count, h.base_offset, h.base_timestamp, h.max_timestamp, log_append,
        h.last_offset_delta, magic, magic == 1, inner, refuse_headers=refuse_headers)
    if not ok:
        return None
    if n == 0:
        return b""
    # Kafka 0.8 readers need LZ4's frame checksum as 0.8 wrote it.
    payload = compress(codec, memoryview(inner)[:q], legacy_lz4_checksum=(magic == 0))
    return _wrapper(magic, codec, log_append, last, top, payload)


def down_convert_batches(batches: object, *, magic: int, allow_partial: bool = False,
                         max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
                         refuse_headers: bool = False) -> bytes:
    """Convert v2 batches to a magic ``magic`` (0 or 1) message set with the same offsets.

    Raises as :func:`appliance.records.convert.v2_to_legacy` does (it is the twin, and is what
    names the error): UnsupportedCompressionTypeError for ZSTD, ValueError for a bad magic,
    CorruptRecordError/InvalidRecordError for malformed batches. ``allow_partial`` leaves out a
    truncated last batch. ``refuse_headers`` (storing produce in a legacy format): a record with
    headers raises CorruptRecordError instead of losing them; the caller names the error.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    src = as_u8(batches)
    out = np.empty(int(src.shape[0] * _GROWTH_GUESS) + 64, np.uint8)
    pos = q = 0
    while True:
        status, pos, q = convert_batches(src, pos, magic, allow_partial, out, q, refuse_headers)
        if status == DC_OK:
            return out[:q].tobytes()
        if status == DC_OUT_FULL:
            length = int.from_bytes(src[pos + B.LENGTH_OFFSET:pos + B.LOG_OVERHEAD].tobytes(),
                                    "big")
            out = _grow(out, q, records_bound(length))
            continue
        if status == DC_ZSTD:
            raise UnsupportedCompressionTypeError(
                f"batch at byte {pos} is ZSTD-compressed, which magic {magic} cannot carry")
        if status == DC_COMPRESSED:
            wrapper = _compressed(src, pos, magic, max_decompressed, refuse_headers)
            if wrapper is not None:
                if q + len(wrapper) > out.shape[0]:
                    out = _grow(out, q, len(wrapper))
                out[q:q + len(wrapper)] = np.frombuffer(wrapper, np.uint8)
                q += len(wrapper)
                pos += read_header(src, pos).size
                continue
        # DC_BAD (or a malformed compressed batch): the twin names what is wrong (with
        # refuse_headers the caller does, headers being no fault of the twin's)
        if not refuse_headers:
            v2_to_legacy(batches, magic=magic, allow_partial=allow_partial,
                         max_decompressed=max_decompressed)
        raise CorruptRecordError(f"batch at byte {pos}: {DC_STATUS[DC_BAD]} "
                                 f"(the down-conversion kernel refused it)")


def down_convert_stored(data: object, *, magic: int,
                        max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """What a Fetch of magic ``magic`` (0 or 1) gets from stored entries that may be legacy: a
    segment of a topic stored in a pre-0.11 message format holds magic 0/1 entries, possibly
    followed or preceded by v2 batches (a format change). v2 batches are down-converted as
    :func:`down_convert_batches` does; a legacy entry whose magic the fetcher reads goes as
    stored (Kafka never up-converts: a magic 1 fetcher reads magic 0 as it is); a magic 1 entry
    for a magic 0 fetcher is rewritten as magic 0 (timestamps dropped, a wrapper recompressed
    with its inner offsets made absolute). A truncated last entry is left out (the fetch's byte
    limit cut it). Raises as :func:`down_convert_batches`.
    """
    buf = as_u8(data)
    r = scan_batches(buf, 0, buf.shape[0], verify_crc=False, legacy=True)
    positions = r.positions[:r.count]
    if r.count == 0 or bool((buf[positions + LL.MAGIC_OFFSET] == B.CURRENT_MAGIC).all()):
        return down_convert_batches(data, magic=magic, allow_partial=True,
                                    max_decompressed=max_decompressed)
    out = bytearray()
    v2_from = -1  # start of the current run of v2 batches
    mv = memoryview(buf)
    for k in range(r.count):
        pos, end = int(positions[k]), int(positions[k]) + int(r.sizes[k])
        stored = int(buf[pos + LL.MAGIC_OFFSET])
        if stored == B.CURRENT_MAGIC:
            if v2_from < 0:
                v2_from = pos
            continue
        if v2_from >= 0:
            out += down_convert_batches(mv[v2_from:pos], magic=magic,
                                        max_decompressed=max_decompressed)
            v2_from = -1
        if stored <= magic:
            out += mv[pos:end]
            continue
        for entry in iter_entries(mv[pos:end], max_decompressed=max_decompressed):
            recs = [Record(m.offset, -1, m.key, m.value) for m in entry.messages]
            out += build_message_set(recs, magic=magic, compression=entry.compression)
    if v2_from >= 0:
        end = int(positions[-1]) + int(r.sizes[r.count - 1])
        out += down_convert_batches(mv[v2_from:end], magic=magic,
                                    max_decompressed=max_decompressed)
    return bytes(out)
