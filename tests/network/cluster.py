"""Three brokers and a three-server ZooKeeper ensemble, each on its own test host, a client host
running the idempotent acks=all producer (tests/network/producer.py) and a group's offset
commits (tests/network/committer.py), the nemeses, and the checks made after each heal. Shared by tests/network/test_nemeses.py and scripts/nemesis_run.py.

After every heal (:meth:`NetCluster.check`): the stream is paused and flushed; every broker must
be back in every partition's ISR (ZooKeeper's partition state) within ``ISR_BACK_S``; every
acknowledged record must be in the log once, at the offset it was acknowledged with, in its
partition's order; no offset may have been acknowledged twice; and the three replicas of every
partition must hold the same bytes (the stream paused, the high watermark is each log's end);
and every partition's committed group offset must be at least its last acknowledged commit."""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.cluster.harness import kill_brokers, log_bytes, start_brokers, wait_for
from tests.network.hosts import Host, Network
from tests.network.producer import parse_value
from tests.network.zk_ensemble import CLIENT_PORT, Ensemble
from tests.partition_reader import read_partition

__all__ = ["NetBroker", "NetCluster", "Report", "NEMESES", "SUITE_NEMESES", "TOPIC", "ISR_BACK_S"]

TOPIC = "nemesis"
PARTITIONS = 6
BROKERS = 3
PORT = 9092
REPLICATION_PORT = 9093  # the inter-broker listener
RELAY_PORT = 9094  # relay.py in the same host, forwarding to REPLICATION_PORT
ISR_BACK_S = 30.0  # after a heal, every broker in every ISR again within this
CHROOT = "/nemesis"
GROUP = "nemesis-offsets"  # the group committer.py commits for


class NetBroker(BrokerProcess):
    """A BrokerProcess inside a test host: it listens on (and advertises) the host's address,
    and its shared memory name names the run and broker (namespaces share /dev/shm)."""

    def __init__(self, workdir: Path, host: Host, broker_id: int, run_id: int, connect: str,
                 overrides: dict[str, str] | None = None) -> None:
        self.host = host
        self.broker_id = broker_id
        workdir.mkdir(parents=True, exist_ok=True)
        a = host.address
        super().__init__(workdir, port=PORT, overrides={
            # the inter-broker listener is advertised at the host's delaying relay (relay.py)
            "listeners": f"PLAINTEXT://{a}:{PORT},REPLICATION://{a}:{REPLICATION_PORT}",
            "advertised.listeners": f"PLAINTEXT://{a}:{PORT},REPLICATION://{a}:{RELAY_PORT}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION",
            "appliance.shm.name": f"appliance-apn{run_id}-b{broker_id}",
            "zookeeper.connect": connect, "broker.id": str(broker_id),
            "num.network.threads": "1",
            "zookeeper.session.timeout.ms": "6000",
            # a request into a cut link is given up and sent again within seconds
            "replica.lag.time.max.ms": "6000", "replica.socket.timeout.ms": "5000",
            "controller.socket.timeout.ms": "5000",
            "offsets.topic.num.partitions": "3",
            **(overrides or {})})

    @property
    def bootstrap(self) -> str:
        return f"{self.host.address}:{self.port}"

    def command(self) -> list[str]:
        return self.host.command(super().command())

    @property
    def listen_host(self) -> str:
        return self.host.address


