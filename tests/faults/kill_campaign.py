"""A SIGKILL campaign: rounds of random kills (a disk worker, a network worker, or the whole
process group followed by a restart) while an idempotent confluent-kafka producer (acks=all)
streams and a consumer group reads and commits. After each round every acknowledged record must
be in the log exactly once, at its acknowledged offset, in order, with a valid CRC, and the
group's committed offsets must never have gone backwards. Once the kills are over, the group
must read everything up to the end of the log (check_group_caught_up): a long campaign once
saw it read nothing for 45 s while coordinator moves came faster than the session timeout
(each restores the group's last members and gives the dead ones a fresh session timeout,
as Kafka's coordinator does) and then catch up within seconds of the last kill.

Shared by tests/faults/test_kill_campaign.py (a few rounds) and scripts/kill_campaign.py (200)."""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.broker.clients import create_topic
from tests.broker.procs import wait_gone
from tests.broker_process import BrokerProcess
from tests.faults.procs import wait_workers, worker_pid_map
from tests.partition_reader import read_partition

__all__ = ["Campaign", "CampaignReport"]

TOPIC = "kill-campaign"
GROUP = "kill-campaign-group"


@dataclass
class CampaignReport:
    rounds: int = 0
    kills: Counter = field(default_factory=Counter)
    acked: int = 0
    acked_unplaced: int = 0  # of those, delivered without an offset (checked by value)
    failed_deliveries: int = 0  # delivery errors (never acknowledged: allowed to be absent)
    unacked_present: int = 0  # failed deliveries that are in the log anyway (once)
    consumed: int = 0
    commits: int = 0
    commit_errors: int = 0
    crc_errors: int = 0
    problems: list[str] = field(default_factory=list)  # each a broken promise
    restart_seconds: list[float] = field(default_factory=list)

    def line(self) -> str:
        return (f"rounds {self.rounds}, kills {dict(self.kills)}, acknowledged {self.acked} "
                f"({self.acked_unplaced} with no offset), "
                f"failed deliveries {self.failed_deliveries} (in the log anyway: "
                f"{self.unacked_present}), consumed by the group {self.consumed}, commits "
                f"{self.commits} (errors {self.commit_errors}), CRC errors {self.crc_errors}, "
                f"problems {len(self.problems)}")


class _Keep(logging.Handler):
    """A log handler that keeps the messages in a bounded deque."""

    def __init__(self, lines: deque) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{time.strftime('%H:%M:%S')} {record.getMessage()[:300]}")


class _Stream(threading.Thread):
    """The idempotent producer: value b'kc-<partition>-<seq>' with seq counting per partition."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        super().__init__(daemon=True)
        # librdkafka's idempotence log (producer id, epoch bumps, drains), the last lines kept
        # to say what the producer did before a broken promise
        self.eos: deque[str] = deque(maxlen=40)
        logger = logging.getLogger(f"kill-campaign-producer-{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_Keep(self.eos))
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 300_000, "retry.backoff.ms": 50,
                           "reconnect.backoff.max.ms": 250, "socket.connection.setup.timeout.ms": 2000,
                           "topic.metadata.refresh.interval.ms": 1000, "debug": "eos"}, logger=logger)
        self.partitions = partitions
        self.seq = [0] * partitions
        self.acked: dict[tuple[int, int], bytes] = {}
        # delivered with no offset (msg.offset() None: librdkafka knew none; seen once in CI's
        # cluster campaign, cause not yet established): checked by value; value -> partition
        self.acked_unplaced: dict[bytes, int] = {}
        self.failed: set[bytes] = set()
        self.twice: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.run_ok = threading.Event()
        self.run_ok.set()
        self.stop = threading.Event()
        self.exc: BaseException | None = None

    def _on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None and msg.offset() is None:
                self.acked_unplaced[msg.value()] = msg.partition()
            elif err is None:
                key = (msg.partition(), msg.offset())
                if key in self.acked:
                    self.twice.append(key)
                self.acked[key] = msg.value()
            else:
                self.failed.add(msg.value())

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                if not self.run_ok.wait(0.1):
                    self.p.poll(0.01)
                    continue
                part = i % self.partitions
                value = b"kc-%d-%09d" % (part, self.seq[part])
                try:
                    self.p.produce(TOPIC, value, partition=part, on_delivery=self._on_delivery)
                    self.seq[part] += 1
                    i += 1
                except BufferError:
                    self.p.poll(0.05)
                self.p.poll(0)
                if i % 50 == 0:
                    time.sleep(0.01)  # ~ a few thousand records/s: kills land mid-stream
        except BaseException as e:  # noqa: BLE001 - reported by the campaign
            self.exc = e

    def pause_and_flush(self, timeout: float) -> int:
        """Stop producing and wait for every delivery report; returns how many are still out."""
        self.run_ok.clear()
        time.sleep(0.2)  # let the thread leave produce()
        return self.p.flush(timeout)

    def unreported(self) -> str:
        """Where the deliveries with no report yet are: per partition, how many and the first
        (the value's sequence), e.g. "p1: 438 from seq 13638"."""
        with self.lock:
            reported: list[set[int]] = [set() for _ in range(self.partitions)]
            for value in [*self.acked.values(), *self.failed]:
                _, part, seq = value.split(b"-")
                reported[int(part)].add(int(seq))
        out = []
        for part, seen in enumerate(reported):
            missing = [s for s in range(self.seq[part]) if s not in seen]
            if missing:
                out.append(f"p{part}: {len(missing)} from seq {missing[0]}")
        return ", ".join(out)


class _Group(threading.Thread):
    """A consumer group member reading the topic and committing after every batch it reads."""

    def __init__(self, bootstrap: str, report: CampaignReport) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.report = bootstrap, report
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.positions: dict[int, int] = {}  # partition -> next offset the group would read

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "check.crcs": True, "session.timeout.ms": 10_000,
                      "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
                      "reconnect.backoff.max.ms": 250})
        c.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                msgs = c.consume(500, 0.2)
                good = 0
                positions = self.positions
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good += 1
                        p, nxt = m.partition(), m.offset() + 1
                        if nxt > positions.get(p, 0):
                            positions[p] = nxt
                    elif err.code() == KafkaError._BAD_MSG:
                        self.report.crc_errors += 1
                        self.report.problems.append(f"group read a corrupt record: {err}")
                    elif err.code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(err))
                self.report.consumed += good
                if good:
                    try:
                        c.commit(asynchronous=False)
                        self.report.commits += 1
                    except Exception:  # noqa: BLE001 - a coordinator being killed: retried next batch
                        self.report.commit_errors += 1
        finally:
            c.close()


