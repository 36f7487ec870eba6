"""Consumer-group APIs on the network side: find the coordinator, route to it, merge answers.

The coordinator of group G is the leader of ``__consumer_offsets`` partition
abs(hash(G)) % offsets.topic.num.partitions; it runs in the disk worker holding that partition
(standalone: this broker leads every partition; in cluster mode FindCoordinator is answered by
the cluster worker, and a request for a partition led elsewhere gets NOT_COORDINATOR).
A group request travels to that disk worker through the ring as its encoded body and comes back
as an encoded response body (``RawBody``), so the coordinator owns every decision. ListGroups,
DescribeGroups and DeleteGroups may span coordinators: they are split per disk and merged.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from appliance.broker.door import RequestContext
from appliance.broker.handlers import transactions
from appliance.broker.handlers.answer import RawBody
from appliance.broker.handlers.coordinator_slot import coordinator_slot
from appliance.broker.topic_admin import create_topic
from appliance.coordinator.batched_lookup import batched_coordinators
from appliance.coordinator.routing import OFFSETS_TOPIC, offsets_partition_for, offsets_topic_config
from appliance.errors import ErrorCode
from appliance.protocol.messages import OffsetFetch
from appliance.protocol.registry import API_BY_KEY
from appliance.shm.layout import GROUP_HEADER, MsgType, SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["find_coordinator", "route", "list_groups", "describe_groups", "delete_groups"]

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
KEY_TYPE_GROUP = 0
FIRST_MULTI_GROUP_VERSION = 8  # OffsetFetch names several groups (KIP-709)
_SINGLE_GROUP_VERSION = 7  # the newest OffsetFetch of one group: what a coordinator is asked


def _coordinator_slot(ctx: BrokerContext, group_id: str) -> tuple[Any, int]:
    return coordinator_slot(ctx, OFFSETS_TOPIC, offsets_partition_for, group_id)


async def find_coordinator(ctx: BrokerContext, request: Request, rc: RequestContext) -> dict:
    """This broker, at its address on the listener the request came in on."""
    return await batched_coordinators(
        lambda key: _find_one(ctx, key, request.body.key_type, request.api_version, rc.advertised),
        request)


async def _find_one(ctx: BrokerContext, key: str, key_type: int, version: int,
                    advertised: tuple[str, int]) -> dict:
    host, port = advertised

    def answer(code: int, msg: str | None = None) -> dict:
        ok = code == 0
        return {"throttle_time_ms": 0, "error_code": code, "error_message": msg,
                "node_id": ctx.broker_id if ok else -1, "host": host if ok else "", "port": port if ok else -1}

    if version >= 1 and key_type == transactions.KEY_TYPE_TRANSACTION:
        return answer(*await transactions.find_txn_coordinator(ctx, key))
    if version >= 1 and key_type != KEY_TYPE_GROUP:
        return answer(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if not key:
        return answer(ErrorCode.INVALID_GROUP_ID, "empty group id")
    if not ctx.index.partitions(OFFSETS_TOPIC):
        # Kafka creates the offsets topic on the first FindCoordinator
        code, msg = await create_topic(ctx, OFFSETS_TOPIC,
                                       int(ctx.config["offsets.topic.num.partitions"]), -1,
                                       offsets_topic_config(ctx.config))
        if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, msg)
    _, code = _coordinator_slot(ctx, key)
    return answer(code)


async def _submit(ctx: BrokerContext, request: Request, info: Any, client_host: str, body: Any = None,
                  version: int | None = None) -> Any:
    """Send a group request to the coordinator's disk worker; ``body``/``version``: another
    body (and version) than the client's (a part of a batched request)."""
    api = API_BY_KEY[request.api_key]
    version = request.api_version if version is None else version
    encoded = api.encode_request(version, request.body if body is None else body)
    cid = (request.client_id or "").encode()[:1024]
    host = client_host.encode()[:255]
    header = _GROUP.pack(request.api_key, version, len(cid), len(host))
    return await ctx.disks.submit(info.disk, MsgType.GROUP, info.slot, header, cid, host, encoded)


def _error_body(api_key: int, code: int, request: Request) -> dict:
    """The whole-request error answer of each group API (when no coordinator could answer)."""
    b = request.body
    if api_key == 11:
        return {"error_code": code, "generation_id": -1, "protocol_name": "", "leader": "",
                "member_id": b.member_id, "members": []}
    if api_key == 14:
        return {"error_code": code, "assignment": b""}
    if api_key in (12, 13):
        return {"error_code": code}
    if api_key in (8, 28):  # OffsetCommit, TxnOffsetCommit
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in b.topics]}
    if api_key == 9:
        return {"error_code": code, "topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
            for p in t.partition_indexes]} for t in (b.topics or [])]}
    if api_key == 47:  # OffsetDelete: the whole request fails at the group level
        return {"error_code": code, "throttle_time_ms": 0, "topics": []}
    raise ValueError(api_key)


