"""Crashes: SIGKILL a disk worker, a network worker, or the whole broker in the middle of a
produce stream. Every acknowledged message must be readable at its acknowledged offset."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.broker.clients import consume_confluent, create_topic
from tests.broker.procs import wait_gone
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


class AckLog:
    """Delivery callbacks of a confluent-kafka producer: what the broker acknowledged."""

    def __init__(self) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.twice: list[tuple[int, int, bytes, bytes]] = []  # one offset acknowledged twice
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            if err is None:
                key = (msg.partition(), msg.offset())
                if key in self.acked:  # checked by the test (raising here would kill the thread)
                    self.twice.append((*key, self.acked[key], msg.value()))
                self.acked[key] = msg.value()
            else:
                self.errors.append(str(err))

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def _producer(bootstrap: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 1_000_000,
                     "retry.backoff.ms": 50, "linger.ms": 2, "message.timeout.ms": 60_000,
                     "socket.connection.setup.timeout.ms": 2000, "reconnect.backoff.max.ms": 200,
                     "topic.metadata.refresh.interval.ms": 500, **extra})


def _produce(p: Producer, acks: AckLog, topic: str, start: int, count: int,
             pace: float = 0.0) -> None:
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, b"msg-%08d" % i, partition=i % PARTITIONS, on_delivery=acks)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
        if pace and i % 100 == 0:
            time.sleep(pace)


class Streamer(threading.Thread):
    """Runs _produce on a thread; join() re-raises what it raised."""

    def __init__(self, *args: object) -> None:
        super().__init__()
        self.args_, self.exc = args, None

    def run(self) -> None:
        try:
            _produce(*self.args_)
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            self.exc = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        assert not self.is_alive(), "the producing thread hung"
        if self.exc is not None:
            raise self.exc


def _wait_for(cond, timeout: float, what) -> None:
    """Poll ``cond`` until true; ``what`` (text, or a callable giving it) names it on timeout."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.02)


def _check_acked_readable(bootstrap: str, topic: str, acks: AckLog) -> dict[int, list]:
    """Every acknowledged (partition, offset) holds its value; extra duplicates are allowed."""
    assert not acks.twice, f"offsets acknowledged twice: {acks.twice[:5]}"
    # read everything there is: at least the highest acknowledged offset + 1 per partition
    need = sum(max((o for (p, o) in acks.acked if p == part), default=-1) + 1
               for part in range(PARTITIONS))
    got = consume_confluent(bootstrap, topic, PARTITIONS, need, timeout=60)
    stored = {(p, off): value for p, rows in got.items() for off, _, value, _ in rows}
    missing = [k for k, v in acks.acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged messages lost or changed, e.g. " \
        f"{sorted(missing)[:5]}"
    # offsets are dense: nothing was skipped or overwritten by the recovery
    for p, rows in got.items():
        assert [off for off, *_ in rows] == list(range(len(rows))), f"partition {p}"
    return got


@pytest.mark.parametrize("idempotent", [False, True])
def test_sigkill_disk_worker_mid_stream(broker, idempotent):
    bs = broker.bootstrap
    create_topic(bs, "crash-disk", partitions=PARTITIONS)
    acks = AckLog()
    p = _producer(bs, **{"enable.idempotence": idempotent})
    total = 20_000
    # a paced stream on another thread (~3 s), so the kill lands in the middle of it
    th = Streamer(p, acks, "crash-disk", 0, total, 0.015)
    th.start()
    try:
        _wait_for(lambda: acks.count() >= 2000, 60,
                  lambda: f"first acks ({acks.count()} so far, errors {acks.errors[:3]}):\n"
                          f"{broker.log()[-3000:]}")
        (old_pid,) = broker.worker_pids("disk worker 0")
        os.kill(old_pid, signal.SIGKILL)
        at_kill = acks.count()
    finally:
        th.join(60)
    assert p.flush(90) == 0
    assert at_kill <= total - 5000  # the kill landed while the stream was running
    assert not acks.twice, f"offsets acknowledged twice: {acks.twice[:5]}"
    # the supervisor started a successor and the producer carried on through it
    new = broker.worker_pids("disk worker 0")
    assert new and new != [old_pid]
    assert not acks.errors, acks.errors[:5]  # retriable errors only: every message got through
    assert acks.count() == total
    stored = _check_acked_readable(bs, "crash-disk", acks)
    assert "restarting disk worker 0" in broker.log()
    if idempotent:  # retries of the in-flight batches were recognised: each message once
        values = [v for rows in stored.values() for _, _, v, _ in rows]
        assert len(values) == len(set(values)) == total


def test_sigkill_network_worker_broker_keeps_serving(broker):
    bs = broker.bootstrap
    create_topic(bs, "crash-net", partitions=PARTITIONS)
    acks = AckLog()
    p = _producer(bs)
    _produce(p, acks, "crash-net", 0, 2000)
    assert p.flush(30) == 0
    # One CI run found no "network worker 0" here (not reproduced; a freshly forked worker wears
    # the supervisor's title until it sets its own): the lookup is retried, and a network worker
    # that crashed and was restarted before our kill fails the test with the broker's log.
    _wait_for(lambda: broker.worker_pids("network worker 0"), 10,
              lambda: f"network worker 0; broker log:\n{broker.log()}")
    victims = broker.worker_pids("network worker 0")
    assert len(victims) == 1
    assert "restarting network worker" not in broker.log(), broker.log()
    os.kill(victims[0], signal.SIGKILL)
    _produce(p, acks, "crash-net", 2000, 2000, pace=0.002)
    assert p.flush(60) == 0
    assert acks.count() == 4000, acks.errors[:5]
    _wait_for(lambda: broker.worker_pids("network worker 0") not in ([], victims), 20,
              "a new network worker 0")
    _check_acked_readable(bs, "crash-net", acks)
    assert broker.proc.poll() is None


def test_sigkill_whole_broker_then_restart(tmp_path):
    acks = AckLog()
    first = BrokerProcess(tmp_path)
    with first:
        bs = first.bootstrap
        create_topic(bs, "crash-all", partitions=PARTITIONS)
        p = _producer(bs, **{"message.timeout.ms": 5000})
        stop = threading.Event()

        def stream() -> None:
            i = 0
            while not stop.is_set():
                _produce(p, acks, "crash-all", i, 100)
                i += 100
                time.sleep(0.001)

        th = threading.Thread(target=stream)
        th.start()
        try:
            _wait_for(lambda: acks.count() >= 5000, 60, "acks before the kill")
            first.kill()  # SIGKILL supervisor and every worker at once, mid-stream
            wait_gone(first)
        finally:
            stop.set()
            th.join(30)
        p.flush(15)  # the rest fails (broker gone): those were never acknowledged
    assert acks.count() >= 5000
    # same port, same log dirs: shared memory left behind is reclaimed, the logs recovered
    second = BrokerProcess(tmp_path, port=first.port)
    with second:
        _check_acked_readable(second.bootstrap, "crash-all", acks)
        assert "reclaimed" in second.log()
