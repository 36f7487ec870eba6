"""Producer behaviour against a real broker: sync/async, batching, queue limits, callbacks,
acks, compression, idempotent retries across a broker restart."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from appliance.client import (
    AdminClient,
    CallbackHandler,
    Producer,
    ProducerRecord,
    QueueFull,
    SimpleConsumer,
)
from appliance.client.admin import NewTopic
from appliance.errors import DuplicateSequenceError, UnknownTopicOrPartitionError
from tests.broker_process import BrokerProcess, free_port


def _read_all(bootstrap: str, topic: str, partition: int = 0) -> list:
    with SimpleConsumer(bootstrap) as sc:
        out, off = [], 0
        end = sc.get_offsets_before(topic, partition, -1)[0]
        while off < end:
            recs = sc.fetch(topic, partition, off)
            assert recs, f"no records at {off} < {end}"
            out += recs
            off = recs[-1].offset + 1
        return out


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    with AdminClient(bootstrap) as a:
        a.create_topics([NewTopic(topic, partitions)])


def test_sync_send_returns_acknowledged_metadata(module_broker, topic_name):
    with Producer(bootstrap_servers=module_broker.bootstrap, producer_type="sync") as p:
        md = [p.send(topic_name, (b"k%d" % i, b"v%d" % i)).result(0) for i in range(5)]  # done already
    assert [m.offset for m in md] == [0, 1, 2, 3, 4]
    recs = _read_all(module_broker.bootstrap, topic_name)
    assert [(r.key, r.value) for r in recs] == [(b"k%d" % i, b"v%d" % i) for i in range(5)]


def test_a_dead_bootstrap_server_does_not_hold_up_the_live_one(module_broker, topic_name):
    """Listed first, an address that refuses gets a quick try (1 s), not the whole connect
    timeout (10 s here: a client that waited it out takes 10 s or more)."""
    dead = f"127.0.0.1:{free_port()}"
    t = time.monotonic()
    with Producer(bootstrap_servers=f"{dead},{module_broker.bootstrap}", producer_type="sync",
                  socket_connection_setup_timeout_ms=10000) as p:
        assert p.send(topic_name, b"x").result(10).offset == 0
    assert time.monotonic() - t < 8


def test_record_shapes_headers_and_timestamps(module_broker, topic_name):
    with Producer(bootstrap_servers=module_broker.bootstrap) as p:
        futs = [p.send(topic_name, b"plain"), p.send(topic_name, "text"),
                p.send(topic_name, (b"k", b"v", [("h", b"1")])),
                p.send(topic_name, ProducerRecord(b"pv", key=b"pk", headers=[("a", None)], timestamp=1234567))]
        p.flush()
    md = [f.result() for f in futs]
    assert md[3].timestamp == 1234567
    recs = _read_all(module_broker.bootstrap, topic_name)
    assert [(r.key, r.value, r.headers) for r in recs] == [
        (None, b"plain", ()), (None, b"text", ()), (b"k", b"v", (("h", b"1"),)), (b"pk", b"pv", (("a", None),))]
    assert recs[3].timestamp == 1234567


def test_async_linger_batches_records_together(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name)
    batches = []

    class Counter(CallbackHandler):
        def on_batch_ready(self, topic, partition, count):
            batches.append(count)

    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=300, batch_size=1 << 20,
                  callback_handler=Counter()) as p:
        t = time.monotonic()
        futs = [p.send(topic_name, b"x%d" % i) for i in range(50)]
        futs[-1].result(10)
        waited = time.monotonic() - t
    assert batches == [50]  # one linger window, one batch
    assert waited >= 0.25


def test_batch_size_cuts_batches_before_linger(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name)
    batches = []

    class Counter(CallbackHandler):
        def on_batch_ready(self, topic, partition, count):
            batches.append(count)

    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=60000, batch_size=1000,
                  callback_handler=Counter()) as p:
        futs = [p.send(topic_name, b"v" * 100) for i in range(40)]
        futs[20].result(10)  # delivered long before the 60 s linger: batch.size triggered it
    assert sum(batches) == 40 and max(batches) <= 9 and len(batches) >= 4


def test_callbacks_fire_in_pipeline_order(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name, 2)
    events = []
    lock = threading.Lock()

    class Recorder(CallbackHandler):
        def on_enqueue(self, topic, partition, key, value):
            with lock:
                events.append(("enqueue", partition, value))

        def on_batch_ready(self, topic, partition, count):
            with lock:
                events.append(("ready", partition, count))

        def on_send(self, topic, partition, count, nbytes):
            with lock:
                events.append(("send", partition, count))

        def on_ack(self, topic, partition, base_offset, count):
            with lock:
                events.append(("ack", partition, count))

    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=50, callback_handler=Recorder()) as p:
        acked_in_future_cb = []
        futs = [p.send(topic_name, b"v%d" % i, partition=i % 2) for i in range(10)]
        futs[0].add_callback(lambda md, err: acked_in_future_cb.append((md.offset, err)))
        p.flush()
    for part in (0, 1):
        kinds = [e[0] for e in events if e[1] == part]
        assert kinds == ["enqueue"] * 5 + ["ready", "send", "ack"]
        assert [e[2] for e in events if e[1] == part and e[0] == "enqueue"] == [b"v%d" % i for i in range(part, 10, 2)]
    assert acked_in_future_cb == [(0, None)]


@pytest.mark.parametrize("mode", ["raise-at-once", "block-then-raise", "block"])
def test_queue_full_modes(module_broker, topic_name, mode):
    _create(module_broker.bootstrap, topic_name)
    timeout_ms = {"raise-at-once": 0, "block-then-raise": 300, "block": -1}[mode]
    # A long linger keeps the 5 queued records from leaving, so the queue stays full.
    p = Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=1500, batch_size=1 << 20,
                 queue_buffering_max_messages=5, queue_enqueue_timeout_ms=timeout_ms)
    try:
        for i in range(5):
            p.send(topic_name, b"%d" % i)
        t = time.monotonic()
        if mode == "block":
            fut = p.send(topic_name, b"5")  # waits until the linger sends the first five
            assert time.monotonic() - t > 0.8
            p.flush()
            assert fut.result().offset == 5
        else:
            with pytest.raises(QueueFull):
                p.send(topic_name, b"5")
            waited = time.monotonic() - t
            assert (waited < 0.1) if mode == "raise-at-once" else (0.25 < waited < 1.2)
    finally:
        p.close()


def test_acks_zero_sends_without_answers(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=module_broker.bootstrap, acks=0) as p:
        futs = [p.send(topic_name, b"z%d" % i) for i in range(100)]
        p.flush()
    assert {f.result().offset for f in futs} == {-1}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        recs = _read_all(module_broker.bootstrap, topic_name)
        if len(recs) == 100:
            break
        time.sleep(0.1)
    assert [r.value for r in recs] == [b"z%d" % i for i in range(100)]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(module_broker, topic_name, codec):
    values = [b"value-%05d-" % i + b"abc" * (i % 40) for i in range(2000)]
    with Producer(bootstrap_servers=module_broker.bootstrap, compression_type=codec) as p:
        p.send(topic_name, values)
        p.flush()
    assert [r.value for r in _read_all(module_broker.bootstrap, topic_name)] == values


def test_send_many_builds_whole_batches(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name, 3)
    values = [b"%06d" % i for i in range(20000)]
    with Producer(bootstrap_servers=module_broker.bootstrap, batch_size=64 * 1024) as p:
        futs = p.send_many(topic_name, values, partition=2)
        p.flush()
    assert len(futs) < 20  # thousands of records per batch
    assert [f.result().offset for f in futs][0] == 0
    assert [r.value for r in _read_all(module_broker.bootstrap, topic_name, 2)] == values


def test_null_keys_stick_to_a_partition_per_batch(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name, 4)
    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=100, batch_size=1 << 20) as p:
        first = [p.send(topic_name, b"a%d" % i) for i in range(20)]
        p.flush()
        second = [p.send(topic_name, b"b%d" % i) for i in range(20)]
        p.flush()
    assert len({f.result().partition for f in first}) == 1
    assert len({f.result().partition for f in second}) == 1
    assert first[0].result().partition != second[0].result().partition  # moved on after the batch


def test_unknown_topic_without_auto_create_is_a_clear_error(broker_factory):
    b = broker_factory(overrides={"auto.create.topics.enable": "false"}).start()
    with Producer(bootstrap_servers=b.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
            p.send("nope", b"x")
    with SimpleConsumer(b.bootstrap) as sc, pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        sc.fetch("nope", 0, 0)


def test_send_to_missing_partition_is_a_clear_error(module_broker, topic_name):
    _create(module_broker.bootstrap, topic_name, 2)
    with Producer(bootstrap_servers=module_broker.bootstrap) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="no partition 7"):
            p.send(topic_name, b"x", partition=7)


def test_idempotent_retries_across_broker_restart_write_each_record_once(tmp_path):
    broker = BrokerProcess(tmp_path, overrides={"group.initial.rebalance.delay.ms": "0"}).start()
    topic = "idem"
    n = 3000
    errors = []
    try:
        _create(broker.bootstrap, topic)
        counts = {"ready": 0, "send": 0}

        class Count(CallbackHandler):
            def on_batch_ready(self, *a):
                counts["ready"] += 1

            def on_send(self, *a):
                counts["send"] += 1

        p = Producer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all", retries=50,
                     retry_backoff_ms=200, linger_ms=2, batch_size=2000, request_timeout_ms=5000,
                     socket_connection_setup_timeout_ms=3000, callback_handler=Count())
        futs = []

        def produce() -> None:
            for i in range(n):
                futs.append(p.send(topic, b"rec-%06d" % i))
                if i % 10 == 0:
                    time.sleep(0.01)  # ~3 s of producing: the restart lands mid-stream

        t = threading.Thread(target=produce)
        t.start()
        for _ in range(2):  # mid-stream, twice: connections die with requests in flight
            time.sleep(0.7)
            # the disk worker stops answering first, so requests are surely in flight at the
            # kill (a fast broker otherwise often has none outstanding at that instant)
            for pid in broker.worker_pids("disk worker"):
                os.kill(pid, signal.SIGSTOP)
            time.sleep(0.3)
            broker.kill()
            broker.start()
        t.join(60)
        assert p.flush(60)
        for f in futs:
            try:
                f.result(0)
            except Exception as e:  # noqa: BLE001 - collected for the assertion below
                errors.append(e)
        p.close()
        assert not errors, errors[:3]
        assert counts["send"] > counts["ready"]  # batches in flight at a kill were sent again
        values = [r.value for r in _read_all(broker.bootstrap, topic)]
        assert values == [b"rec-%06d" % i for i in range(n)]  # each once, in order
    finally:
        broker.stop()
        broker.kill()


def test_resent_idempotent_batch_is_written_once(module_broker, topic_name):
    """What a retry does: the very same bytes (producer id, epoch, sequence) arrive twice; the
    broker keeps one copy and acknowledges both sends with the same offset."""
    from appliance.client.cluster import Cluster
    from appliance.client.transport import TcpTransport
    from appliance.records import build_batch

    _create(module_broker.bootstrap, topic_name)
    cluster = Cluster(module_broker.bootstrap)
    try:
        resp = cluster.any_connection().request(22, {"transactional_id": None, "transaction_timeout_ms": 60000})
        t = TcpTransport(cluster)
        batch = build_batch([(None, b"a"), (None, b"b")], producer_id=resp.producer_id,
                            producer_epoch=resp.producer_epoch, base_sequence=0)
        first = t.send_batch(topic_name, 0, batch, acks=-1, timeout_ms=5000).result(10)
        try:
            again = t.send_batch(topic_name, 0, batch, acks=-1, timeout_ms=5000).result(10).base_offset
        except DuplicateSequenceError:
            again = first.base_offset
        assert again == first.base_offset == 0
        nxt = build_batch([(None, b"c")], producer_id=resp.producer_id, producer_epoch=resp.producer_epoch,
                          base_sequence=2)
        assert t.send_batch(topic_name, 0, nxt, acks=-1, timeout_ms=5000).result(10).base_offset == 2
    finally:
        cluster.close()
    assert [r.value for r in _read_all(module_broker.bootstrap, topic_name)] == [b"a", b"b", b"c"]


def test_ready_batches_go_in_requests_of_at_most_max_request_size(broker_factory, topic_name):
    """Batches ready at once for one broker are grouped into Produce requests of at most
    max.request.size (Kafka's producer does the same). All of them in one request reached
    205 MB with send_many to 1,000 partitions in perf/run.py --full; the broker closes a
    connection whose request is over socket.request.max.bytes, so nothing was acknowledged
    (and the producer's sender thread died of a double-released in-flight slot)."""
    from appliance.client.cluster import Cluster
    from appliance.client.transport import TcpTransport
    from appliance.records import Record, build_batch

    b = broker_factory(overrides={"socket.request.max.bytes": str(2 << 20)}).start()
    _create(b.bootstrap, topic_name, 6)
    value = os.urandom(1000)
    batches = [(topic_name, p, build_batch([Record(i, 0, None, value) for i in range(900)])) for p in range(6)]
    assert sum(len(x[2]) for x in batches) > 5 << 20  # one request would be refused
    cluster = Cluster(b.bootstrap)
    try:
        futs = TcpTransport(cluster).send_batches(batches, acks=1)  # max.request.size: 1 MiB
        assert [f.result(30).base_offset for f in futs] == [0] * 6
    finally:
        cluster.close()
    assert all(len(_read_all(b.bootstrap, topic_name, p)) == 900 for p in range(6))


@pytest.mark.parametrize("thread", ["sender", "acknowledgement"])
def test_a_failed_producer_thread_fails_the_records_instead_of_hanging(module_broker, topic_name, thread):
    """A bug that kills the sender (or the acknowledgement) thread: the records waiting fail
    with ClientClosedError naming it, flush() and close() return at once, send() refuses.
    Before, flush() and close() without a timeout waited for ever."""
    from appliance.client.errors import ClientClosedError

    p = Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=50)
    assert p.send(topic_name, b"before").result(30).offset >= 0
    boom = RuntimeError("injected bug")

    def fail(*_a, **_k):
        raise boom
    if thread == "sender":
        p._transmit = fail
    else:
        p._await = fail
    futures = [p.send(topic_name, b"v%d" % i) for i in range(20)]
    for f in futures:
        with pytest.raises(ClientClosedError, match=f"{thread} thread failed.*injected bug"):
            f.result(10)
    t = time.monotonic()
    assert p.flush() is False
    p.close()
    assert time.monotonic() - t < 3
    with pytest.raises(ClientClosedError):
        p.send(topic_name, b"after")