async def route(ctx: BrokerContext, request: Request, rc: RequestContext | None) -> Any:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, TxnOffsetCommit:
    one coordinator (OffsetFetch v8+: one per group, asked concurrently)."""
    client_host = rc.client_host if rc is not None else ""  # None: the broker itself asks
    if request.api_key == OffsetFetch.API_KEY and request.api_version >= FIRST_MULTI_GROUP_VERSION:
        return await _offset_fetch_groups(ctx, request, client_host)
    info, code = _coordinator_slot(ctx, request.body.group_id)
    if info is not None:
        comp = await _submit(ctx, request, info, client_host)
        if comp.body:
            return RawBody(comp.body)
        code = comp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR
    return _error_body(request.api_key, code, request)


async def _offset_fetch_groups(ctx: BrokerContext, request: Request, client_host: str) -> dict:
    """OffsetFetch v8 (KIP-709): each group is asked of its own coordinator as a v7 request
    (the coordinator's code is the single-group one) and the answers are put together."""
    api = API_BY_KEY[request.api_key]

    async def one(g: Any) -> dict:
        single = {"group_id": g.group_id, "topics": g.topics,
                  "require_stable": request.body.require_stable}
        info, code = _coordinator_slot(ctx, g.group_id)
        if info is not None:
            comp = await _submit(ctx, request, info, client_host, single, _SINGLE_GROUP_VERSION)
            if comp.body:
                r = api.decode_response(_SINGLE_GROUP_VERSION, comp.body)
                return {"group_id": g.group_id, "topics": r.topics, "error_code": r.error_code}
            code = comp.error_code or ErrorCode.UNKNOWN_SERVER_ERROR
        return {"group_id": g.group_id, "error_code": code, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t.partition_indexes]} for t in (g.topics or [])]}

    groups = await asyncio.gather(*(one(g) for g in request.body.groups))
    return {"throttle_time_ms": 0, "groups": list(groups)}


def _by_disk(ctx: BrokerContext, group_ids: list[str]) -> tuple[dict[Any, list[str]], dict[str, int]]:
    """The groups split by the (disk, slot) coordinating them; and the error of those none does."""
    split: dict[Any, list[str]] = {}
    missing: dict[str, int] = {}
    for gid in group_ids:
        info, code = _coordinator_slot(ctx, gid)
        if info is None:
            missing[gid] = code
        else:
            split.setdefault((info.disk, info.slot), []).append(gid)
    return split, missing


def _online_disks(ctx: BrokerContext) -> dict[int, Any]:
    out = {}
    for info in ctx.index.partitions(OFFSETS_TOPIC) or []:
        if not ctx.leads(info.slot):
            continue  # cluster mode: only the partitions led here have groups here
        if ctx.table.state(info.slot) == SlotState.ONLINE:
            out.setdefault(info.disk, info)
    return out


async def list_groups(ctx: BrokerContext, request: Request, rc: RequestContext | None) -> dict:
    client_host = rc.client_host if rc is not None else ""  # None: the broker itself asks
    disks = _online_disks(ctx)
    comps = await asyncio.gather(*(_submit(ctx, request, info, client_host) for info in disks.values()))
    groups, error = [], 0
    api = API_BY_KEY[request.api_key]
    for comp in comps:
        if not comp.body:
            error = comp.error_code
            continue
        for g in api.decode_response(request.api_version, comp.body).groups:
            groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type,
                           "group_state": g.group_state})
    if not ctx.index.partitions(OFFSETS_TOPIC):
        error = 0  # no offsets topic yet: there are simply no groups
    return {"throttle_time_ms": 0, "error_code": error, "groups": groups}


async def describe_groups(ctx: BrokerContext, request: Request, rc: RequestContext | None) -> dict:
    client_host = rc.client_host if rc is not None else ""  # None: the broker itself asks
    split, missing = _by_disk(ctx, list(request.body.groups))
    api = API_BY_KEY[request.api_key]
    jobs = [_submit(ctx, request, _Info(disk, slot), client_host,
                    {"groups": gids, "include_authorized_operations": False})
            for (disk, slot), gids in split.items()]
    found: dict[str, Any] = {}
    for comp in await asyncio.gather(*jobs):
        if comp.body:
            for g in api.decode_response(request.api_version, comp.body).groups:
                found[g.group_id] = g
    out = []
    for gid in request.body.groups:
        g = found.get(gid)
        if g is None:
            out.append({"error_code": missing.get(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE), "group_id": gid,
                        "group_state": "", "protocol_type": "", "protocol_data": "", "members": []})
        else:
            out.append(g)
    return {"throttle_time_ms": 0, "groups": out}


async def delete_groups(ctx: BrokerContext, request: Request, rc: RequestContext | None) -> dict:
    client_host = rc.client_host if rc is not None else ""  # None: the broker itself asks
    split, missing = _by_disk(ctx, list(request.body.groups_names))
    api = API_BY_KEY[request.api_key]
    jobs = [_submit(ctx, request, _Info(disk, slot), client_host, {"groups_names": gids})
            for (disk, slot), gids in split.items()]
    found: dict[str, int] = {}
    for comp in await asyncio.gather(*jobs):
        if comp.body:
            for r in api.decode_response(request.api_version, comp.body).results:
                found[r.group_id] = r.error_code
    return {"throttle_time_ms": 0, "results": [
        {"group_id": gid, "error_code": found.get(gid, missing.get(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE))}
        for gid in request.body.groups_names]}


class _Info:
    """The (disk, slot) a group request is sent to."""

    def __init__(self, disk: int, slot: int) -> None:
        self.disk, self.slot = disk, slot
