"""The controller against a real ZooKeeper: three brokers' sessions and controllers in this
process (separate kazoo clients), requests recorded instead of sent."""

from collections import Counter

import pytest
from kazoo.exceptions import NodeExistsError

from appliance.cluster.assignment import assign_replicas
from appliance.cluster.controller import PREFERRED, UNCLEAN, Controller
from appliance.cluster.epoch_fence import ControllerEpochFence
from appliance.cluster.events import ControlledShutdown, ElectLeaders
from appliance.cluster.partition_state import PartitionState
from appliance.cluster.request_batch import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from appliance.cluster.zk_paths import LeaderIsr, TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ControllerMoved, TopicCollision, TopicExists, ZkStore
from appliance.errors import ErrorCode
from tests.cluster.harness import FakeBroker, force_isr, settled_controller, wait_for
from tests.cluster.zk import expire_session

SESSION_MS = 10000  # long enough that a heavily loaded machine never expires a session by accident


@pytest.fixture
def brokers(zk_connect):
    made: list[FakeBroker] = []

    def start(*ids, **kw):
        out = [FakeBroker(zk_connect, i, SESSION_MS, **kw).start() for i in ids]
        made.extend(out)
        return out

    yield start
    for b in made:
        b.stop()


def states(admin, topic, n):
    return admin.partition_states([TopicPartition(topic, p) for p in range(n)])


def wait_states(admin, topic, n, pred=lambda s: True, timeout=30):
    return wait_for(lambda: (s := states(admin, topic, n)) and len(s) == n and all(map(pred, s.values())) and s,
                    timeout)


