"""Three real brokers whose inter-broker listener is TLS with mutual authentication (INTERNAL,
SSL, ssl.client.auth=required, host names checked), or SASL_SSL with the brokers logging in to
each other with PLAIN; clients on a PLAINTEXT listener: topics of RF 1, 2 and 3 replicate
(acks=all through every broker), a SIGKILLed leader fails over with no acknowledged record lost,
and a reassignment moves a replica, every byte between brokers over TLS. On SASL_SSL, SCRAM
credentials made through one broker let a client log in on every broker (ZooKeeper's
/config/users, mirrored by each)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import free_port
from tests.cluster.harness import (
    cluster_broker,
    kill_brokers,
    log_bytes,
    start_brokers,
    wait_for,
    wait_joined,
)
from tests.ops.procs import appliance
from tests.security.certs import Authority, name

TOPICS = {"tls-rf1": 1, "tls-rf2": 2, "tls-rf3": 3}


INTER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret" user_carl="carl-pw";')
# ACLs on: the brokers (by login, or by certificate) and the clients' PLAINTEXT listener are super
# users, so every request between brokers passes the authorizer (ClusterAction) as in Kafka
SUPER = ";".join(["User:ANONYMOUS", "User:broker", *(f"User:CN=broker{i},O=appliance" for i in (1, 2, 3))])


@pytest.fixture(scope="module", params=["SSL", "SASL_SSL"])
def cluster(zk_server, tmp_path_factory, request):
    inter = request.param
    root = tmp_path_factory.mktemp("inter-broker-tls")
    ca = Authority()
    ca_file = ca.write(root / "ca.pem")
    connect = f"{zk_server.connect}/t{uuid.uuid4().hex[:10]}"
    ports = {i: (free_port(), free_port()) for i in (1, 2, 3)}  # (EXTERNAL, INTERNAL)
    brokers = {}
    for i, (ext, internal) in ports.items():
        keystore, _, _ = ca.issue(name(O="appliance", CN=f"broker{i}"), hosts=("127.0.0.1",)).write(root, f"b{i}")
        brokers[i] = cluster_broker(root / f"b{i}", connect, i, port=ext, overrides={
            "listeners": f"EXTERNAL://127.0.0.1:{ext},INTERNAL://127.0.0.1:{internal}",
            "listener.security.protocol.map": f"EXTERNAL:PLAINTEXT,INTERNAL:{inter}",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": INTER_JAAS,
            "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca_file),
            # SSL: the brokers know each other by certificate; SASL_SSL: by their PLAIN login
            "ssl.client.auth": "required" if inter == "SSL" else "none",
            "ssl.endpoint.identification.algorithm": "https",
            "replica.lag.time.max.ms": "3000", "offsets.topic.num.partitions": "3",
            "offsets.topic.replication.factor": "3", "auto.leader.rebalance.enable": "false",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": SUPER})
    try:
        start_brokers(brokers.values())
        wait_joined(brokers.values(), 3)
        boot = ",".join(f"127.0.0.1:{ext}" for ext, _ in ports.values())
        admin = AdminClient({"bootstrap.servers": boot})
        for t, rf in TOPICS.items():
            admin.create_topics([NewTopic(t, 3, rf)])[t].result(60)
        # carl, a client: by certificate on the SSL cluster (client certificates required), by
        # PLAIN login on the SASL_SSL one
        _, carl_cert, carl_key = ca.issue(name(O="appliance", CN="carl")).write(root, "carl")
        carl = ({"ssl.certificate.location": str(carl_cert), "ssl.key.location": str(carl_key)}
                if inter == "SSL" else {"sasl.mechanism": "PLAIN", "sasl.username": "carl", "sasl.password": "carl-pw"})
        carl = {"security.protocol": inter, "ssl.ca.location": str(ca_file), **carl}
        carl_principal = "User:CN=carl,O=appliance" if inter == "SSL" else "User:carl"
        yield brokers, ports, boot, inter, ca_file, (carl, carl_principal)
    finally:
        kill_brokers(b for b in brokers.values() if b.proc is not None)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000})
    failed: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert p.flush(90) == 0 and failed == []


def _consume_all(bootstrap: str, topic: str, parts: int = 3) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(parts)]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(parts)}
        c.assign(tps)
        got: list[bytes] = []
        seen = {p: 0 for p in range(parts)}
        deadline = time.monotonic() + 60
        while any(seen[p] < ends[p] for p in seen) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
                seen[m.partition()] = m.offset() + 1
        return got
    finally:
        c.close()


def _leaders(boot: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.topics[topic].partitions.items()}


def test_replication_of_rf_1_2_3_through_every_broker_over_tls(cluster):
    brokers, ports, _, _, _, _ = cluster
    for i, (ext, _) in ports.items():  # requests through every broker
        for t in TOPICS:
            _produce(f"127.0.0.1:{ext}", t, [f"{t}-via-{i}-{n}".encode() for n in range(50)])
    boot = ",".join(f"127.0.0.1:{ext}" for ext, _ in ports.values())
    for t, rf in TOPICS.items():
        for p, (leader, replicas, _) in _leaders(boot, t).items():
            assert len(replicas) == rf
            want = log_bytes(brokers[leader], t, p)
            for r in replicas:
                wait_for(lambda r=r, t=t, p=p, want=want: log_bytes(brokers[r], t, p) == want, 60,
                         f"{t}-{p} copied to broker {r}")
    # every cluster worker's connections to other brokers go to their INTERNAL (TLS) ports only
    internal = {p for _, p in ports.values()}
    external = {p for p, _ in ports.values()}
    for b in brokers.values():
        (pid,) = b.worker_pids("cluster worker")
        remote = {c.raddr.port for c in psutil.Process(pid).net_connections("inet")
                  if c.raddr and c.status == psutil.CONN_ESTABLISHED}
        assert remote & internal and not remote & external


def test_failover_and_reassignment_over_tls(cluster, tmp_path):
    brokers, ports, boot, _, _, _ = cluster
    topic = "tls-rf3"
    before = _consume_all(boot, topic)
    leader = _leaders(boot, topic)[0][0]
    brokers[leader].kill()
    live = [i for i in brokers if i != leader]
    live_boot = ",".join(f"127.0.0.1:{ports[i][0]}" for i in live)
    wait_for(lambda: all(ld in live for ld, _, _ in _leaders(live_boot, topic).values()), 60,
             "new leaders on the live brokers")
    after_kill = [f"after-kill-{n}".encode() for n in range(100)]
    _produce(live_boot, topic, after_kill)
    got = _consume_all(live_boot, topic)
    assert set(before) | set(after_kill) <= set(got)  # nothing acknowledged was lost
    brokers[leader].start()
    wait_joined(brokers.values(), 3)
    wait_for(lambda: all(len(isr) == 3 for _, _, isr in _leaders(boot, topic).values()), 90,
             "the restarted broker back in every ISR (fetching over TLS)")
    # a reassignment: tls-rf1's partition 0 moves to another broker, copied over TLS
    (old,) = _leaders(boot, "tls-rf1")[0][1]
    new = next(i for i in brokers if i != old)
    before_move = log_bytes(brokers[old], "tls-rf1", 0)
    assert before_move
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tls-rf1", "partition": 0, "replicas": [new]}]}))
    r = appliance("reassign-partitions", "--bootstrap-server", boot.split(",")[0],
                  "--reassignment-json-file", str(plan), "--execute")
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(lambda: _leaders(boot, "tls-rf1")[0][1] == [new], 90, "the replica moved")
    assert log_bytes(brokers[new], "tls-rf1", 0) == before_move


def test_scram_users_made_on_one_broker_reach_every_broker(cluster):
    """Stored in ZooKeeper through broker 1, described through broker 3, mirrored into every
    broker's credentials file; on SASL_SSL, the user logs in on all three."""
    brokers, ports, boot, inter, ca_file, _ = cluster
    user = f"zoe-{inter.lower()}"
    r = appliance("configs", "--bootstrap-server", f"127.0.0.1:{ports[1][0]}", "--alter", "--entity-type",
                  "users", "--entity-name", user, "--add-config", "SCRAM-SHA-512=[password=zoe-secret]")
    assert r.returncode == 0, r.stderr
    r = appliance("configs", "--bootstrap-server", f"127.0.0.1:{ports[3][0]}", "--describe",
                  "--entity-type", "users", "--entity-name", user)
    assert "SCRAM-SHA-512=iterations=4096" in r.stdout, r.stderr
    for b in brokers.values():
        creds = Path(b.log_dirs[0]) / "scram-credentials.json"
        wait_for(lambda creds=creds: creds.exists() and user in json.loads(creds.read_text()), 10,
                 f"{user} mirrored into {creds}", step=0.1)
        assert "zoe-secret" not in creds.read_text()

    def logs_in(port: int) -> bool:
        conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(ca_file), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": user, "sasl.password": "zoe-secret"}
        try:
            AdminClient(conf).list_topics(timeout=3)
            return True
        except Exception:
            return False
    if inter == "SASL_SSL":  # the SSL cluster's listeners take certificates, not logins
        for i in brokers:
            wait_for(lambda i=i: logs_in(ports[i][1]), 10, f"{user} logging in on broker {i}", step=0.2)


