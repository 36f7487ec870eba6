"""zookeeper.set.acl=true on a real ZooKeeper and two real brokers logging in with the
ZooKeeper login of KAFKA_OPTS' JAAS file (Kafka's Client section): the znodes they create
carry Kafka's ACLs, so an unauthenticated kazoo client may read the cluster's state but not
rewrite it, and may not even read SCRAM credentials; the brokers themselves keep working
(topics of RF 1 and 2 through each broker, a failover whose controller rewrites znodes the
other broker made). A tool logs in the same way; without the login it is refused with a clear
message. A broker refuses to start with zookeeper.set.acl=true and no login, or with a JAAS
file every user may read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from tests.broker_process import free_port
from tests.cluster.harness import cluster_broker, kill_brokers, start_brokers, wait_for, wait_joined
from tests.ops.procs import appliance

JAAS = """// the brokers' and tools' ZooKeeper login (Kafka's Client section)
Client {
   org.apache.zookeeper.server.auth.DigestLoginModule required
   username="kafka"
   password="zk-secret";
};
"""


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("zk-acl")
    jaas = root / "jaas.conf"
    jaas.write_text(JAAS)
    jaas.chmod(0o600)
    env = {"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}
    chroot = f"/t{uuid.uuid4().hex[:10]}"
    connect = zk_server.connect + chroot
    brokers = {i: cluster_broker(root / f"b{i}", connect, i, overrides={
        "zookeeper.set.acl": "true", "offsets.topic.num.partitions": "2",
        "offsets.topic.replication.factor": "2", "replica.lag.time.max.ms": "3000"}, env=env) for i in (1, 2)}
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 2)
        yield brokers, env, zk_server.connect, chroot, root
    finally:
        kill_brokers(b for b in brokers.values() if b.proc is not None)


def _anonymous(hosts: str) -> KazooClient:
    c = KazooClient(hosts=hosts)
    c.start(10)
    return c


def test_brokers_work_and_an_unauthenticated_client_cannot_rewrite_their_znodes(secured):
    brokers, env, hosts, chroot, _ = secured
    boot = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": boot})
    for rf in (1, 2):
        admin.create_topics([NewTopic(f"acl-rf{rf}", 2, rf)])[f"acl-rf{rf}"].result(60)
    for b in brokers.values():  # through every broker
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
        for rf in (1, 2):
            for n in range(20):
                p.produce(f"acl-rf{rf}", f"via-{b.bootstrap}-{n}".encode())
        assert p.flush(60) == 0
    zk = _anonymous(hosts)
    try:
        state = f"{chroot}/brokers/topics/acl-rf2/partitions/0/state"
        data, _ = zk.get(state)  # everyone may read
        assert b'"leader"' in data
        with pytest.raises(NoAuthError):
            zk.set(state, b'{"controller_epoch":1,"leader":-1,"version":1,"leader_epoch":99,"isr":[]}')
        with pytest.raises(NoAuthError):
            zk.create(f"{chroot}/brokers/topics/planted", b"{}")
        with pytest.raises(NoAuthError):
            zk.delete(f"{chroot}/brokers/topics/acl-rf1", recursive=True)
        with pytest.raises(NoAuthError):
            zk.create(f"{chroot}/admin/delete_topics/acl-rf1", b"")
        acls, _ = zk.get_acls(state)
        assert {(a.id.scheme, a.perms) for a in acls} == {("digest", 31), ("world", 1)}
        assert {a.id.id.split(":")[0] for a in acls if a.id.scheme == "digest"} == {"kafka"}
        assert zk.get_acls(f"{chroot}/consumers")[0][0].id.scheme == "world"  # old consumers write there
        assert zk.get_acls(f"{chroot}/consumers")[0][0].perms == 31
    finally:
        zk.stop()
        zk.close()


def test_scram_credentials_in_zookeeper_are_not_readable_without_the_login(secured):
    brokers, env, hosts, chroot, _ = secured
    r = appliance("configs", "--bootstrap-server", brokers[1].bootstrap, "--alter", "--entity-type", "users",
                  "--entity-name", "alice", "--add-config", "SCRAM-SHA-256=[password=alice-secret]")
    assert r.returncode == 0, r.stderr
    zk = _anonymous(hosts)
    try:
        with pytest.raises(NoAuthError):
            zk.get(f"{chroot}/config/users/alice")
        with pytest.raises(NoAuthError):
            zk.get_children(f"{chroot}/config/users")
    finally:
        zk.stop()
        zk.close()
    logged_in = KazooClient(hosts=hosts, auth_data=[("digest", "kafka:zk-secret")])
    logged_in.start(10)
    try:
        assert b"SCRAM-SHA-256" in logged_in.get(f"{chroot}/config/users/alice")[0]
    finally:
        logged_in.stop()
        logged_in.close()


def test_tools_log_in_from_kafka_opts_and_are_refused_without_it(secured):
    """preferred-replica-election --zookeeper writes /admin/preferred_replica_election itself,
    as 0.8's did: refused without the login, done (the node with the ACL) with it."""
    brokers, env, hosts, chroot, root = secured
    connect = hosts + chroot
    plan = root / "elect.json"
    plan.write_text('{"partitions": [{"topic": "acl-rf2", "partition": 1}]}')
    args = ("preferred-replica-election", "--zookeeper", connect, "--path-to-json-file", str(plan))
    r = appliance(*args)
    assert r.returncode == 1 and "ZooKeeper refused: not authorized" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    zk = _anonymous(hosts)
    try:
        r = appliance(*args, env=env)
        assert r.returncode == 0, r.stderr
        # the controller acts on it and deletes it: it was written (with the ACL, or the
        # controller, logged in as the brokers are, could not have acted on it)
        wait_for(lambda: not zk.exists(f"{chroot}/admin/preferred_replica_election"), 30,
                 "the controller to carry out the election")
    finally:
        zk.stop()
        zk.close()


