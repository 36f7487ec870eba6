"""Cluster mode for the data source, with real processes: one ZooKeeper, three ``appliance
serve`` brokers sharing this host, a replication-factor-3 topic written with acks=all, and
Spark (the folder's local session).

The driver plans from Metadata (leaders, replicas, ISR) and ListOffsets (the high watermark);
a task reads in place from an in-sync replica whose log dir is local, else fetches from the
leader. Shown here: the read equals kcat's; a follower SIGSTOPped while records are produced
drops out of the ISR and its dir is then never read in place (its log ends below the high
watermark, the rows still equal kcat's); a leader SIGKILLed in the middle of a read changes
nothing in that read, and a read after the leadership moved gives the same rows.
"""

from __future__ import annotations

import functools
import os
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from spark.arrow_reader import read_range
from spark.datasource import ApplianceBatchReader, _local_path, _read_range
from spark.options import parse_read_options
from spark.replicas import dir_owner
from tests.broker_process import BrokerProcess
from tests.cluster.harness import cluster_metadata as _metadata
from tests.cluster.harness import wait_for
from tests.cluster.zk import ZooKeeperServer
from tests.spark.conftest import kcat, spark_rows

_wait = functools.partial(wait_for, step=0.2)  # Metadata polls: 5 a second is plenty

TOPIC = "rep"
PARTITIONS = 3
SESSION_MS = 6000


