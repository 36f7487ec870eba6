#!/usr/bin/env python3
"""Fuzz a real broker with a million valid-then-mutated frames (issue 14's full form of
tests/faults/test_fuzz_broker.py) while a well-behaved confluent-kafka client produces and
fetches; prints progress lines and, at the end, the well-behaved client's latency figures,
whether any worker died and whether any pre-existing segment changed.

    PYTHONPATH=. .venv/bin/python scripts/fuzz_broker.py --frames 1000000 [--seed 1] [--pool 16]

Exit status 1 if a worker died, a segment changed or the client saw an error."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broker_process import BrokerProcess, stop_on_sigterm  # noqa: E402
from tests.faults.fuzz_run import (  # noqa: E402
    FuzzReport,
    WellBehavedClient,
    changed_segments,
    log_checksums,
    percentile,
    prepare_topics,
    run_fuzz,
)
from tests.faults.procs import wait_workers, worker_pid_map  # noqa: E402


def main() -> int:
    stop_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pool", type=int, default=16, help="fuzzing connections")
    ap.add_argument("--wait", type=float, default=0.2, help="seconds to wait for each answer")
    ap.add_argument("--every", type=int, default=20_000, help="progress line every N frames")
    ap.add_argument("--workdir", help="keep the broker's files here (default: a temp dir)")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="fuzz-broker-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(work)
    broker.start()
    client = None
    try:
        topics = prepare_topics(broker.bootstrap)
        pids = wait_workers(broker, disk=1, network=2)
        sums = log_checksums(broker.log_dirs, {"fuzz-pre"})
        client = WellBehavedClient(broker.bootstrap, "fuzz-steady")
        client.start()
        client.warm.wait(60)
        seen = [0]

        def progress(rep: FuzzReport) -> None:
            lat = client.latencies[seen[0]:]
            seen[0] = len(client.latencies)
            alive = worker_pid_map(broker) == pids
            print(f"{time.strftime('%H:%M:%S')} {rep.line()}; client since last: {len(lat)} "
                  f"requests p99 {percentile(lat, 0.99) * 1e3:.1f} ms max "
                  f"{max(lat, default=0) * 1e3:.1f} ms; workers {'same' if alive else 'CHANGED'}",
                  flush=True)

        rep = run_fuzz(broker, args.frames, args.seed, topics, pool=args.pool, wait=args.wait,
                       progress=progress, every=args.every)
        client.stop.set()
        client.join(90)
        lat = client.latencies
        after = worker_pid_map(broker)
        changed = changed_segments(sums)
        print(f"done: {rep.line()}")
        print(f"apis: {dict(sorted(rep.apis.items()))}")
        print(f"well-behaved client: {len(lat)} produce requests, p50 "
              f"{percentile(lat, 0.5) * 1e3:.1f} ms, p99 {percentile(lat, 0.99) * 1e3:.1f} ms, "
              f"p99.9 {percentile(lat, 0.999) * 1e3:.1f} ms, max {max(lat, default=0) * 1e3:.1f} ms "
              f"(bar: p99 < 50 ms, ratio {percentile(lat, 0.99) / 0.05:.2f}); fetched "
              f"{client.fetched} of {client.produced}; errors {client.errors[:3]}")
        print(f"workers before {pids} after {after}; segments changed: {changed or 'none'}; "
              f"broker log {broker.log_path}")
        return 0 if after == pids and not changed and not client.errors else 1
    finally:
        if client is not None:
            client.stop.set()
        broker.stop()
        broker.kill()


if __name__ == "__main__":
    sys.exit(main())
