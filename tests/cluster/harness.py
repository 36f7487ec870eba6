"""Brokers-without-data for controller tests: each "broker" is a real kazoo session with its
registration and a Controller, whose requests go to a RecordingChannel. Every request body is
encoded and decoded with the wire schemas on the way, so what the controller builds is what
the integration will put on the wire."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from appliance.cluster.controller import Controller
from appliance.cluster.registry import BrokerRegistry
from appliance.cluster.request_batch import STOP_REPLICA, BrokerChannel
from appliance.cluster.zk_paths import BrokerInfo, LeaderIsr
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.protocol.messages.cluster import INTER_BROKER_APIS
from tests.broker_process import BrokerProcess

__all__ = ["RecordingChannel", "FakeBroker", "wait_for", "force_isr", "cluster_metadata", "brokers_known",
           "settled_controller", "start_brokers", "kill_brokers", "wait_joined", "cluster_broker", "log_bytes"]


def wait_for(pred, timeout: float = 30.0, what: str = "the condition", step: float = 0.05):
    """Poll ``pred`` until it returns something truthy; that value, or AssertionError naming
    ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def settled_controller(fake_brokers: Iterable[FakeBroker], timeout: float = 30.0) -> FakeBroker:
    """The one active controller among ``fake_brokers``, once it has taken in all their
    registrations. Being active is not enough: a controller elected while the others were still
    registering loads the live brokers first and learns of the rest in later events, and a topic
    created in between gets an ISR of the live replicas alone (as in Kafka), which no fake
    broker ever grows back."""
    bs = list(fake_brokers)
    ids = {b.broker_id for b in bs}

    def settled() -> FakeBroker | None:
        active = [b for b in bs if b.active]
        if len(active) == 1 and ids <= set(active[0].channel.brokers):
            return active[0]
        return None
    return wait_for(settled, timeout, f"a controller that knows brokers {sorted(ids)}")


def cluster_metadata(boot: str):
    """confluent-kafka's Metadata of a real cluster. A broker still joining (its cluster worker
    waits for ZooKeeper) closes the connection, a retriable error; list_topics raises it, so
    ask again for up to a minute."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + 60
    while True:
        try:
            return AdminClient({"bootstrap.servers": boot}).list_topics(timeout=10)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def brokers_known(boot: str, timeout: float = 10.0) -> int:
    """How many brokers Metadata lists now; 0 while no broker answers within ``timeout``."""
    from confluent_kafka.admin import AdminClient

    try:
        return len(AdminClient({"bootstrap.servers": boot}).list_topics(timeout=timeout).brokers)
    except Exception:  # a broker still joining closes the connection: ask again
        return 0


def cluster_broker(workdir: Path, connect: str, broker_id: int, port: int | None = None,
                   overrides: dict[str, str] | None = None, env: dict[str, str] | None = None) -> BrokerProcess:
    """A real broker of a test cluster (not started): one network worker and a 6 s ZooKeeper
    session, then ``overrides``."""
    workdir.mkdir(exist_ok=True)
    return BrokerProcess(workdir, port=port, overrides={
        "zookeeper.connect": connect, "broker.id": str(broker_id), "num.network.threads": "1",
        "zookeeper.session.timeout.ms": "6000", **(overrides or {})}, env=env)


def log_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """Every segment file of a partition in ``broker``'s first log dir, in offset order."""
    d = Path(broker.log_dirs[0]) / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def start_brokers(brokers: Iterable, timeout: float = 60.0) -> None:
    """Start real brokers (tests.broker_process.BrokerProcess) side by side: each start waits for
    its listener, and a cluster's brokers boot in parallel on a machine with more cores."""
    brokers = list(brokers)
    with ThreadPoolExecutor(len(brokers)) as pool:
        list(pool.map(lambda b: b.start(timeout), brokers))


def kill_brokers(brokers: Iterable) -> None:
    """SIGKILL real brokers side by side: a module's teardown checks nothing, and the controlled
    shutdown of the last broker standing, with nowhere to move its leadership, only retries."""
    brokers = list(brokers)
    with ThreadPoolExecutor(len(brokers)) as pool:
        list(pool.map(lambda b: b.kill(), brokers))


