"""Request handlers, one module per API family, and the one table that routes to them.

:data:`ROUTES` declares, per API key, the handler of a standalone broker and the handler of a
cluster-mode broker side by side (None: not served in that mode), so the difference between the
two modes is read in one place; :func:`table_for` picks a column once, when a network worker
starts. Two ways in:

- task-free (``task_free=True``, Produce): ``start(ctx, request, answer, conn)`` begins the work
  now and sets the ``answer`` future with the encoded response later, from a doorbell callback,
  then calls ``ctx.wakeups.answer_ready(conn)``. No asyncio task (see docs/architecture.md, "The
  produce path without tasks").
- the others: ``async def handle(ctx, request) -> body``, run as a task by :func:`run`. A route
  with ``with_context=True`` also gets the request's :class:`~appliance.broker.door.RequestContext`
  (listener, principal, client address, this broker's address on that listener): Metadata and
  FindCoordinator answer with the listener's address, DescribeGroups shows the client's.

Every request has passed the door (:mod:`appliance.broker.door`) before it gets here.

A body is a dict the protocol module encodes for the request's version, a ``RawBody``, or
``NO_RESPONSE`` (see :mod:`.answer`). Handlers never touch sockets: they read the shared table,
read segment files, and submit work to disk workers. A new API is one line in :data:`ROUTES`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from appliance.broker import authorization
from appliance.broker.broker_context import BrokerContext
from appliance.broker.door import RequestContext
from appliance.broker.handlers import (
    acls,
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
    inter_broker,
    list_offsets,
    metadata,
    one_broker_controller,
    produce,
    sasl,
    topics,
    transactions,
    txn_queries,
    write_txn_markers,
)
from appliance.broker.handlers.answer import CloseConnection, RawBody, api_name, encode
from appliance.metrics.recorder import AnswerTiming
from appliance.metrics.responses import record_response
from appliance.protocol.connection import Request
from appliance.protocol.messages import (
    AddOffsetsToTxn,
    AddPartitionsToTxn,
    AlterConfigs,
    AlterPartitionReassignments,
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
    DescribeTransactions,
    ElectLeaders,
    EndTxn,
    Fetch,
    FindCoordinator,
    Heartbeat,
    IncrementalAlterConfigs,
    InitProducerId,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    ListOffsets,
    ListPartitionReassignments,
    ListTransactions,
    Metadata,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    Produce,
    SyncGroup,
    TxnOffsetCommit,
    WriteTxnMarkers,
)
from appliance.protocol.messages.security import (
    AlterUserScramCredentials,
    CreateAcls,
    DeleteAcls,
    DescribeAcls,
    DescribeUserScramCredentials,
    SaslAuthenticate,
    SaslHandshake,
)

__all__ = ["ROUTES", "Route", "Served", "table_for", "served", "TASK_FREE", "run", "start"]


class Route(NamedTuple):
    """How one API is served: by a standalone broker, and by a broker in a cluster."""

    standalone: Callable | None
    cluster: Callable | None
    task_free: bool = False  # started without a task (answered from a doorbell callback)
    with_context: bool = False  # the handler also gets the request's RequestContext


def _both(handler: Callable, **kw: bool) -> Route:
    """The same handler in both modes (the disk worker or the data tell the modes apart)."""
    return Route(handler, handler, **kw)


_group = functools.partial(_both, with_context=True)

# the controller's inter-broker requests and the leader's OffsetsForLeaderEpoch: cluster only
LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN = 4, 5, 6, 7

ROUTES: dict[int, Route] = {
    Produce.API_KEY: _both(produce.start, task_free=True),
    Fetch.API_KEY: _both(fetch.handle),
    ListOffsets.API_KEY: _both(list_offsets.handle),
    ApiVersions.API_KEY: Route(api_versions.handle, inter_broker.api_versions_in_cluster),
    Metadata.API_KEY: Route(metadata.handle, inter_broker.forward, with_context=True),
    CreateTopics.API_KEY: Route(topics.handle_create, inter_broker.forward),
    DeleteTopics.API_KEY: Route(topics.handle_delete, inter_broker.forward),
    CreatePartitions.API_KEY: Route(topics.handle_create_partitions, inter_broker.forward),
    DescribeConfigs.API_KEY: _both(configs.handle_describe),
    AlterConfigs.API_KEY: _both(configs.handle_alter),
    IncrementalAlterConfigs.API_KEY: _both(incremental_alter_configs.handle),
    DescribeLogDirs.API_KEY: _both(describe_log_dirs.handle),
    InitProducerId.API_KEY: _both(transactions.init_producer_id),
    AddPartitionsToTxn.API_KEY: _both(transactions.route),
    AddOffsetsToTxn.API_KEY: _both(transactions.route),
    EndTxn.API_KEY: _both(transactions.route),
    DescribeTransactions.API_KEY: _both(txn_queries.describe_transactions, with_context=True),
    ListTransactions.API_KEY: _both(txn_queries.list_transactions, with_context=True),
    FindCoordinator.API_KEY: Route(groups.find_coordinator, inter_broker.find_coordinator,
                                   with_context=True),
    DeleteRecords.API_KEY: _both(delete_records.handle),
    AlterReplicaLogDirs.API_KEY: _both(alter_replica_log_dirs.handle),
    DescribeCluster.API_KEY: Route(describe_cluster.handle, inter_broker.describe_cluster_in_cluster,
                                   with_context=True),
    DescribeProducers.API_KEY: _both(describe_producers.handle),
    ElectLeaders.API_KEY: Route(one_broker_controller.elect_leaders, inter_broker.forward),
    AlterPartitionReassignments.API_KEY: Route(one_broker_controller.alter_reassignments,
                                               inter_broker.forward),
    ListPartitionReassignments.API_KEY: Route(one_broker_controller.list_reassignments,
                                              inter_broker.forward),
    JoinGroup.API_KEY: _group(groups.route),
    SyncGroup.API_KEY: _group(groups.route),
    Heartbeat.API_KEY: _group(groups.route),
    LeaveGroup.API_KEY: _group(groups.route),
    OffsetCommit.API_KEY: _group(groups.route),
    OffsetFetch.API_KEY: _group(groups.route),
    OffsetDelete.API_KEY: _group(groups.route),
    TxnOffsetCommit.API_KEY: _group(groups.route),  # to the group coordinator (KIP-98)
    ListGroups.API_KEY: _group(groups.list_groups),
    DescribeGroups.API_KEY: _group(groups.describe_groups),
    DeleteGroups.API_KEY: _group(groups.delete_groups),
    SaslHandshake.API_KEY: _both(sasl.handshake_refused),
    SaslAuthenticate.API_KEY: _both(sasl.authenticate_refused),
    DescribeUserScramCredentials.API_KEY: Route(sasl.describe_scram, inter_broker.forward),
    AlterUserScramCredentials.API_KEY: Route(sasl.alter_scram, inter_broker.forward),
    DescribeAcls.API_KEY: Route(acls.describe, inter_broker.forward),
    CreateAcls.API_KEY: Route(acls.create, inter_broker.forward),
    DeleteAcls.API_KEY: Route(acls.delete, inter_broker.forward),
    LEADER_AND_ISR: Route(None, inter_broker.forward),
    STOP_REPLICA: Route(None, inter_broker.forward),
    UPDATE_METADATA: Route(None, inter_broker.forward),
    CONTROLLED_SHUTDOWN: Route(None, inter_broker.forward),
    inter_broker.OFFSETS_FOR_LEADER_EPOCH: Route(None, inter_broker.offsets_for_leader_epoch),
    WriteTxnMarkers.API_KEY: _both(write_txn_markers.handle),
}


class Served(NamedTuple):
    """One API as this broker's mode serves it."""

    handler: Callable
    task_free: bool
    with_context: bool