def test_an_acl_added_on_one_broker_is_enforced_by_all_three_within_a_second(cluster, tmp_path):
    brokers, ports, boot, inter, ca_file, (carl, principal) = cluster
    topic = f"acl-{inter.lower()}"
    admin = AdminClient({"bootstrap.servers": boot})  # kept alive while its future is awaited
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)

    def carl_produces(port: int) -> int | None:
        """The error code of carl's produce through ``port`` (None: acknowledged)."""
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", **carl, "message.timeout.ms": 5000,
                      "retries": 0})
        errors: list = []
        p.produce(topic, b"carl", on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        return errors[0].code() if errors and errors[0] is not None else None

    from confluent_kafka import KafkaError
    assert all(carl_produces(ports[i][1]) == KafkaError.TOPIC_AUTHORIZATION_FAILED for i in brokers)
    r = appliance("acls", "--bootstrap-server", f"127.0.0.1:{ports[2][0]}", "--add",
                  "--allow-principal", principal, "--producer", "--topic", topic)
    assert r.returncode == 0, r.stderr
    added = time.monotonic()  # the tool has returned: the ACL is in ZooKeeper

    def first_allowed(i: int) -> float | None:
        """Seconds from the add to the start of carl's first acknowledged produce via broker i
        (each broker polled by its own thread, one attempt after another)."""
        while time.monotonic() < added + 30:
            tried = time.monotonic()
            if carl_produces(ports[i][1]) is None:
                return tried - added
        return None

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(brokers)) as pool:
        lag = dict(zip(brokers, pool.map(first_allowed, list(brokers)), strict=True))
    assert None not in lag.values(), lag
    assert max(lag.values()) <= 1.0, f"seconds from the add to each broker's enforcement: {lag}"
    # the ACL is in ZooKeeper as Kafka keeps it
    from kazoo.client import KazooClient
    zk_root = brokers[1].overrides["zookeeper.connect"]
    zk = KazooClient(hosts=zk_root)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"/kafka-acl/Topic/{topic}")
        acls = json.loads(data)["acls"]
        assert {a["operation"] for a in acls if a["principal"] == principal} == {"Write", "Describe", "Create"}
    finally:
        zk.stop()
        zk.close()
