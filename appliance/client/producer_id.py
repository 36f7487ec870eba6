"""InitProducerId for an idempotent producer, retried while the broker says "not now"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from appliance.client.cluster import RETRIABLE
from appliance.errors import ErrorCode, error_for_code

__all__ = ["init_producer_id"]


def init_producer_id(send: Callable[[], Any], timeout_s: float) -> tuple[int, int]:
    """(producer id, epoch) from ``send()``, an InitProducerId round trip. A retriable answer
    (a broker fetching its next block of ids answers COORDINATOR_LOAD_IN_PROGRESS, as Kafka's
    does) is asked again with backoff for up to ``timeout_s``; then, or for any other error,
    the error's exception is raised."""
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        resp = send()
        code = resp.error_code
        if not code:
            return resp.producer_id, resp.producer_epoch
        if code not in RETRIABLE or time.monotonic() + delay > deadline:
            raise error_for_code(code)(f"InitProducerId failed: {ErrorCode(code).name}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
