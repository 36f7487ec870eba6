"""Kafka's ACLs on the znodes a broker or tool creates (``zookeeper.set.acl=true``; Kafka's
ZkData.defaultAcls): all rights for the identity that created it, read for everyone else;
none for anyone else under the sensitive roots (``/config/users`` holds SCRAM credentials,
``/config/brokers`` broker configs); ``/consumers`` itself stays open, for the old consumers
of every group write under it.

The identity is the session's ZooKeeper login (``security/jaas_file.py``), presented with
ZooKeeper's digest scheme, so ACLs name ``digest:<user>:<hash>`` (``auth`` in the ACL: whoever
created it). Every broker of a cluster logs in as the same user, as Kafka's brokers share one
principal, so each may change what another created.

:class:`AclKazooClient` gives every ``create`` and ``ensure_path`` its path's ACL, parents of
a ``makepath`` included; a transaction's creates take the client's default (no sensitive
path is created in one)."""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from appliance.security.jaas_file import ZkLogin

__all__ = ["SENSITIVE_ROOTS", "acls_for", "AclKazooClient", "auth_data"]

SENSITIVE_ROOTS = ("/config/users", "/config/brokers")
CONSUMERS = "/consumers"


def acls_for(path: str) -> list:
    """The ACL a znode at ``path`` (under the chroot) is created with when ACLs are on."""
    if path == CONSUMERS:
        return list(OPEN_ACL_UNSAFE)
    if any(path == r or path.startswith(r + "/") for r in SENSITIVE_ROOTS):
        return list(CREATOR_ALL_ACL)
    return list(CREATOR_ALL_ACL) + list(READ_ACL_UNSAFE)


def auth_data(login: ZkLogin | None) -> list[tuple[str, str]] | None:
    """kazoo's ``auth_data`` for ``login`` (sent again on every reconnect)."""
    return None if login is None else [("digest", f"{login.username}:{login.password}")]


class AclKazooClient(KazooClient):
    """A kazoo client whose creates carry Kafka's ACL for their path."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("default_acl", acls_for("/"))
        super().__init__(**kwargs)

    def create(self, path: str, value: bytes = b"", acl: list | None = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False, include_data: bool = False) -> Any:
        if makepath:
            parent = path.rsplit("/", 1)[0]
            if parent:
                self.ensure_path(parent)
        return super().create(path, value, acl=acl if acl is not None else acls_for(path),
                              ephemeral=ephemeral, sequence=sequence, include_data=include_data)

    def ensure_path(self, path: str, acl: list | None = None) -> bool:
        """Each missing znode of ``path``, shortest first, with its own path's ACL."""
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if self.exists(prefix):
                continue
            try:
                super().create(prefix, b"", acl=acl if acl is not None and i == len(parts) else acls_for(prefix))
            except NodeExistsError:
                pass
        return True
