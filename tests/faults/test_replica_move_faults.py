"""AlterReplicaLogDirs (34) to a destination that fails, on real loop-mounted ext4 log dirs
(one broker, three small disks): a dead destination disk answers KAFKA_STORAGE_ERROR and an
unknown path LOG_DIR_NOT_FOUND, with the partition left serving where it was; a destination that
fills up during the copy aborts the move cleanly (the source keeps serving, no acknowledged
record is lost, the partial future replica is removed, `appliance alter-log-dirs` and
`appliance log-dirs --describe` say so); once space is freed the same move succeeds.

The copy is throttled (Kafka's ``replica.alter.log.dirs.io.max.bytes.per.second``, 2 MB/s) so
that the disk is filled while the copy is under way, not before or after it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer

from appliance.errors import ErrorCode
from tests.admin.move_latency import alter
from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess
from tests.faults.loopfs import cannot_mount_reason, loop_disks
from tests.faults.procs import cli_describe
from tests.faults.test_disk_failure import Acks, read_back
from tests.polling import left_after

pytestmark = pytest.mark.timeout(300)

TOPIC = "jbod"  # read_back's topic
THROTTLE = 2 << 20  # bytes/s of the copy: an 8 MB partition takes ~4 s to copy


def _dirs_of(mounts: list[str], partition: int) -> list[int]:
    return [i for i, m in enumerate(mounts) if os.path.isdir(os.path.join(m, f"{TOPIC}-{partition}"))]


def _futures(mount: str) -> list[str]:
    return [n for n in os.listdir(mount) if n.endswith("-future")]


def _futures_after(mount: str, timeout: float = 10) -> list[str]:
    """The future replicas left once the log dir's remover thread had ``timeout`` seconds (an
    aborted move queues its partial copy there, off the disk worker's loop)."""
    return left_after(lambda: _futures(mount), timeout)


def _copied_bytes(mount: str) -> int:
    """Bytes in the future replicas under ``mount`` (0 when none)."""
    total = 0
    for f in _futures(mount):
        d = os.path.join(mount, f)
        for n in os.listdir(d) if os.path.isdir(d) else []:
            total += os.stat(os.path.join(d, n)).st_blocks * 512
    return total


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 60_000})


class Stream(threading.Thread):
    """Records b'<seq>' padded to 1 KB to one partition, paced, until stopped."""

    def __init__(self, bootstrap: str, partition: int, acks: Acks, start: int, burst: int) -> None:
        super().__init__(daemon=True)
        self.p, self.partition, self.acks, self.i = _producer(bootstrap), partition, acks, start
        self.burst = burst  # records per 10 ms
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(self.burst):
                self.p.produce(TOPIC, b"%09d" % self.i + b"." * 1000, partition=self.partition,
                               on_delivery=self.acks)
                self.i += 1
            self.p.poll(0.01)
        self.p.flush(60)


def _cli_move(bootstrap: str, partition: int, to: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "appliance.cli.main", "alter-log-dirs", "--bootstrap-server",
                             bootstrap, "--topic", TOPIC, "--partition", str(partition), "--to-dir", to],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _describe(bootstrap: str) -> dict[str, dict]:
    (broker,) = cli_describe(bootstrap)["brokers"]
    return {d["logDir"]: d for d in broker["logDirs"]}


def test_moves_to_an_offline_or_full_dir_leave_the_partition_serving(tmp_path):
    reason = cannot_mount_reason(tmp_path)
    if reason:
        pytest.skip(reason)
    with loop_disks(tmp_path, 3, size_mb=[96, 16, 48]) as disks:
        mounts = [str(d.mount) for d in disks]
        b = BrokerProcess(tmp_path, num_log_dirs=3,
                          overrides={"replica.alter.log.dirs.io.max.bytes.per.second": str(THROTTLE)})
        try:
            b.start()
            create_topic(b.bootstrap, TOPIC, partitions=3, config={"segment.bytes": str(1 << 20),
                                                                     "segment.index.bytes": str(64 << 10)})
            (p,) = [q for q in range(3) if _dirs_of(mounts, q) == [0]]
            acks = Acks()
            first = Stream(b.bootstrap, p, acks, 0, burst=200)
            first.start()
            while len(acks.acked) < 8000:  # ~8 MB on disk0
                time.sleep(0.05)
            first.stop.set()
            first.join(90)

            # 1. a dead destination disk, and a path that is not a log dir
            disks[1].shutdown()
            assert alter(b.port, mounts[1], TOPIC, p) == ErrorCode.KAFKA_STORAGE_ERROR
            assert alter(b.port, str(tmp_path / "nowhere"), TOPIC, p) == ErrorCode.LOG_DIR_NOT_FOUND
            assert _dirs_of(mounts, p) == [0]
            assert alter(b.port, mounts[1], TOPIC, p) == ErrorCode.KAFKA_STORAGE_ERROR  # known offline now
            described = _describe(b.bootstrap)
            assert described[mounts[1]]["error"] == "KafkaStorageException", described[mounts[1]]

            # 2. the destination fills up while the copy runs, under produce load
            stream = Stream(b.bootstrap, p, acks, first.i, burst=2)
            stream.start()
            cli = _cli_move(b.bootstrap, p, mounts[2])
            deadline = time.monotonic() + 60
            while _copied_bytes(mounts[2]) < (1 << 20) and cli.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert cli.poll() is None, ("the move ended before the disk was filled", cli.communicate())
            disks[2].fill()
            out, err = cli.communicate(timeout=120)
            assert cli.returncode == 1 and "KAFKA_STORAGE_ERROR" in err, (cli.returncode, out, err)
            assert not _futures_after(mounts[2]), "the partial future replica was left behind"
            with open(b.log_path, errors="replace") as f:  # it failed in the copy, not up front
                assert f"copying {TOPIC}-{p} failed" in f.read()
            assert _dirs_of(mounts, p) == [0]
            described = _describe(b.bootstrap)
            held = {e["partition"] for d in described.values() for e in d["partitions"] if d["logDir"] == mounts[2]}
            assert f"{TOPIC}-{p}" not in held
            assert any(e["partition"] == f"{TOPIC}-{p}" and not e["isFuture"]
                       for e in described[mounts[0]]["partitions"])
            time.sleep(0.5)  # the source still takes records after the failed move
            stream.stop.set()
            stream.join(90)
            assert not acks.errors, acks.errors[:3]

            # 3. space freed: the same move now succeeds, and nothing acknowledged was lost
            disks[2].free_filler()
            assert alter(b.port, mounts[2], TOPIC, p) == 0
            assert _dirs_of(mounts, p) == [2] and not _futures(mounts[2])
            end = max(o for q, o in acks.acked if q == p) + 1
            stored, problems = read_back(b.bootstrap, 3, {p: end}, short_ok=frozenset({0, 1, 2} - {p}))
            assert not problems, problems
            mine = {k: v for k, v in stored.items() if k[0] == p}
            lost = [k for k in acks.acked if k not in mine or mine[k] != acks.acked[k]]
            assert not lost, f"{len(lost)} acknowledged records lost or changed, e.g. {lost[:3]}"
            seqs = sorted(int(v[:9]) for v in mine.values())
            assert seqs == list(range(len(seqs)))  # none lost, none twice
        finally:
            try:
                b.stop(timeout=20)
            except Exception:  # noqa: BLE001 - a broker wedged on the dead disk: SIGKILL below
                pass
            b.kill()
