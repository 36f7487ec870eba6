"""Retention: which old segments a log deletes (Kafka's UnifiedLog.deleteOldSegments).

Three rules, applied in this order, each to the oldest segments first and stopping at the first
segment it keeps: ``retention.ms`` (the segment's largest timestamp is older), ``retention.bytes``
(the log is larger; only whole segments go) and the log start offset (the next segment starts at
or below it, so nothing in this one is readable). The first two apply to ``cleanup.policy``
``delete`` only. The mechanism (rename, delayed delete, offsets) is the log's
:meth:`~appliance.storage.log.PartitionLog.delete_oldest_while`.

Thread-safety: none; the partition's single writer calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from appliance.storage.segment import LogSegment

__all__ = ["apply_retention", "delete_below_log_start", "RetainedLog"]


class RetainedLog(Protocol):
    """What retention needs of a log (``PartitionLog`` has it): an interface, so this module
    and the log's do not import each other."""

    config: Any
    size_bytes: int
    log_start_offset: int

    def delete_oldest_while(self, pred: Callable[[LogSegment, LogSegment | None], bool],
                            why: str) -> int: ...


def apply_retention(plog: RetainedLog, now_ms: int) -> int:
    """Delete ``plog``'s expired segments by the rules above. Returns segments deleted."""
    cfg = plog.config
    deleted = 0
    if "delete" in cfg.cleanup_policy:
        rms = int(cfg.retention_ms)
        if rms >= 0:
            deleted += plog.delete_oldest_while(
                lambda seg, nxt: now_ms - seg.largest_timestamp > rms, "retention.ms")
        rbytes = int(cfg.retention_bytes)
        if rbytes >= 0:
            excess = plog.size_bytes - rbytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            deleted += plog.delete_oldest_while(over_size, "retention.bytes")
    return deleted + delete_below_log_start(plog)


def delete_below_log_start(plog: RetainedLog) -> int:
    """Delete the segments wholly below the log start offset (retention's third rule; also
    run at once by DeleteRecords). Returns segments deleted."""
    log_start = plog.log_start_offset
    return plog.delete_oldest_while(
        lambda seg, nxt: nxt is not None and nxt.base_offset <= log_start, "log start offset")
