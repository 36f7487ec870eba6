"""Producer ids unique in a cluster (issue 46): three real brokers, two network workers each,
take blocks of producer ids from ZooKeeper's /latest_producer_id_block.

- Raw InitProducerId through each broker, across block boundaries, and idempotent
  confluent-kafka producers bootstrapped on each broker: every id once in the cluster, every
  block used by one broker only, the znode in Kafka's format.
- A broker SIGKILLed and started again continues with a fresh block.
- A hung cluster worker: InitProducerId needing a block waits 5 s at most, then answers
  COORDINATOR_LOAD_IN_PROGRESS.
- ZooKeeper down: a broker whose block runs out answers COORDINATOR_LOAD_IN_PROGRESS at once,
  and ids again once ZooKeeper is back.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest
from confluent_kafka import Producer

from appliance.cluster.zk_paths import PRODUCER_ID_BLOCK
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.errors import ErrorCode
from appliance.records.batch import iter_batches, read_header
from tests.broker.producer_ids import ids_of, ids_on_every_worker, init_producer_ids
from tests.broker.wire import RawConnection
from tests.cluster.harness import (
    cluster_broker,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
    wait_joined,
)
from tests.cluster.zk import ZooKeeperServer

SESSION_MS = 30000  # outlives the outage below, and a slow ZooKeeper start after it


@pytest.fixture(scope="module")
def zk(tmp_path_factory):
    """ZooKeeper of this module's own: the last test stops and restarts it."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("pid-zk"))
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def cluster(zk, tmp_path_factory):
    connect = f"{zk.connect}/p{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("pids")
    brokers = [cluster_broker(root / f"b{i}", connect, i, overrides={
        "num.network.threads": "2", "zookeeper.session.timeout.ms": str(SESSION_MS)}) for i in range(3)]
    try:
        start_brokers(brokers)
        wait_joined(brokers, 3)
        yield {"brokers": brokers, "connect": connect, "given": {}}  # given: id -> broker index
    finally:
        kill_brokers(brokers)


def latest_block(connect: str) -> dict:
    client = open_session(ZkSettings(connect, 30000, 30000))
    try:
        return json.loads(client.get(PRODUCER_ID_BLOCK)[0])
    finally:
        client.stop()
        client.close()


def record(cluster: dict, broker: int, ids: list[int]) -> None:
    """Remember who gave which ids; an id given twice in the cluster fails here."""
    given = cluster["given"]
    for pid in ids:
        assert pid not in given, f"producer id {pid} from broker {broker}, given before by {given[pid]}"
        given[pid] = broker


