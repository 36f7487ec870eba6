"""The broker layer in one process: real shared memory and eventfds, no child processes."""

from __future__ import annotations

import itertools
import os

import pytest

from appliance.config import BrokerConfig
from appliance.process.plumbing import Plumbing

_names = itertools.count()


@pytest.fixture
def plumbing(tmp_path):
    """Shared memory for 2 disks and 2 network workers (small rings), unlinked afterwards."""
    base = f"appliance-unit-{os.getpid()}-{next(_names)}"
    plumbing, table = Plumbing.create(base, 2, 2, 1, 0, 1 << 16)
    yield plumbing, table
    table.close()
    for fd in plumbing.disk_bells + plumbing.net_bells:
        os.close(fd)
    plumbing.unlink()


@pytest.fixture
def config(tmp_path):
    return BrokerConfig.load(overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": f"{tmp_path / 'd0'},{tmp_path / 'd1'}",
        "num.network.threads": "2",
    })