@dataclass
class Report:
    faults: Counter = field(default_factory=Counter)
    acked: int = 0
    failed: int = 0  # delivery errors: never acknowledged, allowed to be absent
    lost: int = 0  # acknowledged and missing (or another record at its offset)
    duplicates: int = 0  # a record in the log twice
    offsets_twice: int = 0  # one offset acknowledged for two records
    commits: int = 0  # group offset commits acknowledged (committer.py)
    offsets_rewound: int = 0  # a committed group offset found below its acknowledged commit
    # ... but equal to an indeterminate commit: one with a request that timed out (reported
    # failed, or acknowledged through librdkafka's retry on a new connection). Its first copy
    # may still be on its way: the client closed the old connection, but TCP retransmits the
    # request after a heal, the broker reads it for the first time, and it wins over later
    # commits — as on Kafka (nothing orders requests across connections; a standalone commit,
    # generation -1, is fenced by nothing). Jepsen's "info" operation. Counted, not a problem:
    # seen with the client cut from the coordinator, the late copy appended to the log after
    # the newer commits (tests/network/committer.py).
    indeterminate_commits_applied_late: int = 0
    recover_s: list[float] = field(default_factory=list)  # heal (restarts included) -> every broker in every ISR
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        rec = sorted(self.recover_s)
        r = (f"recovery median {rec[len(rec) // 2]:.1f} s, max {rec[-1]:.1f} s" if rec else "no recovery")
        return (f"faults {dict(self.faults)}; acknowledged {self.acked}, failed {self.failed}, "
                f"lost {self.lost}, duplicates {self.duplicates}, offsets acknowledged twice "
                f"{self.offsets_twice}; group offset commits acknowledged {self.commits}, lost or "
                f"rewound {self.offsets_rewound}, indeterminate commits applied late "
                f"{self.indeterminate_commits_applied_late}; {r}; problems {len(self.problems)}")


