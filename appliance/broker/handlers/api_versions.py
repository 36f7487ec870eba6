"""ApiVersions: the exact ranges we advertise (from the protocol registry)."""

from __future__ import annotations

from typing import Any

from appliance.protocol.registry import api_versions_entries

__all__ = ["handle"]


async def handle(ctx: Any, request: Any) -> dict:
    return {"error_code": 0, "api_keys": api_versions_entries(), "throttle_time_ms": 0}
