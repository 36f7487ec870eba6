"""DescribeTransactions (65) and ListTransactions (66), KIP-664: the admin's view of the
transaction coordinators this broker hosts.

Each transaction coordinator lives in the disk worker holding its ``__transaction_state``
partition (``broker/disk/txn_host.py``), so the questions travel there as the other transaction
APIs do (``MsgType.GROUP``, the encoded request after the header):

- DescribeTransactions: each id to the disk of its partition, one message per id; an id whose
  partition this broker does not lead is answered here NOT_COORDINATOR (the client asks its
  coordinator, found with FindCoordinator key_type=1), one not online yet
  COORDINATOR_LOAD_IN_PROGRESS, as Kafka's.
- ListTransactions: one message per disk holding a partition this broker leads; the answers are
  merged. As in Kafka each broker lists only what it coordinates; the admin asks every broker.

Authorization as Kafka's KafkaApis: DescribeTransactions answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for an id the principal may not Describe and leaves out
the topics it may not Describe; ListTransactions leaves out the ids it may not Describe.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from appliance.broker import authorization
from appliance.broker.handlers.transactions import coordinator_of
from appliance.coordinator.routing import TXN_TOPIC
from appliance.coordinator.txn_coordinator import STATE_NAMES
from appliance.errors import ErrorCode
from appliance.protocol.messages.transactions import DescribeTransactions, ListTransactions
from appliance.security.acl import DESCRIBE, TOPIC, TRANSACTIONAL_ID
from appliance.shm.layout import GROUP_HEADER, MsgType, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.broker.door import RequestContext
    from appliance.protocol.connection import Request

__all__ = ["describe_transactions", "list_transactions"]

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]


async def _ask(ctx: BrokerContext, request: Request, info: Any, api: Any, body: dict) -> Any:
    """``body`` (a request of ``api``) to the transaction host of ``info``'s disk; its decoded
    answer, or the completion's error code (an int)."""
    cid = (request.client_id or "").encode()[:1024]
    header = _GROUP.pack(api.API_KEY, request.api_version, len(cid), 0)
    comp = await ctx.disks.submit(info.disk, MsgType.GROUP, info.slot, header, cid,
                                  api.encode_request(request.api_version, body))
    if not comp.body:
        return comp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR
    return api.decode_response(request.api_version, memoryview(comp.body), 0)


def _refused(tid: str, code: int) -> dict:
    return {"error_code": code, "transactional_id": tid, "transaction_state": "", "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1, "producer_id": -1, "producer_epoch": -1, "topics": []}


async def _describe_one(ctx: BrokerContext, request: Request, rc: RequestContext, tid: str) -> dict:
    if ctx.authorizer is not None and not authorization.allowed(ctx, rc, DESCRIBE, TRANSACTIONAL_ID, tid):
        return _refused(tid, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not tid:
        return _refused(tid, ErrorCode.INVALID_REQUEST)
    info, code = coordinator_of(ctx, tid)
    if info is None:
        # not online yet here: Kafka's answer while a coordinator loads (the admin retries it)
        return _refused(tid, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                        if code == ErrorCode.COORDINATOR_NOT_AVAILABLE and ctx.index.partitions(TXN_TOPIC)
                        else code)
    got = await _ask(ctx, request, info, DescribeTransactions, {"transactional_ids": [tid]})
    if isinstance(got, int):
        return _refused(tid, got)
    state = got.transaction_states[0].to_dict()
    if ctx.authorizer is not None:
        state["topics"] = [t for t in state["topics"] if authorization.allowed(ctx, rc, DESCRIBE, TOPIC, t["topic"])]
    return state


async def describe_transactions(ctx: BrokerContext, request: Request, rc: RequestContext) -> dict:
    states = await asyncio.gather(*(_describe_one(ctx, request, rc, t) for t in request.body.transactional_ids))
    return {"throttle_time_ms": 0, "transaction_states": list(states)}


def _led_partitions_by_disk(ctx: BrokerContext) -> tuple[dict[int, Any], bool]:
    """({disk: one led ``__transaction_state`` partition on it}, whether a led one is not
    online yet)."""
    by_disk: dict[int, Any] = {}
    loading = False
    for info in ctx.index.partitions(TXN_TOPIC) or []:
        if not ctx.leads(info.slot):
            continue
        if ctx.table.state(info.slot) != SlotState.ONLINE:
            loading = True
            continue
        by_disk.setdefault(info.disk, info)
    return by_disk, loading


async def list_transactions(ctx: BrokerContext, request: Request, rc: RequestContext) -> dict:
    b = request.body
    body = {"state_filters": list(b.state_filters), "producer_id_filters": list(b.producer_id_filters),
            "duration_filter": getattr(b, "duration_filter", -1)}
    by_disk, loading = _led_partitions_by_disk(ctx)
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": [],
                              "transaction_states": []}
    if loading:
        answer["error_code"] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return answer
    unknown: set[str] = set()
    # no partition led here: the state names are still checked (Kafka's answer does)
    unknown.update(s for s in body["state_filters"] if s not in STATE_NAMES)
    for got in await asyncio.gather(*(_ask(ctx, request, info, ListTransactions, body) for info in by_disk.values())):
        code = got if isinstance(got, int) else got.error_code
        if code:
            answer["error_code"] = code
            answer["transaction_states"] = []
            return answer
        unknown.update(got.unknown_state_filters)
        answer["transaction_states"].extend(s.to_dict() for s in got.transaction_states)
    if ctx.authorizer is not None:
        answer["transaction_states"] = [
            s for s in answer["transaction_states"]
            if authorization.allowed(ctx, rc, DESCRIBE, TRANSACTIONAL_ID, s["transactional_id"])]
    answer["unknown_state_filters"] = sorted(unknown)
    return answer
