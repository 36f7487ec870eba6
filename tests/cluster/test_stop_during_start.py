"""SIGTERM at each point of a cluster broker's start-up stops the whole broker promptly (issue 45):
real broker processes, a real ZooKeeper.

The points: a disk worker recovering an unclean log dir; the cluster worker joining a ZooKeeper
that is unreachable (nothing listens on its port) or SIGSTOPped (it accepts the connection and
never answers); the cluster worker waiting for ZooKeeper to expire this broker's previous session
(its broker.id still registered with our address). Each case waits until the broker's log shows
the point, sends SIGTERM to the supervisor (what `systemctl stop` does, KillMode=mixed) and checks
that the supervisor exits 0 within PROMPT_S, that every process of the broker has exited (psutil
on the pids seen at the SIGTERM, and no process left in its session) and that no shared-memory
object named by its appliance.shm.name is left in /dev/shm.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from appliance.cluster.registry import BrokerRegistry
from appliance.cluster.zk_paths import BrokerInfo
from appliance.config import BrokerConfig
from appliance.process.stop_deadlines import STOP_DEADLINE_S
from appliance.records.batch import build_batch
from appliance.storage.log_dir import LogDir
from tests.broker.procs import session_pids
from tests.broker_process import BrokerProcess, free_port
from tests.cluster.harness import wait_for
from tests.cluster.zk import ZooKeeperServer

# Nothing at these points needs time to stop (measured ~0.5-1 s here). STOP_DEADLINE_S (50 s)
# bounds workers stuck on a dead peer; a stop anywhere near it here means a SIGTERM was ignored
# until the supervisor's SIGKILL.
PROMPT_S = 15.0
assert PROMPT_S < STOP_DEADLINE_S
# Enough unclean partitions, recovered on one thread, that their recovery lasts seconds (3-12 s
# here under load for 1,000): a SIGTERM that waited for it is seen in the log.
PARTITIONS = 1000


def _unclean_log_dir(path: str) -> None:
    """PARTITIONS partitions of 200 records each, as a crash leaves them: no clean-shutdown
    marker, no checkpoints, so every segment is CRC-scanned at the next start. One is written
    through the storage layer, the rest are copies of it."""
    config = BrokerConfig.load(overrides={"log.dirs": path})
    log_dir = LogDir.open(path, config)
    plog = log_dir.create_partition("recovered", 0, config.topic_defaults(), durable=False)
    for _ in range(20):
        plog.append(build_batch([(None, b"x" * 100)] * 10))
    log_dir.close(clean=False)
    for name in os.listdir(path):
        if not os.path.isdir(os.path.join(path, name)):
            os.unlink(os.path.join(path, name))  # checkpoints (and no marker: clean=False)
    first = os.path.join(path, "recovered-0")
    for p in range(1, PARTITIONS):
        shutil.copytree(first, os.path.join(path, f"recovered-{p}"))


@pytest.fixture
def frozen_zk(tmp_path):
    """A real ZooKeeper, SIGSTOPped: it accepts TCP connections (the kernel does) and never
    answers."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    os.killpg(server.proc.pid, signal.SIGSTOP)
    yield server.connect
    os.killpg(server.proc.pid, signal.SIGCONT)
    server.kill()


