"""`appliance configs --entity-type users`: SCRAM credentials through DescribeUserScramCredentials
and AlterUserScramCredentials (KIP-554), as kafka-configs.sh does with --bootstrap-server.

    --alter --entity-name alice --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    --alter --entity-name alice --delete-config SCRAM-SHA-512
    --describe [--entity-name alice]

The password is salted and iterated here (PBKDF2, RFC 5802's Hi()); only the salted password
goes to the broker, which keeps StoredKey and ServerKey."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from appliance.cli.main import CliError
from appliance.errors import ErrorCode
from appliance.security.credentials import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS

__all__ = ["describe_users", "alter_user"]

_NAMES = {code: name for name, (code, _) in SCRAM_MECHANISMS.items()}
DEFAULT_ITERATIONS = 4096


def _upsertion(user: str, mechanism: str, spec: str) -> dict[str, Any]:
    """``iterations=8192,password=...`` (iterations optional) -> an upsertion entry."""
    fields: dict[str, str] = {}
    rest = spec
    # the password may hold commas: it is the last field, or the only one
    if "password=" not in rest:
        raise CliError(f"--add-config {mechanism}: expected [iterations=N,]password=...", 2)
    head, _, password = rest.partition("password=")
    for item in head.rstrip(",").split(","):
        if item.strip():
            k, sep, v = item.partition("=")
            if not sep or k.strip() != "iterations":
                raise CliError(f"--add-config {mechanism}: unknown field {item.strip()!r} "
                               "(iterations, password)", 2)
            fields["iterations"] = v.strip()
    if not password:
        raise CliError(f"--add-config {mechanism}: the password is empty", 2)
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
    except ValueError:
        raise CliError(f"--add-config {mechanism}: iterations={fields['iterations']!r} is not a number", 2) from None
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CliError(f"--add-config {mechanism}: iterations={iterations} must be between "
                       f"{MIN_ITERATIONS} and {MAX_ITERATIONS}", 2)
    code, hash_name = SCRAM_MECHANISMS[mechanism]
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    return {"name": user, "mechanism": code, "iterations": iterations, "salt": salt, "salted_password": salted}


def alter_user(conn: Any, user: str | None, add: dict[str, str], delete: list[str]) -> None:
    if not user:
        raise CliError("--alter --entity-type users needs --entity-name", 2)
    for m in [*add, *delete]:
        if m not in SCRAM_MECHANISMS:
            raise CliError(f"{m}: not a SCRAM mechanism ({', '.join(SCRAM_MECHANISMS)})", 2)
    body = {"deletions": [{"name": user, "mechanism": SCRAM_MECHANISMS[m][0]} for m in delete],
            "upsertions": [_upsertion(user, m, spec) for m, spec in add.items()]}
    r = conn.request(51, body, version=0).results[0]
    if r.error_code:
        raise CliError(f"updating SCRAM credentials of {user}: {r.error_message or ErrorCode(r.error_code).name}")
    print(f"Completed updating config for user {user}.")


def describe_users(conn: Any, user: str | None) -> None:
    r = conn.request(50, {"users": None if user is None else [{"name": user}]}, version=0)
    if r.error_code:
        raise CliError(f"describing users: {r.error_message or ErrorCode(r.error_code).name}")
    for res in r.results:
        if res.error_code:
            raise CliError(f"describing user {res.user}: {res.error_message or ErrorCode(res.error_code).name}")
        creds = ",".join(f"{_NAMES.get(c.mechanism, c.mechanism)}=iterations={c.iterations}"
                         for c in res.credential_infos)
        print(f"SCRAM credential configs for user-principal '{res.user}' are {creds}")
