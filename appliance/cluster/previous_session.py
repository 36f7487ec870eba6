"""This broker's last ZooKeeper session, kept in its first log dir so that a restart can end it.

A broker killed with SIGKILL (or a crashed cluster worker) leaves its session open in ZooKeeper
until the session timeout: its ``/brokers/ids/<id>`` registration and, if it was the
controller, ``/controller`` stay until then, so the restarted broker cannot register and no new
controller is elected. When every broker of a cluster is killed at once this delays the whole
cluster by the longest of those timeouts (18 s by default, up to ZooKeeper's
maxSessionTimeout).

The cluster worker records the session id and password it holds in ``cluster-session.json``
(mode 0600: the password lets anyone take the session over), with its own pid and process start
time. On start, a broker whose file names a session of a process that is no longer running
closes that session: it reattaches with the id and password and closes it at once, as
ZooKeeper's own clients do, so every ephemeral znode of its previous life is gone before it
registers. A session of a process still running (a second broker started on the same log dirs)
is left alone: that broker then meets the registration like any other and refuses to start.

Another broker with the same broker.id never has the file (it has its own log dirs), so it is
still refused with exit code 3 while the first one runs.

Thread-safety: the functions take no locks; the cluster worker calls them from one thread.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

__all__ = ["SESSION_FILE", "save_session", "close_previous_session"]

log = logging.getLogger(__name__)

SESSION_FILE = "cluster-session.json"


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks after boot, field 22 of /proc/<pid>/stat);
    None when there is no such process or it has exited (a zombie holds no session)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def save_session(log_dir: str, broker_id: int, session_id: int, password: bytes) -> None:
    """Record the session this process holds now (written to a temporary file, then renamed:
    a crash in between leaves the previous record whole)."""
    path = Path(log_dir) / SESSION_FILE
    tmp = path.with_suffix(".tmp")
    pid = os.getpid()
    record = {"broker_id": broker_id, "session_id": session_id, "password": password.hex(),
              "pid": pid, "start_time": _start_time(pid)}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _previous(log_dir: str, broker_id: int) -> tuple[int, bytes] | None:
    """(session id, password) of a previous life of this broker that is no longer running."""
    try:
        record = json.loads((Path(log_dir) / SESSION_FILE).read_text())
        if int(record["broker_id"]) != broker_id:
            return None  # the log dir was given to another broker.id: not our session
        session_id, password = int(record["session_id"]), bytes.fromhex(record["password"])
        pid, started = int(record["pid"]), record.get("start_time")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring %s: %s", Path(log_dir) / SESSION_FILE, e)
        return None
    if started is not None and _start_time(pid) == started:
        return None  # that process still runs: its session is not ours to end
    return session_id, password


def close_previous_session(log_dir: str, broker_id: int, hosts: str, session_timeout_ms: int,
                           connection_timeout_s: float) -> bool:
    """End the session of this broker's previous life, if the file names one of a process that
    has exited. True when that session was still open and this call closed it.

    ``hosts`` is zookeeper.connect without its chroot. Failures are logged and leave the session
    to expire by itself (the caller then waits for it as before).
    """
    previous = _previous(log_dir, broker_id)
    if previous is None:
        return False
    from kazoo.client import KazooClient

    session_id, password = previous
    client = KazooClient(hosts=hosts, client_id=(session_id, password),
                         timeout=session_timeout_ms / 1000.0)
    try:
        # reattaching to a session that has expired meanwhile gets a new one, which stop() closes
        client.start(connection_timeout_s)
        took_over = client.client_id is not None and client.client_id[0] == session_id
        client.stop()
    except Exception as e:
        log.warning("could not close the previous ZooKeeper session 0x%x of broker %d: %s",
                    session_id, broker_id, e)
        return False
    finally:
        client.close()
    if took_over:
        log.info("closed ZooKeeper session 0x%x of this broker's previous run", session_id)
    else:
        log.info("ZooKeeper session 0x%x of this broker's previous run had ended already", session_id)
    return took_over
