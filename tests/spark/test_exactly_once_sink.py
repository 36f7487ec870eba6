"""The exactly-once streaming sink (exactlyOnce=true) against a real broker and real Spark.

A query (tests/spark/eos_job.py, its own process) is SIGKILLed at chosen moments and restarted
from its checkpoint; read_committed must then hold every input record once. A task failing on
its first attempt is retried without duplicates. Bad options fail the query naming the option.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from appliance.client.connection import BrokerConnection
from spark.eos_log import DecisionLog
from spark.session import REPO_ROOT
from tests.spark.conftest import create_topic, produce

JOB = os.path.join(REPO_ROOT, "tests", "spark", "eos_job.py")
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def _start(broker, tmp_path, source: str, sink: str, ckpt, *options: str, slow_ms: float = 0,
           master: str = "local[2]", max_per_trigger: int = 100) -> subprocess.Popen:
    cmd = [sys.executable, JOB, "--bootstrap", broker.bootstrap, "--log-dirs",
           ",".join(broker.log_dirs), "--shm", f"appliance-test-{broker.port}", "--source", source,
           "--sink", sink, "--checkpoint", str(ckpt), "--master", master,
           "--max-per-trigger", str(max_per_trigger), "--slow-ms", str(slow_ms)]
    for o in options:
        cmd += ["--option", o]
    log = open(tmp_path / f"{sink}.log", "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT}, start_new_session=True)


def _kill(p: subprocess.Popen) -> None:
    """SIGKILL the job's driver and its JVM (its own process group)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def _log_tail(tmp_path, sink: str) -> str:
    return (tmp_path / f"{sink}.log").read_text(errors="replace")[-4000:]


def _end_offsets(broker, topic: str, parts: int, isolation: int) -> list[int]:
    """Log end (read_uncommitted: the high watermark) or last stable offset (read_committed)."""
    with BrokerConnection("127.0.0.1", broker.port) as c:
        r = c.request(2, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "timestamp": -1}
                                           for p in range(parts)]}]})
    return [p.offset for p in sorted(r.topics[0].partitions, key=lambda x: x.partition_index)]


def _open_txn(broker, topic: str, parts: int) -> bool:
    return (_end_offsets(broker, topic, parts, READ_COMMITTED)
            != _end_offsets(broker, topic, parts, READ_UNCOMMITTED))


