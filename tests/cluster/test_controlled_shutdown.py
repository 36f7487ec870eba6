"""Controlled shutdown's stopping side against a real ZooKeeper: a controller that never
answers costs the stop at most the deadline, whether it is this broker's own or another's."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest

from appliance.cluster import controlled_shutdown
from appliance.cluster import zk_paths as zp
from appliance.cluster.controlled_shutdown import request_shutdown
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore

ME = 1


@pytest.fixture
def hung_listener():
    """A socket that accepts connections (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


@pytest.mark.parametrize("whose", ["own", "remote"])
def test_a_controller_that_never_answers_costs_at_most_the_deadline(admin, hung_listener,
                                                                     monkeypatch, whose):
    monkeypatch.setattr(controlled_shutdown, "DEADLINE_S", 2.0)
    controller = ME if whose == "own" else 99
    admin.client.ensure_path(zp.BROKER_IDS)
    admin.client.create(zp.broker_path(99), zp.encode_broker(
        zp.BrokerInfo(99, "127.0.0.1", hung_listener, (f"PLAINTEXT://127.0.0.1:{hung_listener}",))))
    admin.client.create(zp.CONTROLLER, zp.encode_controller(controller))
    asked = []
    member = SimpleNamespace(controller=SimpleNamespace(put=asked.append))  # never replies
    t = time.monotonic()
    assert request_shutdown(member, admin, ME) is False
    took = time.monotonic() - t
    assert 1.9 <= took < 4.0, took  # each attempt bounded by what is left, not TIMEOUT_S (20 s)
    assert bool(asked) == (whose == "own")


def test_controlled_shutdown_max_retries_and_backoff_are_honoured(admin, caplog):
    """A controller that is not registered fails each attempt at once: the stop makes exactly
    controlled.shutdown.max.retries attempts, controlled.shutdown.retry.backoff.ms apart."""
    admin.client.ensure_path(zp.BROKER_IDS)
    if admin.client.exists(zp.CONTROLLER):
        admin.client.delete(zp.CONTROLLER)
    admin.client.create(zp.CONTROLLER, zp.encode_controller(98))  # no /brokers/ids/98
    member = SimpleNamespace(controller=None)
    t = time.monotonic()
    with caplog.at_level("INFO", logger="appliance.cluster"):
        assert request_shutdown(member, admin, ME, attempts=3, backoff_s=0.4) is False
    took = time.monotonic() - t
    tries = [r for r in caplog.records if "controlled shutdown attempt" in r.getMessage()]
    assert len(tries) == 3 and "controller 98 is not registered" in tries[0].getMessage()
    assert 0.8 <= took < 3.0, took  # two waits of 0.4 s between three attempts


def test_zookeeper_failing_a_lookup_fails_the_attempt_not_the_stop(zk_connect, caplog):
    """ZooKeeper gone mid-stop (here: the session closed) fails each attempt like a controller
    that does not answer; kazoo's exception used to escape, crash the cluster worker and skip
    leaving the cluster."""
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    client.stop()
    client.close()
    with caplog.at_level("INFO", logger="appliance.cluster"):
        assert request_shutdown(SimpleNamespace(controller=None), ZkStore(client), ME,
                                attempts=2, backoff_s=0.1) is False
    tries = [r.getMessage() for r in caplog.records if "controlled shutdown attempt" in r.getMessage()]
    assert len(tries) == 2 and all("failed" in t for t in tries), tries
