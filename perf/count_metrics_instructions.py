"""Instructions per one-record produce request of the metrics code, counted by valgrind's
callgrind: a figure a loaded machine does not change (perf/bench_metrics.py's in-process timing
moves by 2x with the load; its end-to-end figures by more).

For each side (network worker, disk worker) and mode (metrics off, on) a child Python runs the
snippet of bench_metrics.py (_NET, _DISK: the code a request runs, as written in the broker) N
times and 0 times under callgrind; (Ir(N) - Ir(0)) / N is its instructions per request, and on
minus off is what the metrics cost. PYTHONHASHSEED is fixed so the two runs start alike (what
is left of the start-up noise is about +-20 instructions per request at N = 100,000).

Usage: .venv/bin/python perf/count_metrics_instructions.py [--n 100000]
Needs valgrind (apt-get install -y valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


def child(side: str, mode: str, n: int) -> None:
    sys.path.insert(0, str(ROOT))
    import perf.bench_metrics as bench
    from appliance.metrics.recorder import SAMPLE_MASK, AnswerTiming, Recorder
    from appliance.shm.counters import SharedCounters
    from appliance.shm.layout import COUNTER_PARTITIONS, counters_name

    counters = SharedCounters.create(counters_name(f"count-instructions-{os.getpid()}"))
    try:
        m = Recorder(counters, 2) if mode == "on" else None
        env = {"ctx": SimpleNamespace(metrics=m),
               "parts": SimpleNamespace(metrics=m, bytes_pending=[0] * COUNTER_PARTITIONS,
                                        bytes_dirty=[]),
               "rq": SimpleNamespace(metrics=m, i=0), "p": SimpleNamespace(timing=None),
               "timed": {}, "answer": object(), "AnswerTiming": AnswerTiming,
               "plog": SimpleNamespace(log_end_offset=0), "clock": time.monotonic,
               "SAMPLE_MASK": SAMPLE_MASK, "COUNTER_PARTITIONS": COUNTER_PARTITIONS,
               "slot": 7, "body": b"x" * 170}
        timer = timeit.Timer(bench._NET if side == "network" else bench._DISK, globals=env)
        timer.timeit(64)  # the same warm-up (specialisation) in both runs
        if n:
            timer.timeit(n)
    finally:
        counters.close()
        counters.unlink()


def instructions(side: str, mode: str, n: int) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                        sys.executable, __file__, "--child", side, mode, str(n)],
                       capture_output=True, text=True, env=env, timeout=1800)
    found = re.search(r"Collected : (\d+)", r.stderr)
    if found is None:
        raise RuntimeError(f"callgrind gave no count:\n{r.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--child", nargs=3, metavar=("SIDE", "MODE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, mode, n = args.child
        child(side, mode, int(n))
        return
    per: dict[tuple[str, str], int] = {}
    for side in ("network", "disk"):
        for mode in ("off", "on"):
            per[side, mode] = (instructions(side, mode, args.n) - instructions(side, mode, 0)) // args.n
            print(f"{side:7} {mode:3} {per[side, mode]:6} instructions per request", flush=True)
    cost = {side: per[side, "on"] - per[side, "off"] for side in ("network", "disk")}
    print(f"metrics code per one-record produce request, on minus off: network worker "
          f"{cost['network']}, disk worker {cost['disk']}, together "
          f"{cost['network'] + cost['disk']} instructions")


if __name__ == "__main__":
    main()
