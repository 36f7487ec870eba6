"""Benchmark of the native kernels (not a test). Run: .venv/bin/python perf/bench_native.py

Prints medians of several runs: CRC32C native vs the crc32c package vs the table fallback on
64 MiB, CRC32 native vs zlib, scan rate of ~256 MiB of 16 KiB batches (1 KiB records) vs the
package's CRC over the same bytes, index floor lookups per second, and the client's batch
builder (1,000 records of 100 bytes, CRC included, ns per record); then whether the targets
(CRC32C >= 80 % of the package, scan >= 60 % of the package's CRC) are met.
"""

from __future__ import annotations

import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import crc32c as crc32c_pkg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from native import crc32, crc32c, offset_index_floor, scan_batches, time_index_floor  # noqa: E402
from native.batch_build import build_batch_columns, max_batch_size  # noqa: E402
from native.batch_layout import BASE_OFFSET_OFFSET  # noqa: E402
from native.crc import CRC32C_IMPL, crc32c_table  # noqa: E402
from native.index_layout import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE  # noqa: E402

RUNS = 7
MIB = 1 << 20


def median_seconds(fn: Callable[[], object], runs: int = RUNS) -> float:
    fn()  # warm-up: JIT compile / cache load, page faults
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rate(nbytes: int, fn: Callable[[], object]) -> float:
    return nbytes / median_seconds(fn) / 1e6


def build_log(total: int) -> tuple[np.ndarray, int]:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = np.random.default_rng(0)
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(16):
        builder.append(i, 1_700_000_000_000 + i, None, rng.bytes(1024), [])
    batch = np.frombuffer(bytes(builder.build()), np.uint8)
    n = total // batch.size
    log = np.tile(batch, n)
    # baseOffset is outside the CRC, so the copies stay valid once given ascending offsets.
    offsets = (np.arange(n, dtype=np.int64) * 16).astype(">i8").view(np.uint8).reshape(n, 8)
    log.reshape(n, batch.size)[:, BASE_OFFSET_OFFSET:BASE_OFFSET_OFFSET + 8] = offsets
    return log, n


def bench_crc() -> float:
    """Prints the CRC figures; returns native CRC32C / package rate."""
    data = np.random.default_rng(1).integers(0, 256, 64 * MIB, dtype=np.uint8)
    assert crc32c(data) == crc32c_pkg.crc32c(data) and crc32(data) == zlib.crc32(data)
    native_c = rate(data.size, lambda: crc32c(data))
    pkg_c = rate(data.size, lambda: crc32c_pkg.crc32c(data))
    table_c = rate(data.size, lambda: crc32c_table(data))
    native_z = rate(data.size, lambda: crc32(data))
    zlib_z = rate(data.size, lambda: zlib.crc32(data))
    print(f"crc32c 64 MiB: native {native_c:9.0f} MB/s | crc32c pkg {pkg_c:9.0f} MB/s | "
          f"table fallback {table_c:7.0f} MB/s")
    print(f"crc32  64 MiB: native {native_z:9.0f} MB/s | zlib {zlib_z:9.0f} MB/s | "
          f"ratio {native_z / zlib_z:.2f}")
    return native_c / pkg_c


def bench_scan() -> float:
    """Prints the scan figures; returns scan rate / package CRC rate over the same bytes."""
    log, n = build_log(256 * MIB)
    result = scan_batches(log)
    assert result.count == n and result.stop_position == log.size and result.crc_ok.all()
    scan = rate(log.size, lambda: scan_batches(log))
    scan_pkg = rate(log.size, lambda: crc32c_pkg.crc32c(log))
    scan_nocrc = rate(log.size, lambda: scan_batches(log, verify_crc=False))
    print(f"scan {log.size / MIB:.0f} MiB ({n} batches of {log.size // n} B): "
          f"{scan:9.0f} MB/s | pkg CRC same bytes {scan_pkg:9.0f} MB/s | "
          f"headers only {scan_nocrc:9.0f} MB/s")
    return scan / scan_pkg


def bench_index() -> None:
    rng = np.random.default_rng(2)
    n_off = 10 * MIB // OFFSET_INDEX_ENTRY_SIZE
    off_index = np.empty((n_off, 2), ">i4")
    off_index[:, 0] = np.arange(n_off) * 3
    off_index[:, 1] = np.arange(n_off) * 4096
    off_buf = off_index.view(np.uint8).reshape(-1)
    off_targets = [int(x) for x in rng.integers(0, 3 * n_off, 100_000)]
    n_time = 10 * MIB // TIME_INDEX_ENTRY_SIZE
    time_index = np.empty(n_time, [("ts", ">i8"), ("off", ">i4")])
    time_index["ts"] = 1_700_000_000_000 + np.arange(n_time) * 5
    time_index["off"] = np.arange(n_time)
    time_buf = time_index.view(np.uint8).reshape(-1)
    time_targets = [int(x) for x in 1_700_000_000_000 + rng.integers(0, 5 * n_time, 100_000)]

    def off_lookups() -> None:
        for t in off_targets:
            offset_index_floor(off_buf, n_off, t)

    def time_lookups() -> None:
        for t in time_targets:
            time_index_floor(time_buf, n_time, t)

    off_rate = len(off_targets) / median_seconds(off_lookups, 5)
    time_rate = len(time_targets) / median_seconds(time_lookups, 5)
    print(f"index lookups (10 MiB index, random targets, per Python call): offset "
          f"{off_rate / 1e6:.2f} M/s ({n_off} entries) | time {time_rate / 1e6:.2f} M/s "
          f"({n_time} entries)")



def bench_batch_build(n: int = 1000, value_bytes: int = 100, calls: int = 2000) -> None:
    """The IPC/TCP bulk producer's batch build into a reused array (memcpy per key and value)."""
    values = np.frombuffer(np.random.default_rng(1).bytes(n * value_bytes), np.uint8).copy()
    offsets = np.arange(0, n * value_bytes + 1, value_bytes, dtype=np.int64)
    out = np.empty(max_batch_size(n, 0, n * value_bytes), np.uint8)

    def build_all() -> None:
        for _ in range(calls):
            build_batch_columns(values, offsets, timestamp=5, out=out)
    per_record_ns = median_seconds(build_all) / (calls * n) * 1e9
    print(f"batch build ({n} x {value_bytes} B, CRC included): {per_record_ns:.1f} ns/record")


def main() -> None:
    print(f"CRC32C kernel: {CRC32C_IMPL}; medians of {RUNS} runs")
    crc_ratio = bench_crc()
    scan_ratio = bench_scan()
    bench_index()
    bench_batch_build()
    print(f"target crc32c >= 80% of package: {crc_ratio:.0%} -> "
          f"{'MET' if crc_ratio >= 0.8 else 'NOT MET'}")
    print(f"target scan >= 60% of package CRC: {scan_ratio:.0%} -> "
          f"{'MET' if scan_ratio >= 0.6 else 'NOT MET'}")


if __name__ == "__main__":
    main()
