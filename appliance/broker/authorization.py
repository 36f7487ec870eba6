"""What each API needs the principal to be allowed (Kafka's KafkaApis authorize calls), and the
answer when it is not. Runs only when ``authorizer.class.name`` is set (``ctx.authorizer``).

:func:`check` is called once per request before its handler: None lets it in; otherwise the
request's error answer (Kafka's TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED in the answer's
own fields). Departure: a request naming several topics is refused whole when any of them is
not allowed (Kafka serves the allowed ones and fails the others); clients keep a request's topics
to the ones they were given. Metadata is the exception: :func:`filter_metadata` leaves out the
topics the principal may not Describe, as Kafka does; so are DescribeTransactions and
ListTransactions, which check each transactional id (and topic) in their handler
(``handlers/txn_queries.py``), as Kafka's KafkaApis does. Produce is checked where it starts
(``handlers/produce.py``, and its fast path declines what is not allowed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from appliance.broker.door import RequestContext
from appliance.errors import ErrorCode
from appliance.protocol.connection import Request
from appliance.security.acl import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CLUSTER_ACTION,
    CLUSTER_NAME,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    IDEMPOTENT_WRITE,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
)

__all__ = ["check", "filter_metadata", "allowed", "note_denial"]

log = logging.getLogger("appliance.authorizer")
# clients (principal, address) whose first denial was logged; later ones are only counted
_LOGGED: set[tuple[str, str]] = set()
_LOGGED_MAX = 10_000

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def allowed(ctx: Any, rc: RequestContext, operation: int, resource_type: int, name: str) -> bool:
    return ctx.authorizer.allowed(rc.principal, rc.connection.client_address, operation, resource_type, name)


def _cluster(ctx: Any, rc: RequestContext, operation: int) -> bool:
    return allowed(ctx, rc, operation, CLUSTER, CLUSTER_NAME)


def _topics_ok(ctx: Any, rc: RequestContext, operation: int, names: list[str]) -> bool:
    return all(allowed(ctx, rc, operation, TOPIC, n) for n in names)


# -- error answers shaped like each API's response ---------------------------------------------

def _fetch_answer(body: Any, code: int) -> dict:
    return {"error_code": 0, "responses": [
        {"topic": getattr(t, "topic", ""), "topic_id": getattr(t, "topic_id", None),
         "partitions": [{"partition_index": p.partition, "error_code": code, "high_watermark": -1,
                         "last_stable_offset": -1, "log_start_offset": -1, "records": b""}
                        for p in t.partitions]}
        for t in body.topics]}


def _fetch_allowed(ctx: Any, rc: RequestContext, b: Any) -> bool:
    replica = b.replica_id
    state = getattr(b, "replica_state", None)  # v15+: the replica id moved here (KIP-903)
    if state is not None and state.replica_id >= 0:
        replica = state.replica_id
    if replica >= 0:
        return _cluster(ctx, rc, CLUSTER_ACTION)
    names = [t.topic if getattr(t, "topic", None) else ctx.index.topic_name(t.topic_id) or ""
             for t in b.topics]  # v13+: topics by id
    return _topics_ok(ctx, rc, READ, names)


def _list_offsets_answer(body: Any, code: int) -> dict:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code, "offset": -1, "timestamp": -1}
        for p in t.partitions]} for t in body.topics]}


def _offset_commit_answer(body: Any, code: int) -> dict:
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
        for t in body.topics]}


def _topic_names(field: str, item_name: str = "name") -> Callable[[Any], list[str]]:
    return lambda body: [getattr(t, item_name) if not isinstance(t, str) else t
                         for t in (getattr(body, field, None) or [])]


def _per_topic(result_field: str, names: Callable[[Any], list[str]]) -> Callable[[Any, int], dict]:
    return lambda body, code: {result_field: [{"name": n, "error_code": code, "error_message": None}
                                              for n in names(body)]}


def _configs_answer(body: Any, code: int) -> dict:
    return {"results": [{"error_code": code, "resource_type": r.resource_type,
                         "resource_name": r.resource_name, "configs": []} for r in body.resources],
            "responses": [{"error_code": code, "resource_type": r.resource_type,
                           "resource_name": r.resource_name} for r in body.resources]}


def _top(code_field: str = "error_code", **extra: Any) -> Callable[[Any, int], dict]:
    return lambda body, code: {code_field: code, **extra}


def _config_resources(ctx: Any, rc: RequestContext, body: Any, operation: int) -> bool:
    for r in body.resources:
        if r.resource_type == 2:
            if not allowed(ctx, rc, operation, TOPIC, r.resource_name):
                return False
        elif not _cluster(ctx, rc, operation):
            return False
    return True


def _offset_fetch_groups(body: Any) -> list[str]:
    """OffsetFetch's groups: one (v0-7) or a list (v8+)."""
    groups = getattr(body, "groups", None)
    return [g.group_id for g in groups] if groups else [body.group_id]


def _delete_topics_names(body: Any) -> list[str]:
    return list(body.topic_names or []) or [t.name for t in (getattr(body, "topics", None) or [])]


