"""Who used the CPUs during one run: this runner and everything it started (the servers under
test, their workers, client processes) versus everything else on the machine.

A collapsed run is either the system under test stalling (its processes idle while work waits:
few CPUs busy with ours and few of our threads waiting for one) or the machine being taken by
other work (ours waiting for a CPU while other work holds them). The machine's busy time comes
from /proc/stat (user + nice + system + irq + softirq + steal, every CPU); ours from psutil (user
+ system of this process and of every living descendant, plus what their reaped children used);
our waiting from the scheduler's per-thread run-queue wait (/proc/PID/task/TID/schedstat) of
the processes alive at both ends of the run."""

from __future__ import annotations

import os
import time

import psutil

__all__ = ["CpuWatch"]

_TICK = os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / _TICK


def _ours() -> tuple[float, dict[int, float]]:
    """(CPU seconds, {pid: run-queue wait seconds}) of this process and its descendants."""
    me = psutil.Process()
    total, waits = 0.0, {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # exited meanwhile: its time is in its parent's children_* now
            continue
        total += t.user + t.system + t.children_user + t.children_system
        waits[p.pid] = _runqueue_wait_s(p.pid)
    return total, waits


def _runqueue_wait_s(pid: int) -> float:
    wait = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                wait += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return wait / 1e9


class CpuWatch:
    """``start()`` before a run, ``stop()`` after: returns {"ours_cores", "others_cores",
    "ours_waiting"}: the average number of CPUs each side kept busy over the run's wall time,
    and of our threads that were ready to run but waited for a CPU."""

    def start(self) -> None:
        self._t, self._busy = time.monotonic(), _machine_busy_s()
        self._ours, self._waits = _ours()

    def stop(self) -> dict:
        wall = max(time.monotonic() - self._t, 1e-9)
        ours, waits = _ours()
        busy, ours = _machine_busy_s() - self._busy, ours - self._ours
        waited = sum(w - self._waits[pid] for pid, w in waits.items() if pid in self._waits)
        return {"ours_cores": round(ours / wall, 2), "others_cores": round(max(0.0, busy - ours) / wall, 2),
                "ours_waiting": round(max(0.0, waited) / wall, 2)}
