"""Consumer-group benchmark: time for a 3-member group to become Stable; log-cleaner throughput.

Usage: .venv/bin/python perf/bench_groups.py [--runs 5] [--cleaner-mb 200] [--cleaner-runs 3]
                                              [--skip-cleaner] [--skip-groups]

Group formation: a real broker (`appliance serve`) per setting of group.initial.rebalance.delay.ms
(0 and Kafka's default 3000). Per run, three raw-protocol members of a fresh group (connected,
coordinator found) are released at once; each joins (JoinGroup v5, answering MEMBER_ID_REQUIRED),
syncs (the leader assigns a 6-partition topic by range), heartbeats every 20 ms and rejoins when
told REBALANCE_IN_PROGRESS, as a consumer does. Measured: first JoinGroup sent -> the last of the
three SyncGroup answers of the first generation holding all three members. Target: <= delay +
100 ms (median of --runs). The short heartbeat keeps the client side out of the figure: with
delay 0 the first member forms generation 1 alone and must learn of the rebalance by heartbeat.

Log cleaner: a compacted partition of --cleaner-mb MB (1 KiB values, 10,000 distinct keys,
batches of 100 records, 16 MiB segments) written through PartitionLog, then
LogCleaner.clean_all timed; MB/s = size of the log before cleaning / time (the cleaner reads
the dirty section twice: once to build the offset map, once to copy), median of --cleaner-runs. Temp dirs are removed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.client.connection import BrokerConnection  # noqa: E402
from appliance.coordinator.consumer_protocol import decode_assignment, encode_assignment  # noqa: E402
from appliance.errors import ErrorCode  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402
from tests.groups.raw import subscription  # noqa: E402

TOPIC, PARTITIONS, MEMBERS = "bench-groups", 6, 3
HEARTBEAT_S = 0.02


class _Member(threading.Thread):
    def __init__(self, port: int, group: str, start: threading.Barrier, result: dict, lock: threading.Lock,
                 stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.conn = BrokerConnection("127.0.0.1", port, timeout=30, client_id="bench")
        r = self.conn.request(10, {"key": group, "key_type": 0}, version=1)
        assert r.error_code == 0, r
        self.group, self.start_at, self.result, self.lock, self.stop = group, start, result, lock, stop
        self.member_id = ""
        self.sent_first: float | None = None

    def _join(self):
        body = {"group_id": self.group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                "member_id": self.member_id, "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription([TOPIC])}]}
        if self.sent_first is None:
            self.sent_first = time.perf_counter()
        r = self.conn.request(11, body, version=5)
        if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = body["member_id"] = r.member_id
            r = self.conn.request(11, body, version=5)
        return r

    def run(self) -> None:
        self.start_at.wait()
        while not self.stop.is_set():
            r = self._join()
            if r.error_code != 0:
                continue
            self.member_id, gen = r.member_id, r.generation_id
            given = []
            if r.leader == r.member_id:  # range: consecutive partitions per member, in id order
                ids = sorted(m.member_id for m in r.members)
                per, extra = divmod(PARTITIONS, len(ids))
                pos = 0
                for i, mid in enumerate(ids):
                    n = per + (i < extra)
                    given.append({"member_id": mid,
                                  "assignment": encode_assignment([(TOPIC, list(range(pos, pos + n)))])})
                    pos += n
                with self.lock:
                    self.result.setdefault("size", {})[gen] = len(ids)
            s = self.conn.request(14, {"group_id": self.group, "generation_id": gen,
                                       "member_id": self.member_id, "group_instance_id": None,
                                       "assignments": given}, version=3)
            if s.error_code != 0:
                continue
            decode_assignment(s.assignment)
            with self.lock:
                self.result.setdefault("synced", {}).setdefault(gen, []).append(time.perf_counter())
            while not self.stop.wait(HEARTBEAT_S):
                code = self.conn.request(12, {"group_id": self.group, "generation_id": gen,
                                              "member_id": self.member_id, "group_instance_id": None},
                                         version=1).error_code
                if code != 0:
                    break  # REBALANCE_IN_PROGRESS: rejoin

    def leave(self) -> None:
        try:
            self.conn.request(13, {"group_id": self.group, "member_id": self.member_id}, version=1)
        finally:
            self.conn.close()


def form_group(port: int, group: str, timeout: float = 30.0) -> float:
    """Seconds from the first JoinGroup to all three members synced in one 3-member generation."""
    start, lock, stop, result = threading.Barrier(MEMBERS), threading.Lock(), threading.Event(), {}
    members = [_Member(port, group, start, result, lock, stop) for _ in range(MEMBERS)]
    for m in members:
        m.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with lock:
                for gen, size in result.get("size", {}).items():
                    done = result.get("synced", {}).get(gen, [])
                    if size == MEMBERS and len(done) == MEMBERS:
                        return max(done) - min(m.sent_first for m in members)
            time.sleep(0.001)
        raise TimeoutError(f"group {group} not Stable with {MEMBERS} members in {timeout} s: {result}")
    finally:
        stop.set()
        for m in members:
            m.join(10)
            m.leave()


def bench_groups(runs: int) -> bool:
    all_met = True
    for delay in (0, 3000):
        work = Path(tempfile.mkdtemp(prefix="bench-groups-"))
        try:
            with BrokerProcess(work, overrides={"group.initial.rebalance.delay.ms": str(delay),
                                                "offsets.topic.num.partitions": "4"}) as b:
                with BrokerConnection("127.0.0.1", b.port) as conn:
                    conn.request(19, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                                  "replication_factor": 1, "assignments": [],
                                                  "configs": []}], "timeout_ms": 10000,
                                      "validate_only": False})
                form_group(b.port, "bench-warmup")  # creates __consumer_offsets, warms imports
                times = [form_group(b.port, f"bench-{delay}-{i}") * 1000 for i in range(runs)]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        med = statistics.median(times)
        target = delay + 100
        met = med <= target
        all_met &= met
        print(f"group formation, 3 members, group.initial.rebalance.delay.ms={delay}: "
              f"median {med:.1f} ms (runs: {', '.join(f'{t:.1f}' for t in times)}); "
              f"target <= {target} ms: {'MET' if met else 'NOT MET'}")
    return all_met


def bench_cleaner(size_mb: int, runs: int) -> None:
    from appliance.config import BrokerConfig, TopicConfig
    from appliance.records.batch import build_batch
    from appliance.storage.log_dir import LogDir
    keys, value_size, per_batch = 10_000, 1024, 100
    rates = []
    for run in range(runs):
        root = Path(tempfile.mkdtemp(prefix="bench-cleaner-"))
        try:
            now = 1_700_000_000_000
            bc = BrokerConfig.load(overrides={"log.dirs": str(root), "log.writeback.mode": "os",
                                              "log.cleaner.backoff.ms": "0"})
            d = LogDir.open(str(root), bc, now_ms=lambda now=now: now)
            plog = d.create_partition("compacted", 0, TopicConfig.from_overrides(bc, {
                "cleanup.policy": "compact", "segment.bytes": str(16 << 20),
                "min.cleanable.dirty.ratio": "0.01"}))
            value = bytes(range(256)) * (value_size // 256)
            total_records = size_mb * (1 << 20) // (value_size + 40)
            i = 0
            while i < total_records:
                recs = [(b"key-%05d" % ((i + j) % keys), value) for j in range(per_batch)]
                plog.append(build_batch(recs, base_timestamp=now))
                i += per_batch
            before = plog.size_bytes
            t0 = time.perf_counter()
            d.cleaner.clean_all(d.partitions, now)
            took = time.perf_counter() - t0
            st = d.cleaner.stats
            rate = before / took / 1e6  # MB of log (as it was before the pass) per second
            rates.append(rate)
            print(f"  cleaner run {run + 1}: log {before / 1e6:.1f} MB -> {plog.size_bytes / 1e6:.1f} MB; "
                  f"read {st.bytes_read / 1e6:.1f} MB, wrote {st.bytes_written / 1e6:.1f} MB, "
                  f"removed {st.records_removed} records in {took:.2f} s = {rate:.1f} MB/s")
            d.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"log cleaner, {size_mb} MB compacted log, {keys} keys: median {statistics.median(rates):.1f} MB/s")


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cleaner-mb", type=int, default=200)
    ap.add_argument("--cleaner-runs", type=int, default=3)
    ap.add_argument("--skip-cleaner", action="store_true")
    ap.add_argument("--skip-groups", action="store_true")
    args = ap.parse_args()
    ok = True
    if not args.skip_groups:
        ok = bench_groups(args.runs)
    if not args.skip_cleaner:
        bench_cleaner(args.cleaner_mb, args.cleaner_runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
