"""ApiVersions: the exact ranges we advertise (from the protocol registry)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.protocol.registry import api_versions_entries

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]


async def handle(ctx: BrokerContext, request: Request) -> dict:
    return {"error_code": 0, "api_keys": api_versions_entries(), "throttle_time_ms": 0}
