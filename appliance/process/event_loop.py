"""The event loop the asyncio workers (network, cluster) run on: uvloop's, libuv underneath.

Measured reason: with one-record produce requests the network worker's CPU per request went
from 45.5 to 40 us (`perf/bench_request_cost.py --client raw`, 3 runs each): asyncio's own loop
spends Python on every pass (select, ready queue, handles) that uvloop does in C. The protocol
callbacks and coroutines are the same on either loop; uvloop has no loop.sendfile, which the
network worker does not use (see KafkaConnection._sendfile).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

__all__ = ["run_event_loop"]

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new uvloop event loop (asyncio.run's contract)."""
    return uvloop.run(main)
