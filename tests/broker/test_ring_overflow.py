"""A disk worker that falls behind: produce requests that find its shared-memory request ring
full wait in the network worker and reach the log in the order they were sent, every one acked."""

from __future__ import annotations

import os
import signal
import time

import pytest

import appliance.protocol as proto
from appliance.records.batch import build_batch, decode_records
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, fetch_body, produce_body
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.timeout(90)

RING = 1 << 20  # the smallest ring the config allows: four of the requests below fill it
REQUESTS = 16
RECORDS = 4
VALUE = 50_000  # bytes per record: a 200 KB request


def _batch(i: int) -> bytes:
    return build_batch([(b"r%d-%d" % (i, j), bytes([i]) * VALUE) for j in range(RECORDS)])


def test_full_request_ring_keeps_produce_order(tmp_path):
    b = BrokerProcess(tmp_path, overrides={"appliance.request.ring.bytes": str(RING),
                                           "message.max.bytes": str(1 << 20)})
    with b:
        create_topic(b.bootstrap, "behind", partitions=1)
        (disk,) = b.worker_pids("disk worker 0")
        with RawConnection(b.port, timeout=30) as c:
            first = c.request(0, 7, produce_body("behind", 0, _batch(255), acks=-1))
            assert first.responses[0].partition_responses[0].error_code == 0
            os.kill(disk, signal.SIGSTOP)  # the disk worker stops taking requests
            try:
                for i in range(REQUESTS):  # pipelined, as a client with many in flight sends
                    _, frame = c.conn.send_request(0, 7, produce_body("behind", 0, _batch(i), acks=-1))
                    c.send_raw(frame)
                time.sleep(0.3)  # the network worker retries the full ring meanwhile
            finally:
                os.kill(disk, signal.SIGCONT)
            answers = []
            while len(answers) < REQUESTS:
                event = c.conn.next_event()
                if isinstance(event, proto.Response):
                    answers.append(event.body.responses[0].partition_responses[0])
                elif event is proto.NEED_DATA:
                    c.conn.receive_data(c.sock.recv(1 << 20))
                else:
                    pytest.fail(f"unexpected event {event!r}")
            assert [a.error_code for a in answers] == [0] * REQUESTS
            # sent order is log order: request i starts right after request i-1's records
            assert [a.base_offset for a in answers] == [RECORDS * (i + 1) for i in range(REQUESTS)]
            seen = []
            offset = RECORDS
            while offset < RECORDS * (REQUESTS + 1):
                r = c.request(1, 11, fetch_body("behind", 0, offset, max_bytes=4 << 20))
                records = r.responses[0].partitions[0].records
                for rec in decode_records(records):
                    seen.append((rec.offset, rec.key, rec.value[:1]))
                    offset = rec.offset + 1
            assert seen == [(RECORDS * (i + 1) + j, b"r%d-%d" % (i, j), bytes([i]))
                            for i in range(REQUESTS) for j in range(RECORDS)]
