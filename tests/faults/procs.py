"""Which workers a broker has, by role, for tests that check nothing died or kill on purpose."""

from __future__ import annotations

from tests.broker_process import BrokerProcess

__all__ = ["worker_pid_map"]


def worker_pid_map(broker: BrokerProcess) -> dict[str, list[int]]:
    """{'disk': [...], 'network': [...]} pids of the supervisor's live workers, sorted."""
    return {"disk": sorted(broker.worker_pids("disk worker")),
            "network": sorted(broker.worker_pids("network worker"))}
