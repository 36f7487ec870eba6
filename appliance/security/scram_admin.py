"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over any store of
users: the checks and answers as Kafka gives them, with the store's reads and writes passed in
(a standalone broker's credentials file, or ZooKeeper's ``/config/users`` in a cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.errors import ErrorCode
from appliance.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    derive_credential,
)

__all__ = ["describe_body", "alter_body"]

_BY_CODE = {code: name for name, (code, _) in SCRAM_MECHANISMS.items()}


def describe_body(users: dict[str, dict[str, str]], wanted: list[str] | None) -> dict[str, Any]:
    """``users``: {user: {mechanism: Kafka's credential string}}; ``wanted`` None: every user."""
    results = []
    names = sorted(users) if wanted is None else wanted
    seen: set[str] = set()
    for name in names:
        if name in seen:
            results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                            "error_message": f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                            "credential_infos": []})
            continue
        seen.add(name)
        creds = users.get(name)
        if not creds:
            results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                            "credential_infos": []})
            continue
        infos = [{"mechanism": SCRAM_MECHANISMS[m][0], "iterations": ScramCredential.from_kafka(c).iterations}
                 for m, c in sorted(creds.items()) if m in SCRAM_MECHANISMS]
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None,
                        "credential_infos": infos})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def alter_body(request: Any, read: Callable[[str], dict[str, str]],
               write: Callable[[str, dict[str, str]], None]) -> dict[str, Any]:
    """Apply a request's deletions and upsertions user by user; a user with any bad entry is
    refused whole (Kafka's rule) and nothing of it changes."""
    entries: dict[str, list[tuple[str, Any]]] = {}
    for d in request.deletions or []:
        entries.setdefault(d.name, []).append(("delete", d))
    for u in request.upsertions or []:
        entries.setdefault(u.name, []).append(("upsert", u))
    results = []
    for name, ops in entries.items():
        error = _check(name, ops, read(name) if name else {})
        if error is not None:
            results.append({"user": name, "error_code": error[0], "error_message": error[1]})
            continue
        creds = dict(read(name))
        for kind, op in ops:
            mech = _BY_CODE[op.mechanism]
            if kind == "delete":
                creds.pop(mech, None)
            else:
                creds[mech] = derive_credential(mech, bytes(op.salt), bytes(op.salted_password),
                                                op.iterations).to_kafka()
        write(name, creds)
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None})
    return {"throttle_time_ms": 0, "results": results}


def _check(name: str, ops: list[tuple[str, Any]], current: dict[str, str]) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    seen: set[int] = set()
    for kind, op in ops:
        if op.mechanism not in _BY_CODE:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {op.mechanism}"
        if op.mechanism in seen:
            return (ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request")
        seen.add(op.mechanism)
        if kind == "delete" and _BY_CODE[op.mechanism] not in current:
            return (ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist")
        if kind == "upsert":
            if not MIN_ITERATIONS <= op.iterations <= MAX_ITERATIONS:
                return (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                        f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
            if not op.salt or not op.salted_password:
                return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None
