"""perf/workloads/host_memory.py: a VM's free page reporting paused for a benchmark's run and
put back as it was afterwards, whatever happens inside; said plainly when it cannot be."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perf.workloads.host_memory import (
    ORDER_PARAM,
    PAUSED_ORDER,
    paused_page_reporting,
    touch_memory,
)


def test_paused_inside_and_restored_after(tmp_path: Path):
    param = tmp_path / "page_reporting_order"
    param.write_text("9\n")
    with paused_page_reporting(param) as state:
        assert param.read_text().strip() == str(PAUSED_ORDER)
        assert "paused" in state.line and "9 -> 11" in state.line
    assert param.read_text().strip() == "9"


def test_restored_when_the_benchmark_fails(tmp_path: Path):
    param = tmp_path / "page_reporting_order"
    param.write_text("9\n")
    with pytest.raises(KeyboardInterrupt), paused_page_reporting(param):
        raise KeyboardInterrupt
    assert param.read_text().strip() == "9"


def test_a_machine_without_page_reporting_is_left_alone(tmp_path: Path):
    param = tmp_path / "absent"
    with paused_page_reporting(param) as state:
        assert state.line == "host page reporting: none on this machine"
    assert not param.exists()


def test_already_paused_is_not_touched(tmp_path: Path):
    param = tmp_path / "page_reporting_order"
    param.write_text(f"{PAUSED_ORDER}\n")
    with paused_page_reporting(param) as state:
        assert "already paused" in state.line
    assert param.read_text().strip() == str(PAUSED_ORDER)


def test_a_setting_that_cannot_be_written_is_reported_not_raised(tmp_path: Path):
    # root writes through file modes; the immutable attribute stops root too (ext4, tmpfs no)
    param = tmp_path / "page_reporting_order"
    param.write_text("9\n")
    subprocess.run(["chattr", "+i", str(param)], check=True)
    try:
        with paused_page_reporting(param) as state:
            assert state.line.startswith("host page reporting: ON, could not pause it")
            assert param.read_text().strip() == "9"
    finally:
        subprocess.run(["chattr", "-i", str(param)], check=True)


def test_this_machines_own_setting_round_trips():
    """The real kernel parameter where the machine has one (the test VM does)."""
    if not ORDER_PARAM.exists():
        with paused_page_reporting() as state:
            assert state.line == "host page reporting: none on this machine"
        return
    before = ORDER_PARAM.read_text().strip()
    with paused_page_reporting() as state:
        now = ORDER_PARAM.read_text().strip()
        assert now == str(PAUSED_ORDER), state.line
    assert ORDER_PARAM.read_text().strip() == before


def test_memory_is_touched_up_to_what_was_asked():
    gib, seconds = touch_memory(1 / 64)  # 16 MiB
    assert gib == 1 / 64
    assert seconds >= 0
