"""TLS listeners on a real broker (issue 44): kcat, confluent-kafka, kafka-python and aiokafka
produce and consume byte-identical records over SSL beside a PLAINTEXT listener; mutual TLS
refuses a client without a trusted certificate; bad input (plaintext on the TLS port, TLS on the
plaintext port, a client that stops mid-handshake, an untrusted or expired certificate) is a
closed connection that stalls nobody; key files others can read and wrong key passwords stop the
start with a message naming the key."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.security.tls import PrincipalRules, TlsError, principal_of
from tests.broker_process import BrokerProcess, free_port
from tests.security.certs import Authority, name

RECORDS = [(f"k{i}".encode(), os.urandom(1 + (i * 7919) % 3000)) for i in range(300)]
BIG = [(b"big", os.urandom(900_000)) for _ in range(3)]  # whole slices > 64 KiB: the read-and-write path


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = Authority()
    ca_file = ca.write(d / "ca.pem")
    broker_keystore, _, _ = ca.issue(name(O="appliance", CN="broker"), hosts=("127.0.0.1", "localhost")).write(d, "broker")
    alice = ca.issue(name(C="US", O="acme", OU="eng", CN="alice"))
    alice_files = alice.write(d, "alice")
    stranger = Authority("another CA").issue(name(CN="mallory"))
    stranger_files = stranger.write(d, "mallory")
    expired_files = ca.issue(name(CN="late"), expired=True).write(d, "late")
    return {"dir": d, "ca": ca_file, "broker": broker_keystore, "alice": alice_files,
            "alice_cert": alice, "mallory": stranger_files, "late": expired_files}


def _tls_broker(tmp_path, pki, client_auth: str = "none") -> BrokerProcess:
    plain, tls = free_port(), free_port()
    b = BrokerProcess(tmp_path, port=plain, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
        "ssl.keystore.location": str(pki["broker"]),
        "ssl.truststore.location": str(pki["ca"]),
        "ssl.client.auth": client_auth,
        "group.initial.rebalance.delay.ms": "0",
    })
    b.tls_port = tls
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    with _tls_broker(tmp_path_factory.mktemp("tls"), pki) as b:
        yield b


def _conf(b, pki, **extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.tls_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"]), **extra}


def _produce_confluent(conf: dict, topic: str, records) -> None:
    p = Producer({**conf, "linger.ms": 5})
    for k, v in records:
        p.produce(topic, v, k)
    assert p.flush(60) == 0


def _consume_confluent(conf: dict, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    c = Consumer({**conf, "group.id": f"g-{topic}-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 4 << 20, "max.partition.fetch.bytes": 4 << 20})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                out.append((m.key(), m.value()))
    finally:
        c.close()
    return out


def _create(b, pki, topic: str) -> None:
    admin = AdminClient(_conf(b, pki))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def test_confluent_kafka_over_tls_byte_identical(broker, pki):
    _create(broker, pki, "tls-confluent")
    _produce_confluent(_conf(broker, pki), "tls-confluent", RECORDS + BIG)
    got = _consume_confluent(_conf(broker, pki), "tls-confluent", len(RECORDS) + len(BIG))
    assert got == RECORDS + BIG
    # the same bytes through the plaintext listener
    plain = {"bootstrap.servers": broker.bootstrap}
    assert _consume_confluent(plain, "tls-confluent", len(RECORDS) + len(BIG)) == RECORDS + BIG


def test_kcat_over_tls(broker, pki):
    _create(broker, pki, "tls-kcat")
    ssl_args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki['ca']}"]
    lines = [f"line {i} " + "x" * (i % 50) for i in range(200)]
    subprocess.run(["kcat", "-b", f"127.0.0.1:{broker.tls_port}", *ssl_args, "-P", "-t", "tls-kcat"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", f"127.0.0.1:{broker.tls_port}", *ssl_args, "-C", "-t", "tls-kcat",
                          "-o", "beginning", "-e", "-q"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.splitlines() == lines


def _client_ssl_context(pki, with_cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    if with_cert:
        keystore = pki[with_cert][0]
        ctx.load_cert_chain(str(keystore))
    return ctx


def test_kafka_python_over_tls(broker, pki):
    from kafka import KafkaConsumer, KafkaProducer

    _create(broker, pki, "tls-kafka-python")
    boot = f"127.0.0.1:{broker.tls_port}"
    p = KafkaProducer(bootstrap_servers=boot, security_protocol="SSL", ssl_context=_client_ssl_context(pki))
    for k, v in RECORDS:
        p.send("tls-kafka-python", value=v, key=k)
    p.flush(60)
    p.close()
    c = KafkaConsumer("tls-kafka-python", bootstrap_servers=boot, security_protocol="SSL",
                      ssl_context=_client_ssl_context(pki), auto_offset_reset="earliest",
                      consumer_timeout_ms=10000)
    got = [(m.key, m.value) for m in c]
    c.close()
    assert got == RECORDS


def test_aiokafka_over_tls(broker, pki):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    _create(broker, pki, "tls-aiokafka")
    boot = f"127.0.0.1:{broker.tls_port}"

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=boot, security_protocol="SSL",
                             ssl_context=_client_ssl_context(pki))
        await p.start()
        try:
            for k, v in RECORDS:
                await p.send("tls-aiokafka", value=v, key=k)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer("tls-aiokafka", bootstrap_servers=boot, security_protocol="SSL",
                             ssl_context=_client_ssl_context(pki), auto_offset_reset="earliest")
        await c.start()
        got = []
        try:
            while len(got) < len(RECORDS):
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                for msgs in batch.values():
                    got += [(m.key, m.value) for m in msgs]
        finally:
            await c.stop()
        return got

    assert asyncio.run(run()) == RECORDS


def _served(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether a TLS connection with ``ctx`` gets an answer to ApiVersions (False: the handshake
    failed or the broker closed the connection; TLS 1.3 checks the client's certificate after
    the client's side of the handshake ends, so a refusal can show only on the first read)."""
    from tests.broker.wire import request_frame
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(request_frame(18, 0, {}))
                return len(s.recv(4)) == 4
    except (ssl.SSLError, ConnectionError):
        return False


