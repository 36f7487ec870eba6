"""What `appliance status` shows, gathered as plain data (JSON-ready dicts).

Everything but the groups comes from the broker's shared memory (the partition table's worker
and partition slots) and from psutil / sysfs, so it works when the network listener does not
answer. Group lag needs the broker's answer (the offsets are in its coordinators) and is left out,
with the reason, when the listener is unreachable.

Not thread-safe: a :class:`StatusReader` keeps the previous sample to compute rates.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import posix_ipc
import psutil

from appliance.config import BrokerConfig
from appliance.shm.layout import LAYOUT_VERSION, WorkerState
from appliance.shm.partition_table import PartitionTable, TableVersionError

__all__ = ["BrokerNotFound", "StatusReader", "table_name_for"]

_WORKER_STATES = {v: k.lower() for k, v in vars(WorkerState).items() if k.isupper()}
_SLOT_STATES = {0: "free", 1: "creating", 2: "online", 3: "offline", 4: "deleting"}
_KINDS = {0: "disk", 1: "network"}


class BrokerNotFound(Exception):
    """No usable broker shared memory; ``str(e)`` is the one line for the operator."""


def table_name_for(config: BrokerConfig) -> str:
    """The POSIX name of the partition table of the broker ``config`` describes (as serve names it)."""
    from appliance.process.plumbing import shm_base_name

    port = config.listeners[0][1]
    return f"/{shm_base_name(config['appliance.shm.name'], int(config['broker.id']), port)}-table"


def _rotational(path: str) -> bool | None:
    from appliance.storage.flush import _block_device_dir, _read

    try:
        dev = _block_device_dir(path)
    except OSError:
        return None
    if dev is None:
        return None
    rot = _read(os.path.join(dev, "queue", "rotational"))
    return None if rot is None else rot == "1"


def _proc_stats(proc: psutil.Process | None) -> dict[str, Any]:
    if proc is None:
        return {"cpu_percent": None, "rss_bytes": None, "fds": None}
    try:
        with proc.oneshot():
            return {"cpu_percent": round(proc.cpu_percent(None), 1), "rss_bytes": proc.memory_info().rss,
                    "fds": proc.num_fds()}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {"cpu_percent": None, "rss_bytes": None, "fds": None}


class StatusReader:
    """Attached to one broker's partition table; :meth:`sample` returns one status snapshot."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.name = table_name_for(config)
        try:
            self.table = PartitionTable.attach(self.name)
        except posix_ipc.ExistentialError:
            port = config.listeners[0][1]
            raise BrokerNotFound(f"no broker running: no shared memory {self.name} (broker.id "
                                 f"{config['broker.id']}, port {port})") from None
        except TableVersionError as e:
            raise BrokerNotFound(f"the broker's shared memory {self.name} is of another layout "
                                 f"version: {_versions(e)}") from None
        pid = self.table.creator_pid(self.name) or 0
        if not pid or not psutil.pid_exists(pid):
            self.table.close()
            raise BrokerNotFound(f"no broker running: shared memory {self.name} was left by "
                                 f"supervisor pid {pid}, which has exited")
        self.supervisor_pid = pid
        self._procs: dict[int, psutil.Process] = {}
        self._last: tuple[float, dict[tuple[str, int], int]] | None = None

    def close(self) -> None:
        self.table.close()

    def _proc(self, pid: int) -> psutil.Process | None:
        if pid <= 0:
            return None
        p = self._procs.get(pid)
        if p is None:
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)  # the first call only starts the measurement
            except psutil.Error:
                return None
            self._procs[pid] = p
        return p

    def prime(self) -> None:
        """Start the CPU and rate measurements; the next :meth:`sample` reports over the interval."""
        self._proc(self.supervisor_pid)
        for i in range(self.table.num_disks + int(self.config["num.network.threads"])):
            self._proc(self.table.worker(i)[0])
        self._last = (time.monotonic(), self._leos())

    def _leos(self) -> dict[tuple[str, int], int]:
        return {(p.topic, p.partition): p.log_end_offset for p in self.table.slots()}

    def sample(self, groups: bool = True, top: int = 10) -> dict[str, Any]:
        now = time.monotonic()
        t = self.table
        alive = psutil.pid_exists(self.supervisor_pid)
        workers = []
        for i in range(t.num_disks + int(self.config["num.network.threads"])):
            pid, beat, state, kind, incarnation = t.worker(i)
            index = i if kind == 0 else i - t.num_disks
            workers.append({
                "slot": i, "kind": _KINDS.get(kind, str(kind)), "index": index, "pid": pid,
                "state": _WORKER_STATES.get(state, str(state)), "incarnation": incarnation,
                # a beat written after ``now`` was read is fresh, not from the future
                "heartbeat_age_s": round(max(0.0, now - beat), 3) if beat > 0 else None,
                **_proc_stats(self._proc(pid) if pid else None),
            })
        parts = list(t.slots())
        prev_time, prev = self._last or (now, {})
        elapsed = now - prev_time
        rows = []
        for p in parts:
            before = prev.get((p.topic, p.partition))
            rate = (p.log_end_offset - before) / elapsed if elapsed > 0 and before is not None else 0.0
            rows.append({"topic": p.topic, "partition": p.partition, "disk": p.disk,
                         "state": _SLOT_STATES.get(p.state, str(p.state)),
                         "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
                         "high_watermark": p.high_watermark, "messages_per_s": round(max(rate, 0.0), 1)})
        self._last = (now, {(r["topic"], r["partition"]): r["log_end_offset"] for r in rows})
        disks = []
        for d, path in enumerate(self.config.log_dirs):
            disks.append(self._disk(d, path, workers, rows))
        rows.sort(key=lambda r: (-r["messages_per_s"], r["topic"], r["partition"]))
        sup = {"pid": self.supervisor_pid, "alive": alive, **_proc_stats(self._proc(self.supervisor_pid))}
        out: dict[str, Any] = {
            "broker": {"id": t.broker_id, "shm": self.name, "layout_version": LAYOUT_VERSION,
                       "port": t.port, "supervisor": sup, "partitions": len(rows),
                       # each listener with its security protocol, as the broker was configured
                       "listeners": [{"name": e.listener, "address": f"{e.host}:{e.port}",
                                      "security_protocol": e.security_protocol}
                                     for e in self.config.listener_endpoints],
                       "interval_s": round(elapsed, 3)},
            "workers": workers, "disks": disks,
            "top_partitions": rows[:top],
            "messages_per_s": round(sum(r["messages_per_s"] for r in rows), 1),
        }
        if groups:
            out["groups"], out["groups_error"] = self._groups({(r["topic"], r["partition"]): r["high_watermark"]
                                                               for r in rows})
        return out

    def _disk(self, d: int, path: str, workers: list[dict], rows: list[dict]) -> dict[str, Any]:
        from appliance.storage.flush import choose_writeback_mode

        worker = next((w for w in workers if w["kind"] == "disk" and w["index"] == d), None)
        mine = [r for r in rows if r["disk"] == d]
        try:
            usage = shutil.disk_usage(path)
            free, total = usage.free, usage.total
        except OSError:
            free = total = None
        try:
            mode = choose_writeback_mode(path, self.config["log.writeback.mode"])[0]
        except (OSError, ValueError):
            mode = None
        online = worker is not None and worker["state"] == "ready"
        return {"index": d, "path": path, "rotational": _rotational(path), "free_bytes": free,
                "total_bytes": total, "writeback_mode": mode, "partitions": len(mine),
                "offline_partitions": sum(1 for r in mine if r["state"] == "offline"),
                "state": "online" if online else "offline"}

    def _groups(self, hws: dict[tuple[str, int], int]) -> tuple[list[dict] | None, str | None]:
        """Groups with their committed offsets and lag, through the broker's listener."""
        from appliance.client.connection import BrokerConnection

        host, port = self.config.listeners[0]
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        try:
            conn = BrokerConnection(host, port, timeout=3.0, client_id="appliance-status")
        except Exception as e:  # the listener is down or not ours: status still shows the rest
            return None, f"{host}:{port} unreachable: {e}"
        try:
            listed = conn.request(16, {})
            out = []
            for g in sorted(listed.groups, key=lambda g: g.group_id):
                desc = conn.request(15, {"groups": [g.group_id], "include_authorized_operations": False}).groups[0]
                offs = conn.request(9, {"group_id": g.group_id, "topics": None})
                parts = []
                for tp in offs.topics:
                    for p in tp.partitions:
                        if p.committed_offset < 0:
                            continue
                        hw = hws.get((tp.name, p.partition_index))
                        parts.append({"topic": tp.name, "partition": p.partition_index,
                                      "committed": p.committed_offset,
                                      "lag": None if hw is None else max(hw - p.committed_offset, 0)})
                lags = [p["lag"] for p in parts if p["lag"] is not None]
                out.append({"group": g.group_id, "state": desc.group_state, "members": len(desc.members),
                            "lag": sum(lags), "partitions": parts})
            return out, None
        except Exception as e:
            return None, f"{host}:{port}: {e}"
        finally:
            conn.close()


def _versions(e: TableVersionError) -> str:
    return f"{e}" if "this build" in str(e) else f"{e}; this build reads version {LAYOUT_VERSION}"
