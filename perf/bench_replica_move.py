"""Replica move benchmark: what moving a large partition onto a log dir (AlterReplicaLogDirs)
costs the other partitions of that dir. Issue 16's requirement: the destination disk worker
keeps serving while it copies; target: no produce to another partition of the destination
waits longer than 1 s (on this loaded 2-core machine), for a move of a few hundred MB.

Usage: .venv/bin/python perf/bench_replica_move.py [--mb 320] [--runs 5]
           [--appliance-root DIR ...]

Each run starts a fresh broker with two log dirs (tests/broker_process.py), fills partition 0
of topic ``big`` (64 MiB segments) with --mb MB, drops its files from the page cache (fsync,
then POSIX_FADV_DONTNEED: the copy reads the disk, as for data written long ago), then moves it
to the other dir while a probe produces one small record (acks=1) at a time to a partition of
the destination (tests/admin/move_latency.py). Printed per run: the move's duration and the
probe's worst and p99 wait during the move; then median, min and max over the runs.

``--appliance-root`` runs the broker from another checkout (its PYTHONPATH), e.g. main's, for
the figure before a change; given several times, the roots are run alternately, run by run,
so that A and B see the same load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.admin.move_latency import LatencyProbe, alter, evict, fill, place  # noqa: E402
from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402

TARGET_S = 1.0


def one_run(root: str, mb: int) -> tuple[float, float, float]:
    """(move seconds, worst wait, p99 wait) of one move with the broker from ``root``."""
    os.environ["PYTHONPATH"] = root
    with tempfile.TemporaryDirectory(prefix="bench-move-") as d, BrokerProcess(Path(d), num_log_dirs=2) as b:
        s = place(b.bootstrap, b.log_dirs)
        fill(b.bootstrap, s.big, mb << 20)
        evict(os.path.join(s.src, f"{s.big}-0"))
        with LatencyProbe(b.port, s.hot, s.hot_partition) as probe:
            t0 = time.monotonic()
            code = alter(b.port, s.dst, s.big, 0)
            t1 = time.monotonic()
        if code:
            raise SystemExit(f"the move failed: {code!r}")
        waits = sorted(probe.waits_between(t0, t1))
        return t1 - t0, waits[-1], waits[max(0, int(len(waits) * 0.99) - 1)]


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.1f} {b:.1f} {c:.1f}"


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=320)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--appliance-root", action="append", default=None,
                    help="checkout whose appliance package the broker runs (default: this one)")
    args = ap.parse_args()
    roots = args.appliance_root or [str(Path(__file__).resolve().parent.parent)]
    results: dict[str, list[tuple[float, float, float]]] = {r: [] for r in roots}
    for i in range(args.runs):
        for root in roots:
            move, worst, p99 = one_run(root, args.mb)
            results[root].append((move, worst, p99))
            print(f"run {i + 1} {root}: move {move:.2f} s, worst wait {worst * 1000:.0f} ms, "
                  f"p99 {p99 * 1000:.0f} ms ({_load()})", flush=True)
    for root, rows in results.items():
        moves, worsts = [r[0] for r in rows], [r[1] for r in rows]
        med = statistics.median(worsts)
        print(f"{root}: {args.mb} MB moved in {statistics.median(moves):.2f} s median "
              f"(min {min(moves):.2f}, max {max(moves):.2f}); worst produce wait on the destination "
              f"median {med * 1000:.0f} ms (min {min(worsts) * 1000:.0f}, max {max(worsts) * 1000:.0f}) "
              f"over {len(rows)} runs; target < {TARGET_S:.0f} s: "
              f"{'met' if max(worsts) < TARGET_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
