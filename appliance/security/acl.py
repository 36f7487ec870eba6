"""ACLs with Kafka's AclAuthorizer semantics, and the one file the network workers read them from.

An ACL is (resource type, name, pattern type) x (principal, host, operation, permission). A request
by ``principal`` from ``host`` for ``operation`` on a resource is allowed when:

- the principal is a super user (``super.users``); or
- no DENY ACL matches it (deny wins), and an ALLOW ACL matches it, where ALLOW of READ, WRITE,
  DELETE or ALTER implies DESCRIBE and ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS, and
  ALL matches every operation; or
- no ACL at all names the resource and ``allow.everyone.if.no.acl.found`` is true.

A matching ACL names the resource literally, or ``*`` (LITERAL), or a prefix of its name
(PREFIXED); its principal is the one asking or ``User:*``; its host the one asking or ``*``.

Storage: ``acls.json`` in the first log dir, written atomically (mode 600). A standalone broker's
CreateAcls/DeleteAcls write it; in a cluster the cluster worker mirrors ZooKeeper's
``/kafka-acl`` and ``/kafka-acl-extended`` into it. Decisions are cached per
(principal, host, operation, resource) until the file changes, so an allowed produce costs a
dict lookup, not a scan.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Acl", "AclFilter", "Authorizer", "AclFile", "RESOURCE_TYPES", "OPERATIONS", "PERMISSIONS",
           "PATTERNS", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "CLUSTER_NAME", "ACLS_FILE",
           "AUTHORIZER_CLASSES", "name_of", "code_of", "AclError", "authorizer_from_config"]

# Kafka's codes (org.apache.kafka.common.resource / acl)
ANY, MATCH = 1, 2
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
RESOURCE_TYPES = {"Topic": TOPIC, "Group": GROUP, "Cluster": CLUSTER, "TransactionalId": TRANSACTIONAL_ID}
LITERAL, PREFIXED = 3, 4
PATTERNS = {"Literal": LITERAL, "Prefixed": PREFIXED}
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
OPERATIONS = {"All": ALL, "Read": READ, "Write": WRITE, "Create": CREATE, "Delete": DELETE, "Alter": ALTER,
              "Describe": DESCRIBE, "ClusterAction": CLUSTER_ACTION, "DescribeConfigs": DESCRIBE_CONFIGS,
              "AlterConfigs": ALTER_CONFIGS, "IdempotentWrite": IDEMPOTENT_WRITE}
DENY, ALLOW = 2, 3
PERMISSIONS = {"Deny": DENY, "Allow": ALLOW}
CLUSTER_NAME = "kafka-cluster"
ACLS_FILE = "acls.json"
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")
_IMPLIES_DESCRIBE = (READ, WRITE, DELETE, ALTER)


def name_of(table: dict[str, int], code: int) -> str:
    return next((n for n, c in table.items() if c == code), str(code))


def code_of(table: dict[str, int], name: str) -> int:
    """Raises AclError for a name the table lacks (case-insensitive)."""
    for n, c in table.items():
        if n.lower() == name.lower():
            return c
    raise AclError(f"unknown value {name!r} (one of {', '.join(table)})")


class AclError(ValueError):
    """A malformed ACL or filter; the message says which field."""


@dataclass(frozen=True)
class Acl:
    resource_type: int
    name: str
    pattern: int
    principal: str
    host: str
    operation: int
    permission: int

    def check(self) -> None:
        """Raises AclError for what Kafka refuses to store."""
        if self.resource_type not in RESOURCE_TYPES.values():
            raise AclError(f"unknown resource type {self.resource_type}")
        if self.pattern not in (LITERAL, PREFIXED):
            raise AclError(f"pattern type {self.pattern} is not LITERAL or PREFIXED")
        if not self.name:
            raise AclError("empty resource name")
        if self.resource_type == CLUSTER and (self.name != CLUSTER_NAME or self.pattern != LITERAL):
            raise AclError(f"the cluster resource is the LITERAL name {CLUSTER_NAME}")
        kind, sep, who = self.principal.partition(":")
        if not sep or not kind or not who:
            raise AclError(f"principal {self.principal!r} is not TYPE:NAME (User:alice)")
        if not self.host:
            raise AclError("empty host (use * for every host)")
        if self.operation not in OPERATIONS.values():
            raise AclError(f"unknown operation {self.operation}")
        if self.permission not in (DENY, ALLOW):
            raise AclError(f"permission {self.permission} is not ALLOW or DENY")

    def covers(self, resource_type: int, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern == PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == "*"


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filters: ANY (1) or None matches every value; pattern MATCH (2)
    matches the ACLs that would apply to the named resource."""

    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, a: Acl) -> bool:
        if self.resource_type != ANY and a.resource_type != self.resource_type:
            return False
        if self.pattern == MATCH:
            if self.name is not None and not a.covers(a.resource_type, self.name):
                return False
        else:
            if self.pattern != ANY and a.pattern != self.pattern:
                return False
            if self.name is not None and a.name != self.name:
                return False
        return ((self.principal is None or a.principal == self.principal)
                and (self.host is None or a.host == self.host)
                and (self.operation == ANY or a.operation == self.operation)
                and (self.permission == ANY or a.permission == self.permission))


