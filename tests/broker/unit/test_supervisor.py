"""The supervisor's decisions with fork, waitpid and kill replaced: no process is started."""

from __future__ import annotations

import os
import signal
import time
import types

import pytest

from appliance import supervisor as sup_mod
from appliance.process.exit_codes import EXIT_BOOT_ERROR
from appliance.shm.layout import WorkerState
from appliance.supervisor import CLUSTER, DISK, NETWORK, HaltServer, Supervisor, _Worker


def _exited(code: int) -> int:
    return code << 8  # a wait status for exit(code)


class FakeProcesses:
    """Pids handed out by ``fork``; ``kill`` records every signal, and a process "exits" on
    TERM/QUIT/KILL (unless stubborn: then only on KILL; unkillable: never, as in uninterruptible
    I/O); ``waitpid`` reports the exits."""

    def __init__(self) -> None:
        self.next_pid = 1000
        self.alive: set[int] = set()
        self.stubborn: set[int] = set()
        self.unkillable: set[int] = set()
        self.signals: list[tuple[int, int]] = []
        self.exits: list[tuple[int, int]] = []

    def fork(self) -> int:
        self.next_pid += 1
        self.alive.add(self.next_pid)
        return self.next_pid

    def kill(self, pid: int, sig: int) -> None:
        if pid not in self.alive:
            raise ProcessLookupError(pid)
        self.signals.append((pid, sig))
        if pid in self.unkillable:
            return
        if sig == signal.SIGKILL or (sig in (signal.SIGTERM, signal.SIGQUIT) and pid not in self.stubborn):
            self.exit(pid, sig)  # a wait status for death by signal ``sig``

    def exit(self, pid: int, status: int) -> None:
        self.alive.discard(pid)
        self.exits.append((pid, status))

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        if self.exits:
            return self.exits.pop(0)
        if not self.alive:
            raise ChildProcessError
        return 0, 0


@pytest.fixture
def procs():
    return FakeProcesses()


@pytest.fixture
def sup(config, plumbing, procs, monkeypatch):
    monkeypatch.setattr(sup_mod, "freeze_before_fork", lambda: None)
    s = Supervisor(config)
    s.fork, s.waitpid, s.kill = procs.fork, procs.waitpid, procs.kill
    s.plumbing, s.table = plumbing
    s._wake_r, s._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    s.workers = [_Worker(DISK, d, s.plumbing.disk_slot(d)) for d in range(2)]
    s.workers += [_Worker(NETWORK, n, s.plumbing.net_slot(n)) for n in range(2)]
    for w in s.workers:
        s._spawn(w)
    yield s
    os.close(s._wake_r)
    os.close(s._wake_w)


def _worker(s: Supervisor, kind: int, index: int = 0) -> _Worker:
    return next(w for w in s.workers if w.kind == kind and w.index == index)


def _ready(s: Supervisor) -> None:
    for w in s.workers:
        s.table.set_worker_state(w.slot, WorkerState.READY)


def _chld(s: Supervisor) -> None:
    s._sig_queue.append(signal.SIGCHLD)


def test_spawn_records_the_worker_as_starting(sup, procs):
    assert sorted(w.pid for w in sup.workers) == sorted(procs.alive)
    for w in sup.workers:
        pid, _, state, _, incarnation = sup.table.worker(w.slot)
        assert (pid, state, incarnation) == (w.pid, WorkerState.STARTING, 1)


@pytest.mark.parametrize("kind", [DISK, NETWORK])
def test_a_crashed_worker_is_respawned_with_a_new_incarnation(sup, procs, kind):
    _ready(sup)
    w = _worker(sup, kind, 1)
    old = w.pid
    procs.exit(old, _exited(1))
    _chld(sup)
    w.started -= 2  # past the one-second back-off
    assert sup.tick()
    assert w.pid not in (0, old) and w.pid in procs.alive
    _, _, state, _, incarnation = sup.table.worker(w.slot)
    assert (state, incarnation, w.incarnation) == (WorkerState.STARTING, 2, 2)
    assert [x for x in sup.workers if x is not w and x.pid == 0] == []


