"""`appliance status`: --json during a produce load checked field by field, --watch driven in a
real terminal (tmux), and the one-line answers when there is no broker or another layout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import posix_ipc
import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from appliance.shm.layout import LAYOUT_VERSION, TABLE_HEADER, TABLE_MAGIC
from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess
from tests.ops.procs import appliance, free_port


def _status_args(b: BrokerProcess) -> list[str]:
    # the same options the broker was started with: status derives the shm name from them
    return [x for k, v in b.overrides.items() for x in ("--override", f"{k}={v}")]


class Load:
    """A confluent-kafka producer sending keyed records to ``topic`` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err, msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            for _ in range(200):
                self.p.produce(self.topic, key=str(i % 64).encode(), value=b"x" * 50, on_delivery=self._cb)
                i += 1
            self.p.poll(0)
            time.sleep(0.02)  # a steady few thousand records/s, not a flood on a shared machine
        self.p.flush(60)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


def _commit_some(bootstrap: str, topic: str, group: str, partitions: int, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, offset) for p in range(partitions)], asynchronous=False)
    finally:
        c.close()


@pytest.fixture
def broker2(tmp_path):
    with BrokerProcess(tmp_path, num_log_dirs=2) as b:
        yield b


def test_status_json_during_load(broker2):
    b = broker2
    create_topic(b.bootstrap, "load", partitions=4)
    with Load(b.bootstrap, "load") as load:
        deadline = time.monotonic() + 60
        while load.acked < 2000:
            assert time.monotonic() < deadline and not load.errors, load.errors
            time.sleep(0.1)
        _commit_some(b.bootstrap, "load", "g1", 4, 100)
        # CPU is sampled over --interval in clock ticks (10 ms): over the default 1 s a worker
        # serving this light load (a request every 20 ms) could show 0.0, which CI once did
        r = appliance("status", "--json", "--interval", "3", *_status_args(b))
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
    assert not load.errors
    # broker
    assert s["broker"]["id"] == 0 and s["broker"]["port"] == b.port
    assert s["broker"]["shm"] == f"/{b.overrides['appliance.shm.name']}-table"
    assert s["broker"]["layout_version"] == LAYOUT_VERSION
    assert s["broker"]["supervisor"]["pid"] == b.proc.pid and s["broker"]["supervisor"]["alive"]
    assert s["broker"]["partitions"] >= 4
    assert s["broker"]["listeners"] == [{"name": "PLAINTEXT", "address": f"127.0.0.1:{b.port}",
                                         "security_protocol": "PLAINTEXT"}]
    # workers: two disk workers, two network workers, each the real process
    ws = s["workers"]
    assert [(w["kind"], w["index"]) for w in ws] == [("disk", 0), ("disk", 1), ("network", 0), ("network", 1)]
    for w in ws:
        title = f"{w['kind']} worker {w['index']}"
        assert [w["pid"]] == b.worker_pids(title), title
        assert w["state"] == "ready" and 0 <= w["heartbeat_age_s"] < 30
        proc = psutil.Process(w["pid"])
        assert 0 < w["rss_bytes"] and abs(w["rss_bytes"] - proc.memory_info().rss) < 256 << 20
        assert 3 <= w["fds"] and w["cpu_percent"] is not None and w["cpu_percent"] >= 0
        assert w["incarnation"] >= 1
    assert sum(w["cpu_percent"] for w in ws) > 0  # under load something was busy
    # disks: the two log dirs, online, holding the four partitions between them
    ds = s["disks"]
    assert [d["path"] for d in ds] == b.log_dirs
    for d in ds:
        usage = shutil.disk_usage(d["path"])
        assert d["state"] == "online" and d["offline_partitions"] == 0
        assert abs(d["free_bytes"] - usage.free) < 1 << 30 and d["total_bytes"] == usage.total
        assert d["writeback_mode"] in ("os", "writeback") and d["rotational"] in (True, False, None)
    load_parts = [p for p in s["top_partitions"] if p["topic"] == "load"]
    assert sorted(p["partition"] for p in load_parts) == [0, 1, 2, 3]
    assert {p["disk"] for p in load_parts} == {0, 1}
    assert sum(d["partitions"] for d in ds) == s["broker"]["partitions"]
    assert sum(p["messages_per_s"] for p in load_parts) > 0  # the load was measured
    rates = [p["messages_per_s"] for p in s["top_partitions"]]
    assert rates == sorted(rates, reverse=True)
    for p in load_parts:
        assert p["state"] == "online" and p["log_start_offset"] == 0
        assert 100 <= p["high_watermark"] <= p["log_end_offset"]
    # groups: g1 committed 100 on each partition; lag is the high watermark minus that
    g = next(g for g in s["groups"] if g["group"] == "g1")
    assert s["groups_error"] is None and g["members"] == 0
    hw = {p["partition"]: p["high_watermark"] for p in load_parts}
    assert sorted((p["partition"], p["committed"]) for p in g["partitions"]) == [(i, 100) for i in range(4)]
    assert {p["partition"]: p["lag"] for p in g["partitions"]} == {i: hw[i] - 100 for i in range(4)}
    assert g["lag"] == sum(hw.values()) - 400
    # after the load: the log end offsets add up to what was acknowledged, and the rate is 0
    r = appliance("status", "--json", "--interval", "0.5", "--top", "1000", *_status_args(b))
    s2 = json.loads(r.stdout)
    after = [p for p in s2["top_partitions"] if p["topic"] == "load"]
    assert sum(p["log_end_offset"] for p in after) == load.acked
    assert all(p["messages_per_s"] == 0 for p in after)


