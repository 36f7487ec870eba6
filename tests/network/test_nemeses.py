"""Nemeses on a cluster across test hosts (tests/network/cluster.py): three brokers, a
ZooKeeper ensemble of three, a topic of 6 partitions with replication factor 3 and
min.insync.replicas 2, and an idempotent acks=all producer in a client host streaming
throughout. Each test applies one fault for a while (longer than the brokers' 6 s ZooKeeper
session), heals it and checks: every broker back in every ISR within 30 s, every acknowledged
record once at its offset, no offset acknowledged twice, the replicas byte-identical.

One cluster serves the module; each test leaves it whole for the next."""

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.wire import RawConnection
from tests.broker_process import running
from tests.cluster.harness import log_bytes, wait_for
from tests.network.cluster import ISR_BACK_S, RELAY_PORT, SUITE_NEMESES, TOPIC, NetCluster
from tests.partition_reader import read_partition

HOLD_S = 9.0
NOT_COORDINATOR = 16
# Every check bounds a wait (every broker back in every ISR within 30 s): with the machine
# shared with the parallel pass, CI saw a first round's broker miss it (120 s), so the module
# runs in the alone pass, as the other tests that bound a wait do.
pytestmark = pytest.mark.alone


@pytest.fixture(scope="module")
def cluster(netns_ok, tmp_path_factory):
    # a SIGTERM (`timeout`, a CI limit) ends pytest as Ctrl-C does, through the fixtures'
    # teardown: killed outright it would leave the hosts' namespaces and processes running
    # (a later run reclaims them, hosts.reclaim_stale, but only once one is made)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    c = NetCluster(tmp_path_factory.mktemp("network"), seed=45, log=lambda line: None)
    try:
        c.start()
        yield c
    finally:
        c.close()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def test_inter_broker_connections_go_through_the_relays(cluster):
    """Replica fetchers and the controller connect to the advertised REPLICATION endpoint, the
    delaying relay in front of each broker (so the delay nemesis reaches them)."""
    def through_relays() -> bool:
        out = "".join(h.run("ss", "-tnH", "state", "established", f"( dport = :{RELAY_PORT} )").stdout
                      for h in (cluster.net[f"b{i}"] for i in cluster.brokers))
        return len(out.splitlines()) >= len(cluster.brokers)
    wait_for(through_relays, 30, "inter-broker connections through the relays")


@pytest.mark.parametrize("nemesis", SUITE_NEMESES)
def test_nemesis(cluster, nemesis):
    before = len(cluster.report.problems)
    what = cluster.round(nemesis, hold=HOLD_S)
    new = cluster.report.problems[before:]
    assert not new, f"{what}:\n" + "\n".join(new) + f"\n{cluster.report.summary()}"
    assert cluster.report.recover_s[-1] <= 30


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance.cli.main", *args], capture_output=True,
                          text=True, timeout=120)


def _verify(c: NetCluster, plan: Path) -> str:
    v = _tool("reassign-partitions", "--zookeeper", c.connect, "--verify", "--reassignment-json-file", str(plan))
    assert v.returncode == 0 and "Traceback" not in v.stderr, v.stdout + v.stderr
    return v.stdout


def _plan(tmp_path: Path, name: str, topic: str, replicas: list[int]) -> Path:
    plan = tmp_path / name
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": replicas}]}))
    return plan


