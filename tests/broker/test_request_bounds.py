"""queued.max.requests and connections.max.idle.ms through a real broker (one network worker, so
every connection counts against the same bound), with raw sockets."""

from __future__ import annotations

import time

import pytest

import appliance.protocol as proto
from appliance.records.batch import build_batch, decode_records
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, fetch_body, produce_body
from tests.broker_process import BrokerProcess

# alone: the steps rely on the broker reading each send before the next (sleeps of 0.5 s)
pytestmark = [pytest.mark.timeout(120), pytest.mark.alone]

QUEUED = 3
IDLE_MS = 3000
LONG_POLL_MS = 30_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("bounds"), overrides={
            "num.network.threads": "1", "queued.max.requests": str(QUEUED),
            "connections.max.idle.ms": str(IDLE_MS)}) as b:
        yield b


def _send(c: RawConnection, api_key: int, version: int, body: dict) -> int:
    corr, frame = c.conn.send_request(api_key, version, body)
    c.send_raw(frame)
    return corr


def _answers(c: RawConnection, n: int, timeout: float) -> list:
    """The next ``n`` responses on ``c`` (bodies, in order)."""
    c.sock.settimeout(timeout)
    out = []
    while len(out) < n:
        event = c.conn.next_event()
        if isinstance(event, proto.Response):
            out.append(event.body)
        elif event is proto.NEED_DATA:
            c.conn.receive_data(c.sock.recv(1 << 20))
        else:
            pytest.fail(f"unexpected event {event!r}")
    return out


def _high_watermark(c: RawConnection, topic: str) -> int:
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    return c.request(2, 4, body).topics[0].partitions[0].offset


def _values(fetch_answer) -> list[bytes]:
    return [r.value for r in decode_records(fetch_answer.responses[0].partitions[0].records)]


def test_queued_max_requests_stops_reading_waiting_connections_and_loses_nothing(broker):
    """Three long polls reach the bound: their connections are not read any more (a produce
    pipelined behind one of them is not appended), while a connection with nothing waiting is
    still served, and its produce completes the long polls; then the muted produce is read.
    Every request is answered, long before the long polls' 30 s."""
    topic = "bounded"
    create_topic(broker.bootstrap, topic)
    start = time.monotonic()
    with RawConnection(broker.port, timeout=60) as a, RawConnection(broker.port, timeout=60) as b:
        for _ in range(2):
            _send(a, 1, 11, fetch_body(topic, 0, 0, max_wait_ms=LONG_POLL_MS))
        time.sleep(0.5)
        _send(b, 1, 11, fetch_body(topic, 0, 0, max_wait_ms=LONG_POLL_MS))  # the third: the bound
        time.sleep(0.5)
        _send(b, 0, 7, produce_body(topic, 0, build_batch([(b"k", b"from-b")])))
        time.sleep(1.0)
        with RawConnection(broker.port) as c:
            assert _high_watermark(c, topic) == 0  # b's produce waits unread
            r = c.request(0, 7, produce_body(topic, 0, build_batch([(b"k", b"from-c")])))
            assert r.responses[0].partition_responses[0].base_offset == 0
            fetched_a = _answers(a, 2, timeout=20)
            fetch_b, produce_b = _answers(b, 2, timeout=20)
            assert [_values(f) for f in fetched_a] == [[b"from-c"], [b"from-c"]]
            assert _values(fetch_b)[0] == b"from-c"
            assert produce_b.responses[0].partition_responses[0].base_offset == 1
            assert _high_watermark(c, topic) == 2
    assert time.monotonic() - start < LONG_POLL_MS / 1000 / 2


def test_idle_connection_is_closed_active_and_waiting_ones_are_not(broker):
    create_topic(broker.bootstrap, "idle-t")
    idle = RawConnection(broker.port)
    started = time.monotonic()
    with RawConnection(broker.port) as active, RawConnection(broker.port, timeout=30) as waiting:
        # a long poll longer than the idle limit keeps its connection
        _send(waiting, 1, 11, fetch_body("idle-t", 0, 0, max_wait_ms=IDLE_MS + 2000))
        assert not idle.closed_by_peer(timeout=1.0)  # not before the limit
        while time.monotonic() - started < (IDLE_MS + 2500) / 1000:  # served throughout
            md = active.request(3, 4, {"topics": None, "allow_auto_topic_creation": False})
            assert md.brokers
            time.sleep(0.5)
        (answer,) = _answers(waiting, 1, timeout=10)
        assert answer.responses[0].partitions[0].error_code == 0
        assert idle.closed_by_peer(timeout=1.0)
        # idle from the answer on: closed too, after the limit
        answered = time.monotonic()
        assert waiting.closed_by_peer(timeout=IDLE_MS / 1000 + 5)
        assert time.monotonic() - answered >= IDLE_MS / 1000 - 1.0
    idle.close()

