"""A task's read statistics and the progress lines it logs (records/s, bytes mapped, bytes
fetched remotely).

pyspark's Python data source API (4.x) has no custom task metrics, so each task logs one line
every ``progress.interval.ms`` while it reads and a final line when it ends, on the logger
``spark.progress`` (to the executor's stderr: the worker's ``work/<app>/<executor>/stderr`` on a
standalone cluster, the console with ``local[*]``). Format::

    appliance read events-0 [0, 1000000) in-place: 1000000 records (812345 records/s), \
bytes mapped 104857600, bytes fetched 0, 1.2 s, done

Thread-safety: one :class:`ReadStats` per task, used by one thread.
"""

from __future__ import annotations

import logging
import sys
import time

__all__ = ["ReadStats", "IN_PLACE", "REMOTE", "progress_log"]

IN_PLACE = "in-place"
REMOTE = "remote"

progress_log = logging.getLogger("spark.progress")
if not progress_log.handlers:
    # Spark's Python workers configure no logging: without a handler INFO lines would vanish.
    _h = logging.StreamHandler(sys.stderr)
    _h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    progress_log.addHandler(_h)
    progress_log.setLevel(logging.INFO)
    progress_log.propagate = False


class ReadStats:
    """Counters of one task's read of ``topic-partition [start, end)`` by ``how``."""

    def __init__(self, topic: str, partition: int, start: int, end: int, how: str,
                 interval_ms: int = 10000) -> None:
        self.topic, self.partition, self.start, self.end, self.how = topic, partition, start, end, how
        self.records = 0
        self.bytes_mapped = 0
        self.bytes_fetched = 0
        self.interval = interval_ms / 1000
        self.t0 = time.monotonic()
        self._next = self.t0 + self.interval

    def add_rows(self, n: int) -> None:
        self.records += n
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            progress_log.info("%s", self.line(now, "reading"))

    def rate(self, now: float | None = None) -> float:
        dt = (now or time.monotonic()) - self.t0
        return self.records / dt if dt > 0 else 0.0

    def line(self, now: float | None = None, state: str = "done") -> str:
        now = now or time.monotonic()
        return (f"appliance read {self.topic}-{self.partition} [{self.start}, {self.end}) "
                f"{self.how}: {self.records} records ({self.rate(now):.0f} records/s), bytes "
                f"mapped {self.bytes_mapped}, bytes fetched {self.bytes_fetched}, "
                f"{now - self.t0:.1f} s, {state}")

    def done(self) -> None:
        progress_log.info("%s", self.line())
