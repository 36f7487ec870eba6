"""native.record_run in isolation: the C Run, RecordFuture and Send (Producer.send()'s fast path).

The producer's own tests (tests/client/test_per_record_path.py) drive the same code through a
real broker; these pin down what the fast path takes, what it hands to ``_send_slow``, and what
a run gives the sender."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from appliance.client.delivery import RecordMetadata, RunFuture
from appliance.client.errors import KafkaConnectionError
from appliance.errors import MessageTooLargeError
from native.record_run import RECORD_OVERHEAD, RecordFuture, Run, Send


class _Recorder(Send):
    """Send with a _send_slow that records how it was called."""

    def __init__(self) -> None:
        self._fast = {}
        self.slow: list[tuple[tuple, dict]] = []

    def _send_slow(self, *args, **kw):
        self.slow.append((args, kw))
        return "slow"


def _open_run(cap: int = 10, left: int = 10_000) -> Run:
    run = Run(left, RunFuture())
    run.cap = run.reserved = cap
    return run


def test_run_add_and_take_give_values_ends_and_stamps():
    run = Run(1000, RunFuture())
    before = int(time.time() * 1000)
    assert [run.add(v, RECORD_OVERHEAD + len(v)) for v in (b"a", b"", b"xyz")] == [0, 1, 2]
    after = int(time.time() * 1000)
    assert run.values == [b"a", b"", b"xyz"]
    assert run.left == 1000 - 3 * RECORD_OVERHEAD - 4
    values, ends, stamps = run.take()
    assert values == [b"a", b"", b"xyz"]
    assert np.frombuffer(ends, np.int64).tolist() == [0, 1, 1, 4]
    ts = np.frombuffer(stamps, np.int64)
    assert len(ts) == 3 and before <= ts.min() and ts.max() <= after
    assert run.values == []  # the futures keep the run, not its values
    assert [len(b) for b in run.take()[1:]] == [8, 0]


def test_run_grows_past_its_first_allocation():
    run = _open_run(cap=5000, left=10**9)
    for i in range(5000):
        assert run.add(b"%d" % i, 20) == i
    values, ends, _ = run.take()
    assert np.frombuffer(ends, np.int64)[-1] == sum(len(v) for v in values)


def test_run_refuses_bad_arguments():
    with pytest.raises(TypeError):
        Run("big", RunFuture())
    run = Run(10, RunFuture())
    with pytest.raises(TypeError):
        run.add("not bytes", 10)
    with pytest.raises(TypeError):
        run.add(b"x")
    with pytest.raises(AttributeError):
        run.values = []  # only add() and take() change them


def test_fast_path_appends_to_the_open_run_and_returns_its_record_future():
    s = _Recorder()
    run = s._fast[("t", 0)] = _open_run()
    f0 = s.send("t", b"one", partition=0)
    f1 = s.send("t", b"two", partition=0, timeout=5)  # timeout: a sync producer's, no run then
    assert type(f0) is RecordFuture and (f0._run, f0._i) == (run.future, 0)
    assert f1._i == 1 and run.values == [b"one", b"two"]
    assert run.left == 10_000 - 2 * RECORD_OVERHEAD - 6
    assert not s.slow
    sticky = s._fast[("u", None)] = _open_run()
    assert s.send("u", b"v")._run is sticky.future  # no partition: (topic, None)


@pytest.mark.parametrize("call", [
    lambda s: s.send("t", b"x", partition=1),  # no open run for that key
    lambda s: s.send("t", "text", partition=0),  # not bytes: the encoder's
    lambda s: s.send("t", bytearray(b"x"), partition=0),
    lambda s: s.send("t", type("B", (bytes,), {})(b"x"), partition=0),  # a subclass of bytes
    lambda s: s.send(type("S", (str,), {})("t"), b"x", partition=0),  # its __hash__ could be Python
    lambda s: s.send("t", b"x", partition=True),  # not an exact int
    lambda s: s.send("t", (b"k", b"v"), partition=0),
    lambda s: s.send("t", b"x", partition=0, other=1),  # an unknown keyword: _send_slow raises
    lambda s: s.send("t", b"x", 0),  # positional partition: _send_slow raises
    lambda s: s.send("t"),
])
def test_everything_else_goes_to_send_slow_with_the_arguments_as_given(call):
    s = _Recorder()
    run = s._fast[("t", 0)] = _open_run()
    assert call(s) == "slow"
    assert len(s.slow) == 1 and run.values == []


def test_send_slow_gets_positional_and_keyword_arguments_unchanged():
    s = _Recorder()
    s.send("t", [b"a", b"b"], partition=3, timeout=1.5)
    s.send("t", None)
    many = {k: i for i, k in enumerate("abcdefgh")}  # past the C path's own stack of 8
    s.send("t", b"x", partition=0, **many)
    assert s.slow == [(("t", [b"a", b"b"]), {"partition": 3, "timeout": 1.5}), (("t", None), {}),
                      (("t", b"x"), {"partition": 0, **many})]


def test_fast_path_stops_at_cap_and_at_the_room_left():
    s = _Recorder()
    run = s._fast[("t", 0)] = _open_run(cap=2, left=2 * (RECORD_OVERHEAD + 10))
    assert s.send("t", b"0123456789", partition=0)._i == 0
    assert s.send("t", b"01234567890", partition=0) == "slow"  # one byte too many for the room
    assert s.send("t", b"0123456789", partition=0)._i == 1
    run.left = 10**6
    assert s.send("t", b"", partition=0) == "slow"  # cap reached
    run.cap = 0  # what the slow path sets while it changes the run
    assert s.send("t", b"", partition=0) == "slow"
    run.cap = -1  # closed
    assert s.send("t", b"", partition=0) == "slow"
    run.cap = 3
    assert s.send("t", b"", partition=0)._i == 2
    assert len(run.values) == 3 and len(s.slow) == 4


def test_without_a_lookup_table_everything_is_slow():
    s = _Recorder()
    s._fast = None
    assert s.send("t", b"x", partition=0) == "slow"
    s._fast = [("t", 0)]  # not a dict
    assert s.send("t", b"x", partition=0) == "slow"
    del s._fast
    assert s.send("t", b"x", partition=0) == "slow"


def test_record_future_answers_from_its_run_future():
    run = RunFuture()
    futs = [RecordFuture(run, i) for i in range(3)]
    assert not futs[1].done()
    with pytest.raises(KafkaConnectionError):
        futs[1].result(0.01)
    seen = []
    futs[2].add_callback(lambda md, err: seen.append((md, err)))
    run.stamps = np.array([10, 11, 12], np.int64)
    run._complete(RecordMetadata("t", 0, 100, -1), None)
    assert futs[1].done() and futs[1].exception() is None
    assert futs[1].result() == RecordMetadata("t", 0, 101, 11)
    assert futs[0].result(timeout=1) == RecordMetadata("t", 0, 100, 10)
    assert seen == [(RecordMetadata("t", 0, 102, 12), None)]
    late = []
    futs[0].add_callback(lambda md, err: late.append(md))  # done already: called at once
    assert late == [RecordMetadata("t", 0, 100, 10)]


def test_record_future_raises_the_runs_error_and_wakes_a_waiter():
    run = RunFuture()
    f = RecordFuture(run, 5)
    got = []
    waiter = threading.Thread(target=lambda: got.append(f.exception(30)))
    waiter.start()
    time.sleep(0.05)
    run._complete(None, MessageTooLargeError("too big"))
    waiter.join(30)
    assert isinstance(got[0], MessageTooLargeError)
    with pytest.raises(MessageTooLargeError):
        f.result(0)


def test_record_futures_are_not_walked_by_the_cycle_collector():
    """Kept by the million, they must not make every collection walk them (the reason they
    are in C): one holds a RunFuture, and the only cycle through it (a callback keeping its
    future) ends when the run completes."""
    run = RunFuture()
    f = RecordFuture(run, 0)
    assert not gc.is_tracked(f) and gc.is_tracked(run)
    f.add_callback(lambda md, err, f=f: None)
    run._complete(None, MessageTooLargeError("x"))
    assert run._record_callbacks is None  # the cycle is gone
