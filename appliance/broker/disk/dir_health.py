"""Whether a disk worker's log dir is usable, and the log lines about it when it is not.

Kafka's JBOD behaviour (KIP-112): an I/O error that says the disk itself is gone (EIO, EROFS,
a vanished device) takes the whole log dir offline at once: its partitions answer
KAFKA_STORAGE_ERROR until the disk is replaced and the broker (or that disk worker) restarts.
No retry touches a dead disk again (Kafka's ``log.dir.failure.timeout.ms`` is in effect zero
here: the first such error is final). A full disk (ENOSPC, EDQUOT) is not fatal: the write fails
with KAFKA_STORAGE_ERROR and the next one is tried, so produce resumes by itself once space is
freed. Either way the dir is logged once with the cause, then at most once a minute with a count.
"""

from __future__ import annotations

import errno
import logging
import time

__all__ = ["DEAD_DISK_ERRNOS", "FULL_DISK_ERRNOS", "io_errno", "is_dead_disk", "ThrottledLog"]

log = logging.getLogger("appliance.disk")

# errors after which nothing written to the dir can be trusted to reach the disk
DEAD_DISK_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENODEV, errno.ENXIO, errno.ESTALE,
                              errno.ENOTCONN, errno.EUCLEAN})
FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
REPEAT_INTERVAL_S = 60.0


def io_errno(exc: BaseException | None) -> int | None:
    """The errno of an OSError, or of the OSError a storage error was raised from."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno:
            return exc.errno
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def is_dead_disk(exc: BaseException) -> bool:
    return io_errno(exc) in DEAD_DISK_ERRNOS


class ThrottledLog:
    """One line for the first occurrence of a message key, then one per interval with the
    count of repeats in between (a full disk fails every produce; the log must not)."""

    def __init__(self, interval_s: float = REPEAT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._repeats: dict[str, int] = {}

    def __call__(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log unless ``key`` was logged less than an interval ago; True if it logged."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._repeats[key] = self._repeats.get(key, 0) + 1
            return False
        repeats = self._repeats.pop(key, 0)
        self._last[key] = now
        if repeats:
            log.log(level, msg + " (%d more times in the last %.0f s)", *args, repeats, now - last)
        else:
            log.log(level, msg, *args)
        return True
