"""A checkpointed streaming query (topic -> Parquet file sink) on the standalone cluster whose
driver is SIGKILLed mid-stream and restarted from its checkpoint: every record exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.spark.conftest import create_topic, produce, submit

TOPIC = "clicks-stream"


def _values(n0: int, n: int):
    return ({"value": b"rec-%06d" % i, "key": b"u%d" % (i % 11)} for i in range(n0, n0 + n))


def _wait(pred, timeout: float, what: str, proc=None, log=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the streaming driver exited ({proc.returncode}) before "
                                 f"{what}:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(2)
    raise AssertionError(f"timed out waiting for {what}")


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


@pytest.mark.timeout(1200)
def test_driver_sigkill_and_restart_exactly_once(broker, spark_cluster, spark, tmp_path):
    create_topic(broker, TOPIC, 2)
    produce(broker, TOPIC, _values(0, 1500))
    out, ckpt, log = tmp_path / "out", tmp_path / "ckpt", tmp_path / "driver.log"
    args = ("--topic", TOPIC, "--out", str(out), "--log-dirs", ",".join(broker.log_dirs),
            "--stream", "--checkpoint", str(ckpt), "--max-per-trigger", "500",
            "--interval", "1 second")
    commits = ckpt / "commits"

    def committed() -> int:
        return len([n for n in os.listdir(commits) if n.isdigit()]) if commits.is_dir() else 0

    # One executor (one JVM to start per driver, not two competing for the cores).
    driver = submit(spark_cluster.master_url, "topic_to_parquet.py", *args, background=True,
                    log_path=log, cores=1)
    try:
        _wait(lambda: committed() >= 2, 600, "two committed micro-batches", driver, log)
        produce(broker, TOPIC, _values(1500, 1000))  # more arrives while the query runs
        _kill(driver, signal.SIGKILL)  # the driver JVM and its Python, mid-stream
        done_before = committed()
        assert done_before < 5, "the query finished before the kill: nothing was mid-stream"
        driver = submit(spark_cluster.master_url, "topic_to_parquet.py", *args,
                        background=True, log_path=log, cores=1)
        produce(broker, TOPIC, _values(2500, 500))

        def count() -> int:
            try:
                return spark.read.parquet(str(out)).count()
            except Exception:  # noqa: BLE001 - the sink's log may be mid-write
                return -1

        _wait(lambda: count() >= 3000 and committed() > done_before, 600,
              "all 3000 records in the output", driver, log)
    finally:
        _kill(driver, signal.SIGTERM)
    rows = spark.read.parquet(str(out)).select("value", "partition", "offset").collect()
    values = sorted(bytes(r.value).decode() for r in rows)
    assert values == [f"rec-{i:06d}" for i in range(3000)]  # each exactly once
    assert len({(r.partition, r.offset) for r in rows}) == 3000