def _read(broker, topic: str, parts: int, isolation: str) -> list[bytes]:
    """Every value confluent-kafka returns with ``isolation`` (to the end of each partition)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"eos-check-{isolation}",
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        values, eof = [], set()
        deadline = time.monotonic() + 60
        while len(eof) < parts:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {eof} in 60 s"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
                continue
            values.append(m.value())
        return values
    finally:
        c.close()


def _wait(cond, p: subprocess.Popen, timeout: float, what: str, tmp_path, sink: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if p.poll() is not None:
            raise AssertionError(f"the job ended ({p.returncode}) before {what}:\n"
                                 f"{_log_tail(tmp_path, sink)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s:\n{_log_tail(tmp_path, sink)}")
        time.sleep(0.02)


def _done_batch(ckpt) -> int:
    d = DecisionLog(str(ckpt)).latest()
    return -1 if d is None or not d.done else d.batch_id


def _pending_decision(ckpt) -> bool:
    d = DecisionLog(str(ckpt)).latest()
    return d is not None and not d.done


def _wait_stable(broker, topic: str, parts: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _open_txn(broker, topic, parts):
        assert time.monotonic() < deadline, f"{topic}: a transaction is still open"
        time.sleep(0.1)


def _open_and_undecided(broker, topic: str, parts: int, ckpt) -> bool:
    """A transaction with records open while no decision is pending: seen twice 300 ms apart
    with no micro-batch done in between (so it is not a commit whose markers are landing)."""
    done = _done_batch(ckpt)
    if not _open_txn(broker, topic, parts) or _pending_decision(ckpt):
        return False
    time.sleep(0.3)
    return (_open_txn(broker, topic, parts) and not _pending_decision(ckpt)
            and _done_batch(ckpt) == done)


def test_sigkill_and_restart_exactly_once(broker, tmp_path):
    src, out, n = "eos-in", "eos-out", 1000
    create_topic(broker, src, 2)
    create_topic(broker, out, 2)
    produce(broker, src, ({"value": b"r%05d" % i, "key": b"%d" % i} for i in range(n)))
    ckpt = tmp_path / "ckpt"
    # micro-batches of 100 records in 2 tasks. The killed runs widen the windows a kill aims
    # at: each task holds its open transaction 1 s after writing, and the driver pauses 1.5 s
    # between a batch's two EndTxn (a batch committed in part).
    options = ("kafka.transaction.timeout.ms=60000", "batch.records=10")
    pauses = ("test.taskPauseMs=1000", "test.commitPauseMs=1500")
    rng = random.Random(46)
    kills = []
    for moment in ("open transaction, not decided", "decided, committed in part", "random"):
        before = _done_batch(ckpt)
        p = _start(broker, tmp_path, src, out, ckpt, *options, *pauses)
        try:
            _wait(lambda b=before: _done_batch(ckpt) > b, p, 120, "a committed micro-batch",
                  tmp_path, out)
            if moment == "open transaction, not decided":
                _wait(lambda: _open_and_undecided(broker, out, 2, ckpt), p, 60,
                      "an open transaction", tmp_path, out)
            elif moment == "decided, committed in part":
                _wait(lambda: _pending_decision(ckpt), p, 60, "a pending decision", tmp_path, out)
            else:
                time.sleep(rng.uniform(0, 2.5))
        finally:
            _kill(p)
        last = DecisionLog(str(ckpt)).latest()
        kills.append((moment, last.batch_id, not last.done, _open_txn(broker, out, 2)))
    p = _start(broker, tmp_path, src, out, ckpt, *options)
    try:
        assert p.wait(150) == 0, _log_tail(tmp_path, out)
    finally:
        _kill(p)
    _wait_stable(broker, out, 2)
    committed = _read(broker, out, 2, "read_committed")
    uncommitted = _read(broker, out, 2, "read_uncommitted")
    report = (f"kills (moment, last decided batch, its commit unfinished, a transaction open): {kills}; "
              f"read_committed {len(committed)} records, read_uncommitted {len(uncommitted)} "
              f"({len(uncommitted) - len(committed)} written by attempts that were aborted)")
    print(report)
    assert sorted(committed) == [b"r%05d" % i for i in range(n)], report  # each record once
    assert kills[0][3], f"the first kill should have hit an open transaction: {report}"
    assert kills[1][2], f"the second kill should have left a decision pending: {report}"
    assert len(uncommitted) > n, f"no kill left aborted records behind: {report}"


def test_task_retry_does_not_duplicate(broker, tmp_path):
    src, out, n = "eos-retry-in", "eos-retry-out", 200
    create_topic(broker, src, 2)
    create_topic(broker, out, 1)
    produce(broker, src, ({"value": b"t%04d" % i, "key": b"%d" % i} for i in range(n)))
    # local[2,2]: a task may fail once; task 0 of micro-batch 0 fails after writing its records
    p = _start(broker, tmp_path, src, out, tmp_path / "ckpt", "test.failTaskOnce=0:0",
               master="local[2,2]")
    try:
        assert p.wait(150) == 0, _log_tail(tmp_path, out)
    finally:
        _kill(p)
    assert "test.failTaskOnce: task 0 of micro-batch 0" in _log_tail(tmp_path, out) or \
        "InjectedTaskFailure" in (tmp_path / f"{out}.log").read_text(errors="replace")
    _wait_stable(broker, out, 1)
    committed = _read(broker, out, 1, "read_committed")
    uncommitted = _read(broker, out, 1, "read_uncommitted")
    assert sorted(committed) == [b"t%04d" % i for i in range(n)]
    # the failed attempt's records were written, then aborted
    assert len(uncommitted) > n and set(uncommitted) == set(committed)


def _rate_query(spark, tmp_path, **options: str):
    w = (spark.readStream.format("rate").option("rowsPerSecond", "10").load()
         .selectExpr("cast(value as string) as value").writeStream.format("appliance")
         .option("checkpointLocation", str(tmp_path / "c")).option("exactlyOnce", "true"))
    for k, v in options.items():
        w = w.option(k, v)
    return w.start()


def _fails(query, match: str) -> None:
    try:
        with pytest.raises(Exception, match=match):
            query.awaitTermination(60)
            raise AssertionError(f"the query did not fail: {query.exception()}")
    finally:
        query.stop()


def test_unknown_topic(spark, broker, tmp_path):
    _fails(_rate_query(spark, tmp_path, **{"kafka.bootstrap.servers": broker.bootstrap,
                                           "topic": "eos-no-such-topic"}),
           "option topic='eos-no-such-topic': the topic does not exist")


def test_transaction_timeout_above_broker_max(spark, broker, tmp_path):
    create_topic(broker, "eos-timeout", 1)
    _fails(_rate_query(spark, tmp_path, **{"kafka.bootstrap.servers": broker.bootstrap,
                                           "topic": "eos-timeout",
                                           "kafka.transaction.timeout.ms": "3600000"}),
           "option kafka.transaction.timeout.ms=3600000: above the broker's "
           "transaction.max.timeout.ms")


def test_exactly_once_options_misused(spark, broker, tmp_path):
    create_topic(broker, "eos-misuse", 1)
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="exactlyOnce=true is for streaming writes"):
        (df.write.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "eos-misuse").option("exactlyOnce", "true").mode("append").save())
    with pytest.raises(Exception, match="kafka.transaction.timeout.ms only apply with "
                                        "exactlyOnce=true"):
        (df.write.format("appliance").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "eos-misuse").option("kafka.transaction.timeout.ms", "1000")
         .mode("append").save())
    _fails(_rate_query(spark, tmp_path, **{"kafka.bootstrap.servers": broker.bootstrap,
                                           "topic": "eos-misuse", "kafka.acks": "1"}),
           "option kafka.acks='1': exactlyOnce=true needs acks=all")


def test_decided_batch_whose_transaction_was_aborted_fails_loudly(broker, tmp_path):
    """A decision whose transaction the coordinator no longer has (aborted at its timeout, epoch
    bumped) cannot be completed: the writer refuses to start, naming batch and transaction."""
    from pyspark.sql.types import StringType, StructField, StructType

    from appliance.errors import KafkaError
    from spark.eos_log import Decision
    from spark.eos_writer import ExactlyOnceStreamWriter
    from spark.options import parse_write_options
    from spark.txn_client import TxnClient

    create_topic(broker, "eos-lost", 1)
    tid = "eos-lost-0-0"
    client = TxnClient(broker.bootstrap)
    try:
        pid, epoch = client.init_producer(tid, 60000)
        client.add_partitions(tid, pid, epoch, [("eos-lost", 0)])
        client.init_producer(tid, 60000)  # what a timeout abort does: the epoch moves on
    finally:
        client.close()
    ckpt = tmp_path / "ckpt"
    DecisionLog(str(ckpt)).write(Decision(7, ((tid, pid, epoch),)))
    opts = parse_write_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": "eos-lost",
                                "exactlyOnce": "true", "checkpointLocation": str(ckpt),
                                "transactionalIdPrefix": "eos-lost"})
    schema = StructType([StructField("value", StringType())])
    with pytest.raises(KafkaError, match="micro-batch 7 was decided but transaction "
                                         "'eos-lost-0-0' was aborted before its commit"):
        ExactlyOnceStreamWriter(opts, schema)
    assert not DecisionLog(str(ckpt)).latest().done
