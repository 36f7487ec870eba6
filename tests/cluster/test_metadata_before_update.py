"""A broker that has joined but not yet heard UpdateMetadata from the controller (just started,
or the controller's first try failed and waits to retry) still tells a client who the controller
is and which brokers are live, read from a real ZooKeeper: librdkafka's admin client, told "no
controller", waits for a broker to change state before it asks again, and a CreateTopics sent in
that window sat until its timeout. Once UpdateMetadata has come, its view is what is answered;
with ZooKeeper unreachable at that moment, what the broker has (no error, no closed link)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from appliance.cluster import zk_paths as zp
from appliance.cluster.broker_answers import describe_cluster_body, metadata_body
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.registry import BrokerRegistry
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore


def _register(store, broker_id: int, port: int) -> None:
    BrokerRegistry(store.client, zp.BrokerInfo(broker_id, "127.0.0.1", port, rack=f"r{broker_id}")).register()


def _metadata(table: LeadershipTable, store) -> dict:
    return asyncio.run(metadata_body(table, store, {}, SimpleNamespace(topics=None), 9))


def test_before_update_metadata_the_view_is_zookeepers(admin):
    for b, port in ((0, 9092), (1, 9093), (2, 9094)):
        _register(admin, b, port)
    assert admin.try_become_controller(2) is not None
    table = LeadershipTable(1)  # joined; nothing from the controller yet

    md = _metadata(table, admin)
    assert md["controller_id"] == 2
    assert [(b["node_id"], b["port"], b["rack"]) for b in md["brokers"]] == [
        (0, 9092, "r0"), (1, 9093, "r1"), (2, 9094, "r2")]
    dc = asyncio.run(describe_cluster_body(table, admin))
    assert dc["controller_id"] == 2 and [b["broker_id"] for b in dc["brokers"]] == [0, 1, 2]


def test_no_controller_in_zookeeper_answers_none(admin):
    _register(admin, 0, 9092)
    md = _metadata(LeadershipTable(0), admin)
    assert md["controller_id"] == -1 and [b["node_id"] for b in md["brokers"]] == [0]


def test_after_update_metadata_the_controllers_view_is_answered(admin):
    _register(admin, 0, 9092)
    assert admin.try_become_controller(0) is not None
    table = LeadershipTable(1)
    # the controller's view wins even where ZooKeeper says otherwise (it is the one the
    # controller fences and orders; ZooKeeper is only the fallback before it arrives)
    table.apply_update_metadata(SimpleNamespace(controller_id=3, controller_epoch=7, live_brokers=[
        SimpleNamespace(id=3, endpoints=[SimpleNamespace(host="127.0.0.1", port=9999)], rack=None)],
        topic_states=[], ungrouped_partition_states=[]))
    md = _metadata(table, admin)
    assert md["controller_id"] == 3 and [(b["node_id"], b["port"]) for b in md["brokers"]] == [(3, 9999)]


def test_zookeeper_unreachable_answers_what_the_broker_has(zk_connect):
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    store = ZkStore(client)
    _register(store, 0, 9092)
    client.stop()  # every call now fails (kazoo's ConnectionClosedError)
    client.close()
    md = _metadata(LeadershipTable(0), store)
    assert md["controller_id"] == -1 and md["brokers"] == []
