"""Where a validated append of small records spends its time, per record, in one process.

Usage: .venv/bin/python perf/bench_record_walk.py [--records 8000] [--value-size 100] [--runs 5]

One v2 batch of --records records (null keys, --value-size random bytes each). Thread CPU per
record, median of --runs runs, of: the CRC32C over the batch, the record walk
(native/records_walk.py), the fused validator (both, plus the header checks), PartitionLog.append
validated and not, and os.write of the same bytes; os.pwrite of them over pages already in the
page cache (the gap between the two is the page allocation, not the copy), and os.write into
blocks reserved first (appliance/storage/preallocate.py: what is left is the page cache's);
then the validated append over one batch again and again ("hot": it stays in the CPU caches)
against 200 distinct copies in turn ("cold": past the caches, as a batch an IPC producer wrote
on another CPU arrives). Temp files go to --dir.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.config import TopicConfig  # noqa: E402
from appliance.records.batch import HEADER_SIZE, build_batch  # noqa: E402
from appliance.storage.log import PartitionLog  # noqa: E402
from appliance.storage.preallocate import reserve  # noqa: E402
from native.buffers import as_u8  # noqa: E402
from native.crc import crc32c_raw  # noqa: E402
from native.records_walk import _walk  # noqa: E402
from native.validate import _validate_kernel  # noqa: E402

_CRC_START = 21  # CRC32C covers the batch from its attributes on
_COLD_COPIES = 200


def per_record(fn: Callable[[], None], calls: int, records: int, runs: int,
               reset: Callable[[], None] | None = None) -> float:
    """Median thread-CPU ns per record of ``calls`` calls of ``fn``, over ``runs`` runs;
    ``reset`` (untimed) before each run deletes what the last one wrote: freeing its page cache
    is not the next run's write."""
    fn()  # compile / fault in, untimed
    out = []
    for _ in range(runs):
        if reset is not None:
            reset()
        c0 = time.thread_time()
        for _ in range(calls):
            fn()
        out.append((time.thread_time() - c0) / (calls * records) * 1e9)
    return statistics.median(out)


def appends(d: str, batches: list, validate: bool, calls: int) -> Callable[[], None]:
    """A function appending ``calls`` batches (round robin) to a new partition log (the
    previous one is deleted by :func:`clear`)."""
    def run() -> None:
        lg = PartitionLog.open(os.path.join(d, "p-0"), TopicConfig.defaults(max_message_bytes=64 << 20))
        for i in range(calls):
            lg.append(batches[i % len(batches)], validate=validate)
        lg.close()
    return run


def clear(d: str) -> Callable[[], None]:
    """Deletes everything in ``d``."""
    def run() -> None:
        for p in Path(d).iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=8000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    n = args.records
    batch = build_batch([(None, os.urandom(args.value_size)) for _ in range(n)],
                        base_timestamp=1_700_000_000_000)
    a = as_u8(batch)
    size = len(a)
    rows = np.empty((4, 13), np.int64)
    init = np.int64(0xFFFFFFFF)
    print(f"one batch: {n} records of {args.value_size} B, {size} bytes; thread CPU ns per record, "
          f"median of {args.runs} runs")
    figures = {
        "crc32c": per_record(lambda: crc32c_raw(init, a, _CRC_START, size), 300, n, args.runs),
        "record walk": per_record(lambda: _walk(a, HEADER_SIZE, size, n), 300, n, args.runs),
        "fused validator": per_record(lambda: _validate_kernel(a, size, 1 << 30, rows), 300, n,
                                      args.runs),
    }
    d = tempfile.mkdtemp(prefix="bench-walk-", dir=args.dir)
    try:
        calls = 150
        hot = [bytearray(batch)]
        wipe = clear(d)  # before each run (untimed): freeing its pages is not the next one's write
        figures["append, validated"] = per_record(appends(d, hot, True, calls), 1, calls * n,
                                                  args.runs, wipe)
        figures["append, not validated"] = per_record(appends(d, hot, False, calls), 1, calls * n,
                                                      args.runs, wipe)
        path = os.path.join(d, "plain")

        def plain() -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            for _ in range(calls):
                os.write(fd, batch)
            os.close(fd)
        figures["os.write"] = per_record(plain, 1, calls * n, args.runs, wipe)

        def overwrite() -> None:  # the file plain() left: every page is in the page cache
            fd = os.open(path, os.O_WRONLY)
            for i in range(calls):
                os.pwrite(fd, batch, i * size)
            os.close(fd)
        figures["os.pwrite over cached pages"] = per_record(overwrite, 1, calls * n, args.runs)

        def reserved() -> None:  # the blocks reserved first, as log.preallocate does
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if not reserve(fd, 0, calls * size):
                raise SystemExit(f"cannot reserve blocks in {d} (fallocate, or too little space)")
            for _ in range(calls):
                os.write(fd, batch)
            os.close(fd)
        figures["os.write into reserved blocks"] = per_record(reserved, 1, calls * n, args.runs, wipe)
        cold = [bytearray(batch) for _ in range(_COLD_COPIES)]
        calls = 2 * _COLD_COPIES
        figures["append, validated, hot (1 batch)"] = per_record(appends(d, hot, True, calls), 1,
                                                                 calls * n, args.runs, wipe)
        figures[f"append, validated, cold ({_COLD_COPIES} batches)"] = per_record(
            appends(d, cold, True, calls), 1, calls * n, args.runs, wipe)
    finally:
        shutil.rmtree(d)
    for name, ns in figures.items():
        print(f"  {name:40s} {ns:6.1f} ns/record")
    print(f"validated append / os.write: {figures['os.write'] / figures['append, validated']:.0%}")


if __name__ == "__main__":
    main()
