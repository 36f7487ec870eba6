"""A token bucket in bytes, for the replication throttle's two sides (KIP-73): the follower's
fetcher in the cluster worker and the leader's fetch answers in the network workers."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["RateLimiter"]


class RateLimiter:
    """A token bucket in bytes: it refills at the rate given to :meth:`exceeded`, holds at most
    one second's worth, and goes into debt by what a fetch brought beyond it, so one large
    fetch is paid for by the rounds after it and the average stays at the rate."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._tokens = 0.0
        self._at: float | None = None
        self._rate = 0

    def _refill(self, rate: int) -> None:
        self._rate = rate
        now = self.clock()
        if self._at is None:
            self._tokens = float(rate)
        else:
            self._tokens = min(float(rate), self._tokens + (now - self._at) * rate)
        self._at = now

    def record(self, nbytes: int) -> None:
        if self._at is not None:
            self._refill(self._rate)
        self._tokens -= nbytes

    def exceeded(self, rate: int) -> bool:
        self._refill(rate)
        return self._tokens < 0
