"""Request handlers, one module per API family, and the tables that route to them.

Two ways in, both keyed by the protocol's API classes (``Produce.API_KEY``, ...):

- :data:`TASK_FREE`: ``start(ctx, request, answer, conn)`` begins the work now and sets the
  ``answer`` future with the encoded response later, from a doorbell callback, then calls
  ``ctx.wakeups.answer_ready(conn)``. No asyncio task (see docs/architecture.md, "The produce
  path without tasks").
- :data:`HANDLERS` (and :data:`GROUP_HANDLERS`, which also get the client's address):
  ``async def handle(ctx, request) -> body``, run as a task by :func:`run`.

A body is a dict the protocol module encodes for the request's version, a ``RawBody``, or
``NO_RESPONSE`` (see :mod:`.answer`). Handlers never touch sockets: they read the shared table,
read segment files, and submit work to disk workers. A new API is one line in one table.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from appliance.broker.broker_context import BrokerContext
from appliance.broker.handlers import (
    alter_replica_log_dirs,
    api_versions,
    configs,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    describe_producers,
    fetch,
    groups,
    incremental_alter_configs,
    list_offsets,
    metadata,
    produce,
    producer_id,
    topics,
)
from appliance.broker.handlers.answer import CloseConnection, encode
from appliance.metrics.recorder import AnswerTiming
from appliance.metrics.responses import record_response
from appliance.protocol.messages import (
    AlterConfigs,
    AlterReplicaLogDirs,
    ApiVersions,
    CreatePartitions,
    CreateTopics,
    DeleteGroups,
    DeleteRecords,
    DeleteTopics,
    DescribeCluster,
    DescribeConfigs,
    DescribeGroups,
    DescribeLogDirs,
    DescribeProducers,
    Fetch,
    FindCoordinator,
    Heartbeat,
    IncrementalAlterConfigs,
    InitProducerId,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    ListOffsets,
    Metadata,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    Produce,
    SyncGroup,
)

__all__ = ["TASK_FREE", "HANDLERS", "GROUP_HANDLERS", "run", "start"]

TASK_FREE = {
    Produce.API_KEY: produce.start,
}

HANDLERS = {
    ApiVersions.API_KEY: api_versions.handle,
    Metadata.API_KEY: metadata.handle,
    Fetch.API_KEY: fetch.handle,
    ListOffsets.API_KEY: list_offsets.handle,
    CreateTopics.API_KEY: topics.handle_create,
    DeleteTopics.API_KEY: topics.handle_delete,
    CreatePartitions.API_KEY: topics.handle_create_partitions,
    DescribeConfigs.API_KEY: configs.handle_describe,
    AlterConfigs.API_KEY: configs.handle_alter,
    IncrementalAlterConfigs.API_KEY: incremental_alter_configs.handle,
    DescribeLogDirs.API_KEY: describe_log_dirs.handle,
    InitProducerId.API_KEY: producer_id.handle,
    FindCoordinator.API_KEY: groups.find_coordinator,
    DeleteRecords.API_KEY: delete_records.handle,
    AlterReplicaLogDirs.API_KEY: alter_replica_log_dirs.handle,
    DescribeCluster.API_KEY: describe_cluster.handle,
    DescribeProducers.API_KEY: describe_producers.handle,
}

# group APIs also need the client's address (DescribeGroups shows it, as Kafka does)
GROUP_HANDLERS = {
    JoinGroup.API_KEY: groups.route,
    SyncGroup.API_KEY: groups.route,
    Heartbeat.API_KEY: groups.route,
    LeaveGroup.API_KEY: groups.route,
    OffsetCommit.API_KEY: groups.route,
    OffsetFetch.API_KEY: groups.route,
    OffsetDelete.API_KEY: groups.route,
    ListGroups.API_KEY: groups.list_groups,
    DescribeGroups.API_KEY: groups.describe_groups,
    DeleteGroups.API_KEY: groups.delete_groups,
}


async def run(ctx: BrokerContext, request: Any, client_host: str = "",
              timing: AnswerTiming | None = None) -> Any:
    """The encoded response chunks for one request (None when it gets no response).
    ``timing`` (metrics only): when it was decoded; its answer's ready time is set here."""
    started = time.monotonic()
    handler = (HANDLERS if ctx.handlers is None else ctx.handlers).get(request.api_key)
    if handler is not None:
        body = await handler(ctx, request)
    elif request.api_key in GROUP_HANDLERS:
        body = await GROUP_HANDLERS[request.api_key](ctx, request, client_host)
    else:
        raise CloseConnection(f"no handler for API key {request.api_key}")
    if timing is not None and ctx.metrics is not None:
        timing.ready = time.monotonic()
        record_response(ctx, request, body, timing.received, started, timing.ready)
    return encode(request, body)


def start(ctx: BrokerContext, request: Any, answer: asyncio.Future, conn: Any) -> None:
    """Start ``request`` (its API is in :data:`TASK_FREE`) without a task. A starter that
    fails sets the answer to its exception: the connection closes, the worker lives."""
    try:
        TASK_FREE[request.api_key](ctx, request, answer, conn)
    except Exception as e:
        if not answer.done():
            answer.set_exception(e)
            ctx.wakeups.answer_ready(conn)
