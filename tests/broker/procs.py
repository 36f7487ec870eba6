"""Process helpers: wait until a SIGKILLed broker's workers are really gone."""

from __future__ import annotations

import os
import socket
import time

from tests.broker_process import BrokerProcess

__all__ = ["session_pids", "wait_gone"]


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a broker started with start_new_session)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            out.append(int(pid))
    return out


def wait_gone(broker: BrokerProcess, timeout: float = 10.0) -> None:
    """After BrokerProcess.kill(): reaping the supervisor does not mean its workers have exited
    (SIGKILL is delivered asynchronously), and a worker still holding the port would accept
    the next broker's readiness probe. Wait until no process of the session is left and the
    port refuses connections. Raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not session_pids(broker.proc.pid):
            try:
                with socket.create_connection(("127.0.0.1", broker.port), timeout=0.2):
                    pass
            except OSError:
                return
        time.sleep(0.02)
    raise TimeoutError(f"broker {broker.port}: processes {session_pids(broker.proc.pid)} still alive")
