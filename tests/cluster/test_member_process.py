"""Cluster members as real processes: SIGKILL the controller's process and a new controller
takes over once ZooKeeper expires the dead session; a second process with a registered id and
a process facing no ZooKeeper both exit with code 3 and a message, no traceback."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from appliance.cluster.zk_paths import TopicPartition
from tests.broker_process import free_port
from tests.cluster.harness import wait_for

SESSION_MS = 6000  # the SIGKILL test waits for it to expire; shorter risks expiry by load alone


def member(connect, broker_id, *extra, session_ms=SESSION_MS):
    # stderr goes to a file: an unread pipe fills up (kazoo warns on every slow heartbeat of a
    # loaded machine) and then blocks the member's threads; the printed requests are not needed
    err = tempfile.TemporaryFile("w+")
    p = subprocess.Popen(
        [sys.executable, "-m", "appliance.cluster.member", "--broker-id", str(broker_id),
         "--zookeeper-connect", connect, "--session-timeout-ms", str(session_ms), *extra],
        stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True)
    p.err = err
    return p


def stderr_of(p) -> str:
    p.err.seek(0)
    return p.err.read()


@pytest.fixture
def procs():
    made = []
    yield made
    for p in made:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        p.err.close()


def test_sigkilled_controller_replaced_within_session_timeout(zk_connect, procs, admin):
    procs += [member(zk_connect, i) for i in (0, 1, 2)]
    wait_for(lambda: admin.broker_ids() == [0, 1, 2], timeout=60)
    wait_for(lambda: admin.controller_id() != -1)
    admin.create_topic("k", {0: (0, 1, 2)})
    wait_for(lambda: (s := admin.partition_state(TopicPartition("k", 0))) and s.leader == 0)
    first = admin.controller_id()
    epoch_before = admin.controller_epoch()[0]

    t0 = time.monotonic()
    os.killpg(procs[first].pid, signal.SIGKILL)
    try:
        new = wait_for(lambda: (c := admin.controller_id()) not in (-1, first) and (c,),  # (0,) is truthy
                       timeout=SESSION_MS / 1000 + 30)[0]
    except AssertionError:
        logs = "\n".join(f"--- member {i}:\n{stderr_of(p)[-3000:]}" for i, p in enumerate(procs))
        raise AssertionError(f"no new controller; /controller = {admin.controller_id()}, "
                             f"brokers {admin.broker_ids()}\n{logs}") from None
    took = time.monotonic() - t0
    s = wait_for(lambda: (s := admin.partition_state(TopicPartition("k", 0)))
                 and s.leader != first and first not in s.isr and s)
    print(f"controller {first} SIGKILLed: broker {new} took over after {took:.1f} s "
          f"(session timeout {SESSION_MS / 1000:.0f} s); partition leader now {s.leader}")
    assert admin.controller_epoch()[0] > epoch_before
    assert s.leader == next(r for r in (0, 1, 2) if r != first) and first not in s.isr
    assert took >= SESSION_MS / 1000 * 0.5  # it really waited for the session to expire


def test_second_member_with_same_id_exits_3_naming_it(zk_connect, procs, admin):
    procs.append(member(zk_connect, 4))
    wait_for(lambda: admin.broker_ids() == [4], timeout=60)
    dup = member(zk_connect, 4)
    procs.append(dup)
    assert dup.wait(60) == 3
    err = stderr_of(dup)
    assert "broker.id 4 is already registered" in err and "Traceback" not in err
    assert procs[0].poll() is None and admin.broker_ids() == [4]


def test_unreachable_zookeeper_exits_3_after_the_connection_timeout(procs):
    p = member(f"127.0.0.1:{free_port()}", 1, "--connection-timeout-ms", "2000")
    procs.append(p)
    t0 = time.monotonic()
    assert p.wait(60) == 3
    err = stderr_of(p)
    assert "did not answer within 2000 ms" in err and "zookeeper.connection.timeout.ms" in err
    assert "Traceback" not in err and time.monotonic() - t0 >= 1.9


def test_member_from_broker_config(zk_connect, tmp_path, admin):
    from appliance.cluster.member import ClusterMember, PrintChannel
    from appliance.config import BrokerConfig

    port = free_port()
    config = BrokerConfig.load(overrides={
        "broker.id": "6", "listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(tmp_path / "d"),
        "zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "4000",
        "unclean.leader.election.enable": "true", "leader.imbalance.check.interval.seconds": "30"})
    with open(tmp_path / "requests.jsonl", "w") as out:
        m = ClusterMember.from_config(config, PrintChannel(out))
        assert m.settings.session_timeout_ms == 4000 and m.settings.connection_timeout_ms == 4000
        assert m.controller_kw["unclean_leader_election"] is True
        assert m.controller_kw["imbalance_check_interval_s"] == 30
        m.start()
        try:
            wait_for(lambda: admin.broker_ids() == [6] and admin.controller_id() == 6)
            assert admin.brokers()[6].port == port
        finally:
            m.stop()
    assert admin.broker_ids() == [] and admin.controller_id() == -1  # left cleanly
    assert '"api_key": 6' in (tmp_path / "requests.jsonl").read_text()  # it sent UpdateMetadata to itself
