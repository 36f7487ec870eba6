"""The transaction coordinator driven directly (sans-I/O): its appends kept in memory (and
replayed to check a reload), its marker jobs collected, its clock ours."""

from __future__ import annotations

import pytest

from appliance.config import BrokerConfig
from appliance.coordinator import txn_log_schema as schema
from appliance.coordinator.routing import OFFSETS_TOPIC, offsets_partition_for
from appliance.coordinator.txn_coordinator import MAX_EPOCH, TransactionCoordinator
from appliance.coordinator.txn_state import STATE_OF_BYTE, TxnState
from appliance.errors import ErrorCode, error_for_code
from appliance.protocol.registry import API_BY_KEY
from appliance.records.batch import decode_records

S = TxnState
E = ErrorCode
PARTS = 50
TOPICS = {"t": 3}


class Harness:
    def __init__(self, max_timeout_ms: int = 900000, expiration_ms: int = 604800000) -> None:
        self.config = BrokerConfig.load(None, {
            "transaction.max.timeout.ms": str(max_timeout_ms),
            "transactional.id.expiration.ms": str(expiration_ms),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}, warn=False)
        self.now = 1_000_000
        self.log: dict[int, list[bytes]] = {}
        self.jobs: list = []
        self.fail: int | None = None  # an error code every append raises
        self.next_pid = 1000
        self.c = self.make()

    def make(self) -> TransactionCoordinator:
        c = TransactionCoordinator(self.config, PARTS, self.append, self.jobs.append,
                                   lambda t, p: 0 <= p < TOPICS.get(t, 0) or t == OFFSETS_TOPIC,
                                   now_ms=lambda: self.now)
        for p in range(PARTS):
            c.load(p, ())
        return c

    def append(self, partition: int, batch: bytes) -> None:
        if self.fail is not None:
            raise error_for_code(self.fail)("append refused")
        self.log.setdefault(partition, []).append(batch)

    def request(self, api_key: int, version: int, **body):
        api = API_BY_KEY[api_key]
        return api.decode_request(version, api.encode_request(version, body))

    def init(self, tid: str = "tx", timeout_ms: int = 60000, version: int = 4, pid: int = -1, epoch: int = -1):
        self.next_pid += 1
        body = {"transactional_id": tid, "transaction_timeout_ms": timeout_ms}
        if version >= 3:
            body |= {"producer_id": pid, "producer_epoch": epoch}
        return self.c.handle(22, version, self.request(22, version, **body), self.next_pid)

    def add(self, pid: int, epoch: int, topics: dict[str, list[int]], tid: str = "tx", version: int = 3):
        r = self.c.handle(24, version, self.request(24, version, transactional_id=tid, producer_id=pid,
                                                     producer_epoch=epoch, topics=[
                                                         {"name": t, "partitions": ps} for t, ps in topics.items()]))
        return {(t["name"], p["partition_index"]): p["partition_error_code"]
                for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}

    def end(self, pid: int, epoch: int, commit: bool, tid: str = "tx", version: int = 3) -> int:
        return self.c.handle(26, version, self.request(26, version, transactional_id=tid, producer_id=pid,
                                                         producer_epoch=epoch, committed=commit))["error_code"]

    def state(self, tid: str = "tx") -> str:
        return self.c.txns[tid].state

    def persisted(self, tid: str = "tx") -> schema.TxnValue | None:
        """The last value of ``tid`` in the log (None: a tombstone or nothing)."""
        last = None
        for batches in self.log.values():
            for b in batches:
                for r in decode_records(b):
                    if schema.decode_txn_key(r.key).transactional_id == tid:
                        last = None if r.value is None else schema.decode_txn_value(r.value)
        return last

    def reloaded(self) -> TransactionCoordinator:
        jobs_before = len(self.jobs)
        c = TransactionCoordinator(self.config, PARTS, self.append, self.jobs.append, lambda t, p: True,
                                   now_ms=lambda: self.now)
        for p in range(PARTS):
            c.load(p, [r for b in self.log.get(p, []) for r in decode_records(b)])
        self.resumed = self.jobs[jobs_before:]
        return c


@pytest.fixture
def h():
    return Harness()