def test_ids_through_every_broker_are_distinct_across_blocks(cluster):
    for i, b in enumerate(cluster["brokers"]):
        ids = ids_on_every_worker(b, 2, 1300)
        assert len({pid // 1000 for pid in ids}) >= 2, "the ids did not cross a block boundary"
        record(cluster, i, ids)
    owners: dict[int, set[int]] = {}
    for pid, broker in cluster["given"].items():
        owners.setdefault(pid // 1000, set()).add(broker)
    assert all(len(o) == 1 for o in owners.values()), "a block's ids came from two brokers"
    latest = latest_block(cluster["connect"])
    assert set(latest) == {"version", "broker", "block_start", "block_end"} and latest["version"] == 1
    assert isinstance(latest["block_start"], str) and isinstance(latest["block_end"], str)
    assert int(latest["block_end"]) >= max(cluster["given"])


def test_idempotent_producers_on_every_broker_get_distinct_ids(cluster):
    """confluent-kafka (enable.idempotence) asks the broker it knows for its id; the ids its
    batches carry are all different, and different from every raw id handed out before."""
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = cluster["brokers"]
    boot = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("pid-idem", 1, 3)])["pid-idem"].result(60)
    producers = [Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
                 for b in brokers for _ in range(2)]
    for n, p in enumerate(producers):
        p.produce("pid-idem", b"from producer %d" % n, partition=0)
    assert all(p.flush(60) == 0 for p in producers)

    def batch_producer_ids() -> list[int] | None:
        for b in brokers:  # the leader's copy (acks=all: every replica of the ISR has them)
            data = log_bytes(b, "pid-idem", 0)
            ids = [read_header(data, pos).producer_id for pos, _ in iter_batches(data)]
            if len(ids) == len(producers):
                return ids
        return None
    ids = wait_for(batch_producer_ids, 30, "every producer's batch on disk")
    assert len(set(ids)) == len(producers) and min(ids) >= 0
    assert not set(ids) & set(cluster["given"])
    for pid in ids:
        cluster["given"][pid] = -1


def test_a_restarted_broker_continues_with_a_fresh_block(cluster):
    brokers = cluster["brokers"]
    before = int(latest_block(cluster["connect"])["block_end"])
    brokers[1].kill()
    brokers[1].start()
    wait_joined(brokers, 3)
    with RawConnection(brokers[1].port) as c:
        ids = ids_of(init_producer_ids(c, 5))
    # its first block, taken when it joined again: after every block allocated before (the
    # requests of a connection run at once: the ids come in any order)
    assert min(ids) > before and min(ids) % 1000 == 0
    assert sorted(ids) == list(range(min(ids), min(ids) + 5))
    record(cluster, 1, ids)


def use_up_block(cluster: dict, broker: int, conn: RawConnection) -> None:
    """Take ids until the broker's block is used up (blocks are 1000 ids from a multiple of
    1000): the next InitProducerId needs a new block."""
    ids = ids_of(init_producer_ids(conn, 1))
    ids += ids_of(init_producer_ids(conn, 999 - ids[0] % 1000))
    assert sorted(ids) == list(range(ids[0], ids[0] - ids[0] % 1000 + 1000))
    record(cluster, broker, ids)


def test_a_hung_cluster_worker_costs_a_bounded_wait_and_a_retriable_error(cluster):
    """The network worker waits for its block at most 5 s (process/producer_ids.py, WAIT_S),
    then answers COORDINATOR_LOAD_IN_PROGRESS; the next InitProducerId takes a new block."""
    b = cluster["brokers"][0]
    (worker,) = b.worker_pids("cluster worker")
    with RawConnection(b.port) as c:
        use_up_block(cluster, 0, c)
        os.kill(worker, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert init_producer_ids(c, 1) == [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)]
            assert 4 < time.monotonic() - started < 8
        finally:
            os.kill(worker, signal.SIGCONT)
        ids = ids_of(init_producer_ids(c, 3))
        assert min(ids) % 1000 == 0  # a new block (the one the late answer brought is skipped)
        record(cluster, 0, ids)


def test_zookeeper_down_answers_a_retriable_error_then_ids_again(cluster, zk):
    """With ZooKeeper down a broker hands out what is left of its block, then answers
    COORDINATOR_LOAD_IN_PROGRESS at once for each InitProducerId; back up, it takes blocks again."""
    b = cluster["brokers"][2]
    zk.kill()
    try:
        with RawConnection(b.port) as c:
            started = time.monotonic()
            answers = init_producer_ids(c, 1200)  # more than a block: the rest of its block runs out
            assert time.monotonic() - started < 30
            # what was left of the block, then refusals (in any order within a batch of
            # requests: a connection's requests run at once)
            assert {code for code, _ in answers} == {0, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
            ids = [pid for code, pid in answers if code == 0]
            assert len(ids) <= 1000 and len({pid // 1000 for pid in ids}) == 1
            assert all(pid == -1 for code, pid in answers if code != 0)
            record(cluster, 2, ids)
            # each refusal is quick (no ZooKeeper connection: nothing is tried)
            started = time.monotonic()
            assert init_producer_ids(c, 1) == [(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)]
            assert time.monotonic() - started < 6
    finally:
        zk.start()

    def an_id() -> int | None:
        with RawConnection(b.port) as c:
            ((code, pid),) = init_producer_ids(c, 1)
        return pid if code == 0 else None
    handed_out = max(cluster["given"])
    pid = wait_for(an_id, 60, "a producer id once ZooKeeper is back", step=0.5)
    assert pid > handed_out and pid % 1000 == 0  # the first of a new block, after every other
    record(cluster, 2, [pid])
    assert all(bb.proc.poll() is None for bb in cluster["brokers"])
