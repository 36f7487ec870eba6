"""InitProducerId: producer ids for idempotent producers (transactions are not supported)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.errors import ErrorCode

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]


async def handle(ctx: BrokerContext, request: Request) -> dict:
    if request.body.transactional_id is not None:
        # no transaction coordinator: say so with the error Kafka gives when the coordinator
        # for a transactional id cannot be found
        return {"throttle_time_ms": 0, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                "producer_id": -1, "producer_epoch": -1}
    async with ctx.table.locked_async():  # never block the event loop on the table lock
        producer_id = ctx.table.take_producer_id()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": 0}
