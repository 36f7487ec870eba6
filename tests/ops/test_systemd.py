"""systemd: the unit's security score and `verify`, the install into a temporary root, and the
sd_notify protocol against a fake NOTIFY_SOCKET (a real AF_UNIX datagram socket the test binds,
the real broker started with NOTIFY_SOCKET set)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from appliance.config import BrokerConfig, parse_properties
from tests.broker_process import BrokerProcess
from tests.ops.procs import appliance, free_port

UNITS = Path(__file__).resolve().parents[2] / "systemd"
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze missing (apt-get install -y systemd)")


def _exposure(unit: Path) -> float:
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout + r.stderr)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


@needs_analyze
@pytest.mark.parametrize("unit", ["appliance.service", "appliance@.service"])
def test_unit_security_score(unit, tmp_path):
    path = UNITS / unit
    if "@" in unit:  # the offline check wants an instance name
        path = tmp_path / "appliance@b1.service"
        shutil.copy(UNITS / unit, path)
    assert _exposure(path) <= 2.5
    text = path.read_text()
    for line in ("ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectHome=yes",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallFilter=@system-service",
                 "Type=notify", "WatchdogSec="):
        assert line in text, line


def _verify(root: Path, unit: str) -> subprocess.CompletedProcess:
    # the unit and its drop-ins from the installed root, the stock targets from this machine
    env = {**os.environ, "SYSTEMD_UNIT_PATH": f"{root}/etc/systemd/system:"}
    return subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True,
                          env=env, timeout=60)


@needs_analyze
def test_install_service_into_a_temporary_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    r = appliance("install-service", "--root", str(root),
                  "--override", "log.dirs=/srv/disk1/appliance,/srv/disk2/appliance",
                  "--override", "listeners=PLAINTEXT://0.0.0.0:9092")
    assert r.returncode == 0, r.stderr
    passwd = {ln.split(":")[0]: ln.split(":") for ln in (root / "etc/passwd").read_text().splitlines()}
    uid, gid = int(passwd["appliance"][2]), int(passwd["appliance"][3])
    assert passwd["appliance"][6].endswith("nologin")
    for d in ("srv/disk1/appliance", "srv/disk2/appliance", "var/lib/appliance"):
        st = (root / d).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, gid, 0o750), d
    conf = root / "etc/appliance/server.properties"
    st = conf.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, gid, 0o640)
    config = BrokerConfig.load(overrides=parse_properties(conf.read_text()))
    assert config.log_dirs == ["/srv/disk1/appliance", "/srv/disk2/appliance"]
    assert config.listeners == [("0.0.0.0", 9092)]
    units = root / "etc/systemd/system"
    unit = (units / "appliance.service").read_text()
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    exe = exec_line.split("=", 1)[1].split()[0]
    assert os.access(exe, os.X_OK) and exec_line.endswith("--config /etc/appliance/server.properties")
    dropin = (units / "appliance.service.d/log-dirs.conf").read_text()
    assert "ReadWritePaths=/srv/disk1/appliance\n" in dropin and "ReadWritePaths=/srv/disk2/appliance\n" in dropin
    assert (units / "multi-user.target.wants/appliance.service").is_symlink()
    v = _verify(root, "appliance.service")
    assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr
    # installing again with the same settings changes nothing and succeeds
    r = appliance("install-service", "--root", str(root),
                  "--override", "log.dirs=/srv/disk1/appliance,/srv/disk2/appliance",
                  "--override", "listeners=PLAINTEXT://0.0.0.0:9092")
    assert r.returncode == 0, r.stderr
    # a different config is not silently replaced
    r = appliance("install-service", "--root", str(root), "--override", "num.partitions=3")
    assert r.returncode == 2 and "--force" in r.stderr


@needs_analyze
def test_install_two_instances_of_the_template(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    for name, port in (("b1", 9092), ("b2", 9093)):
        r = appliance("install-service", "--root", str(root), "--name", name,
                      "--override", f"listeners=PLAINTEXT://0.0.0.0:{port}", "--override", f"broker.id={port - 9092}")
        assert r.returncode == 0, r.stderr
    units = root / "etc/systemd/system"
    assert "%i.properties" in (units / "appliance@.service").read_text()
    for name in ("b1", "b2"):
        cfg = BrokerConfig.load(overrides=parse_properties((root / f"etc/appliance/{name}.properties").read_text()))
        assert cfg.log_dirs == [f"/var/lib/appliance/{name}/data"]
        assert (root / f"var/lib/appliance/{name}/data").is_dir()
        assert f"ReadWritePaths=/var/lib/appliance/{name}/data" in (units / f"appliance@{name}.service.d/log-dirs.conf").read_text()
        assert (units / f"multi-user.target.wants/appliance@{name}.service").is_symlink()
        v = _verify(root, f"appliance@{name}.service")
        assert v.returncode == 0 and v.stdout + v.stderr == "", v.stdout + v.stderr


@pytest.mark.parametrize("args, words", [
    (["--name", "b/1"], ["--name"]),
    (["--override", "num.partitions=zero"], ["num.partitions", "zero"]),
    (["--override", "log.dirs=relative/dir"], ["relative/dir", "absolute"]),
    (["--override", "log.dirs=/home/me/data"], ["/home/me/data", "ProtectHome"]),
])
def test_install_service_bad_input(tmp_path, args, words):
    r = appliance("install-service", "--root", str(tmp_path), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert all(w in r.stderr for w in words), r.stderr
    assert not (tmp_path / "etc/appliance").exists()  # nothing half-installed


def _recv_until(sock: socket.socket, want: str, got: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while want not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"no {want} in {got}"
        sock.settimeout(left)
        for msg in sock.recv(4096).decode().splitlines():
            got.append(msg)


def _recv_after(sock: socket.socket, want: str, got: list[str], start: int,
                timeout: float) -> int:
    """Receive until ``want`` arrives at or after ``got[start]``; its index."""
    deadline = time.monotonic() + timeout
    while want not in got[start:]:
        left = deadline - time.monotonic()
        assert left > 0, f"no {want} in {got[start:]}"
        sock.settimeout(min(left, 1.0))
        with contextlib.suppress(TimeoutError):
            got.extend(sock.recv(4096).decode().splitlines())
    return got.index(want, start)


def _earliest(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        return c.beginning_offsets([tp])[tp]
    finally:
        c.close()


def _reload_applies_a_hand_edited_dynamic_config(broker: BrokerProcess, sock: socket.socket,
                                                 got: list[str]) -> None:
    """SIGHUP: RELOADING=1 (with MONOTONIC_USEC) then READY=1; the dynamic broker configs file,
    edited by hand, takes effect (log.retention.bytes=1 deletes the old segments), and the
    broker keeps serving."""
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    for i in range(40):  # 1 KiB segments: many of them
        p.send("reload", value=b"x" * 200, key=str(i).encode()).get(60)
    path = Path(broker.log_dirs[0]) / "dynamic-broker-configs.json"
    path.write_text('{"broker": {"log.retention.bytes": "1"}, "default": {}}\n')
    time.sleep(1.5)  # several retention passes: without a reload the edit is not seen
    assert _earliest(broker.bootstrap, "reload") == 0
    before = len(got)
    broker.proc.send_signal(signal.SIGHUP)
    _recv_until(sock, "RELOADING=1", got, 60)
    i = got.index("RELOADING=1", before)
    assert got[i + 1].startswith("MONOTONIC_USEC="), got
    deadline = time.monotonic() + 60
    while "READY=1" not in got[i:]:
        assert time.monotonic() < deadline, got
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        got.extend(sock.recv(4096).decode().splitlines())
    deadline = time.monotonic() + 60
    while _earliest(broker.bootstrap, "reload") == 0:
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.2)
    assert p.send("reload", value=b"after").get(60).offset == 40  # still serving
    p.close()
    assert broker.proc.poll() is None
    assert "reloaded on SIGHUP" in broker.log()


def _reload_waits_for_every_disk_worker(broker: BrokerProcess, sock: socket.socket,
                                        got: list[str]) -> None:
    """READY=1 follows RELOADING=1 only once every disk worker has re-read its configs: a
    SIGSTOPped disk worker holds it back until SIGCONT. A topic.properties that does not parse
    is logged by the supervisor naming the worker and the key, and READY=1 still comes."""
    (disk,) = broker.worker_pids("disk worker 0")
    before = len(got)
    os.kill(disk, signal.SIGSTOP)
    try:
        broker.proc.send_signal(signal.SIGHUP)
        i = _recv_after(sock, "RELOADING=1", got, before, 60)
        with contextlib.suppress(AssertionError):  # 2 s: a running worker confirms in ~0.1 s
            _recv_after(sock, "READY=1", got, i, 2.0)
        assert "READY=1" not in got[i:], got[i:]
    finally:
        os.kill(disk, signal.SIGCONT)
    _recv_after(sock, "READY=1", got, i, 30)

    props = Path(broker.log_dirs[0]) / "reload-0" / "topic.properties"
    props.write_text("retention.ms=abc\n")
    before = len(got)
    broker.proc.send_signal(signal.SIGHUP)
    i = _recv_after(sock, "RELOADING=1", got, before, 60)
    _recv_after(sock, "READY=1", got, i, 30)
    deadline = time.monotonic() + 10
    while "SIGHUP: disk worker 0" not in broker.log():
        assert time.monotonic() < deadline, broker.log()[-3000:]
        time.sleep(0.1)
    line = next(ln for ln in broker.log().splitlines() if "SIGHUP: disk worker 0" in ln)
    assert "retention.ms" in line and "'abc'" in line, line
    assert broker.proc.poll() is None


def test_sd_notify_ready_watchdog_reloading_stopping(tmp_path, monkeypatch):
    # a short path: AF_UNIX addresses are limited to 108 bytes
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        addr = os.path.join(d, "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(addr)
            monkeypatch.setenv("NOTIFY_SOCKET", addr)
            monkeypatch.setenv("WATCHDOG_USEC", "2000000")
            broker = BrokerProcess(tmp_path, port=free_port(),
                                   overrides={"log.segment.bytes": "1024",
                                              "log.retention.check.interval.ms": "200"}).start()
            got: list[str] = []
            try:
                _recv_until(sock, "READY=1", got, 120)
                assert "STOPPING=1" not in got
                n = got.count("WATCHDOG=1")
                deadline = time.monotonic() + 60
                while got.count("WATCHDOG=1") < n + 2:  # pings keep coming while it runs
                    assert time.monotonic() < deadline, got
                    sock.settimeout(max(0.1, deadline - time.monotonic()))
                    got.extend(sock.recv(4096).decode().splitlines())
                _reload_applies_a_hand_edited_dynamic_config(broker, sock, got)
                _reload_waits_for_every_disk_worker(broker, sock, got)
                broker.proc.send_signal(signal.SIGTERM)
                _recv_until(sock, "STOPPING=1", got, 60)
                assert broker.proc.wait(60) == 0
            finally:
                broker.kill()
