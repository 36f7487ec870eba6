"""SPSC rings in real POSIX shared memory, across a real fork."""

import os
import struct
import uuid

import pytest

from appliance.shm.layout import MsgType
from appliance.shm.ring import Channel, RingFormatError


@pytest.fixture
def channel():
    ch = Channel.create(f"/appliance-test-{uuid.uuid4().hex[:12]}", 4096, 1024)
    yield ch
    ch.unlink()
    ch.close()


def test_put_peek_release_in_order(channel):
    ring = channel.requests
    for i in range(10):
        assert ring.put(MsgType.PRODUCE, struct.pack("=I", i), b"x" * i)
    for i in range(10):
        msg_type, payload = ring.peek()
        assert msg_type == MsgType.PRODUCE
        assert bytes(payload) == struct.pack("=I", i) + b"x" * i
        ring.release()
    assert ring.peek() is None
    assert ring.used() == 0


def test_the_data_ask_is_seen_by_another_attach_and_leaves_the_positions_alone(channel):
    ring = channel.completions
    assert not ring.data_wanted  # a new ring: nobody asks to be woken by appends
    assert ring.put(MsgType.COMPLETION, b"c" * 40)
    other = Channel.attach(channel.name)
    try:
        ring.want_data(True)
        assert other.completions.data_wanted and not other.requests.data_wanted
        assert (other.completions.head, other.completions.used()) == (0, 48)
        msg_type, payload = other.completions.peek()
        assert (msg_type, bytes(payload)) == (MsgType.COMPLETION, b"c" * 40)
        del payload
        other.completions.release()
        assert ring.data_wanted and ring.used() == 0
        other.completions.want_data(False)
        assert not ring.data_wanted
    finally:
        other.close()


def test_wraps_with_pad_and_refuses_when_full(channel):
    ring = channel.requests
    body = b"y" * 1000
    sent = 0
    while ring.put(MsgType.PRODUCE, body):
        sent += 1
    assert sent == 4  # 4 x 1008 bytes fit in 4096, a fifth does not
    got = 0
    for _ in range(1000):  # drain and refill across the wrap point many times
        msg = ring.peek()
        assert msg is not None and bytes(msg[1]) == body
        ring.release()
        got += 1
        assert ring.put(MsgType.PRODUCE, body)
    assert got == 1000
    with pytest.raises(ValueError):
        ring.put(MsgType.PRODUCE, b"z" * 4096)


def test_a_reservation_is_written_in_place_and_seen_only_once_committed(channel):
    """reserve() hands out the ring's own bytes (an IPC producer builds its batch there);
    the consumer sees nothing until commit, and then exactly the committed length."""
    ring = channel.requests
    other = Channel.attach(channel.name)  # the consumer, through its own mapping
    try:
        view = ring.reserve(500)
        assert view is not None and len(view) == 500
        view[:5] = b"hello"
        del view
        assert other.requests.peek() is None  # written, not published
        ring.commit(MsgType.PRODUCE, 5)
        msg_type, payload = other.requests.peek()
        assert (msg_type, bytes(payload)) == (MsgType.PRODUCE, b"hello")
        del payload
        other.requests.release()
        assert ring.used() == 0
    finally:
        other.close()


def test_an_abandoned_reservation_is_taken_again_and_commit_checks_its_length(channel):
    ring = channel.requests
    view = ring.reserve(100)
    view[:3] = b"bad"  # a build that raised: never committed
    del view
    view = ring.reserve(100)  # the same room again
    view[:3] = b"ok!"
    del view
    with pytest.raises(ValueError):
        ring.commit(MsgType.PRODUCE, 101)  # more than was reserved
    ring.commit(MsgType.PRODUCE, 3)
    with pytest.raises(ValueError):
        ring.commit(MsgType.PRODUCE, 3)  # one commit per reservation
    msg_type, payload = ring.peek()
    assert bytes(payload) == b"ok!"
    del payload
    ring.release()
    assert ring.peek() is None


def test_reservations_wrap_with_pad_and_refuse_when_full(channel):
    ring = channel.requests
    while (view := ring.reserve(1000)) is not None:  # as put: 4 fit, a fifth does not
        del view
        ring.commit(MsgType.PRODUCE, 1000)
    expect = []  # what the consumer must see: the first 4 (never written: 1000 bytes each), then ours
    for i in range(1000):  # across the wrap point many times, each shorter than reserved
        while (view := ring.reserve(1000)) is None:  # room is contiguous: take messages until it is
            msg = ring.peek()
            assert msg is not None
            expect.append(len(msg[1]) if len(expect) < 4 else (struct.unpack_from("=I", msg[1])[0], len(msg[1])))
            del msg
            ring.release()
        view[:4] = struct.pack("=I", i)
        del view
        ring.commit(MsgType.PRODUCE, 4 + i % 900)
    while (msg := ring.peek()) is not None:
        expect.append((struct.unpack_from("=I", msg[1])[0], len(msg[1])))
        del msg
        ring.release()
    assert expect == [1000] * 4 + [(i, 4 + i % 900) for i in range(1000)]
    with pytest.raises(ValueError):
        ring.reserve(4096)


