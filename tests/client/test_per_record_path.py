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


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_plain_values_between_keyed_records_keep_their_order(module_broker, topic_name, transport):
    """Plain bytes values join a run (one batch); a keyed record, a send_many or another run
    after it must not overtake it or join it: offsets follow send order, each record's
    metadata carries its own timestamp, callbacks get each record's own metadata."""
    _create(module_broker.bootstrap, topic_name)
    expect, futs, seen = [], [], {}
    with Producer(bootstrap_servers=module_broker.bootstrap, transport=transport, linger_ms=50,
                  batch_size=2000) as p:  # small batches: runs close when full, too
        for i in range(1200):
            if i % 97 == 0:
                rec = (b"k%d" % i, b"keyed-%d" % i)
                futs.append(p.send(topic_name, rec, partition=0))
                expect.append(rec)
            elif i % 251 == 0:
                vals = [b"bulk-%d-%d" % (i, j) for j in range(3)]
                futs.append(p.send_many(topic_name, vals, partition=0)[0])
                expect += [(None, v) for v in vals]
                futs += [None, None]  # send_many: one future per batch
            else:
                f = p.send(topic_name, b"plain-%d" % i, partition=0)
                if i % 50 == 1:
                    f.add_callback(lambda md, err, i=i: seen.__setitem__(i, (md, err)))
                futs.append(f)
                expect.append((None, b"plain-%d" % i))
        p.flush()
        md = [f.result(30) if f is not None else None for f in futs]
    recs = _read_all(module_broker.bootstrap, topic_name)
    assert [(r.key, r.value) for r in recs] == expect
    for k, m in enumerate(md):
        if m is not None and expect[k][0] is None and expect[k][1].startswith(b"plain"):
            assert (m.offset, m.timestamp) == (recs[k].offset, recs[k].timestamp)
    called = [i for i in range(1200) if i % 50 == 1 and i % 97 and i % 251]
    assert sorted(seen) == called and all(err is None for _, err in seen.values())
    for i, (m, _) in seen.items():
        assert recs[m.offset].value == b"plain-%d" % i


def test_a_refused_run_fails_every_record_of_it(module_broker, topic_name):
    """A run the broker refuses (its batch is over the topic's max.message.bytes) fails each
    record's future and callback with the broker's error; none is reported delivered."""
    from appliance.client.admin import AdminClient, NewTopic
    from appliance.errors import MessageTooLargeError

    with AdminClient(module_broker.bootstrap) as a:
        a.create_topics([NewTopic(topic_name, 1, config={"max.message.bytes": "2000"})])
    errors = []
    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=20, retries=0) as p:
        futs = [p.send(topic_name, b"v" * 100, partition=0) for _ in range(50)]  # ~5.8 KB batch
        futs[7].add_callback(lambda md, err: errors.append((md, err)))
        p.flush()
        for f in futs:
            assert f.done()
            with pytest.raises(MessageTooLargeError):
                f.result(0)
        assert isinstance(futs[3].exception(0), MessageTooLargeError)
    assert len(errors) == 1 and errors[0][0] is None and isinstance(errors[0][1], MessageTooLargeError)


def test_senders_in_several_threads_get_each_their_own_offset(module_broker, topic_name):
    """Four threads send plain values to one partition at once through the fast path: every
    future resolves to the offset its record was stored at, each thread's records keep their
    order, and no record is lost or doubled."""
    _create(module_broker.bootstrap, topic_name)
    per_thread = 4000
    futs: dict[int, list] = {}
    with Producer(bootstrap_servers=module_broker.bootstrap, transport="ipc", linger_ms=2,
                  batch_size=20_000) as p:
        p.partitions_for(topic_name)

        def run(t: int) -> None:
            futs[t] = [p.send(topic_name, b"t%d-%05d" % (t, i), partition=0) for i in range(per_thread)]

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        p.flush()
        offsets = {t: [f.result(30).offset for f in fs] for t, fs in futs.items()}
    recs = _read_all(module_broker.bootstrap, topic_name)
    assert len(recs) == 4 * per_thread
    for t, offs in offsets.items():
        assert offs == sorted(offs)
        assert [recs[o].value for o in offs] == [b"t%d-%05d" % (t, i) for i in range(per_thread)]


