"""The leader side of the replication throttle (KIP-73, Kafka's ReplicationQuotaManager with
shouldLeaderThrottle) in a network worker: the rate the cluster worker published for a led
partition in the leadership area, split over the network workers (separate processes, so the
sum stays within the rate), for followers out of the ISR only. See
:mod:`appliance.cluster.replication_throttle` for the follower side and the settings."""

from __future__ import annotations

import time
from typing import Any

from appliance.process.rate_limiter import RateLimiter

__all__ = ["LeaderQuota"]


class LeaderQuota:
    """One network worker's part of the leader rate (see the module doc). Single-threaded."""

    def __init__(self, area: Any, workers: int, clock: Any = time.monotonic) -> None:
        self.area = area
        self.workers = max(1, workers)
        self.limiter = RateLimiter(clock)

    def throttled(self, slot: int, replica_id: int, isr: tuple[int, ...]) -> int:
        """This worker's rate for ``replica_id`` fetching ``slot`` (0: not throttled — no rate
        set for the partition, or the follower is in the ISR)."""
        rate = self.area.leader_throttle(slot)
        if rate <= 0 or replica_id in isr:
            return 0
        return max(1, rate // self.workers)

    def exceeded(self, rate: int) -> bool:
        return self.limiter.exceeded(rate)

    def record(self, nbytes: int) -> None:
        self.limiter.record(nbytes)