# api key -> (is it allowed?, its error answer)
_RULES: dict[int, tuple[Callable[[Any, RequestContext, Any], bool], Callable[[Any, int], dict], int]] = {
    1: (_fetch_allowed, _fetch_answer, TOPIC_DENIED),
    2: (lambda ctx, rc, b: _topics_ok(ctx, rc, DESCRIBE, [t.name for t in b.topics]),
        _list_offsets_answer, TOPIC_DENIED),
    8: (lambda ctx, rc, b: allowed(ctx, rc, READ, GROUP, b.group_id)
        and _topics_ok(ctx, rc, READ, [t.name for t in b.topics]), _offset_commit_answer, GROUP_DENIED),
    9: (lambda ctx, rc, b: all(allowed(ctx, rc, DESCRIBE, GROUP, g) for g in _offset_fetch_groups(b)),
        lambda b, code: {"error_code": code, "groups": [{"group_id": g, "error_code": code, "topics": []}
                                                          for g in _offset_fetch_groups(b)]}, GROUP_DENIED),
    10: (lambda ctx, rc, b: allowed(ctx, rc, DESCRIBE, TRANSACTIONAL_ID if b.key_type == 1 else GROUP, b.key),
         lambda b, code: {"error_code": TXN_DENIED if b.key_type == 1 else code}, GROUP_DENIED),
    11: (lambda ctx, rc, b: allowed(ctx, rc, READ, GROUP, b.group_id), _top(), GROUP_DENIED),
    12: (lambda ctx, rc, b: allowed(ctx, rc, READ, GROUP, b.group_id), _top(), GROUP_DENIED),
    13: (lambda ctx, rc, b: allowed(ctx, rc, READ, GROUP, b.group_id), _top(), GROUP_DENIED),
    14: (lambda ctx, rc, b: allowed(ctx, rc, READ, GROUP, b.group_id), _top(), GROUP_DENIED),
    15: (lambda ctx, rc, b: all(allowed(ctx, rc, DESCRIBE, GROUP, g) for g in b.groups),
         lambda b, code: {"groups": [{"group_id": g, "error_code": code} for g in b.groups]}, GROUP_DENIED),
    16: (lambda ctx, rc, b: _cluster(ctx, rc, DESCRIBE), _top(groups=[]), CLUSTER_DENIED),
    19: (lambda ctx, rc, b: _cluster(ctx, rc, CREATE)
         or _topics_ok(ctx, rc, CREATE, [t.name for t in b.topics]),
         _per_topic("topics", lambda b: [t.name for t in b.topics]), TOPIC_DENIED),
    20: (lambda ctx, rc, b: _topics_ok(ctx, rc, DELETE, _delete_topics_names(b)),
         _per_topic("responses", _delete_topics_names), TOPIC_DENIED),
    21: (lambda ctx, rc, b: _topics_ok(ctx, rc, DELETE, [t.name for t in b.topics]),
         lambda b, code: {"topics": [{"name": t.name, "partitions": [
             {"partition_index": p.partition_index, "error_code": code, "low_watermark": -1}
             for p in t.partitions]} for t in b.topics]}, TOPIC_DENIED),
    22: (lambda ctx, rc, b: allowed(ctx, rc, WRITE, TRANSACTIONAL_ID, b.transactional_id)
         if b.transactional_id else _cluster(ctx, rc, IDEMPOTENT_WRITE),
         _top(producer_id=-1, producer_epoch=-1), CLUSTER_DENIED),
    # the transaction APIs (Kafka: Write on the transactional id, and on each topic added)
    24: (lambda ctx, rc, b: allowed(ctx, rc, WRITE, TRANSACTIONAL_ID, b.transactional_id)
         and _topics_ok(ctx, rc, WRITE, [t.name for t in b.topics]),
         lambda b, code: {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
             {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": code}
                                                       for p in t.partitions]} for t in b.topics]}, TXN_DENIED),
    25: (lambda ctx, rc, b: allowed(ctx, rc, WRITE, TRANSACTIONAL_ID, b.transactional_id)
         and allowed(ctx, rc, READ, GROUP, b.group_id), _top(), TXN_DENIED),
    26: (lambda ctx, rc, b: allowed(ctx, rc, WRITE, TRANSACTIONAL_ID, b.transactional_id), _top(), TXN_DENIED),
    28: (lambda ctx, rc, b: allowed(ctx, rc, WRITE, TRANSACTIONAL_ID, b.transactional_id)
         and allowed(ctx, rc, READ, GROUP, b.group_id)
         and _topics_ok(ctx, rc, READ, [t.name for t in b.topics]), _offset_commit_answer, TXN_DENIED),
    32: (lambda ctx, rc, b: _config_resources(ctx, rc, b, DESCRIBE_CONFIGS), _configs_answer, TOPIC_DENIED),
    33: (lambda ctx, rc, b: _config_resources(ctx, rc, b, ALTER_CONFIGS), _configs_answer, TOPIC_DENIED),
    44: (lambda ctx, rc, b: _config_resources(ctx, rc, b, ALTER_CONFIGS), _configs_answer, TOPIC_DENIED),
    37: (lambda ctx, rc, b: _topics_ok(ctx, rc, ALTER, [t.name for t in b.topics]),
         _per_topic("results", lambda b: [t.name for t in b.topics]), TOPIC_DENIED),
    42: (lambda ctx, rc, b: all(allowed(ctx, rc, DELETE, GROUP, g) for g in b.groups_names),
         lambda b, code: {"results": [{"group_id": g, "error_code": code} for g in b.groups_names]},
         GROUP_DENIED),
    47: (lambda ctx, rc, b: allowed(ctx, rc, DELETE, GROUP, b.group_id), _top(), GROUP_DENIED),
    61: (lambda ctx, rc, b: _topics_ok(ctx, rc, READ, [t.name for t in b.topics]),
         lambda b, code: {"topics": [{"name": t.name, "partitions": [
             {"partition_index": p, "error_code": code} for p in t.partition_indexes]} for t in b.topics]},
         TOPIC_DENIED),
}
# the cluster's own resource: (operation, error answer)
_CLUSTER_RULES: dict[int, tuple[int, Callable[[Any, int], dict]]] = {
    29: (DESCRIBE, _top(error_message="Cluster authorization failed.", resources=[])),
    30: (ALTER, lambda b, code: {"results": [{"error_code": code} for _ in b.creations]}),
    31: (ALTER, lambda b, code: {"filter_results": [{"error_code": code, "matching_acls": []} for _ in b.filters]}),
    34: (ALTER, lambda b, code: {"results": [{"topic_name": t.name, "partitions": [
        {"partition_index": p, "error_code": code} for p in t.partitions]} for d in b.dirs for t in d.topics]}),
    35: (DESCRIBE, _top(results=[])),
    43: (ALTER, _top()),
    45: (ALTER, _top(error_message="Cluster authorization failed.", responses=[])),
    46: (DESCRIBE, _top(error_message="Cluster authorization failed.", topics=[])),
    50: (DESCRIBE, _top(results=[])),
    51: (ALTER, lambda b, code: {"results": [{"user": u.name, "error_code": code}
                                             for u in [*b.deletions, *b.upsertions]]}),
    60: (DESCRIBE, _top()),
    # the controller's and the leaders' requests between brokers
    4: (CLUSTER_ACTION, _top()), 5: (CLUSTER_ACTION, _top()), 6: (CLUSTER_ACTION, _top()),
    7: (CLUSTER_ACTION, _top()), 23: (CLUSTER_ACTION, _top(topics=[])),
    # a transaction coordinator's markers to the partitions' leaders (Kafka: CLUSTER_ACTION)
    27: (CLUSTER_ACTION, lambda b, code: {"markers": [{"producer_id": m.producer_id, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p, "error_code": code}
                                        for p in t.partition_indexes]} for t in m.topics]}
        for m in b.markers]}),
}