def test_garbage_frame_is_detected_and_discardable(channel):
    ring = channel.requests
    assert ring.put(MsgType.PRODUCE, b"ok")
    # a misbehaving producer scribbles a length past the tail into the frame
    ring._mv[ring._data:ring._data + 4] = struct.pack("=I", 10_000)
    with pytest.raises(RingFormatError):
        ring.peek()
    ring.discard_all()
    assert ring.peek() is None
    assert ring.put(MsgType.PRODUCE, b"again")
    assert bytes(ring.peek()[1]) == b"again"


def test_across_processes(channel):
    n = 20_000
    pid = os.fork()
    if pid == 0:  # producer child
        try:
            other = Channel.attach(channel.name)
            i = 0
            while i < n:
                if other.requests.put(MsgType.PRODUCE, struct.pack("=Q", i) * 4):
                    i += 1
            os._exit(0)
        except BaseException:
            os._exit(1)
    expect = 0
    while expect < n:
        msg = channel.requests.peek()
        if msg is None:
            continue
        assert struct.unpack_from("=Q", msg[1])[0] == expect
        channel.requests.release()
        expect += 1
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_positions_never_pass_through_zero_across_processes(channel):
    """head and tail are single aligned stores: struct.pack_into zero-fills its target first, so
    a consumer reading ``tail`` mid-store saw a smaller position (an empty ring, or a frame
    "past the tail": RingFormatError, and the ring discarded). A producer process streams
    numbered messages; the consumer must get every one, in order, with no format error."""
    import multiprocessing
    import time

    total = 200_000

    def produce(name: str) -> None:
        ch = Channel.attach(name)
        ring = ch.requests
        i = 0
        while i < total:
            if ring.put(MsgType.PRODUCE, struct.pack("=I", i)):
                i += 1
        ch.close()

    child = multiprocessing.get_context("fork").Process(target=produce, args=(channel.name,))
    child.start()
    ring = channel.requests
    got, errors, zero_tails = 0, 0, 0
    deadline = time.monotonic() + 60
    try:
        while got < total and time.monotonic() < deadline:
            zero_tails += ring.tail == 0 and got > 0
            try:
                msg = ring.peek()
            except RingFormatError:
                errors += 1
                continue
            if msg is None:
                continue
            assert struct.unpack("=I", bytes(msg[1]))[0] == got
            ring.release()
            got += 1
    finally:
        child.join(30)
    assert (got, errors, zero_tails) == (total, 0, 0)


def test_waiting_flag_handshake(channel):
    ring = channel.completions
    assert not ring.consumer_waiting()
    assert ring.prepare_to_wait() is False  # empty: sleep
    assert ring.consumer_waiting()
    ring.done_waiting()
    assert not ring.consumer_waiting()
    assert ring.put(MsgType.COMPLETION, b"x" * 8)
    assert ring.prepare_to_wait() is True  # a message is there: do not sleep
    ring.done_waiting()
    ring.done_waiting()
    ring.peek()
    assert ring.prepare_to_wait() is False  # the one message is in hand: nothing new to wait for
    ring.done_waiting()
    ring.release()
    assert ring.prepare_to_wait() is False
    ring.done_waiting()


def test_no_lost_wakeup_across_processes(channel):
    """A producer process rings (a pipe) only when the consumer's "waiting" flag is set; the
    consumer sleeps on the pipe whenever the ring is empty. A wake-up lost to the store/load
    race would leave the consumer asleep until its 5 s timeout with a message in the ring."""
    import select
    import time

    total = 20_000
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # producer child
        try:
            os.close(r)
            ring = Channel.attach(channel.name).requests
            for i in range(total):
                while not ring.put(MsgType.PRODUCE, struct.pack("=I", i)):
                    pass
                if ring.consumer_waiting():
                    os.write(w, b"\0")
                if i % 64 == 0:
                    time.sleep(0)  # let the consumer catch up and go to sleep often
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(w)
    ring = channel.requests
    got, sleeps, timeouts = 0, 0, 0
    try:
        while got < total:
            msg = ring.peek()
            if msg is not None:
                assert struct.unpack("=I", bytes(msg[1]))[0] == got
                ring.release()
                got += 1
                continue
            if not ring.prepare_to_wait():
                sleeps += 1
                if not select.select([r], [], [], 5.0)[0]:
                    timeouts += 1
                    break
                os.read(r, 4096)
            ring.done_waiting()
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (got, timeouts) == (total, 0)
    assert sleeps > 0  # the consumer did sleep, so the handshake was exercised