class AclFile:
    """``acls.json``: a list of ACLs. Readers cache it by modification time."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, ACLS_FILE)
        self._acls: list[Acl] = []
        self._stamp: tuple[int, int] | None = None

    def stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def acls(self) -> list[Acl]:
        stamp = self.stamp()
        if stamp != self._stamp:
            if stamp is None:
                self._acls = []
            else:
                with open(self.path, encoding="utf-8") as f:
                    self._acls = [Acl(**a) for a in json.load(f)]
            self._stamp = stamp
        return self._acls

    def replace(self, acls: Iterable[Acl]) -> None:
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump([asdict(a) for a in sorted(set(acls), key=lambda a: astuple_key(a))], f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._stamp = None

    @contextlib.contextmanager
    def locked(self) -> Iterator[list[Acl]]:
        """The ACLs to change in place; written back on exit."""
        fd = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._stamp = None
            acls = list(self.acls())
            yield acls
            self.replace(acls)
        finally:
            os.close(fd)


def astuple_key(a: Acl) -> tuple:
    return (a.resource_type, a.name, a.pattern, a.principal, a.host, a.operation, a.permission)


class Authorizer:
    """Decisions for one network worker: ACLs from ``acls`` (an AclFile), re-read at most every
    ``recheck_s`` (so a change reaches every worker of every broker within a second)."""

    def __init__(self, acls: AclFile, super_users: Iterable[str] = (), allow_if_no_acl: bool = False,
                 recheck_s: float = 0.2) -> None:
        self.file = acls
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.recheck_s = recheck_s
        self._checked = 0.0
        self._stamp: Any = object()
        self._cache: dict[tuple, bool] = {}
        self._by_type: dict[int, list[Acl]] = {}

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < self.recheck_s:
            return
        self._checked = now
        stamp = self.file.stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            self._by_type = {}
            for a in self.file.acls():
                self._by_type.setdefault(a.resource_type, []).append(a)
            self._cache.clear()

    def allowed(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        self._refresh()
        key = (principal, host, operation, resource_type, name)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) > 100_000:  # bounded: principals x hosts x resources
                self._cache.clear()
            hit = self._cache[key] = self._decide(principal, host, operation, resource_type, name)
        return hit

    def _decide(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = [a for a in self._by_type.get(resource_type, ()) if a.covers(resource_type, name)]
        if not acls:
            return self.allow_if_no_acl
        mine = [a for a in acls if a.principal in (principal, "User:*") and a.host in (host, "*")]
        if any(a.permission == DENY and a.operation in (operation, ALL) for a in mine):
            return False
        wanted = {operation, ALL}
        if operation == DESCRIBE:
            wanted.update(_IMPLIES_DESCRIBE)
        elif operation == DESCRIBE_CONFIGS:
            wanted.add(ALTER_CONFIGS)
        return any(a.permission == ALLOW and a.operation in wanted for a in mine)


def authorizer_from_config(config: Any, first_log_dir: str) -> Authorizer | None:
    """The process's Authorizer when ``authorizer.class.name`` is set (over ``acls.json`` in
    ``first_log_dir``, ``super.users``, ``allow.everyone.if.no.acl.found``), else None."""
    if not config["authorizer.class.name"]:
        return None
    return Authorizer(AclFile(first_log_dir),
                      [u.strip() for u in config["super.users"].split(";") if u.strip()],
                      bool(config["allow.everyone.if.no.acl.found"]))