def test_a_worker_that_dies_at_once_waits_for_the_back_off(sup, procs):
    w = _worker(sup, NETWORK)
    procs.exit(w.pid, _exited(1))
    _chld(sup)
    assert sup.tick()
    assert w.pid == 0  # started < 1 s ago: not yet
    w.started -= 2
    assert sup.tick()
    assert w.pid in procs.alive


@pytest.mark.parametrize("kind", [DISK, NETWORK])
def test_a_boot_error_of_any_worker_halts_with_exit_3(sup, procs, kind):
    w = _worker(sup, kind)
    procs.exit(w.pid, _exited(EXIT_BOOT_ERROR))
    _chld(sup)
    with pytest.raises(HaltServer) as e:
        sup.tick()
    assert e.value.exit_status == EXIT_BOOT_ERROR
    assert w.pid == 0 and sup.table.worker(w.slot)[2] == WorkerState.DEAD


def test_a_boot_error_during_start_up_halts_the_wait_for_ready(sup, procs):
    for w in sup.workers:
        if w.kind == DISK:
            sup.table.set_worker_state(w.slot, WorkerState.READY)
    sup._wait_ready(DISK)  # returns: every disk is READY
    procs.exit(_worker(sup, NETWORK, 1).pid, _exited(EXIT_BOOT_ERROR))
    _chld(sup)
    with pytest.raises(HaltServer) as e:
        sup._wait_ready(NETWORK)
    assert e.value.exit_status == EXIT_BOOT_ERROR


def test_a_worker_that_crashes_while_starting_is_respawned_by_the_wait_for_ready(sup, procs):
    net = [w for w in sup.workers if w.kind == NETWORK]
    old = net[0].pid
    procs.exit(old, _exited(1))
    _chld(sup)
    net[0].started -= 2
    sup.table.set_worker_state(net[1].slot, WorkerState.READY)
    with pytest.raises(HaltServer):  # nothing ever turns READY here: ends at the deadline
        _wait_briefly(sup, NETWORK)
    assert net[0].pid not in (0, old) and net[0].pid in procs.alive
    assert all(w.pid in procs.alive for w in sup.workers if w.kind == DISK)


def _wait_briefly(sup, kind):
    """_wait_ready with a deadline of a fraction of a second."""
    deadlines = dict(sup_mod.STARTING_DEADLINE_S)
    sup_mod.STARTING_DEADLINE_S[kind] = 0.3
    try:
        sup._wait_ready(kind)
    finally:
        sup_mod.STARTING_DEADLINE_S.update(deadlines)


@pytest.mark.parametrize("kind", [DISK, NETWORK])
def test_a_worker_stuck_starting_gets_sigabrt_then_sigkill(sup, procs, kind):
    w = _worker(sup, kind)
    procs.stubborn.add(w.pid)
    assert sup.tick()
    assert procs.signals == []  # within its deadline
    w.started -= sup_mod.STARTING_DEADLINE_S[kind] + 1
    w.beat_changed -= sup_mod.STARTING_DEADLINE_S[kind] + 1  # and no stamp since
    assert sup.tick()
    assert procs.signals == [(w.pid, signal.SIGABRT)]
    assert sup.tick()
    assert procs.signals == [(w.pid, signal.SIGABRT)]  # within the grace period
    w.aborted -= sup_mod.ABORT_GRACE_S + 1
    assert sup.tick()
    assert procs.signals == [(w.pid, signal.SIGABRT), (w.pid, signal.SIGKILL)]
    _chld(sup)
    w.started -= 2
    old = w.pid
    assert sup.tick()  # reaped and respawned
    assert w.pid not in (0, old) and w.aborted == 0