def table_for(cluster: bool) -> dict[int, Served]:
    """The column of :data:`ROUTES` for one mode; the APIs the mode does not serve left out."""
    return {key: Served(h, r.task_free, r.with_context) for key, r in ROUTES.items()
            if (h := r.cluster if cluster else r.standalone) is not None}


STANDALONE = table_for(cluster=False)
CLUSTER = table_for(cluster=True)
# the APIs started without a task, in either mode (a set: the generic path asks for every request)
TASK_FREE = frozenset(key for key, r in ROUTES.items() if r.task_free)


def served(ctx: BrokerContext, api_key: int) -> Served | None:
    """How this broker's mode serves ``api_key`` (None: it does not). A network worker is in
    cluster mode once it has joined (its line to the cluster worker is set)."""
    return (STANDALONE if ctx.cluster_link is None else CLUSTER).get(api_key)




async def run(ctx: BrokerContext, request: Request, rc: RequestContext,
              timing: AnswerTiming | None = None) -> Any:
    """The encoded response chunks for one request the door let in (None when it gets no
    response). ``timing`` (metrics only, from the door): when it was decoded; its answer's
    ready time is set here."""
    started = time.monotonic()
    how = served(ctx, request.api_key)
    if how is None:
        raise CloseConnection(f"no handler for API key {request.api_key}")
    denied = authorization.check(ctx, request, rc) if ctx.authorizer is not None else None
    if denied is not None:
        body = denied
        authorization.note_denial(ctx, rc.principal, rc.connection.client_address,
                                  f"{api_name(request.api_key)} v{request.api_version}")
    elif how.with_context:
        body = await how.handler(ctx, request, rc)
    else:
        body = await how.handler(ctx, request)
    if ctx.authorizer is not None and request.api_key == Metadata.API_KEY and denied is None:
        if isinstance(body, RawBody):  # the cluster worker's answer: filtered here, re-encoded
            body = Metadata.decode_response(request.api_version, memoryview(body), 0)
        body = authorization.filter_metadata(ctx, rc, request, body)
    if timing is not None and ctx.metrics is not None:
        timing.ready = time.monotonic()
        record_response(ctx, request, body, timing.received, started, timing.ready)
    return encode(request, body)


def start(ctx: BrokerContext, request: Request, answer: asyncio.Future, conn: Any) -> None:
    """Start ``request`` (its route is task-free) without a task. A starter that fails sets
    the answer to its exception: the connection closes, the worker lives."""
    try:
        served(ctx, request.api_key).handler(ctx, request, answer, conn)
    except Exception as e:
        if not answer.done():
            answer.set_exception(e)
            ctx.wakeups.answer_ready(conn)
