"""The controller's reassignment (cluster/partition_reassignment.py) where it meets the
controller: the hand-over of its events, and a new controller carrying on a reassignment it
found in the topic znode. In-process controllers against a real ZooKeeper; start, redirect,
cancel and bad input are in test_reassignment_tool.py, the znode path in test_controller.py."""

import threading

import pytest

from appliance.cluster import events as ev
from appliance.cluster.zk_paths import TopicPartition
from appliance.errors import ErrorCode
from tests.cluster.harness import FakeBroker, force_isr, settled_controller, wait_for

SESSION_MS = 10000


@pytest.fixture
def three(zk_connect):
    bs = [FakeBroker(zk_connect, i, SESSION_MS).start() for i in (0, 1, 2)]
    yield bs
    for b in bs:
        b.stop()


def _ask(controller, make):
    got = []
    done = threading.Event()

    def reply(body):
        got.append(body)
        done.set()

    controller.put(make(reply))
    assert done.wait(30), "the controller did not reply"
    return got[0]


def test_a_controller_that_is_not_active_answers_none(three):
    ctrl = settled_controller(three)
    other = next(b for b in three if b is not ctrl).controller
    tp = TopicPartition("t", 0)
    assert _ask(other, lambda r: ev.AlterPartitionReassignments({tp: (0, 1)}, r)) is None
    assert _ask(other, lambda r: ev.ListPartitionReassignments(None, r)) is None


def test_a_new_controller_completes_a_reassignment_in_the_topic_znode(three, admin):
    """The reassignment state lives in the topic znode's adding/removing replicas: a controller
    elected mid-move lists it and completes it once the target replicas are in sync."""
    ctrl = settled_controller(three)
    x, y = (b.broker_id for b in three if b is not ctrl)
    tp = TopicPartition("m", 0)
    admin.create_topic("m", {0: (x,)})
    wait_for(lambda: admin.partition_state(tp))
    assert _ask(ctrl.controller, lambda r: ev.AlterPartitionReassignments({tp: (y,)}, r)) == \
        {tp: (ErrorCode.NONE, None)}
    assert admin.assignment("m").adding == {0: (y,)} and admin.assignment("m").removing == {0: (x,)}

    ctrl.crash()
    new = settled_controller([b for b in three if b is not ctrl], timeout=SESSION_MS / 1000 + 20)
    assert _ask(new.controller, lambda r: ev.ListPartitionReassignments(None, r)) == {tp: ((y, x), (y,), (x,))}

    force_isr(admin, tp, [x, y])  # the new replica caught up
    wait_for(lambda: (a := admin.assignment("m")) and a.partitions == {0: (y,)} and not a.adding)
    s = admin.partition_state(tp)
    assert s.leader == y and s.isr == (y,)
    assert _ask(new.controller, lambda r: ev.ListPartitionReassignments(None, r)) == {}