def test_init_gives_a_new_id_then_bumps_the_epoch(h):
    a = h.init()
    assert (a["error_code"], a["producer_id"], a["producer_epoch"]) == (0, 1001, 0)
    b = h.init()
    assert (b["error_code"], b["producer_id"], b["producer_epoch"]) == (0, 1001, 1)
    v = h.persisted()
    assert (v.producer_id, v.producer_epoch, STATE_OF_BYTE[v.status], v.timeout_ms) == (1001, 1, S.EMPTY, 60000)


def test_commit_walks_the_table_and_completes_on_markers(h):
    a = h.init()
    pid = a["producer_id"]
    assert h.add(pid, 0, {"t": [0, 1]}) == {("t", 0): 0, ("t", 1): 0}
    assert h.state() == S.ONGOING
    assert h.end(pid, 0, commit=True) == 0
    assert h.state() == S.PREPARE_COMMIT
    assert STATE_OF_BYTE[h.persisted().status] == S.PREPARE_COMMIT  # decided before answered
    job = h.jobs[-1]
    assert (job.producer_id, job.epoch, job.commit, job.partitions) == (pid, 0, True, (("t", 0), ("t", 1)))
    # while the markers are written: a new transaction waits, a retried commit is told to
    assert h.add(pid, 0, {"t": [2]}) == {("t", 2): E.CONCURRENT_TRANSACTIONS}
    assert h.end(pid, 0, commit=True) == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, 0, commit=False) == E.INVALID_TXN_STATE
    h.c.markers_written("tx", pid, 0)
    assert h.state() == S.COMPLETE_COMMIT
    v = h.persisted()
    assert STATE_OF_BYTE[v.status] == S.COMPLETE_COMMIT and v.partitions == ()
    assert h.end(pid, 0, commit=True) == 0  # a retry of the completed commit
    assert h.add(pid, 0, {"t": [2]}) == {("t", 2): 0}  # the next transaction
    assert h.c.txns["tx"].partitions == {("t", 2)}


def test_abort_then_new_transaction(h):
    pid = h.init()["producer_id"]
    h.add(pid, 0, {"t": [0]})
    assert h.end(pid, 0, commit=False) == 0
    assert h.state() == S.PREPARE_ABORT and not h.jobs[-1].commit
    h.c.markers_written("tx", pid, 0)
    assert h.state() == S.COMPLETE_ABORT


def test_add_offsets_adds_the_groups_offsets_partition(h):
    pid = h.init()["producer_id"]
    r = h.c.handle(25, 3, h.request(25, 3, transactional_id="tx", producer_id=pid, producer_epoch=0, group_id="g"))
    assert r["error_code"] == 0
    assert h.c.txns["tx"].partitions == {(OFFSETS_TOPIC, offsets_partition_for("g", 50))}


def test_end_txn_without_transaction_is_invalid_txn_state(h):
    pid = h.init()["producer_id"]
    log_before = sum(len(v) for v in h.log.values())
    assert h.end(pid, 0, commit=True) == E.INVALID_TXN_STATE
    assert h.end(pid, 0, commit=False) == E.INVALID_TXN_STATE
    assert h.state() == S.EMPTY and sum(len(v) for v in h.log.values()) == log_before


def test_unknown_topics_and_the_rest_not_attempted(h):
    pid = h.init()["producer_id"]
    got = h.add(pid, 0, {"t": [0, 7], "nope": [0]})
    assert got == {("t", 0): E.OPERATION_NOT_ATTEMPTED, ("t", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                   ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.state() == S.EMPTY and not h.c.txns["tx"].partitions


@pytest.mark.parametrize("version,code", [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED),
                                          (3, E.PRODUCER_FENCED)])
def test_stale_epoch_is_fenced_by_version(h, version, code):
    pid = h.init()["producer_id"]
    h.init()  # a second instance: epoch 1
    assert h.add(pid, 0, {"t": [0]}, version=version) == {("t", 0): code}
    assert h.end(pid, 0, commit=True, version=version) == code
    assert h.state() == S.EMPTY and h.c.txns["tx"].epoch == 1


def test_unknown_producer_id_is_a_mapping_error(h):
    h.init()
    assert h.add(5, 0, {"t": [0]}) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert h.end(5, 0, commit=True, tid="other") == E.INVALID_PRODUCER_ID_MAPPING


def test_timeout_above_the_maximum(h):
    for t in (900001, 0, -5):
        assert h.init(timeout_ms=t)["error_code"] == E.INVALID_TRANSACTION_TIMEOUT
    assert "tx" not in h.c.txns and not h.log
    assert h.init(timeout_ms=900000)["error_code"] == 0


def test_new_instance_aborts_the_open_transaction_first(h):
    pid = h.init()["producer_id"]
    h.add(pid, 0, {"t": [0]})
    r = h.init()
    assert r["error_code"] == E.CONCURRENT_TRANSACTIONS
    m = h.c.txns["tx"]
    assert (m.state, m.epoch) == (S.PREPARE_ABORT, 1)  # the bumped epoch fences the old writes
    job = h.jobs[-1]
    assert (job.commit, job.epoch, job.partitions) == (False, 1, (("t", 0),))
    assert h.init()["error_code"] == E.CONCURRENT_TRANSACTIONS  # the client retries meanwhile
    assert h.end(pid, 0, commit=True) == E.PRODUCER_FENCED  # the old instance
    h.c.markers_written("tx", pid, 1)
    r = h.init()
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, 2)


