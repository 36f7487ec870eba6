"""ACLs on a real broker (issue 44): authorizer.class.name=kafka.security.authorizer.AclAuthorizer,
super.users, SASL/PLAIN users on one listener; ACLs made through confluent-kafka's AdminClient,
kafka-python's admin client and `appliance acls`. A user allowed to write one topic and read one
group can do exactly that; prefixed ACLs; deny beats allow; super users; Metadata hides the
topics a user may not describe; malformed ACLs are refused and change nothing."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess, free_port
from tests.metrics.scrape import scrape, value
from tests.ops.procs import appliance

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw" user_eve="eve-pw";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("acls")
    plain, sasl, mport = free_port(), free_port(), free_port()
    b = BrokerProcess(d, port=plain, overrides={
        "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",  # the PLAINTEXT listener is the operators'
        "group.initial.rebalance.delay.ms": "0",
    })
    with b:
        b.sasl_port = sasl
        b.metrics_port = mport
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for t in ("orders", "other", "logs-a", "logs-b", "metrics", "secret"):
            admin.create_topics([NewTopic(t, 1, 1)])[t].result(30)
        yield b


def _as(b, user: str, **extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw", **extra}


PROPAGATION_S = 0.5  # every network worker re-reads the ACLs within 0.2 s of a change


def _add(b, *bindings: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_acls(list(bindings)).values():
        f.result(30)
    time.sleep(PROPAGATION_S)


def _produce_error(conf: dict, topic: str) -> KafkaError | None:
    p = Producer({**conf, "message.timeout.ms": 5000})
    errors: list = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def _consume(conf: dict, topic: str, group: str, n: int = 1, timeout: float = 15) -> tuple[list, KafkaError | None]:
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, err, deadline = [], None, time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                err = m.error()
                if err.code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    break
                continue
            got.append(m.value())
    except KafkaException as e:
        err = e.args[0]
    finally:
        c.close()
    return got, err


def test_alice_writes_one_topic_and_reads_one_group_and_nothing_else(broker):
    w = ResourcePatternType.LITERAL
    _add(broker,
         AclBinding(ResourceType.TOPIC, "orders", w, "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
         AclBinding(ResourceType.TOPIC, "orders", w, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
         AclBinding(ResourceType.GROUP, "g1", w, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
    alice = _as(broker, "alice")
    assert _produce_error(alice, "orders") is None
    err = _produce_error(alice, "other")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, err = _consume(alice, "orders", "g1")
    assert got == [b"v"] and err is None
    got, err = _consume(alice, "orders", "g2")
    assert got == [] and err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # Metadata: only what alice may describe (Read/Write imply Describe)
    md = AdminClient(alice).list_topics(timeout=10)
    assert set(md.topics) == {"orders"}
    # creating and deleting topics need Create / Delete
    alice_admin = AdminClient(alice)  # kept alive while its future is awaited
    fs = alice_admin.create_topics([NewTopic("alice-new", 1, 1)])
    with pytest.raises(KafkaException) as ei:
        fs["alice-new"].result(15)
    assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # each refusal counted (Describe of "other" for the producer's Metadata, the group's
    # FindCoordinator, CreateTopics); alice's first one logged by each network worker (two),
    # without her password, and no more of hers
    denied = value(scrape(broker.metrics_port), "kafka_security_authorizermetrics_authorizationdenied_total")
    assert denied >= 3
    lines = [ln for ln in broker.log().splitlines() if "User:alice from 127.0.0.1" in ln]
    assert 1 <= len(lines) <= 2 and all("refused by the ACLs" in ln for ln in lines), lines
    assert "alice-pw" not in broker.log()


def test_prefixed_acls_and_deny_beats_allow(broker):
    _add(broker,
         AclBinding(ResourceType.TOPIC, "logs-", ResourcePatternType.PREFIXED, "User:bob", "*",
                    AclOperation.ALL, AclPermissionType.ALLOW),
         AclBinding(ResourceType.TOPIC, "logs-b", ResourcePatternType.LITERAL, "User:bob", "*",
                    AclOperation.WRITE, AclPermissionType.DENY))
    bob = _as(broker, "bob")
    assert _produce_error(bob, "logs-a") is None
    err = _produce_error(bob, "logs-b")  # denied, though the prefix allows All
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    err = _produce_error(bob, "metrics")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(AdminClient(bob).list_topics(timeout=10).topics) == {"logs-a", "logs-b"}


def test_super_users_need_no_acls_and_others_see_nothing(broker):
    admin = _as(broker, "admin")
    assert _produce_error(admin, "metrics") is None
    assert {"orders", "metrics", "secret"} <= set(AdminClient(admin).list_topics(timeout=10).topics)
    eve = _as(broker, "eve")
    assert set(AdminClient(eve).list_topics(timeout=10).topics) == set()
    err = _produce_error(eve, "metrics")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_appliance_acls_and_kafka_python_admin(broker):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePattern,
    )
    from kafka.admin import ResourceType as KPType

    tool = ("--bootstrap-server", broker.bootstrap)
    r = appliance("acls", *tool, "--add", "--allow-principal", "User:eve", "--producer", "--topic", "secret")
    assert r.returncode == 0 and "3 added" in r.stdout, r.stderr
    time.sleep(PROPAGATION_S)
    assert _produce_error(_as(broker, "eve"), "secret") is None
    r = appliance("acls", *tool, "--list", "--topic", "secret")
    assert "principal=User:eve, host=*, operation=WRITE, permissionType=ALLOW" in r.stdout, r.stdout
    # kafka-python's admin client sees the same ACLs, and removes one
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acls, error = kp.describe_acls(ACLFilter(principal="User:eve", host="*", operation=ACLOperation.ANY,
                                                 permission_type=ACLPermissionType.ANY,
                                                 resource_pattern=ResourcePattern(KPType.TOPIC, "secret")))
        assert {a.operation for a in acls} == {ACLOperation.WRITE, ACLOperation.DESCRIBE, ACLOperation.CREATE}
        kp.delete_acls([ACLFilter(principal="User:eve", host="*", operation=ACLOperation.WRITE,
                                  permission_type=ACLPermissionType.ALLOW,
                                  resource_pattern=ResourcePattern(KPType.TOPIC, "secret"))])
        kp.create_acls([ACL(principal="User:eve", host="*", operation=ACLOperation.READ,
                            permission_type=ACLPermissionType.ALLOW,
                            resource_pattern=ResourcePattern(KPType.GROUP, "eve-group"))])
    finally:
        kp.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # decisions are re-read within 0.2 s
        err = _produce_error(_as(broker, "eve"), "secret")
        if err is not None:
            break
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    r = appliance("acls", *tool, "--remove", "--allow-principal", "User:eve", "--operation", "Describe",
                  "--operation", "Create", "--topic", "secret")
    assert r.returncode == 0 and "2 removed" in r.stdout, r.stderr


def test_malformed_acls_are_refused_and_change_nothing(broker):
    from appliance.protocol.messages.security import CreateAcls, DescribeAcls

    with RawConnection(broker.port) as c:
        before = c.request(DescribeAcls.API_KEY, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                                     "pattern_type_filter": 1, "principal_filter": None,
                                                     "host_filter": None, "operation": 1, "permission_type": 1})
        r = c.request(CreateAcls.API_KEY, 2, {"creations": [
            {"resource_type": 99, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
             "host": "*", "operation": 3, "permission_type": 3},
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "",
             "host": "*", "operation": 3, "permission_type": 3}]})
        assert [x.error_code for x in r.results] == [42, 42]
        assert "resource type" in r.results[0].error_message and "principal" in r.results[1].error_message
        after = c.request(DescribeAcls.API_KEY, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                                    "pattern_type_filter": 1, "principal_filter": None,
                                                    "host_filter": None, "operation": 1, "permission_type": 1})
    assert after.resources == before.resources
    r = appliance("acls", "--bootstrap-server", broker.bootstrap, "--add", "--allow-principal", "alice",
                  "--operation", "Read", "--topic", "t")
    assert r.returncode == 2 and "TYPE:NAME" in r.stderr


def test_acl_apis_without_an_authorizer_say_security_disabled(tmp_path):
    from appliance.protocol.messages.security import CreateAcls, DeleteAcls, DescribeAcls

    flt = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
           "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    with BrokerProcess(tmp_path) as b, RawConnection(b.port) as c:
        assert c.request(DescribeAcls.API_KEY, 2, flt).error_code == 54  # SECURITY_DISABLED
        r = c.request(CreateAcls.API_KEY, 2, {"creations": [
            {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:x",
             "host": "*", "operation": 3, "permission_type": 3}]})
        assert [x.error_code for x in r.results] == [54]
        assert [x.error_code for x in c.request(DeleteAcls.API_KEY, 2, {"filters": [flt]}).filter_results] == [54]


def test_transactions_described_and_listed_as_the_acls_allow(broker):
    """KIP-664 as Kafka authorizes it: ListTransactions leaves out the ids the principal may not
    Describe; DescribeTransactions answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for them and
    leaves out the topics it may not Describe."""
    from appliance.client.admin import AdminClient as OurAdmin
    from appliance.errors import ErrorCode
    from appliance.errors import KafkaError as OurError

    _add(broker, AclBinding(ResourceType.TRANSACTIONAL_ID, "bob-tx", ResourcePatternType.LITERAL, "User:bob", "*",
                            AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    mine = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "bob-tx"})
    mine.init_transactions(20)
    mine.begin_transaction()
    mine.produce("logs-a", b"v")
    mine.produce("metrics", b"v")  # a topic bob may not describe
    assert mine.flush(20) == 0
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "admin-tx"})
    other.init_transactions(20)
    with OurAdmin(config={"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}", "security.protocol": "sasl_plaintext",
                          "sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-pw"}) as bob, \
            OurAdmin(broker.bootstrap) as admin:
        assert {t.transactional_id for t in admin.list_transactions()} >= {"bob-tx", "admin-tx"}
        assert [t.transactional_id for t in bob.list_transactions()] == ["bob-tx"]
        assert bob.describe_transactions(["bob-tx"])["bob-tx"].partitions == [("logs-a", 0)]
        assert set(admin.describe_transactions(["bob-tx"])["bob-tx"].partitions) == {("logs-a", 0), ("metrics", 0)}
        with pytest.raises(OurError) as info:
            bob.describe_transactions(["admin-tx"])  # FindCoordinator refuses first, as Kafka's
        assert info.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        r = bob.cluster.any_connection().request(65, {"transactional_ids": ["admin-tx"]})
        assert r.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    mine.abort_transaction(20)