def test_a_starting_worker_that_stamps_progress_outlives_the_deadline(sup, procs):
    """A disk worker loading thousands of partitions stamps its heartbeat as it goes: the
    start-up deadline counts from its last stamp, not from its start."""
    w = _worker(sup, DISK)
    w.started -= sup_mod.STARTING_DEADLINE_S[DISK] + 1
    w.beat_changed = w.started
    sup.table.heartbeat(w.slot)  # progress
    assert sup.tick()
    assert procs.signals == []
    w.beat_changed -= sup_mod.STARTING_DEADLINE_S[DISK] + 1  # then silence past the deadline
    assert sup.tick()
    assert procs.signals == [(w.pid, signal.SIGABRT)]


def test_the_wait_for_ready_lasts_while_a_worker_stamps_progress(sup, procs):
    disk = [w for w in sup.workers if w.kind == DISK]
    deadlines = dict(sup_mod.STARTING_DEADLINE_S)
    sup_mod.STARTING_DEADLINE_S[DISK] = 0.3
    stamps = [0]

    def sleep_and_stamp(s: float) -> None:  # the disk workers load for 1 s, stamping, then READY
        time.sleep(0.02)
        stamps[0] += 1
        for w in disk:
            sup.table.heartbeat(w.slot)
            if stamps[0] >= 50:
                sup.table.set_worker_state(w.slot, WorkerState.READY)

    sup._sleep = sleep_and_stamp
    try:
        t0 = time.monotonic()
        sup._wait_ready(DISK)  # no HaltServer: they kept stamping past the 0.3 s deadline
        assert time.monotonic() - t0 > 0.6
    finally:
        sup_mod.STARTING_DEADLINE_S.update(deadlines)


def test_a_silent_ready_worker_gets_sigabrt(sup, procs, monkeypatch):
    _ready(sup)
    assert sup.tick()
    assert procs.signals == []
    later = time.monotonic() + sup_mod.HEARTBEAT_TIMEOUT_S + 1
    monkeypatch.setattr(sup_mod, "time", types.SimpleNamespace(monotonic=lambda: later, sleep=time.sleep))
    for w in sup.workers[1:]:  # every worker but the first stamps a fresh heartbeat
        sup.table.heartbeat(w.slot)
    monkeypatch.setattr(sup.table, "worker", _beats_at(sup.table.worker, sup.workers[0].slot, later))
    assert sup.tick()
    assert procs.signals == [(sup.workers[0].pid, signal.SIGABRT)]


def test_a_heartbeat_stamp_overwritten_with_zero_does_not_kill_a_live_worker(sup, procs, monkeypatch):
    """Issue 14: the fuzzer once made a disk worker's stamp read 0.0 ("missed heartbeats for
    <uptime> s") and the supervisor killed a live worker. A stamp that keeps changing is a
    live worker, whatever its value; one that stops changing for the timeout is not."""
    _ready(sup)
    assert sup.tick()
    victim = sup.workers[0]
    clock = [time.monotonic()]
    monkeypatch.setattr(sup_mod, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=time.sleep))
    real = sup.table.worker
    stamps = iter([0.0] + [clock[0] + k for k in range(1, 100)])

    def read(slot):
        pid, beat, state, kind, inc = real(slot)
        if slot == victim.slot:
            return pid, next(stamps), state, kind, inc
        return pid, clock[0], state, kind, inc
    monkeypatch.setattr(sup.table, "worker", read)
    for _ in range(3):  # the zeroed stamp, then a worker that keeps stamping
        clock[0] += sup_mod.HEARTBEAT_TIMEOUT_S / 2
        assert sup.tick()
    assert procs.signals == []
    frozen = 12345.0  # now it stops changing: silent past the timeout
    monkeypatch.setattr(sup.table, "worker", lambda slot: (*real(slot)[:1], frozen if slot == victim.slot
                                                           else clock[0], *real(slot)[2:]))
    assert sup.tick()
    clock[0] += sup_mod.HEARTBEAT_TIMEOUT_S + 1
    assert sup.tick()
    assert procs.signals == [(victim.pid, signal.SIGABRT)]


