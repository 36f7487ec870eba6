"""The Prometheus endpoint of a real broker (2 network workers, 2 log dirs = 2 disk workers)
under a real produce/consume load (confluent-kafka): counters against what was sent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from appliance.shm.counters import SharedCounters
from appliance.shm.layout import counters_name
from tests.broker.wire import RawConnection, fetch_body, produce_body, read_frame, request_frame
from tests.broker_process import BrokerProcess, free_port
from tests.metrics.scrape import scrape, value, wait_for_endpoint

TOPIC = "m-load"
PARTITIONS = 4
RECORDS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    mport = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("metrics"), num_log_dirs=2, overrides={
        "num.network.threads": "2", "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
        # a small send buffer: a reader that stops makes a fetch answer wait in the broker
        "socket.send.buffer.bytes": "65536"})
    b.metrics_port = mport
    with b:
        wait_for_endpoint(mport)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        futures = admin.create_topics([
            NewTopic(TOPIC, PARTITIONS, 1),
            NewTopic("m-small", 1, 1, config={"max.message.bytes": "1000"}),
            NewTopic("m-big", 1, 1)])
        for f in futures.values():
            f.result(30)
        yield b


def _produce(bootstrap: str, count: int, start: int = 0) -> int:
    """Produce ``count`` keyed records; the bytes of their values."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all"})
    sent = 0
    for i in range(start, start + count):
        v = b"value-%06d" % i
        p.produce(TOPIC, key=b"k%d" % i, value=v)
        sent += len(v)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return sent


