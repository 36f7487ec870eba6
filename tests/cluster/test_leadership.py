"""The broker side of controller requests: what a broker leads and follows, fenced by epochs.
Unit cases on wire-decoded requests, then the requests a real controller sent (through a real
ZooKeeper) replayed into each broker's table."""

import pytest

from appliance.cluster.assignment import assign_replicas
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.request_batch import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.errors import ErrorCode
from appliance.protocol.messages.cluster import LeaderAndIsr, StopReplica, UpdateMetadata
from tests.cluster.harness import FakeBroker, settled_controller, wait_for

TP = TopicPartition("t", 0)


def lai(controller_epoch, leader, leader_epoch, replicas=(1, 2), isr=None, controller_id=9, version=3):
    body = {"controller_id": controller_id, "controller_epoch": controller_epoch, "topic_states": [
        {"topic_name": "t", "partition_states": [
            {"partition_index": 0, "controller_epoch": controller_epoch, "leader": leader,
             "leader_epoch": leader_epoch, "isr": list(isr or replicas), "zk_version": leader_epoch,
             "replicas": list(replicas)}]}], "live_leaders": []}
    return LeaderAndIsr.decode_request(version, LeaderAndIsr.encode_request(version, body))


def codes(resp):
    return [e["error_code"] for e in resp["partition_errors"]]


def test_become_leader_then_follower_and_fencing():
    t = LeadershipTable(1)
    resp, ch = t.apply_leader_and_isr(lai(1, leader=1, leader_epoch=0))
    assert codes(resp) == [0] and ch.became_leader == [TP] and t.leads(TP)
    resp, ch = t.apply_leader_and_isr(lai(1, leader=1, leader_epoch=0))  # a resend changes nothing
    assert codes(resp) == [0] and ch.became_leader == [] and ch.became_follower == []
    resp, ch = t.apply_leader_and_isr(lai(2, leader=2, leader_epoch=1, isr=(2,)))
    assert ch.became_follower == [TP] and not t.leads(TP) and t.local[TP].isr == (2,)

    before = dict(t.local)
    resp, ch = t.apply_leader_and_isr(lai(1, leader=1, leader_epoch=5))  # the old controller
    assert resp["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH and codes(resp) == [ErrorCode.STALE_CONTROLLER_EPOCH]
    assert t.local == before and not ch.became_leader
    resp, ch = t.apply_leader_and_isr(lai(2, leader=1, leader_epoch=0))  # an older leader epoch
    assert codes(resp) == [ErrorCode.FENCED_LEADER_EPOCH] and t.local == before
    resp, _ = t.apply_leader_and_isr(lai(2, leader=3, leader_epoch=7, replicas=(3, 4)))  # not a replica here
    assert codes(resp) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] and t.local == before


def test_v1_ungrouped_requests_work_too():
    t = LeadershipTable(2)
    body = {"controller_id": 1, "controller_epoch": 1, "ungrouped_partition_states": [
        {"topic_name": "t", "partition_index": 0, "controller_epoch": 1, "leader": 2, "leader_epoch": 3,
         "isr": [2], "zk_version": 0, "replicas": [2]}], "live_leaders": []}
    _, ch = t.apply_leader_and_isr(LeaderAndIsr.decode_request(1, LeaderAndIsr.encode_request(1, body)))
    assert ch.became_leader == [TP]


def test_stop_replica_and_update_metadata():
    t = LeadershipTable(1)
    t.apply_leader_and_isr(lai(3, leader=1, leader_epoch=0))
    stale = StopReplica.decode_request(1, StopReplica.encode_request(1, {
        "controller_id": 9, "controller_epoch": 2, "delete_partitions": True,
        "topics": [{"name": "t", "partition_indexes": [0]}]}))
    resp, ch = t.apply_stop_replica(stale)
    assert resp["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH and TP in t.local and not ch.deleted
    req = StopReplica.decode_request(1, StopReplica.encode_request(1, {
        "controller_id": 9, "controller_epoch": 3, "delete_partitions": True,
        "topics": [{"name": "t", "partition_indexes": [0]}]}))
    resp, ch = t.apply_stop_replica(req)
    assert resp["error_code"] == 0 and ch.deleted == [TP] and TP not in t.local

    um = {"controller_id": 9, "controller_epoch": 3, "topic_states": [{"topic_name": "t", "partition_states": [
        {"partition_index": 0, "controller_epoch": 3, "leader": 2, "leader_epoch": 1, "isr": [2], "zk_version": 1,
         "replicas": [1, 2], "offline_replicas": [1]}]}],
        "live_brokers": [{"id": 2, "endpoints": [{"port": 9092, "host": "h2", "listener": "PLAINTEXT",
                                                  "security_protocol": 0}], "rack": None}]}
    assert t.apply_update_metadata(UpdateMetadata.decode_request(5, UpdateMetadata.encode_request(5, um))) == {"error_code": 0}
    assert t.live_brokers == {2: ("h2", 9092, None)} and t.metadata[TP].leader == 2 and t.metadata[TP].offline == (1,)
    um["topic_states"][0]["partition_states"][0]["leader"] = -2  # being deleted
    t.apply_update_metadata(UpdateMetadata.decode_request(5, UpdateMetadata.encode_request(5, um)))
    assert TP not in t.metadata


@pytest.fixture
def trio(zk_connect):
    bs = [FakeBroker(zk_connect, i, 10000).start() for i in (0, 1, 2)]
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    yield bs, ZkStore(client)
    client.stop()
    client.close()
    for b in bs:
        b.stop()


def replay(table, channel, broker_id):
    for b, key, req in list(channel.sent):
        if b != broker_id:
            continue
        if key == LEADER_AND_ISR:
            table.apply_leader_and_isr(req)
        elif key == STOP_REPLICA:
            table.apply_stop_replica(req)
        elif key == UPDATE_METADATA:
            table.apply_update_metadata(req)


def test_brokers_following_the_real_controller_agree_with_zookeeper(trio):
    bs, admin = trio
    ctrl = settled_controller(bs)
    victim = next(b for b in bs if b is not ctrl)
    admin.create_topic("r", assign_replicas([0, 1, 2], 6, 3))
    wait_for(lambda: len(admin.partition_states([TopicPartition("r", p) for p in range(6)])) == 6)
    victim.crash()
    zk = wait_for(lambda: (s := admin.partition_states([TopicPartition("r", p) for p in range(6)]))
                  and all(x.leader != victim.broker_id and victim.broker_id not in x.isr for x in s.values()) and s)
    ctrl.controller.wait_idle()
    for b in bs:
        if b is victim:
            continue
        t = LeadershipTable(b.broker_id)
        replay(t, ctrl.channel, b.broker_id)
        for tp, s in zk.items():
            assert (t.local[tp].leader, t.local[tp].leader_epoch, t.local[tp].isr) == (s.leader, s.leader_epoch, s.isr)
            assert t.metadata[tp].leader == s.leader
        assert set(t.live_brokers) == {0, 1, 2} - {victim.broker_id}