def test_bad_bytes_on_either_port_close_the_connection_and_stall_nobody(broker, pki):
    # plaintext Kafka bytes on the TLS port: the handshake fails, the connection is closed
    from tests.broker.wire import metadata_body, request_frame
    with socket.create_connection(("127.0.0.1", broker.tls_port), timeout=15) as s:
        s.sendall(request_frame(3, 9, metadata_body([])))
        got = b""
        while chunk := s.recv(65536):  # at most a TLS alert, then the end
            got += chunk
        assert len(got) < 64 and b"brokers" not in got
    # a TLS handshake on the plaintext port: not a Kafka frame, closed
    assert not _served(broker.port, _client_ssl_context(pki))
    assert _served(broker.tls_port, _client_ssl_context(pki))
    # clients that stop half-way (connect, say nothing) do not slow the others down
    idle = [socket.create_connection(("127.0.0.1", broker.tls_port)) for _ in range(20)]
    try:
        t0 = time.monotonic()
        _create(broker, pki, "tls-meanwhile")
        _produce_confluent(_conf(broker, pki), "tls-meanwhile", RECORDS[:20])
        assert _consume_confluent(_conf(broker, pki), "tls-meanwhile", 20) == RECORDS[:20]
        assert time.monotonic() - t0 < 10
        # and each is dropped after the handshake timeout (10 s)
        for s in idle:
            s.settimeout(20)
            assert s.recv(1) == b""
    finally:
        for s in idle:
            s.close()


def test_mutual_tls_requires_a_trusted_certificate(tmp_path, pki):
    with _tls_broker(tmp_path, pki, client_auth="required") as b:
        # without a certificate, with one from another CA, or an expired one: refused
        for who in (None, "mallory", "late"):
            assert not _served(b.tls_port, _client_ssl_context(pki, who)), who
        assert _served(b.tls_port, _client_ssl_context(pki, "alice"))
        conf = _conf(b, pki, **{"ssl.certificate.location": str(pki["alice"][1]),
                                "ssl.key.location": str(pki["alice"][2])})
        admin = AdminClient(conf)
        admin.create_topics([NewTopic("mtls", 1, 1)])["mtls"].result(30)
        _produce_confluent(conf, "mtls", RECORDS[:50])
        assert _consume_confluent(conf, "mtls", 50) == RECORDS[:50]
        # the plaintext listener is unaffected
        assert _consume_confluent({"bootstrap.servers": b.bootstrap}, "mtls", 50) == RECORDS[:50]


