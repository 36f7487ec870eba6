"""``appliance.cpu.affinity``: the CPUs a broker's processes may run on.

The supervisor applies the set to itself before it forks, so every worker inherits it. On a
shared box this keeps the broker off the cores of the load (a client, a Spark executor) and
its processes on each other's caches; a wake-up between processes on one CPU costs a context
switch, across CPUs an inter-processor interrupt (on the 2-vCPU test VM 2.2 against 17.0 us
of CPU per wake-up: ``.venv/bin/python perf/bench_wakeup.py``).
"""

from __future__ import annotations

import os

from appliance.config import parse_cpu_list

__all__ = ["parse_cpu_list", "apply_affinity"]



def apply_affinity(text: str) -> frozenset[int] | None:
    """Restrict this process (and what it forks afterwards) to the CPUs of ``text``; None when
    ``text`` is empty. The list replaces the inherited mask, as ``taskset`` does: it may name
    CPUs the parent was kept off. Raises ValueError naming the CPUs this machine (or the
    cgroup's cpuset) does not offer, leaving the mask unchanged."""
    cpus = parse_cpu_list(text)
    if not cpus:
        return None
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:  # EINVAL: none of them exists here
        raise ValueError(f"CPU(s) {_format(cpus)} not available here ({e.strerror})") from None
    got = os.sched_getaffinity(0)
    if got != cpus:  # the kernel kept only those the cpuset allows
        os.sched_setaffinity(0, before)
        raise ValueError(f"CPU(s) {_format(cpus - got)} not available here")
    return cpus


def _format(cpus: set[int] | frozenset[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