def test_kip360_retry_with_id_and_epoch(h):
    pid = h.init()["producer_id"]
    r = h.init(pid=pid, epoch=0)
    assert (r["error_code"], r["producer_epoch"]) == (0, 1)
    # the answer to that bump was lost: the same request again gets the same answer
    r = h.init(pid=pid, epoch=0)
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, 1)
    assert h.c.txns["tx"].epoch == 1
    # an older epoch, or another id: fenced / unknown
    assert h.init(pid=pid, epoch=5)["error_code"] == E.PRODUCER_FENCED
    assert h.init(pid=pid, epoch=5, version=3)["error_code"] == E.INVALID_PRODUCER_EPOCH
    assert h.init(tid="fresh", pid=77, epoch=0)["error_code"] == E.INVALID_PRODUCER_ID_MAPPING


def test_exhausted_epoch_takes_a_new_producer_id(h):
    pid = h.init()["producer_id"]
    h.c.txns["tx"].epoch = MAX_EPOCH
    r = h.init()
    assert r["error_code"] == 0 and r["producer_id"] != pid and r["producer_epoch"] == 0


def test_append_failure_changes_nothing(h):
    pid = h.init()["producer_id"]
    h.fail = E.NOT_COORDINATOR
    assert h.add(pid, 0, {"t": [0]}) == {("t", 0): E.NOT_COORDINATOR}
    assert h.init()["error_code"] == E.NOT_COORDINATOR
    assert h.state() == S.EMPTY and h.c.txns["tx"].epoch == 0
    h.fail = None
    assert h.add(pid, 0, {"t": [0]}) == {("t", 0): 0}