@pytest.mark.parametrize("rules, expected", [
    ("DEFAULT", "CN=alice,OU=eng,O=acme,C=US"),
    ("RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/,DEFAULT", "alice@eng"),
    ("RULE:^CN=(.*?),.*$/$1/U", "ALICE"),
    ("RULE:^CN=bob,.*$/bob/,DEFAULT", "CN=alice,OU=eng,O=acme,C=US"),
])
def test_certificate_subject_to_principal(pki, rules, expected):
    class Peer:  # what ssl.SSLObject.getpeercert(binary_form=True) gives
        def getpeercert(self, binary_form=False):
            from cryptography.hazmat.primitives import serialization
            return pki["alice_cert"].cert.public_bytes(serialization.Encoding.DER)
    assert principal_of(Peer(), PrincipalRules(rules)) == expected


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/x/", "RULE:abc", "NOPE"])
def test_malformed_principal_rules_are_refused(rules):
    with pytest.raises(TlsError, match="ssl.principal.mapping.rules"):
        PrincipalRules(rules)


def _start_fails(tmp_path, overrides: dict) -> str:
    b = BrokerProcess(tmp_path, overrides={"security.inter.broker.protocol": "SSL", **overrides})
    run = subprocess.run(b.command(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "Traceback" not in out
    return out


def test_unsafe_or_wrong_key_material_stops_the_start(tmp_path, pki):
    listeners = f"SSL://127.0.0.1:{free_port()}"
    readable, _, _ = Authority().issue(name(CN="b")).write(tmp_path / "loose", "b", mode=0o644)
    out = _start_fails(tmp_path, {"listeners": listeners, "ssl.keystore.location": str(readable)})
    assert str(readable) in out and "0644" in out and "ssl.keystore.location" in out
    locked, _, _ = Authority().issue(name(CN="b")).write(tmp_path / "locked", "b", password="right")
    out = _start_fails(tmp_path, {"listeners": listeners, "ssl.keystore.location": str(locked),
                                  "ssl.key.password": "Not-The-Pass-1"})
    assert "ssl.keystore.location" in out and "ssl.key.password" in out
    assert "Not-The-Pass-1" not in out  # the secret is never printed
    out = _start_fails(tmp_path, {"listeners": listeners})
    assert "ssl.keystore.location" in out


def test_appliance_tools_and_client_over_tls(broker, pki, tmp_path):
    from appliance.client import Consumer as OurConsumer
    from appliance.client import Producer as OurProducer
    from tests.ops.procs import appliance

    boot = f"127.0.0.1:{broker.tls_port}"
    props = tmp_path / "client-ssl.properties"
    props.write_text(f"security.protocol=SSL\nssl.truststore.location={pki['ca']}\n")
    tool = ("--bootstrap-server", boot, "--command-config", str(props))
    r = appliance("topics", "--create", "--topic", "tls-tools", "--partitions", "2", *tool)
    assert r.returncode == 0, r.stderr
    assert "tls-tools" in appliance("topics", "--list", *tool).stdout.split()
    r = appliance("console-producer", "--topic", "tls-tools", *tool, input="one\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr
    r = appliance("console-consumer", "--topic", "tls-tools", "--from-beginning", "--max-messages", "3",
                  "--group", "tls-tool-group", *tool)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["one", "three", "two"]
    r = appliance("consumer-groups", "--describe", "--group", "tls-tool-group", *tool)
    assert r.returncode == 0 and "tls-tools" in r.stdout, r.stderr
    # our client library
    conf = {"bootstrap.servers": boot, "security.protocol": "SSL", "ssl.truststore.location": str(pki["ca"])}
    p = OurProducer(conf)
    for k, v in RECORDS[:100]:
        p.send("tls-tools", (k, v), partition=0)
    p.flush()
    p.close()
    c = OurConsumer({**conf, "group.id": None, "auto.offset.reset": "earliest"})
    c.assign([("tls-tools", 0)])
    got = []
    deadline = time.monotonic() + 30
    while len([kv for kv in got if kv[0] is not None]) < 100 and time.monotonic() < deadline:
        got += [(r.key, r.value) for r in c.poll(1.0)]
    c.close()
    assert [kv for kv in got if kv[0] is not None] == RECORDS[:100]  # the console's lines have no key
    # a wrong trust store: the tool says so in one line
    other = tmp_path / "other-ca.pem"
    Authority("not the broker's").write(other)
    props.write_text(f"security.protocol=SSL\nssl.truststore.location={other}\n")
    r = appliance("topics", "--list", *tool, "--timeout", "5")
    assert r.returncode == 1 and "TLS handshake" in r.stderr and "Traceback" not in r.stderr
    props.write_text("security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n")
    r = appliance("topics", "--list", *tool)
    assert r.returncode == 2 and "ssl.truststore.location" in r.stderr
