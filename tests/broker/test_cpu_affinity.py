"""appliance.cpu.affinity: every process of the broker runs on the configured CPUs; a bad list
is refused naming the key (exit 2), a CPU the machine lacks stops the start (exit 3)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from appliance.process.cpu_affinity import parse_cpu_list
from tests.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)

SERVE = [sys.executable, "-m", "appliance.cli.main", "serve"]


def _allowed(pid: int) -> set[int]:
    return os.sched_getaffinity(pid)


def _family(root: int) -> list[int]:
    """``root`` and every process whose parent is ``root``."""
    pids = [root]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == root:
                        pids.append(int(entry))
            except (OSError, ValueError):
                continue
    return pids


@pytest.mark.parametrize("text, cpus", [
    ("", set()), ("0", {0}), (" 1 ", {1}), ("0-3,6", {0, 1, 2, 3, 6}), ("2,2,1-2", {1, 2}),
])
def test_cpu_lists_parse(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["x", "1-", "3-1", "0,,1", "-1", "1.5", "0-3:2"])
def test_bad_cpu_lists_are_refused(text):
    with pytest.raises(ValueError):
        parse_cpu_list(text)


def test_every_process_runs_on_the_configured_cpu(tmp_path):
    cpu = max(os.sched_getaffinity(0))  # one CPU of those this test may use
    b = BrokerProcess(tmp_path, num_log_dirs=2, overrides={"appliance.cpu.affinity": str(cpu)})
    with b:
        pids = _family(b.proc.pid)
        assert len(pids) >= 1 + 2 + 1, pids  # supervisor, two disk workers, network worker(s)
        for pid in pids:
            assert _allowed(pid) == {cpu}, (pid, _allowed(pid))
        assert "processes run on CPU(s)" in b.log()
    if len(os.sched_getaffinity(0)) > 1:  # unset: no restriction beyond ours
        other = BrokerProcess(tmp_path / "free")
        (tmp_path / "free").mkdir()
        with other:
            assert _allowed(other.proc.pid) == os.sched_getaffinity(0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move between")
def test_the_list_replaces_a_narrower_inherited_mask(tmp_path):
    """As taskset does: started from a process kept on one CPU, the broker runs on another."""
    mine = os.sched_getaffinity(0)
    lo, hi = min(mine), max(mine)
    os.sched_setaffinity(0, {lo})
    try:
        b = BrokerProcess(tmp_path, overrides={"appliance.cpu.affinity": str(hi)})
        with b:
            assert all(_allowed(pid) == {hi} for pid in _family(b.proc.pid))
    finally:
        os.sched_setaffinity(0, mine)


def test_a_bad_cpu_list_exits_2_naming_the_key(tmp_path):
    res = subprocess.run([*SERVE, "--override", "appliance.cpu.affinity=3-1"], cwd=tmp_path,
                         capture_output=True, timeout=60)
    assert res.returncode == 2, res.stderr
    err = res.stderr.decode()
    assert "appliance.cpu.affinity" in err and "3-1" in err and "Traceback" not in err, err


def test_a_cpu_the_machine_lacks_exits_3(tmp_path):
    port = free_port()
    res = subprocess.run([*SERVE, "--override", "appliance.cpu.affinity=4000",
                          "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                          "--override", f"log.dirs={tmp_path / 'd'}"], cwd=tmp_path,
                         capture_output=True, timeout=60)
    assert res.returncode == 3, res.stderr
    out = (res.stdout + res.stderr).decode()
    assert "appliance.cpu.affinity" in out and "4000" in out and "Traceback" not in out, out
