"""Who may log in: SCRAM credentials as Kafka stores them, and PLAIN users from a JAAS line.

SCRAM (RFC 5802/7677): a user's credential per mechanism is Kafka's string
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`` — never the password. They live
in ZooKeeper under ``/config/users/<user>`` in a cluster (Kafka's layout, so Kafka's tools read
them), and in ``scram-credentials.json`` in the first log dir, which is the one place the
network workers read: a standalone broker writes it directly (AlterUserScramCredentials), the
cluster worker mirrors ZooKeeper's users into it. The file is written atomically with mode 600.

PLAIN: Kafka's ``PlainLoginModule`` JAAS line, ``user_<name>="<password>"`` per user, from
``listener.name.<listener>.plain.sasl.jaas.config`` or ``sasl.jaas.config``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MECHANISMS", "SCRAM_MECHANISMS", "ScramCredential", "CredentialFile", "plain_users",
           "derive_credential", "MIN_ITERATIONS", "MAX_ITERATIONS", "CREDENTIALS_FILE"]

# Kafka's ScramMechanism type codes (AlterUserScramCredentials) and hash functions
SCRAM_MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds
CREDENTIALS_FILE = "scram-credentials.json"


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """Raises ValueError for a malformed string."""
        parts = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        try:
            return cls(base64.b64decode(parts["salt"]), base64.b64decode(parts["stored_key"]),
                       base64.b64decode(parts["server_key"]), int(parts["iterations"]))
        except (KeyError, ValueError) as e:
            raise ValueError(f"malformed SCRAM credential ({e})") from None


def derive_credential(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    """RFC 5802's StoredKey and ServerKey from the salted password the client computed."""
    hash_name = SCRAM_MECHANISMS[mechanism][1]
    client_key = hmac.new(salted_password, b"Client Key", hash_name).digest()
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", hash_name).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


class CredentialFile:
    """``scram-credentials.json`` in a log dir: {user: {mechanism: Kafka's credential string}}.
    Readers cache it by modification time; writers hold an flock beside it."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, CREDENTIALS_FILE)
        self._cache: dict[str, dict[str, str]] = {}
        self._stamp: tuple[int, int] | None = None

    def users(self) -> dict[str, dict[str, str]]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._cache, self._stamp = {}, None
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            self._cache = {str(u): {str(m): str(c) for m, c in ms.items()} for u, ms in data.items()}
            self._stamp = stamp
        return self._cache

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        text = self.users().get(user, {}).get(mechanism)
        return None if text is None else ScramCredential.from_kafka(text)

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, dict[str, str]]]:
        """The users to change in place; written back (atomically, mode 600) on exit."""
        fd = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._stamp = None
            users = {u: dict(ms) for u, ms in self.users().items()}
            yield users
            self.replace(users)
        finally:
            os.close(fd)

    def replace(self, users: dict[str, dict[str, str]]) -> None:
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({u: ms for u, ms in sorted(users.items()) if ms}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._stamp = None


_JAAS_USER = re.compile(r'user_([^\s=]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def plain_users(jaas: str | None) -> dict[str, str]:
    """``user_<name>="<password>"`` entries of a PlainLoginModule JAAS line."""
    if not jaas:
        return {}
    return {m.group(1): m.group(2).replace('\\"', '"') for m in _JAAS_USER.finditer(jaas)}
