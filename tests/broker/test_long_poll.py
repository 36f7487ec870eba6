"""A Fetch parked in its long poll wakes within milliseconds of an append (the doorbell), not
at max_wait."""

from __future__ import annotations

import glob
import os
import statistics
import threading
import time
from pathlib import Path

from appliance.client.connection import BrokerConnection
from appliance.client.ipc import SHM_NAME_FILE
from appliance.process.wakeups import DATA_INTEREST_S
from appliance.records.batch import build_batch, decode_batch
from appliance.shm.ring import Channel
from tests.broker.clients import create_topic
from tests.broker.wire import fetch_body, produce_body

MAX_WAIT_MS = 5000
TRIES = 5


def _one_try(port: int, topic: str, offset: int, payload: bytes) -> tuple[float, float]:
    """(ack-to-fetch-response seconds, fetch duration seconds) for one message at ``offset``."""
    result: dict = {}
    fetcher = BrokerConnection("127.0.0.1", port)
    producer = BrokerConnection("127.0.0.1", port)
    try:
        def fetch() -> None:
            t0 = time.monotonic()
            result["body"] = fetcher.request(1, fetch_body(topic, 0, offset, max_wait_ms=MAX_WAIT_MS))
            result["arrived"] = time.monotonic()
            result["duration"] = result["arrived"] - t0

        th = threading.Thread(target=fetch)
        th.start()
        time.sleep(0.3)  # let the fetch reach the broker and park
        assert "body" not in result, "the fetch returned before anything was appended"
        resp = producer.request(0, produce_body(topic, 0, build_batch([(None, payload)]), acks=1))
        acked = time.monotonic()
        th.join(MAX_WAIT_MS / 1000 + 5)
        assert not th.is_alive()
    finally:
        fetcher.close()
        producer.close()
    pr = resp.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, offset)
    part = result["body"].responses[0].partitions[0]
    assert part.error_code == 0
    recs = decode_batch(bytes(part.records))[1]
    assert [(r.offset, r.value) for r in recs] == [(offset, payload)]
    # the response may even beat the ack (both wake on the same append): count that as 0
    return max(result["arrived"] - acked, 0.0), result["duration"]


def test_long_poll_wakes_within_10ms(module_broker):
    create_topic(module_broker.bootstrap, "longpoll")
    # Unmeasured warm-up: the first fetch of a partition on each network worker opens its reader
    # (~10-20 ms once); the numba kernels are loaded by the supervisor before it forks
    warm = 2
    for i in range(warm):
        _one_try(module_broker.port, "longpoll", i, b"warm-%d" % i)
    delays, durations = [], []
    for i in range(warm, warm + TRIES):
        d, dur = _one_try(module_broker.port, "longpoll", i, b"wake-%d" % i)
        delays.append(d)
        durations.append(dur)
    # each fetch was woken by the append, long before its 5 s max wait
    assert max(durations) < MAX_WAIT_MS / 1000 / 2, durations
    print(f"long-poll wake-up after ack: {[round(d * 1000, 2) for d in delays]} ms")
    assert statistics.median(delays) <= 0.010, delays


def _asks(base: str) -> list[bool]:
    """Whether each network worker asks disk worker 0 for data bells (its completion ring)."""
    out = []
    for name in sorted(glob.glob(f"/dev/shm/{base}-ring-n*-d0")):
        ch = Channel.attach("/" + os.path.basename(name))
        try:
            out.append(ch.completions.data_wanted)
        finally:
            ch.close()
    return out


def _until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_only_a_worker_with_long_polls_is_rung_by_appends(module_broker):
    # appends wake a network worker only while it has long polls (a word it sets in its
    # completion rings); a worker that had none sleeps through a stream of produce requests
    base = (Path(module_broker.log_dirs[0]) / SHM_NAME_FILE).read_text().strip()
    assert len(_asks(base)) >= 1
    # an earlier test's long polls: the ask drops DATA_INTEREST_S after the last one
    assert _until(lambda: not any(_asks(base)), DATA_INTEREST_S + 3), _asks(base)
    create_topic(module_broker.bootstrap, "asks")
    producer = BrokerConnection("127.0.0.1", module_broker.port)
    try:
        for i in range(20):
            resp = producer.request(0, produce_body("asks", 0, build_batch([(None, b"p%d" % i)]), acks=1))
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert not any(_asks(base))
    finally:
        producer.close()
    # a long poll raises it, and is still woken by the append (its first wait is short)
    delay, duration = _one_try(module_broker.port, "asks", 20, b"wake")
    assert any(_asks(base))
    assert duration < MAX_WAIT_MS / 1000 / 2 and delay < 0.5, (delay, duration)
    assert _until(lambda: not any(_asks(base)), DATA_INTEREST_S + 3), _asks(base)