def test_messages_and_bytes_match_the_load(broker):
    before = scrape(broker.metrics_port)
    _produce(broker.bootstrap, RECORDS // 2)
    during = scrape(broker.metrics_port)  # mid-load: the counters only grow
    _produce(broker.bootstrap, RECORDS - RECORDS // 2, RECORDS // 2)
    time.sleep(0.6)  # bytes in reach the shared counters 4 times a second (Partitions.publish_bytes)
    after = scrape(broker.metrics_port)
    name = "kafka_server_brokertopicmetrics_messagesin_total"
    assert value(before, name, topic=TOPIC) == 0
    assert value(during, name, topic=TOPIC) == RECORDS // 2
    assert value(after, name, topic=TOPIC) == RECORDS
    # bytes in = the batches appended = the segments' bytes (one log, nothing else written)
    log_bytes = sum(value(after, "kafka_log_log_size", topic=TOPIC, partition=str(p))
                    for p in range(PARTITIONS))
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) == log_bytes > 0
    assert sum(value(after, "kafka_log_log_logendoffset", topic=TOPIC, partition=str(p))
               for p in range(PARTITIONS)) == RECORDS
    assert value(after, "kafka_network_requestmetrics_requests_total", request="Produce") >= 2
    # partitions on both log dirs: both disk workers counted
    dirs = [d for d in broker.log_dirs if any(n.startswith(TOPIC) for n in os.listdir(d))]
    assert len(dirs) == 2

    # consume it all: bytes out grows by the batches the consumer read
    out_before = value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m-reader",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got, deadline = 0, time.monotonic() + 60
    while got < RECORDS and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    c.close()
    assert got == RECORDS
    final = scrape(broker.metrics_port)
    assert value(final, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) - out_before \
        == log_bytes
    assert value(final, "kafka_network_requestmetrics_requests_total", request="Fetch") > 0


def test_requests_of_every_network_worker_are_summed(broker):
    """Connections spread over both network workers (SO_REUSEPORT); the endpoint sums both."""
    counters = SharedCounters.attach(counters_name(f"appliance-test-{broker.port}"))
    try:
        slabs = [2, 3]  # worker slots: disks 0-1, then network workers
        start = sum(int(counters.field("requests", [s])[3]) for s in slabs)  # 3: Metadata
        for _ in range(40):
            with RawConnection(broker.port) as c:
                c.request(3, 4, {"topics": None, "allow_auto_topic_creation": False})
            if all(counters.field("requests", [s])[3] for s in slabs):
                break
        per_worker = [int(counters.field("requests", [s])[3]) for s in slabs]
        assert all(per_worker), per_worker
        total = value(scrape(broker.metrics_port), "kafka_network_requestmetrics_requests_total",
                      request="Metadata")
        assert total >= sum(per_worker) > start
    finally:
        counters.close()


def test_produce_latency_is_sampled_one_in_32(broker):
    """64 one-record requests on one connection (one network worker, one partition): exactly
    two are timed (request counts 32k), end to end and in the disk worker, whatever the counts
    were before."""
    time.sleep(0.6)  # earlier tests' produce counts published (Recorder.publish, 4 per second)
    before = scrape(broker.metrics_port)
    with RawConnection(broker.port) as c:
        for i in range(64):
            r = c.request(0, 7, produce_body(TOPIC, 0, build_batch([(b"k", b"v%d" % i)])))
            assert r.responses[0].partition_responses[0].error_code == 0
    # the count reaches the shared memory on every 16th request and 4 times a second
    deadline = time.monotonic() + 10
    while True:
        after = scrape(broker.metrics_port)
        requests = value(after, "kafka_network_requestmetrics_requests_total", request="Produce") \
            - value(before, "kafka_network_requestmetrics_requests_total", request="Produce")
        if requests == 64 or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert requests == 64
    assert moved("kafka_network_requestmetrics_totaltimems_count", request="Produce") == 2
    assert moved("kafka_network_requestmetrics_localtimems_count", request="Produce") == 2
    assert moved("kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0
    assert moved("kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 64


_PREFIX = "kafka_network_requestmetrics_"
_PARTS = ("requestqueuetimems", "localtimems", "responsequeuetimems", "responsesendtimems")


def _moved(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_produce_time_split_moves_together_and_a_stalled_disk_shows_in_queue_time(broker):
    """128 pipelined one-record produce requests while both disk workers are SIGSTOPped for
    1.5 s: the 4 timed ones (1 in 32) show in every part of the split (same counts: the parts
    are of the same requests), their ring wait holds the stall, and the parts add up to no more
    than the total."""
    disks = broker.worker_pids("disk worker")
    assert len(disks) == 2
    before = scrape(broker.metrics_port)
    with RawConnection(broker.port, timeout=60) as c:
        frames = b"".join(request_frame(0, 7, produce_body(TOPIC, 1, build_batch([(b"k", b"s%d" % i)])),
                                        correlation_id=i) for i in range(128))
        for pid in disks:
            os.kill(pid, signal.SIGSTOP)
        try:
            c.send_raw(frames)
            time.sleep(1.5)
        finally:
            for pid in disks:
                os.kill(pid, signal.SIGCONT)
        for i in range(128):  # every answer, in order (the correlation id leads each frame)
            assert int.from_bytes(read_frame(c.sock)[:4], "big") == i
    after = scrape(broker.metrics_port)
    counts = {part: _moved(before, after, f"{_PREFIX}{part}_count", request="Produce")
              for part in (*_PARTS, "totaltimems")}
    assert set(counts.values()) == {4}, counts
    sums = {part: _moved(before, after, f"{_PREFIX}{part}_sum", request="Produce")
            for part in (*_PARTS, "totaltimems")}
    assert sums["requestqueuetimems"] >= 4 * 500, sums  # ms: each waited out most of the stall
    parts = sum(sums[p] for p in _PARTS)
    assert parts <= sums["totaltimems"] + 1, sums  # +1 ms: microsecond truncation per part
    assert parts >= 0.5 * sums["totaltimems"], sums  # the stall dominates both


def test_a_reader_that_stops_makes_fetch_response_send_time_grow(broker):
    """A consumer with a tiny receive buffer asks for 2 MB and reads nothing for 2 s: the
    answer's last byte reaches the kernel only when it reads, which is its send time."""
    with RawConnection(broker.port) as c:
        for _ in range(20):
            r = c.request(0, 7, produce_body("m-big", 0, build_batch([(b"k", os.urandom(100_000))])))
            assert r.responses[0].partition_responses[0].error_code == 0, r
    before = scrape(broker.metrics_port)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", broker.port))
    try:
        sock.sendall(request_frame(1, 11, fetch_body("m-big", 0, 0, max_bytes=4 << 20)))
        time.sleep(2.0)
        assert len(read_frame(sock)) > 1_500_000
    finally:
        sock.close()
    after = scrape(broker.metrics_port)
    assert _moved(before, after, f"{_PREFIX}responsesendtimems_count", request="Fetch") == 1
    assert _moved(before, after, f"{_PREFIX}responsesendtimems_sum", request="Fetch") >= 700  # ms
    assert _moved(before, after, f"{_PREFIX}totaltimems_sum", request="Fetch") >= 700


def test_consumer_group_lag_per_partition(broker):
    s = scrape(broker.metrics_port)
    ends = {p: int(value(s, "kafka_log_log_logendoffset", topic=TOPIC, partition=str(p)))
            for p in range(PARTITIONS)}
    assert all(end > 20 for end in ends.values()), ends
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m-lag",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, ends[p] - 5 * (p + 1)) for p in range(PARTITIONS)],
                 asynchronous=False)
    finally:
        c.close()
    s = scrape(broker.metrics_port)
    for p in range(PARTITIONS):
        labels = {"consumergroup": "m-lag", "topic": TOPIC, "partition": str(p)}
        assert value(s, "kafka_consumergroup_lag", **labels) == 5 * (p + 1)
        assert value(s, "kafka_consumergroup_current_offset", **labels) == ends[p] - 5 * (p + 1)


def test_fetch_time_is_split_into_queue_local_and_remote(broker):
    """A long poll at the log end waits max_wait_ms for data: that is its remote time."""
    before = scrape(broker.metrics_port)
    with RawConnection(broker.port) as c:
        end = c.request(1, 11, fetch_body(TOPIC, 1, 0, max_bytes=1)).responses[0].partitions[0].high_watermark
        r = c.request(1, 11, fetch_body(TOPIC, 1, end, max_wait_ms=300))
        assert r.responses[0].partitions[0].error_code == 0
    after = scrape(broker.metrics_port)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    prefix = "kafka_network_requestmetrics_"
    assert moved(prefix + "remotetimems_count", request="Fetch") == 1
    assert moved(prefix + "remotetimems_sum", request="Fetch") >= 250  # ms
    assert moved(prefix + "requestqueuetimems_count", request="Fetch") == 2
    assert moved(prefix + "localtimems_count", request="Fetch") == 2
    assert moved(prefix + "totaltimems_count", request="Fetch") == 2
    assert moved(prefix + "totaltimems_sum", request="Fetch") >= moved(prefix + "remotetimems_sum",
                                                                       request="Fetch")


def test_error_counters_move_on_induced_errors(broker):
    before = scrape(broker.metrics_port)
    err = "kafka_network_requestmetrics_errors_total"
    with RawConnection(broker.port) as c:
        # a partition that does not exist
        r = c.request(0, 7, produce_body(TOPIC, 99, build_batch([(b"k", b"v")])))
        assert r.responses[0].partition_responses[0].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # a batch above the topic's max.message.bytes
        r = c.request(0, 7, produce_body("m-small", 0, build_batch([(b"k", b"x" * 5000)])))
        assert r.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
        # a fetch past the log end
        r = c.request(1, 11, fetch_body(TOPIC, 0, 10**9))
        assert r.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    after = scrape(broker.metrics_port)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved(err, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert moved(err, request="Produce", error="MESSAGE_TOO_LARGE") == 1
    assert moved(err, request="Fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert moved("kafka_server_brokertopicmetrics_failedproducerequests_total") == 2
    assert moved("kafka_server_brokertopicmetrics_failedfetchrequests_total") == 1
    assert moved("kafka_server_brokertopicmetrics_messagesin_total", topic="m-small") == 0


def test_gauges_of_a_standalone_broker(broker):
    s = scrape(broker.metrics_port)
    assert value(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert ("kafka_server_replicamanager_isrshrinks_total", frozenset()) in s
    assert ("kafka_server_replicamanager_isrexpands_total", frozenset()) in s
    assert value(s, "kafka_log_log_numlogsegments", topic=TOPIC, partition="0") == 1
    for kind, n in (("disk", 2), ("network", 2)):
        for i in range(n):
            assert value(s, "appliance_worker_resident_memory_bytes", kind=kind, worker=str(i)) > 10e6
            assert value(s, "appliance_worker_cpu_seconds_total", kind=kind, worker=str(i)) > 0
    # the idle share needs two scrapes of the same process
    s = scrape(broker.metrics_port)
    for i in range(2):
        assert 0 <= value(s, "kafka_network_processor_idlepercent", networkProcessor=str(i)) <= 1
    assert ("kafka_network_processor_idlepercent", frozenset({("networkProcessor", "0")})) in s


def test_http_errors(broker):
    with socket.create_connection(("127.0.0.1", broker.metrics_port), timeout=10) as s:
        s.sendall(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 404")
    with socket.create_connection(("127.0.0.1", broker.metrics_port), timeout=10) as s:
        s.sendall(b"garbage\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    scrape(broker.metrics_port)  # still serving


def _serve(tmp_path, overrides: dict) -> subprocess.CompletedProcess:
    port = free_port()
    args = [sys.executable, "-m", "appliance.cli.main", "serve",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dirs={tmp_path / 'd0'}",
            "--override", f"appliance.shm.name=appliance-test-{port}"]
    for k, v in overrides.items():
        args += ["--override", f"{k}={v}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_taken_metrics_port_stops_start_up_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        mport = taken.getsockname()[1]
        r = _serve(tmp_path, {"metrics.listener": f"http://127.0.0.1:{mport}/metrics"})
    assert r.returncode == 3, r.stderr
    out = r.stdout + r.stderr
    assert f"metrics.listener http://127.0.0.1:{mport}/metrics (port {mport})" in out
    assert "Traceback" not in out
    assert out.count("could not boot") == 0  # stopped before forking: no respawn loop


def test_bad_metrics_listener_value_is_named(tmp_path):
    r = _serve(tmp_path, {"metrics.listener": "http://127.0.0.1:notaport/metrics"})
    assert r.returncode == 3
    assert "metrics.listener='http://127.0.0.1:notaport/metrics'" in r.stdout + r.stderr


def test_metrics_off_by_default(tmp_path):
    with BrokerProcess(tmp_path) as b:
        assert not os.path.exists(f"/dev/shm/appliance-test-{b.port}-metrics")
        listening = set()
        for proc in [psutil.Process(b.proc.pid), *psutil.Process(b.proc.pid).children()]:
            for conn in proc.net_connections("inet"):
                if conn.status == psutil.CONN_LISTEN:
                    listening.add(conn.laddr.port)
        assert listening == {b.port}


def test_counts_survive_a_disk_worker_killed_and_respawned(broker):
    """The counters live in shared memory: a respawned disk worker neither loses nor recounts
    what its predecessor appended (runs last: it restarts a worker of the module's broker)."""
    before = scrape(broker.metrics_port)
    messages = value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC)
    bytes_in = value(before, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    (pid,) = broker.worker_pids("disk worker 0")
    os.kill(pid, 9)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # respawned and every partition back online
        s = scrape(broker.metrics_port)
        if (broker.worker_pids("disk worker 0") not in ([], [pid])
                and value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0):
            break
        time.sleep(0.2)
    else:
        raise AssertionError("disk worker 0 did not come back")
    _produce(broker.bootstrap, 100, 10**6)
    time.sleep(0.6)  # bytes in published
    after = scrape(broker.metrics_port)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == messages + 100
    assert value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) > bytes_in
