"""Local IPC producers against the real broker: data path, crashes on both sides, garbage, permissions."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from appliance.client.connection import BrokerConnection
from appliance.client.ipc import IpcTransport, IpcUnavailable, find_broker_base, open_ipc_transport
from appliance.errors import KafkaError, NotLeaderOrFollowerError
from appliance.records.batch import build_batch, decode_records, iter_batches
from appliance.shm.layout import REQUEST, MsgType
from native.scan import SCAN_END, scan_batches
from tests.broker_process import BrokerProcess


def _create(b, topic, partitions=1):
    with BrokerConnection("127.0.0.1", b.port) as c:
        r = c.request(19, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                       "assignments": [], "configs": []}], "timeout_ms": 30000,
                           "validate_only": False})
        assert r.topics[0].error_code == 0


def _fetch_all(b, topic, partition=0):
    """Every record set of the partition, fetch by fetch, through the Kafka protocol."""
    with BrokerConnection("127.0.0.1", b.port) as c:
        offset = 0
        while True:
            r = c.request(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24,
                              "isolation_level": 0, "topics": [{"topic": topic, "partitions": [
                                  {"partition": partition, "fetch_offset": offset, "log_start_offset": -1,
                                   "partition_max_bytes": 1 << 24}]}]})
            data = bytes(r.responses[0].partitions[0].records or b"")
            if not data:
                return
            yield data
            offset = max(h.next_offset for _, h in iter_batches(data, allow_partial=True))


def _read_all(b, topic, partition=0):
    """Every record of the partition, through the Kafka protocol."""
    return [rec for data in _fetch_all(b, topic, partition) for rec in decode_records(data)]


def _batches(b, topic, partition=0):
    """(base offset, record count) of every whole batch of the partition, from the headers only:
    for logs of millions of records, where decoding each record in Python would take minutes."""
    return [(h.base_offset, h.records_count) for data in _fetch_all(b, topic, partition)
            for _, h in iter_batches(data, allow_partial=True)]


def _segments_valid(b, topic, partition=0):
    d = os.path.join(b.log_dirs[0], f"{topic}-{partition}")
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            if data:
                assert scan_batches(data).stop_reason == SCAN_END, name


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the tests that only produce and read, each on topics of its own (a start
    is ~1.6 s, ten of them a third of this module). Killed producers and garbage in a ring are
    what it must shrug off anyway: a later test meeting it broken fails too."""
    with BrokerProcess(tmp_path_factory.mktemp("ipc")) as b:
        yield b


@pytest.fixture
def fresh_broker(broker_factory):
    """A broker of the test's own: for the tests that SIGKILL its disk worker."""
    return broker_factory().start()


def test_ipc_records_read_back_over_tcp_and_kcat(broker):
    _create(broker, "ipc-a", 2)
    t = open_ipc_transport(broker.bootstrap)
    assert t is not None and t.base == find_broker_base(log_dir=broker.log_dirs[0])
    futs = [t.send_batch("ipc-a", i % 2, build_batch([(b"k%d" % i, b"v%d-%d" % (i, j)) for j in range(50)]))
            for i in range(20)]
    results = [f.result(10) for f in futs]
    t.close()
    assert sorted(r.base_offset for r in results if r.partition == 0) == list(range(0, 500, 50))
    got = _read_all(broker, "ipc-a", 0) + _read_all(broker, "ipc-a", 1)
    assert len(got) == 1000
    assert {r.value for r in got} == {b"v%d-%d" % (i, j) for i in range(20) for j in range(50)}
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "ipc-a", "-e", "-o", "beginning", "-q"],
                         capture_output=True, timeout=30)
    assert len(out.stdout.splitlines()) == 1000


def test_no_local_broker_is_a_clear_error():
    assert open_ipc_transport("127.0.0.1:1") is None
    with pytest.raises(IpcUnavailable, match="no local broker with shared memory 'nothing-here'"):
        IpcTransport("nothing-here")


def test_channels_admit_only_the_brokers_user_and_group(broker):
    base = find_broker_base(log_dir=broker.log_dirs[0])
    names = [n for n in os.listdir("/dev/shm") if n.startswith(f"{base}-ipc-")]
    assert names
    for n in names:
        mode = stat.S_IMODE(os.stat(f"/dev/shm/{n}").st_mode)
        assert mode & 0o007 == 0, (n, oct(mode))  # nothing for others


