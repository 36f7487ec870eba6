"""The 0.8 high-level (ZooKeeper) consumer against a real ZooKeeper and two real cluster-mode
brokers (issue 43): the documented ZooKeeper layout, the rebalance with its owner claims, the
offsets storages and the migration between them, filters, timeouts and bad inputs."""

from __future__ import annotations

import json
import time

from appliance.client.zk_consumer import ConsumerTimeout, create_java_consumer_connector
from tests.cluster.harness import wait_for


def _drain(stream, limit: int) -> list:
    out = []
    try:
        for m in stream:
            out.append(m)
            if len(out) >= limit:
                break
    except ConsumerTimeout:
        pass
    return out


def test_one_connector_reads_every_record_and_registers_as_documented(env):
    env.create_topic("basic", 3)
    env.produce("basic", [f"v{i}" for i in range(30)])
    c = create_java_consumer_connector(env.config("g-basic", consumer_id="c1", consumer_timeout_ms="1500"))
    try:
        streams = c.create_message_streams({"basic": 2})["basic"]
        reg = json.loads(env.zk.get("/consumers/g-basic/ids/c1")[0])
        assert reg["version"] == 1 and reg["subscription"] == {"basic": 2} and reg["pattern"] == "static"
        assert int(reg["timestamp"]) > 0
        assert env.owners("g-basic", "basic") == {0: "c1-0", 1: "c1-0", 2: "c1-1"}
        got = _drain(streams[0], 100) + _drain(streams[1], 100)
        assert sorted(m.message.decode() for m in got) == sorted(f"v{i}" for i in range(30))
        assert {(m.partition, m.offset) for m in got} == {(p, o) for p in range(3) for o in range(10)}
        c.commit_offsets()
        assert env.zk_offsets("g-basic", "basic") == {0: 10, 1: 10, 2: 10}
    finally:
        c.shutdown()
    assert not env.zk.exists("/consumers/g-basic/ids/c1")
    assert env.owners("g-basic", "basic") == {}
