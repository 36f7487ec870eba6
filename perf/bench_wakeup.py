"""What one wake-up of another process costs here: two processes ping-pong through eventfds
(the doorbells the broker's workers ring each other with), on one CPU and on two.

Usage: .venv/bin/python perf/bench_wakeup.py [--rounds 50000] [--runs 5]

Prints, per placement, the median over --runs of the wall time and of the CPU time (both
processes, user + system) per round trip; a round trip is two wake-ups. The figure behind
appliance.cpu.affinity: on a VM a wake-up across CPUs is an inter-processor interrupt (a VM
exit), on one CPU a context switch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _round_trips(rounds: int, cpus: tuple[int, int]) -> tuple[float, float]:
    """(wall us, CPU us of both processes) per round trip, the two pinned to ``cpus``."""
    ping, pong = os.eventfd(0), os.eventfd(0)
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {cpus[1]})
        for _ in range(rounds):
            os.eventfd_read(ping)
            os.eventfd_write(pong, 1)
        os._exit(0)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    try:
        time.sleep(0.05)  # the child's own affinity is in place before the first ping
        t0, c0 = time.perf_counter(), os.times()
        for _ in range(rounds):
            os.eventfd_write(ping, 1)
            os.eventfd_read(pong)
        wall = time.perf_counter() - t0
        os.waitpid(pid, 0)
        c1 = os.times()
    finally:
        os.sched_setaffinity(0, mine)
        os.close(ping)
        os.close(pong)
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + \
        (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return wall * 1e6 / rounds, cpu * 1e6 / rounds


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs two CPUs", file=sys.stderr)
        return 1
    for name, pair in (("same CPU", (cpus[0], cpus[0])), ("two CPUs", (cpus[0], cpus[1]))):
        runs = [_round_trips(args.rounds, pair) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{name}: round trip {wall:.1f} us wall, {cpu:.1f} us CPU (both processes; "
              f"{cpu / 2:.1f} us per wake-up), median of {args.runs} x {args.rounds:,}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
