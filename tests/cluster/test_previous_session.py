"""A restarted broker ends the ZooKeeper session of its previous life (appliance/cluster/
previous_session.py), against a real ZooKeeper: a process holds a session with an ephemeral
znode and records it as the cluster worker does; after a SIGKILL the record closes the session at
once (the ephemeral is gone long before the session timeout), while the process runs it does not."""

import json
import os
import signal
import subprocess
import sys
import time

from appliance.cluster.previous_session import SESSION_FILE, close_previous_session
from appliance.cluster.zk_paths import split_chroot
from appliance.cluster.zk_session import ZkSettings, open_session
from tests.cluster.harness import wait_for

SESSION_MS = 30000  # far longer than the test: an ephemeral that goes, goes because it was closed

# the previous life: a session, an ephemeral, the record, then it waits to be killed
_HOLDER = """
import sys, time
from appliance.cluster.previous_session import save_session
from appliance.cluster.zk_session import ZkSettings, open_session
client = open_session(ZkSettings(sys.argv[1], int(sys.argv[3])))
client.create("/holder", b"", ephemeral=True)
save_session(sys.argv[2], 7, *client.client_id)
print("ready", flush=True)
time.sleep(600)
"""


def _holder(connect: str, log_dir) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, connect, str(log_dir), str(SESSION_MS)],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_the_session_of_a_dead_previous_life_is_closed_a_live_one_kept(zk_connect, tmp_path):
    hosts = split_chroot(zk_connect)[0]
    watcher = open_session(ZkSettings(zk_connect, SESSION_MS))
    proc = _holder(zk_connect, tmp_path)
    try:
        record = json.loads((tmp_path / SESSION_FILE).read_text())
        assert record["broker_id"] == 7 and record["pid"] == proc.pid
        assert oct((tmp_path / SESSION_FILE).stat().st_mode & 0o777) == "0o600"  # holds the password
        # the process still runs: not ours to end, whatever the record says
        assert not close_previous_session(str(tmp_path), 7, hosts, SESSION_MS, 10)
        assert watcher.exists("/holder") is not None
        # another broker.id's record is not ours either
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert not close_previous_session(str(tmp_path), 8, hosts, SESSION_MS, 10)
        assert watcher.exists("/holder") is not None

        t0 = time.monotonic()
        assert close_previous_session(str(tmp_path), 7, hosts, SESSION_MS, 10)
        wait_for(lambda: watcher.exists("/holder") is None, 5, "the ephemeral to go with its session")
        assert time.monotonic() - t0 < SESSION_MS / 1000 / 3
        # again (the session is over): nothing to close, nothing else touched
        assert not close_previous_session(str(tmp_path), 7, hosts, SESSION_MS, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        watcher.stop()
        watcher.close()


def test_a_damaged_record_is_ignored(tmp_path):
    (tmp_path / SESSION_FILE).write_text("{not json")
    assert not close_previous_session(str(tmp_path), 7, "127.0.0.1:1", SESSION_MS, 1)
