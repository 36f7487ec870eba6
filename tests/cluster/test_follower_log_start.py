"""A follower that fell below its leader's log start offset, and the leader epoch a new leader
stamps before its first append; real processes: one ZooKeeper, three `appliance serve` brokers.

1. A follower is SIGKILLed; while it is down the leader takes more records and DeleteRecords
   moves its log start offset into the middle of a batch past the follower's log end. The
   restarted follower gets OFFSET_OUT_OF_RANGE, empties its log and starts again at the leader's
   log start (Kafka's truncateFullyAndStartAt), catches up and rejoins the ISR; its segment
   holds exactly the leader's bytes from the batch that contains the log start offset on.
2. The leader is stopped (controlled shutdown moves leadership): before anything is appended
   in the new epoch, the new leader's leader-epoch-checkpoint already holds (new epoch, its log
   end offset) and OffsetsForLeaderEpoch answers for the new epoch and the one before it.
"""

from __future__ import annotations

import functools
import socket
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.cluster.wire_channel import encode_request
from appliance.protocol.frames import RESPONSE_HEADER, SIZE
from appliance.protocol.messages.cluster import OffsetsForLeaderEpoch
from appliance.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from tests.broker_process import BrokerProcess
from tests.cluster.harness import brokers_known as _brokers_known
from tests.cluster.harness import wait_for

_wait = functools.partial(wait_for, step=0.2)  # Metadata polls: 5 a second is plenty

SESSION_MS = 6000
TOPIC = "edges"
_HEAD = struct.Struct(">qi")  # a record batch's baseOffset and batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of the batch


def _broker(workdir: Path, connect: str, broker_id: int, port: int | None = None) -> BrokerProcess:
    workdir.mkdir(exist_ok=True)
    return BrokerProcess(workdir, port=port, overrides={
        "zookeeper.connect": connect, "broker.id": str(broker_id),
        "zookeeper.session.timeout.ms": str(SESSION_MS), "num.network.threads": "1",
        "replica.lag.time.max.ms": "2000"})


def _partition(boot: str):
    try:
        t = AdminClient({"bootstrap.servers": boot}).list_topics(TOPIC, timeout=10).topics.get(TOPIC)
    except Exception:  # a broker still joining closes the connection: ask again
        return None
    if t is None or t.error is not None or 0 not in t.partitions:
        return None
    return t.partitions[0]


def _produce(boot: str, first: int, count: int, per_batch: int = 10) -> None:
    """``count`` records, acks=all, flushed every ``per_batch`` so each batch holds that many."""
    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 50, "message.timeout.ms": 60000})
    for i in range(first, first + count):
        p.produce(TOPIC, f"r{i}".encode(), partition=0)
        if (i + 1 - first) % per_batch == 0:
            assert p.flush(60) == 0
    assert p.flush(60) == 0


def _segment(b: BrokerProcess) -> Path:
    logs = sorted((Path(b.log_dirs[0]) / f"{TOPIC}-0").glob("*.log"))
    assert len(logs) == 1, logs
    return logs[0]


