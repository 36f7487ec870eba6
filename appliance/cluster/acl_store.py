"""ACLs in a cluster: kept in ZooKeeper as Kafka keeps them (``/kafka-acl/<Type>/<name>`` for
LITERAL patterns, ``/kafka-acl-extended/prefixed/<Type>/<name>`` for PREFIXED, a change
notification under ``/kafka-acl-changes`` / ``/kafka-acl-extended-changes`` after each write), and
mirrored by every broker's cluster worker into the ``acls.json`` its network workers decide from
(:class:`AclMirror`: a watch on both change paths re-reads every ACL, so a change made through
any broker is enforced by all of them within a second).

The ACL APIs reach the cluster worker forwarded by a network worker; their checks and answers are
:mod:`appliance.security.acl_admin`'s."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from appliance.cluster.zk_session import ZK_OUT_OF_REACH
from appliance.errors import ErrorCode
from appliance.security.acl import LITERAL, PREFIXED, RESOURCE_TYPES, Acl, AclFile, name_of
from appliance.security.acl_admin import (
    ACL_ROOTS,
    create_body,
    decode_node,
    delete_body,
    describe_body,
    encode_node,
    zk_path,
)

__all__ = ["read_acls", "AclMirror", "describe_acls_body", "create_acls_body", "delete_acls_body"]

log = logging.getLogger("appliance.cluster")

CHANGES = {LITERAL: "/kafka-acl-changes", PREFIXED: "/kafka-acl-extended-changes"}
_DISABLED = "No Authorizer is configured on the broker"


def read_acls(client: KazooClient) -> list[Acl]:
    """Every ACL in ZooKeeper; a znode that is not Kafka's is logged and skipped."""
    out: list[Acl] = []
    for pattern, root in ACL_ROOTS.items():
        try:
            types = client.get_children(root)
        except NoNodeError:
            continue
        for rtype in types:
            if rtype not in RESOURCE_TYPES:
                continue
            try:
                names = client.get_children(f"{root}/{rtype}")
            except NoNodeError:
                continue
            for name in names:
                try:
                    data, _ = client.get(f"{root}/{rtype}/{name}")
                    out.extend(decode_node(rtype, name, pattern, data))
                except NoNodeError:
                    continue
                except (ValueError, KeyError) as e:
                    log.warning("ACL znode %s/%s/%s skipped: %s", root, rtype, name, e)
    return out


def _write(client: KazooClient, before: list[Acl], after: list[Acl]) -> None:
    """The znodes whose ACLs changed, then one notification per changed resource."""
    def group(acls: list[Acl]) -> dict[tuple[int, str, int], set[Acl]]:
        g: dict[tuple[int, str, int], set[Acl]] = {}
        for a in acls:
            g.setdefault((a.resource_type, a.name, a.pattern), set()).add(a)
        return g
    old, new = group(before), group(after)
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        rtype, name, pattern = key
        path = zk_path(rtype, name, pattern)
        acls = sorted(new.get(key, ()), key=lambda a: (a.principal, a.operation, a.permission, a.host))
        if acls:
            if client.exists(path):
                client.set(path, encode_node(acls))
            else:
                client.create(path, encode_node(acls), makepath=True)
        else:
            try:
                client.delete(path)
            except (NoNodeError, NotEmptyError):
                pass
        if pattern == LITERAL:
            note = f"{name_of(RESOURCE_TYPES, rtype)}:{name}".encode()
        else:
            note = json.dumps({"version": 1, "resourceType": name_of(RESOURCE_TYPES, rtype), "name": name,
                               "patternType": "PREFIXED"}).encode()
        client.create(f"{CHANGES[pattern]}/acl_changes_", note, sequence=True, makepath=True)


async def describe_acls_body(client: KazooClient, config: Any, request: Any) -> dict:
    if not config["authorizer.class.name"]:
        return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED, "resources": []}
    acls = await asyncio.get_running_loop().run_in_executor(None, read_acls, client)
    return describe_body(request, acls)


async def _change(client: KazooClient, request: Any, change: Any) -> dict:
    def run() -> dict:
        before = read_acls(client)
        after, body = change(request, before)
        _write(client, before, after)
        return body
    return await asyncio.get_running_loop().run_in_executor(None, run)


async def create_acls_body(client: KazooClient, config: Any, request: Any) -> dict:
    if not config["authorizer.class.name"]:
        return {"results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED}
                            for _ in request.creations]}
    return await _change(client, request, create_body)


async def delete_acls_body(client: KazooClient, config: Any, request: Any) -> dict:
    if not config["authorizer.class.name"]:
        return {"filter_results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED,
                                    "matching_acls": []} for _ in request.filters]}
    return await _change(client, request, delete_body)


class AclMirror:
    """ZooKeeper's ACLs into this broker's ``acls.json``: at start, and after every change
    notification (a watch on both change paths)."""

    def __init__(self, client: KazooClient, log_dir: str) -> None:
        self.client = client
        self.file = AclFile(log_dir)
        self._wake = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for path in CHANGES.values():
            await loop.run_in_executor(None, self.client.ensure_path, path)
            # a watch's set-up reads ZooKeeper (with kazoo's retries): not on the event loop
            await loop.run_in_executor(None, lambda p=path: self.client.ChildrenWatch(
                p, lambda _c: loop.call_soon_threadsafe(self._wake.set)))
        while True:
            try:
                acls = await loop.run_in_executor(None, read_acls, self.client)
                self.file.replace(acls)
            except asyncio.CancelledError:
                raise
            except ZK_OUT_OF_REACH as e:
                log.warning("mirroring the ACLs failed (%s); the next change retries", type(e).__name__)
            except Exception:
                log.exception("mirroring the ACLs failed; the next change retries")
            await self._wake.wait()
            self._wake.clear()