def test_fast_path_and_slow_path_interleaved_by_thread_switches(module_broker, topic_name):
    """send()'s fast path (C, no lock) against the Python code that changes runs under the run
    lock (a full run closed, more slots reserved, slots reclaimed from a full queue), with Python
    switching threads every microsecond so that they interleave at every step: every record
    lands exactly once, at the offset its future gives, in each thread's order."""
    import sys

    _create(module_broker.bootstrap, topic_name, 2)
    per_thread = 3000
    futs: dict[int, list] = {}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with Producer(bootstrap_servers=module_broker.bootstrap, transport="ipc", linger_ms=1,
                      batch_size=2_000, queue_buffering_max_messages=300) as p:
            p.partitions_for(topic_name)

            def run(t: int) -> None:
                futs[t] = [p.send(topic_name, b"t%d-%05d" % (t, i), partition=t % 2)
                           for i in range(per_thread)]

            threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(120)
            assert p.flush(60)
            offsets = {t: [f.result(30).offset for f in fs] for t, fs in futs.items()}
    finally:
        sys.setswitchinterval(interval)
    for part in range(2):
        recs = _read_all(module_broker.bootstrap, topic_name, part)
        assert len(recs) == 2 * per_thread
        for t in (part, part + 2):
            assert [recs[o].value for o in offsets[t]] == [b"t%d-%05d" % (t, i) for i in range(per_thread)]


def test_queue_limit_is_exact_across_partitions_and_another_partitioner_sees_every_record(
        module_broker, topic_name):
    """Runs take queue slots in advance: still exactly queue.buffering.max.messages records are
    taken, whatever partitions they go to, before QueueFull. With a partitioner of the user's,
    records without a partition each go through it (the fast path does not skip it)."""
    from appliance.client import QueueFull

    _create(module_broker.bootstrap, topic_name, 3)
    p = Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=60_000, batch_size=1 << 20,
                 queue_buffering_max_messages=10, queue_enqueue_timeout_ms=0)
    try:
        for i in range(10):
            p.send(topic_name, b"%d" % i, partition=i % 3)
        with pytest.raises(QueueFull):
            p.send(topic_name, b"over", partition=1)
        assert p.flush(30)
    finally:
        p.close()
    assert sorted(len(_read_all(module_broker.bootstrap, topic_name, k)) for k in range(3)) == [3, 3, 4]

    class RoundRobin:
        def __init__(self) -> None:
            self.n = 0

        def partition(self, key, num_partitions):
            self.n += 1
            return self.n % num_partitions

    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=20, partitioner=RoundRobin()) as p:
        futs = [p.send(topic_name, b"rr-%d" % i) for i in range(30)]
        p.flush()
        parts = [f.result(30).partition for f in futs]
    assert parts == [(i + 1) % 3 for i in range(30)]


def test_a_value_larger_than_batch_size_goes_alone(module_broker, topic_name):
    """batch.size closes a run when the next value does not fit; a value larger than batch.size
    itself is a batch of its own; offsets and values stay in send order."""
    _create(module_broker.bootstrap, topic_name)
    values = [b"a" * 300, b"b" * 300, b"big" * 1000, b"c" * 300, b"d" * 300, b"e" * 300]
    with Producer(bootstrap_servers=module_broker.bootstrap, linger_ms=60_000, batch_size=1000) as p:
        futs = [p.send(topic_name, v, partition=0) for v in values]
        futs[3].result(30)  # cut when "e" did not fit, long before the linger
        assert not futs[5].done()  # "e" waits in the open run
        p.flush()
        assert [f.result(30).offset for f in futs] == list(range(6))
        runs = [f._run for f in futs]  # the batch each record went out in
    assert [runs.index(r) for r in runs] == [0, 0, 2, 3, 3, 5]
    assert [r.value for r in _read_all(module_broker.bootstrap, topic_name)] == values