def _partitions(boot: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, isr) as Metadata tells now."""
    t = _metadata(boot).topics.get(TOPIC)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, tuple(sorted(p.isrs))) for p in t.partitions.values()}


def _produce(boot: str, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 120000})
    for i in range(start, start + n):
        headers = [("h", f"{i}".encode())] if i % 3 == 0 else None
        p.produce(TOPIC, key=f"k{i % 17}".encode(), value=f"value-{i}-".encode() + b"x" * (i % 50),
                  partition=i % PARTITIONS, headers=headers)
        p.poll(0)
    assert p.flush(120) == 0


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cluster-mode")
    zk = ZooKeeperServer(root / "zk")
    brokers: dict[int, BrokerProcess] = {}
    try:
        zk.start()
        connect = f"{zk.connect}/s{uuid.uuid4().hex[:8]}"
        for i in range(3):
            (root / f"b{i}").mkdir()
            brokers[i] = BrokerProcess(root / f"b{i}", overrides={
                "zookeeper.connect": connect, "broker.id": str(i),
                "zookeeper.session.timeout.ms": str(SESSION_MS), "num.network.threads": "1",
                "replica.lag.time.max.ms": "10000"})
        with ThreadPoolExecutor(3) as pool:  # the three start side by side
            list(pool.map(BrokerProcess.start, brokers.values()))
        boot = ",".join(b.bootstrap for b in brokers.values())
        _wait(lambda: len(_metadata(boot).brokers) == 3, 60, "three registered brokers")
        admin = AdminClient({"bootstrap.servers": boot})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={
                "min.insync.replicas": "2"})]).values():
            f.result(60)
        _wait(lambda: (ps := _partitions(boot)) and len(ps) == PARTITIONS
              and all(len(isr) == 3 for _, isr in ps.values()), 60, "full ISRs")
        _produce(boot, 0, 3000)
        yield SimpleNamespace(zk=zk, brokers=brokers, boot=boot, produced=3000)
    finally:
        for b in brokers.values():
            try:
                os.killpg(b.proc.pid, signal.SIGCONT)
            except (ProcessLookupError, AttributeError):
                pass
            b.kill()
        zk.kill()


def _dirs(cl, ids=None) -> str:
    return ",".join(d for i, b in cl.brokers.items() if ids is None or i in ids
                    for d in b.log_dirs)


def _boot(cl, ids) -> str:
    return ",".join(cl.brokers[i].bootstrap for i in ids)


def _df(spark, **opts):
    r = spark.read.format("appliance").option("subscribe", TOPIC).option("includeHeaders", "true")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _opts(**kw):
    return parse_read_options({"subscribe": TOPIC, "includeHeaders": "true", **kw},
                              streaming=False)


def _rows(batches) -> list[tuple]:
    def s(b):
        return "NULL" if b is None else bytes(b).decode()

    out = []
    for rb in batches:
        for r in rb.to_pylist():
            h = ",".join(f"{x['key']}={s(x['value'])}" for x in r["headers"] or ())
            out.append((r["partition"], r["offset"], s(r["key"]), s(r["value"]), h))
    return out


def _controller(cl, ids) -> int:
    return _metadata(_boot(cl, ids)).controller_id


def test_batch_read_equals_kcat_reading_in_sync_replicas_in_place(spark, cl):
    live = SimpleNamespace(bootstrap=cl.boot)
    expect = kcat(live, TOPIC)
    assert len(expect) == cl.produced
    df = _df(spark, **{"log.dirs": _dirs(cl), "kafka.bootstrap.servers": cl.boot})
    assert spark_rows(df) == expect
    # Every planned range is read in place from the leader's own replica on this host.
    opts = _opts(**{"log.dirs": _dirs(cl), "kafka.bootstrap.servers": cl.boot})
    ranges = ApplianceBatchReader(opts).partitions()
    assert len(ranges) == PARTITIONS
    for r in ranges:
        assert len(r.isr) == 3 and r.end == sum(1 for p, *_ in expect if p == r.partition)
        path = _local_path(opts, r)
        assert path is not None and dir_owner(os.path.dirname(path)) == r.leader, (r, path)


def test_lagging_follower_is_never_read_in_place(spark, cl):
    # A follower that is not the controller stops (SIGSTOP of its whole process group) while
    # acks=all records are produced: the controller takes it out of every ISR, moving the
    # leadership it had, and the records commit on the other two.
    controller = _controller(cl, cl.brokers)
    lag = max(i for i in cl.brokers if i != controller)
    others = tuple(i for i in cl.brokers if i != lag)
    os.killpg(cl.brokers[lag].proc.pid, signal.SIGSTOP)
    try:
        _produce(_boot(cl, others), cl.produced, 1500)
        cl.produced += 1500
        _wait(lambda: (ps := _partitions(_boot(cl, others))) and all(
            lag not in isr and leader != lag for leader, isr in ps.values()), 60,
            f"broker {lag} out of every ISR")
        expect = kcat(SimpleNamespace(bootstrap=_boot(cl, others)), TOPIC)
        assert len(expect) == cl.produced
        opts = _opts(**{"log.dirs": _dirs(cl, {lag}), "kafka.bootstrap.servers": _boot(cl, others)})
        ranges = ApplianceBatchReader(opts).partitions()
        behind = 0
        for r in ranges:
            assert lag not in r.isr
            assert _local_path(opts, r) is None, r  # its replica is here, but not in sync
            local = os.path.join(cl.brokers[lag].log_dirs[0], f"{TOPIC}-{r.partition}")
            gen = read_range(local, TOPIC, r.partition, r.start, r.end)
            try:
                while True:
                    next(gen)
            except StopIteration as stop:
                behind += stop.value < r.end  # the stopped replica's log ends below the HW
        assert behind > 0
        got = [row for r in ranges for row in _rows(_read_range(opts, r))]
        assert sorted(got) == expect
        # Planned while it was still in the ISR (it left afterwards): read in place as far as
        # its log goes, the rest fetched from the leader; the same rows.
        for r in ranges:
            r.isr = (*r.isr, lag)
        assert all(_local_path(opts, r) for r in ranges)
        got = [row for r in ranges for row in _rows(_read_range(opts, r))]
        assert sorted(got) == expect
        df = _df(spark, **{"log.dirs": _dirs(cl, {lag}),
                           "kafka.bootstrap.servers": _boot(cl, others)})
        assert spark_rows(df) == expect
    finally:
        os.killpg(cl.brokers[lag].proc.pid, signal.SIGCONT)


def test_leader_killed_during_a_read_changes_nothing(spark, cl):
    boot = cl.boot
    _wait(lambda: (ps := _partitions(boot)) and all(leader >= 0 for leader, _ in ps.values()),
          60, "a leader for every partition")
    expect = kcat(SimpleNamespace(bootstrap=boot), TOPIC)
    assert len(expect) == cl.produced
    controller = _controller(cl, cl.brokers)
    leaders = {p: leader for p, (leader, _) in _partitions(boot).items()}
    # A leader that is not the controller when there is one (the controller's own failover
    # takes longer); the broker stopped before may still be catching up: it is no victim.
    victim = min(set(leaders.values()), key=lambda b: (b == controller, b))
    survivors = tuple(i for i in cl.brokers if i != victim)
    # Planned before the kill, read remotely in small fetches; the kill lands after the first
    # batch of the victim's partition: the rest comes from the new leader.
    opts = _opts(**{"kafka.bootstrap.servers": boot, "read.chunk.bytes": "4096"})
    ranges = ApplianceBatchReader(opts).partitions()
    got: list[tuple] = []
    hit = next(r for r in ranges if r.leader == victim)
    gen = _read_range(opts, hit)
    got += _rows([next(gen)])
    cl.brokers[victim].kill()
    got += _rows(gen)
    for r in ranges:
        if r is not hit:
            got += _rows(_read_range(opts, r))
    assert sorted(got) == expect
    # After the move: the victim's dir is still listed but its owner left the ISR.
    _wait(lambda: (ps := _partitions(_boot(cl, survivors))) and all(
        leader in survivors for leader, _ in ps.values()), SESSION_MS / 1000 + 60, "new leaders")
    df = _df(spark, **{"log.dirs": _dirs(cl), "kafka.bootstrap.servers": _boot(cl, survivors)})
    assert spark_rows(df) == expect
    assert kcat(SimpleNamespace(bootstrap=_boot(cl, survivors)), TOPIC) == expect
