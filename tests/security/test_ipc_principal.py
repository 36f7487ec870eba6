"""Local IPC producers are authorized by the same authorizer as TCP clients, as the principal
the kernel names for the process holding their channel (User:<login name> of its effective
uid), never what the producer says of itself. A real broker with ACLs on; producers run as
root and as ``nobody`` (uid 65534, group 0 so that it may attach the 0660 root:root rings). The
``nobody`` processes start as root and drop to it once Python has loaded (the interpreter lives
under /root, which only root may enter)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from appliance.broker.disk.ipc_principal import effective_uid, flock_holder, user_principal
from appliance.client.ipc import IpcTransport, find_broker_base
from appliance.errors import TopicAuthorizationFailedError
from appliance.records.batch import build_batch
from tests.ops.procs import appliance

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534


def test_the_kernel_names_the_flock_holder_and_its_uid(tmp_path):
    f = tmp_path / "channel"
    f.write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(f)!r}, os.O_RDWR)  # the test's directory is root's: opened first
        os.setgroups([]); os.setgid(0); os.setuid({NOBODY})
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        fd = os.open(f, os.O_RDONLY)
        try:
            assert flock_holder(fd) == holder.pid
            assert effective_uid(holder.pid) == NOBODY
            with pytest.raises(BlockingIOError):  # it is the holder, not us
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        holder.kill()
        holder.wait()
    fd = os.open(f, os.O_RDONLY)
    try:
        assert flock_holder(fd) is None  # the lock died with its holder
    finally:
        os.close(fd)
    assert user_principal(0) == "User:root" and user_principal(NOBODY) == "User:nobody"
    assert user_principal(4_000_000) == "User:4000000"  # a uid with no name


_PRODUCE_AS_NOBODY = f"""
import os, sys
from appliance.client.ipc import IpcTransport
from appliance.errors import TopicAuthorizationFailedError
from appliance.records.batch import build_batch
batch = build_batch([(None, b"from-nobody")])  # numba compiles under /root: before dropping
os.setgroups([]); os.setgid(0); os.setuid({NOBODY})
with IpcTransport(sys.argv[1]) as t:
    for topic in sys.argv[2:]:
        try:
            t.send_batch(topic, 0, batch).result(30)
            print(topic, "ok", flush=True)
        except TopicAuthorizationFailedError:
            print(topic, "denied", flush=True)
"""


def _acl(broker, *args: str) -> None:
    r = appliance("acls", "--bootstrap-server", broker.bootstrap, *args)
    assert r.returncode == 0, r.stderr


def test_ipc_producers_are_authorized_as_their_uid(broker_factory):
    b = broker_factory(overrides={"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                  "super.users": "User:ANONYMOUS"}).start()  # TCP here: the admin
    for t in ("ipc-open", "ipc-closed"):
        r = appliance("topics", "--bootstrap-server", b.bootstrap, "--create", "--topic", t,
                      "--partitions", "1", "--replication-factor", "1")
        assert r.returncode == 0, r.stderr
    _acl(b, "--add", "--allow-principal", "User:nobody", "--operation", "Write", "--topic", "ipc-open")
    base = find_broker_base(log_dir=b.log_dirs[0])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _PRODUCE_AS_NOBODY, base, "ipc-open", "ipc-closed"],
                       capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["ipc-open ok", "ipc-closed denied"], r.stdout + r.stderr
    # root, on the same rings: no ACL names it, so refused; allowed once one does (re-read)
    with IpcTransport(base) as t:
        with pytest.raises(TopicAuthorizationFailedError):
            t.send_batch("ipc-open", 0, build_batch([(None, b"from-root")])).result(30)
        _acl(b, "--add", "--allow-principal", "User:root", "--operation", "Write", "--topic", "ipc-open")
        deadline = time.monotonic() + 10
        while True:
            try:
                t.send_batch("ipc-open", 0, build_batch([(None, b"from-root")])).result(30)
                break
            except TopicAuthorizationFailedError:
                assert time.monotonic() < deadline, "the new ACL was not applied to IPC producers"
                time.sleep(0.1)
    log = b.log()
    assert "User:nobody may not Write topic ipc-closed" in log and "User:root may not Write topic ipc-open" in log
    # what landed: nobody's record and root's, nothing in the closed topic
    r = appliance("console-consumer", "--bootstrap-server", b.bootstrap, "--topic", "ipc-open",
                  "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000")
    assert r.stdout.split() == ["from-nobody", "from-root"], r.stdout + r.stderr
