"""A cluster-mode broker before it has joined (here: its ZooKeeper does not answer), as a client
meets it, real process: Metadata requests pipelined on one connection get the connection closed
(a client re-resolves and asks another broker), CreateTopics gets NOT_CONTROLLER with a message,
and nothing in the broker fails unseen: every failed request behind the one that closed the
connection is accounted for, none is logged by asyncio as "never retrieved"."""

from __future__ import annotations

import time

from appliance.errors import ErrorCode
from tests.broker.wire import RawConnection, metadata_body, request_frame
from tests.broker_process import BrokerProcess, free_port


def test_requests_before_join_close_or_answer_and_leave_nothing_unretrieved(tmp_path):
    with BrokerProcess(tmp_path, overrides={
            "zookeeper.connect": f"127.0.0.1:{free_port()}", "broker.id": "0",
            "num.network.threads": "1", "zookeeper.connection.timeout.ms": "60000"}) as b:
        metadata = request_frame(3, 4, metadata_body([]))
        for _ in range(3):
            with RawConnection(b.port) as c:
                c.send_raw(metadata * 3)
                assert c.closed_by_peer(10)  # closed, with nothing sent first
        with RawConnection(b.port) as c:
            made = c.request(19, 2, {"topics": [{"name": "t", "num_partitions": 1,
                                                 "replication_factor": 1, "assignments": [],
                                                 "configs": []}],
                                     "timeout_ms": 1000, "validate_only": False})
        [t] = made.topics
        assert t.error_code == ErrorCode.NOT_CONTROLLER and "not joined" in t.error_message
        time.sleep(0.5)  # asyncio logs an unretrieved exception when the dropped task is freed
        log = b.log()
        assert log.count("closing connection from") == 3, log
        assert "never retrieved" not in log and "Traceback" not in log, log
