"""A fetch answer larger than the socket can hold, read slowly: the network worker sends what
sendfile can, then waits for the socket through its transport (the loop's own sendfile is not
used), every byte arrives in order, and other connections are answered meanwhile. The broker's
send buffer is made small (socket.send.buffer.bytes) so the answer cannot sit in it whole."""

from __future__ import annotations

import os
import socket
import threading
import time

import appliance.protocol as proto
from appliance.records.batch import build_batch, decode_batch, iter_batches
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, fetch_body, metadata_body, produce_body
from tests.broker_process import BrokerProcess

BATCHES = 8
RECORDS_PER_BATCH = 600
VALUE = 1000  # ~600 KB per batch: far above the slices sent inline (64 KiB)


def _values(batch: int) -> list[bytes]:
    return [b"%04d:%04d:" % (batch, i) + os.urandom(VALUE - 10) for i in range(RECORDS_PER_BATCH)]


def test_large_answer_to_a_slow_reader_arrives_whole_and_others_are_served(tmp_path):
    # one network worker: the other connection is served by the same process as the slow one
    with BrokerProcess(tmp_path, overrides={"socket.send.buffer.bytes": "65536",
                                            "num.network.threads": "1"}) as broker:
        _slow_read(broker)


def _slow_read(broker: BrokerProcess) -> None:
    topic = "slow-reader"
    create_topic(broker.bootstrap, topic)
    sent: list[bytes] = []
    with RawConnection(broker.port) as producer:
        for b in range(BATCHES):
            values = _values(b)
            sent += values
            resp = producer.request(0, 7, produce_body(topic, 0, build_batch([(None, v) for v in values])))
            assert resp.responses[0].partition_responses[0].error_code == 0

    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # the broker's sends fill it at once
    slow.settimeout(30)
    slow.connect(("127.0.0.1", broker.port))
    conn = proto.ClientConnection("slow-reader")
    _, frame = conn.send_request(1, 11, fetch_body(topic, 0, 0, max_bytes=64 << 20))
    slow.sendall(frame)

    stalls: list[float] = []
    stop = threading.Event()

    def others() -> None:  # another client's requests while the slow one is being answered
        with RawConnection(broker.port) as other:
            while not stop.is_set():
                t0 = time.monotonic()
                body = other.request(3, 4, metadata_body([topic]))
                stalls.append(time.monotonic() - t0)
                assert body.topics[0].error_code == 0
                time.sleep(0.05)

    th = threading.Thread(target=others)
    th.start()
    body = None
    received = 0
    try:
        while body is None:
            data = slow.recv(16384)
            assert data, "the broker closed the connection mid-answer"
            received += len(data)
            conn.receive_data(data)
            event = conn.next_event()
            if isinstance(event, proto.Response):
                body = event.body
            time.sleep(0.002)  # a slow consumer: ~8 MB/s at most
    finally:
        stop.set()
        th.join(10)
        slow.close()
    assert received > BATCHES * RECORDS_PER_BATCH * VALUE
    part = body.responses[0].partitions[0]
    assert part.error_code == 0
    records = bytes(part.records)
    got: list[bytes] = []
    for pos, _ in iter_batches(records):
        got += [r.value for r in decode_batch(records, pos)[1]]
    assert got == sent
    assert len(stalls) >= 5, "the other client's requests were not answered while the slow read went on"
    assert max(stalls) < 2.0, f"another connection waited {max(stalls):.2f} s behind the slow reader"
