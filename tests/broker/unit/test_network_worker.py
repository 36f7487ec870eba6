"""A network worker that cannot listen reports a boot error (exit status 3), so the supervisor
halts instead of respawning it every second. In this process: real shared memory, no fork."""

from __future__ import annotations

import asyncio
import socket

from appliance.broker.network_worker import NetworkWorker
from appliance.config import BrokerConfig
from appliance.process.exit_codes import EXIT_BOOT_ERROR
from appliance.shm.layout import WorkerState


def test_a_port_taken_without_reuseport_is_a_boot_error(plumbing, tmp_path):
    p, table = plumbing
    with socket.socket() as taken:  # no SO_REUSEPORT: nobody else may bind beside it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = BrokerConfig.load(overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": f"{tmp_path / 'd0'},{tmp_path / 'd1'}", "num.network.threads": "2"})
        worker = NetworkWorker(0, config, p, config.log_dirs)
        assert asyncio.run(worker._main()) == EXIT_BOOT_ERROR
    assert table.worker(p.net_slot(0))[2] != WorkerState.READY
