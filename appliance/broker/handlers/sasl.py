"""The authentication APIs as a handler sees them. On a SASL listener the connection itself runs
SaslHandshake and SaslAuthenticate (``security/sasl.py``) before any request reaches the door;
one that gets here came on a listener without SASL, or after the exchange ended: Kafka's
ILLEGAL_SASL_STATE. The SCRAM credential APIs: a standalone broker keeps the credentials in
its first log dir's file; in a cluster they are forwarded to the cluster worker (ZooKeeper's
``/config/users``)."""

from __future__ import annotations

from typing import Any

from appliance.broker.broker_context import BrokerContext
from appliance.errors import ErrorCode
from appliance.protocol.connection import Request
from appliance.security.credentials import SCRAM_MECHANISMS, CredentialFile
from appliance.security.scram_admin import alter_body, describe_body

__all__ = ["handshake_refused", "authenticate_refused", "describe_scram", "alter_scram"]


async def handshake_refused(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


async def authenticate_refused(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
            "error_message": "SaslAuthenticate on a connection that is not authenticating with SASL"}


def _file(ctx: BrokerContext) -> CredentialFile:
    return CredentialFile(ctx.log_dirs[0])


async def describe_scram(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    users = {u: {m: c for m, c in ms.items() if m in SCRAM_MECHANISMS} for u, ms in _file(ctx).users().items()}
    wanted = None if request.body.users is None else [u.name for u in request.body.users]
    return describe_body(users, wanted)


async def alter_scram(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    # a few hundred bytes written and fsynced under the file's lock: no disk worker involved
    with _file(ctx).locked() as users:
        return alter_body(request.body, lambda n: users.get(n, {}),
                          lambda n, creds: users.__setitem__(n, creds))
