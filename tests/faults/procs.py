"""Which workers a broker has, by role, for tests that check nothing died or kill on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.broker_process import BrokerProcess

__all__ = ["wait_workers", "worker_pid_map", "cli_describe"]


def worker_pid_map(broker: BrokerProcess) -> dict[str, list[int]]:
    """{'disk': [...], 'network': [...]} pids of the supervisor's live workers, sorted."""
    return {"disk": sorted(broker.worker_pids("disk worker")),
            "network": sorted(broker.worker_pids("network worker"))}


def wait_workers(broker: BrokerProcess, disk: int, network: int, timeout: float = 60) -> dict[str, list[int]]:
    """The worker map once ``disk`` disk and ``network`` network workers run (the port answers
    as soon as the first network worker listens; the others may still be forking)."""
    deadline = time.monotonic() + timeout
    while True:
        now = worker_pid_map(broker)
        if len(now["disk"]) == disk and len(now["network"]) == network:
            return now
        if time.monotonic() > deadline:
            raise TimeoutError(f"workers {now}, want {disk} disk and {network} network")
        time.sleep(0.05)


def cli_describe(bootstrap: str, *extra: str) -> dict:
    """`appliance log-dirs --describe` run as a user would: its JSON (Kafka's kafka-log-dirs)."""
    out = subprocess.run([sys.executable, "-m", "appliance.cli.main", "log-dirs", "--describe",
                          "--bootstrap-server", bootstrap, *extra],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out.splitlines()[-1])
