"""The test harness leaves no shared memory behind: a broker whose supervisor was SIGKILLed
cannot unlink its segments (a broker started again on its name reclaims them), so the session
ends by unlinking those of every broker it made (tests/broker_process.py, tests/conftest.py)."""

from __future__ import annotations

import os

from tests.broker_process import BrokerProcess, release_all_shm


def _segments(name: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n == name or n.startswith(name + "-")]


def test_a_killed_broker_leaves_no_shared_memory(tmp_path):
    with BrokerProcess(tmp_path) as b:
        name = b.overrides["appliance.shm.name"]
        assert _segments(name)  # the table, rings and IPC channels exist while it runs
        b.kill()  # SIGKILL: nothing of the broker unlinks them
    assert _segments(name)  # left for a restart on the same name to reclaim
    release_all_shm()  # what the session's end does
    assert _segments(name) == []