_KILLED_PRODUCER = textwrap.dedent("""
    import sys
    from appliance.client.ipc import IpcTransport
    from appliance.records.batch import build_batch
    t = IpcTransport(sys.argv[1])
    batch = build_batch([(None, b"x" * 100)] * 500)
    print("ready", flush=True)
    futs = []
    while True:
        futs.append(t.send_batch("ipc-k", 0, batch))
        if len(futs) > 4:
            futs.pop(0).result(30)
""")


def test_sigkill_of_a_producer_mid_stream_leaves_no_partial_batch(broker):
    _create(broker, "ipc-k")
    base = find_broker_base(log_dir=broker.log_dirs[0])
    for delay in (0.3, 0.7):
        p = subprocess.Popen([sys.executable, "-c", _KILLED_PRODUCER, base], stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"ready"
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    time.sleep(0.3)
    # the channel is free again and works for the next producer
    with IpcTransport(base) as t:
        r = t.send_batch("ipc-k", 0, build_batch([(None, b"after")])).result(10)
    batches = _batches(broker, "ipc-k")
    assert batches[-1] == (r.base_offset, 1)
    assert {n for _, n in batches[:-1]} == {500}  # whole batches only
    bases = [base for base, _ in batches]
    assert bases == [500 * i for i in range(len(batches))]  # dense offsets, nothing lost between
    with BrokerConnection("127.0.0.1", broker.port) as c:
        last = c.request(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                             "isolation_level": 0, "topics": [{"topic": "ipc-k", "partitions": [
                                 {"partition": 0, "fetch_offset": r.base_offset, "log_start_offset": -1,
                                  "partition_max_bytes": 1 << 20}]}]})
    assert [x.value for x in decode_records(bytes(last.responses[0].partitions[0].records))] == [b"after"]
    _segments_valid(broker, "ipc-k")


