"""The disk worker process: the only writer of the partitions of one log.dir.

It recovers its log dir at start, registers every partition in the shared table, then loops:
wait on its doorbell, take a round of requests from every ring (network workers, then local IPC
producers), hand each to the handler its message type names in :attr:`DiskWorker.requests`,
post the completions and ring the network workers. Between rounds it runs the coordinator's
timers and the storage maintenance, and stamps its heartbeat.

SIGTERM: finish the current round, close the log dir cleanly (flush, checkpoints, clean-shutdown
marker) and exit. SIGQUIT: exit at once (the next start recovers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time

from appliance.broker.disk.coordinator_host import CoordinatorHost
from appliance.broker.disk.ipc_intake import IpcIntake
from appliance.broker.disk.maintenance import Maintenance
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import Requests
from appliance.broker.disk.ring_intake import DATA_BELL_INTERVAL_S, RingIntake
from appliance.broker.exit_codes import EXIT_BOOT_ERROR, EXIT_OK
from appliance.broker.gc_policy import freeze_startup_objects
from appliance.broker.plumbing import Plumbing, drain_doorbell
from appliance.config import BrokerConfig
from appliance.errors import KafkaStorageError
from appliance.shm.layout import MsgType, WorkerState
from appliance.shm.partition_table import PartitionTable

__all__ = ["DiskWorker"]

log = logging.getLogger("appliance.disk")

IDLE_WAIT_S = 0.1  # the longest the loop sleeps: bounds heartbeat and maintenance latency


class DiskWorker:
    def __init__(self, index: int, path: str, config: BrokerConfig, plumbing: Plumbing) -> None:
        self.index = index
        self.path = path
        self.config = config
        self.plumbing = plumbing
        self.alive = True
        self.slot = plumbing.disk_slot(index)

    # -- start ----------------------------------------------------------------------------
    def run(self) -> int:
        _name_process(f"appliance: disk worker {self.index} [{self.path}]")
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGQUIT, self._on_quit)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which stops us in order
        self.attach()
        try:
            self.open()
        except (OSError, KafkaStorageError) as e:
            log.error("log dir %s unusable: %s", self.path, e)
            return EXIT_BOOT_ERROR
        self.table.set_worker_state(self.slot, WorkerState.READY)
        self.table.heartbeat(self.slot)
        freeze_startup_objects()
        try:
            self._loop()
        finally:
            self.close()
        return EXIT_OK

    def attach(self) -> None:
        """Attach the shared memory: the table, the rings, the IPC channels."""
        self.table = PartitionTable.attach(self.plumbing.table_name)
        self.partitions = Partitions(self.index, self.path, self.config, self.table, self.slot)
        self.requests = Requests({}, self.path)
        self.requests.on_io_error = self.partitions.io_error
        self.rings = RingIntake(self.index, self.plumbing, self.requests, self.partitions)
        self.ipc = IpcIntake(self.plumbing.base, self.index, self.table.worker(self.slot)[4],
                             self.requests)

    def open(self) -> None:
        """Recover the log dir, load the groups, and fill the table of request handlers."""
        parts = self.partitions
        parts.open()
        self.coordinator = CoordinatorHost(self.config, parts, self.rings)
        self.coordinator.load()
        self.maintenance = Maintenance(parts)
        self.requests.handlers.update({
            MsgType.PRODUCE: parts.produce,
            MsgType.CREATE_PARTITION: parts.create,
            MsgType.DELETE_PARTITION: parts.delete,
            MsgType.ALTER_CONFIG: parts.alter,
            MsgType.GROUP: self.coordinator.handle_group,
        })

    # -- loop -----------------------------------------------------------------------------
    def _on_term(self, signum, frame) -> None:
        self.alive = False

    def _on_quit(self, signum, frame) -> None:
        os._exit(0)

    def round(self) -> bool:
        """One round over every ring. True if any request was handled."""
        handled, rung = self.rings.drain()
        handled += self.ipc.drain()
        if handled:
            self.rings.data_bell_pending = True
        # requesters learn of their completions at once; one bell per worker serves both the
        # completions and the "new data" wake-up (each eventfd write that wakes a process costs
        # 3-20 us here, and as many context switches)
        self.rings.ring_bells(rung)
        return handled > 0

    def _loop(self) -> None:
        bell = self.plumbing.disk_bells[self.index]
        wake_sock = self.ipc.wake_sock
        poller = select.poll()
        poller.register(bell, select.POLLIN)
        poller.register(wake_sock, select.POLLIN)
        while self.alive:
            busy = self.round()
            try:
                next_ms = self.coordinator.poll()
            except Exception:  # a coordinator bug must not take the partitions of this disk down
                log.exception("group coordinator timers failed")
                next_ms = int(time.time() * 1000) + 100
            if not busy:
                wait_ms = min(IDLE_WAIT_S * 1000, max(next_ms - int(time.time() * 1000), 0))
                if self.rings.data_bell_pending:
                    wait_ms = min(wait_ms, DATA_BELL_INTERVAL_S * 1000)
                events: list = []
                with contextlib.suppress(InterruptedError):
                    events = poller.poll(wait_ms)
                # read only what fired: each empty read is a syscall per wake-up
                for fd, _ in events:
                    if fd == bell:
                        drain_doorbell(bell)
                    else:
                        self.ipc.drain_wakeups()
            self.rings.ring_bells()
            now = time.monotonic()
            self.table.heartbeat(self.slot)
            self.maintenance.run_if_due(now)

    # -- stop -----------------------------------------------------------------------------
    def close(self) -> None:
        self.partitions.close()
        self.table.set_worker_state(self.slot, WorkerState.DEAD)


def _name_process(title: str) -> None:
    try:
        import setproctitle
        setproctitle.setproctitle(title)
    except ImportError:
        pass
