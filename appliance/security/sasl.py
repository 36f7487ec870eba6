"""The server side of SASL on a SASL_PLAINTEXT or SASL_SSL connection (Kafka's
SaslServerAuthenticator), with no I/O inside: the network worker's connection hands it the
SaslHandshake and SaslAuthenticate requests (and, after a v0 handshake, the bare token frames)
and writes what it answers.

States: HANDSHAKE (only ApiVersions and SaslHandshake may come) -> AUTHENTICATE (tokens) ->
COMPLETE (the principal is known; requests flow) or FAILED (the connection closes after the
answer). A SaslHandshake on a COMPLETE connection starts a re-authentication (KIP-368), which
must end with the same principal.

Mechanisms: PLAIN (users of the listener's JAAS line; passwords compared in constant time) and
SCRAM-SHA-256/512 through ``scramp`` (RFC 5802/7677; the server holds only StoredKey and
ServerKey). Every step costs a bounded amount of CPU: no password is hashed on the server, and a
token larger than MAX_TOKEN fails the exchange.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from appliance.errors import ErrorCode
from appliance.security.credentials import ScramCredential

__all__ = ["SaslAuthenticator", "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED", "MAX_TOKEN", "uses_sasl"]

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED"
MAX_TOKEN = 64 << 10  # a SCRAM or PLAIN token is a few hundred bytes
_FAILED = "Authentication failed: Invalid username or password"  # Kafka's words, the same for every cause


def uses_sasl(security_protocol: str) -> bool:
    return security_protocol.upper() in ("SASL_PLAINTEXT", "SASL_SSL")


class _AuthFailed(Exception):
    """``str()`` is the client's answer; ``detail`` is for the log (never a secret)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class _Plain:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.user: str | None = None

    def step(self, token: bytes) -> tuple[bool, bytes]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise _AuthFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise _AuthFailed("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        want = self.users.get(user)
        # compared even for an unknown user, so the time taken does not tell which it was
        ok = hmac.compare_digest(password.encode(), (want if want is not None else "\0" + password).encode())
        if want is None or not ok:
            raise _AuthFailed(_FAILED)
        self.user = user
        return True, b""


def _saslname(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class _Scram:
    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]) -> None:
        import scramp

        self.user: str | None = None
        self._stage = 0

        def auth_info(username: str) -> tuple[bytes, bytes, bytes, int]:
            name = _saslname(username)
            cred = lookup(name, mechanism)
            if cred is None:
                raise _AuthFailed(_FAILED, f"no {mechanism} credential for user {name[:64]!r}")
            self.user = name
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations

        self._server = scramp.ScramMechanism(mechanism).make_server(auth_info)

    def step(self, token: bytes) -> tuple[bool, bytes]:
        from scramp import ScramException

        try:
            text = token.decode("utf-8")
            if self._stage == 0:
                self._stage = 1
                self._server.set_client_first(text)
                return False, self._server.get_server_first().encode()
            self._server.set_client_final(text)
            return True, self._server.get_server_final().encode()
        except (ScramException, UnicodeDecodeError, ValueError) as e:
            raise _AuthFailed(_FAILED, f"SCRAM: {e}") from None


class SaslAuthenticator:
    """One connection's authentication. ``plain_users()`` gives the PLAIN users of the listener,
    ``scram_lookup(user, mechanism)`` a SCRAM credential (None: unknown); ``reauth_ms``
    (connections.max.reauth.ms) > 0 bounds a session's life."""

    def __init__(self, enabled: tuple[str, ...], plain_users: Callable[[], dict[str, str]],
                 scram_lookup: Callable[[str, str], ScramCredential | None], reauth_ms: int = 0) -> None:
        self.enabled = enabled
        self.plain_users = plain_users
        self.scram_lookup = scram_lookup
        self.reauth_ms = reauth_ms
        self.state = HANDSHAKE
        self.v0 = False  # tokens as bare frames (SaslHandshake v0)
        self.principal: str | None = None  # "User:<name>" once COMPLETE
        self.mechanism: str | None = None
        self.error: str | None = None  # why it FAILED (for the log; never a secret)
        self._server: Any = None

    @property
    def authenticated(self) -> bool:
        return self.state == COMPLETE

    def handshake(self, version: int, mechanism: str) -> dict[str, Any]:
        """The SaslHandshake answer; FAILED unless the mechanism is enabled."""
        if self.state not in (HANDSHAKE, COMPLETE):
            self.state, self.error = FAILED, "SaslHandshake in the middle of an authentication"
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(self.enabled)}
        if mechanism not in self.enabled:
            self.state = FAILED
            self.error = f"unsupported SASL mechanism {mechanism[:64]!r}"
            return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(self.enabled)}
        if self.state == COMPLETE and mechanism != self.mechanism:
            self.state, self.error = FAILED, "re-authentication with another mechanism"
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(self.enabled)}
        self.mechanism = mechanism
        self.v0 = version == 0
        self._server = (_Plain(self.plain_users()) if mechanism == "PLAIN"
                        else _Scram(mechanism, self.scram_lookup))
        self._reauthenticating = self.state == COMPLETE
        self.state = AUTHENTICATE
        return {"error_code": ErrorCode.NONE, "mechanisms": list(self.enabled)}

    def authenticate(self, token: bytes) -> tuple[int, str | None, bytes]:
        """One token in: (error code, error message, token out). On an error the state is
        FAILED and the connection must close once the answer is sent."""
        if self.state != AUTHENTICATE:
            self.state, self.error = FAILED, "SaslAuthenticate before a SaslHandshake"
            return ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request", b""
        if len(token) > MAX_TOKEN:
            self.state, self.error = FAILED, f"a token of {len(token)} bytes"
            return ErrorCode.SASL_AUTHENTICATION_FAILED, _FAILED, b""
        try:
            done, out = self._server.step(token)
        except _AuthFailed as e:
            self.state, self.error = FAILED, e.detail
            return ErrorCode.SASL_AUTHENTICATION_FAILED, str(e), b""
        if done:
            principal = f"User:{self._server.user}"
            if self._reauthenticating and principal != self.principal:
                self.state, self.error = FAILED, "re-authentication as another principal"
                return ErrorCode.SASL_AUTHENTICATION_FAILED, "Cannot change principals during re-authentication", b""
            self.principal = principal
            self.state = COMPLETE
        return ErrorCode.NONE, None, out
