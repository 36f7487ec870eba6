"""Compaction throughput: MB/s of log cleaned by one full cleaner pass.

The log: ~200 MB in 16-MiB segments, 10,000 distinct keys written round after round with
1-KiB values (uncompressed batches of 50 records), so every pass keeps 1 record in 20. It is
built once and copied for each run; each run opens the copy with LogDir and times
``LogCleaner.clean_all`` (unthrottled, no step budget). Prints each run and the median of 3.

Usage: .venv/bin/python perf/bench_compaction.py [--mb 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

from appliance.config import BrokerConfig, TopicConfig
from appliance.records.batch import build_batch
from appliance.storage.log_dir import LogDir

__all__ = ["main"]

KEYS = 10_000
VALUE = 1024
PER_BATCH = 50
TOPIC = "bench"


def _broker(root: str) -> BrokerConfig:
    return BrokerConfig.load(overrides={"log.dirs": root, "log.writeback.mode": "os",
                                        "log.cleaner.backoff.ms": "0"})


def build(root: str, mb: int) -> int:
    bc = _broker(root)
    now = int(time.time() * 1000)
    d = LogDir.open(root, bc, now_ms=lambda: now)
    cfg = TopicConfig.from_overrides(bc, {"cleanup.policy": "compact",
                                          "segment.bytes": str(16 << 20),
                                          "min.cleanable.dirty.ratio": "0.01"})
    lg = d.create_partition(TOPIC, 0, cfg)
    pad = b"v" * VALUE
    r = 0
    while lg.size_bytes < mb << 20:
        for k0 in range(0, KEYS, PER_BATCH):
            recs = [(b"key-%06d" % k, (b"%d:" % r) + pad[:VALUE - 8]) for k in range(k0, k0 + PER_BATCH)]
            lg.append(build_batch(recs, base_timestamp=now))
        r += 1
    lg.roll()
    size = lg.size_bytes
    d.close()
    return size


def run_once(src: str, work: str) -> tuple[float, int, int]:
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    now = int(time.time() * 1000)
    d = LogDir.open(work, _broker(work), now_ms=lambda: now)
    lg = d.partitions[(TOPIC, 0)]
    before = lg.size_bytes
    t0 = time.perf_counter()
    d.cleaner.clean_all(d.partitions, now)
    dt = time.perf_counter() - t0
    after = lg.size_bytes
    assert d.cleaner.stats.passes == 1
    d.close()
    return dt, before, after


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        src, work = os.path.join(tmp, "src"), os.path.join(tmp, "work")
        t0 = time.perf_counter()
        size = build(src, args.mb)
        print(f"built {size / 1e6:.0f} MB, {KEYS} keys, {VALUE}-byte values in "
              f"{time.perf_counter() - t0:.1f} s")
        rates = []
        for i in range(args.runs):
            dt, before, after = run_once(src, work)
            rates.append(before / 1e6 / dt)
            print(f"run {i + 1}: cleaned {before / 1e6:.0f} MB -> {after / 1e6:.1f} MB in "
                  f"{dt:.2f} s = {rates[-1]:.0f} MB/s")
        print(f"compaction throughput (median of {args.runs}): {statistics.median(rates):.0f} MB/s")


if __name__ == "__main__":
    main()
