"""The test harness leaves no shared memory behind: a broker whose supervisor was SIGKILLed
cannot unlink its segments, so BrokerProcess does at the end of the test (tests/broker_process.py)."""

from __future__ import annotations

import os

from tests.broker_process import BrokerProcess


def _segments(name: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n == name or n.startswith(name + "-")]


def test_a_killed_broker_leaves_no_shared_memory(tmp_path):
    with BrokerProcess(tmp_path) as b:
        name = b.overrides["appliance.shm.name"]
        assert _segments(name)  # the table, rings and IPC channels exist while it runs
        b.kill()  # SIGKILL: nothing of the broker unlinks them
        assert _segments(name)
    assert _segments(name) == []
