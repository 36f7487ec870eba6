"""Issue 14's required behaviour when one log dir's disk fills or dies (Kafka's JBOD, KIP-112),
on real failing file systems: each log dir is its own loop-mounted ext4 image.

Each test runs the whole scenario and collects every broken promise before failing, so one run
against a broker without log-dir isolation shows how it fails today:
- the other dir's partitions keep accepting (produce rate within 20 % of before) and serving;
- the failed dir's partitions answer KAFKA_STORAGE_ERROR (56) to produce and fetch, promptly;
- the broker process tree stays up (the healthy disk worker and the network workers untouched,
  the failed dir's worker not respawned into a crash loop);
- after the disk comes back every acknowledged record is readable with a valid CRC (the topic
  fsyncs every message, so for the dead disk too every acknowledged record was durable)."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, fetch_body, produce_body
from tests.broker_process import BrokerProcess
from tests.faults.loopfs import cannot_mount_reason, loop_disks
from tests.faults.procs import cli_describe, wait_workers, worker_pid_map

# timed against itself: run alone, not beside another worker's tests (Makefile)
pytestmark = [pytest.mark.alone, pytest.mark.timeout(420)]  # its produce rates before and after a failure are compared

TOPIC = "jbod"
STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)
VALUE = 1000  # bytes per record streamed to the failing disk
RATE_VALUE = 200  # bytes per record of the rate probes on the healthy disk
PROBE = 512 << 10  # a raw produce probe: bigger than what is left on a "full" disk


class Acks:
    """Delivery reports of a confluent-kafka producer."""

    def __init__(self) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.stamps: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[(msg.partition(), msg.offset())] = msg.value()
                self.stamps.append(time.monotonic())
            else:
                self.errors.append(err.str())


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "enable.idempotence": True, "message.timeout.ms": 20_000,
                     "retry.backoff.ms": 100, "queue.buffering.max.messages": 20_000})


class Stream(threading.Thread):
    """Produce to one partition until stopped (values b'<partition>-<seq>' padded)."""

    def __init__(self, bootstrap: str, partition: int, acks: Acks, pace: float) -> None:
        super().__init__(daemon=True)
        self.p, self.partition, self.acks, self.pace = _producer(bootstrap), partition, acks, pace
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            v = (b"%d-%09d-" % (self.partition, i)).ljust(VALUE, b".")
            try:
                self.p.produce(TOPIC, v, partition=self.partition, on_delivery=self.acks)
                i += 1
            except BufferError:
                self.p.poll(0.05)
            self.p.poll(0)
            if i % 20 == 0:
                time.sleep(self.pace)
        # What the failed dir never acknowledged would only time out (message.timeout.ms, 20 s)
        # in the queue: purge it now (reported as errors, never as acknowledged), then drain.
        self.p.purge()
        self.p.flush(30)


def produce_rate(bootstrap: str, partition: int, acks: Acks, seconds: float = 1.0,
                 windows: int = 5) -> float:
    """The median of ``windows`` measurements of :func:`_rate_once`: the machine is shared, and
    one window alone, disturbed either way, must not decide (with 3 windows a CI run measured
    0.80x once where runs alone gave 0.85-1.06x: 5 narrow the median's spread). The best window was used before;
    a single outlier "before" window (274k and 296k records/s in two CI runs, against 140-170k
    in every other window before and after) then failed healthy brokers. One-second windows:
    every record a probe writes is read back and checked afterwards, and that read (~100k
    records/s through the consumer) is most of the test's time."""
    return statistics.median(_rate_once(bootstrap, partition, acks, seconds) for _ in range(windows))


def _rate_once(bootstrap: str, partition: int, acks: Acks, seconds: float) -> float:
    """Acknowledged records per second to ``partition`` over ``seconds`` of flat-out produce."""
    p = _producer(bootstrap)
    mine = Acks()

    def both(err, msg) -> None:
        mine(err, msg)
        acks(err, msg)

    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < seconds:
        try:
            p.produce(TOPIC, (b"r%d-%09d-" % (partition, i)).ljust(RATE_VALUE, b"."), partition=partition,
                      on_delivery=both)
            i += 1
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(30)
    return sum(1 for s in mine.stamps if s - t0 <= seconds) / seconds


def raw_codes(port: int, partition: int, timeout: float = 15.0) -> tuple[str, str]:
    """(produce outcome, fetch outcome) for ``partition``: an error name, or 'no answer in N s'."""
    out = []
    for api in ("produce", "fetch"):
        t0 = time.monotonic()
        try:
            with RawConnection(port, timeout=timeout) as c:
                if api == "produce":
                    r = c.request(0, 7, produce_body(TOPIC, partition, build_batch([(None, bytes(PROBE))]),
                                                     acks=-1, timeout_ms=5000))
                    code = r.responses[0].partition_responses[0].error_code
                else:
                    r = c.request(1, 11, fetch_body(TOPIC, partition, 0, max_wait_ms=100))
                    code = r.responses[0].partitions[0].error_code
            out.append(f"{ErrorCode(code).name} ({code}) in {time.monotonic() - t0:.1f} s")
        except TimeoutError:
            out.append(f"no answer in {timeout:.0f} s")
        except (ConnectionError, OSError) as e:
            out.append(f"connection failed: {e!r}")
    return out[0], out[1]


def read_back(bootstrap: str, partitions: int, ends: dict[int, int],
              short_ok: frozenset[int] = frozenset()) -> tuple[dict, list[str]]:
    """Every record of every partition up to ``ends`` (or its end, for ``short_ok``) with CRCs
    checked: ({(p, off): value}, [problems])."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "jbod-verify", "check.crcs": True,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    stored: dict[tuple[int, int], bytes] = {}
    problems: list[str] = []
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        done: set[int] = {p for p in range(partitions) if ends.get(p, 0) == 0}
        deadline = time.monotonic() + 90
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                err = m.error()
                if err is None:
                    stored[(m.partition(), m.offset())] = m.value()
                    if m.offset() + 1 >= ends.get(m.partition(), 0):
                        done.add(m.partition())
                elif err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= ends.get(m.partition(), 0) or m.partition() in short_ok:
                        done.add(m.partition())
                else:
                    problems.append(f"reading p{m.partition()}: {err.str()}")
        if len(done) < partitions:
            problems.append(f"read back timed out; partitions done {sorted(done)} of {partitions}")
    finally:
        c.close()
    return stored, problems


@pytest.fixture
def jbod(tmp_path, request):
    """A broker whose two log dirs are ext4 images (disk0 roomy: 2 GiB, sparse, as the rate probes write ~0.5 GB without fsyncs; disk1 64 MiB: the one that
    fails); topic 'jbod' has partition 0 on disk0 and partition 1 on disk1 and fsyncs every
    message unless the test is parametrized with flush='default'."""
    reason = cannot_mount_reason(tmp_path)
    if reason:
        pytest.skip(reason)
    flush = getattr(request, "param", "every")
    config = {"segment.bytes": str(4 << 20)}
    if flush == "every":
        config["flush.messages"] = "1"
    with loop_disks(tmp_path, 2, size_mb=[2048, 64]) as disks:
        holder = {"broker": BrokerProcess(tmp_path, num_log_dirs=2), "flush": flush}
        try:
            b = holder["broker"].start()
            create_topic(b.bootstrap, TOPIC, partitions=2, config=config)
            assert (disks[0].mount / f"{TOPIC}-0").is_dir() and (disks[1].mount / f"{TOPIC}-1").is_dir()
            yield holder, disks
        finally:
            try:
                holder["broker"].stop(timeout=20)
            except Exception:  # noqa: BLE001 - a broker wedged on a dead disk: SIGKILL below
                pass
            holder["broker"].kill()


def _tree_problems(b: BrokerProcess, before: dict[str, list[int]], healthy_disk_pid: int) -> list[str]:
    out = []
    if b.proc.poll() is not None:
        out.append(f"the supervisor exited with {b.proc.returncode}")
        return out
    now = worker_pid_map(b)
    if now["network"] != before["network"]:
        out.append(f"network workers changed: {before['network']} -> {now['network']}")
    if healthy_disk_pid not in now["disk"]:
        out.append(f"the healthy dir's disk worker {healthy_disk_pid} is gone: {now['disk']}")
    restarts = b.log().count("restarting disk worker 1")
    if restarts > 1:
        out.append(f"disk worker 1 was respawned {restarts} times (a crash loop)")
    return out


def _pid_of_disk(b: BrokerProcess, index: int) -> int:
    (pid,) = b.worker_pids(f"disk worker {index} ")
    return pid


def _scenario(holder: dict, disks, fail, recover, capsys) -> None:
    b: BrokerProcess = holder["broker"]
    before = wait_workers(b, disk=2, network=2)
    healthy_pid = _pid_of_disk(b, 0)
    acks = Acks()
    problems: list[str] = []
    notes: list[str] = []

    stream = Stream(b.bootstrap, 1, acks, pace=0.005)  # keeps writing to the failing disk
    stream.start()
    try:
        rate_before = produce_rate(b.bootstrap, 0, acks)
        notes.append(f"partition 0 (healthy disk) produce rate before: {rate_before:.0f} records/s")
        t_fail = time.monotonic()
        fail(disks[1], acks)
        notes.append(f"failure injected in {time.monotonic() - t_fail:.1f} s; stream errors so far: "
                     f"{sorted(set(acks.errors))[:3]}")

        produce_code, fetch_code = raw_codes(b.port, 1)
        notes.append(f"failed dir, partition 1: produce -> {produce_code}; fetch -> {fetch_code}")
        if not produce_code.startswith("KAFKA_STORAGE_ERROR"):
            problems.append(f"produce to the failed dir's partition: {produce_code}, want KAFKA_STORAGE_ERROR")
        if recover == "restart" and not fetch_code.startswith("KAFKA_STORAGE_ERROR"):
            problems.append(f"fetch from the dead dir's partition: {fetch_code}, want KAFKA_STORAGE_ERROR")

        rate_after = produce_rate(b.bootstrap, 0, acks)
        notes.append(f"partition 0 produce rate after: {rate_after:.0f} records/s "
                     f"({rate_after / max(rate_before, 1e-9):.2f}x)")
        if rate_after < 0.8 * rate_before:
            # One-second windows on a shared machine: a single high "before" window (seen once
            # in CI: 274k/s against a usual 150-210k/s) fails a healthy broker. A slowdown the
            # failed dir causes persists, so it is measured once more before it counts.
            rate_after = max(rate_after, produce_rate(b.bootstrap, 0, acks))
            notes.append(f"partition 0 produce rate re-measured: {rate_after:.0f} records/s "
                         f"({rate_after / max(rate_before, 1e-9):.2f}x)")
        if rate_after < 0.8 * rate_before:
            problems.append(f"healthy partition's produce rate fell to {rate_after:.0f}/s from "
                            f"{rate_before:.0f}/s ({rate_after / max(rate_before, 1e-9):.2f}x, bar 0.8x)")
        healthy_fetch = raw_codes(b.port, 0)[1]
        if not healthy_fetch.startswith("NONE"):
            problems.append(f"fetch from the healthy partition: {healthy_fetch}")
        problems += _tree_problems(b, before, healthy_pid)
    finally:
        stream.stop.set()
        stream.join(60)

    if recover == "free":  # full disk: space comes back, produce resumes by itself
        disks[1].free_filler()
        deadline = time.monotonic() + 30
        code = ""
        while time.monotonic() < deadline:
            code = raw_codes(b.port, 1, timeout=10)[0]
            if code.startswith("NONE"):
                break
            time.sleep(1)
        notes.append(f"after freeing space, produce to partition 1 -> {code}")
        if not code.startswith("NONE"):
            problems.append(f"produce did not resume by itself after space was freed: {code}")
    else:  # dead disk: replace it (stop, remount: the journal replays) and restart
        try:
            b.stop(timeout=30)
            notes.append("broker stopped cleanly with a dead disk")
        except Exception as e:  # noqa: BLE001 - recorded; the broker is killed instead
            problems.append(f"broker did not stop within 30 s with a dead disk ({e!r}); SIGKILLed")
            b.kill()
        disks[1].unmount()
        disks[1].mount_again()
        holder["broker"] = b = BrokerProcess(b.workdir, num_log_dirs=2, port=b.port)
        t0 = time.monotonic()
        b.start(timeout=120)
        notes.append(f"restarted on the remounted disk in {time.monotonic() - t0:.1f} s")

    ends = {p: max((o for (q, o) in acks.acked if q == p), default=-1) + 1 for p in (0, 1)}
    durable_only = holder.get("flush") == "default" and recover == "restart"
    stored, read_problems = read_back(b.bootstrap, 2, ends, frozenset({1} if durable_only else ()))
    problems += read_problems
    # without fsyncs the dead disk kept only what the kernel had written back: partition 1 may
    # end early (recovery cuts it cleanly), but what it holds must be what was acknowledged
    lost = [k for k, v in acks.acked.items()
            if stored.get(k) != v and not (durable_only and k[0] == 1 and k not in stored)]
    for p in (0, 1):
        offs = sorted(o for (q, o) in stored if q == p)
        if offs != list(range(len(offs))):
            problems.append(f"partition {p}: offsets read back are not dense from 0")
    kept1 = sum(1 for (q, _) in stored if q == 1)
    notes.append(f"acknowledged {len(acks.acked)} (partition 1: {ends[1]} offsets, {kept1} read back), "
                 f"lost or changed {len(lost)}; producer errors {len(acks.errors)} "
                 f"{sorted(set(acks.errors))[:3]}")
    if lost:
        problems.append(f"{len(lost)} acknowledged records lost or changed, e.g. {sorted(lost)[:5]}")
    log = b.log_path.read_text(errors="replace")  # the whole file: both brokers, same port
    failed_dir = str(disks[1].mount)
    about_dir = [line for line in log.splitlines()
                 if failed_dir in line and (" ERROR " in line or " WARNING " in line)]
    cause = "No space left" if recover == "free" else "Input/output error"
    if not any(cause in line for line in about_dir):
        problems.append(f"no log line names the failed dir {failed_dir} with its cause ({cause!r})")
    if len(about_dir) > 10:
        problems.append(f"{len(about_dir)} ERROR/WARNING lines about the failed dir (want it logged "
                        f"once, repeats rate-limited with a count)")
    excerpt = "\n".join(line for line in log.splitlines()
                        if " ERROR " in line or " WARNING " in line or "Error" in line)[-4000:]
    with capsys.disabled():
        print("\n" + "\n".join(f"  {n}" for n in notes))
    assert not problems, "\n".join(problems + ["-- notes:"] + notes + ["-- broker log:", excerpt])


def test_full_disk_takes_only_its_partitions_offline(jbod, capsys):
    holder, disks = jbod

    def fill(disk, acks: Acks) -> None:
        disk.fill(leave_bytes=256 << 10)  # the stream itself writes the last 256 KiB
        # Done when the disk is nearly full or the broker has already taken the dir offline (a
        # write can fail with some space left: ext4 allocates in blocks and extents).
        offline = f"log dir {disk.mount} is offline"
        deadline = time.monotonic() + 30
        while (disk.free_bytes() > 64 << 10 and offline not in holder["broker"].log()
               and time.monotonic() < deadline):
            time.sleep(0.2)

    _scenario(holder, disks, fill, "free", capsys)


@pytest.mark.parametrize("jbod", ["every", "default"], indirect=True,
                         ids=["fsync-every-message", "default-flush"])
def test_dead_disk_takes_only_its_partitions_offline(jbod, capsys):
    holder, disks = jbod

    def kill(disk, acks: Acks) -> None:
        time.sleep(1.0)  # a second of acknowledged, fsynced records on the doomed disk first
        disk.shutdown()

    _scenario(holder, disks, kill, "restart", capsys)


def test_broker_starts_with_a_dead_disk(jbod, capsys):
    """A disk that died while the broker was down: the broker starts on the healthy dirs, the
    dead dir's partitions answer KAFKA_STORAGE_ERROR, and after the disk is replaced (remounted)
    and the broker restarted, the dead dir's fsynced records are all back."""
    holder, disks = jbod
    b: BrokerProcess = holder["broker"]
    acks = Acks()
    p = _producer(b.bootstrap)
    for i in range(2000):
        p.produce(TOPIC, b"boot-%06d" % i, partition=i % 2, on_delivery=acks)
        p.poll(0)
    assert p.flush(60) == 0 and len(acks.acked) == 2000
    b.stop(timeout=60)
    disks[1].shutdown()
    problems, notes = [], []
    holder["broker"] = b = BrokerProcess(b.workdir, num_log_dirs=2, port=b.port)
    try:
        b.start(timeout=120)
    except Exception as e:  # noqa: BLE001 - the finding itself
        problems.append(f"the broker did not start with one dead log dir: {str(e)[:300]}")
    if not problems:
        produce_code, fetch_code = raw_codes(b.port, 1)
        notes.append(f"dead dir at start, partition 1: produce -> {produce_code}; fetch -> {fetch_code}")
        if not (produce_code.startswith("KAFKA_STORAGE_ERROR") and fetch_code.startswith("KAFKA_STORAGE_ERROR")):
            problems.append(f"partition 1 on the dead dir: produce {produce_code}, fetch {fetch_code}; "
                            f"want KAFKA_STORAGE_ERROR for both")
        healthy = raw_codes(b.port, 0)
        notes.append(f"healthy partition 0: produce -> {healthy[0]}; fetch -> {healthy[1]}")
        dirs = {d["logDir"]: d for d in cli_describe(b.bootstrap)["brokers"][0]["logDirs"]}
        notes.append(f"log-dirs --describe: { {k: v['error'] for k, v in dirs.items()} }")
        if dirs.get(str(disks[1].mount), {}).get("error") != "KafkaStorageException":
            problems.append(f"log-dirs --describe does not show the dead dir offline: {dirs}")
        if dirs.get(str(disks[0].mount), {}).get("error") is not None:
            problems.append(f"log-dirs --describe shows the healthy dir with an error: {dirs}")
        if not (healthy[0].startswith("NONE") and healthy[1].startswith("NONE")):
            problems.append(f"partition 0 on the healthy dir: {healthy}")
    try:
        b.stop(timeout=30)
    except Exception:  # noqa: BLE001 - a wedged broker: killed, the restart below must still work
        b.kill()
    b.kill()
    disks[1].unmount()
    disks[1].mount_again()
    holder["broker"] = b = BrokerProcess(b.workdir, num_log_dirs=2, port=b.port)
    b.start(timeout=120)
    stored, read_problems = read_back(b.bootstrap, 2, {0: 1000, 1: 1000})
    problems += read_problems
    lost = [k for k, v in acks.acked.items() if stored.get(k) != v]
    notes.append(f"after the disk came back: {len(stored)} records read, {len(lost)} acknowledged lost")
    if lost:
        problems.append(f"{len(lost)} acknowledged records lost after the disk came back")
    with capsys.disabled():
        print("\n" + "\n".join(f"  {n}" for n in notes))
    log = b.log_path.read_text(errors="replace")
    excerpt = "\n".join(line for line in log.splitlines() if " ERROR " in line or "WARNING" in line)[-3000:]
    assert not problems, "\n".join(problems + ["-- notes:"] + notes + ["-- broker log:", excerpt])


def test_an_offline_dir_comes_back_on_sigusr2_without_a_broker_restart(jbod, capsys):
    """Kill the disk under a running broker, remount it (the journal replays), then SIGUSR2 to
    the supervisor: only that dir's disk worker restarts, its partitions serve again (produce
    and fetch, with every fsynced record), and the healthy dir's worker is never touched."""
    holder, disks = jbod
    b: BrokerProcess = holder["broker"]
    before = wait_workers(b, disk=2, network=2)
    healthy_pid = _pid_of_disk(b, 0)
    acks = Acks()
    p = _producer(b.bootstrap)
    for i in range(400):
        p.produce(TOPIC, b"usr2-%06d" % i, partition=i % 2, on_delivery=acks)
        p.poll(0)
    assert p.flush(60) == 0 and len(acks.acked) == 400
    disks[1].shutdown()
    deadline = time.monotonic() + 30
    produce_code = ""
    while time.monotonic() < deadline:  # the disk worker notices at its next write to the dir
        produce_code = raw_codes(b.port, 1)[0]
        if produce_code.startswith("KAFKA_STORAGE_ERROR"):
            break
        time.sleep(0.5)
    assert produce_code.startswith("KAFKA_STORAGE_ERROR"), produce_code
    create_topic(b.bootstrap, "while-offline", partitions=2)  # placed on the healthy dir only
    assert sorted(n for n in os.listdir(disks[0].mount) if n.startswith("while-offline")) == [
        "while-offline-0", "while-offline-1"]
    disks[1].unmount()
    disks[1].mount_again()
    b.proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 60
    codes = ("", "")
    while time.monotonic() < deadline:
        codes = raw_codes(b.port, 1)
        if codes[0].startswith("NONE") and codes[1].startswith("NONE"):
            break
        time.sleep(0.5)
    assert codes[0].startswith("NONE") and codes[1].startswith("NONE"), codes
    now = worker_pid_map(b)
    assert healthy_pid in now["disk"] and now["network"] == before["network"], (before, now)
    assert b.log().count("]: restarting disk worker 1") == 1  # only the offline dir's worker
    ends = {q: max((o for (pp, o) in acks.acked if pp == q), default=-1) + 1 for q in (0, 1)}
    stored, problems = read_back(b.bootstrap, 2, ends)
    lost = [k for k, v in acks.acked.items() if stored.get(k) != v]
    with capsys.disabled():
        print(f"\n  SIGUSR2: partition 1 back with produce {codes[0]}, fetch {codes[1]}; "
              f"{len(stored)} records read, {len(lost)} acknowledged lost")
    assert not problems and not lost, (problems, lost[:5])
