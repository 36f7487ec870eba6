"""A follower's disk worker SIGKILLed while it replicates: the supervisor starts a new one and the
replica fetcher carries on with it, so the follower catches up and stays in the ISR.

Found by a random SIGKILL campaign over a 3-broker cluster: the fetcher retried its appends half
a second after the kill, while the new disk worker was still starting, and the new worker emptied
its request rings as it started. Those appends were never answered and the fetcher waited on them
for ever: the follower stopped replicating from that leader until it was restarted.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.cluster.harness import (
    cluster_broker,
    cluster_metadata,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
)
from tests.faults.procs import wait_workers

TOPIC = "follower-restart"


def _broker(workdir: Path, connect: str, broker_id: int) -> BrokerProcess:
    # a lag time short enough that a follower left behind leaves the ISR during the test
    return cluster_broker(workdir, connect, broker_id, overrides={
        "replica.lag.time.max.ms": "3000", "offsets.topic.num.partitions": "1"})


def test_follower_catches_up_after_its_disk_worker_is_killed(zk_connect, tmp_path):
    brokers = {i: _broker(tmp_path / f"b{i}", zk_connect, i) for i in range(2)}
    try:
        start_brokers(brokers.values())
        boot = ",".join(b.bootstrap for b in brokers.values())
        wait_for(lambda: len(cluster_metadata(boot).brokers) == 2, 60, "two registered brokers")
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(60)

        def isr() -> list[int]:
            t = cluster_metadata(boot).topics.get(TOPIC)
            return [] if t is None or t.error is not None else sorted(t.partitions[0].isrs)
        wait_for(lambda: isr() == [0, 1], 60, "both brokers in the ISR")
        leader = cluster_metadata(boot).topics[TOPIC].partitions[0].leader
        follower = brokers[1 - leader]

        stop = threading.Event()
        errors: list[str] = []

        def produce() -> None:
            p = Producer({"bootstrap.servers": boot, "acks": "1", "linger.ms": 5})
            i = 0
            while not stop.is_set():
                p.produce(TOPIC, b"r-%08d" % i, on_delivery=lambda e, m: e and errors.append(str(e)))
                i += 1
                p.poll(0)
                if i % 50 == 0:
                    time.sleep(0.01)
            p.flush(60)

        t = threading.Thread(target=produce)
        t.start()
        try:
            wait_for(lambda: len(log_bytes(follower, TOPIC, 0)) > 100_000, 60, "the follower replicating")
            old = wait_workers(follower, 1, 1)["disk"][0]
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: (pids := follower.worker_pids("disk worker")) and old not in pids, 60,
                     "a new disk worker")
            time.sleep(3)  # the leader's log grows on while the new worker starts and after
        finally:
            stop.set()
            t.join(90)
        assert not errors, errors[:5]
        # the follower's copy becomes the leader's byte for byte, and it is (back) in the ISR
        wait_for(lambda: log_bytes(follower, TOPIC, 0) == log_bytes(brokers[leader], TOPIC, 0), 30,
                 "the follower's log to equal the leader's", step=0.2)
        wait_for(lambda: isr() == [0, 1], 30, "both brokers in the ISR again", step=0.2)
        assert "disk worker 0 exited with signal 9" in follower.log()
    finally:
        kill_brokers(brokers.values())
