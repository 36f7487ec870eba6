"""ZooKeeper killed and started again (same port, same data) within the session timeout: the
sessions survive, so registrations and the controller stay as they were, and the controller
goes on working with the watches kazoo re-arms on reconnect."""

import time

from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_session import ZkSettings, open_session
from appliance.cluster.zk_store import ZkStore
from tests.cluster.harness import FakeBroker, settled_controller, wait_for

SESSION_MS = 60000  # the server maximum: outlives the outage plus a slow JVM start on a loaded machine
OUTAGE_S = 2


def test_zookeeper_restart_within_session_timeout_changes_nothing(private_zk):
    connect = private_zk.connect + "/outage"
    bs = [FakeBroker(connect, i, SESSION_MS).start() for i in (0, 1)]
    admin_client = open_session(ZkSettings(connect, SESSION_MS))
    admin = ZkStore(admin_client)
    try:
        ctrl = settled_controller(bs)
        epoch = admin.controller_epoch()[0]
        owners = {b.broker_id: b.client.client_id[0] for b in bs}

        private_zk.kill()  # a crash: what is acknowledged is in its fsynced transaction log
        time.sleep(OUTAGE_S)
        assert not private_zk.answers()
        t_start = time.monotonic()
        private_zk.start()
        print(f"zookeeper restart took {time.monotonic() - t_start:.1f} s")

        wait_for(lambda: all(b.client.connected for b in bs) and admin_client.connected, timeout=60)
        assert {b.broker_id: b.client.client_id[0] for b in bs} == owners  # same sessions
        assert admin.broker_ids() == [0, 1]
        assert admin.controller_id() == ctrl.broker_id and admin.controller_epoch()[0] == epoch
        assert ctrl.active and not any(b.active for b in bs if b is not ctrl)

        # the controller's watches still work after the reconnect
        admin.create_topic("after", {0: (0, 1)})
        s = wait_for(lambda: admin.partition_state(TopicPartition("after", 0)))
        assert s.leader == 0 and s.controller_epoch == epoch
    finally:
        admin_client.stop()
        admin_client.close()
        for b in bs:
            b.stop()
