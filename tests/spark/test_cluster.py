"""Jobs submitted with spark-submit to a real standalone cluster (master + two worker JVMs) and to
local[*]: same results, equal to kcat; in place and through the broker in one job; workers
running another Python named."""

from __future__ import annotations

import re

import pytest

from tests.spark.conftest import (
    create_topic,
    executor_log,
    kcat,
    parquet_rows,
    produce,
    submit_all,
)


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


@pytest.mark.timeout(900)
def test_jobs_on_cluster_and_local_equal_kcat_and_another_python_is_named(
        broker, topic, spark_cluster, tmp_path):
    """Three spark-submits at once (one driver JVM each; the two cluster applications take one
    1-core worker each): the example job on the cluster reading in place where it can and
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
