"""The last stable offset of a partition whose broker is not running (read_committed reads).

A running broker publishes the LSO beside the high watermark; the checkpoint files have none.
Offline, the LSO is rebuilt as the broker's producer state would be: the open transactions of
the newest producer snapshot at or below the checkpointed high watermark (the broker writes one
at a clean shutdown), then the batch headers from there to the high watermark (all of them from
the log start when there is no snapshot: after an unclean stop) -- a transactional batch opens
its producer's transaction unless one is open, a control batch (marker) ends it. The LSO is the
first offset of the earliest transaction still open, at most the high watermark, at least the
log start.

Thread-safety: a function over files; nothing is kept.
"""

from __future__ import annotations

import os

import numpy as np

from appliance.errors import OffsetOutOfRangeError
from appliance.records import batch_layout as L
from appliance.storage.producer_state import read_open_txns
from appliance.storage.reader import LogReader
from native import scan_batches

__all__ = ["offline_stable_offset"]

_I64 = np.dtype(">i8")
_ATTR = np.dtype(">i2")


def offline_stable_offset(path: str, earliest: int, high_watermark: int,
                          chunk_bytes: int = 8 << 20) -> int:
    """The LSO of the partition directory ``path`` as of ``high_watermark`` (see the module
    docstring). Raises KafkaStorageError / OSError for unreadable segments."""
    snap = read_open_txns(path, high_watermark)
    offset, open_txns = (earliest, {}) if snap is None else (max(snap[0], earliest), snap[1])
    reader = LogReader(path)
    try:
        while offset < high_watermark:
            try:
                sl = reader.read(offset, chunk_bytes, max_offset=high_watermark)
            except OffsetOutOfRangeError:
                oldest = reader.log_start_offset_on_disk
                if oldest is None or oldest <= offset:
                    break
                offset = oldest
                continue
            if sl is None:
                break
            buf = np.frombuffer(os.pread(sl.fd, sl.length, sl.position), np.uint8)
            r = scan_batches(buf, 0, len(buf), verify_crc=False, legacy=True)
            if not r.count:
                break
            pos = r.positions.astype(np.int64)
            v2 = buf[pos + L.MAGIC_OFFSET] >= 2
            attrs = buf[(pos + L.ATTRIBUTES_OFFSET)[:, None] + np.arange(2)].view(_ATTR).ravel()
            pids = buf[(pos + L.PRODUCER_ID_OFFSET)[:, None] + np.arange(8)].view(_I64).ravel()
            for i in np.flatnonzero(v2 & ((attrs & L.TRANSACTIONAL_BIT) != 0)):
                pid = int(pids[i])
                if attrs[i] & L.CONTROL_BIT:
                    open_txns.pop(pid, None)
                else:
                    open_txns.setdefault(pid, int(r.base_offsets[i]))
            offset = max(int(r.last_offsets[r.count - 1]) + 1, offset + 1)
    finally:
        reader.close()
    lso = min([high_watermark, *open_txns.values()])
    return min(max(lso, earliest), high_watermark)
