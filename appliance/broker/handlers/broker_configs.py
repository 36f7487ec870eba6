"""IncrementalAlterConfigs (and the older AlterConfigs) for the broker resource: the dynamic broker keys
(:mod:`appliance.dynamic_config`), for this broker (resource name = its id) or as the
cluster-wide default (resource name "", kafka-configs' ``--entity-default``).

The new set is validated whole, saved, and then every disk worker reloads it
(``MsgType.ALTER_BROKER_CONFIG``) and re-derives its partitions' configs; a refused request
changes nothing. In cluster mode the set goes to ZooKeeper (``/config/brokers/<id>`` or
``<default>``) instead, and every broker's cluster worker mirrors it into its file. Errors as Kafka's: a key that cannot change at run time (or an unknown one)
INVALID_REQUEST, a bad value INVALID_CONFIG, each with a message naming key and value.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from appliance import dynamic_config
from appliance.config import BROKER_KEYS, ConfigError
from appliance.errors import ErrorCode
from appliance.process.cluster_link import ClusterUnavailable
from appliance.shm.layout import MsgType

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext

__all__ = ["alter", "replace", "effective", "cluster_config_write"]

log = logging.getLogger("appliance.admin")

SET, DELETE = 0, 1  # IncrementalAlterConfigs operations; APPEND/SUBTRACT need a list key
_KNOWN = {k.name for k in BROKER_KEYS}


def effective(ctx: BrokerContext) -> tuple[Any, dynamic_config.DynamicConfigs]:
    """(the broker's config with its dynamic values applied, the dynamic values). A file
    damaged while the broker runs is logged and read as empty (the disk workers refuse to
    start on it, so the next start says so plainly)."""
    try:
        dyn = dynamic_config.load(ctx.config)
        return dynamic_config.effective_config(ctx.config, dyn), dyn
    except ConfigError as e:
        log.error("%s", e)
        return ctx.config, dynamic_config.DynamicConfigs()


def _level(ctx: BrokerContext, name: str) -> str | None:
    if name == "":
        return "default"
    if name == str(ctx.broker_id):
        return "broker"
    return None


def _apply(current: dict[str, str], ops: list[Any]) -> dict[str, str]:
    """The level's values after ``ops``. Raises ConfigError (its key, value and reason)."""
    out = dict(current)
    seen: set[str] = set()
    for op in ops:
        name, kind, value = op.name, op.config_operation, op.value
        if name in seen:
            raise ConfigError(name, value, "duplicate config key in the request")
        seen.add(name)
        if name not in dynamic_config.DYNAMIC_BROKER_KEYS:
            raise ConfigError(name, value, "cannot be changed while the broker runs (read-only here)"
                              if name in _KNOWN else "unknown broker configuration key")
        if kind == SET:
            if value is None:
                raise ConfigError(name, value, "a null value cannot be set")
            out[name] = value
        elif kind == DELETE:
            out.pop(name, None)
        else:
            raise ConfigError(name, value, f"operation {kind} needs a list key")
    return out


class _Op(NamedTuple):
    name: str
    config_operation: int
    value: str | None


async def replace(ctx: BrokerContext, res: Any, validate_only: bool) -> tuple[int, str | None]:
    """AlterConfigs (33) on the broker resource: the given configs become the whole dynamic
    set of that level (Kafka's semantics for the old API); keys not given are deleted."""
    level = _level(ctx, res.resource_name)
    if level is None:
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id {res.resource_name!r}"
    given = {c.name: c.value for c in res.configs if c.value is not None}
    try:
        now = getattr(dynamic_config.load(ctx.config), level)
    except ConfigError as e:
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
    ops = [_Op(k, SET, v) for k, v in given.items()] + [_Op(k, DELETE, None) for k in now if k not in given]
    return await alter(ctx, _Resource(res.resource_name, ops), validate_only)


class _Resource(NamedTuple):
    resource_name: str
    configs: list[_Op]


async def alter(ctx: BrokerContext, res: Any, validate_only: bool) -> tuple[int, str | None]:
    level = _level(ctx, res.resource_name)
    if level is None:
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id {res.resource_name!r}"
    with dynamic_config.locked(ctx.config):
        try:
            dyn = dynamic_config.load(ctx.config)
        except ConfigError as e:  # damaged by hand while running: refuse rather than overwrite it
            return ErrorCode.UNKNOWN_SERVER_ERROR, str(e)
        try:
            wanted = _apply(getattr(dyn, level), res.configs)
            dynamic_config.validate(wanted)
        except ConfigError as e:
            code = (ErrorCode.INVALID_CONFIG if e.key in dynamic_config.DYNAMIC_BROKER_KEYS
                    else ErrorCode.INVALID_REQUEST)
            return code, str(e)
        if validate_only:
            return 0, None
        if ctx.cluster_link is None:
            setattr(dyn, level, wanted)
            try:
                dynamic_config.save(ctx.config, dyn)
            except OSError as e:
                return ErrorCode.KAFKA_STORAGE_ERROR, f"cannot save the dynamic broker configs: {e}"
    if ctx.cluster_link is not None:
        # cluster mode: ZooKeeper's /config/brokers/<id|<default>> is the source, written by the
        # cluster worker, which then mirrors it into the file (it takes the lock: not held here)
        return await cluster_config_write(ctx, "brokers", res.resource_name or "<default>", wanted)
    done = await asyncio.gather(*(ctx.disks.submit(d, MsgType.ALTER_BROKER_CONFIG, -1, b"")
                                  for d in range(len(ctx.config.log_dirs))))
    for c in done:
        if c.error_code:
            return c.error_code, "saved, but a disk worker could not apply it (it will at its restart)"
    return 0, None


async def cluster_config_write(ctx: BrokerContext, kind: str, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    """Cluster mode: the cluster worker writes the entity's new set (``kind`` "topics" or
    "brokers") to ZooKeeper, from where every broker applies it (``cluster/config_changes.py``),
    this one before the answer."""
    try:
        return await ctx.cluster_link.write_config(kind, name, configs)
    except ClusterUnavailable as e:
        return ErrorCode.NOT_CONTROLLER, f"this broker has not joined the cluster yet: {e}"
