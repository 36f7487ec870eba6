"""IncrementalAlterConfigs (KIP-339) for topics: change named keys and leave the others alone
(AlterConfigs, by contrast, replaces the whole set of overrides).

SET overrides a key; DELETE drops its override (the broker default shows again); APPEND and
SUBTRACT add or remove items of a list key (``cleanup.policy``), starting from its current value.
The resulting overrides are validated as a whole before anything is written, so a refused
request changes nothing. Broker resources: the dynamic broker keys, in :mod:`.broker_configs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appliance.broker.handlers import broker_configs
from appliance.broker.handlers.configs import BROKER, TOPIC, _alter_topic, topic_overrides
from appliance.config import TOPIC_KEYS, TopicConfig
from appliance.errors import ErrorCode

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext
    from appliance.protocol.connection import Request

__all__ = ["handle", "apply_operations", "SET", "DELETE", "APPEND", "SUBTRACT"]

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_TYPES = {k.name: k.type for k in TOPIC_KEYS}


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _items(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [v.strip() for v in str(value).split(",") if v.strip()]


def apply_operations(current: dict[str, str], ops: list[Any], config: Any) -> dict[str, str]:
    """The overrides after ``ops`` (objects with name, config_operation, value) are applied to
    ``current``. Raises _Refused with Kafka's error code for a bad operation."""
    out = dict(current)
    seen: set[str] = set()
    for op in ops:
        name, kind, value = op.name, op.config_operation, op.value
        if name in seen:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {name}")
        seen.add(name)
        if name not in _TYPES:
            raise _Refused(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if kind == SET:
            if value is None:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {name}")
            out[name] = value
        elif kind == DELETE:
            out.pop(name, None)
        elif kind in (APPEND, SUBTRACT):
            if _TYPES[name] != "list":
                raise _Refused(ErrorCode.INVALID_CONFIG,
                               f"Config value append/subtract is not allowed for config key {name}: not a list")
            now = _items(out[name] if name in out else TopicConfig.from_overrides(config, current)[name])
            change = _items(value)
            if kind == APPEND:
                now += [v for v in change if v not in now]
            else:
                now = [v for v in now if v not in change]
            out[name] = ",".join(now)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown config operation {kind} for {name}")
    return out


async def _one(ctx: BrokerContext, res: Any, validate_only: bool) -> tuple[int, str | None]:
    if res.resource_type == BROKER:
        return await broker_configs.alter(ctx, res, validate_only)
    if res.resource_type != TOPIC:
        return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
    current = await topic_overrides(ctx, res.resource_name)
    if current is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{res.resource_name}' does not exist."
    try:
        wanted = apply_operations(current, res.configs, ctx.config)
    except _Refused as e:
        return e.code, str(e)
    return await _alter_topic(ctx, res.resource_name, wanted, validate_only)


async def handle(ctx: BrokerContext, request: Request) -> dict:
    body = request.body
    out = []
    for res in body.resources:
        code, message = await _one(ctx, res, body.validate_only)
        out.append({"error_code": code, "error_message": message, "resource_type": res.resource_type,
                    "resource_name": res.resource_name})
    return {"throttle_time_ms": 0, "responses": out}
