"""Jobs submitted with spark-submit to a real standalone cluster (master + two worker JVMs) and to
local[*]: same results, equal to kcat; in place and through the broker in one job; workers
running another Python named. And a checkpointed streaming query (topic -> Parquet file sink)
on the cluster whose driver is SIGKILLed in the middle of a micro-batch and restarted from its
checkpoint: every record exactly once.

The streaming driver starts first (module fixture) and streams while the batch jobs run, so
the JVMs of all four applications start side by side (the machine is small: starting JVMs is
most of these tests' time).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest

from tests.spark.conftest import (
    create_topic,
    executor_log,
    kcat,
    parquet_rows,
    produce,
    submit,
    submit_all,
)

STREAM = "clicks-stream"


def _records(n: int):
    for i in range(n):
        r = {"value": f"event-{i}-".encode() + b"z" * (i % 30)}
        if i % 3:
            r["key"] = f"user-{i % 17}".encode()
        if i % 5 == 0:
            r["headers"] = [("src", f"s{i % 4}".encode())]
        yield r


@pytest.fixture(scope="module")
def topic(broker):
    create_topic(broker, "cl3", 3)
    produce(broker, "cl3", _records(2000), compression="lz4", **{"batch.num.messages": 200})
    return "cl3"


def _values(n0: int, n: int):
    return ({"value": b"rec-%06d" % i, "key": b"u%d" % (i % 11)} for i in range(n0, n0 + n))


def _kill(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _count_files(d) -> int:
    return len([n for n in os.listdir(d) if n.isdigit()]) if os.path.isdir(d) else 0


@pytest.fixture(scope="module")
def stream(broker, spark_cluster, tmp_path_factory):
    """The streaming driver on the cluster (one executor), started before the batch jobs."""
    create_topic(broker, STREAM, 2)
    produce(broker, STREAM, _values(0, 1500))
    d = tmp_path_factory.mktemp("stream")
    st = SimpleNamespace(out=d / "out", ckpt=d / "ckpt", log=d / "driver.log")
    st.args = ("--topic", STREAM, "--out", str(st.out), "--log-dirs", ",".join(broker.log_dirs),
               "--stream", "--checkpoint", str(st.ckpt), "--max-per-trigger", "500",
               "--interval", "1 second")
    st.start = lambda: submit(spark_cluster.master_url, "topic_to_parquet.py", *st.args,
                              background=True, log_path=st.log, cores=1)
    st.driver = st.start()
    try:
        yield st
    finally:
        _kill(st.driver, signal.SIGTERM)


@pytest.mark.timeout(900)
def test_jobs_on_cluster_and_local_equal_kcat_and_another_python_is_named(
        broker, topic, stream, spark_cluster, tmp_path):
    """Three spark-submits at once (one driver JVM each; the cluster applications take one
    1-core worker each, beside the streaming query's): the example job on the cluster reading in place where it can and
    through the broker where it cannot, the same job on local[*] in place, and a cluster job
    whose workers run another Python."""
    import os
    import sys

    want = kcat(broker, topic)
    assert len(want) == 2000
    # Only the first of the broker's two log dirs is given: its partitions are read in place,
    # the others' are fetched through the broker, in the same job.
    disk0 = broker.log_dirs[0]
    local = {p for p in range(3) if os.path.isdir(os.path.join(disk0, f"cl3-{p}"))}
    assert local and local != {0, 1, 2}, "the topic's partitions are all on one log dir"
    other = "/usr/bin/python3.11"  # the system's Python: no numba, pyarrow or project
    res = submit_all({
        "cluster-mixed": dict(master=spark_cluster.master_url, script="topic_to_parquet.py",
                              args=("--topic", topic, "--out", str(tmp_path / "cluster-mixed"),
                                    "--log-dirs", disk0, "--bootstrap", broker.bootstrap),
                              cores=1),
        "local-in-place": dict(master="local[*]", script="topic_to_parquet.py",
                               args=("--topic", topic, "--out", str(tmp_path / "local-in-place"),
                                     "--log-dirs", ",".join(broker.log_dirs))),
        "other-python": dict(master=spark_cluster.master_url, script="topic_to_parquet.py",
                             args=("--topic", topic, "--out", str(tmp_path / "never"),
                                   "--log-dirs", ",".join(broker.log_dirs)), cores=1,
                             conf={"spark.pyspark.python": other,
                                   "spark.pyspark.driver.python": sys.executable,
                                   "spark.task.maxFailures": "1"}),
    }, tmp_path)
    for name in ("cluster-mixed", "local-in-place"):
        code, out = res[name]
        assert code == 0, f"spark-submit {name} failed ({code}):\n{out[-4000:]}"
        assert parquet_rows(tmp_path / name) == want, name
    # The executors (on the workers) said how each task read, with its figures.
    logs = executor_log(spark_cluster)
    for how, parts in (("in-place", local), ("remote", {0, 1, 2} - local)):
        done = re.findall(rf"appliance read cl3-(\d) \[\d+, \d+\) {how}: (\d+) records .* done",
                          logs)
        assert {int(p) for p, _ in done} == parts, (how, logs[-3000:])
    assert re.search(r"cl3-\d \[\d+, \d+\) remote: \d+ records .* bytes fetched [1-9]", logs)
    # Workers with another Python: the error names the interpreter and the fix.
    code, err = res["other-python"]  # spark-submit passes the driver's stderr to stdout
    assert code != 0
    assert "WorkerEnvironmentError" in err, err[-3000:]
    assert f"interpreter {other}" in err or f"interpreter '{other}'" in err, err[-3000:]
    assert f"--conf spark.pyspark.python={sys.executable}" in err
    assert not (tmp_path / "never").exists()


def _wait(pred, timeout: float, what: str, st, step: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if st.driver.poll() is not None:
            raise AssertionError(f"the streaming driver exited ({st.driver.returncode}) before "
                                 f"{what}:\n{st.log.read_text(errors='replace')[-4000:]}")
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.timeout(1200)
def test_driver_sigkill_mid_batch_and_restart_exactly_once(broker, stream, spark):
    st = stream
    commits, offsets = st.ckpt / "commits", st.ckpt / "offsets"
    _wait(lambda: _count_files(commits) >= 2, 600, "two committed micro-batches", st)
    produce(broker, STREAM, _values(1500, 1000))  # more arrives while the query runs
    # SIGKILL the driver (JVM and its Python) while a micro-batch is planned but not committed.
    _wait(lambda: _count_files(offsets) > _count_files(commits), 300,
          "a micro-batch in flight", st, step=0.02)
    _kill(st.driver, signal.SIGKILL)
    done_before = _count_files(commits)
    assert _count_files(offsets) > done_before, "the micro-batch committed before the kill"
    st.driver = st.start()
    produce(broker, STREAM, _values(2500, 500))

    def count() -> int:
        try:
            return spark.read.parquet(str(st.out)).count()
        except Exception:  # noqa: BLE001 - the sink's log may be mid-write
            return -1

    _wait(lambda: _count_files(commits) > done_before and count() >= 3000, 600,
          "all 3000 records in the output", st)
    _kill(st.driver, signal.SIGTERM)
    rows = spark.read.parquet(str(st.out)).select("value", "partition", "offset").collect()
    values = sorted(bytes(r.value).decode() for r in rows)
    assert values == [f"rec-{i:06d}" for i in range(3000)]  # each exactly once
    assert len({(r.partition, r.offset) for r in rows}) == 3000