def test_failover_under_acls_the_new_controller_rewrites_the_other_brokers_znodes(secured):
    brokers, env, hosts, chroot, _ = secured
    boot = ",".join(b.bootstrap for b in brokers.values())

    def leader_of(b: str) -> int:
        return AdminClient({"bootstrap.servers": b}).list_topics("acl-rf2", timeout=10).topics["acl-rf2"].partitions[0].leader

    victim = leader_of(boot)
    other = next(i for i in brokers if i != victim)
    brokers[victim].kill()
    wait_for(lambda: leader_of(brokers[other].bootstrap) == other, 60, "the survivor to lead acl-rf2-0")
    p = Producer({"bootstrap.servers": brokers[other].bootstrap, "acks": "all"})
    p.produce("acl-rf2", b"after-failover", partition=0)
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": brokers[other].bootstrap, "group.id": f"g-{uuid.uuid4().hex}"})
    c.assign([TopicPartition("acl-rf2", 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while b"after-failover" not in got and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert b"after-failover" in got
    brokers[victim].start()
    wait_joined(brokers.values(), 2)


@pytest.mark.parametrize("case", ["no-login", "world-readable"])
def test_a_broker_refuses_to_start_without_a_usable_login(zk_server, tmp_path, case):
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    jaas.chmod(0o644)
    env = {} if case == "no-login" else {"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"}
    port = free_port()
    cmd = [sys.executable, "-m", "appliance.cli.main", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={tmp_path / 'd'}", "--override", f"zookeeper.connect={zk_server.connect}/x",
           "--override", "zookeeper.set.acl=true", "--override", f"appliance.shm.name=appliance-test-{port}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "KAFKA_OPTS": "", **env})
    assert r.returncode == 3, r.stderr
    if case == "no-login":
        assert "zookeeper.set.acl=true needs a ZooKeeper login" in r.stderr
    else:
        assert str(jaas) in r.stderr and "0644" in r.stderr
    assert "Traceback" not in r.stderr
