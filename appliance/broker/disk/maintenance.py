"""The storage work a disk worker runs between rounds: retention, the flush policy, checkpoints
and the log cleaner, then publishing the log start offsets retention moved."""

from __future__ import annotations

import logging
import time

from appliance.broker.disk.partitions import Partitions
from appliance.errors import KafkaStorageError

__all__ = ["Maintenance"]

log = logging.getLogger("appliance.disk")

INTERVAL_S = 0.25
CLEANER_INTERVAL_S = 0.02  # while the cleaner has work (each of its steps is bounded to ~50 ms)


class Maintenance:
    def __init__(self, partitions: Partitions) -> None:
        self.partitions = partitions
        self.next_due = 0.0  # time.monotonic() of the next run

    def run_if_due(self, now: float) -> None:
        if now < self.next_due:
            return
        if self.partitions.failed:  # an offline dir is not touched again
            self.next_due = now + INTERVAL_S
            return
        log_dir = self.partitions.log_dir
        try:
            log_dir.run_periodic(int(time.time() * 1000))
        except (OSError, KafkaStorageError) as e:
            self.partitions.io_error(e)
        except Exception:
            log.exception("periodic log maintenance failed")
        self.partitions.publish_start_offsets()
        cleaner = getattr(log_dir, "cleaner", None)
        busy = cleaner is not None and cleaner.busy
        self.next_due = now + (CLEANER_INTERVAL_S if busy else INTERVAL_S)
