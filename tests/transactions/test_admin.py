"""DescribeTransactions (65) and ListTransactions (66), KIP-664, on a real broker: a
confluent-kafka transactional producer's id listed Ongoing mid-transaction then CompleteCommit,
described with its partitions; the filters (state, producer id, duration, an unknown state);
unknown and empty ids get Kafka's errors on the wire; ``appliance transactions`` prints Kafka's
tables and fails with one line (no traceback) for a bad bootstrap or an unknown id;
``find-hanging`` finds a transaction no coordinator will end."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer

from appliance.client.admin import AdminClient
from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, produce_body
from tests.broker_process import BrokerProcess, free_port
from tests.cluster.harness import wait_for

TOPIC = "txn-admin"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txnadmin")) as b:
        create_topic(b.bootstrap, TOPIC, 3)
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    with AdminClient(broker.bootstrap) as a:
        yield a


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", "transactions", *args],
                          capture_output=True, text=True, timeout=60)


def _state(admin: AdminClient, tid: str) -> str | None:
    return next((t.state for t in admin.list_transactions() if t.transactional_id == tid), None)


@pytest.fixture(scope="module")
def open_txn(broker, admin):
    """A confluent-kafka producer with a transaction open on partitions 0 and 2 (committed at
    the module's end)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "adm-open"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(TOPIC, b"a", partition=0)
    p.produce(TOPIC, b"b", partition=2)
    assert p.flush(20) == 0
    yield p
    p.commit_transaction(20)


def test_list_and_describe_mid_transaction_then_committed(broker, admin):
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "adm-cf"})
    p.init_transactions(20)
    assert _state(admin, "adm-cf") == "Empty"
    p.begin_transaction()
    p.produce(TOPIC, b"x", partition=1)
    assert p.flush(20) == 0
    (listed,) = [t for t in admin.list_transactions() if t.transactional_id == "adm-cf"]
    assert listed.state == "Ongoing" and listed.coordinator_id == 0 and listed.producer_id >= 0
    d = admin.describe_transactions(["adm-cf"])["adm-cf"]
    assert (d.state, d.partitions, d.producer_id, d.producer_epoch) == ("Ongoing", [(TOPIC, 1)], listed.producer_id, 0)
    assert d.timeout_ms == 60000 and abs(d.start_time_ms - time.time() * 1000) < 60000
    # the CLI's describe, mid-transaction: Kafka's columns, the partitions as topic-partition
    out = _cli("--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "adm-cf")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                              "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                              "TopicPartitions"]
    cells = row.split()
    assert cells[:6] == ["0", "adm-cf", str(listed.producer_id), "0", "Ongoing", "60000"]
    assert cells[6] == str(d.start_time_ms) and int(cells[7]) >= 0 and cells[8] == f"{TOPIC}-1"
    p.commit_transaction(20)
    wait_for(lambda: _state(admin, "adm-cf") == "CompleteCommit", 20, "the commit completed")
    assert admin.describe_transactions(["adm-cf"])["adm-cf"].partitions == []


def test_filters(broker, admin, open_txn):
    ongoing = admin.list_transactions(states=["Ongoing"])
    assert "adm-open" in {t.transactional_id for t in ongoing}
    assert {t.state for t in ongoing} == {"Ongoing"}
    pid = admin.describe_transactions(["adm-open"])["adm-open"].producer_id
    assert [t.transactional_id for t in admin.list_transactions(producer_ids=[pid])] == ["adm-open"]
    assert admin.list_transactions(producer_ids=[pid], states=["CompleteAbort"]) == []
    # KIP-994: open longer than 0 ms yes, longer than an hour no
    assert "adm-open" in {t.transactional_id for t in admin.list_transactions(states=["Ongoing"], duration_ms=0)}
    assert admin.list_transactions(states=["Ongoing"], duration_ms=3_600_000) == []
    # an unknown state name: Kafka answers it back in unknown_state_filters, no error, matches nothing
    c = RawConnection(broker.port)
    try:
        r = c.request(66, 0, {"state_filters": ["Bogus", "Ongoing"], "producer_id_filters": []})
        assert r.error_code == 0 and list(r.unknown_state_filters) == ["Bogus"]
        assert {s.transaction_state for s in r.transaction_states} == {"Ongoing"}
        r = c.request(66, 1, {"state_filters": ["Bogus"], "producer_id_filters": [], "duration_filter": -1})
        assert r.error_code == 0 and list(r.unknown_state_filters) == ["Bogus"] and not r.transaction_states
    finally:
        c.sock.close()