def test_heal_during_reassignment(cluster, tmp_path):
    """A reassignment meets a partition between brokers (the bad input of issue 45): with the
    third replica cut off from the other two brokers, a move from RF 3 to RF 2 completes (the
    removed replica is not waited for, as in Kafka), and the move back to RF 3 is reported
    "still in progress" by --verify for as long as the cut lasts, never completed half-done;
    after the heal it completes, the returning replica's stale copy is reconciled and the three
    copies are byte-identical, every acknowledged record there once."""
    c = cluster
    topic = "moving"
    ctl = c.controller()
    cut = next(b for b in sorted(c.brokers) if b != ctl)  # the controller keeps its side
    kept = [b for b in sorted(c.brokers) if b != cut]
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[*kept, cut]],
                                  config={"min.insync.replicas": "2"})])[topic].result(60)
    del admin
    acked: list[int] = []
    producer = [Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})]

    def send(first: int, n: int) -> None:
        for i in range(first, first + n):
            producer[0].produce(topic, b"m%05d" % i, partition=0,
                                on_delivery=lambda err, m: None if err else acked.append(m.offset()))
        assert producer[0].flush(60) == 0

    try:
        send(0, 300)
        wait_for(lambda: len(c._state_of(topic, 0)["isr"]) == 3, 30, "the new topic's ISR full")

        c.net.partition([f"b{cut}"], [f"b{b}" for b in kept])
        try:
            shrink = _plan(tmp_path, "shrink.json", topic, kept)
            r = _tool("reassign-partitions", "--zookeeper", c.connect, "--execute",
                      "--reassignment-json-file", str(shrink))
            assert r.returncode == 0, r.stdout + r.stderr
            wait_for(lambda: f"{topic}-0 completed successfully" in _verify(c, shrink), 60,
                     "the move to RF 2 to complete while the removed replica is cut off", step=1.0)
            send(300, 300)  # on the two kept replicas only

            grow = _plan(tmp_path, "grow.json", topic, [*kept, cut])
            r = _tool("reassign-partitions", "--zookeeper", c.connect, "--execute",
                      "--reassignment-json-file", str(grow))
            assert r.returncode == 0, r.stdout + r.stderr
            for _ in range(3):  # the cut replica cannot catch up: in progress, not done
                time.sleep(2.0)
                out = _verify(c, grow)
                assert f"Reassignment of partition {topic}-0 is still in progress" in out, out
            send(600, 300)
        finally:
            c.net.heal()
        wait_for(lambda: f"{topic}-0 completed successfully" in _verify(c, grow), 90,
                 "the move back to RF 3 to complete after the heal", step=1.0)
        send(900, 100)
    finally:
        producer[0].flush(30)
        producer.clear()  # no client of this process may outlive the hosts' network
        gc.collect()
    state = c._state_of(topic, 0)
    assert sorted(state["isr"]) == sorted(c.brokers), state
    assert len(acked) == 1000 and sorted(acked) == list(range(1000)), "offsets acknowledged"
    try:
        wait_for(lambda: len({log_bytes(b, topic, 0) for b in c.brokers.values()}) == 1, 30,
                 "the three copies byte-identical")
    except AssertionError:
        from appliance.cli.main import main as cli
        for i, b in c.brokers.items():
            print("BROKER", i, len(log_bytes(b, topic, 0)))
            cli(["dump-log", "--files", *sorted(str(f) for f in (Path(b.log_dirs[0]) / f"{topic}-0").glob("*.log"))])
            print("\n".join(line for line in b.log().splitlines() if "moving" in line))
        raise
    c2 = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "moving-check", "enable.auto.commit": False,
                   "enable.partition.eof": True, "fetch.wait.max.ms": 50})
    try:
        rows = read_partition(c2, topic, 0, 0, 1000)
    finally:
        c2.close()
    assert [v for _, v in rows] == [b"m%05d" % i for i in range(1000)]
    c.wait_isr_full(60)  # whole again for the next test


def test_heal_during_controlled_shutdown(cluster):
    """A broker stopped (SIGTERM) while it is cut off from the controller: its controlled
    shutdown cannot reach the controller and is retried; the heal arrives while it is in flight,
    and the shutdown then completes — the broker leads nothing when it exits (exit 0, well
    within the stop deadline), leaving no worker and no shared memory — and the stream and the
    group's commits lose nothing. Started again, the broker is back in every ISR."""
    from appliance.process.stop_deadlines import STOP_DEADLINE_S

    c = cluster
    c.stream.resume()
    c.committer.resume()
    ctl = c.controller()
    leaders = [c.leader(p) for p in range(6)]
    victim = next((b for b in sorted(c.brokers) if b != ctl and b in leaders),
                  next(b for b in sorted(c.brokers) if b != ctl))
    broker = c.brokers[victim]
    pids = broker.worker_pids("")
    c.net.partition([f"b{victim}"], [f"b{ctl}"])
    t0 = time.monotonic()
    broker.proc.send_signal(signal.SIGTERM)
    time.sleep(6.0)  # the controlled shutdown's first tries fail on the cut
    assert broker.proc.poll() is None, "the broker gave up its controlled shutdown at once"
    c.net.heal()
    code = broker.proc.wait(STOP_DEADLINE_S)
    took = time.monotonic() - t0
    log = broker.log()
    assert code == 0, log[-3000:]
    assert took < STOP_DEADLINE_S, took
    assert "controlled shutdown: leadership moved away" in log, log[-3000:]
    wait_for(lambda: not any(running(p) for p in pids), 10, "no worker of the stopped broker left")
    wait_for(lambda: all(c.leader(p) != victim for p in range(6)), 10, "no partition led by the stopped broker")
    name = broker.overrides.get("appliance.shm.name")
    assert name and not [f for f in os.listdir("/dev/shm") if f.startswith(name)], "shared memory left"
    before = len(c.report.problems)
    c.restart_broker(victim)
    c.heal_and_check("controlled-shutdown")
    assert not c.report.problems[before:], "\n".join(c.report.problems[before:])