def _batches(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, byte position) of each batch."""
    out, pos = [], 0
    while pos + 27 <= len(data):
        base, length = _HEAD.unpack_from(data, pos)
        out.append((base, base + _LAST_DELTA.unpack_from(data, pos + 23)[0], pos))
        pos += 12 + length
    return out


def _offsets_for_leader_epoch(b: BrokerProcess, epoch: int) -> tuple[int, int, int]:
    """(error, leader epoch, end offset) of partition 0, asked as a follower would."""
    body = {"replica_id": 99, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}]}]}
    host, port = b.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(OffsetsForLeaderEpoch.API_KEY, 3, 7, "test", body))
        buf = b""
        while len(buf) < SIZE.size or len(buf) < SIZE.size + SIZE.unpack_from(buf)[0]:
            chunk = s.recv(1 << 16)
            assert chunk, "connection closed"
            buf += chunk
    resp = OffsetsForLeaderEpoch.decode_response(3, buf[SIZE.size:], RESPONSE_HEADER.size)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    connect = f"{zk_server.connect}/f{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("edges")
    brokers = {i: _broker(root / f"b{i}", connect, i) for i in range(3)}
    try:
        with ThreadPoolExecutor(3) as pool:  # the three start side by side
            list(pool.map(BrokerProcess.start, brokers.values()))
        boot = ",".join(b.bootstrap for b in brokers.values())
        _wait(lambda: _brokers_known(boot) == 3, 60, "three registered brokers")
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
        _wait(lambda: (p := _partition(boot)) and p.leader >= 0 and len(p.isrs) == 3, 60, "a full ISR")
        yield {"connect": connect, "brokers": brokers, "boot": boot}
    finally:
        # SIGKILL: nothing is checked at the end, and the controlled shutdown of the last
        # broker standing, with nowhere to move its leadership, only retries for 5 s
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(BrokerProcess.kill, brokers.values()))


def test_follower_below_leader_log_start_truncates_fully(cluster):
    boot, brokers = cluster["boot"], cluster["brokers"]
    _produce(boot, 0, 50)  # offsets 0-49 on every replica
    leader = _partition(boot).leader
    victim = next(i for i in brokers if i != leader)
    brokers[victim].kill()
    _wait(lambda: (p := _partition(boot)) and victim not in p.isrs, 60, "the ISR to drop the dead follower")

    _produce(boot, 50, 50)  # offsets 50-99 only on the leader and the live follower
    admin = AdminClient({"bootstrap.servers": boot})
    done = admin.delete_records([TopicPartition(TOPIC, 0, 75)])  # inside the batch 70-79
    assert next(iter(done.values())).result(30).low_watermark == 75

    brokers[victim] = _broker(Path(brokers[victim].workdir), cluster["connect"], victim,
                              port=brokers[victim].port).start()
    _wait(lambda: (p := _partition(boot)) and victim in p.isrs, 120, "the follower back in the ISR")
    log = brokers[victim].log()
    assert "below the leader's log start 75" in log, log

    lead_data = _segment(brokers[leader]).read_bytes()
    ours = _segment(brokers[victim])
    assert ours.name == "00000000000000000070.log"  # the batch holding offset 75 starts there
    first = next(pos for base, last, pos in _batches(lead_data) if last >= 75)
    _wait(lambda: ours.read_bytes() == lead_data[first:], 30, "the follower's bytes to match the leader's")
    assert [b for b, _, _ in _batches(ours.read_bytes())] == list(range(70, 100, 10))

    # consumers see the leader's low watermark; the follower never serves what it cut
    lo, hi = _consumer_watermarks(boot)
    assert (lo, hi) == (75, 100)


def _consumer_watermarks(boot: str) -> tuple[int, int]:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": boot, "group.id": f"w{uuid.uuid4().hex[:6]}"})
    try:
        return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
    finally:
        c.close()


def test_new_leader_stamps_its_epoch_before_any_append(cluster):
    boot, brokers = cluster["boot"], cluster["brokers"]
    _wait(lambda: (p := _partition(boot)) and len(p.isrs) == 3, 60, "a full ISR")
    _produce(boot, 1000, 20)
    old = _partition(boot).leader
    end = _high_watermark(boot)
    assert end >= 20
    before = read_leader_epoch_checkpoint(str(_segment(brokers[old]).parent / LEADER_EPOCH_CHECKPOINT))
    old_epoch = before[-1][0]

    brokers[old].stop()  # controlled shutdown: leadership moves to another ISR member
    # the partition, not its leader id, is the wait's value: broker 0 would read as "not yet"
    new = _wait(lambda: (p := _partition(boot)) and p.leader not in (-1, old) and p, 60,
                "a new leader").leader
    checkpoint = _segment(brokers[new]).parent / LEADER_EPOCH_CHECKPOINT
    entries = _wait(lambda: (e := read_leader_epoch_checkpoint(str(checkpoint))) and e[-1][0] > old_epoch
                    and e, 30, "the new epoch in the new leader's checkpoint")
    new_epoch, start = entries[-1]
    assert start == end  # the epoch starts at the log end offset, though nothing was appended
    assert _high_watermark(boot) == end

    assert _offsets_for_leader_epoch(brokers[new], new_epoch) == (0, new_epoch, end)
    assert _offsets_for_leader_epoch(brokers[new], old_epoch) == (0, old_epoch, end)

    brokers[old] = _broker(Path(brokers[old].workdir), cluster["connect"], old, port=brokers[old].port).start()
    _wait(lambda: (p := _partition(boot)) and old in p.isrs, 120, "the old leader back in the ISR")


def _high_watermark(boot: str) -> int:
    return _consumer_watermarks(boot)[1]