class Campaign:
    """Owns the broker (restarting it after a whole-group kill), the stream and the group."""

    def __init__(self, workdir: Path, seed: int, partitions: int = 4, log_dirs: int = 2,
                 log: Callable[[str], None] = print) -> None:
        self._init_checks(workdir, seed, partitions, log)
        overrides = {"num.network.threads": "2", "offsets.topic.num.partitions": "4"}
        self.broker = BrokerProcess(self.workdir, num_log_dirs=log_dirs, overrides=overrides)
        self.overrides, self.log_dirs = overrides, log_dirs

    def _init_checks(self, workdir: Path, seed: int, partitions: int, log: Callable[[str], None]) -> None:
        """What every campaign keeps, whatever it kills (tests/cluster/kill_campaign.py too)."""
        self.workdir = Path(workdir)
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.log = log
        self.report = CampaignReport()
        self.verified = [0] * partitions  # offsets below this are checked already
        self.seen: set[bytes] = set()
        self.committed: dict[int, int] = {}

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    # -- set-up and tear-down -------------------------------------------------------------
    def start(self) -> None:
        self.broker.start()
        create_topic(self.bootstrap, TOPIC, self.partitions)
        self._start_clients()

    def _start_clients(self) -> None:
        self.stream = _Stream(self.bootstrap, self.partitions)
        self.group = _Group(self.bootstrap, self.report)
        self.stream.start()
        self.group.start()

    def _stop_clients(self) -> None:
        for t in (getattr(self, "stream", None), getattr(self, "group", None)):
            if t is not None:
                t.stop.set()
                t.join(30)

    def close(self) -> None:
        self._stop_clients()
        try:
            self.broker.stop()
        finally:
            self.broker.kill()

    # -- one round ------------------------------------------------------------------------
    def _wait_healthy(self, before: dict[str, list[int]], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = worker_pid_map(self.broker)
            if len(now["disk"]) == len(before["disk"]) and len(now["network"]) == len(before["network"]):
                return
            if self.broker.proc.poll() is not None:
                raise AssertionError(f"supervisor exited:\n{self.broker.log()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"workers not back in {timeout} s: {worker_pid_map(self.broker)}\n"
                             f"{self.broker.log()[-3000:]}")

    def kill_once(self) -> str:
        before = wait_workers(self.broker, self.log_dirs, 2)
        victim = self.rng.choice(["disk", "network", "group"])
        t0 = time.monotonic()
        if victim == "group":
            self.broker.kill()
            wait_gone(self.broker)
            self.broker._log.close()
            self.broker = BrokerProcess(self.workdir, num_log_dirs=self.log_dirs,
                                        overrides=self.overrides, port=self.broker.port)
            self.broker.start(timeout=120)
        else:
            pid = self.rng.choice(before[victim])
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while pid in worker_pid_map(self.broker)[victim] and time.monotonic() < deadline:
                time.sleep(0.02)
        self._wait_healthy(before)
        self.report.restart_seconds.append(time.monotonic() - t0)
        self.report.kills[victim] += 1
        return victim

    def round(self) -> str:
        """Stream a little, kill, stream a little more, then check every promise."""
        self.stream.run_ok.set()
        time.sleep(self.rng.uniform(0.3, 1.5))
        before = len(self.report.problems)
        victim = self.kill_once()
        time.sleep(self.rng.uniform(0.3, 1.0))
        left = self.stream.pause_and_flush(180)
        if left:
            self.report.problems.append(f"round {self.report.rounds}: {left} deliveries never reported "
                                        f"({self.stream.unreported()})")
        if self.stream.exc:
            raise self.stream.exc
        self.verify()
        self.check_commits()
        if len(self.report.problems) > before:
            self.log(f"round {self.report.rounds}: the producer's idempotence log before the problem:\n  "
                     + "\n  ".join(self.stream.eos))
        self.report.rounds += 1
        return victim

    # -- the checks ----------------------------------------------------------------------
    def verify(self) -> None:
        """Read every partition from the last verified offset to its end (CRCs checked) and
        hold it against the acknowledgements."""
        with self.stream.lock:
            acked = dict(self.stream.acked)
            unplaced = dict(self.stream.acked_unplaced)
            failed = set(self.stream.failed)
            twice = list(self.stream.twice)
        rep = self.report
        rep.acked, rep.failed_deliveries = len(acked) + len(unplaced), len(failed)
        rep.acked_unplaced = len(unplaced)
        if twice:
            rep.problems.append(f"offsets acknowledged twice: {twice[:5]}")
            self.stream.twice.clear()
        ends = {p: max((o for (q, o) in acked if q == p), default=-1) + 1
                for p in range(self.partitions)}
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "kc-verify",
                      "enable.auto.commit": False, "check.crcs": True,
                      "enable.partition.eof": True, "fetch.wait.max.ms": 50})
        try:
            for p in range(self.partitions):
                rows = self._read(c, p, self.verified[p], ends[p])
                last_seq = None
                for off, value in rows:
                    if value in self.seen:
                        rep.problems.append(f"p{p}@{off}: {value!r} is in the log twice")
                    self.seen.add(value)
                    if value in failed:
                        rep.unacked_present += 1
                    want = acked.get((p, off))
                    if want is not None and want != value:
                        rep.problems.append(f"p{p}@{off}: acknowledged {want!r}, stored {value!r}")
                    seq = int(value.rsplit(b"-", 1)[1])
                    if not value.startswith(b"kc-%d-" % p) or (last_seq is not None and seq <= last_seq):
                        rep.problems.append(f"p{p}@{off}: {value!r} out of order after seq {last_seq}")
                    last_seq = seq
                stored = {off for off, _ in rows}
                missing = [o for (q, o) in acked if q == p and o >= self.verified[p] and o not in stored]
                if missing:
                    rep.problems.append(f"p{p}: {len(missing)} acknowledged offsets missing, e.g. "
                                        f"{sorted(missing)[:5]}")
                if rows:
                    self.verified[p] = rows[-1][0] + 1
        finally:
            c.close()
        # each acknowledged with no offset must be in its partition (read up to its end above)
        lost = [(p, v) for v, p in unplaced.items() if v not in self.seen]
        if lost:
            rep.problems.append(f"{len(lost)} acknowledged with no offset are missing, e.g. {lost[:5]}")

    def _read(self, c: Consumer, p: int, start: int, end: int) -> list[tuple[int, bytes]]:
        """(offset, value) from ``start`` to the partition's end (at least ``end``); a corrupt
        record served is counted and noted."""
        def corrupt(err: KafkaError) -> bool:
            if err.code() != KafkaError._BAD_MSG:
                return False
            self.report.crc_errors += 1
            self.report.problems.append(f"p{p}: corrupt record served: {err}")
            return True
        return read_partition(c, TOPIC, p, start, end, corrupt)

    def check_group_caught_up(self, timeout: float = 90) -> None:
        """Once the kills are over: the group must read every partition up to the end the last
        :meth:`verify` read (a consumer that stopped for good after a coordinator or leader
        moved loses nothing acknowledged, yet its application is stuck)."""
        deadline = time.monotonic() + timeout
        while True:
            read = self.group.positions
            behind = {p: (read.get(p, 0), end) for p, end in enumerate(self.verified)
                      if read.get(p, 0) < end}
            if not behind or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if behind:
            self.report.problems.append(
                f"the group did not catch up within {timeout:.0f} s of the last round "
                f"(partition: (its position, the log end)) {behind}; its last errors: "
                f"{self.group.errors[-3:]}")

    def check_commits(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "enable.auto.commit": False})
        try:
            tps = c.committed([TopicPartition(TOPIC, p) for p in range(self.partitions)], timeout=30)
        except Exception as e:  # noqa: BLE001 - recorded; the coordinator may still be loading
            self.report.problems.append(f"committed offsets unreadable: {e}")
            return
        finally:
            c.close()
        for tp in tps:
            if tp.offset < 0:
                continue
            prev = self.committed.get(tp.partition, -1)
            if tp.offset < prev:
                self.report.problems.append(
                    f"round {self.report.rounds}: committed offset of p{tp.partition} went back "
                    f"from {prev} to {tp.offset}")
            self.committed[tp.partition] = max(prev, tp.offset)