def wait_joined(brokers: Iterable, count: int, timeout: float = 60.0) -> None:
    """Wait until every one of ``brokers`` answers Metadata itself listing ``count`` brokers: it
    has joined the cluster (a joining broker closes the connection instead) and the controller
    has told it who is live. A test that restarts brokers ends with this, so the next test of
    the module meets a whole cluster."""
    for b in brokers:
        # a short Metadata timeout: a joining broker closes the connection, and librdkafka would
        # retry it for the whole timeout before the next look
        wait_for(lambda b=b: brokers_known(b.bootstrap, 1.0) == count, timeout,
                 f"broker at {b.bootstrap} to know {count} brokers", step=0.2)


def force_isr(store, tp, isr) -> None:
    """What a leader does when a follower falls behind or catches up: write the ISR with a
    zkVersion-conditional update, then tell the controller."""
    def write():
        cur = store.partition_state(tp)
        # None = the controller changed the state meanwhile (a real leader would wait for its
        # LeaderAndIsr); read the new state and write again
        return store.update_partition_state(tp, LeaderIsr(cur.leader, cur.leader_epoch, tuple(isr),
                                                          cur.controller_epoch, cur.zk_version), None)
    wait_for(write)
    store.notify_isr_change({tp})


class RecordingChannel(BrokerChannel):
    """Keeps every request sent (decoded back from its wire bytes). StopReplica with delete is
    answered "done" for every partition unless ``answer_stop_replica`` is False."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, Any]] = []
        self.brokers: dict[int, BrokerInfo] = {}
        self.answer_stop_replica = True
        self._lock = threading.Lock()

    def add_broker(self, broker: BrokerInfo) -> None:
        self.brokers[broker.broker_id] = broker

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    def send(self, broker_id, api_key, api_version, body, on_response=None) -> None:
        api = INTER_BROKER_APIS[api_key]
        wire = api.encode_request(api_version, body)
        decoded = api.decode_request(api_version, wire)
        with self._lock:
            self.sent.append((broker_id, api_key, decoded))
        if api_key == STOP_REPLICA and on_response is not None and self.answer_stop_replica:
            on_response(broker_id, {"error_code": 0, "partition_errors": [
                {"topic_name": t.name, "partition_index": p, "error_code": 0}
                for t in decoded.topics for p in t.partition_indexes]})

    def requests(self, api_key: int, broker_id: int | None = None) -> list[Any]:
        with self._lock:
            return [body for b, k, body in self.sent if k == api_key and broker_id in (None, b)]

    def clear(self) -> None:
        with self._lock:
            self.sent.clear()


class FakeBroker:
    """A registered broker id with its own ZooKeeper session and controller (no data plane)."""

    def __init__(self, connect: str, broker_id: int, session_timeout_ms: int = 10000, **controller_kw) -> None:
        self.broker_id = broker_id
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.controller_kw = controller_kw
        self.channel = RecordingChannel()
        self.client = None
        self.controller: Controller | None = None

    def start(self) -> FakeBroker:
        # a generous connection timeout: the JVM of a fresh ZooKeeper can be slow on a busy machine
        self.client = open_session(ZkSettings(self.connect, self.session_timeout_ms, 30000))
        BrokerRegistry(self.client, BrokerInfo(self.broker_id, "127.0.0.1", 9000 + self.broker_id)).register()
        self.controller = Controller(self.client, self.broker_id, self.channel, **self.controller_kw)
        self.controller.start()
        return self

    @property
    def active(self) -> bool:
        return bool(self.controller and self.controller.active)

    def crash(self) -> None:
        """The broker dies: its session closes (ephemeral znodes go at once), nothing resigns."""
        self.controller._stopped.set()
        self.controller.events.close()
        self.client.stop()
        self.client.close()

    def stop(self) -> None:
        if self.client is None:
            return
        try:
            if self.controller is not None and not self.controller._stopped.is_set():
                self.controller.stop()
        finally:
            try:
                self.client.stop()
                self.client.close()
            except Exception:
                pass
