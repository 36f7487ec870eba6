"""A VM's free page reporting (virtio-balloon), paused while a benchmark runs.

With it on, the guest hands every free 2 MiB block back to its host, and the next use of that
memory costs a host page fault per page. Measured on the 2-vCPU test VM (29 Nov): populating
16 GiB of anonymous memory took 45 s with reporting on and 8.3-8.7 s with it paused, and
``perf/bench_ipc.py --runs 5``'s disk worker spent 94 ns per record [57-155] on, 47 [42-51]
paused (IPC 10.2 M records/s on, 18.5 M paused). A benchmark deletes its topics between runs,
so each run wrote its page cache into memory the host had taken back: the figures moved with
how much of it had been reported, run by run and day by day. Bare metal (what the broker is
for) has no host to fault to. So benchmarks pause reporting for their run and restore the
setting afterwards, and say so; ``--host-page-reporting keep`` measures with it on. Pausing
keeps the host from taking more; what it took already is faulted back in once, before any timed
run (TOUCH_GIB), on its own printed line.

Pausing is ``page_reporting_order`` raised above the largest free block the kernel keeps
(its order 10, 4 MiB), so no block qualifies: root only, a module parameter of the guest's own
kernel. When it cannot be paused (not root, no such parameter) the benchmark says so and runs.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from perf.workloads.machine import meminfo_bytes

__all__ = ["ORDER_PARAM", "PAUSED_ORDER", "Reporting", "add_host_memory_args",
           "paused_page_reporting", "host_memory", "touch_memory"]

ORDER_PARAM = Path("/sys/module/page_reporting/parameters/page_reporting_order")
PAUSED_ORDER = 11  # above MAX_PAGE_ORDER (10): no free block is ever large enough to report
# touched once reporting is paused: more than a benchmark's page cache grows by between deletes
# (bench_ipc writes 1 GiB per cell)
TOUCH_GIB = 4.0


class Reporting(NamedTuple):
    """What :func:`paused_page_reporting` found and did."""

    paused: bool  # reporting is paused for the run (by it, or already before it)
    line: str  # the line that says so, for the benchmark's output


def add_host_memory_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--host-page-reporting", choices=["pause", "keep"], default="pause",
                    help="a VM's free page reporting (perf/workloads/host_memory.py): pause it "
                         "while the benchmark runs (default), or keep it as it is")


@contextlib.contextmanager
def paused_page_reporting(param: Path = ORDER_PARAM) -> Iterator[Reporting]:
    """Inside: free page reporting paused when ``param`` exists and can be written; the previous
    order is written back on the way out."""
    try:
        before = param.read_text().strip()
    except FileNotFoundError:
        yield Reporting(False, "host page reporting: none on this machine")
        return
    except OSError as e:
        yield Reporting(False, f"host page reporting: cannot read {param} ({e}); left as it is")
        return
    if before == str(PAUSED_ORDER):
        yield Reporting(True, f"host page reporting: already paused ({param.name} {before})")
        return
    try:
        param.write_text(f"{PAUSED_ORDER}\n")
    except OSError as e:
        yield Reporting(False, f"host page reporting: ON, could not pause it ({e}): figures "
                               "include host page faults on memory the guest had freed")
        return
    try:
        yield Reporting(True, f"host page reporting: paused for this run ({param.name} {before} "
                              f"-> {PAUSED_ORDER}; restored afterwards)")
    finally:
        param.write_text(f"{before}\n")


@contextlib.contextmanager
def host_memory(args: argparse.Namespace) -> Iterator[str]:
    """What ``--host-page-reporting`` asks for; its line is printed and yielded."""
    if args.host_page_reporting == "keep":
        line = "host page reporting: kept as it is (--host-page-reporting keep)"
        print(line, flush=True)
        yield line
        return
    with paused_page_reporting() as state:
        print(state.line, flush=True)
        if state.paused:
            gib, seconds = touch_memory(TOUCH_GIB)
            print(f"host page reporting: {gib:.1f} GiB of memory touched in {seconds:.1f} s, before "
                  "any timed run (what the host took back is faulted in here)", flush=True)
        yield state.line


def touch_memory(gib: float) -> tuple[float, float]:
    """Fault in ``gib`` GiB of anonymous memory (at most what is available less 2 GiB) and free
    it again: with reporting paused those pages stay backed by the host for the runs that
    follow. Returns (GiB touched, seconds)."""
    size = int(max(0, min(gib * 2**30, meminfo_bytes("MemAvailable") - 2 * 2**30))) & ~(mmap.PAGESIZE - 1)
    if not size:
        return 0.0, 0.0
    t0 = time.monotonic()
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)
    m.close()
    return size / 2**30, time.monotonic() - t0
