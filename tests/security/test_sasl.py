"""SASL on a real broker (issue 44): SASL_PLAINTEXT and SASL_SSL listeners with PLAIN (users in
the listener's JAAS line) and SCRAM-SHA-256/512 (credentials made with `appliance configs
--entity-type users`, kept salted and iterated); kcat, confluent-kafka, kafka-python and aiokafka
produce and consume byte-identical records with each; wrong passwords, unknown mechanisms,
requests before authentication, handshakes on other listeners and v0 token framing give Kafka's
answers; failed logins are counted and stall no one."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.wire import RawConnection, request_frame
from tests.broker_process import BrokerProcess, free_port
from tests.ops.procs import appliance
from tests.security.certs import Authority, name

RECORDS = [(f"k{i}".encode(), os.urandom(1 + (i * 31) % 2000)) for i in range(200)]
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="b\\"ob-pw";')
SCRAM_USERS = {"carol": ("SCRAM-SHA-256", "carol-secret"), "dave": ("SCRAM-SHA-512", "dave,secret=x")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("sasl")
    ca = Authority()
    ca_file = ca.write(d / "ca.pem")
    keystore, _, _ = ca.issue(name(CN="broker"), hosts=("127.0.0.1",)).write(d, "broker")
    plain, sasl, sasl_ssl, mport = free_port(), free_port(), free_port(), free_port()
    b = BrokerProcess(d / "b", port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},SASL_SSL://127.0.0.1:{sasl_ssl}",
        "ssl.keystore.location": str(keystore),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "group.initial.rebalance.delay.ms": "0",
        "metrics.listener": f"http://127.0.0.1:{mport}/metrics",
    })
    (d / "b").mkdir()
    with b:
        b.sasl_port, b.sasl_ssl_port, b.ca, b.metrics_port = sasl, sasl_ssl, ca_file, mport
        for user, (mech, pw) in SCRAM_USERS.items():
            r = appliance("configs", "--bootstrap-server", b.bootstrap, "--alter", "--entity-type", "users",
                          "--entity-name", user, "--add-config", f"{mech}=[iterations=8192,password={pw}]")
            assert r.returncode == 0, r.stderr
        yield b


def _conf(b, protocol: str, mechanism: str, user: str, password: str) -> dict:
    port = b.sasl_port if protocol == "SASL_PLAINTEXT" else b.sasl_ssl_port
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(b.ca)
    return conf


CASES = [("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"),
         ("SASL_SSL", "PLAIN", "bob", 'b"ob-pw'),
         ("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret"),
         ("SASL_SSL", "SCRAM-SHA-512", "dave", "dave,secret=x"),
         ("SASL_SSL", "SCRAM-SHA-256", "carol", "carol-secret")]


def _roundtrip_confluent(conf: dict, topic: str) -> list:
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer(conf)
    for k, v in RECORDS:
        p.produce(topic, v, k)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(RECORDS) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    c.close()
    return got


@pytest.mark.parametrize("protocol, mechanism, user, password", CASES)
def test_confluent_kafka_over_sasl(broker, protocol, mechanism, user, password):
    topic = f"sasl-{protocol}-{mechanism}-{user}".lower()
    assert _roundtrip_confluent(_conf(broker, protocol, mechanism, user, password), topic) == RECORDS


def test_kcat_kafka_python_and_aiokafka_over_sasl(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from kafka import KafkaConsumer, KafkaProducer

    topic = "sasl-clients"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # kcat, SCRAM-SHA-256 over SASL_SSL: Debian's kcat is built on librdkafka 2.0.2, whose SCRAM
    # client sends its own nonce again in front of the server's (Kafka accepts it: so do we)
    kcat = ["kcat", "-b", f"127.0.0.1:{broker.sasl_ssl_port}", "-X", "security.protocol=SASL_SSL",
            "-X", f"ssl.ca.location={broker.ca}", "-X", "sasl.mechanism=SCRAM-SHA-256",
            "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret"]
    r = subprocess.run([*kcat, "-P", "-t", topic], input="a\nb\nc\n", text=True, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # kafka-python, SCRAM-SHA-256 over SASL_PLAINTEXT
    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.sasl_port}", security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="carol",
                       sasl_plain_password="carol-secret")
    for k, v in RECORDS[:50]:
        kp.send(topic, value=v, key=k)
    kp.flush(30)
    kp.close()

    # aiokafka, PLAIN over SASL_SSL
    async def aio() -> list:
        ctx = create_ssl_context(cafile=str(broker.ca))
        p = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.sasl_ssl_port}", security_protocol="SASL_SSL",
                             ssl_context=ctx, sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password="alice-secret")
        await p.start()
        try:
            for k, v in RECORDS[50:100]:
                await p.send(topic, value=v, key=k)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{broker.sasl_ssl_port}",
                             security_protocol="SASL_SSL", ssl_context=ctx, sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret",
                             auto_offset_reset="earliest")
        await c.start()
        got: list = []
        try:
            while len(got) < 103:
                for msgs in (await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)).values():
                    got += [(m.key, m.value) for m in msgs]
        finally:
            await c.stop()
        return got

    got_aio = asyncio.run(aio())
    kc = KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{broker.sasl_port}", security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret",
                       auto_offset_reset="earliest", consumer_timeout_ms=5000)
    got_kp = [(m.key, m.value) for m in kc]
    kc.close()
    out = subprocess.run([*kcat, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k|%s\\n"],
                         capture_output=True, check=True, timeout=60).stdout
    want = [(None, b"a"), (None, b"b"), (None, b"c"), *RECORDS[:100]]
    assert got_aio == want and got_kp == want
    assert out.splitlines()[:3] == [b"|a", b"|b", b"|c"]


@pytest.mark.parametrize("mechanism, user, password", [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "x"),
    ("SCRAM-SHA-256", "carol", "wrong"), ("SCRAM-SHA-512", "carol", "carol-secret"),  # no 512 credential
    ("SCRAM-SHA-256", "nobody", "x"),
])
def test_wrong_credentials_are_refused(broker, mechanism, user, password):
    conf = {**_conf(broker, "SASL_PLAINTEXT", mechanism, user, password), "socket.timeout.ms": 5000}

    def refusal() -> list:
        # the client is gone when this returns: a live one would keep retrying the bad login
        seen: list = []
        admin = AdminClient({**conf, "error_cb": seen.append})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)
        admin.poll(1.0)  # error_cb is served by poll
        return seen
    errors = refusal()
    gc.collect()
    # librdkafka reports the broker's SASL_AUTHENTICATION_FAILED as its _AUTHENTICATION error
    assert any(e.code() == KafkaError._AUTHENTICATION and "Authentication failed" in e.str()
               for e in errors), errors


def _raw(port: int) -> RawConnection:
    return RawConnection(port)


def test_kafka_answers_to_bad_sasl_input(broker):
    # an unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed
    with _raw(broker.sasl_port) as c:
        r = c.request(17, 1, {"mechanism": "GSSAPI"})
        assert r.error_code == 33 and r.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        with pytest.raises((ConnectionError, OSError)):
            c.request(18, 0, {})
    # a request before authentication: the connection is closed, nothing answered
    with _raw(broker.sasl_port) as c:
        assert c.request(18, 0, {}).error_code == 0  # ApiVersions is allowed
        with pytest.raises((ConnectionError, OSError)):
            c.request(3, 1, {"topics": []})
    # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE
    with _raw(broker.sasl_port) as c:
        r = c.request(36, 1, {"auth_bytes": b"\0alice\0alice-secret"})
        assert r.error_code == 34
    # a SASL handshake on the PLAINTEXT listener: ILLEGAL_SASL_STATE, the connection goes on
    with _raw(broker.port) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 34
        assert c.request(18, 0, {}).error_code == 0
    # a wrong PLAIN password: SASL_AUTHENTICATION_FAILED, and the secret is in no log line
    with _raw(broker.sasl_port) as c:
        assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        r = c.request(36, 1, {"auth_bytes": b"\0alice\0Wr0ng-Pass-Word"})
        assert r.error_code == 58 and "Wr0ng" not in (r.error_message or "")
    assert "Wr0ng-Pass-Word" not in broker.log()
    # v0 framing: SaslHandshake v0, then the token as a bare frame, then requests as usual
    with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as s:
        s.sendall(request_frame(17, 0, {"mechanism": "PLAIN"}))
        _read_frame(s)
        token = b"\0alice\0alice-secret"
        s.sendall(len(token).to_bytes(4, "big") + token)
        assert _read_frame(s) == b""  # PLAIN's empty answer
        s.sendall(request_frame(18, 0, {}))
        assert len(_read_frame(s)) > 8


def _read_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    return exact(int.from_bytes(exact(4), "big"))


def test_many_failed_logins_are_counted_and_stall_no_one(broker):
    from tests.metrics.scrape import scrape, value

    name = "kafka_server_socketservermetrics_failedauthentication_total"
    # other tests' clients with bad passwords are gone: the count is still
    before = value(scrape(broker.metrics_port), name)
    for _ in range(20):
        time.sleep(0.5)
        now = value(scrape(broker.metrics_port), name)
        if now == before:
            break
        before = now
    good = _conf(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret")
    p = Producer(good)
    for i in range(300):
        with _raw(broker.sasl_port) as c:
            c.request(17, 1, {"mechanism": "PLAIN"})
            assert c.request(36, 1, {"auth_bytes": b"\0alice\0nope%d" % i}).error_code == 58
        if i % 30 == 0:  # a good client is served meanwhile
            p.produce("sasl-meanwhile", b"x")
            assert p.flush(10) == 0
    after = value(scrape(broker.metrics_port), name)
    assert after - before == 300


def test_scram_credentials_described_and_deleted(broker):
    r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "users")
    assert r.returncode == 0, r.stderr
    assert "user-principal 'carol' are SCRAM-SHA-256=iterations=8192" in r.stdout
    assert "user-principal 'dave' are SCRAM-SHA-512=iterations=8192" in r.stdout
    # never a password at rest: the file holds salted keys only
    creds = json.loads((broker.workdir / "disk0" / "scram-credentials.json").read_text())
    assert set(creds) >= {"carol", "dave"} and "carol-secret" not in json.dumps(creds)
    assert oct(os.stat(broker.workdir / "disk0" / "scram-credentials.json").st_mode & 0o777) == "0o600"
    r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users",
                  "--entity-name", "erin", "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]")
    assert r.returncode == 2 and "iterations" in r.stderr
    r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users",
                  "--entity-name", "erin", "--delete-config", "SCRAM-SHA-256")
    assert r.returncode == 1 and "does not exist" in r.stderr
    for args in (["--add-config", "SCRAM-SHA-256=[password=erin-pw]"], ["--delete-config", "SCRAM-SHA-256"]):
        r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users",
                      "--entity-name", "erin", *args)
        assert r.returncode == 0, r.stderr
    r = appliance("configs", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "users",
                  "--entity-name", "erin")
    assert r.returncode == 1 and "does not exist" in r.stderr


def test_appliance_tools_and_client_over_sasl(broker, tmp_path):
    from appliance.client import Consumer as OurConsumer
    from appliance.client import Producer as OurProducer

    props = tmp_path / "client-sasl.properties"
    props.write_text("security.protocol=SASL_SSL\n"
                     f"ssl.truststore.location={broker.ca}\n"
                     "sasl.mechanism=SCRAM-SHA-512\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                     'username="dave" password="dave,secret=x";\n')
    tool = ("--bootstrap-server", f"127.0.0.1:{broker.sasl_ssl_port}", "--command-config", str(props))
    r = appliance("topics", "--create", "--topic", "sasl-tools", "--partitions", "1", *tool)
    assert r.returncode == 0, r.stderr
    r = appliance("console-producer", "--topic", "sasl-tools", *tool, input="x\ny\n")
    assert r.returncode == 0, r.stderr
    r = appliance("console-consumer", "--topic", "sasl-tools", "--from-beginning", "--max-messages", "2", *tool)
    assert r.returncode == 0 and r.stdout.splitlines() == ["x", "y"], r.stderr
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "carol-secret"}
    p = OurProducer(conf)
    for k, v in RECORDS[:50]:
        p.send("sasl-tools", (k, v))
    p.flush()
    p.close()
    c = OurConsumer({**conf, "group.id": None, "auto.offset.reset": "earliest"})
    c.assign([("sasl-tools", 0)])
    got: list = []
    deadline = time.monotonic() + 30
    while len(got) < 52 and time.monotonic() < deadline:
        got += [(r.key, r.value) for r in c.poll(1.0)]
    c.close()
    assert got[2:] == RECORDS[:50]
    # a wrong password: one line naming the failure, no traceback
    props.write_text(props.read_text().replace('password="dave,secret=x"', 'password="nope"'))
    r = appliance("topics", "--list", *tool, "--timeout", "5")
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr and "Traceback" not in r.stderr


def test_sessions_end_after_connections_max_reauth_ms(tmp_path):
    """KIP-368: the session lifetime is told in SaslAuthenticate; a client that has not
    re-authenticated by then is disconnected at its next request; one that re-authenticates
    (the same principal) carries on."""
    plain, port = free_port(), free_port()
    with BrokerProcess(tmp_path, port=plain, overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "connections.max.reauth.ms": "1500"}):
        with RawConnection(port) as c:
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            r = c.request(36, 1, {"auth_bytes": b"\0alice\0alice-secret"})
            assert r.error_code == 0 and r.session_lifetime_ms == 1500
            assert c.request(18, 0, {}).error_code == 0  # within the session
            time.sleep(2.0)
            with pytest.raises((ConnectionError, OSError)):
                c.request(18, 0, {})  # the session has ended: closed, not answered
        with RawConnection(port) as c:  # re-authenticating in time keeps the connection
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            assert c.request(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}).error_code == 0
            time.sleep(1.0)
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            assert c.request(36, 1, {"auth_bytes": b"\0alice\0alice-secret"}).error_code == 0
            time.sleep(1.0)
            assert c.request(18, 0, {}).error_code == 0  # 2 s after the first login, 1 s after the second
            # re-authenticating as someone else is refused
            assert c.request(17, 1, {"mechanism": "PLAIN"}).error_code == 0
            assert c.request(36, 1, {"auth_bytes": b'\0bob\0b"ob-pw'}).error_code == 58