def _beats_at(worker, stale_slot, now):
    """table.worker with every heartbeat as fresh as ``now`` but ``stale_slot``'s."""
    def read(slot):
        pid, beat, state, kind, inc = worker(slot)
        return pid, (beat if slot == stale_slot else now), state, kind, inc
    return read


def test_stop_stops_network_workers_before_disk_workers(sup, procs):
    _ready(sup)
    kind_of = {w.pid: w.kind for w in sup.workers}
    sup._sig_queue.append(signal.SIGTERM)
    assert not sup.tick()
    assert [(kind_of[pid], sig) for pid, sig in procs.signals] == \
        [(NETWORK, signal.SIGTERM)] * 2 + [(DISK, signal.SIGTERM)] * 2
    assert all(w.pid == 0 for w in sup.workers) and not procs.alive


def test_a_worker_that_ignores_sigterm_gets_sigkill(sup, procs, monkeypatch):
    monkeypatch.setattr(sup_mod, "STOP_BY_S", {CLUSTER: 0.1, NETWORK: 0.1, DISK: 0.1})
    disk = _worker(sup, DISK)
    procs.stubborn.add(disk.pid)
    pid = disk.pid
    sup.handle_term()
    assert (pid, signal.SIGTERM) in procs.signals and procs.signals[-1] == (pid, signal.SIGKILL)
    assert not procs.alive


def test_each_kind_is_killed_at_its_mark_of_one_stop_deadline(sup, procs, monkeypatch):
    """The marks count from the SIGTERM, not from each kind's turn: network workers stuck on a
    dead peer do not push the disk workers' SIGKILL later, and a worker SIGKILL cannot end
    (uninterruptible I/O) does not hold the stop: the shared memory is still unlinked."""
    monkeypatch.setattr(sup_mod, "STOP_BY_S", {CLUSTER: 0.2, NETWORK: 0.4, DISK: 0.6})
    monkeypatch.setattr(sup_mod, "KILL_REAP_S", 0.2)
    net, disk = _worker(sup, NETWORK, 0), _worker(sup, DISK, 1)
    net_pid, disk_pid = net.pid, disk.pid
    procs.stubborn.update((net_pid, disk_pid))
    procs.unkillable.add(net_pid)
    t0 = time.monotonic()
    sup.handle_term()
    took = time.monotonic() - t0
    # network: SIGKILL at 0.4 s, given up on at 0.6 s; disk: SIGKILL at 0.6 s (its mark), gone
    assert 0.6 <= took < 1.5, took
    assert procs.signals.count((net_pid, signal.SIGKILL)) == 1
    assert procs.signals[-1] == (disk_pid, signal.SIGKILL)
    assert all(w.pid == 0 for w in sup.workers)
    assert procs.alive == {net_pid}  # the unkillable one, left behind


_child_delay = [0.0]  # seconds a forked child of this process sleeps before anything else


def _delay_children(seconds: float) -> None:
    if not hasattr(_delay_children, "registered"):
        os.register_at_fork(after_in_child=lambda: _child_delay[0] and time.sleep(_child_delay[0]))
        _delay_children.registered = True
    _child_delay[0] = seconds


