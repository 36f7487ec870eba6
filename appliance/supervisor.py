"""The supervisor: forks one disk worker per log.dir and the network workers, keeps them alive.

Shape (gunicorn's Arbiter): signal handlers only enqueue; one short loop hands each queued signal
to its ``handle_<name>`` method (:attr:`Supervisor.SIGNAL_NAMES`), then checks heartbeats and
start-up deadlines, then reconciles the workers against the fixed slots. A worker of any kind that
exits with :data:`EXIT_BOOT_ERROR` could not start (bad log dir, port taken): respawning would only
loop, so the supervisor halts with that status. A worker that stops heartbeating (or stays
STARTING past its deadline) gets SIGABRT, so it can leave a traceback, then SIGKILL.

SIGTERM stops the kinds in order within :mod:`appliance.process.stop_deadlines`' marks (each kind
SIGKILLed at its own, the whole stop under systemd's TimeoutStopSec), at any point of start-up
too; the shared memory is unlinked at the end whatever the workers did.

SIGHUP reloads (systemd's ``ExecReload``): the supervisor forwards it to the disk workers, which
re-read the dynamic broker configs and every partition's ``topic.properties`` between rounds and
confirm (:mod:`appliance.process.reload_confirmations`); network workers ignore it, so a hang-up
of the terminal never stops the broker.

Only the supervisor talks to systemd (sd_notify READY / RELOADING / STOPPING / WATCHDOG).
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass

import posix_ipc
import setproctitle

from appliance.config import BrokerConfig, ConfigError
from appliance.metrics.listener import parse_listener
from appliance.process.cpu_affinity import apply_affinity
from appliance.process.exit_codes import EXIT_BOOT_ERROR, EXIT_CRASHED
from appliance.process.gc_policy import freeze_before_fork
from appliance.process.limits import raise_open_files_limit
from appliance.process.plumbing import Plumbing, ring_doorbell, shm_base_name, unlink_stale
from appliance.process.port_check import bind_error
from appliance.process.reload_confirmations import ReloadConfirmations
from appliance.process.stop_deadlines import (
    CLUSTER_STOP_BY_S,
    DISK_STOP_BY_S,
    KILL_REAP_S,
    NETWORK_STOP_BY_S,
    QUIT_GRACE_S,
)
from appliance.security.jaas_file import broker_zookeeper_login
from appliance.security.tls import TlsError, check_tls
from appliance.shm.counters import SharedCounters
from appliance.shm.layout import SlotState, WorkerState, counters_name
from appliance.shm.partition_table import PartitionTable

__all__ = ["Supervisor", "HaltServer", "serve", "sd_notify"]

log = logging.getLogger("appliance.supervisor")

HEARTBEAT_TIMEOUT_S = 30.0  # a worker loop never blocks this long; past it the worker is wedged
READY_TIMEOUT_S = 600.0  # recovery of a large unclean log dir can take minutes: progress is logged
NETWORK_READY_TIMEOUT_S = 60.0  # a network worker only attaches and binds
ABORT_GRACE_S = 5.0  # after SIGABRT, the time a wedged worker gets to write its traceback
DISK, NETWORK, CLUSTER = 0, 1, 2
# the cluster worker's start is bounded by zookeeper.connection.timeout.ms, after which it exits 3
STARTING_DEADLINE_S = {DISK: READY_TIMEOUT_S, NETWORK: NETWORK_READY_TIMEOUT_S, CLUSTER: READY_TIMEOUT_S}
KIND_NAMES = {DISK: "disk worker", NETWORK: "network worker", CLUSTER: "cluster worker"}
# a graceful stop: each kind is SIGKILLed this long after the SIGTERM (process/stop_deadlines.py)
STOP_BY_S = {CLUSTER: CLUSTER_STOP_BY_S, NETWORK: NETWORK_STOP_BY_S, DISK: DISK_STOP_BY_S}


class HaltServer(Exception):
    def __init__(self, reason: str, exit_status: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_status = exit_status


@dataclass
class _Worker:
    kind: int
    index: int
    slot: int
    pid: int = 0
    incarnation: int = 0
    started: float = 0.0
    aborted: float = 0.0  # when it was sent SIGABRT (0: not)
    last_beat: float = 0.0  # the heartbeat stamp last read from its slot
    beat_changed: float = 0.0  # our clock when that stamp last changed


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(message.encode(), addr)


class Supervisor:
    """Owns the shared memory and the worker processes of one broker."""

    SIGNAL_NAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGQUIT: "quit",
                    signal.SIGCHLD: "chld", signal.SIGHUP: "hup", signal.SIGUSR2: "usr2"}
    SIGNALS = tuple(SIGNAL_NAMES)

    # process primitives, replaced by the unit tests
    fork = staticmethod(os.fork)
    waitpid = staticmethod(os.waitpid)
    kill = staticmethod(os.kill)

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.log_dirs: list[str] = config.log_dirs
        host, port = config.listeners[0]
        self.host, self.port = host, port
        self.num_net = int(config["num.network.threads"])
        self.base = shm_base_name(config["appliance.shm.name"], int(config["broker.id"]), port)
        self.workers: list[_Worker] = []
        self._sig_queue: list[int] = []
        self._wake_r, self._wake_w = -1, -1
        self.plumbing: Plumbing | None = None
        self.table: PartitionTable | None = None
        self.counters: SharedCounters | None = None
        self._stopping = False
        self.cluster = bool(str(config["zookeeper.connect"] or "").strip())  # cluster mode
        # SIGHUP: READY=1 waits for every disk worker's confirmation (made before the fork)
        self.reloads = ReloadConfirmations(self.log_dirs)

    # -- signals: enqueue only ------------------------------------------------------------
    def _signal(self, signum: int, frame: object) -> None:
        self._sig_queue.append(signum)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        for sig in self.SIGNALS:
            signal.signal(sig, self._signal)

    # -- start ----------------------------------------------------------------------------
    def _check_port(self) -> None:
        """Every listener must be servable and its port free: the network workers bind them all."""
        try:
            self.config.check_served()
            check_tls(self.config)
            if not self.config.standalone:  # the ZooKeeper login's file, zookeeper.set.acl's need of it
                broker_zookeeper_login(self.config["zookeeper.set.acl"])
        except (ConfigError, TlsError) as e:
            raise HaltServer(str(e), EXIT_BOOT_ERROR) from e
            raise HaltServer(str(e), EXIT_BOOT_ERROR) from e
        for ep in self.config.listener_endpoints:
            why = bind_error(ep.host, ep.port, socket.AF_INET6 if ":" in ep.host else socket.AF_INET)
            if why is not None:
                raise HaltServer(f"cannot listen on {ep}: {why}", EXIT_BOOT_ERROR)

    def _apply_cpu_affinity(self) -> None:
        """appliance.cpu.affinity: set here, before any fork, so every worker inherits it."""
        try:
            cpus = apply_affinity(self.config["appliance.cpu.affinity"])
        except ValueError as e:
            raise HaltServer(f"appliance.cpu.affinity={self.config['appliance.cpu.affinity']!r}: {e}",
                             EXIT_BOOT_ERROR) from e
        if cpus is not None:
            log.info("processes run on CPU(s) %s (appliance.cpu.affinity)", sorted(cpus))

    def _check_metrics_port(self) -> bool:
        """True if a metrics endpoint is configured; its port must be free: network worker 0
        binds it after the fork."""
        try:
            listener = parse_listener(self.config["metrics.listener"])
        except ValueError as e:
            raise HaltServer(str(e), EXIT_BOOT_ERROR) from e
        if listener is None:
            return False
        why = bind_error(listener.host, listener.port,
                         socket.AF_INET6 if ":" in listener.host else socket.AF_INET)
        if why is not None:
            raise HaltServer(f"cannot listen on metrics.listener {listener} (port {listener.port}): {why}",
                             EXIT_BOOT_ERROR)
        return True

    def _create_counters(self) -> None:
        """The metrics endpoint's counters, shared by every worker."""
        # the base is ours now (_reclaim_shared_memory): a leftover object is a dead broker's
        with contextlib.suppress(posix_ipc.ExistentialError):
            posix_ipc.unlink_shared_memory(counters_name(self.base))
        self.counters = SharedCounters.create(counters_name(self.base))

    def _reclaim_shared_memory(self) -> None:
        pid = PartitionTable.creator_pid(f"/{self.base}-table")
        if pid is None:
            return
        if pid and _process_alive(pid) and pid != os.getpid():
            raise HaltServer(f"another broker (pid {pid}) owns shared memory '{self.base}'; "
                             f"stop it or set appliance.shm.name", EXIT_BOOT_ERROR)
        removed = unlink_stale(self.base)
        log.warning("reclaimed %d shared-memory objects left by a crashed broker (pid %s)",
                    len(removed), pid)

    def run(self) -> int:
        try:
            soft, hard = raise_open_files_limit()
            log.info("open-file limit %d (hard limit %d): segments, indexes and sockets share it",
                     soft, hard)
            self._check_port()
            self._apply_cpu_affinity()
            for d in self.log_dirs:
                try:
                    os.makedirs(d, exist_ok=True)
                except OSError as e:  # a dead disk: its disk worker starts it offline
                    if not os.path.isdir(d):
                        raise HaltServer(f"log dir {d}: {e.strerror}", EXIT_BOOT_ERROR) from e
            self._reclaim_shared_memory()
            # compile or load every numba kernel once here, so no forked worker pays for it on
            # its first request (measured: 0.2-0.4 s of CPU per worker otherwise)
            from native.warmup import warmup
            warmup()
            # From here a SIGTERM is queued, not fatal: until now it killed the supervisor with
            # nothing to clean up; from now on it would leave the shared memory behind
            self._install_signals()
            if self._check_metrics_port():
                self._create_counters()  # after the reclaim
            self.plumbing, self.table = Plumbing.create(
                self.base, len(self.log_dirs), self.num_net, int(self.config["broker.id"]), self.port,
                int(self.config["appliance.request.ring.bytes"]), cluster=self.cluster,
                max_partitions=int(self.config["appliance.max.partitions"]))
            for d in self.log_dirs:  # so local IPC producers and tools can find our shared memory
                try:
                    with open(os.path.join(d, ".appliance-shm-name"), "w") as f:
                        f.write(self.base + "\n")
                except OSError as e:  # a dead disk must not stop the others (its worker logs it)
                    log.warning("log dir %s: cannot write .appliance-shm-name: %s", d, e)
            self.workers = [_Worker(DISK, d, self.plumbing.disk_slot(d)) for d in range(len(self.log_dirs))]
            self.workers += [_Worker(NETWORK, n, self.plumbing.net_slot(n)) for n in range(self.num_net)]
            if self.cluster:  # it joins once the network workers can take the controller's requests
                self.workers.append(_Worker(CLUSTER, 0, self.plumbing.cluster_slot()))
            for kind in (DISK, NETWORK, CLUSTER):  # network workers start once every disk is READY
                self._handle_signals()  # a stop asked for meanwhile: fork nothing more
                if self._stopping:
                    raise HaltServer("stopped during start-up", 0)
                for w in self.workers:
                    if w.kind == kind:
                        self._spawn(w)
                self._wait_ready(kind)
            sd_notify("READY=1")
            log.info("broker %s listening on %s (%d disk workers, %d network workers, shm %s)",
                     self.config["broker.id"],
                     ", ".join(str(e) for e in self.config.listener_endpoints),
                     len(self.log_dirs), self.num_net, self.base)
            while True:
                self._sleep(1.0)
                if not self.tick():
                    break
            return 0
        except HaltServer as e:
            # a stop asked for while starting is no error
            (log.error if e.exit_status else log.info)("%s", e.reason)
            self._stop(graceful=False)
            return e.exit_status
        finally:
            self._cleanup()

    def tick(self) -> bool:
        """One pass of the loop: queued signals, stale workers, respawns. False once stopping."""
        self._handle_signals()
        if self._stopping:
            return False
        self._reload_progress()
        self._murder_stale_workers()
        self._respawn_missing()
        return True

    def _wait_ready(self, kind: int) -> None:
        """Until every worker of ``kind`` is READY; a boot error or a stop halts start-up. The
        deadline counts from a pending worker's last heartbeat stamp: a disk worker loading
        thousands of partitions stamps as it goes, and only silence that long halts."""
        last_report = time.monotonic()
        while True:
            pending = [w for w in self.workers if w.kind == kind
                       and self.table.worker(w.slot)[2] != WorkerState.READY]
            if not pending:
                return
            now = time.monotonic()
            if all(now - self._last_progress(w, now) > STARTING_DEADLINE_S[kind] for w in pending):
                raise HaltServer(f"{KIND_NAMES[kind]}s did not become ready in time")
            self._sleep(0.05)
            self._handle_signals()
            if self._stopping:
                raise HaltServer("stopped during start-up", 0)
            self._respawn_missing(kind)  # a crash (not a boot error) while starting: try again
            if kind == DISK and time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                log.info("waiting for disk workers to recover their logs: %s",
                         ", ".join(self.log_dirs[w.index] for w in pending))

    def _spawn(self, w: _Worker) -> None:
        w.incarnation += 1
        w.aborted = 0.0
        self.table.set_worker(w.slot, pid=0, kind=w.kind, state=WorkerState.STARTING,
                              incarnation=w.incarnation)
        freeze_before_fork()
        # Blocked across the fork: a signal reaching the child before it has reset our handlers
        # would run them there, on the child's copy of the queue, and be lost (a SIGTERM sent
        # right after a spawn left that worker running until its SIGKILL). Blocked, it waits
        # for the child's own dispositions (SIG_DFL: a SIGTERM ends a worker not yet started).
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        try:
            pid = self.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            raise
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            w.pid, w.started = pid, time.monotonic()
            self.table.set_worker(w.slot, pid=pid, kind=w.kind, state=WorkerState.STARTING,
                                  incarnation=w.incarnation)
            # the stamp set_worker just wrote is ours: only the worker's own stamps are progress
            w.last_beat, w.beat_changed = self.table.worker(w.slot)[1], w.started
            return
        # child
        code = EXIT_CRASHED
        try:
            for sig in self.SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a disk worker installs its reload handler
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.reloads.close_in_child(disk_worker=w.kind == DISK)
            faulthandler.enable()  # SIGABRT from the supervisor leaves the wedged stack in the log
            code = self._worker_main(w)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else EXIT_CRASHED
        except BaseException:
            logging.getLogger("appliance.worker").exception("worker crashed")
            code = EXIT_CRASHED
        finally:
            with contextlib.suppress(Exception):
                logging.shutdown()
            os._exit(code)

    def _worker_main(self, w: _Worker) -> int:
        # imported in the child only: the supervisor itself never loads storage or asyncio code
        if w.kind == DISK:
            from appliance.broker.disk.worker import DiskWorker
            worker = DiskWorker(w.index, self.log_dirs[w.index], self.config, self.plumbing)
            worker.reload_reply_to = self.reloads.reply_to
            return worker.run()
        if w.kind == CLUSTER:  # kazoo is imported there, after the fork, never here
            from appliance.cluster.worker import ClusterWorker
            return ClusterWorker(self.config, self.plumbing, self.log_dirs).run()
        from appliance.broker.network_worker import NetworkWorker
        return NetworkWorker(w.index, self.config, self.plumbing, self.log_dirs).run()

    # -- the loop -------------------------------------------------------------------------
    def _sleep(self, timeout: float) -> None:
        with contextlib.suppress(InterruptedError):
            r, _, _ = select.select([self._wake_r, self.reloads.replies], [], [], timeout)
            if self.reloads.replies in r:
                self._reload_progress()  # drains them: a reply left unread would spin select
            if self._wake_r in r:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self._wake_r, 4096):
                        pass

    def _handle_signals(self) -> None:
        while self._sig_queue:
            sig = self._sig_queue.pop(0)
            getattr(self, "handle_" + self.SIGNAL_NAMES[sig])()

    def handle_chld(self) -> None:
        self._reap()

    def handle_term(self) -> None:
        log.info("shutting down (flushing logs, writing checkpoints)")
        self._stop(graceful=True)

    handle_int = handle_term  # Ctrl-C: the same orderly stop

    def handle_quit(self) -> None:
        self._stop(graceful=False)

    def handle_hup(self) -> None:
        """Reload, in systemd's protocol: RELOADING=1 (with the monotonic time it began), every
        disk worker told to re-read its configs, then READY=1 once each has confirmed
        (:mod:`appliance.process.reload_confirmations`). A worker that is starting reads the
        files afresh anyway; one that dies meanwhile is not waited for."""
        sd_notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")
        disks = [w for w in self.workers if w.kind == DISK and w.pid]
        # only READY ones answer soon; one still starting (recovering) reads the files anyway
        self.reloads.begin({w.index: w.incarnation for w in disks
                            if self.table.worker(w.slot)[2] == WorkerState.READY})
        for w in disks:
            self._send(w, signal.SIGHUP)
        log.info("SIGHUP: %d disk workers re-read the dynamic broker configs and topic configs",
                 len(disks))
        self._reload_progress()

    def _reload_progress(self) -> None:
        if self.reloads.progress({w.index: w.incarnation for w in self.workers if w.kind == DISK and w.pid}):
            sd_notify("READY=1")

    def handle_usr2(self) -> None:
        """Bring offline log dirs back (after their disk was replaced or remounted): their disk
        workers stop and are respawned, and each recovers its dir again, or finds it still
        dead and keeps it offline. Healthy dirs are not touched."""
        offline = {i.disk for i in self.table.slots() if i.state == SlotState.STORAGE_ERROR}
        for w in self.workers:
            if w.kind == DISK and w.index in offline and w.pid:
                log.info("SIGUSR2: restarting disk worker %d to reopen offline log dir %s",
                         w.index, self.log_dirs[w.index])
                self._send(w, signal.SIGTERM)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = self.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            for w in self.workers:
                if w.pid == pid:
                    w.pid = 0
                    self._on_worker_exit(w, code)

    def _on_worker_exit(self, w: _Worker, code: int) -> None:
        kind = KIND_NAMES[w.kind]
        self.table.set_worker(w.slot, pid=0, kind=w.kind, state=WorkerState.DEAD,
                              incarnation=w.incarnation)
        if w.kind == DISK:
            # its partitions are unavailable until the new worker has recovered them
            for info in self.table.slots():
                if info.disk == w.index and info.state == SlotState.ONLINE:
                    self.table.set_state(info.slot, SlotState.OFFLINE)
            for fd in self.plumbing.net_bells:
                ring_doorbell(fd)  # network workers fail the requests it held
        if self._stopping:
            return
        log.warning("%s %d exited with %s", kind, w.index,
                    f"signal {-code}" if code < 0 else f"code {code}")
        if code == EXIT_BOOT_ERROR:
            raise HaltServer(f"{kind} {w.index} could not boot; stopping the broker", EXIT_BOOT_ERROR)

    def _respawn_missing(self, kind: int | None = None) -> None:
        for w in self.workers:
            if w.pid == 0 and kind in (None, w.kind):
                if time.monotonic() - w.started < 1.0:
                    continue  # back off a worker that dies at once
                log.info("restarting %s %d", KIND_NAMES[w.kind], w.index)
                self._spawn(w)

    def _last_progress(self, w: _Worker, now: float) -> float:
        """When ``w`` last showed life: its start, or the last change of its heartbeat stamp
        (seen on our own clock; the stamp's value is not trusted)."""
        beat = self.table.worker(w.slot)[1]
        if beat != w.last_beat:
            w.last_beat, w.beat_changed = beat, now
        return max(w.started, w.beat_changed)

    def _murder_stale_workers(self) -> None:
        """SIGABRT to a worker silent past its heartbeat timeout or stuck STARTING past its
        deadline; SIGKILL if it still lives ABORT_GRACE_S later."""
        now = time.monotonic()
        for w in self.workers:
            if not w.pid:
                continue
            if w.aborted:
                if now - w.aborted > ABORT_GRACE_S:
                    log.error("%s %d (pid %d) survived SIGABRT: SIGKILL", KIND_NAMES[w.kind],
                              w.index, w.pid)
                    self._send(w, signal.SIGKILL)
                continue
            slot_pid, beat, state, slot_kind, slot_inc = self.table.worker(w.slot)
            # Silence is judged by when the stamp last CHANGED, on our own clock, not by its
            # value: a stamp overwritten by anything else (the fuzzer once made it read 0.0,
            # "missed heartbeats for <uptime> s") must not get a live worker killed.
            if beat != w.last_beat:
                if not w.started - 1.0 <= beat <= now + 1.0 and w.last_beat:
                    # the whole slot, to tell a stray 8-byte store from a zeroed page
                    log.warning("%s %d: implausible heartbeat stamp %r (bytes %s) in its slot "
                                "(pid %d, state %d, kind %d, incarnation %d)", KIND_NAMES[w.kind],
                                w.index, beat, struct.pack("=d", beat).hex(), slot_pid, state,
                                slot_kind, slot_inc)
                w.last_beat, w.beat_changed = beat, now
            if state == WorkerState.READY and now - w.beat_changed > HEARTBEAT_TIMEOUT_S:
                why = f"missed heartbeats for {now - w.beat_changed:.0f} s"
            elif (state == WorkerState.STARTING
                  and now - max(w.started, w.beat_changed) > STARTING_DEADLINE_S[w.kind]):
                why = (f"still starting after {now - w.started:.0f} s, silent for "
                       f"{now - max(w.started, w.beat_changed):.0f} s")
            else:
                continue
            log.error("%s %d (pid %d) %s: SIGABRT", KIND_NAMES[w.kind], w.index, w.pid, why)
            w.aborted = now
            self._send(w, signal.SIGABRT)
        sd_notify("WATCHDOG=1")

    def _send(self, w: _Worker, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.kill(w.pid, sig)

    # -- stop -----------------------------------------------------------------------------
    def _stop(self, graceful: bool) -> None:
        """The cluster worker first (it leaves the cluster), then network workers (no new
        requests), then disk workers (flush + checkpoints). Graceful: each kind is SIGKILLed at
        its mark after the stop began (:data:`STOP_BY_S`), so the whole stop ends within
        ``stop_deadlines.STOP_DEADLINE_S`` whatever a worker waits on; fast (SIGQUIT): each kind
        gets QUIT_GRACE_S."""
        if not self._stopping:
            sd_notify("STOPPING=1")
        self._stopping = True
        sig = signal.SIGTERM if graceful else signal.SIGQUIT
        began = time.monotonic()
        for kind in (CLUSTER, NETWORK, DISK):
            group = [w for w in self.workers if w.kind == kind and w.pid]
            for w in group:
                self._send(w, sig)
            deadline = began + STOP_BY_S[kind] if graceful else time.monotonic() + QUIT_GRACE_S
            while any(w.pid for w in group) and time.monotonic() < deadline:
                self._reap_blocking(0.05)
            for w in group:
                if w.pid:
                    log.error("%s %d (pid %d) did not stop within %.0f s: SIGKILL", KIND_NAMES[kind],
                              w.index, w.pid, time.monotonic() - began)
                    self._send(w, signal.SIGKILL)
            deadline = time.monotonic() + KILL_REAP_S
            while any(w.pid for w in group) and time.monotonic() < deadline:
                self._reap_blocking(0.05)
            for w in group:
                if w.pid:  # in uninterruptible I/O (a dead disk): it dies when the I/O returns
                    log.error("%s %d (pid %d) still there %.0f s after SIGKILL; not waiting for it",
                              KIND_NAMES[kind], w.index, w.pid, KILL_REAP_S)
                    w.pid = 0

    def _reap_blocking(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                pid, status = self.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                for w in self.workers:
                    w.pid = 0
                return
            if pid == 0:
                time.sleep(0.01)
                continue
            for w in self.workers:
                if w.pid == pid:
                    w.pid = 0

    def _cleanup(self) -> None:
        self.reloads.close()
        if self.table is not None:
            self.table.close()
        if self.plumbing is not None:
            self.plumbing.unlink()
        if self.counters is not None:
            self.counters.close()
            self.counters.unlink()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"appliance" in f.read()
    except OSError as e:
        return e.errno != errno.ENOENT


def serve(config: BrokerConfig) -> int:
    """Run a broker in this process until SIGTERM/SIGINT; returns the exit status."""
    setproctitle.setproctitle(f"appliance: supervisor [broker {config['broker.id']}]")
    return Supervisor(config).run()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve(BrokerConfig.load()))