def test_one_controller_elected_epoch_one(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    assert admin.controller_id() == ctrl.broker_id
    assert admin.controller_epoch()[0] == 1
    for b in bs:
        b.controller.wait_idle()
        assert b.controller.active_controller_id == ctrl.broker_id
    # the controller told every live broker who is alive (UpdateMetadata)
    um = wait_for(lambda: ctrl.channel.requests(UPDATE_METADATA, 0))
    assert um[-1].controller_epoch == 1 and um[-1].controller_id == ctrl.broker_id


def test_failover_when_controller_session_expires_and_stale_epoch_fenced(zk_server, brokers, admin):
    bs = brokers(0, 1, 2)
    old = settled_controller(bs)
    old_epoch, old_zkv = admin.controller_epoch()
    fence = ControllerEpochFence()
    assert fence.admit(old.broker_id, old_epoch) == ErrorCode.NONE

    expire_session(old.client, zk_server.connect)
    # a new controller within the session timeout (plus slack for a loaded machine)
    new = settled_controller([b for b in bs if b is not old], timeout=SESSION_MS / 1000 + 20)
    assert new is not old
    assert wait_for(lambda: admin.controller_epoch()[0] == old_epoch + 1)
    assert wait_for(lambda: not old.active)

    # a broker that saw the new epoch refuses the old controller, state unchanged
    assert fence.admit(new.broker_id, old_epoch + 1) == ErrorCode.NONE
    assert fence.admit(old.broker_id, old_epoch) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert (fence.epoch, fence.controller_id) == (old_epoch + 1, new.broker_id)
    assert ControllerEpochFence.admit_leader_epoch(5, 4) == ErrorCode.FENCED_LEADER_EPOCH
    assert ControllerEpochFence.admit_leader_epoch(5, 5) == ErrorCode.NONE

    # and ZooKeeper refuses its writes: they are conditional on the old epoch znode version
    admin.create_topic("t", {0: (0, 1, 2)})
    tp = TopicPartition("t", 0)
    s = wait_for(lambda: admin.partition_state(tp))
    with pytest.raises(ControllerMoved):
        admin.update_partition_state(tp, LeaderIsr(1, s.leader_epoch + 1, (1,), old_epoch, s.zk_version), old_zkv)
    assert admin.partition_state(tp) == s

    # the expired broker re-registers and takes part again (not as controller)
    assert wait_for(lambda: old.broker_id in admin.broker_ids())


def test_a_version_conflict_is_not_a_new_controller(admin):
    """A controller write that loses to the leader's own ISR write (its zkVersion moved) is
    re-read and decided again; only a changed controller epoch means another controller."""
    epoch, epoch_zkv = admin.try_become_controller(0)
    tp = TopicPartition("t", 0)
    s = admin.create_partition_state(tp, LeaderIsr(0, 0, (0, 1), epoch), epoch_zkv)
    grown = admin.update_partition_state(tp, LeaderIsr(0, 0, (0,), epoch, s.zk_version), None)  # the leader's
    assert grown is not None and grown.zk_version == s.zk_version + 1
    assert admin.update_partition_state(tp, LeaderIsr(1, 1, (1,), epoch, s.zk_version), epoch_zkv) is None
    with pytest.raises(NodeExistsError):
        admin.create_partition_state(tp, LeaderIsr(0, 0, (0,), epoch), epoch_zkv)
    moved = admin.update_partition_state(tp, LeaderIsr(1, 1, (1,), epoch, grown.zk_version), epoch_zkv)
    assert moved is not None and admin.partition_state(tp) == moved
    with pytest.raises(ControllerMoved):  # another epoch version still fences, whatever the zkVersion
        admin.update_partition_state(tp, LeaderIsr(0, 2, (0,), epoch, moved.zk_version), epoch_zkv + 1)


def test_topic_creation_spreads_leaders_and_sends_leader_and_isr(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    assignment = assign_replicas([0, 1, 2], 6, 3)
    admin.create_topic("orders", assignment, {"min.insync.replicas": "2"})
    got = wait_states(admin, "orders", 6)
    for p, s in sorted((tp.partition, s) for tp, s in got.items()):
        assert s.leader == assignment[p][0] and s.isr == assignment[p] and s.leader_epoch == 0
        assert s.controller_epoch == ctrl.controller.epoch
    assert Counter(s.leader for s in got.values()) == {0: 2, 1: 2, 2: 2}
    ctrl.controller.wait_idle()
    for b in (0, 1, 2):
        lai = [ps for req in ctrl.channel.requests(LEADER_AND_ISR, b)
               for ts in req.topic_states if ts.topic_name == "orders" for ps in ts.partition_states]
        assert sorted(ps.partition_index for ps in lai) == list(range(6))  # every replica is on every broker
        assert all(ps.is_new for ps in lai)
    assert ctrl.channel.requests(UPDATE_METADATA, 1)


def test_broker_death_elects_from_isr_and_bumps_leader_epoch(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    victim = next(b for b in bs if b is not ctrl)
    admin.create_topic("t", assign_replicas([0, 1, 2], 6, 3))
    before = wait_states(admin, "t", 6)
    led = {tp for tp, s in before.items() if s.leader == victim.broker_id}
    assert led

    victim.crash()
    after = wait_states(admin, "t", 6, lambda s: s.leader != victim.broker_id and victim.broker_id not in s.isr)
    for tp in led:
        old, new = before[tp], after[tp]
        assert new.leader_epoch == old.leader_epoch + 1
        # first live replica in the ISR, in replica-list order
        assert new.leader == [r for r in admin.assignment("t").partitions[tp.partition] if r != victim.broker_id][0]
    ctrl.controller.wait_idle()
    lai = ctrl.channel.requests(LEADER_AND_ISR)
    assert all(ps.leader != victim.broker_id for req in lai[-2:] for ts in req.topic_states for ps in ts.partition_states)


def test_unclean_election_off_keeps_partition_offline_until_asked(brokers, admin):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    other = next(b for b in bs if b is not ctrl)
    tp = TopicPartition("u", 0)
    admin.create_topic("u", {0: (other.broker_id, ctrl.broker_id)})
    wait_for(lambda: admin.partition_state(tp))
    force_isr(admin, tp, [other.broker_id])  # the controller's broker fell out of sync

    other.crash()
    s = wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == -1 and s)
    assert s.isr == (other.broker_id,)  # the last in-sync replica stays, for a clean election later
    ctrl.controller.wait_idle()
    assert admin.partition_state(tp).leader == -1

    replies = []
    ctrl.controller.put(ElectLeaders(PREFERRED, {tp}, replies.append))
    ctrl.controller.put(ElectLeaders(UNCLEAN, {tp, TopicPartition("nope", 0)}, replies.append))
    wait_for(lambda: len(replies) == 2)
    pref, unclean = ({(r["topic"], x["partition_id"]): x["error_code"]
                      for r in rep["replica_election_results"] for x in r["partition_result"]} for rep in replies)
    assert pref == {("u", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert unclean == {("u", 0): ErrorCode.NONE, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    s2 = admin.partition_state(tp)
    assert (s2.leader, s2.isr, s2.leader_epoch) == (ctrl.broker_id, (ctrl.broker_id,), s.leader_epoch + 1)


def test_unclean_election_on_by_topic_config(brokers, admin):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    other = next(b for b in bs if b is not ctrl)
    tp = TopicPartition("w", 0)
    admin.create_topic("w", {0: (other.broker_id, ctrl.broker_id)}, {"unclean.leader.election.enable": "true"})
    wait_for(lambda: admin.partition_state(tp))
    force_isr(admin, tp, [other.broker_id])
    other.crash()
    s = wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == ctrl.broker_id and s)
    assert s.isr == (ctrl.broker_id,)


def test_controlled_shutdown_moves_leadership_off_the_broker(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    leaving = next(b for b in bs if b is not ctrl).broker_id
    admin.create_topic("c", assign_replicas([0, 1, 2], 6, 3))
    wait_states(admin, "c", 6)
    replies = []
    ctrl.controller.put(ControlledShutdown(leaving, replies.append))
    wait_for(lambda: replies)
    assert replies[0] == {"error_code": 0, "remaining_partitions": []}
    after = states(admin, "c", 6)
    assert all(s.leader != leaving and leaving not in s.isr for s in after.values())
    ctrl.controller.wait_idle()
    stops = ctrl.channel.requests(STOP_REPLICA, leaving)
    assert stops and not stops[-1].delete_partitions  # it stops following, keeps its data


def test_reassignment_rf1_to_rf3_waits_for_catch_up(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    tp = TopicPartition("r", 0)
    admin.create_topic("r", {0: (0,)})
    s0 = wait_for(lambda: admin.partition_state(tp))
    admin.request_reassignment({tp: (0, 1, 2)})

    # phase 1: the replica set is target + original, the new replicas are told to follow
    wait_for(lambda: admin.assignment("r").adding == {0: (1, 2)})
    ctrl.controller.wait_idle()
    assert admin.assignment("r").partitions == {0: (0, 1, 2)}
    for b in (1, 2):
        lai = [ps for req in ctrl.channel.requests(LEADER_AND_ISR, b) for ts in req.topic_states
               for ps in ts.partition_states if ts.topic_name == "r"]
        assert lai and lai[-1].leader == 0 and lai[-1].replicas == [0, 1, 2] and lai[-1].adding_replicas == [1, 2]
    assert admin.reassignment() == {tp: (0, 1, 2)}  # not done until they catch up

    # the leader sees them catch up and expands the ISR: the catch-up signal
    force_isr(admin, tp, [0, 1, 2])
    wait_for(lambda: admin.reassignment() == {})
    a = admin.assignment("r")
    assert a.partitions == {0: (0, 1, 2)} and a.adding == {} and a.removing == {}
    s = admin.partition_state(tp)
    assert s.leader == 0 and s.isr == (0, 1, 2) and s.leader_epoch > s0.leader_epoch


def test_reassignment_moves_leadership_and_drops_old_replicas(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    tp = TopicPartition("m", 0)
    admin.create_topic("m", {0: (0, 1)})
    wait_for(lambda: admin.partition_state(tp))
    admin.request_reassignment({tp: (2, 1)})
    wait_for(lambda: admin.assignment("m").removing == {0: (0,)})
    force_isr(admin, tp, [0, 1, 2])
    wait_for(lambda: admin.reassignment() == {})
    s = admin.partition_state(tp)
    assert s.leader == 2 and set(s.isr) == {1, 2}
    assert admin.assignment("m").partitions == {0: (2, 1)}
    ctrl.controller.wait_idle()
    assert any(r.delete_partitions for r in ctrl.channel.requests(STOP_REPLICA, 0))


def test_reassignment_to_unknown_broker_or_partition_is_refused(brokers, admin):
    bs = brokers(0, 1)
    settled_controller(bs)
    admin.create_topic("x", {0: (0, 1)})
    s = wait_for(lambda: admin.partition_state(TopicPartition("x", 0)))
    admin.request_reassignment({TopicPartition("x", 0): (0, 7), TopicPartition("x", 5): (0, 1)})
    wait_for(lambda: admin.reassignment() == {})
    assert admin.assignment("x").partitions == {0: (0, 1)}
    assert admin.partition_state(TopicPartition("x", 0)) == s


def test_preferred_replica_election_after_leader_returns(zk_server, brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    pref = next(b for b in bs if b is not ctrl)
    tp = TopicPartition("p", 0)
    follower = next(b.broker_id for b in bs if b is not pref and b is not ctrl)
    admin.create_topic("p", {0: (pref.broker_id, follower, ctrl.broker_id)})
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == pref.broker_id)
    expire_session(pref.client, zk_server.connect)  # leader goes, comes back on a new session
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == follower)
    wait_for(lambda: pref.broker_id in admin.broker_ids())
    force_isr(admin, tp, [follower, ctrl.broker_id, pref.broker_id])  # it caught up again
    admin.request_preferred_election({tp})
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == pref.broker_id)
    wait_for(lambda: not admin.client.exists("/admin/preferred_replica_election"))


def test_topic_deletion_stops_and_deletes_replicas(brokers, admin):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    admin.create_topic("gone", {0: (0, 1), 1: (1, 0)})
    wait_states(admin, "gone", 2)
    admin.request_topic_deletion("gone")
    wait_for(lambda: "gone" not in admin.topics())
    wait_for(lambda: admin.topics_to_delete() == [])
    assert admin.topic_config("gone") == {}
    ctrl.controller.wait_idle()
    for b in (0, 1):
        assert any(r.delete_partitions and {t.name for t in r.topics} == {"gone"}
                   for r in ctrl.channel.requests(STOP_REPLICA, b))
    um = [ps for r in ctrl.channel.requests(UPDATE_METADATA) for ts in r.topic_states if ts.topic_name == "gone"
          for ps in ts.partition_states]
    assert any(ps.leader == -2 for ps in um)  # "being deleted" went out before the stop


def test_new_controller_takes_over_existing_state(brokers, admin):
    bs = brokers(0, 1, 2)
    ctrl = settled_controller(bs)
    admin.create_topic("k", assign_replicas([0, 1, 2], 3, 3))
    before = wait_states(admin, "k", 3)
    ctrl.crash()
    rest = [b for b in bs if b is not ctrl]
    new = settled_controller(rest, timeout=SESSION_MS / 1000 + 20)
    after = wait_states(admin, "k", 3, lambda s: s.leader != ctrl.broker_id and ctrl.broker_id not in s.isr)
    for tp, s in after.items():
        if before[tp].leader != ctrl.broker_id:
            assert s.leader == before[tp].leader  # leaders that did not die keep leading
    new.controller.wait_idle()
    # the survivors heard the new epoch in LeaderAndIsr for all their partitions
    for b in rest:
        epochs = {r.controller_epoch for r in new.channel.requests(LEADER_AND_ISR, b.broker_id)}
        assert new.controller.epoch in epochs


def test_topic_creation_refuses_existing_and_colliding_names(admin):
    admin.create_topic("a.b", {0: (0,)})
    with pytest.raises(TopicExists):
        admin.create_topic("a.b", {0: (0,)})
    with pytest.raises(TopicCollision, match="'a_b' collides with existing topics: a.b"):
        admin.create_topic("a_b", {0: (0,)})
    assert admin.topics() == ["a.b"]


def test_partition_waits_for_its_only_replica_to_register(zk_connect, brokers, admin):
    bs = brokers(0)
    settled_controller(bs)
    tp = TopicPartition("later", 0)
    admin.create_topic("later", {0: (5,)})
    bs[0].controller.wait_idle()
    assert admin.partition_state(tp) is None  # nobody to lead it yet
    brokers(5)
    s = wait_for(lambda: admin.partition_state(tp))
    assert (s.leader, s.isr) == (5, (5,))


def test_deletion_waits_for_a_dead_replica_and_finishes_when_it_returns(zk_connect, brokers, admin):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    other = next(b for b in bs if b is not ctrl)
    admin.create_topic("d", {0: (0, 1)})
    wait_for(lambda: admin.partition_state(TopicPartition("d", 0)))
    other.crash()
    wait_for(lambda: other.broker_id not in admin.broker_ids())
    admin.request_topic_deletion("d")
    ctrl.controller.wait_idle()
    assert "d" in admin.topics()  # the replica on the dead broker cannot be deleted yet
    brokers(other.broker_id)  # it comes back
    wait_for(lambda: "d" not in admin.topics())
    wait_for(lambda: admin.topics_to_delete() == [])  # removed just after the topic znode


def test_controlled_shutdown_and_elect_leaders_on_a_non_controller(brokers):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    other = next(b for b in bs if b is not ctrl)
    on_other, on_ctrl = [], []
    other.controller.put(ControlledShutdown(ctrl.broker_id, on_other.append))
    other.controller.put(ElectLeaders(PREFERRED, None, on_other.append))
    ctrl.controller.put(ControlledShutdown(42, on_ctrl.append))  # not a registered broker
    wait_for(lambda: len(on_other) == 2 and on_ctrl)
    assert [r["error_code"] for r in on_other] == [ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_CONTROLLER]
    assert on_ctrl[0]["error_code"] == ErrorCode.BROKER_NOT_AVAILABLE


def test_auto_leader_rebalance_moves_leadership_back(zk_server, brokers, admin):
    bs = brokers(0, 1, auto_leader_rebalance=True, imbalance_check_interval_s=0.5)
    ctrl = settled_controller(bs)
    pref = next(b for b in bs if b is not ctrl)
    tp = TopicPartition("bal", 0)
    admin.create_topic("bal", {0: (pref.broker_id, ctrl.broker_id)})
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == pref.broker_id)
    expire_session(pref.client, zk_server.connect)
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == ctrl.broker_id)
    wait_for(lambda: pref.broker_id in admin.broker_ids())
    force_isr(admin, tp, [ctrl.broker_id, pref.broker_id])  # caught up: now it can lead again
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == pref.broker_id)


def test_failed_preferred_election_leaves_the_partition_online(brokers, admin):
    bs = brokers(0, 1)
    ctrl = settled_controller(bs)
    other = next(b for b in bs if b is not ctrl)
    tp = TopicPartition("f", 0)
    admin.create_topic("f", {0: (other.broker_id, ctrl.broker_id)})
    wait_for(lambda: admin.partition_state(tp))
    other.crash()  # the preferred replica is gone; the controller's broker leads
    wait_for(lambda: (s := admin.partition_state(tp)) and s.leader == ctrl.broker_id)
    replies = []
    ctrl.controller.put(ElectLeaders(PREFERRED, {tp}, replies.append))
    wait_for(lambda: replies)
    codes = [p["error_code"] for r in replies[0]["replica_election_results"] for p in r["partition_result"]]
    assert codes == [ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE]
    ctrl.controller.wait_idle()
    assert ctrl.controller.ctx.partition_states[tp] is PartitionState.ONLINE
    assert admin.partition_state(tp).leader == ctrl.broker_id


def test_controller_adopts_its_own_election_whose_answer_was_lost(zk_connect, admin):
    """The election transaction went through but the answer was lost (connection loss): the
    retried election finds /controller held by its own session and takes the epoch it made."""
    b = FakeBroker(zk_connect, 3, SESSION_MS)
    b.client = open_session(ZkSettings(zk_connect, SESSION_MS, 30000))
    try:
        epoch, _ = ZkStore(b.client).try_become_controller(3)  # as if the answer never arrived
        b.controller = Controller(b.client, 3, b.channel)
        b.controller.start()
        wait_for(lambda: b.active)
        assert b.controller.epoch == epoch == admin.controller_epoch()[0]
        assert admin.controller_id() == 3
    finally:
        b.stop()