def _loading_logs(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[BrokerProcess, str]:
    b = BrokerProcess(tmp_path, overrides={
        "zookeeper.connect": f"127.0.0.1:{free_port()}", "broker.id": "0",
        "num.network.threads": "1", "num.recovery.threads.per.data.dir": "1"})
    _unclean_log_dir(b.log_dirs[0])
    return b, "write-back mode"  # the disk worker's open has begun: next, the recovery


def _joining(connect: str) -> tuple[str, dict[str, str]]:
    return (f"Connecting to 127.0.0.1(127.0.0.1):{connect.rsplit(':', 1)[1]}",  # kazoo's line
            {"zookeeper.connect": connect, "zookeeper.connection.timeout.ms": "60000"})


def _joining_unreachable(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[BrokerProcess, str]:
    line, overrides = _joining(f"127.0.0.1:{free_port()}")
    return BrokerProcess(tmp_path, overrides={"broker.id": "0", "num.network.threads": "1",
                                              **overrides}), line


def _joining_sigstopped(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[BrokerProcess, str]:
    line, overrides = _joining(request.getfixturevalue("frozen_zk"))
    return BrokerProcess(tmp_path, overrides={"broker.id": "0", "num.network.threads": "1",
                                              **overrides}), line


def _previous_session(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[BrokerProcess, str]:
    """broker.id 0 registered with the broker's own address by a session of the test's (as a
    SIGKILLed life of it leaves it when its session file is gone): the broker waits for that
    session to expire, which it never does here."""
    port = free_port()
    admin = request.getfixturevalue("admin")
    BrokerRegistry(admin.client, BrokerInfo(0, "127.0.0.1", port)).register()
    b = BrokerProcess(tmp_path, port=port, overrides={
        "zookeeper.connect": request.getfixturevalue("zk_connect"), "broker.id": "0",
        "num.network.threads": "1"})
    return b, "still held by this broker's previous session"


POINTS = {"loading-logs": _loading_logs, "joining-unreachable": _joining_unreachable,
          "joining-sigstopped": _joining_sigstopped, "previous-session": _previous_session}


def _shm_objects(b: BrokerProcess) -> list[str]:
    base = b.overrides["appliance.shm.name"]
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(base + "-"))


@pytest.mark.parametrize("point", list(POINTS))
def test_sigterm_during_start_up_stops_every_process_and_frees_shared_memory(point, tmp_path, request):
    b, line = POINTS[point](tmp_path, request)
    b.launch()
    try:
        wait_for(lambda: line in b.log() or b.proc.poll() is not None, 90, f"{line!r} in the log")
        assert b.proc.poll() is None, b.log()
        assert _shm_objects(b), "the broker has made its shared memory by now"
        procs = [psutil.Process(b.proc.pid), *psutil.Process(b.proc.pid).children(recursive=True)]
        t0 = time.monotonic()
        b.proc.send_signal(signal.SIGTERM)
        code = b.proc.wait(PROMPT_S + 30)  # longer than PROMPT_S: a slow stop fails below, with its time
        took = time.monotonic() - t0
        log = b.log()
        assert took < PROMPT_S, f"{point}: the stop took {took:.1f} s\n{log}"
        assert code == 0, log
        _, alive = psutil.wait_procs(procs, timeout=2)
        assert alive == [], f"{point}: still running after the stop: {alive}\n{log}"
        assert session_pids(b.proc.pid) == [], log
        assert _shm_objects(b) == [], log
        assert "SIGKILL" not in log and "Traceback" not in log, log
        if point == "loading-logs":  # it did not wait for the recovery to end
            assert "stopped while still loading" in log and f"open: {PARTITIONS} partitions" not in log, log
    finally:
        b.kill()
        b.release_shm()
        b._log.close()


def _joined(tmp_path: Path, session_ms: int) -> tuple[BrokerProcess, ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zk").start()
    (tmp_path / "b").mkdir()
    b = BrokerProcess(tmp_path / "b", overrides={
        "zookeeper.connect": server.connect, "broker.id": "0", "num.network.threads": "1",
        "zookeeper.session.timeout.ms": str(session_ms)})
    try:
        b.launch()
        wait_for(lambda: "joined the cluster" in b.log() or b.proc.poll() is not None, 90, "the broker to join")
        assert b.proc.poll() is None, b.log()
    except BaseException:
        b.kill()
        b.release_shm()
        server.kill()
        raise
    return b, server


def _stop_and_check(b: BrokerProcess, within: float) -> tuple[float, str]:
    procs = [psutil.Process(b.proc.pid), *psutil.Process(b.proc.pid).children(recursive=True)]
    t0 = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    code = b.proc.wait(STOP_DEADLINE_S + 10)
    took, log = time.monotonic() - t0, b.log()
    assert took < within, f"the stop took {took:.1f} s\n{log}"
    assert code == 0, log
    _, alive = psutil.wait_procs(procs, timeout=2)
    assert alive == [] and session_pids(b.proc.pid) == [], f"still running: {alive}\n{log}"
    assert _shm_objects(b) == [], log
    assert "SIGKILL" not in log and "Traceback" not in log, log
    return took, log


@pytest.mark.parametrize("noticed", [False, True], ids=["just-frozen", "frozen-and-noticed"])
def test_sigterm_with_zookeeper_frozen_after_join(noticed, tmp_path):
    """ZooKeeper SIGSTOPped after the broker joined, then SIGTERM. Just frozen (kazoo has not
    noticed yet): the controlled shutdown and leaving ZooKeeper wait on it, and the cluster
    worker leaves by itself at CLUSTER_LEAVE_S — its own logged exit, no SIGKILL from the
    supervisor, whose mark is CLUSTER_STOP_BY_S. Frozen long enough for kazoo to see the
    silence (2/3 of the session timeout): no controlled shutdown is tried, and the stop is
    prompt."""
    from appliance.process.stop_deadlines import CLUSTER_LEAVE_S, CLUSTER_STOP_BY_S

    b, server = _joined(tmp_path, session_ms=6000)
    try:
        os.killpg(server.proc.pid, signal.SIGSTOP)
        if noticed:
            wait_for(lambda: "Connection dropped" in b.log() or "suspended" in b.log().lower(), 30,
                     "kazoo to notice the silence")
            took, log = _stop_and_check(b, PROMPT_S)
            assert "controlled shutdown skipped: ZooKeeper is out of reach" in log, log
        else:
            took, log = _stop_and_check(b, CLUSTER_STOP_BY_S)
            if took > CLUSTER_LEAVE_S - 1:  # it waited: then it left by itself, and said why
                assert "did not answer within" in log, log
    finally:
        os.killpg(server.proc.pid, signal.SIGCONT)
        b.kill()
        b.release_shm()
        b._log.close()
        server.kill()
