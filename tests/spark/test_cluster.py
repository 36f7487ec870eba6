"""Jobs submitted with spark-submit to a real standalone cluster (master + two worker JVMs) and to
local[*]: same results, equal to kcat; in place, through the broker, and mixed."""

from __future__ import annotations

import re

import pytest

from tests.spark.conftest import (
    create_topic,
    executor_log,
    kcat,
    parquet_rows,
    produce,
    submit,
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


def _ok(res) -> None:
    assert res.returncode == 0, f"spark-submit failed ({res.returncode}):\n{res.stderr[-4000:]}"


@pytest.mark.timeout(900)
def test_batch_read_on_cluster_and_local_equals_kcat(broker, topic, spark_cluster, tmp_path):
    want = kcat(broker, topic)
    assert len(want) == 2000
    dirs = ",".join(broker.log_dirs)
    runs = {
        # both options: every partition is on this host, so every task reads in place
        "cluster-mixed": (spark_cluster.master_url, ["--log-dirs", dirs,
                                                     "--bootstrap", broker.bootstrap]),
        "local-in-place": ("local[*]", ["--log-dirs", dirs]),
        "cluster-remote": (spark_cluster.master_url, ["--bootstrap", broker.bootstrap]),
    }
    for name, (master, extra) in runs.items():
        out = tmp_path / name
        _ok(submit(master, "topic_to_parquet.py", "--topic", topic, "--out", str(out), *extra))
        assert parquet_rows(out) == want, name
    # The executors (on the workers) said how each task read, with its figures.
    logs = executor_log(spark_cluster)
    for how in ("in-place", "remote"):
        done = re.findall(rf"appliance read cl3-(\d) \[\d+, \d+\) {how}: (\d+) records .* done",
                          logs)
        assert sorted({p for p, _ in done}) == ["0", "1", "2"], (how, logs[-3000:])
    assert re.search(r"cl3-\d \[\d+, \d+\) remote: \d+ records .* bytes fetched [1-9]", logs)


@pytest.mark.timeout(600)
def test_workers_with_another_python_are_named(broker, topic, spark_cluster, tmp_path):
    import sys

    other = "/usr/bin/python3.11"  # the system's Python: no numba, pyarrow or project
    res = submit(spark_cluster.master_url, "topic_to_parquet.py", "--topic", topic, "--out",
                 str(tmp_path / "never"), "--log-dirs", ",".join(broker.log_dirs),
                 conf={"spark.pyspark.python": other,
                       "spark.pyspark.driver.python": sys.executable,
                       "spark.task.maxFailures": "1"})
    assert res.returncode != 0
    err = res.stdout + res.stderr  # spark-submit passes the Python driver's stderr to stdout
    assert "WorkerEnvironmentError" in err, err[-3000:]
    assert f"interpreter {other}" in err or f"interpreter '{other}'" in err, err[-3000:]
    assert f"--conf spark.pyspark.python={sys.executable}" in err
    assert not (tmp_path / "never").exists()
