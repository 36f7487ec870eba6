"""Metrics of a request answered by a task handler (every API but Produce): its time (total, and
split into queue, local and remote), the error codes its response carries (top level, per topic,
per partition), and for Fetch the bytes of each partition's records (bytes out per topic) and
the partitions refused."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from appliance.protocol.types import FileSlice

__all__ = ["record_response", "remote_wait", "field"]

_FETCH = 1  # Fetch's API key

# seconds the running request's handler waited for data; each request runs in its own task,
# which has its own copy of the context, so this is per request
remote_wait: ContextVar[float] = ContextVar("remote_wait", default=0.0)


def field(node: Any, name: str) -> Any:
    """A field of a response body or part: handlers build dicts or the protocol's generated
    slotted classes, and the metrics read both."""
    if node.__class__ is dict:
        return node.get(name)
    return getattr(node, name, None)


def _items(node: Any) -> Any:
    if node.__class__ is dict:
        return node.values()
    return (getattr(node, n, None) for n in getattr(node.__class__, "__slots__", ()))


def _is_struct(node: Any) -> bool:
    return node.__class__ is dict or bool(getattr(node.__class__, "__slots__", None))


def record_response(ctx: Any, request: Any, body: Any, queued: float, started: float,
                    ended: float) -> None:
    """``queued``: the request decoded; ``started``: its handler began; ``ended``: its answer
    was ready (time.monotonic() values). Its total time is recorded when its answer is sent
    (:meth:`Recorder.sent`)."""
    m = ctx.metrics
    api = request.api_key
    remote = remote_wait.get()
    m.count(api)
    m.phases(api, started - queued, ended - started - remote, remote)
    if isinstance(body, bytes | bytearray | memoryview) or not _is_struct(body):
        return  # a coordinator's encoded body, or no response
    _errors(m, api, body, 0)
    if api == _FETCH:
        _fetched(ctx, m, body)


def _errors(m: Any, api: int, node: Any, depth: int) -> None:
    """Every ``error_code`` in the body, down to partitions (depth 3 covers every API here)."""
    code = field(node, "error_code")
    if code:
        m.error(api, code)
    if depth >= 3:
        return
    for value in _items(node):
        if isinstance(value, list):
            for item in value:
                if _is_struct(item):
                    _errors(m, api, item, depth + 1)


def _fetched(ctx: Any, m: Any, body: Any) -> None:
    for t in field(body, "responses") or ():
        topic = field(t, "topic")
        for p in field(t, "partitions") or ():
            if field(p, "error_code"):
                m.failed_fetch()
            records = field(p, "records")
            n = records.length if isinstance(records, FileSlice) else len(records or b"")
            if n:
                info = ctx.index.lookup(topic, field(p, "partition_index"))
                if info is not None:
                    m.bytes_out(info.slot, n)