def test_unknown_and_empty_ids_on_the_wire(broker, open_txn):
    c = RawConnection(broker.port)
    try:
        r = c.request(65, 0, {"transactional_ids": ["adm-nobody", "", "adm-open"]})
        by_id = {s.transactional_id: s for s in r.transaction_states}
        assert by_id["adm-nobody"].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert by_id[""].error_code == ErrorCode.INVALID_REQUEST
        s = by_id["adm-open"]
        assert s.error_code == 0 and s.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in s.topics] == [(TOPIC, [0, 2])]
        assert not c.request(65, 0, {"transactional_ids": []}).transaction_states
    finally:
        c.sock.close()


def test_cli_list_table(broker, open_txn):
    out = _cli("--bootstrap-server", broker.bootstrap, "--list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {cells[0]: cells for cells in (line.split() for line in lines[1:])}
    assert rows["adm-open"][1] == "0" and rows["adm-open"][3] == "Ongoing"
    # Kafka's layout: every column padded to the same width, a tab after each
    assert len({line.index("\t") for line in lines}) == 1
    # the list action (Kafka's spelling) with a filter
    out = _cli("--bootstrap-server", broker.bootstrap, "list", "--state", "CompleteAbort")
    assert out.returncode == 0 and "adm-open" not in out.stdout
    out = _cli("--bootstrap-server", broker.bootstrap, "list", "--state", "Bogus", "--state", "Ongoing")
    assert out.returncode == 0 and "adm-open" in out.stdout
    assert "unknown transaction state(s) Bogus" in out.stderr


def test_cli_errors_without_traceback(broker):
    out = _cli("--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "adm-nobody")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "TRANSACTIONAL_ID_NOT_FOUND" in out.stderr and "adm-nobody" in out.stderr
    out = _cli("--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "2", "--list")
    assert out.returncode == 1 and "Traceback" not in out.stderr and "127.0.0.1" in out.stderr
    out = _cli("--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "empty" in out.stderr
    out = _cli("--bootstrap-server", broker.bootstrap, "describe")
    assert out.returncode == 2 and "--transactional-id" in out.stderr
    out = _cli("--bootstrap-server", "nonsense", "--list")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "--bootstrap-server" in out.stderr


def test_find_hanging(broker, open_txn):
    """A transactional batch no coordinator knows of (a plain idempotent producer id, written
    straight to the partition an hour ago by its timestamp) hangs; the confluent producer's
    open transaction, which its coordinator holds, does not, however old it is allowed to be."""
    c = RawConnection(broker.port)
    try:
        r = c.request(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        pid, epoch = r.producer_id, r.producer_epoch
        batch = build_batch([(None, b"orphan")], base_timestamp=int(time.time() * 1000) - 3_600_000,
                            producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
        r = c.request(0, 8, produce_body(TOPIC, 1, batch, acks=-1))
        p = r.responses[0].partition_responses[0]
        assert p.error_code == 0
        orphan_offset = p.base_offset
    finally:
        c.sock.close()
    out = _cli("--bootstrap-server", broker.bootstrap, "find-hanging", "--topic", TOPIC)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                "StartOffset", "LastTimestamp", "Duration(min)"]
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == 1
    assert rows[0][:4] == [TOPIC, "1", str(pid), str(epoch)] and rows[0][5] == str(orphan_offset)
    assert 59 <= int(rows[0][7]) <= 61
    # every open transaction older than 0 minutes: the coordinator's own is still not hanging
    out = _cli("--bootstrap-server", broker.bootstrap, "find-hanging", "--broker-id", "0",
               "--max-transaction-timeout", "0")
    assert out.returncode == 0, out.stderr
    assert [line.split()[2] for line in out.stdout.splitlines()[1:]] == [str(pid)]
    out = _cli("--bootstrap-server", broker.bootstrap, "find-hanging")
    assert out.returncode == 2 and "--topic or --broker-id" in out.stderr