def test_not_owned_partitions(h):
    p = h.c.partition_for("tx")
    h.c.unload(p)
    assert h.init()["error_code"] == E.NOT_COORDINATOR
    h.c.begin_load(p)
    assert h.init()["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS


def test_empty_transactional_id_is_invalid(h):
    assert h.init(tid="")["error_code"] == E.INVALID_REQUEST
    assert h.end(1, 0, True, tid="") == E.INVALID_REQUEST


def test_coordinator_aborts_a_timed_out_transaction(h):
    pid = h.init(timeout_ms=5000)["producer_id"]
    h.add(pid, 0, {"t": [0]})
    h.now += 4000
    h.c.poll()
    assert h.state() == S.ONGOING
    h.now += 2000
    h.c.poll()
    m = h.c.txns["tx"]
    assert (m.state, m.epoch) == (S.PREPARE_ABORT, 1) and not h.jobs[-1].commit
    assert h.end(pid, 0, commit=True) == E.PRODUCER_FENCED


def test_idle_transactional_id_expires(h):
    hh = Harness(expiration_ms=10_000)
    pid = hh.init()["producer_id"]
    hh.now += 5_000
    hh.c.poll()
    assert "tx" in hh.c.txns
    hh.now += 6_000
    hh.c.poll()
    assert "tx" not in hh.c.txns and hh.persisted() is None  # the tombstone
    assert hh.add(pid, 0, {"t": [0]}) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert hh.reloaded().txns == {}


def test_ongoing_transaction_does_not_expire(h):
    hh = Harness(expiration_ms=10_000)
    pid = hh.init(timeout_ms=900000)["producer_id"]
    hh.add(pid, 0, {"t": [0]})
    hh.now += 20_000
    hh.c.poll()
    assert hh.state() == S.ONGOING


def test_reload_restores_state_and_resumes_markers(h):
    pid = h.init()["producer_id"]
    h.add(pid, 0, {"t": [0, 2]})
    h.end(pid, 0, commit=True)
    h.init(tid="other")
    c = h.reloaded()
    m = c.txns["tx"]
    assert (m.producer_id, m.epoch, m.state, m.partitions) == (pid, 0, S.PREPARE_COMMIT, {("t", 0), ("t", 2)})
    assert c.txns["other"].state == S.EMPTY
    assert [(j.transactional_id, j.commit, j.partitions) for j in h.resumed] == [("tx", True, (("t", 0), ("t", 2)))]
    c.markers_written("tx", pid, 0)
    assert c.txns["tx"].state == S.COMPLETE_COMMIT


def test_a_stale_marker_completion_is_ignored(h):
    pid = h.init()["producer_id"]
    h.add(pid, 0, {"t": [0]})
    h.end(pid, 0, commit=True)
    h.c.markers_written("tx", pid, 7)  # another epoch's job
    assert h.state() == S.PREPARE_COMMIT


def test_append_errors_while_completing_resend_the_markers(h):
    pid = h.init()["producer_id"]
    h.add(pid, 0, {"t": [0]})
    h.end(pid, 0, commit=True)
    n = len(h.jobs)
    h.fail = E.NOT_COORDINATOR
    h.c.markers_written("tx", pid, 0)
    assert h.state() == S.PREPARE_COMMIT and len(h.jobs) == n + 1


# -- DescribeTransactions / ListTransactions (KIP-664) ----------------------------------------

def _listed(c: TransactionCoordinator, **filters) -> dict[str, str]:
    r = c.list_transactions(**filters)
    assert r["error_code"] == 0
    return {s["transactional_id"]: s["transaction_state"] for s in r["transaction_states"]}


def test_describe_an_open_transaction_and_the_errors(h):
    a = h.init()
    h.now += 10
    assert h.add(a["producer_id"], 0, {"t": [2, 0], OFFSETS_TOPIC: [1]}) == {("t", 2): 0, ("t", 0): 0,
                                                                          (OFFSETS_TOPIC, 1): 0}
    d = h.c.describe("tx")
    assert (d["error_code"], d["transaction_state"], d["producer_id"], d["producer_epoch"]) == (
        0, S.ONGOING, a["producer_id"], 0)
    assert d["transaction_timeout_ms"] == 60000 and d["transaction_start_time_ms"] == h.now
    assert d["topics"] == [{"topic": OFFSETS_TOPIC, "partitions": [1]}, {"topic": "t", "partitions": [0, 2]}]
    assert h.c.describe("nobody")["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
    assert h.c.describe("")["error_code"] == E.INVALID_REQUEST
    p = h.c.partition_for("tx")
    h.c.begin_load(p)
    assert h.c.describe("tx")["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.c.list_transactions()["error_code"] == E.COORDINATOR_LOAD_IN_PROGRESS
    h.c.unload(p)
    assert h.c.describe("tx")["error_code"] == E.NOT_COORDINATOR
    assert "tx" not in _listed(h.c)  # not served here: not listed


def test_list_filters(h):
    a = h.init("open")
    h.add(a["producer_id"], 0, {"t": [0]}, tid="open")
    b = h.init("idle")
    c = h.init("done")
    h.add(c["producer_id"], 0, {"t": [1]}, tid="done")
    h.end(c["producer_id"], 0, False, tid="done")
    h.c.markers_written("done", c["producer_id"], 0)
    assert _listed(h.c) == {"open": S.ONGOING, "idle": S.EMPTY, "done": S.COMPLETE_ABORT}
    assert _listed(h.c, states=["Ongoing", "CompleteAbort"]) == {"open": S.ONGOING, "done": S.COMPLETE_ABORT}
    assert _listed(h.c, producer_ids=[b["producer_id"]]) == {"idle": S.EMPTY}
    r = h.c.list_transactions(states=["Bogus"])
    assert r["unknown_state_filters"] == ["Bogus"] and r["transaction_states"] == []
    h.now += 5000
    assert "open" in _listed(h.c, states=["Ongoing"], duration_ms=4000)
    assert _listed(h.c, states=["Ongoing"], duration_ms=6000) == {}
    h.c.txns["idle"].state = S.DEAD  # being expired: Kafka leaves it out
    assert "idle" not in _listed(h.c)
    assert h.c.describe("idle")["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND
