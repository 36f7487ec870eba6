"""Start-up time with many partitions (issue 14): build a data dir once, then time restarts.

Usage:
  PYTHONPATH=. .venv/bin/python perf/bench_startup.py build DIR [--partitions 10000] [--log-dirs 2]
  PYTHONPATH=. .venv/bin/python perf/bench_startup.py restart DIR [--how clean|unclean] [--runs 3]

``build`` starts a broker on DIR's log dirs, creates --partitions partitions (topics of 100) and
produces one record to each (acks=all), then stops it cleanly. ``restart`` starts the broker on
DIR, waits until Metadata lists every partition with a leader, and stops it: cleanly (SIGTERM;
the next start is a clean one) or with SIGKILL of the process group (``--how unclean``: the next
start recovers). Each run prints the seconds until the port listened and until every partition
was led; the median over --runs is printed last. DIR is kept (it is the point).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf.bench_scale import (  # noqa: E402
    create_all,
    metadata_ready,
    start_broker,
    topic_names,
    usage_line,
    write_all,
)
from tests.broker.procs import wait_gone  # noqa: E402

META = "bench_startup.json"


def build(work: Path, partitions: int, log_dirs: int) -> int:
    work.mkdir(parents=True, exist_ok=True)
    topics = topic_names(partitions, 100)
    b, s = start_broker(work, log_dirs, None, None)
    try:
        t0 = time.monotonic()
        failed = create_all(b, topics)
        for _ in range(3):  # a create answered late on a loaded machine: ask again
            if not failed:
                break
            print(f"  retrying {len(failed)} topics, e.g. {next(iter(failed.values()))[:200]}", flush=True)
            again = create_all(b, [(t, n) for t, n in topics if t in failed])
            failed = {t: e for t, e in again.items() if "already exists" not in e.lower()}
        made = sum(n for t, n in topics if t not in failed)
        print(f"created {made} partitions in {time.monotonic() - t0:.1f} s ({len(failed)} topics failed)",
              flush=True)
        t0 = time.monotonic()
        ok, errors = write_all(b, topics, set(failed))
        print(f"wrote {ok} records in {time.monotonic() - t0:.1f} s, {len(errors)} errors", flush=True)
        (work / META).write_text(json.dumps({"partitions": made, "log_dirs": log_dirs, "port": b.port}))
    finally:
        b.stop(timeout=600)
    return 0 if not failed and not errors else 1


def restart(work: Path, how: str, runs: int) -> int:
    meta = json.loads((work / META).read_text())
    expect, log_dirs, port = meta["partitions"], meta["log_dirs"], meta["port"]
    listened, ready = [], []
    for i in range(runs):
        b, listen_s = start_broker(work, log_dirs, port, None, timeout=900)
        ready_s, seen = metadata_ready(b, expect, 900)
        total = None if ready_s is None else listen_s + ready_s
        listened.append(listen_s)
        if total is not None:
            ready.append(total)
        print(f"run {i + 1}: listening after {listen_s:.1f} s, all {expect} partitions led after "
              f"{'never' if total is None else f'{total:.1f} s'} ({seen} seen); {usage_line(b)}",
              flush=True)
        if how == "clean":
            t0 = time.monotonic()
            b.stop(timeout=900)
            print(f"  clean stop {time.monotonic() - t0:.1f} s", flush=True)
        else:
            b.kill()
            wait_gone(b, 30)
        b._log.close()
    if how != "clean" and runs:
        # the next start on this port would reclaim it (timed, so kept between runs); after
        # the last run nothing does
        b.release_shm()
    if ready:
        print(f"{how} restart, {expect} partitions over {log_dirs} log dirs: median listening "
              f"{statistics.median(listened):.1f} s, median all led {statistics.median(ready):.1f} s "
              f"(runs: {', '.join(f'{r:.1f}' for r in ready)})", flush=True)
    return 0 if len(ready) == runs else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=Path)
    b.add_argument("--partitions", type=int, default=10_000)
    b.add_argument("--log-dirs", type=int, default=2)
    r = sub.add_parser("restart")
    r.add_argument("dir", type=Path)
    r.add_argument("--how", choices=("clean", "unclean"), default="clean")
    r.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.cmd == "build":
        return build(args.dir, args.partitions, args.log_dirs)
    return restart(args.dir, args.how, args.runs)


if __name__ == "__main__":
    sys.exit(main())
