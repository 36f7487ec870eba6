"""`appliance acls`: kafka-acls.sh through CreateAcls, DescribeAcls and DeleteAcls.

    appliance acls --bootstrap-server B --add --allow-principal User:alice --operation Write --topic t
    appliance acls --bootstrap-server B --add --allow-principal User:bob --operation Read --group g \\
        --resource-pattern-type prefixed
    appliance acls --bootstrap-server B --add --deny-principal User:eve --operation All --topic '*'
    appliance acls --bootstrap-server B --list [--topic t] [--principal User:alice]
    appliance acls --bootstrap-server B --remove --allow-principal User:alice --operation Write --topic t

``--producer`` / ``--consumer`` add the ACLs those roles need, as kafka-acls.sh does (Write,
Describe and Create on the topic; Read and Describe on the topic and Read on the group)."""

from __future__ import annotations

import argparse
from typing import Any

from appliance.cli.common import add_bootstrap, connect
from appliance.cli.main import CliError
from appliance.errors import ErrorCode
from appliance.security.acl import (
    ALLOW,
    CLUSTER,
    CLUSTER_NAME,
    DENY,
    GROUP,
    LITERAL,
    OPERATIONS,
    PATTERNS,
    PERMISSIONS,
    RESOURCE_TYPES,
    TOPIC,
    TRANSACTIONAL_ID,
    AclError,
    code_of,
    name_of,
)

__all__ = ["add_arguments", "run"]

ANY, MATCH = 1, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove the ACLs matching the options")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources given)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic (* for all)")
    p.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal",
                   help="literal or prefixed (--add); any or match too (--list, --remove)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", default=[],
                   help=", ".join(OPERATIONS) + " (repeatable)")
    p.add_argument("--principal", metavar="User:NAME", help="--list: only this principal's ACLs")
    p.add_argument("--producer", action="store_true", help="--add/--remove: the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="--add/--remove: the ACLs a consumer needs")


def _resources(args: argparse.Namespace) -> list[tuple[int, str]]:
    out = [(TOPIC, t) for t in args.topic] + [(GROUP, g) for g in args.group]
    out += [(TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((CLUSTER, CLUSTER_NAME))
    return out


def _operations(args: argparse.Namespace, resource_type: int) -> list[int]:
    ops = set()
    for o in args.operation:
        try:
            ops.add(code_of(OPERATIONS, o.replace("-", "")))
        except AclError as e:
            raise CliError(f"--operation: {e}", 2) from None
    if args.producer and resource_type == TOPIC:
        ops |= {code_of(OPERATIONS, x) for x in ("Write", "Describe", "Create")}
    if args.consumer:
        if resource_type == TOPIC:
            ops |= {code_of(OPERATIONS, x) for x in ("Read", "Describe")}
        elif resource_type == GROUP:
            ops.add(code_of(OPERATIONS, "Read"))
    return sorted(ops)


def _pattern(args: argparse.Namespace, adding: bool) -> int:
    text = args.resource_pattern_type.lower()
    table = dict(PATTERNS, Any=ANY, Match=MATCH) if not adding else PATTERNS
    try:
        return code_of(table, text)
    except AclError as e:
        raise CliError(f"--resource-pattern-type: {e}", 2) from None


def _bindings(args: argparse.Namespace, adding: bool) -> list[dict[str, Any]]:
    resources = _resources(args)
    if not resources:
        raise CliError("give a resource: --topic, --group, --transactional-id or --cluster", 2)
    principals = [(p, ALLOW) for p in args.allow_principal] + [(p, DENY) for p in args.deny_principal]
    if not principals:
        raise CliError("give --allow-principal or --deny-principal", 2)
    for p, _ in principals:
        kind, sep, who = p.partition(":")
        if not sep or not kind or not who:
            raise CliError(f"principal {p!r}: expected TYPE:NAME (User:alice)", 2)
    out = []
    pattern = _pattern(args, adding)
    for rtype, name in resources:
        ops = _operations(args, rtype)
        if not ops:
            raise CliError("give --operation (or --producer / --consumer)", 2)
        for principal, permission in principals:
            hosts = (args.allow_host if permission == ALLOW else args.deny_host) or ["*"]
            for host in hosts:
                for op in ops:
                    out.append({"resource_type": rtype, "resource_name": name, "pattern": pattern,
                                "principal": principal, "host": host, "operation": op, "permission_type": permission})
    return out


def _fail(code: int, message: str | None, what: str) -> CliError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
    return CliError(f"{what}: {message or name}")


def _list(conn: Any, args: argparse.Namespace) -> None:
    resources = _resources(args) or [(ANY, None)]
    pattern = _pattern(args, False) if args.resource_pattern_type != "literal" or not _resources(args) else LITERAL
    if not _resources(args):
        pattern = ANY
    for rtype, name in resources:
        r = conn.request(29, {"resource_type_filter": rtype, "resource_name_filter": name,
                              "pattern_type_filter": pattern, "principal_filter": args.principal,
                              "host_filter": None, "operation": ANY, "permission_type": ANY})
        if r.error_code:
            raise _fail(r.error_code, r.error_message, "listing ACLs")
        for res in r.resources:
            print(f"Current ACLs for resource `ResourcePattern(resourceType={name_of(RESOURCE_TYPES, res.resource_type).upper()}, "
                  f"name={res.resource_name}, patternType={name_of(PATTERNS, res.pattern_type).upper()})`: ")
            for a in res.acls:
                print(f" \t(principal={a.principal}, host={a.host}, operation={name_of(OPERATIONS, a.operation).upper()}, "
                      f"permissionType={name_of(PERMISSIONS, a.permission_type).upper()})")
            print()


def run(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        if args.list:
            _list(conn, args)
            return 0
        bindings = _bindings(args, adding=args.add)
        if args.add:
            r = conn.request(30, {"creations": [{**{k: v for k, v in b.items() if k != "pattern"},
                                                 "resource_pattern_type": b["pattern"]} for b in bindings]})
            for res in r.results:
                if res.error_code:
                    raise _fail(res.error_code, res.error_message, "adding ACLs")
            print(f"Adding ACLs: {len(bindings)} added.")
        else:
            r = conn.request(31, {"filters": [{"resource_type_filter": b["resource_type"],
                                               "resource_name_filter": b["resource_name"],
                                               "pattern_type_filter": b["pattern"], "principal_filter": b["principal"],
                                               "host_filter": b["host"], "operation": b["operation"],
                                               "permission_type": b["permission_type"]} for b in bindings]})
            removed = 0
            for res in r.filter_results:
                if res.error_code:
                    raise _fail(res.error_code, res.error_message, "removing ACLs")
                removed += len(res.matching_acls)
            print(f"Removing ACLs: {removed} removed.")
    return 0
