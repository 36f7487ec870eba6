"""The server side of SASL on a SASL_PLAINTEXT or SASL_SSL connection (Kafka's
SaslServerAuthenticator), with no I/O inside: the network worker's connection hands it the
SaslHandshake and SaslAuthenticate requests (and, after a v0 handshake, the bare token frames)
and writes what it answers.

States: HANDSHAKE (only ApiVersions and SaslHandshake may come) -> AUTHENTICATE (tokens) ->
COMPLETE (the principal is known; requests flow) or FAILED (the connection closes after the
answer). A SaslHandshake on a COMPLETE connection starts a re-authentication (KIP-368), which
must end with the same principal.

Mechanisms: PLAIN (users of the listener's JAAS line; passwords compared in constant time) and
SCRAM-SHA-256/512 (RFC 5802/7677 with Kafka's acceptance rules, see ``_Scram``; the server holds
only StoredKey and ServerKey; ``scramp`` is the client side, ``security/sasl_client.py``). Every step costs a bounded amount of CPU: no password is hashed on the server, and a
token larger than MAX_TOKEN fails the exchange.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from appliance.errors import ErrorCode
from appliance.security.credentials import SCRAM_MECHANISMS, ScramCredential

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
    """RFC 5802's server side, with Kafka's acceptance rules: the client-final nonce must END
    with the server-first nonce (Kafka's ScramSaslServer), which librdkafka 2.0.x relies on (it
    sends its own nonce again in front). scramp's server insists on equality, so the exchange is
    written here over hashlib/hmac; the arithmetic is the RFC's (StoredKey = H(ClientKey),
    ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage))."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self.hash = SCRAM_MECHANISMS[mechanism][1]
        self.lookup = lookup
        self.user: str | None = None
        self._stage = 0

    def step(self, token: bytes) -> tuple[bool, bytes]:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _AuthFailed(_FAILED, "SCRAM: a message that is not UTF-8") from None
        if self._stage == 0:
            self._stage = 1
            return False, self._first(text)
        if self._stage != 1:
            raise _AuthFailed(_FAILED, "SCRAM: a message after the exchange ended")
        self._stage = 2
        return True, self._final(text)

    def _first(self, text: str) -> bytes:
        gs2_flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_flag not in ("n", "y") or authzid and not authzid.startswith("a="):
            raise _AuthFailed(_FAILED, "SCRAM: channel binding or a malformed GS2 header")
        attrs = _attributes(bare)
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise _AuthFailed(_FAILED, "SCRAM: client-first-message without a user or a nonce")
        name = _saslname(attrs["n"])
        cred = self.lookup(name, self.mechanism)
        if cred is None:
            raise _AuthFailed(_FAILED, f"no {self.mechanism} credential for user {name[:64]!r}")
        self.user, self._cred = name, cred
        self._gs2 = f"{gs2_flag},{authzid},"
        self._nonce = attrs["r"] + secrets.token_urlsafe(24)
        self._client_first_bare = bare
        self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                              f"i={cred.iterations}")
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise _AuthFailed(_FAILED, "SCRAM: client-final-message without a proof or with another channel binding")
        if not attrs.get("r", "").endswith(self._nonce):
            raise _AuthFailed(_FAILED, "SCRAM: the client-final nonce does not end with the server's")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise _AuthFailed(_FAILED, "SCRAM: the proof is not Base64") from None
        auth = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(self._cred.stored_key, auth, self.hash).digest()
        if len(proof) != len(signature):
            raise _AuthFailed(_FAILED, "SCRAM: a proof of the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.hash, client_key).digest(), self._cred.stored_key):
            raise _AuthFailed(_FAILED, "SCRAM: the client proof is wrong")
        server_signature = hmac.new(self._cred.server_key, auth, self.hash).digest()
        return b"v=" + base64.b64encode(server_signature)


def _attributes(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and len(key) == 1:
            out.setdefault(key, value)
    return out


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
