"""Connection limits and the request-memory bound of a real broker (2 network workers), with
Kafka's semantics: max.connections.per.ip (and its overrides) closes a connection over its
address's limit at once; max.connections leaves new connections waiting to be accepted until
one closes; queued.max.request.bytes mutes reading, never drops a request. Clients connect from
several loopback addresses (127.0.0.x) to count per address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.config import BrokerConfig, ConfigError
from appliance.records.batch import build_batch
from tests.broker.wire import RawConnection, fetch_body, produce_body, read_frame, request_frame
from tests.broker_process import BrokerProcess, free_port
from tests.metrics.scrape import scrape, value, wait_for_endpoint

API_VERSIONS = (18, 2, {})


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def _answers(s: socket.socket, timeout: float = 10.0) -> bool:
    """True if the broker answers an ApiVersions on ``s`` within ``timeout``; False if it says
    nothing in that time (the connection waits to be accepted). Raises ConnectionError if the
    broker closed it."""
    s.settimeout(timeout)
    s.sendall(request_frame(*API_VERSIONS))
    try:
        return len(read_frame(s)) > 4
    except TimeoutError:
        return False


def _closed_at_once(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        s.sendall(request_frame(*API_VERSIONS))
        return s.recv(100) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    mport = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("limits"), overrides={
        "num.network.threads": "2",
        "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
        "max.connections": "6",
        "max.connections.per.ip": "4",
        "max.connections.per.ip.overrides": "127.0.0.2:1,127.0.0.3:5"})
    b.metrics_port = mport
    with b:
        wait_for_endpoint(mport)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic("limits", 1, 1)]).values():
            f.result(30)
        del admin
        yield b


def _wait_open(broker, n: int) -> None:
    """Until the broker counts ``n`` open connections (closes are seen asynchronously)."""
    deadline = time.monotonic() + 30
    while value(scrape(broker.metrics_port), "kafka_server_socketservermetrics_connectioncount") != n:
        assert time.monotonic() < deadline, scrape(broker.metrics_port)
        time.sleep(0.05)


def test_an_address_over_its_limit_is_closed_at_once_across_workers(broker):
    """Four connections from 127.0.0.1, wherever SO_REUSEPORT put them: the fifth is closed
    (the count is the broker's, not a worker's); one closing lets a new one in."""
    _wait_open(broker, 0)
    before = scrape(broker.metrics_port)
    held = [_connect(broker.port) for _ in range(4)]
    try:
        assert all(_answers(s) for s in held)
        extra = _connect(broker.port)
        assert _closed_at_once(extra)
        extra.close()
        held.pop().close()
        _wait_open(broker, 3)
        again = _connect(broker.port)
        held.append(again)
        assert _answers(again)
        # an override: 127.0.0.2 may hold one connection
        one = _connect(broker.port, "127.0.0.2")
        held.append(one)
        assert _answers(one)
        two = _connect(broker.port, "127.0.0.2")
        assert _closed_at_once(two)
        two.close()
    finally:
        for s in held:
            s.close()
    after = scrape(broker.metrics_port)
    assert value(after, "kafka_network_socketserver_rejectedconnections_total") - \
        value(before, "kafka_network_socketserver_rejectedconnections_total") == 2


def test_over_max_connections_a_client_waits_until_one_closes(broker):
    """Six connections (four from .1, two from .3) fill the broker: a seventh is accepted by
    the kernel but not served (no answer, not closed) until one of the six closes."""
    _wait_open(broker, 0)
    before = scrape(broker.metrics_port)
    held = [_connect(broker.port) for _ in range(4)]
    held += [_connect(broker.port, "127.0.0.3") for _ in range(2)]
    waiting = None
    try:
        assert all(_answers(s) for s in held)
        _wait_open(broker, 6)
        waiting = _connect(broker.port, "127.0.0.3")
        assert not _answers(waiting, timeout=1.5)  # waits in the backlog
        during = scrape(broker.metrics_port)
        assert value(during, "kafka_server_socketservermetrics_connectioncount") == 6
        assert value(during, "kafka_network_acceptor_acceptorblocked_total") > \
            value(before, "kafka_network_acceptor_acceptorblocked_total")
        held.pop(0).close()
        waiting.settimeout(30)
        assert len(read_frame(waiting)) > 4  # the request sent while waiting, answered now
    finally:
        for s in held:
            s.close()
        if waiting is not None:
            waiting.close()


def test_a_refused_client_library_goes_on_once_a_connection_frees(broker):
    """confluent-kafka over an address at its limit is refused (closed) and retries on its own;
    when the connections holding the address close, its records are delivered."""
    _wait_open(broker, 0)
    held = [_connect(broker.port) for _ in range(4)]
    assert all(_answers(s) for s in held)
    p = Producer({"bootstrap.servers": broker.bootstrap, "reconnect.backoff.max.ms": 500,
                  "message.timeout.ms": 60000})
    delivered = []
    for i in range(10):
        p.produce("limits", value=b"v%d" % i, on_delivery=lambda err, m: delivered.append(err))
    assert p.flush(2) > 0  # nothing goes through while the address is full
    assert not delivered
    for s in held:
        s.close()
    assert p.flush(60) == 0
    assert delivered == [None] * 10


def test_bad_values_are_named():
    for key, bad in (("max.connections", "-1"), ("max.connections.per.ip", "x"),
                     ("max.connections.per.ip.overrides", "localhost=3"),
                     ("max.connections.per.ip.overrides", "no-such-host.invalid:3"),
                     ("queued.max.request.bytes", "0")):
        with pytest.raises(ConfigError) as e:
            BrokerConfig.load(None, {key: bad}, warn=False)
        assert key in str(e.value) and bad in str(e.value)
    with pytest.raises(ConfigError, match="max.connections.per.ip"):
        BrokerConfig.load(None, {"max.connections.per.ip": "0"}, warn=False)


def test_a_bad_value_stops_start_up_naming_it(tmp_path):
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "appliance.cli.main", "serve",
                        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                        "--override", f"log.dirs={tmp_path / 'd0'}",
                        "--override", "max.connections.per.ip.overrides=10.0.0.1:many"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "max.connections.per.ip.overrides" in out and "10.0.0.1:many" in out
    assert "Traceback" not in out


def test_queued_max_request_bytes_mutes_reading_and_drops_nothing(tmp_path):
    """A 1 MB bound per network worker: with the disk worker stopped, pipelined 300 KB produce
    requests fill it and the worker stops reading (the bytes held stay near the bound, not the
    3 MB sent); another client's Metadata is still answered; after SIGCONT every request is
    answered in order and every record is in the log."""
    mport = free_port()
    with BrokerProcess(tmp_path, overrides={
            "num.network.threads": "1", "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
            "queued.max.request.bytes": "1000000"}) as b:
        wait_for_endpoint(mport)
        with RawConnection(b.port) as c:  # create the topic (auto-creation) and warm up
            c.request(3, 4, {"topics": [{"name": "mem"}], "allow_auto_topic_creation": True})
            for _ in range(50):
                r = c.request(0, 7, produce_body("mem", 0, build_batch([(b"k", b"warm")])))
                if r.responses[0].partition_responses[0].error_code == 0:
                    break
                time.sleep(0.2)
        (disk,) = b.worker_pids("disk worker 0")
        payload = os.urandom(300_000)
        frames = b"".join(request_frame(0, 7, produce_body("mem", 0, build_batch([(b"k", payload)])),
                                        correlation_id=i) for i in range(10))
        with RawConnection(b.port, timeout=60) as c:
            os.kill(disk, signal.SIGSTOP)
            try:
                c.sock.setblocking(False)
                sent = 0
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and sent < len(frames):
                    try:
                        sent += c.sock.send(frames[sent:])
                    except BlockingIOError:
                        time.sleep(0.05)
                deadline = time.monotonic() + 30  # the worker reads until the bound
                while True:
                    time.sleep(0.5)
                    s = scrape(mport)
                    held = value(s, "kafka_network_socketserver_memorypoolused")
                    if held >= 1_000_000 or time.monotonic() > deadline:
                        break
                assert 1_000_000 <= held <= 1_000_000 + 2 * 310_000, held
                assert value(s, "kafka_network_socketserver_mutedchannels_total") >= 1
                with RawConnection(b.port) as other:  # the worker serves what needs no memory
                    md = other.request(3, 4, {"topics": None, "allow_auto_topic_creation": False})
                    assert any(t.name == "mem" for t in md.topics)
            finally:
                os.kill(disk, signal.SIGCONT)
            c.sock.setblocking(True)
            c.sock.sendall(frames[sent:])
            for i in range(10):  # every request answered, in order
                assert int.from_bytes(read_frame(c.sock)[:4], "big") == i
            r = c.request(1, 11, fetch_body("mem", 0, 0, max_bytes=8 << 20))
            assert r.responses[0].partitions[0].high_watermark == 11  # warm-up + 10
        assert value(scrape(mport), "kafka_network_socketserver_memorypoolused") == 0
