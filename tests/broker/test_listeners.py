"""A real broker with two PLAINTEXT listeners (INTERNAL and EXTERNAL, two ports): clients are
served on both, Metadata and FindCoordinator on each port give that listener's advertised
address, and a listener mapped to SASL_SSL stops the start with exit 3 instead of serving
it without authentication."""

from __future__ import annotations

import subprocess

import pytest

from tests.broker.clients import (
    check_numbered,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    produce_numbered,
)
from tests.broker.wire import RawConnection, metadata_body
from tests.broker_process import BrokerProcess, free_port

FIND_COORDINATOR, METADATA = 10, 3


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory):
    internal, external = free_port(), free_port()
    with BrokerProcess(tmp_path_factory.mktemp("listeners"), port=internal, overrides={
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        # EXTERNAL tells clients another name of the same address: what each port answers shows
        # which listener's address it gave
        "advertised.listeners": f"EXTERNAL://localhost:{external}",
    }) as broker:
        yield broker, internal, external


def test_each_port_advertises_its_own_listener(two_listeners):
    _, internal, external = two_listeners
    for port, host in ((internal, "127.0.0.1"), (external, "localhost")):
        with RawConnection(port) as c:
            md = c.request(METADATA, 9, metadata_body([]))
            coordinator = c.request(FIND_COORDINATOR, 2, {"key": "g", "key_type": 0})
        assert [(b.host, b.port) for b in md.brokers] == [(host, port)]
        assert (coordinator.host, coordinator.port) == (host, port)


def test_clients_are_served_on_both_listeners(two_listeners):
    broker, internal, external = two_listeners
    inside, outside = f"127.0.0.1:{internal}", f"localhost:{external}"
    create_topic(outside, "both-ways", partitions=2)
    produce_numbered(outside, "both-ways", 40, 2)  # confluent-kafka, through EXTERNAL
    check_numbered(consume_kafka_python(inside, "both-ways", 2, 40), 40, 2)
    check_numbered(consume_confluent(outside, "both-ways", 2, 40), 40, 2)


def test_a_listener_not_served_yet_is_refused_at_start(tmp_path):
    broker = BrokerProcess(tmp_path, overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},SECURE://127.0.0.1:{free_port()}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL"})
    run = subprocess.run(broker.command(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "SECURE" in out and "SASL_SSL" in out and "does not serve" in out