def check(ctx: Any, request: Request, rc: RequestContext) -> dict | None:
    """None when ``rc``'s principal may make ``request``; else its error answer."""
    rule = _RULES.get(request.api_key)
    if rule is not None:
        ok, answer, code = rule
        return None if ok(ctx, rc, request.body) else answer(request.body, code)
    cluster = _CLUSTER_RULES.get(request.api_key)
    if cluster is not None:
        operation, answer = cluster
        return None if _cluster(ctx, rc, operation) else answer(request.body, CLUSTER_DENIED)
    return None  # ApiVersions, SaslHandshake, SaslAuthenticate, Metadata (filtered after)


def filter_metadata(ctx: Any, rc: RequestContext, request: Request, body: Any) -> Any:
    """Metadata without the topics the principal may not Describe (a topic asked for by name
    answers TOPIC_AUTHORIZATION_FAILED instead), as Kafka's."""
    d = body if isinstance(body, dict) else body.to_dict()
    asked = {t.name for t in request.body.topics or []} if request.body.topics else None
    kept = []
    for t in d.get("topics") or []:
        name = t.get("name")
        if name is None or allowed(ctx, rc, DESCRIBE, TOPIC, name):
            kept.append(t)
        elif asked is not None and name in asked:
            kept.append({**t, "error_code": int(TOPIC_DENIED), "partitions": [], "is_internal": False})
            note_denial(ctx, rc.principal, rc.connection.client_address, f"Describe on topic {name}")
    d["topics"] = kept
    return d


def note_denial(ctx: Any, principal: str, address: str, what: str) -> None:
    """Count a refusal in the metrics; log the first one of each client (principal and
    address) in this network worker, so a client retrying what it may not do cannot flood the
    log."""
    if ctx.metrics is not None:
        ctx.metrics.authorization_denied()
    key = (principal, address)
    if key in _LOGGED:
        return
    if len(_LOGGED) >= _LOGGED_MAX:
        _LOGGED.clear()
    _LOGGED.add(key)
    log.warning("%s from %s: %s refused by the ACLs (later refusals of this client are counted, "
                "not logged)", principal, address or "?", what)
