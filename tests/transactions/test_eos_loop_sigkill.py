"""Exactly-once under SIGKILL (KIP-98, KIP-447's send_offsets_to_transaction): a
consume-transform-produce loop (tests/transactions/eos_loop.py, its own process) over a
pre-filled input topic is SIGKILLed twenty times at random moments and restarted each time, then
run to completion; read_committed readers (confluent-kafka and kcat) see each input record's
transform exactly once, while read_uncommitted shows the aborted duplicates the kills left (the
kills hit open transactions). A second campaign SIGKILLs and restarts the broker itself under
the loop."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker_process import BrokerProcess
from tests.transactions.eos_loop import transform

SOURCE, SINK, GROUP, TXN_ID = "eos-in", "eos-out", "eos-group", "eos-loop"
PARTITIONS = 3
PER_PARTITION = 3000
WORK_MS = 10  # each transaction's records written, then 10 ms of work before its commit
ROOT = Path(__file__).resolve().parents[2]


def _fill(bootstrap: str) -> list[int]:
    """Input records b"<n>" for n in 0..PARTITIONS*PER_PARTITION-1, n % PARTITIONS's partition;
    the end offsets."""
    create_topic(bootstrap, SOURCE, PARTITIONS)
    create_topic(bootstrap, SINK, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True})
    for n in range(PARTITIONS * PER_PARTITION):
        p.produce(SOURCE, b"%d" % n, partition=n % PARTITIONS)
        p.poll(0)
    assert p.flush(30) == 0
    return [PER_PARTITION] * PARTITIONS


class Loop:
    """One instance of the loop process; its output lines collected by a thread."""

    def __init__(self, bootstrap: str, ends: list[int]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.transactions.eos_loop", bootstrap, SOURCE, SINK, GROUP, TXN_ID,
             ",".join(map(str, ends)), str(WORK_MS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            if line == "ready":
                self.ready.set()

    def commits(self) -> int:
        return sum(1 for line in self.lines if line.startswith("committed"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        finally:
            self.kill()
        return code


def _values(bootstrap: str, committed: bool, expect: int | None = None, idle_s: float = 2.0) -> list[bytes]:
    """Every value of SINK's partitions read from the start by confluent-kafka, until ``expect``
    values came (then ``idle_s`` more to catch extras) or nothing came for ``idle_s``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "fetch.wait.max.ms": 100})
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(SINK, p, 0) for p in range(PARTITIONS)])
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for m in c.consume(1000, 0.3):
                assert m.error() is None, m.error()
                out.append(m.value())
                last = time.monotonic()
    finally:
        c.close()
    return out


def _values_kcat(bootstrap: str) -> list[bytes]:
    out: list[bytes] = []
    for p in range(PARTITIONS):
        res = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", SINK, "-p", str(p), "-o", "beginning", "-e",
                              "-q", "-X", "isolation.level=read_committed", "-f", "%s\n"],
                             capture_output=True, timeout=60, check=True)
        out += [line for line in res.stdout.split(b"\n") if line]
    return out


def _committed_offsets(bootstrap: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(SOURCE, p) for p in range(PARTITIONS)], 20)]
    finally:
        c.close()


def _check_exactly_once(bootstrap: str, ends: list[int]) -> int:
    """Asserts each input's transform is read exactly once by read_committed readers; the number
    of aborted duplicates read_uncommitted shows."""
    want = Counter(transform(b"%d" % n) for n in range(sum(ends)))
    committed = _values(bootstrap, committed=True)
    assert Counter(committed) == want, (len(committed), len(want))
    assert Counter(_values_kcat(bootstrap)) == want
    assert _committed_offsets(bootstrap) == ends
    uncommitted = _values(bootstrap, committed=False)
    extra = Counter(uncommitted) - want
    assert set(extra) <= set(want)  # nothing but duplicates of real transforms
    assert Counter(uncommitted) - extra == want
    return sum(extra.values())


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path, overrides={"offsets.topic.num.partitions": "2",
                                           "transaction.state.log.num.partitions": "2"})
    b.start()
    try:
        yield b
    finally:
        b.kill()
        b.release_shm()


def test_loop_sigkilled_20_times(broker):
    ends = _fill(broker.bootstrap)
    rnd = random.Random(46)
    kills = 0
    progress: list[int] = []
    while kills < 20:
        loop = Loop(broker.bootstrap, ends)
        try:
            # killed at a random moment of its steady state: a random number of commits in,
            # then a random part of a transaction's time (a few ms each)
            after = rnd.randint(1, 3)
            deadline = time.monotonic() + 60
            while loop.commits() < after and loop.proc.poll() is None:
                assert time.monotonic() < deadline, loop.lines[-5:]
                time.sleep(0.002)
            time.sleep(rnd.uniform(0.0, 0.03))
            assert loop.proc.poll() is None, f"the loop ended before kill {kills + 1}: {loop.lines[-5:]}"
        finally:
            loop.kill()
            progress.append(loop.commits())
        kills += 1
    last = Loop(broker.bootstrap, ends)
    assert last.wait(120) == 0, last.lines[-10:]
    aborted = _check_exactly_once(broker.bootstrap, ends)
    print(f"20 SIGKILLs: transactions committed by each instance {progress}, "
          f"{aborted} aborted duplicate records under read_uncommitted")
    # a kill between a commit and the next batch's first send aborts nothing: most do
    assert aborted > 0


def test_broker_sigkilled_under_the_loop(broker):
    ends = _fill(broker.bootstrap)
    rnd = random.Random(47)
    loops = [Loop(broker.bootstrap, ends)]
    try:
        for kill in range(3):
            # the loop is committing (again) when the broker dies: at a random moment after a
            # commit of this round
            done = sum(loop.commits() for loop in loops)
            deadline = time.monotonic() + 60
            while sum(loop.commits() for loop in loops) <= done:
                assert time.monotonic() < deadline, (kill, loops[-1].lines[-5:])
                if loops[-1].proc.poll() is not None:  # crashed on the last outage: restart it
                    assert loops[-1].proc.returncode == 1, loops[-1].lines[-5:]
                    loops.append(Loop(broker.bootstrap, ends))
                time.sleep(0.02)
            time.sleep(rnd.uniform(0.0, 0.3))
            assert loops[-1].proc.poll() is None, f"the loop ended before broker kill {kill + 1}"
            broker.kill()
            time.sleep(rnd.uniform(0.0, 1.0))
            broker.start()
        deadline = time.monotonic() + 120
        while (code := loops[-1].wait(max(1.0, deadline - time.monotonic()))) != 0:
            assert code == 1 and time.monotonic() < deadline, loops[-1].lines[-10:]
            loops.append(Loop(broker.bootstrap, ends))
    finally:
        for loop in loops:
            loop.kill()
    aborted = _check_exactly_once(broker.bootstrap, ends)
    errors = [line for loop in loops for line in loop.lines if line.startswith("error")]
    print(f"3 broker SIGKILLs: {len(loops) - 1} loop restarts {errors}, {aborted} aborted duplicate records")
