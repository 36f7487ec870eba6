"""The disk worker process: the only writer of the partitions of one log.dir.

It recovers its log dir at start, registers every partition in the shared table, then loops:
wait on its doorbell, take a round of requests from every ring (network workers, then local IPC
producers), hand each to the handler its message type names in :attr:`DiskWorker.requests`,
post the completions and ring the network workers. Between rounds it runs the coordinator's
timers and the storage maintenance, and stamps its heartbeat.

SIGTERM: finish the current round, close the log dir cleanly (flush, checkpoints, clean-shutdown
marker) and exit; while the log dir is still being recovered or loaded, exit at once, as SIGQUIT
always does (the next start recovers).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time

import setproctitle

from appliance.broker.disk.coordinator_host import CoordinatorHost
from appliance.broker.disk.ipc_intake import IpcIntake
from appliance.broker.disk.log_admin import LogAdmin
from appliance.broker.disk.maintenance import Maintenance
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.replica_move import ReplicaMover, sweep_moves
from appliance.broker.disk.replication import Replication
from appliance.broker.disk.requests import Handler, Requests
from appliance.broker.disk.ring_intake import RingIntake
from appliance.broker.disk.txn_host import TXN_API_CLASSES, TxnCoordinatorHost
from appliance.config import BrokerConfig, ConfigError
from appliance.errors import KafkaStorageError
from appliance.metrics.recorder import attach_recorder
from appliance.process import reload_confirmations
from appliance.process.exit_codes import EXIT_BOOT_ERROR, EXIT_OK
from appliance.process.gc_policy import freeze_startup_objects
from appliance.process.plumbing import Plumbing
from appliance.security.acl import authorizer_from_config
from appliance.shm.layout import GROUP_HEADER, MsgType, WorkerState
from appliance.shm.partition_table import PartitionTable
from appliance.storage.flush import flush_observers

__all__ = ["DiskWorker"]

log = logging.getLogger("appliance.disk")

_GROUP = GROUP_HEADER.struct  # type: ignore[attr-defined]
IDLE_WAIT_S = 0.1  # the longest the loop sleeps: bounds heartbeat and maintenance latency
PUBLISH_INTERVAL_S = 0.25  # metrics: bytes-in counts reach the shared counters this often
# the heartbeat stamp at most this often (the supervisor judges silence in tens of seconds)
HEARTBEAT_INTERVAL_S = 0.05


class DiskWorker:
    def __init__(self, index: int, path: str, config: BrokerConfig, plumbing: Plumbing) -> None:
        self.index = index
        self.path = path
        self.config = config
        self.plumbing = plumbing
        self.alive = True
        self.reload_pending = False  # set by SIGHUP: re-read the config files between rounds
        self.reload_reply_to: socket.socket | None = None  # the supervisor's confirmations
        self._next_publish = 0.0  # metrics: when the pending bytes-in counts go to shm next
        self.slot = plumbing.disk_slot(index)
        self.requests_left = False  # the last round left requests in a ring (ROUND_LIMIT)
        self._next_beat = 0.0  # time.monotonic() of the next heartbeat stamp
        self.opened = False  # the log dir is recovered and loaded: a SIGTERM closes it cleanly

    # -- start ----------------------------------------------------------------------------
    def run(self) -> int:
        _name_process(f"appliance: disk worker {self.index} [{self.path}]")
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGQUIT, self._on_quit)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which stops us in order
        signal.signal(signal.SIGHUP, self._on_hup)
        self.attach()
        try:
            self.open()
        except (OSError, KafkaStorageError, ConfigError) as e:
            log.error("log dir %s unusable: %s", self.path, e)
            return EXIT_BOOT_ERROR
        self.opened = True
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
                             self.requests, authorizer_from_config(self.config, self.config.log_dirs[0]),
                             lambda slot: self.table.read(slot).topic)
        self.partitions.set_metrics(attach_recorder(self.config, self.plumbing.base, self.slot))
        self.requests.metrics = self.partitions.metrics
        if self.partitions.metrics is not None:
            flush_observers.append(self.partitions.metrics.flushed)

    def open(self) -> None:
        """Recover the log dir, load the groups, and fill the table of request handlers."""
        parts = self.partitions
        self.admin = admin = LogAdmin(parts, self.config)
        admin.load_broker_config()  # the dynamic broker configs saved by an earlier run
        sweep_moves(self.path, self.config.log_dirs)  # a move between log dirs cut by a crash
        parts.open()
        self.coordinator = CoordinatorHost(self.config, parts, self.rings)
        parts.on_txn_marker = self.coordinator.on_txn_marker
        self.coordinator.load()
        self.txn = TxnCoordinatorHost(self.config, parts, self.plumbing.disk_bells[self.index])
        self.txn.load()
        self.maintenance = Maintenance(parts)
        self.mover = ReplicaMover(self.index, parts)
        self.replication = self._join_cluster() if self.plumbing.cluster else None
        self.requests.handlers = self._handlers()

    def _join_cluster(self) -> Replication:
        """Cluster mode: the leadership area and the cluster's metadata, attached."""
        from appliance.shm.layout import leaders_name, metadata_name
        from appliance.shm.leadership_area import LeadershipArea
        from appliance.shm.metadata_cache import MetadataCache

        area = LeadershipArea.attach(leaders_name(self.plumbing.base))
        r = Replication(self.partitions, area, self.rings.complete_held,
                        int(self.config["broker.id"]), self.admin)
        # groups follow the offsets partitions' leadership; commits are judged by the cluster's
        # metadata
        metadata = MetadataCache.attach(metadata_name(self.plumbing.base))
        self.coordinator.attach_cluster(area, r, metadata)
        self.txn.attach_cluster(area, r, metadata, self.coordinator)
        return r

    def _handlers(self) -> dict[int, Handler]:
        """Every ring message type and its handler, standalone and in a cluster side by side
        (None: not served there; the requester gets INVALID_REQUEST)."""
        parts, admin, r = self.partitions, self.admin, self.replication
        table: tuple[tuple[int, Handler | None, Handler | None], ...] = (
            # message type              standalone                  in a cluster (replication.py)
            (MsgType.PRODUCE,             parts.produce,              r and r.produce),
            (MsgType.DELETE_RECORDS,      admin.delete_records,       r and r.delete_records),  # held for the ISR
            (MsgType.CREATE_PARTITION,    parts.create,               parts.create),
            (MsgType.DELETE_PARTITION,    parts.delete,               parts.delete),
            (MsgType.ALTER_CONFIG,        parts.alter,                parts.alter),
            (MsgType.GROUP,               self._coordinator_request,  self._coordinator_request),
            (MsgType.DESCRIBE_PRODUCERS,  admin.describe_producers,   admin.describe_producers),
            (MsgType.TOPIC_ID,            parts.set_topic_id,         parts.set_topic_id),
            (MsgType.ALTER_BROKER_CONFIG, admin.reload_broker_config, admin.reload_broker_config),
            (MsgType.REPLICA_MOVE,        self.mover.handle,          self.mover.handle),
            (MsgType.REPLICA_APPEND,      None,                       r and r.replica_append),
            (MsgType.TRUNCATE,            None,                       r and r.truncate),
            (MsgType.TRUNCATE_FULLY,      None,                       r and r.truncate_fully),
            (MsgType.FOLLOWER_FETCH,      None,                       r and r.follower_fetch),
            (MsgType.EPOCH_END,           None,                       r and r.epoch_end),
            (MsgType.LATEST_EPOCH,        None,                       r and r.latest_epoch),
            (MsgType.BECOME_LEADER,       None,                       r and r.become_leader),
            (MsgType.ISR_CHANGED,         None,                       r and r.isr_changed),
            (MsgType.WRITE_TXN_MARKER,    parts.write_txn_marker,     r and r.write_txn_marker),  # held for the ISR
        )
        column = 2 if r is not None else 1
        return {row[0]: row[column] for row in table if row[column] is not None}

    def _coordinator_request(self, n: int | None, request_id: int, slot: int, body: memoryview,
                             acks: int, timeout_ms: int) -> tuple | None:
        """A MsgType.GROUP message: the transaction APIs to the transaction coordinator, the
        group APIs to the group coordinator (the API key leads the message's header)."""
        if _GROUP.unpack_from(body, 0)[0] in TXN_API_CLASSES:
            return self.txn.handle(n, request_id, slot, body, acks, timeout_ms)
        return self.coordinator.handle_group(n, request_id, slot, body, acks, timeout_ms)

    # -- loop -----------------------------------------------------------------------------
    def _on_term(self, signum, frame) -> None:
        if not self.opened:
            # Recovering or loading the log dir (minutes for a big unclean one, on recovery
            # threads this handler cannot stop): waiting would outlast the stop deadline, and a
            # clean close needs every partition loaded. Leave as a SIGKILL would: the marker went
            # when the open began, so the next start recovers, and nothing was acknowledged yet.
            try:
                log.info("log dir %s: stopped while still loading; the next start recovers it", self.path)
            finally:  # (a log record cut by this handler in the same stream may raise)
                os._exit(EXIT_OK)
        self.alive = False

    def _on_hup(self, signum, frame) -> None:
        self.reload_pending = True  # acted on by the loop: the handler may interrupt an append

    def _confirm_reload(self, errors: list[str]) -> None:
        """Tell the supervisor this worker has re-read its configs (it sends READY=1 once every
        disk worker has), naming the files kept as they were (process/reload_confirmations.py)."""
        if self.reload_reply_to is None:
            return
        try:
            self.reload_reply_to.send(reload_confirmations.encode(self.index, self.table.worker(self.slot)[4], errors))
        except OSError as e:  # the supervisor waits until its deadline, then says so
            log.warning("cannot confirm the reload to the supervisor: %s", e)

    def _on_quit(self, signum, frame) -> None:
        os._exit(0)

    def round(self) -> bool:
        """One round over every ring. True if any request was handled. Sets
        :attr:`requests_left` when a ring was left with requests (ROUND_LIMIT): the loop comes
        back before it sleeps. Every other request arrives with a doorbell (each put on a ring
        is followed by one), so a busy round needs no empty round and timer pass after it (under
        one-at-a-time produce that was a second pass of this loop per request)."""
        handled, rung, more = self.rings.drain()
        ipc_handled, ipc_more = self.ipc.drain()
        self.requests_left = more or ipc_more
        if self.partitions.grew:
            self.rings.data_bell_pending |= self.partitions.grew
            self.partitions.grew = 0
        # requesters learn of their completions at once; one bell per worker serves both the
        # completions and the "new data" wake-up (each eventfd write that wakes a process costs
        # 3-20 us here, and as many context switches)
        self.rings.ring_bells(rung)
        return handled + ipc_handled > 0

    def _loop(self) -> None:
        bell = self.plumbing.disk_bells[self.index]
        wake_sock = self.ipc.wake_sock
        # The doorbell is edge-triggered and never read: every eventfd write is a new edge, so
        # the counter needs no draining (one read system call less per wake-up; the counter
        # cannot overflow in 2^64 - 2 rings). Producers' datagrams queue up: level, drained.
        poller = select.epoll()
        poller.register(bell, select.EPOLLIN | select.EPOLLET)
        poller.register(wake_sock, select.EPOLLIN)
        wake_fd = wake_sock.fileno()
        epoll_fd = (poller.fileno(),)
        try:
            while self.alive:
                self.round()
                try:
                    next_ms = self.coordinator.poll()
                except Exception:  # a coordinator bug must not take the partitions of this disk down
                    log.exception("group coordinator timers failed")
                    next_ms = int(time.time() * 1000) + 100
                try:
                    next_ms = min(next_ms, self.txn.poll())
                except Exception:  # the same for the transaction coordinator
                    log.exception("transaction coordinator timers failed")
                if self.rings.rung_later:  # answers the coordinator's timers released
                    self.rings.ring_bells()
                if not self.requests_left:
                    wait_s = min(IDLE_WAIT_S, max(next_ms - int(time.time() * 1000), 0) / 1000)
                    # try/except, not contextlib.suppress: three Python calls less per pass
                    # (this loop passes once per request under one-at-a-time produce)
                    try:
                        if self.rings.data_bell_pending:
                            # Coalesced data bells are due within DATA_BELL_INTERVAL_S, but
                            # epoll's timeout is whole milliseconds rounded up: a bell due in
                            # 0.1 ms went out 1-2 ms late (see DATA_BELL_BURST for what that cost
                            # a consumer). select's timeout is microseconds, and the epoll set is
                            # readable when it has events.
                            wait_s = min(wait_s, max(0.0, self.rings.data_bell_due() - time.monotonic()))
                            events = poller.poll(0) if select.select(epoll_fd, (), (), wait_s)[0] else ()
                        else:
                            events = poller.poll(wait_s)
                    except InterruptedError:
                        events = ()
                    for fd, _ in events:
                        if fd == wake_fd:
                            self.ipc.drain_wakeups()
                if self.rings.data_bell_pending:  # coalesced data bells now due
                    self.rings.ring_bells()
                now = time.monotonic()
                if now >= self._next_beat:  # a stamp per pass was a call and a clock read more
                    self.table.heartbeat(self.slot)
                    self._next_beat = now + HEARTBEAT_INTERVAL_S
                if self.replication is not None:
                    self.replication.poll()
                self.maintenance.run_if_due(now)
                if now >= self._next_publish and self.partitions.metrics is not None:
                    self.partitions.publish_bytes()  # bytes in: a scrape lags by <= 0.25 s
                    self._next_publish = now + PUBLISH_INTERVAL_S
                if self.reload_pending:
                    self.reload_pending = False
                    self._confirm_reload(self.admin.reload_files())
                if self.mover.outgoing or self.mover.incoming:
                    self.mover.expire(now)
        finally:
            poller.close()

    # -- stop -----------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "txn", None) is not None:
            self.txn.close()
        self.partitions.close()
        self.table.set_worker_state(self.slot, WorkerState.DEAD)


def _name_process(title: str) -> None:
    setproctitle.setproctitle(title)
