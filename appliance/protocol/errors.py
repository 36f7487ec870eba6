"""Errors raised by the wire-protocol layer.

Decoding errors carry Kafka's INVALID_REQUEST code (via :class:`InvalidRequestError`) so the
server can log and close the connection the way Kafka does; encoding errors are programming
errors on our side and are plain :class:`ValueError` subclasses.
"""

from __future__ import annotations

from appliance.errors import InvalidRequestError

__all__ = ["ProtocolDecodeError", "ProtocolEncodeError", "RemoteProtocolError", "LocalProtocolError"]


class ProtocolDecodeError(InvalidRequestError):
    """Bytes from the peer do not match the schema (truncated, bad length, bad UTF-8, ...)."""


class ProtocolEncodeError(ValueError):
    """A value we were asked to encode does not fit its wire type (range, null, type)."""


class RemoteProtocolError(InvalidRequestError):
    """The peer broke the framing or sent an undecodable message; the connection must close.

    ``close_connection`` is always True: Kafka closes the socket on such input.
    """

    close_connection = True


class LocalProtocolError(RuntimeError):
    """We used a connection state machine wrongly (e.g. after it entered the ERROR state)."""