def test_status_without_the_listener_still_reads_shared_memory(broker2):
    """Status reads the shared memory; the groups say why they are missing."""
    b = broker2
    # the same shm name, but a listener port nobody answers on: groups unreachable
    dead = free_port()
    args = ["--override", f"listeners=PLAINTEXT://127.0.0.1:{dead}",
            "--override", f"appliance.shm.name={b.overrides['appliance.shm.name']}",
            "--override", f"log.dirs={b.overrides['log.dirs']}"]
    r = appliance("status", "--json", "--interval", "0.2", *args)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert len(s["workers"]) == 4 and s["groups"] is None and str(dead) in s["groups_error"]


def test_status_no_broker(tmp_path):
    port = free_port()
    r = appliance("status", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no broker running" in lines[0] and str(port) in lines[0]


def test_status_other_layout_version(tmp_path):
    port = free_port()
    name = f"/appliance-b0-p{port}-table"
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=TABLE_HEADER.size)
    try:
        with open(f"/dev/shm{name}", "r+b") as f:
            f.write(TABLE_MAGIC.to_bytes(4, sys.byteorder) + (LAYOUT_VERSION + 7).to_bytes(4, sys.byteorder))
        r = appliance("status", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}")
    finally:
        shm.close_fd()
        shm.unlink()
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"version {LAYOUT_VERSION + 7}" in lines[0] and f"version {LAYOUT_VERSION}" in lines[0]


def test_a_heartbeat_newer_than_the_readers_clock_is_age_zero():
    """A worker may beat between the reader's clock read and its read of the slot (CI once saw
    an age of -0.001 s): such a beat is fresh, age 0, never negative. The slots are written
    through the declared layout, one beat a second ahead of the clock and one a second behind."""
    from appliance.cli.status_snapshot import StatusReader, table_name_for
    from appliance.config import BrokerConfig
    from appliance.shm.layout import WORKER_SLOT, WorkerState
    from appliance.shm.partition_table import PartitionTable

    port = free_port()
    config = BrokerConfig.load(overrides={"listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                          "num.network.threads": "1"}, warn=False)
    name = table_name_for(config)
    table = PartitionTable.create(name, 16, 0, 1, port)  # this process stands for the supervisor
    try:
        with open(f"/dev/shm{name}", "r+b") as f:
            for i, (kind, ahead) in enumerate(((0, 1.0), (1, -1.0))):
                f.seek(TABLE_HEADER.size + i * WORKER_SLOT.size)
                f.write(WORKER_SLOT.struct.pack(os.getpid(), time.monotonic() + ahead, WorkerState.READY, kind, 1))
        reader = StatusReader(config)
        try:
            workers = reader.sample(groups=False)["workers"]
        finally:
            reader.close()
    finally:
        table.close()
        table.unlink()
    assert [(w["kind"], w["state"]) for w in workers] == [("disk", "ready"), ("network", "ready")]
    ages = [w["heartbeat_age_s"] for w in workers]
    assert ages[0] == 0.0 and 0.9 < ages[1] < 30, ages


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _head_rate(screen: str) -> float | None:
    m = re.search(r"([0-9.]+) msg/s", screen.split("workers", 1)[0])  # in the header, above the tables
    return float(m.group(1)) if m else None


def test_status_watch_in_a_terminal(broker2):
    b = broker2
    create_topic(b.bootstrap, "w", partitions=2)
    sock = f"ops-status-{os.getpid()}"
    # the terminal's own size, not a COLUMNS inherited from the test runner
    cmd = " ".join(["env", "-u", "COLUMNS", "-u", "LINES", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}",
                    sys.executable, "-m",
                    "appliance.cli.main", "status", "--watch", "--interval", "0.5", *_status_args(b)])
    _tmux(sock, "new-session", "-d", "-x", "160", "-y", "60", "-s", "st", cmd)
    try:
        screens = []
        screen = ""
        with Load(b.bootstrap, "w"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                screen = _tmux(sock, "capture-pane", "-p", "-t", "st")
                rate = _head_rate(screen)
                if rate is not None:
                    screens.append((rate, screen))
                if len({r for r, _ in screens}) >= 3 and any(r > 0 for r, _ in screens):
                    break
                time.sleep(0.5)
        rates = [r for r, _ in screens]
        assert len(set(rates)) >= 3 and max(rates) > 0, (rates, screen)  # the rate moves on screen
        last = screens[-1][1]
        for w in ("disk", "network"):
            for i in (0, 1):
                pid = b.worker_pids(f"{w} worker {i}")[0]
                assert any(line.split("│")[1:4] and w in line and str(pid) in line and "ready" in line
                           for line in last.splitlines()), last
        # the screen is redrawn in place: one header line, not one per refresh
        assert sum(1 for line in last.splitlines() if line.startswith("broker ")) == 1
        _tmux(sock, "send-keys", "-t", "st", "C-c")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if subprocess.run(["tmux", "-L", sock, "has-session", "-t", "st"], capture_output=True).returncode:
                break  # the command exited on Ctrl-C and its session closed
            time.sleep(0.2)
        else:
            pytest.fail("status --watch did not exit on Ctrl-C")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)
