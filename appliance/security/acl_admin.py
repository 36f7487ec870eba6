"""CreateAcls, DescribeAcls and DeleteAcls over a list of ACLs (the store is the caller's: a
standalone broker's ``acls.json``, or ZooKeeper in a cluster), and Kafka's ZooKeeper layout of
them: ``/kafka-acl/<Type>/<name>`` (LITERAL), ``/kafka-acl-extended/prefixed/<Type>/<name>``,
each ``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from appliance.errors import ErrorCode
from appliance.security.acl import (
    LITERAL,
    OPERATIONS,
    PERMISSIONS,
    PREFIXED,
    RESOURCE_TYPES,
    Acl,
    AclError,
    AclFilter,
    code_of,
    name_of,
)

__all__ = ["create_body", "delete_body", "describe_body", "acl_of", "filter_of", "zk_path",
           "encode_node", "decode_node", "ACL_ROOTS"]

ACL_ROOTS = {LITERAL: "/kafka-acl", PREFIXED: "/kafka-acl-extended/prefixed"}


def acl_of(c: Any) -> Acl:
    """A CreateAcls creation as an ACL. Raises AclError naming what is wrong."""
    a = Acl(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", LITERAL),
            c.principal, c.host, c.operation, c.permission_type)
    a.check()
    return a


def filter_of(f: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter (the same field names)."""
    return AclFilter(f.resource_type_filter, f.resource_name_filter, getattr(f, "pattern_type_filter", LITERAL),
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)


def create_body(request: Any, current: list[Acl]) -> tuple[list[Acl], dict]:
    results, acls = [], list(current)
    for c in request.creations:
        try:
            a = acl_of(c)
        except AclError as e:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
            continue
        if a not in acls:
            acls.append(a)
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    return acls, {"throttle_time_ms": 0, "results": results}


def _binding(a: Acl) -> dict:
    return {"resource_type": a.resource_type, "resource_name": a.name, "pattern_type": a.pattern,
            "principal": a.principal, "host": a.host, "operation": a.operation, "permission_type": a.permission}


def delete_body(request: Any, current: list[Acl]) -> tuple[list[Acl], dict]:
    acls = list(current)
    out = []
    for f in request.filters:
        flt = filter_of(f)
        gone = [a for a in acls if flt.matches(a)]
        acls = [a for a in acls if a not in gone]
        out.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, **_binding(a)} for a in gone]})
    return acls, {"throttle_time_ms": 0, "filter_results": out}


def describe_body(request: Any, acls: Iterable[Acl]) -> dict:
    flt = filter_of(request)
    grouped: dict[tuple[int, str, int], list[Acl]] = {}
    for a in acls:
        if flt.matches(a):
            grouped.setdefault((a.resource_type, a.name, a.pattern), []).append(a)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
        {"resource_type": t, "resource_name": n, "pattern_type": p,
         "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                   "permission_type": a.permission} for a in sorted(group, key=lambda a: (a.principal, a.operation))]}
        for (t, n, p), group in sorted(grouped.items())]}


def zk_path(resource_type: int, name: str, pattern: int) -> str:
    return f"{ACL_ROOTS[pattern]}/{name_of(RESOURCE_TYPES, resource_type)}/{name}"


def encode_node(acls: Iterable[Acl]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": name_of(PERMISSIONS, a.permission),
         "operation": name_of(OPERATIONS, a.operation), "host": a.host} for a in acls]},
        separators=(",", ":")).encode()


def decode_node(resource_type: str, name: str, pattern: int, data: bytes) -> list[Acl]:
    """The ACLs of one znode. Raises AclError / ValueError for one that is not Kafka's."""
    obj = json.loads(data or b"{}")
    rtype = code_of(RESOURCE_TYPES, resource_type)
    return [Acl(rtype, name, pattern, e["principal"], e["host"], code_of(OPERATIONS, e["operation"]),
                code_of(PERMISSIONS, e["permissionType"])) for e in obj.get("acls", [])]
