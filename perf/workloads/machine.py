"""What the machine is: CPUs, memory, the disk under the temp dir (df, rotational flag), load."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["describe_machine", "load1", "meminfo_bytes"]


def meminfo_bytes(field: str) -> int:
    """One /proc/meminfo field (``"MemTotal"``, ``"MemAvailable"``) in bytes; 0 if absent."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def load1() -> float:
    return os.getloadavg()[0]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _rotational(path: Path) -> str:
    """The sysfs rotational flag of the block device holding ``path`` ('?' if not found)."""
    try:
        dev = os.stat(path).st_dev
        sysdir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        for cand in (sysdir / "queue/rotational", sysdir.resolve().parent / "queue/rotational"):
            if cand.exists():
                return cand.read_text().strip()
    except OSError:
        pass
    return "?"


def describe_machine(tmp: Path) -> dict:
    mem = meminfo_bytes("MemTotal")
    df = subprocess.run(["df", "-h", str(tmp)], capture_output=True, text=True).stdout.strip()
    du = shutil.disk_usage(tmp)
    return {
        "nproc": os.cpu_count(), "cpu_model": _cpu_model(), "memory_gib": round(mem / 2**30, 1),
        "kernel": platform.release(), "python": platform.python_version(), "tmp_dir": str(tmp),
        "df": df, "disk_free_gib": round(du.free / 2**30, 1), "rotational": _rotational(tmp),
        "loadavg": os.getloadavg(),
    }
