"""CreateAcls, DescribeAcls and DeleteAcls on a standalone broker: its ``acls.json`` (under the
file's lock). In a cluster they are forwarded to the cluster worker (ZooKeeper's /kafka-acl).
Without ``authorizer.class.name`` Kafka answers SECURITY_DISABLED; so does this broker."""

from __future__ import annotations

from typing import Any

from appliance.broker.broker_context import BrokerContext
from appliance.errors import ErrorCode
from appliance.protocol.connection import Request
from appliance.security.acl import AclFile
from appliance.security.acl_admin import create_body, delete_body, describe_body

__all__ = ["describe", "create", "delete"]

_DISABLED = "No Authorizer is configured on the broker"


def _off(ctx: BrokerContext) -> bool:
    return not ctx.config["authorizer.class.name"]


async def describe(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    if _off(ctx):
        return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED, "resources": []}
    return describe_body(request.body, AclFile(ctx.log_dirs[0]).acls())


async def create(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    if _off(ctx):
        return {"results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED}
                            for _ in request.body.creations]}
    with AclFile(ctx.log_dirs[0]).locked() as acls:
        new, body = create_body(request.body, acls)
        acls[:] = new
    return body


async def delete(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    if _off(ctx):
        return {"filter_results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED,
                                    "matching_acls": []} for _ in request.body.filters]}
    with AclFile(ctx.log_dirs[0]).locked() as acls:
        new, body = delete_body(request.body, acls)
        acls[:] = new
    return body
