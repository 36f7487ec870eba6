"""The leader's ISR rules (the HW rule is the disk worker's Partition: tests/broker/unit/test_partition.py), and a leader's ISR change travelling through ZooKeeper to the
controller (conditional write, notification, UpdateMetadata to every broker)."""

from appliance.cluster.assignment import assign_replicas
from appliance.cluster.isr import (
    PROPAGATION_MIN_INTERVAL_MS,
    IsrChangePropagator,
    caught_up_replicas,
    out_of_sync_replicas,
    propose_isr,
)
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.request_batch import UPDATE_METADATA
from appliance.cluster.zk_paths import LeaderIsr, TopicPartition, encode_partition_state
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from tests.cluster.harness import FakeBroker, settled_controller, wait_for
from tests.cluster.test_leadership import replay


def test_shrink_and_expand_rules():
    assert out_of_sync_replicas(1, [1, 2, 3], {2: 1000, 3: 11000}, now_ms=40000, lag_time_max_ms=30000) == {2}
    assert out_of_sync_replicas(1, [1, 2], {}, now_ms=5, lag_time_max_ms=30000) == {2}
    assert caught_up_replicas(1, [1, 2, 3], [1], {2: 70, 3: 69}, hw=70) == {2}


def test_propagation_at_once_but_not_more_often_than_the_floor(zk_connect):
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    try:
        store = ZkStore(client)
        client.ensure_path("/isr_change_notification")
        p = IsrChangePropagator(store)
        a, b = TopicPartition("a", 0), TopicPartition("b", 1)
        assert not p.maybe_propagate(0)  # nothing pending
        p.record(a)
        p.record(b)
        assert p.maybe_propagate(1000)  # the first change goes at once, one node for both
        assert store.take_isr_changes() == {a, b}
        p.record(a)  # a flapping ISR: held until the floor has passed, then announced
        assert not p.maybe_propagate(1000 + PROPAGATION_MIN_INTERVAL_MS - 1)
        assert store.take_isr_changes() == set()
        assert p.maybe_propagate(1000 + PROPAGATION_MIN_INTERVAL_MS)
        assert store.take_isr_changes() == {a}
    finally:
        client.stop()
        client.close()


def test_leader_isr_change_reaches_every_broker(zk_connect):
    bs = [FakeBroker(zk_connect, i, 10000).start() for i in (0, 1, 2)]
    client = open_session(ZkSettings(zk_connect, 30000, 30000))
    try:
        admin = ZkStore(client)
        ctrl = settled_controller(bs)
        admin.create_topic("i", assign_replicas([0, 1, 2], 1, 3, start_index=0))  # replicas (0, 1, 2)
        tp = TopicPartition("i", 0)
        wait_for(lambda: admin.partition_state(tp))
        ctrl.controller.wait_idle()
        leader = LeadershipTable(0)
        replay(leader, ctrl.channel, 0)
        held = leader.local[tp]
        assert held.leader == 0 and held.isr == (0, 1, 2)

        # follower 2 fell behind: the leader shrinks the ISR and announces it
        shrunk = propose_isr(admin, tp, held, (0, 1))
        assert shrunk is not None and shrunk.zk_version == held.zk_version + 1
        # a stale zkVersion writes nothing: at this leader's epoch the conflict is its own
        # earlier write (whose answer may have been lost), so the znode's state is taken up
        again = propose_isr(admin, tp, held, (0,))
        assert again is not None and again.isr == (0, 1) and again.zk_version == shrunk.zk_version
        assert admin.partition_state(tp).isr == (0, 1)
        assert propose_isr(admin, tp, held, (0, 1)) == shrunk  # it had landed: as written
        ctrl.channel.clear()
        p = IsrChangePropagator(admin)
        p.record(tp)
        assert p.maybe_propagate(0)
        for b in (0, 1, 2):
            um = wait_for(lambda b=b: [ps for r in ctrl.channel.requests(UPDATE_METADATA, b)
                                       for ts in r.topic_states for ps in ts.partition_states])
            assert um[-1].isr == [0, 1] and um[-1].zk_version == shrunk.zk_version
        # a write of the controller bumps the leader epoch: then the leader waits for its word
        cur = admin.partition_state(tp)
        admin.client.set("/brokers/topics/i/partitions/0/state", encode_partition_state(
            LeaderIsr(cur.leader, cur.leader_epoch + 1, cur.isr, cur.controller_epoch, cur.zk_version)))
        assert propose_isr(admin, tp, shrunk, (0,)) is None
        assert admin.partition_state(tp).isr == (0, 1)
    finally:
        client.stop()
        client.close()
        for b in bs:
            b.stop()