def _find_coordinator(c: NetCluster, at: int, group: str) -> int | None:
    """The coordinator broker ``at`` names for ``group`` (None: it names none, or is out of reach)."""
    b = c.brokers[at]
    try:
        with RawConnection(b.port, timeout=3, host=b.host.address) as conn:
            r = conn.request(10, 1, {"key": group, "key_type": 0})
    except OSError:
        return None
    return r.node_id if r.error_code == 0 else None


def _commit(c: NetCluster, at: int, group: str, offset: int) -> int:
    """A standalone OffsetCommit of ``offset`` for partition 0 sent to broker ``at``: its error."""
    b = c.brokers[at]
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]}
    try:
        with RawConnection(b.port, timeout=10, host=b.host.address) as conn:
            return conn.request(8, 2, body).topics[0].partitions[0].error_code
    except OSError:
        return -1


def _fetch_offset(c: NetCluster, at: int, group: str) -> tuple[int, int] | None:
    """(error, committed offset of partition 0) as broker ``at`` answers OffsetFetch; None when
    no answer came."""
    b = c.brokers[at]
    try:
        with RawConnection(b.port, timeout=2, host=b.host.address) as conn:
            r = conn.request(9, 2, {"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    except OSError:
        return None
    part = r.topics[0].partitions[0] if r.topics else None
    code = r.error_code or (part.error_code if part is not None else 0)
    return code, (part.committed_offset if part is not None else -1)


def test_cut_off_coordinator_answers_nothing_from_memory(cluster):
    """The group's coordinator cut off from ZooKeeper and the other brokers, still reachable
    by clients: its session expires, another broker becomes the coordinator and acknowledges a
    later commit. The cut-off broker must not answer OffsetFetch with the older offset it still
    holds in memory (a consumer starting there would rewind), neither during the cut nor after
    the heal until the controller has told it what it leads now."""
    c = cluster
    group = "zombie-coordinator"
    first = wait_for(lambda: [x for x in [_find_coordinator(c, 0, group)] if x is not None], 30,
                     "a coordinator for the group")[0]
    wait_for(lambda: _commit(c, first, group, 5) == 0, 30, "the first commit acknowledged")
    rest = [n for n in c.net.hosts if n not in (f"b{first}", "client")]
    others = [b for b in sorted(c.brokers) if b != first]
    c.net.partition([f"b{first}"], rest)
    seen: list[tuple[str, tuple[int, int] | None]] = []
    try:
        second = wait_for(lambda: [x for b in others if (x := _find_coordinator(c, b, group)) not in (None, first)],
                          60, "another coordinator elected")[0]
        wait_for(lambda: _commit(c, second, group, 9) == 0, 60, "the second commit acknowledged")
        t_end = time.monotonic() + 4
        while time.monotonic() < t_end:
            seen.append(("cut", _fetch_offset(c, first, group)))
    finally:
        c.net.heal()
    t_end = time.monotonic() + 15
    while time.monotonic() < t_end:
        seen.append(("healed", _fetch_offset(c, first, group)))
        time.sleep(0.05)
    stale = [(when, a) for when, a in seen if a is not None and a[0] == 0 and a[1] < 9]
    assert not stale, f"the cut-off broker answered the offset it held before the cut: {stale[:5]}"
    assert any(a is not None and a[0] == NOT_COORDINATOR for when, a in seen if when == "cut"), seen[:10]
    c.wait_isr_full(ISR_BACK_S)
    # every broker now names the new coordinator's answer: the acknowledged 9
    for b in sorted(c.brokers):
        wait_for(lambda b=b: (at := _find_coordinator(c, b, group)) is not None
                 and _fetch_offset(c, at, group) == (0, 9), 30, f"offset 9 through broker {b}")
