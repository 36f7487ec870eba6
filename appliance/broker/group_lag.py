"""Consumer-group lag for the metrics endpoint: every group's committed offsets, asked of the
coordinators (in the disk workers) the way a client's ListGroups and OffsetFetch would be, then
compared with the log-end offsets of the partition table at scrape time."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from appliance.broker.handlers import groups
from appliance.broker.handlers.answer import RawBody
from appliance.protocol.registry import API_BY_KEY

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext

__all__ = ["committed_offsets"]

_LIST_GROUPS, _OFFSET_FETCH = 16, 9
_LIST_VERSION, _FETCH_VERSION = 1, 3  # OffsetFetch v2+: topics=None asks for every partition
CLIENT_ID = "appliance-metrics"


def _request(api_key: int, version: int, body: dict) -> Any:
    """A request as the connection would have decoded it (the coordinators take encoded bodies)."""
    api = API_BY_KEY[api_key]
    decoded = api.decode_request(version, api.encode_request(version, body))
    return SimpleNamespace(api_key=api_key, api_version=version, client_id=CLIENT_ID,
                           correlation_id=0, body=decoded)


async def committed_offsets(ctx: BrokerContext, timeout: float = 5.0) -> dict[tuple[str, str, int], int]:
    """{(group, topic, partition): committed offset} of every group (empty if none or no answer
    in ``timeout``: a scrape must not hang on a busy coordinator)."""
    try:
        return await asyncio.wait_for(_committed(ctx), timeout)
    except TimeoutError:
        return {}


async def _committed(ctx: BrokerContext) -> dict[tuple[str, str, int], int]:
    listed = await groups.list_groups(ctx, _request(_LIST_GROUPS, _LIST_VERSION, {}), None)
    ids = [g["group_id"] for g in listed["groups"]]
    answers = await asyncio.gather(*(
        groups.route(ctx, _request(_OFFSET_FETCH, _FETCH_VERSION, {"group_id": gid, "topics": None}), None)
        for gid in ids))
    api = API_BY_KEY[_OFFSET_FETCH]
    out = {}
    for gid, body in zip(ids, answers, strict=True):
        if not isinstance(body, RawBody):
            continue  # the coordinator is not available: no lag to show for this group now
        for t in api.decode_response(_FETCH_VERSION, body).topics:
            for p in t.partitions:
                if p.error_code == 0 and p.committed_offset >= 0:
                    out[(gid, t.name, p.partition_index)] = p.committed_offset
    return out
