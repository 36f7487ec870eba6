"""queued.max.requests' bookkeeping (request_queue.py) and connections.max.idle.ms' sweep
(idle_connections.py) on fake connections."""

from __future__ import annotations

from appliance.broker.idle_connections import check_interval, close_idle
from appliance.broker.request_queue import MUTE_REASON, RequestQueue


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pending = 0
        self.muted = False
        self.idle_from = 0.0
        self.closed = False

    def waiting(self) -> int:
        return self.pending

    def mute(self, reason: str) -> None:
        assert reason == MUTE_REASON
        self.muted = True

    def unmute(self, reason: str) -> None:
        self.muted = False

    def idle_since(self) -> float:
        return float("inf") if self.pending else self.idle_from

    def close_idle(self) -> None:
        self.closed = True


def _read(q: RequestQueue, c: Conn) -> None:
    c.pending += 1
    q.hold(c)


def _answer(q: RequestQueue, c: Conn) -> None:
    c.pending -= 1
    q.free(c)


def test_at_the_bound_connections_with_a_request_waiting_are_muted():
    a, b, idle = Conn("a"), Conn("b"), Conn("idle")
    q = RequestQueue(3, [a, b, idle])
    _read(q, a)
    _read(q, a)
    assert not a.muted
    _read(q, b)  # the third: both connections with a request waiting stop being read
    assert a.muted and b.muted and not idle.muted
    # a connection with nothing waiting is read: its request gets in, then it waits too
    _read(q, idle)
    assert idle.muted and q.count == 4
    _answer(q, b)  # nothing waits on b now: it may send its next request, though at the bound
    assert not b.muted and a.muted and idle.muted and q.count == 3
    _answer(q, idle)  # below the bound: everyone reads
    assert not (a.muted or b.muted or idle.muted) and q.count == 2


def test_a_closed_connection_gives_back_its_requests():
    a, b = Conn("a"), Conn("b")
    q = RequestQueue(2, [a, b])
    _read(q, a)
    _read(q, b)
    assert a.muted and b.muted
    q.forget(a)
    q.free(a, 1)  # a closed with its one request unanswered
    assert q.count == 1 and not b.muted


def test_idle_connections_are_closed_and_busy_ones_kept():
    quiet, recent, waiting = Conn("quiet"), Conn("recent"), Conn("waiting")
    quiet.idle_from, recent.idle_from = 100.0, 104.0
    waiting.pending = 1  # a long poll in progress is not idleness
    assert close_idle([quiet, recent, waiting], idle_s=5.0, now=105.0) == 1
    assert quiet.closed and not recent.closed and not waiting.closed
    assert check_interval(600_000) == 1.0 and check_interval(200) == 0.1
