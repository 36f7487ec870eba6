"""FindCoordinator v4+ (KIP-699): several keys in one request, one coordinator answer each.

The single-key lookup stays the one place that decides; this only fans a batched request out
to it and gathers the answers, for the standalone and the cluster-mode handlers alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["batched_coordinators", "FIRST_BATCHED_VERSION"]

FIRST_BATCHED_VERSION = 4


async def batched_coordinators(find_one: Callable[[str], Awaitable[dict]], request: Any,
                               version: int | None = None) -> dict:
    """The response body of a FindCoordinator ``request`` (a decoded request, or its body
    with ``version`` given). ``find_one(key)`` answers one key as a v0-3 body would."""
    body = getattr(request, "body", request)
    version = request.api_version if version is None else version
    if version < FIRST_BATCHED_VERSION:
        return await find_one(body.key)
    # one after the other: the first lookup may create the offsets topic, and the next ones
    # must find it online, not being made
    answers = [await find_one(k) for k in body.coordinator_keys]
    return {"throttle_time_ms": 0, "coordinators": [
        {"key": k, "node_id": a["node_id"], "host": a["host"], "port": a["port"],
         "error_code": int(a["error_code"]), "error_message": a.get("error_message")}
        for k, a in zip(body.coordinator_keys, answers, strict=True)]}
