"""The client side of SASL, for this broker's own connections to the others (a SASL inter-broker
listener), with no I/O inside: :func:`exchange` yields the requests to send and takes each
answer. PLAIN and SCRAM-SHA-256/512 (``scramp``'s client, which checks the server's final
signature: a broker that does not know the password cannot pass itself off as one)."""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

from appliance.errors import ErrorCode

__all__ = ["SaslLoginFailed", "login_of", "exchange", "HANDSHAKE_VERSION", "AUTHENTICATE_VERSION"]

HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 1
_OPTION = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


class SaslLoginFailed(ConnectionError):
    """The other broker refused this broker's login (an OSError: the callers retry later)."""


def login_of(jaas: str | None) -> tuple[str, str]:
    """(username, password) of a JAAS line. Raises ValueError when either is missing."""
    found = {k: v.replace('\\"', '"') for k, v in _OPTION.findall(jaas or "")}
    if "username" not in found or "password" not in found:
        raise ValueError("the inter-broker listener's sasl.jaas.config has no username=\"...\" "
                         "password=\"...\" for this broker to log in with")
    return found["username"], found["password"]


def exchange(mechanism: str, username: str, password: str) -> Generator[tuple[int, int, dict], Any, None]:
    """Yields (api key, version, request body); send each and ``send()`` back the decoded
    answer. Raises SaslLoginFailed when the other broker refuses."""
    hs = yield 17, HANDSHAKE_VERSION, {"mechanism": mechanism}
    if hs.error_code:
        raise SaslLoginFailed(f"SaslHandshake {mechanism}: {ErrorCode(hs.error_code).name} "
                              f"(the broker enables {', '.join(hs.mechanisms)})")
    if mechanism == "PLAIN":
        tokens = iter([f"\0{username}\0{password}".encode()])
        client = None
    else:
        import scramp
        client = scramp.ScramClient([mechanism], username, password)
        tokens = None
    first = next(tokens) if tokens is not None else client.get_client_first().encode()
    answer = yield 36, AUTHENTICATE_VERSION, {"auth_bytes": first}
    _check(answer)
    if client is None:
        return
    client.set_server_first(bytes(answer.auth_bytes).decode())
    answer = yield 36, AUTHENTICATE_VERSION, {"auth_bytes": client.get_client_final().encode()}
    _check(answer)
    try:
        client.set_server_final(bytes(answer.auth_bytes).decode())
    except Exception as e:  # scramp's ScramException: the server's signature is wrong
        raise SaslLoginFailed(f"the other broker's SCRAM signature is wrong: {e}") from None


def _check(answer: Any) -> None:
    if answer.error_code:
        raise SaslLoginFailed(f"SaslAuthenticate: {ErrorCode(answer.error_code).name}: "
                              f"{answer.error_message or ''}")
