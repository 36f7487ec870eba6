"""The door: the one step every decoded request passes before it is served (Kafka's
``KafkaApis.handle`` with its ``RequestContext``).

A connection knows which listener it came in on and who is on the other end; each request it
reads becomes a :class:`RequestContext` (that, plus the request header) and goes through
:meth:`Door.enter` before the handler table (``handlers.ROUTES``) or the produce fast path
(``handlers/produce_fast.py``) sees it. The door answers "go" (an :class:`Entry`, carrying the
request's timing when the metrics time it) or a :class:`Refusal`. It is the single place where
authorization, request quotas and throttling will hook in (issue 44 and after): a check is a
callable on the context returning a refusal or None, run in order. Today no check is
installed, every request goes in, and the principal is always ``User:ANONYMOUS`` (PLAINTEXT
listeners only).

A refusal closes the connection once the answers before it are written: that is the one answer
every API has. (Kafka's per-API error answers for a refused resource belong to the
authorization helper each handler will call, not to the door.)

Handlers get the context when their route asks for it (``Route.with_context``): the listener,
the principal and this broker's advertised address on that listener are read from it, never
from a socket.

Runs in a network worker's event loop; not thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.errors import ErrorCode
from appliance.metrics.recorder import AnswerTiming

__all__ = ["ANONYMOUS", "ConnectionContext", "RequestContext", "Entry", "Refusal", "Door",
           "Check", "GO"]

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal of an unauthenticated (PLAINTEXT) connection


@dataclass(frozen=True, slots=True)
class ConnectionContext:
    """What a connection knows of itself from its accept on: fixed for its life (a SASL
    re-authentication will make a new one)."""

    listener: str  # the listener name it came in on, e.g. "PLAINTEXT" or "EXTERNAL"
    security_protocol: str
    principal: str
    client_address: str  # the peer's IP address ("" when unknown)
    advertised: tuple[str, int]  # this broker's (host, port) on that listener, for Metadata

    @property
    def client_host(self) -> str:
        """The address as Kafka shows it (DescribeGroups' client_host): "/1.2.3.4"."""
        return f"/{self.client_address}" if self.client_address else ""


# not frozen: a frozen dataclass's __init__ took 2.6 us against 0.7 us here (timeit), and one
# is made per request, the fast path's included (~7 us of handler work). Nobody assigns to it.
@dataclass(slots=True)
class RequestContext:
    """One request at the door: its connection and its header. Treat as read-only."""

    connection: ConnectionContext
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def listener(self) -> str:
        return self.connection.listener

    @property
    def principal(self) -> str:
        return self.connection.principal

    @property
    def client_host(self) -> str:
        return self.connection.client_host

    @property
    def advertised(self) -> tuple[str, int]:
        return self.connection.advertised


@dataclass(slots=True)  # made per timed request: not frozen, for the same reason
class Entry:
    """Go: ``timing`` is set on the requests the metrics time."""

    timing: AnswerTiming | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Not let in: the connection answers what it read before, then closes."""

    error: ErrorCode
    reason: str


Check = Callable[[RequestContext], Refusal | None]
GO = Entry()  # the untimed "go", shared: nothing to allocate per request


class Door:
    """One network worker's door. ``metrics`` (a Recorder, or None when metrics are off)
    decides which requests are timed; ``checks`` run in order, the first refusal wins."""

    __slots__ = ("metrics", "checks", "open")

    def __init__(self, metrics: Any = None, checks: Sequence[Check] = ()) -> None:
        self.metrics = metrics
        self.checks: tuple[Check, ...] = tuple(checks)
        # no checks: every request is let in, so an untimed one needs no RequestContext built to
        # be told so (the produce fast path asks this first: ~1 us a request less)
        self.open = not self.checks

    def enter(self, rc: RequestContext, timed: bool = True) -> Entry | Refusal:
        """Let ``rc`` in, or refuse it. With the metrics on, a request admitted with ``timed``
        gets its AnswerTiming from here (received = now). Produce passes ``timed=False``: it
        times one request in SAMPLE itself, a choice the fast path must make before it takes a
        request (``produce.start``, ``produce_fast``)."""
        for check in self.checks:
            refusal = check(rc)
            if refusal is not None:
                return refusal
        if timed and self.metrics is not None:
            return Entry(AnswerTiming(rc.api_key, time.monotonic()))
        return GO