class _ClientProcess:
    """A client process of the client host (``python -m <module>``) that takes commands on
    stdin and reports on stdout, one line each; :meth:`_line` takes each report's fields."""

    def __init__(self, host: Host, module: str, args: list[str], workdir: Path, name: str) -> None:
        self.lock = threading.Lock()  # held around _line
        self.stderr = open(workdir / f"{name}.err", "ab")
        self.proc = subprocess.Popen(
            host.command([sys.executable, "-m", module, *args]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            start_new_session=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            f = line.split(maxsplit=3)
            if f:
                with self.lock:
                    self._line(f)

    def _line(self, f: list[str]) -> None:
        raise NotImplementedError

    def _send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def resume(self) -> None:
        self._send("resume")

    def close(self) -> None:
        try:
            self._send("stop")
            self.proc.wait(40)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        self.stderr.close()


class _Stream(_ClientProcess):
    """The producer process (producer.py) in the client host and what it reported."""

    def __init__(self, host: Host, bootstrap: str, workdir: Path) -> None:
        self.acked: dict[tuple[int, int], int] = {}  # (partition, offset) -> seq
        self.unplaced: set[tuple[int, int]] = set()  # (partition, seq) acknowledged with no offset
        self.failed: set[tuple[int, int]] = set()
        self.twice: list[tuple[int, int]] = []
        self._paused = threading.Event()
        self._paused_left = 0
        super().__init__(host, "tests.network.producer", ["--bootstrap", bootstrap, "--topic", TOPIC,
                                                          "--partitions", str(PARTITIONS)], workdir, "producer")

    def _line(self, f: list[str]) -> None:
        if f[0] == "a":
            key, seq = (int(f[1]), int(f[2])), int(f[3])
            if key in self.acked:
                self.twice.append(key)
            self.acked[key] = seq
        elif f[0] == "u":
            self.unplaced.add((int(f[1]), int(f[2])))
        elif f[0] == "f":
            self.failed.add((int(f[1]), int(f[2])))
        elif f[0] == "paused":
            self._paused_left = int(f[1])
            self._paused.set()

    def pause(self, timeout: float = 150.0) -> int:
        """Stop producing and wait for every delivery report; how many are still unreported."""
        self._paused.clear()
        self._send("pause")
        if not self._paused.wait(timeout):
            raise AssertionError(f"the producer did not flush within {timeout} s")
        return self._paused_left


class _Committer(_ClientProcess):
    """The group offsets client (committer.py) in the client host and what it reported."""

    def __init__(self, host: Host, bootstrap: str, workdir: Path) -> None:
        self.acked = [0] * PARTITIONS  # the last acknowledged commit of each partition
        self.tried = [0] * PARTITIONS  # the last commit tried
        self.failed = 0
        # commits with a request that timed out: failed, or acknowledged after a retry
        self.indeterminate: list[set[int]] = [set() for _ in range(PARTITIONS)]
        self._paused = threading.Event()
        super().__init__(host, "tests.network.committer", ["--bootstrap", bootstrap, "--group", GROUP,
                                                           "--topic", TOPIC, "--partitions", str(PARTITIONS)],
                         workdir, "committer")

    def _line(self, f: list[str]) -> None:
        if f[0] == "t":
            self.tried[int(f[1])] = int(f[2])
        elif f[0] == "c":
            self.acked[int(f[1])] = int(f[2])
        elif f[0] == "f":
            self.failed += 1  # its "i" line came first
        elif f[0] == "i":
            self.indeterminate[int(f[1])].add(int(f[2]))
        elif f[0] == "paused":
            self._paused.set()

    def pause(self, timeout: float = 60.0) -> bool:
        """Let the commit in flight finish and start no other; False if it did not in time."""
        self._paused.clear()
        self._send("pause")
        return self._paused.wait(timeout)


class _Relay:
    """The delaying relay (relay.py) of one broker's host, in front of its inter-broker
    listener; it outlives the broker's restarts."""

    def __init__(self, host: Host) -> None:
        self.proc = subprocess.Popen(
            host.command([sys.executable, "-m", "tests.network.relay", "--listen", f"{host.address}:{RELAY_PORT}",
                          "--to", f"{host.address}:{REPLICATION_PORT}"]),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        if self.proc.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the relay in {host.name} did not start (exit {self.proc.poll()})")

    def delay(self, ms: float, jitter_ms: float) -> None:
        self.proc.stdin.write(f"delay {ms} {jitter_ms}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _isolate(c: NetCluster, victim: int) -> str:
    c.net.isolate(f"b{victim}")
    return f"broker {victim} isolated"


def nemesis_leader(c: NetCluster) -> str:
    """The leader of a partition cut off from every host (brokers, ZooKeeper, the client)."""
    return "leader: " + _isolate(c, c.leader(c.rng.randrange(PARTITIONS)))


def nemesis_follower(c: NetCluster) -> str:
    """A broker that is neither the controller nor partition 0's leader, cut off."""
    p0, ctl = c.leader(0), c.controller()
    choice = [b for b in c.brokers if b not in (p0, ctl)] or [b for b in c.brokers if b != p0]
    return "follower: " + _isolate(c, c.rng.choice(choice))


def nemesis_controller(c: NetCluster) -> str:
    return "controller: " + _isolate(c, c.controller())


def nemesis_one_way(c: NetCluster) -> str:
    """A leader keeps ZooKeeper and the client but hears nothing from the other brokers (its
    followers' fetches and the controller's requests are lost; its own packets go out)."""
    victim = c.leader(c.rng.randrange(PARTITIONS))
    others = [f"b{b}" for b in c.brokers if b != victim]
    c.net.partition(others, [f"b{victim}"], one_way=True)
    return f"one-way: brokers {others} -> b{victim} cut"


def nemesis_loss(c: NetCluster, percent: int = 10) -> str:
    c.net.loss([f"b{b}" for b in c.brokers], percent)
    return f"loss: {percent} % between brokers"


def nemesis_leader_split(c: NetCluster) -> str:
    """A leader cut off from the other brokers and ZooKeeper while the client still reaches it:
    it cannot shrink its ISR (a ZooKeeper write), so nothing it appends is acknowledged, and the
    controller elects another leader; after the heal it truncates what it appended alone."""
    victim = c.leader(c.rng.randrange(PARTITIONS))
    rest = [n for n in c.net.hosts if n not in (f"b{victim}", "client")]
    c.net.partition([f"b{victim}"], rest)
    return f"leader split: b{victim} cut from brokers and ZooKeeper, not from the client"


def nemesis_client_loss(c: NetCluster, percent: int = 10) -> str:
    """The client host's own link lossy both ways (its produce requests, the answers, the
    group's commits): librdkafka retries, and an idempotent retry is never stored twice."""
    brokers = [f"b{b}" for b in c.brokers]
    c.net.loss(["client"], percent, peers=brokers)
    for b in brokers:
        c.net.loss([b], percent, peers=["client"])
    return f"client loss: {percent} % each way between the client and every broker"


def nemesis_client_cut(c: NetCluster) -> str:
    """The client cut off from one partition leader only; the brokers still reach each other
    and ZooKeeper, so nothing moves: that leader's partitions wait in the producer (their
    records acknowledged after the heal) while the others' flow through the other brokers."""
    victim = c.leader(c.rng.randrange(PARTITIONS))
    c.net.partition(["client"], [f"b{victim}"])
    return f"client cut: the client cannot reach b{victim}"


def nemesis_delay(c: NetCluster, ms: float = 100, jitter_ms: float = 50) -> str:
    """Every inter-broker connection slowed: each chunk held ``ms`` +- ``jitter_ms`` in the
    relay of the broker it goes to or comes from (replica fetches, controller requests)."""
    for r in c.relays.values():
        r.delay(ms, jitter_ms)
    c.on_heal(lambda: [r.delay(0, 0) for r in c.relays.values()])
    return f"delay: {ms} +- {jitter_ms} ms on inter-broker connections"


def nemesis_zk_host(c: NetCluster) -> str:
    """The ZooKeeper leader cut off: the two others elect a leader and serve on. A broker whose
    connection was to the lost host may lose its session too: kazoo (like ZooKeeper's Java
    client) notices the silence after 2/3 of the session timeout and gives a host 1/3 of it to
    connect, so trying the cut-off host again first uses up the session exactly; the broker then
    registers again, which the checks after the heal cover."""
    leader = c.ensemble.leader() or 1
    c.net.isolate(f"z{leader}")
    others = [i for i in c.ensemble.servers if i != leader]
    wait_for(lambda: all(c.ensemble.servers[i].answers() for i in others), 20,
             f"ZooKeeper servers {others} serving without server {leader}")
    return f"zk: server {leader} isolated, {others} serve on"


def nemesis_zk_kill(c: NetCluster) -> str:
    """One ZooKeeper server killed (the leader half of the time); started again at the heal.
    Its clients' connections are refused at once, so they move to another server within their
    sessions: no broker registers again."""
    myid = c.ensemble.leader() if c.rng.random() < 0.5 else c.rng.randrange(1, 4)
    myid = myid or 1
    before = c.sessions()
    c.ensemble.servers[myid].kill()
    c.on_heal(lambda: c.ensemble.restart(myid))
    c.after_heal(lambda: c.expect(c.sessions() == before,
                                  f"a broker lost its session to one killed ZooKeeper server: {before} -> {c.sessions()}"))
    return f"zk kill: server {myid}"


def nemesis_zk_minority(c: NetCluster) -> str:
    """A broker and one ZooKeeper follower on the minority side: that server stops serving (no
    quorum), and the broker's session expires on the majority's side — its registration goes
    while the fault lasts, and it registers again with a new session after the heal; the other
    brokers keep theirs. The server is a follower: with the leader cut off, the majority elects
    a new one, which starts every session's timeout afresh (ZooKeeper's rule), and the session
    would outlast a short fault."""
    victim = c.rng.choice(sorted(c.brokers))
    leader = c.ensemble.leader()
    zk = c.rng.choice([i for i in c.ensemble.servers if i != leader])
    before = c.sessions()
    # a majority broker whose session is on the cut-off server may lose it for good reason
    # (kazoo's reconnect timing, as in the zk-host nemesis): only the others must keep theirs
    address = c.net[f"z{zk}"].address
    on_cut_server = {b for b in c.brokers if b != victim and address in c.net[f"b{b}"].run(
        "ss", "-tnH", "state", "established", f"( dport = :{CLIENT_PORT} )").stdout}
    minority = [f"b{victim}", f"z{zk}"]
    majority = [n for n in c.net.hosts if n not in minority]
    c.net.partition(minority, majority)
    def gone() -> bool:
        try:
            return str(victim) not in c.zk.get_children("/brokers/ids")
        except Exception:  # noqa: BLE001 - the harness's own session moving to the majority
            return False
    try:
        wait_for(gone, 30, f"broker {victim}'s registration to go with its session")
    except AssertionError as e:
        c.expect(False, str(e))

    def check() -> None:
        now = c.sessions()
        c.expect(now.get(victim) not in (None, before.get(victim)),
                 f"broker {victim} kept session {before.get(victim)} on the minority side")
        c.expect(all(now.get(b) == before.get(b) for b in before if b != victim and b not in on_cut_server),
                 f"a majority broker lost its session: {before} -> {now} (on the cut-off server: "
                 f"{sorted(on_cut_server)})")
    c.after_heal(check)
    return f"minority: b{victim} + z{zk} (a follower) cut from the rest"


def nemesis_sigkill(c: NetCluster) -> str:
    """A broker's whole process group SIGKILLed; started again at the heal."""
    victim = c.rng.choice(sorted(c.brokers))
    c.brokers[victim].kill()
    c.on_heal(lambda: c.restart_broker(victim))
    return f"sigkill: broker {victim}"


def nemesis_sigstop(c: NetCluster) -> str:
    """A broker's whole process group stopped (a long GC pause, a frozen VM); continued at the
    heal, by then its session has expired and its partitions have other leaders."""
    victim = c.rng.choice(sorted(c.brokers))
    pgid = c.brokers[victim].proc.pid
    os.killpg(pgid, signal.SIGSTOP)
    c.on_heal(lambda: os.killpg(pgid, signal.SIGCONT))
    return f"sigstop: broker {victim}"


NEMESES: dict[str, Callable[[NetCluster], str]] = {
    "leader": nemesis_leader, "follower": nemesis_follower, "controller": nemesis_controller,
    "one-way": nemesis_one_way, "loss": nemesis_loss, "delay": nemesis_delay, "zk-host": nemesis_zk_host,
    "zk-minority": nemesis_zk_minority, "leader-split": nemesis_leader_split,
    "sigkill": nemesis_sigkill, "sigstop": nemesis_sigstop, "zk-kill": nemesis_zk_kill,
    "client-loss": nemesis_client_loss, "client-cut": nemesis_client_cut,
}
# the nemeses of tests/network/test_nemeses.py (the script draws from all of NEMESES)
SUITE_NEMESES = ("leader", "follower", "controller", "one-way", "loss", "delay", "zk-host",
                   "zk-minority", "leader-split", "zk-kill", "client-loss", "client-cut")


class NetCluster:
    """The hosts, the ensemble, the brokers, the topic and the stream (see the module
    docstring). :meth:`close` removes everything, whatever failed."""

    def __init__(self, workdir: Path, seed: int = 1, log: Callable[[str], None] = print,
                 stream: bool = True) -> None:
        self.workdir = Path(workdir)
        self.streaming = stream  # False: no producer runs (perf/bench_net_delay.py brings its own)
        self.rng = random.Random(seed)
        self.log = log
        self.report = Report()
        self.verified = [0] * PARTITIONS
        self.seen: set[tuple[int, int]] = set()
        self.stream: _Stream | None = None
        self.committer: _Committer | None = None
        self.brokers: dict[int, NetBroker] = {}
        self.relays: dict[int, _Relay] = {}
        self.ensemble: Ensemble | None = None
        self.zk = None
        self._on_heal: list[Callable[[], None]] = []  # undo the process faults
        self._after_heal: list[Callable[[], None]] = []  # a nemesis's own checks
        self._round = ""
        self.net = Network([f"b{i}" for i in range(BROKERS)] + ["z1", "z2", "z3", "client"])

    # -- set-up and tear-down -------------------------------------------------------------
    def start(self) -> NetCluster:
        try:
            self.ensemble = Ensemble(self.workdir, [self.net["z1"], self.net["z2"], self.net["z3"]]).start()
            self.connect = self.ensemble.connect + CHROOT
            self.relays = {i: _Relay(self.net[f"b{i}"]) for i in range(BROKERS)}
            self.brokers = {i: self._broker(i) for i in range(BROKERS)}
            start_brokers(self.brokers.values(), timeout=120)
            from kazoo.client import KazooClient

            self.zk = KazooClient(hosts=self.connect, timeout=10)
            self.zk.start(30)
            wait_for(lambda: len(self.registered()) == BROKERS, 60, "three brokers registered")
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, BROKERS, config={"min.insync.replicas": "2"})])[
                TOPIC].result(60)
            del admin  # no client of this process may outlive the network (see close)
            self.wait_isr_full(60)
            if self.streaming:
                self.stream = _Stream(self.net["client"], self.bootstrap, self.workdir)
                self.committer = _Committer(self.net["client"], self.bootstrap, self.workdir)
        except BaseException:
            self.close()
            raise
        return self

    def _broker(self, i: int) -> NetBroker:
        return NetBroker(self.workdir / f"b{i}", self.net[f"b{i}"], i, self.net.run_id, self.connect)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def close(self) -> None:
        """Stop everything, each step whatever the others did; a second call does nothing."""
        self._on_heal.clear()  # SIGKILL below ends stopped processes too
        stream, zk, self.stream, self.zk = self.stream, self.zk, None, None
        committer, self.committer = self.committer, None
        steps = [stream.close if stream else None, committer.close if committer else None,
                 (lambda: (zk.stop(), zk.close())) if zk else None,
                 (lambda: kill_brokers(self.brokers.values())) if self.brokers else None,
                 self.ensemble.kill if self.ensemble else None,
                 *(r.close for r in self.relays.values())]
        self.relays = {}
        for step in steps:
            if step is None:
                continue
            try:
                step()
            except Exception as e:  # noqa: BLE001 - the namespaces' clean-up below kills the rest
                self.log(f"close: {e!r}")
        # a librdkafka handle still alive once the bridge is gone would reconnect through the
        # default route, off the machine: every client of this process goes first
        gc.collect()
        self.net.close()
        for b in self.brokers.values():
            b.release_shm()

    # -- what the cluster looks like ------------------------------------------------------
    def _state(self, p: int) -> dict:
        return self._state_of(TOPIC, p)

    def _state_of(self, topic: str, p: int) -> dict:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
        return json.loads(data)

    def leader(self, p: int) -> int:
        return self._state(p)["leader"]

    def controller(self) -> int:
        return json.loads(self.zk.get("/controller")[0])["brokerid"]

    def registered(self) -> list[str]:
        try:
            return self.zk.get_children("/brokers/ids")
        except Exception:  # noqa: BLE001 - not yet made, or ZooKeeper reconnecting
            return []

    def isr_full(self) -> bool:
        try:
            return (len(self.registered()) == BROKERS
                    and all(len(self._state(p)["isr"]) == BROKERS for p in range(PARTITIONS)))
        except Exception:  # noqa: BLE001 - ZooKeeper reconnecting: ask again
            return False

    def isr_view(self) -> str:
        try:
            return ", ".join(f"p{p}: leader {s['leader']} isr {s['isr']}"
                             for p in range(PARTITIONS) for s in [self._state(p)])
        except Exception as e:  # noqa: BLE001
            return f"(ZooKeeper: {e})"

    def wait_isr_full(self, timeout: float) -> float:
        t0 = time.monotonic()
        wait_for(self.isr_full, timeout, f"every broker in every ISR ({self.isr_view()})", step=0.2)
        return time.monotonic() - t0

    def sessions(self) -> dict[int, int]:
        """broker id -> the ZooKeeper session holding its registration."""
        out = {}
        for b in self.zk.get_children("/brokers/ids"):
            out[int(b)] = self.zk.exists(f"/brokers/ids/{b}").ephemeralOwner
        return out

    # -- a round --------------------------------------------------------------------------
    def round(self, name: str, hold: float = 10.0) -> str:
        """Stream, apply nemesis ``name`` for ``hold`` seconds, heal, check. Returns what was done."""
        self.stream.resume()
        self.committer.resume()
        time.sleep(self.rng.uniform(1.0, 2.0))
        self._round = name
        what = NEMESES[name](self)
        self.log(f"  {what}")
        time.sleep(hold)
        self.heal_and_check(name)
        return what

    def on_heal(self, fn: Callable[[], None]) -> None:
        self._on_heal.append(fn)

    def after_heal(self, fn: Callable[[], None]) -> None:
        self._after_heal.append(fn)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.report.problems.append(f"{self._round}: {problem}")

    def restart_broker(self, i: int) -> None:
        old = self.brokers[i]
        old.kill()
        old._log.close()
        self.brokers[i] = self._broker(i)
        self.brokers[i].start(120)

    def heal_and_check(self, name: str) -> None:
        self._round = name
        healed_at = time.monotonic()  # recovery counts a killed process's restart too
        self.net.heal()
        undo, self._on_heal = self._on_heal, []
        for fn in undo:
            fn()
        self.report.faults[name] += 1
        try:
            self.wait_isr_full(ISR_BACK_S)
            self.report.recover_s.append(time.monotonic() - healed_at)
        except AssertionError as e:
            self.report.problems.append(f"{name}: {e}")
            self.wait_isr_full(120)  # checked as a problem; the checks below need a whole cluster
            self.report.recover_s.append(time.monotonic() - healed_at)
        checks, self._after_heal = self._after_heal, []
        for fn in checks:
            fn()
        self.check(name)

    def check(self, name: str = "") -> None:
        left = self.stream.pause()
        if left:
            self.report.problems.append(f"{name}: {left} deliveries unreported after the flush")
        self.verify(name)
        self.check_replicas(name)
        self.check_offsets(name)

    def check_offsets(self, name: str = "") -> None:
        """The committer paused: each partition's committed offset (OffsetFetch through any
        broker) is at least its last acknowledged commit (never lost or rewound) and at most its
        last try (nothing invented)."""
        if not self.committer.pause():
            self.report.problems.append(f"{name}: a group offset commit did not end within 60 s")
            return
        with self.committer.lock:
            acked, tried = list(self.committer.acked), list(self.committer.tried)
            indeterminate = [set(v) for v in self.committer.indeterminate]
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        try:
            got = {tp.partition: tp.offset for tp in
                   c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=60)}
        finally:
            c.close()
        rep = self.report
        rep.commits = sum(acked)
        for p in range(PARTITIONS):
            have = max(got.get(p, -1), 0)  # -1001: nothing committed yet
            if have < acked[p] and have in indeterminate[p] and have in self._last_logged_commits(p):
                # the broker answers what its log says last: the late copy was appended after
                # the newer commits (a stale answer, a zombie's memory, is not excused)
                rep.indeterminate_commits_applied_late += 1
            elif have < acked[p]:
                rep.offsets_rewound += 1
                rep.problems.append(f"{name}: group offset of p{p} is {have}, below its acknowledged commit {acked[p]}")
            elif have > tried[p]:
                rep.problems.append(f"{name}: group offset of p{p} is {have}, above any commit tried ({tried[p]})")

    def _last_logged_commits(self, p: int) -> set[int]:
        """The last offset committed for partition ``p`` of the group as each broker's copy of
        ``__consumer_offsets`` records it (read from the segment files)."""
        from appliance.coordinator.offsets_schema import OffsetKey, decode_key, decode_offset_value
        from appliance.records.batch import decode_batch, iter_batches

        last = set()
        for b in self.brokers.values():
            found = None
            for d in sorted(Path(b.log_dirs[0]).glob("__consumer_offsets-*")):
                for f in sorted(d.glob("*.log")):
                    data = f.read_bytes()
                    for pos, _ in iter_batches(data, allow_partial=True):
                        for r in decode_batch(data, pos)[1]:
                            if r.key is None or r.value is None:
                                continue
                            try:
                                k = decode_key(r.key)
                            except ValueError:
                                continue
                            if isinstance(k, OffsetKey) and (k.group, k.topic, k.partition) == (GROUP, TOPIC, p):
                                found = decode_offset_value(r.value).offset
            if found is not None:
                last.add(found)
        return last

    def verify(self, name: str = "") -> None:
        with self.stream.lock:
            acked = dict(self.stream.acked)
            unplaced = set(self.stream.unplaced)
            failed = set(self.stream.failed)
            twice, self.stream.twice[:] = list(self.stream.twice), []
        rep = self.report
        rep.acked, rep.failed = len(acked) + len(unplaced), len(failed)
        if twice:
            rep.offsets_twice += len(twice)
            rep.problems.append(f"{name}: offsets acknowledged twice: {twice[:5]}")
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "nemesis-verify",
                      "enable.auto.commit": False, "check.crcs": True, "enable.partition.eof": True,
                      "fetch.wait.max.ms": 50, "isolation.level": "read_uncommitted"})
        try:
            for p in range(PARTITIONS):
                end = max((o for (q, o) in acked if q == p), default=-1) + 1
                rows = self._read(c, p, self.verified[p], end)
                last = None
                for off, value in rows:
                    vp, seq = parse_value(value)
                    if (vp, seq) in self.seen:
                        rep.duplicates += 1
                        rep.problems.append(f"{name}: p{p}@{off}: {value!r} is in the log twice")
                    self.seen.add((vp, seq))
                    want = acked.get((p, off))
                    if want is not None and want != seq:
                        rep.lost += 1
                        rep.problems.append(f"{name}: p{p}@{off}: acknowledged seq {want}, stored {value!r}")
                    if vp != p or (last is not None and seq <= last):
                        rep.problems.append(f"{name}: p{p}@{off}: {value!r} out of order after seq {last}")
                    last = seq
                stored = {off for off, _ in rows}
                missing = sorted(o for (q, o) in acked if q == p and o >= self.verified[p] and o not in stored)
                if missing:
                    rep.lost += len(missing)
                    rep.problems.append(f"{name}: p{p}: {len(missing)} acknowledged offsets missing, e.g. {missing[:5]}")
                if rows:
                    self.verified[p] = rows[-1][0] + 1
        finally:
            c.close()
        gone = [k for k in unplaced if k not in self.seen]
        if gone:
            rep.lost += len(gone)
            rep.problems.append(f"{name}: {len(gone)} acknowledged with no offset missing, e.g. {gone[:5]}")

    def _read(self, c: Consumer, p: int, start: int, end: int) -> list[tuple[int, bytes]]:
        return read_partition(c, TOPIC, p, start, end)

    def check_replicas(self, name: str = "", timeout: float = 30.0) -> None:
        """The stream paused: every partition's three replicas byte-identical (within
        ``timeout``: the followers fetch the last batches and the high watermark)."""
        def differing() -> list[int]:
            return [p for p in range(PARTITIONS)
                    if len({log_bytes(b, TOPIC, p) for b in self.brokers.values()}) != 1]
        deadline = time.monotonic() + timeout
        while (left := differing()) and time.monotonic() < deadline:
            time.sleep(0.5)
        if left:
            sizes = {p: [len(log_bytes(b, TOPIC, p)) for b in self.brokers.values()] for p in left}
            self.report.problems.append(f"{name}: replicas differ for partitions {left} (bytes per broker {sizes})")
