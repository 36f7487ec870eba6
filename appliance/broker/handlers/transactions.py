"""The transaction APIs on the network side: find the transaction coordinator, route to it.

The coordinator of transactional id T is the leader of ``__transaction_state`` partition
abs(hash(T)) % its partition count (``coordinator/routing.py``), and it runs in the disk worker
holding that partition (``broker/disk/txn_host.py``), as the group coordinator does for
``__consumer_offsets``. InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn travel there through the ring as their encoded bodies
(``MsgType.GROUP``) and come back as encoded answers. An InitProducerId carries a producer id
taken here from the broker's block, for the coordinator to use if it needs a new one.

FindCoordinator with key_type=1 is answered here standalone (``groups.find_coordinator``) and by
the cluster worker in cluster mode (``cluster/broker_answers.coordinator_body``), which names the
partition's leader on every broker; a request for an id whose partition is led elsewhere is
answered NOT_COORDINATOR, and the client looks the coordinator up again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.broker.handlers import producer_id
from appliance.broker.handlers.answer import RawBody
from appliance.broker.handlers.coordinator_slot import coordinator_slot
from appliance.broker.topic_admin import create_topic
from appliance.coordinator.routing import TXN_TOPIC, txn_partition_for, txn_topic_config
from appliance.errors import ErrorCode
from appliance.process.producer_ids import ProducerIdUnavailable, new_producer_id
from appliance.shm.layout import GROUP_HEADER, SPARE_PRODUCER_ID, MsgType

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["find_txn_coordinator", "init_producer_id", "route", "coordinator_of", "KEY_TYPE_TRANSACTION"]

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
KEY_TYPE_TRANSACTION = 1
_SPARE = SPARE_PRODUCER_ID.struct  # type: ignore[attr-defined]
_API_INIT_PRODUCER_ID = 22


def coordinator_of(ctx: BrokerContext, transactional_id: str) -> tuple[Any, int]:
    """(the index entry of ``transactional_id``'s ``__transaction_state`` partition, 0) when its
    coordinator is here and online, else (None, the error: NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE)."""
    return coordinator_slot(ctx, TXN_TOPIC, txn_partition_for, transactional_id)


async def find_txn_coordinator(ctx: BrokerContext, key: str) -> tuple[int, str | None]:
    """FindCoordinator key_type=1 (standalone): (error code, message); 0 = this broker. Kafka
    creates ``__transaction_state`` on the first such lookup; while its partitions come online
    the answer is COORDINATOR_NOT_AVAILABLE, which every client retries."""
    if not key:
        return ErrorCode.INVALID_REQUEST, "empty transactional id"
    if not ctx.index.partitions(TXN_TOPIC):
        code, msg = await create_topic(ctx, TXN_TOPIC, int(ctx.config["transaction.state.log.num.partitions"]),
                                       -1, txn_topic_config(ctx.config))
        if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, msg
    _, code = coordinator_of(ctx, key)
    return code, None


async def _submit(ctx: BrokerContext, request: Request, info: Any, prefix: bytes = b"") -> Any:
    encoded = request.api.encode_request(request.api_version, request.body)
    cid = (request.client_id or "").encode()[:1024]
    header = _GROUP.pack(request.api_key, request.api_version, len(cid), 0)
    return await ctx.disks.submit(info.disk, MsgType.GROUP, info.slot, header, cid, prefix, encoded)


def _error_body(request: Request, code: int) -> dict:
    b = request.body
    if request.api_key == _API_INIT_PRODUCER_ID:
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
    if request.api_key == 24:
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t.name, "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in t.partitions]} for t in b.topics]}
    return {"throttle_time_ms": 0, "error_code": code}


async def _route(ctx: BrokerContext, request: Request, spare_id: bool = False) -> Any:
    """To the id's coordinator; ``spare_id``: with a producer id from the broker's block before
    the body (taken only when there is a coordinator here to use it)."""
    info, code = coordinator_of(ctx, request.body.transactional_id or "")
    if info is not None:
        prefix = b""
        if spare_id:
            try:
                spare = await new_producer_id(ctx.table, ctx.producer_id_blocks)
            except ProducerIdUnavailable:
                # as producer_id.py: retriable for every client
                return _error_body(request, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            prefix = _SPARE.pack(spare)
        comp = await _submit(ctx, request, info, prefix)
        if comp.body:
            return RawBody(comp.body)
        code = comp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR
    return _error_body(request, code)


async def init_producer_id(ctx: BrokerContext, request: Request) -> Any:
    """InitProducerId: an idempotent producer's (no transactional id) is answered here; a
    transactional one goes to its coordinator with a spare producer id."""
    body = request.body
    if body.transactional_id is None:
        return await producer_id.handle(ctx, request)
    if (getattr(body, "producer_id", -1) == -1) != (getattr(body, "producer_epoch", -1) == -1):
        return _error_body(request, ErrorCode.INVALID_REQUEST)  # Kafka: both given or neither
    return await _route(ctx, request, spare_id=True)


async def route(ctx: BrokerContext, request: Request) -> Any:
    """AddPartitionsToTxn, AddOffsetsToTxn, EndTxn: to the id's coordinator."""
    return await _route(ctx, request)
