"""Shared fixtures for the Spark data source tests: one local[2] SparkSession for the folder
(Spark's start-up is slow), a real broker per module, producers and a kcat reader."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    from spark import session

    s = session("appliance-tests", **{"spark.sql.shuffle.partitions": "2",
                                      "spark.default.parallelism": "2"})
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # Retention checked often so tests can watch segments go; two disks to read across log dirs.
    with BrokerProcess(tmp_path_factory.mktemp("broker"), num_log_dirs=2,
                       overrides={"log.retention.check.interval.ms": "200"}) as b:
        yield b


def create_topic(broker: BrokerProcess, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        f.result(30)


def produce(broker: BrokerProcess, topic: str, records, compression: str = "none",
            **conf) -> None:
    """records: iterable of dicts with value and optional key, partition, headers, timestamp."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": compression,
                  "linger.ms": 5, **conf})
    for r in records:
        kw = {k: r[k] for k in ("key", "partition", "headers", "timestamp") if k in r}
        p.produce(topic, value=r["value"], **kw)
        p.poll(0)
    assert p.flush(30) == 0


def kcat(broker: BrokerProcess, topic: str, *extra: str) -> list[tuple]:
    """(partition, offset, key, value, headers) of every record, as kcat reads them; nulls read
    as 'NULL', headers as kcat prints them (k=v,k2=v2)."""
    args = ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-e", "-q", "-Z", "-o",
            "beginning", "-f", "%p\t%o\t%k\t%s\t%h\n", *extra]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise AssertionError(f"kcat failed ({out.returncode}): {out.stderr[-2000:]}")
    rows = []
    for line in out.stdout.splitlines():
        p, o, k, v, h = line.split("\t")
        rows.append((int(p), int(o), k, v, h))
    return sorted(rows)


def spark_rows(df) -> list[tuple]:
    """The same shape as :func:`kcat` from a DataFrame of the appliance source."""
    def s(b):
        return "NULL" if b is None else bytes(b).decode()

    out = []
    has_headers = "headers" in df.columns
    for r in df.collect():
        h = ""
        if has_headers and r.headers:
            h = ",".join(f"{x.key}={s(x.value)}" for x in r.headers)
        out.append((r.partition, r.offset, s(r.key), s(r.value), h))
    return sorted(out)


def reader(spark, broker: BrokerProcess, **options: str):
    r = (spark.read.format("appliance").option("log.dirs", ",".join(broker.log_dirs))
         .option("shm.name", f"appliance-test-{broker.port}"))
    for k, v in options.items():
        r = r.option(k, v)
    return r


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A real standalone cluster: master + two 1-core workers, separate JVMs (one per session)."""
    from spark.standalone import StandaloneCluster

    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1,
                           worker_memory="768m") as c:
        yield c


def submit(master: str, script: str, *args: str, conf: dict[str, str] | None = None,
           timeout: float = 300, background: bool = False, log_path=None, cores: int = 2):
    """Run ``spark-submit --master MASTER spark/jobs/SCRIPT args`` as a job is run by hand.

    ``cores``: executor cores the application takes on a standalone cluster (1 lets two
    applications run side by side on the two 1-core workers). Returns the CompletedProcess
    (or, with ``background``, the Popen in its own session)."""
    import os
    import sys

    from spark.session import REPO_ROOT
    from spark.standalone import spark_submit_command

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONPATH": REPO_ROOT}
    cmd = [*spark_submit_command(), "--master", master, "--driver-memory", "512m",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]
    if master.startswith("spark://"):
        cmd += ["--executor-memory", "512m", "--total-executor-cores", str(cores)]
    for k, v in (conf or {}).items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [os.path.join(REPO_ROOT, "spark", "jobs", script), *args]
    if background:
        out = open(log_path, "ab")
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO_ROOT, start_new_session=True)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                         timeout=timeout)
    return res


def submit_all(jobs: dict[str, dict], log_dir, timeout: float = 600) -> dict[str, tuple[int, str]]:
    """Run several :func:`submit` calls at once (their JVMs start side by side instead of one
    after another); name -> (exit status, everything the driver printed)."""
    import os
    import signal
    import time

    procs = {}
    try:
        for name, kw in jobs.items():
            kw = dict(kw)
            procs[name] = submit(kw.pop("master"), kw.pop("script"), *kw.pop("args", ()),
                                 background=True, log_path=log_dir / f"{name}.log", **kw)
        deadline = time.monotonic() + timeout
        for p in procs.values():
            p.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return {n: (p.returncode, (log_dir / f"{n}.log").read_text(errors="replace"))
            for n, p in procs.items()}


def parquet_rows(path) -> list[tuple]:
    """The :func:`kcat` shape from a Parquet export written by spark/jobs/topic_to_parquet.py."""
    import pyarrow.parquet as pq

    def s(b):
        return "NULL" if b is None else bytes(b).decode()

    t = pq.read_table(str(path)).to_pylist()
    out = []
    for r in t:
        h = ",".join(f"{x['key']}={s(x['value'])}" for x in r["headers"] or ())
        out.append((r["partition"], r["offset"], s(r["key"]), s(r["value"]), h))
    return sorted(out)


def executor_log(cluster) -> str:
    """Everything the executors of every application wrote to stderr so far."""
    from pathlib import Path

    return "".join(p.read_text(errors="replace")
                   for p in Path(cluster.workdir, "work").glob("w*/app-*/*/stderr"))
