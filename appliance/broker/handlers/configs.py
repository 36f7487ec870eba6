"""DescribeConfigs and AlterConfigs for topics (resource type 2) and this broker (type 4)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from appliance.broker.handlers import broker_configs
from appliance.broker.handlers.config_entries import (
    broker_entries,
    default_broker_entries,
    topic_entries,
)
from appliance.config import BROKER_KEYS, TOPIC_KEYS, ConfigError, TopicConfig
from appliance.errors import ErrorCode
from appliance.process.cluster_link import ClusterUnavailable
from appliance.shm.layout import MsgType

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle_describe", "handle_alter", "topic_overrides", "TOPIC", "BROKER"]

TOPIC, BROKER = 2, 4

# DescribeConfigs v3+ (KIP-569): Kafka's ConfigType codes for our key types
_CONFIG_TYPE = {"boolean": 1, "bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7, "class": 8, "password": 9}
_KEYS = {TOPIC: {k.name: k for k in TOPIC_KEYS}, BROKER: {k.name: k for k in BROKER_KEYS}}


def _describe_keys(resource_type: int, configs: list[dict], documentation: bool) -> None:
    """Add each entry's type and (when asked) its documentation."""
    keys = _KEYS.get(resource_type, {})
    for c in configs:
        key = keys.get(c["name"])
        if key is not None:
            c["config_type"] = _CONFIG_TYPE.get(key.type, 0)
            if documentation:
                c["documentation"] = key.doc


async def topic_overrides(ctx: BrokerContext, name: str) -> dict[str, str] | None:
    """The topic's overrides; None when there is no such topic. Standalone: as saved beside its
    partitions; in a cluster: ZooKeeper's (so a broker without a replica answers too), or, with
    the cluster worker away, the local ones."""
    parts = ctx.index.partitions(name)
    if ctx.cluster_link is not None:
        try:
            return await ctx.cluster_link.topic_config(name)
        except ClusterUnavailable:
            pass
    return dict(ctx.readers.topic_overrides(parts[0].disk, name)) if parts else None


async def handle_describe(ctx: BrokerContext, request: Request) -> dict:
    effective = broker_configs.effective(ctx)  # the dynamic broker configs, read once per request
    results = []
    for res in request.body.resources:
        r = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
             "resource_name": res.resource_name, "configs": []}
        keys = list(res.configuration_keys) if res.configuration_keys is not None else None
        if res.resource_type == TOPIC:
            overrides = await topic_overrides(ctx, res.resource_name)
            if overrides is None:
                r.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         error_message=f"Topic '{res.resource_name}' does not exist.")
            else:
                r["configs"] = topic_entries(effective[0], overrides, keys, request.body.include_synonyms,
                                             effective[1])
        elif res.resource_type == BROKER:
            if res.resource_name == "":  # the cluster-wide dynamic defaults (--entity-default)
                r["configs"] = default_broker_entries(effective[1], keys, request.body.include_synonyms)
            elif res.resource_name != str(ctx.broker_id):
                r.update(error_code=ErrorCode.INVALID_REQUEST,
                         error_message=f"Unexpected broker id {res.resource_name!r}")
            else:
                r["configs"] = broker_entries(effective[0], keys, request.body.include_synonyms, effective[1])
        else:
            r.update(error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"Unsupported resource type {res.resource_type}")
        if request.api_version >= 3:
            _describe_keys(res.resource_type, r["configs"], request.body.include_documentation)
        results.append(r)
    return {"throttle_time_ms": 0, "results": results}


async def _alter_topic(ctx: BrokerContext, name: str, configs: dict[str, str], validate_only: bool) -> tuple[int, str | None]:
    parts = ctx.index.partitions(name)
    if not parts and (ctx.cluster_link is None or await topic_overrides(ctx, name) is None):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
    try:
        TopicConfig.from_overrides(ctx.config, configs)
    except ConfigError as e:
        return ErrorCode.INVALID_CONFIG, str(e)
    if validate_only:
        return 0, None
    if ctx.cluster_link is not None:  # cluster mode: through ZooKeeper, to every broker
        return await broker_configs.cluster_config_write(ctx, "topics", name, configs)
    payload = json.dumps({"configs": configs}).encode()
    results = await asyncio.gather(*(
        ctx.disks.submit(i.disk, MsgType.ALTER_CONFIG, i.slot, payload) for i in parts))
    for c in results:
        if c.error_code:
            return c.error_code, None
    return 0, None


async def handle_alter(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    out = []
    for res in body.resources:
        r = {"error_code": 0, "error_message": None, "resource_type": res.resource_type,
             "resource_name": res.resource_name}
        if res.resource_type == TOPIC:
            # AlterConfigs replaces the whole set of overrides (Kafka's semantics, unlike
            # IncrementalAlterConfigs)
            configs = {c.name: c.value for c in res.configs if c.value is not None}
            r["error_code"], r["error_message"] = await _alter_topic(
                ctx, res.resource_name, configs, body.validate_only)
        elif res.resource_type == BROKER:
            r["error_code"], r["error_message"] = await broker_configs.replace(ctx, res, body.validate_only)
        else:
            r.update(error_code=ErrorCode.INVALID_REQUEST,
                     error_message=f"Unsupported resource type {res.resource_type}")
        out.append(r)
    return {"throttle_time_ms": 0, "responses": out}
