"""The controller talking to brokers over real TCP with the Kafka wire protocol. Each broker
here is a small server that decodes the inter-broker requests with our schemas, applies them to
a LeadershipTable and answers; the controller is the real one, on a real ZooKeeper."""

import socket
import threading
import time

import pytest

from appliance.cluster.assignment import assign_replicas
from appliance.cluster.controller import Controller
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.registry import BrokerRegistry
from appliance.cluster.request_batch import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from appliance.cluster.wire_channel import WireChannel, encode_request
from appliance.cluster.zk_paths import BrokerInfo, TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode
from appliance.protocol.frames import RESPONSE_HEADER, SIZE, parse_request_header
from appliance.protocol.messages.cluster import LeaderAndIsr
from appliance.protocol.registry import inter_broker_api_for_key
from tests.cluster.harness import wait_for


class MiniBroker:
    """Accepts controller connections and answers LeaderAndIsr / StopReplica / UpdateMetadata."""

    def __init__(self, broker_id: int) -> None:
        self.table = LeadershipTable(broker_id)
        self.lock = threading.Lock()
        self.requests = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = conn.recv(SIZE.unpack(head)[0], socket.MSG_WAITALL)
                key, version, corr, client_id, pos = parse_request_header(frame)
                api = inter_broker_api_for_key(key)
                req = api.decode_request(version, frame[pos:])
                with self.lock:
                    self.requests.append((key, client_id, req))
                    if key == LEADER_AND_ISR:
                        body, _ = self.table.apply_leader_and_isr(req)
                    elif key == STOP_REPLICA:
                        body, _ = self.table.apply_stop_replica(req)
                    else:
                        body = self.table.apply_update_metadata(req)
                out = RESPONSE_HEADER.pack(corr) + api.encode_response(version, body)
                conn.sendall(SIZE.pack(len(out)) + out)
        except OSError:
            return

    def close(self):
        self.stopped = True
        self.server.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def cluster(zk_connect):
    minis = {i: MiniBroker(i) for i in (0, 1, 2)}
    members = {}
    for i, m in minis.items():
        client = open_session(ZkSettings(zk_connect, 10000, 30000))
        BrokerRegistry(client, BrokerInfo(i, "127.0.0.1", m.port)).register()
        channel = WireChannel(client_id=f"controller-{i}")
        ctrl = Controller(client, i, channel)
        ctrl.start()
        members[i] = (client, channel, ctrl)
    admin_client = open_session(ZkSettings(zk_connect, 30000, 30000))
    yield minis, members, ZkStore(admin_client)
    admin_client.stop()
    admin_client.close()
    for client, channel, ctrl in members.values():
        if not ctrl._stopped.is_set():
            ctrl.stop()
        channel.close()
        client.stop()
        client.close()
    for m in minis.values():
        m.close()


def test_brokers_learn_leadership_over_the_wire(cluster):
    minis, members, admin = cluster
    ctrl_id = wait_for(lambda: admin.controller_id() + 1) - 1
    admin.create_topic("w", assign_replicas([0, 1, 2], 3, 3))
    zk = wait_for(lambda: (s := admin.partition_states([TopicPartition("w", p) for p in range(3)])) and len(s) == 3 and s)
    for m in minis.values():
        wait_for(lambda m=m: all(tp in m.table.local for tp in zk))
        with m.lock:
            for tp, s in zk.items():
                assert (m.table.local[tp].leader, m.table.local[tp].leader_epoch) == (s.leader, s.leader_epoch)
            assert m.table.fence.epoch == admin.controller_epoch()[0]
            assert {c for _, c, _ in m.requests} == {f"controller-{ctrl_id}"}

    # a follower broker dies: the survivors hear of the new leaders over the wire
    victim = next(i for i in minis if i != ctrl_id)
    client, channel, ctrl = members[victim]
    ctrl._stopped.set()
    ctrl.events.close()
    channel.close()
    client.stop()
    client.close()
    minis[victim].close()
    after = wait_for(lambda: (s := admin.partition_states(list(zk)))
                     and all(x.leader != victim and victim not in x.isr for x in s.values()) and s)
    for i in minis:
        if i == victim:
            continue
        m = minis[i]
        wait_for(lambda m=m: all(m.table.local[tp].leader_epoch == s.leader_epoch for tp, s in after.items()))
        assert all(m.table.local[tp].leader == s.leader for tp, s in after.items())
        assert victim not in m.table.live_brokers

    # the dead broker's replicas cannot be deleted: deletion waits for it (Kafka's rule)
    admin.request_topic_deletion("w")
    members[ctrl_id][2].wait_idle()
    assert "w" in admin.topics()


def test_deletion_completes_by_stop_replica_answers_over_the_wire(cluster):
    minis, members, admin = cluster
    wait_for(lambda: admin.controller_id() != -1)
    admin.create_topic("gone", assign_replicas([0, 1, 2], 2, 2))
    tps = [TopicPartition("gone", p) for p in range(2)]
    wait_for(lambda: all(any(tp in m.table.local for m in minis.values()) for tp in tps))
    admin.request_topic_deletion("gone")
    wait_for(lambda: "gone" not in admin.topics())
    for m in minis.values():
        with m.lock:
            assert not any(tp.topic == "gone" for tp in m.table.local)
            assert not any(tp.topic == "gone" for tp in m.table.metadata)


def test_old_controller_refused_over_the_wire(cluster):
    minis, members, admin = cluster
    wait_for(lambda: admin.controller_id() != -1)
    epoch = admin.controller_epoch()[0]
    m = minis[0]
    wait_for(lambda: m.table.fence.epoch == epoch)
    stale = {"controller_id": 7, "controller_epoch": epoch - 1, "broker_epoch": -1, "topic_states": [
        {"topic_name": "z", "partition_states": [{"partition_index": 0, "controller_epoch": epoch - 1, "leader": 0,
                                                  "leader_epoch": 9, "isr": [0], "zk_version": 0, "replicas": [0]}]}],
        "live_leaders": []}
    with socket.create_connection(("127.0.0.1", m.port)) as s:
        s.sendall(encode_request(LEADER_AND_ISR, 3, 99, "old-controller", stale))
        size = SIZE.unpack(s.recv(4, socket.MSG_WAITALL))[0]
        frame = s.recv(size, socket.MSG_WAITALL)
    assert RESPONSE_HEADER.unpack_from(frame)[0] == 99
    resp = LeaderAndIsr.decode_response(3, frame[RESPONSE_HEADER.size:])
    assert resp.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert TopicPartition("z", 0) not in m.table.local
    assert any(k == UPDATE_METADATA for k, _, _ in m.requests)


def test_controller_socket_timeout_resends_on_a_new_connection():
    """controller.socket.timeout.ms: a broker that takes the request and never answers is given
    it again on a new connection once the timeout has passed (not after Kafka's default 30 s)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[tuple[float, socket.socket]] = []

    def accept():
        while len(accepted) < 2:
            conn, _ = server.accept()
            accepted.append((time.monotonic(), conn))

    threading.Thread(target=accept, daemon=True).start()
    channel = WireChannel(client_id="controller-9", request_timeout_s=0.3)
    try:
        channel.add_broker(BrokerInfo(1, "127.0.0.1", server.getsockname()[1]))
        channel.send(1, STOP_REPLICA, 1, {"controller_id": 9, "controller_epoch": 1,
                                          "delete_partitions": False, "topics": []})
        wait_for(lambda: len(accepted) == 2, 10, "the request sent again")
        assert 0.3 <= accepted[1][0] - accepted[0][0] < 5
    finally:
        channel.close()
        for _, conn in accepted:
            conn.close()
        server.close()
