"""Records sent one by one: built by the numba builder (keys, per-record timestamps), their
futures completed a batch at a time (one lock), against a real broker."""

from __future__ import annotations

import threading

import pytest

from appliance.client import Producer
from appliance.client.delivery import ProducerFuture, RecordMetadata, complete_many
from appliance.records import Record

from .test_producer import _create, _read_all


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_records_sent_one_by_one_land_with_keys_and_timestamps(module_broker, topic_name, transport):
    _create(module_broker.bootstrap, topic_name)
    sent = []
    for i in range(3000):
        key = None if i % 3 == 0 else b"key-%d" % i
        ts = 1_700_000_000_000 + (i * 37) % 5000 - (2000 if i % 11 == 0 else 0)  # steps back too
        sent.append((key, b"value-%d" % i + b"x" * (i % 300), ts))
    with Producer(bootstrap_servers=module_broker.bootstrap, transport=transport, linger_ms=20) as p:
        futs = [p.send(topic_name, Record(-1, ts, key, value), partition=0) for key, value, ts in sent]
        futs += [p.send(topic_name, b"plain-bytes-%d" % i, partition=0) for i in range(500)]
        p.flush()
        md = [f.result(30) for f in futs]
    assert [m.offset for m in md] == list(range(3500))
    assert [m.timestamp for m in md[:3000]] == [ts for _, _, ts in sent]
    recs = _read_all(module_broker.bootstrap, topic_name)
    assert [(r.key, r.value, r.timestamp) for r in recs[:3000]] == sent
    assert [r.value for r in recs[3000:]] == [b"plain-bytes-%d" % i for i in range(500)]
    assert [r.timestamp for r in recs[3000:]] == [m.timestamp for m in md[3000:]]


def test_complete_many_wakes_waiters_and_runs_callbacks_in_order():
    futs = [ProducerFuture() for _ in range(4)]
    seen, got = [], []
    futs[1].add_callback(lambda md, err: seen.append((md.offset, err)))
    waiter = threading.Thread(target=lambda: got.append(futs[2].result(30)))
    waiter.start()
    futs[3]._complete(None, RuntimeError("failed before"))  # already done: left as it is
    values = [RecordMetadata("t", 0, i, 5) for i in range(4)]
    complete_many(futs, values)
    waiter.join(30)
    assert got == [values[2]] and seen == [(1, None)]
    assert [f.done() for f in futs] == [True] * 4
    assert futs[0].result(0) == values[0]
    with pytest.raises(RuntimeError, match="failed before"):
        futs[3].result(0)
    late = []
    futs[0].add_callback(lambda md, err: late.append(md.offset))  # after completion: at once
    assert late == [0]
