"""Test helpers: hypothesis strategies and plain-value walkers derived from our schemas."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from appliance.protocol import types as T
from appliance.protocol.schema import ApiMessage, Struct

_INT_RANGES = {
    T.Int8: (-(2**7), 2**7 - 1), T.Int16: (-(2**15), 2**15 - 1),
    T.Int32: (-(2**31), 2**31 - 1), T.Int64: (-(2**63), 2**63 - 1),
}


def _leaf(t: Any) -> st.SearchStrategy:
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.integers(lo, hi)
    if t is T.Boolean:
        return st.booleans()
    if t is T.String:
        return st.text(max_size=8)
    if t is T.NullableString:
        return st.none() | st.text(max_size=8)
    if t is T.Bytes:
        return st.binary(max_size=12)
    if t is T.NullableBytes:
        return st.none() | st.binary(max_size=12)
    if t is T.Records:
        return st.none() | st.binary(max_size=24)
    if t is T.Uuid:
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(f"no strategy for {t!r}")


def field_strategy(t: Any, v: int) -> st.SearchStrategy:
    if isinstance(t, Struct):
        return struct_strategy(t, v)
    if isinstance(t, T.Array):
        inner = struct_strategy(t.element, v) if isinstance(t.element, Struct) else _leaf(t.element)
        lists = st.lists(inner, max_size=3)
        return (st.none() | lists) if t.nullable else lists
    return _leaf(t)


def struct_strategy(s: Struct, v: int) -> st.SearchStrategy:
    """Dicts holding exactly the fields present in version v."""
    return st.fixed_dictionaries(
        {f.name: field_strategy(f.type_for(v), v) for f in s.fields if f.in_version(v)})


def message_strategy(api: type[ApiMessage], kind: str, v: int) -> st.SearchStrategy:
    s = api._request_struct if kind == "request" else api._response_struct
    return struct_strategy(s, v)


def normalize(x: Any) -> Any:
    """Turn decoded values (Data objects, memoryviews) into plain dicts/lists/bytes."""
    if hasattr(x, "to_dict"):
        x = x.to_dict()
    if isinstance(x, dict):
        return {k: normalize(e) for k, e in x.items()}
    if isinstance(x, list | tuple):
        return [normalize(e) for e in x]
    if isinstance(x, memoryview):
        return x.tobytes()
    return x


def project(value: Any, s: Struct, v: int) -> dict:
    """Only the fields of ``value`` (a normalized dict) that exist in version v."""
    out = {}
    for f in s.fields:
        if not f.in_version(v):
            continue
        x = value[f.name]
        t = f.type_for(v)
        sub = t if isinstance(t, Struct) else getattr(t, "element", None)
        if isinstance(sub, Struct) and x is not None:
            x = project(x, sub, v) if isinstance(t, Struct) else [project(e, sub, v) for e in x]
        out[f.name] = x
    return out


def walk_versions() -> list[tuple[type[ApiMessage], str, int]]:
    from appliance.protocol.registry import API_BY_KEY

    return [(api, kind, v) for _, api in sorted(API_BY_KEY.items())
            for kind in ("request", "response")
            for v in range(api.MIN_VERSION, api.MAX_VERSION + 1)]
