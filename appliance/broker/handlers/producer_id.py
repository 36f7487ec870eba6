"""InitProducerId: producer ids for idempotent producers (a transactional one goes to its
transaction coordinator: ``handlers/transactions.py``).

Ids come from the broker's current block (:mod:`appliance.process.producer_ids`): blocks are
allocated in ZooKeeper in cluster mode, in the first log dir standalone, so no two producers of
the cluster, nor of a restarted broker, get the same id.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from appliance.errors import ErrorCode
from appliance.process.producer_ids import ProducerIdUnavailable, new_producer_id

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle"]

log = logging.getLogger(__name__)

_WARN_EVERY_S = 10.0  # producers retry every 100 ms or so through an outage: one line is enough
_warned = 0.0


async def handle(ctx: BrokerContext, request: Request) -> dict:
    try:
        return _answer(await new_producer_id(ctx.table, ctx.producer_id_blocks), 0)
    except ProducerIdUnavailable as e:
        _warn(e)
        # Kafka's answer when a broker's next block does not come in time
        # (RPCProducerIdManager): retriable for every client, where COORDINATOR_NOT_AVAILABLE
        # sends the Java producer looking for a transaction coordinator of a null id
        return _answer(-1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _answer(producer_id: int, error_code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": error_code, "producer_id": producer_id,
            "producer_epoch": 0 if producer_id >= 0 else -1}


def _warn(e: ProducerIdUnavailable) -> None:
    global _warned
    now = time.monotonic()
    if now - _warned >= _WARN_EVERY_S:
        _warned = now
        log.warning("no producer id block to hand out ids from (answering COORDINATOR_LOAD_IN_PROGRESS): %s", e)