def test_a_sigterm_right_after_a_spawn_ends_the_worker(config, plumbing, monkeypatch):
    """A real fork. The child runs late (a loaded machine: here a sleep in an at-fork hook) and a
    SIGTERM reaches it before it has reset the supervisor's handlers. It used to run them: the
    signal went on the child's copy of the queue and was lost, and the worker ran on until the
    stop's SIGKILL (test_before_join's broker took over 30 s to stop). Blocked across the fork,
    it ends the worker as soon as its default disposition is back."""
    monkeypatch.setattr(sup_mod, "freeze_before_fork", lambda: None)
    monkeypatch.setattr(Supervisor, "_worker_main", lambda self, w: (time.sleep(5), 0)[1])
    s = Supervisor(config)
    s.plumbing, s.table = plumbing
    saved = {sig: signal.getsignal(sig) for sig in Supervisor.SIGNALS}
    s._install_signals()
    w = _Worker(NETWORK, 0, plumbing[0].net_slot(0))
    try:
        _delay_children(0.5)
        s._spawn(w)
        _delay_children(0.0)
        os.kill(w.pid, signal.SIGTERM)  # the child still sleeps in its at-fork hook
        t0 = time.monotonic()
        _, status = os.waitpid(w.pid, 0)
        took = time.monotonic() - t0
    finally:
        _delay_children(0.0)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        os.close(s._wake_r)
        os.close(s._wake_w)
        s.reloads.close()
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    assert took < 3.0


def test_sigquit_stops_at_once_with_sigquit(sup, procs):
    sup._sig_queue.append(signal.SIGQUIT)
    assert not sup.tick()
    assert {sig for _, sig in procs.signals} == {signal.SIGQUIT}


def test_every_handled_signal_has_its_method():
    for sig, name in Supervisor.SIGNAL_NAMES.items():
        assert callable(getattr(Supervisor, "handle_" + name)), sig
    assert Supervisor.SIGNAL_NAMES[signal.SIGHUP] == "hup"


def test_sighup_is_forwarded_to_the_disk_workers_between_reloading_and_ready(sup, procs,
                                                                             monkeypatch, caplog):
    """READY=1 only once every disk worker has confirmed its reload (a confirmation from an
    earlier incarnation counts for nothing); a file a worker kept is logged naming it."""
    _ready(sup)
    told: list[str] = []
    monkeypatch.setattr(sup_mod, "sd_notify", told.append)
    kind_of = {w.pid: w.kind for w in sup.workers}
    before = time.monotonic_ns() // 1000
    sup._sig_queue.append(signal.SIGHUP)
    assert sup.tick()  # still running
    assert sorted((kind_of[pid], sig) for pid, sig in procs.signals) == [(DISK, signal.SIGHUP)] * 2
    first, usec = told[0].split("\n")
    assert first == "RELOADING=1"
    assert usec.startswith("MONOTONIC_USEC=") and int(usec.split("=")[1]) >= before
    assert "READY=1" not in told  # nobody confirmed yet
    disk0, disk1 = _worker(sup, DISK, 0), _worker(sup, DISK, 1)
    sup.reloads.reply_to.send(f"0 {disk0.incarnation + 7}".encode())  # a stale incarnation
    sup.reloads.reply_to.send(f"1 {disk1.incarnation}\nx/topic.properties: retention.ms='abc'".encode())
    assert sup.tick() and "READY=1" not in told
    assert "disk worker 1" in caplog.text and "retention.ms='abc'" in caplog.text
    sup.reloads.reply_to.send(f"0 {disk0.incarnation}".encode())
    assert sup.tick()
    assert [m for m in told if m != "WATCHDOG=1"][-1] == "READY=1"
    assert len(procs.alive) == 4  # nothing stopped


def test_a_reload_unconfirmed_at_its_deadline_still_ends_in_ready(sup, monkeypatch, caplog):
    _ready(sup)
    told: list[str] = []
    monkeypatch.setattr(sup_mod, "sd_notify", told.append)
    sup._sig_queue.append(signal.SIGHUP)
    assert sup.tick() and "READY=1" not in told
    sup.reloads.reply_to.send(f"1 {_worker(sup, DISK, 1).incarnation}".encode())
    sup.reloads.deadline = 0.0  # as if RELOAD_DEADLINE_S had passed
    assert sup.tick()
    assert "READY=1" in told
    assert "no reload confirmation from disk workers 0" in caplog.text