def test_a_frame_half_written_by_a_killed_producer_is_never_seen(broker):
    """The producer dies between writing a frame's bytes and publishing the ring's tail."""
    _create(broker, "ipc-h")
    base = find_broker_base(log_dir=broker.log_dirs[0])
    code = textwrap.dedent("""
        import os, signal, sys
        from appliance.client.ipc import IpcTransport
        from appliance.records.batch import build_batch
        t = IpcTransport(sys.argv[1])
        t.send_batch("ipc-h", 0, build_batch([(None, b"whole")])).result(10)
        link = t._link(0)
        ring = link.requests
        # write a frame header and half a batch at the tail, but never publish the tail
        pos = ring._data + ring.tail % ring.capacity
        ring._mv[pos:pos + 8] = (1000).to_bytes(4, "little") + (1).to_bytes(4, "little")
        ring._mv[pos + 8:pos + 508] = build_batch([(None, b"half" * 300)])[:500]
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code, base], timeout=30)
    assert p.returncode == -signal.SIGKILL
    with IpcTransport(base) as t:
        t.send_batch("ipc-h", 0, build_batch([(None, b"next")])).result(10)
    assert [r.value for r in _read_all(broker, "ipc-h")] == [b"whole", b"next"]


def test_garbage_in_a_ring_is_refused_and_disturbs_nobody(broker):
    _create(broker, "ipc-g")
    base = find_broker_base(log_dir=broker.log_dirs[0])
    good = IpcTransport(base)
    bad = IpcTransport(base)
    good.send_batch("ipc-g", 0, build_batch([(None, b"good-0")])).result(10)
    slot = bad.index.lookup("ipc-g", 0).slot
    link = bad._link(0)
    rng = random.Random(3)
    # 1) well-framed produce requests whose batches are garbage: each refused with an error
    for i in range(20):
        garbage = rng.randbytes(rng.randint(0, 3000))
        if i % 2:  # a batch with a valid-looking header but a wrong CRC
            garbage = bytearray(build_batch([(None, b"x" * 50)]))
            garbage[-1] ^= 0xFF
        fut = link.send(slot, "ipc-g", 0, bytes(garbage), 1, 5000)
        with pytest.raises(KafkaError):
            fut.result(10)
    # 2) a frame whose length runs past the tail: the disk worker drops that producer's queue
    ring = link.requests
    pos = ring._data + ring.tail % ring.capacity
    ring._mv[pos:pos + 8] = (10_000_000).to_bytes(4, "little") + int(MsgType.PRODUCE).to_bytes(4, "little")
    import struct
    struct.pack_into("=Q", ring._buf, ring._base + 128, ring.tail + 16)  # publish a bogus tail
    link._ring_disk()
    # the other producer and the broker carry on
    for i in range(1, 6):
        good.send_batch("ipc-g", 0, build_batch([(None, b"good-%d" % i)])).result(10)
    assert [r.value for r in _read_all(broker, "ipc-g")] == [b"good-%d" % i for i in range(6)]
    _segments_valid(broker, "ipc-g")
    good.close()
    bad.close()
    assert REQUEST.size == 24


def test_sigkill_of_the_disk_worker_fails_or_keeps_every_pending_send(fresh_broker):
    _create(fresh_broker, "ipc-d")
    base = find_broker_base(log_dir=fresh_broker.log_dirs[0])
    t = IpcTransport(base)
    batch = build_batch([(None, b"y" * 100)] * 200)
    acked, failed = [], 0
    futs = []
    killed = False
    deadline = time.monotonic() + 60
    while len(acked) < 400 and time.monotonic() < deadline:
        try:
            futs.append(t.send_batch("ipc-d", 0, batch))
        except (NotLeaderOrFollowerError, KafkaError):
            failed += 1
            time.sleep(0.05)
        if len(futs) > 8 or not killed and len(acked) > 50:
            if not killed and len(acked) > 50:
                os.kill(fresh_broker.worker_pids("disk worker 0")[0], signal.SIGKILL)
                killed = True
            while futs:
                f = futs.pop(0)
                try:
                    acked.append(f.result(30).base_offset)
                except KafkaError:
                    failed += 1
    for f in futs:
        try:
            acked.append(f.result(30).base_offset)
        except KafkaError:
            failed += 1
    t.close()
    assert killed and failed > 0  # some sends saw the worker die, with an error, not silence
    recs = _read_all(fresh_broker, "ipc-d")
    offsets = {r.offset for r in recs}
    for base_offset in acked:  # every acknowledged batch is in the log at its offset
        assert all(o in offsets for o in range(base_offset, base_offset + 200))
    _segments_valid(fresh_broker, "ipc-d")


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_producer_bulk_rows_land_intact(broker, transport):
    import numpy as np

    from appliance.client.producer import Producer
    _create(broker, f"rows-{transport}")
    rows = np.random.default_rng(5).integers(0, 256, (25_000, 100), dtype=np.uint8)
    base = find_broker_base(log_dir=broker.log_dirs[0])
    p = Producer(bootstrap_servers=broker.bootstrap, transport=transport, shm_name=base, acks=1)
    try:
        futs = p.send_many(f"rows-{transport}", rows, partition=0)
        firsts = sorted(f.result(30).offset for f in futs)
    finally:
        p.close()
    assert len(futs) > 1 and firsts[0] == 0  # several whole batches, the first at offset 0
    recs = _read_all(broker, f"rows-{transport}")
    assert [r.offset for r in recs] == list(range(25_000))
    assert all(r.value == rows[r.offset].tobytes() and r.key is None for r in recs)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_producer_bulk_list_lands_intact(broker, transport):
    """send_many of a list of values of mixed lengths (cut into batches without Python per
    value): every value at its offset, in order."""
    import random

    from appliance.client.producer import Producer
    topic = f"list-{transport}"
    _create(broker, topic)
    rng = random.Random(9)
    values = [rng.randbytes(rng.choice([0, 1, 100, 3000])) for _ in range(20_000)]
    base = find_broker_base(log_dir=broker.log_dirs[0])
    p = Producer(bootstrap_servers=broker.bootstrap, transport=transport, shm_name=base, acks=1)
    try:
        futs = p.send_many(topic, values, partition=0)
        firsts = sorted(f.result(30).offset for f in futs)
    finally:
        p.close()
    assert len(futs) > 1 and firsts[0] == 0
    recs = _read_all(broker, topic)
    assert [r.offset for r in recs] == list(range(len(values)))
    assert [r.value for r in recs] == values


def test_a_batch_over_the_ring_limit_fails_its_send_and_nothing_else(broker):
    """A batch larger than a channel ring can ever hold is refused with MessageTooLargeError
    (a Kafka error the producer reports on the record's future), not a ValueError that killed
    the producer's sender thread: the next send still goes through."""
    from appliance.client.producer import Producer
    from appliance.errors import MessageTooLargeError

    _create(broker, "over-ring")
    base = find_broker_base(log_dir=broker.log_dirs[0])
    with IpcTransport(base) as t:
        limit = t._link(0).requests.max_message() - REQUEST.size
        with pytest.raises(MessageTooLargeError):
            t.send_batch("over-ring", 0, bytes(limit + 1))
    p = Producer(bootstrap_servers=broker.bootstrap, transport="ipc", shm_name=base, acks=1,
                 max_request_size=2 * limit, retries=0)
    try:
        big = p.send("over-ring", b"x" * (limit + 100), partition=0)
        with pytest.raises(MessageTooLargeError):
            big.result(30)
        assert p.send("over-ring", b"small", partition=0).result(30).offset == 0
    finally:
        p.close()
    assert [r.value for r in _read_all(broker, "over-ring")] == [b"small"]


def test_a_batch_whose_bound_is_over_the_ring_limit_but_itself_fits_still_lands(broker_factory):
    """The producer builds its batches in the ring, reserving the builder's upper bound; a
    batch whose bound is over the ring's limit while the batch itself fits is built aside and
    copied in: it lands whole, not refused for its bound."""
    import numpy as np

    from appliance.client.producer import Producer
    from native.batch_build import max_batch_size

    b = broker_factory(overrides={"message.max.bytes": str(20 << 20)}).start()
    _create(b, "bound")
    base = find_broker_base(log_dir=b.log_dirs[0])
    with IpcTransport(base) as t:
        limit = t._link(0).requests.max_message() - REQUEST.size
    n = 150_000
    assert max_batch_size(n, 0, n * 100) > limit > n * 110  # the case: only the bound is over
    rows = np.random.default_rng(3).integers(0, 256, (n, 100), dtype=np.uint8)
    p = Producer(bootstrap_servers=b.bootstrap, transport="ipc", shm_name=base, acks=1,
                 max_request_size=24 << 20, retries=0)
    try:
        futs = p.send_many("bound", rows, partition=0)
        assert len(futs) == 1 and futs[0].result(60).offset == 0
    finally:
        p.close()
    assert _batches(b, "bound") == [(0, n)]
    _segments_valid(b, "bound")


def test_an_idempotent_producer_rebuilds_in_place_what_a_killed_disk_worker_lost(fresh_broker):
    """Batches are built straight into the ring; one the disk worker took down with it (SIGKILL)
    is built again for the retry, the same bytes and sequence: every row lands exactly once,
    in order."""
    import numpy as np

    from appliance.client.producer import Producer

    _create(fresh_broker, "rebuild")
    base = find_broker_base(log_dir=fresh_broker.log_dirs[0])
    rows = np.random.default_rng(4).integers(0, 256, (2_000, 100), dtype=np.uint8)
    p = Producer(bootstrap_servers=fresh_broker.bootstrap, transport="ipc", shm_name=base, acks=-1,
                 enable_idempotence=True, retries=1000, retry_backoff_ms=50, batch_size=16384,
                 max_request_size=64 << 10)
    sent = 0
    try:
        for k in range(40):
            if k == 10:
                os.kill(fresh_broker.worker_pids("disk worker 0")[0], signal.SIGKILL)
            p.send_many("rebuild", rows, partition=0)
            sent += len(rows)
        assert p.flush(120)
    finally:
        p.close()
    recs = _read_all(fresh_broker, "rebuild")
    assert [r.offset for r in recs] == list(range(sent))
    assert all(r.value == rows[r.offset % len(rows)].tobytes() for r in recs)
    _segments_valid(fresh_broker, "rebuild")


def test_looking_past_stale_tables_of_other_layouts_leaks_no_descriptor():
    """/dev/shm may hold partition tables that no broker of this build reads: an older layout
    version, or a truncated object (left by a crash or by another build). A client looking for
    its broker by port attaches every table there; each refused one leaked its descriptor (225
    per IPC producer on this machine), until the process passed descriptor 1024, which select()
    refuses, and its TCP connections broke ("connection ... is closed"). No broker is needed:
    port 1 has none, so every table is looked at."""
    import struct

    import posix_ipc

    from appliance.shm.layout import LAYOUT_VERSION, TABLE_MAGIC
    stale = [(f"/appliance-stale-{os.getpid()}-{kind}-table", size) for kind, size in (("old", 4096), ("tiny", 8))]
    made = []
    try:
        for name, size in stale:
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
            made.append(shm)
            os.pwrite(shm.fd, struct.pack("=II", TABLE_MAGIC, LAYOUT_VERSION - 1), 0)
            shm.close_fd()
        assert open_ipc_transport("127.0.0.1:1") is None  # the first call may open what stays open
        before = sorted(os.listdir("/proc/self/fd"))
        for _ in range(5):
            assert open_ipc_transport("127.0.0.1:1") is None
        assert sorted(os.listdir("/proc/self/fd")) == before
    finally:
        for shm in made:
            shm.unlink()
