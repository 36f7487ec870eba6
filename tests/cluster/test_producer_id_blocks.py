"""Producer id blocks allocated through ZooKeeper's /latest_producer_id_block, against a real
ZooKeeper: brokers racing each other get disjoint blocks, the znode holds Kafka's JSON, and
nothing waits past its bound when ZooKeeper is away."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import pytest

from appliance.cluster.producer_id_blocks import BlockAllocator, BlockNotAllocated, allocate_block
from appliance.cluster.zk_paths import PERSISTENT_PATHS, PRODUCER_ID_BLOCK
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.storage.producer_id_block import ProducerIdBlock


def test_first_block_creates_the_znode_in_kafkas_format(sessions):
    client = sessions()
    assert client.exists(PRODUCER_ID_BLOCK) is None
    assert allocate_block(client, 5, 10) == ProducerIdBlock(5, 0, 999)
    data, _ = client.get(PRODUCER_ID_BLOCK)
    assert json.loads(data) == {"version": 1, "broker": 5, "block_start": "0", "block_end": "999"}
    assert allocate_block(client, 6, 10) == ProducerIdBlock(6, 1000, 1999)
    assert json.loads(client.get(PRODUCER_ID_BLOCK)[0])["broker"] == 6


def test_the_empty_znode_a_broker_creates_at_start_means_no_block_yet(sessions):
    client = sessions()
    assert PRODUCER_ID_BLOCK in PERSISTENT_PATHS
    client.create(PRODUCER_ID_BLOCK, b"")
    assert allocate_block(client, 1, 10) == ProducerIdBlock(1, 0, 999)


def test_blocks_continue_after_a_kafka_brokers(sessions):
    """A cluster of appliances taking over from Kafka's brokers never reuses their ids."""
    client = sessions()
    client.create(PRODUCER_ID_BLOCK, b'{"version": 1, "broker": 1001, "block_start": "42000", "block_end": "42999"}')
    assert allocate_block(client, 1, 10) == ProducerIdBlock(1, 43000, 43999)


def test_brokers_racing_get_disjoint_blocks(sessions):
    """Three sessions, two threads each, allocating at once: every conditional write that lost
    the race read again, so the 180 blocks tile 0..179,999 with no overlap."""
    clients = [sessions() for _ in range(3)]
    got: list[ProducerIdBlock] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def allocate(client, broker_id):
        start.wait()
        mine = [allocate_block(client, broker_id, 30) for _ in range(30)]
        with lock:
            got.extend(mine)
    threads = [threading.Thread(target=allocate, args=(clients[i % 3], i % 3)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted((b.first, b.last) for b in got) == [(i * 1000, i * 1000 + 999) for i in range(180)]
    assert {b.broker for b in got} == {0, 1, 2}
    latest = json.loads(clients[0].get(PRODUCER_ID_BLOCK)[0])
    assert latest["block_end"] == "179999"


def test_a_znode_not_kafkas_is_refused(sessions):
    client = sessions()
    client.create(PRODUCER_ID_BLOCK, b"rubbish")
    with pytest.raises(BlockNotAllocated, match="BlockFormatError"):
        allocate_block(client, 1, 10)


def test_without_zookeeper_the_answer_is_a_retriable_error_within_the_bound(private_zk):
    """The cluster worker's answer when ZooKeeper hangs or is down: the error, not a hang."""
    client = open_session(ZkSettings(private_zk.connect, 30000, 30000))
    try:
        allocator = BlockAllocator(client, 2)
        assert asyncio.run(allocator.allocate(5)) == (0, 999)
        # a server that stops answering: the session still looks connected, and the calls
        # kazoo queued for it give up at the bound
        os.kill(private_zk.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(BlockNotAllocated, match="did not answer"):
                asyncio.run(allocator.allocate(1.0))
            assert time.monotonic() - started < 2
        finally:
            os.kill(private_zk.proc.pid, signal.SIGCONT)
        private_zk.kill()
        deadline = time.monotonic() + 30
        while client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        started = time.monotonic()
        answer = json.loads(asyncio.run(allocator.answer(b'{"timeout_ms": 3000}')))
        assert time.monotonic() - started < 3
        assert answer["error_code"] == 14 and "ZooKeeper" in answer["error_message"]  # COORDINATOR_LOAD_IN_PROGRESS
        private_zk.start()
        deadline = time.monotonic() + 30
        while not client.connected and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = json.loads(asyncio.run(allocator.answer(b'{"timeout_ms": 5000}')))
        # the call that timed out may have landed after all: a block nobody uses, only skipped
        assert answer["error_code"] == 0 and answer["block_start"] in (1000, 2000)
        assert answer["block_end"] == answer["block_start"] + 999
    finally:
        client.stop()
        client.close()
