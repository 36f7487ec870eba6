"""Fuzz one running broker: hostile frames on a pool of raw connections while a well-behaved
confluent-kafka client produces and fetches on its own connections, timing every request.
Used by tests/faults/test_fuzz_broker.py (bounded) and scripts/fuzz_broker.py (a million)."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from appliance.protocol.messages import ApiVersions
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess
from tests.faults.frames import FrameFuzzer

__all__ = ["FuzzReport", "WellBehavedClient", "advertised_versions", "changed_segments", "log_checksums",
           "prepare_topics", "run_fuzz",
           "percentile"]


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def advertised_versions(port: int) -> list[tuple[int, int, int]]:
    """(api_key, min, max) as the broker's ApiVersions answer lists them."""
    with RawConnection(port) as c:
        body = c.request(ApiVersions.API_KEY, 0, {})
    return [(e.api_key, e.min_version, e.max_version) for e in body.api_keys]


def log_checksums(log_dirs: list[str], topics: set[str]) -> dict[str, tuple[int, str]]:
    """{segment path: (size, sha256)} of every .log file of ``topics``."""
    out = {}
    for d in log_dirs:
        for f in sorted(Path(d).glob("*/*.log")):
            if f.parent.name.rsplit("-", 1)[0] in topics:
                data = f.read_bytes()
                out[str(f)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def changed_segments(before: dict[str, tuple[int, str]]) -> list[str]:
    """Segments whose first ``size`` bytes (what was written before) differ now, or are gone.
    Appends after the snapshot are allowed: the fuzzer may produce valid batches too."""
    bad = []
    for path, (size, digest) in before.items():
        try:
            with open(path, "rb") as f:
                data = f.read(size)
        except OSError:
            bad.append(f"{path}: gone")
            continue
        if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
            bad.append(f"{path}: first {size} bytes changed")
    return bad


class WellBehavedClient(threading.Thread):
    """Produces one record at a time (acks=all, wait for the delivery) and fetches with a
    consumer on other connections; ``latencies`` holds each produce's round trip in seconds."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.fetched = 0
        self.produced = 0
        self.stop = threading.Event()
        self.warm = threading.Event()  # set after the first 5 deliveries (not timed)

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0,
                      "enable.idempotence": True, "message.timeout.ms": 60_000})
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz-steady",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 50})
        c.assign([TopicPartition(self.topic, 0, 0)])
        done: list = []
        i = 0
        try:
            while not self.stop.is_set():
                done.clear()
                t0 = time.perf_counter()
                p.produce(self.topic, b"steady-%d" % i, partition=0,
                          on_delivery=lambda err, msg: done.append(err))
                while not done:
                    p.poll(0.001)
                if self.warm.is_set():
                    self.latencies.append(time.perf_counter() - t0)
                elif i >= 4:
                    self.warm.set()
                if done[0] is not None:
                    self.errors.append(str(done[0]))
                else:
                    self.produced += 1
                i += 1
                for m in c.consume(100, 0):
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                    else:
                        self.fetched += 1
                time.sleep(0.002)
            deadline = time.monotonic() + 30
            while self.fetched < self.produced and time.monotonic() < deadline:
                for m in c.consume(1000, 0.2):
                    if m.error() is None:
                        self.fetched += 1
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            self.errors.append(repr(e))
        finally:
            p.flush(10)
            c.close()


@dataclass
class FuzzReport:
    frames: int = 0
    bytes: int = 0
    seconds: float = 0.0
    connections: int = 0
    answered: int = 0  # a response frame came back
    closed: int = 0  # the broker closed the connection (bad frame)
    silent: int = 0  # no answer within the wait (acks=0, long poll, or a stall)
    connect_failures: int = 0  # the broker did not accept a new connection within 5 s
    kinds: Counter = field(default_factory=Counter)
    apis: Counter = field(default_factory=Counter)

    def line(self) -> str:
        return (f"{self.frames} frames ({self.bytes / 1e6:.1f} MB) in {self.seconds:.1f} s "
                f"= {self.frames / max(self.seconds, 1e-9):.0f} frames/s; answered {self.answered}, "
                f"closed by the broker {self.closed}, no answer in time {self.silent}, "
                f"connects refused or timed out {self.connect_failures}; "
                f"{self.connections} connections; kinds {dict(self.kinds)}")


class _Conn:
    """One fuzzing connection with at most one frame outstanding, so every frame is read by
    the broker (a frame sent after one that gets the connection closed would be lost)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setblocking(False)
        self.buf = bytearray()
        self.sent_at = 0.0
        self.waiting = False

    def answered(self) -> bool | None:
        """True once a whole response frame is buffered; None if the broker closed."""
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    return None
                self.buf += chunk
        except BlockingIOError:
            pass
        except OSError:
            return None
        if len(self.buf) >= 4:
            size = int.from_bytes(self.buf[:4], "big", signed=True)
            if len(self.buf) >= 4 + size:
                del self.buf[:4 + size]
                return True
        return False


def run_fuzz(broker: BrokerProcess, frames: int, seed: int, topics: list[tuple[str, int]],
             pool: int = 8, wait: float = 0.5, progress: Callable[[FuzzReport], None] | None = None,
             every: int = 10_000) -> FuzzReport:
    """Send ``frames`` fuzzed frames over ``pool`` connections, each waiting for its answer,
    the broker closing it, or ``wait`` seconds (then the connection is replaced)."""
    import selectors  # noqa: PLC0415

    fz = FrameFuzzer(seed, advertised_versions(broker.port), topics)
    rep = FuzzReport(kinds=fz.kinds, apis=fz.apis)
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []
    t0 = time.perf_counter()

    def fresh() -> _Conn:
        for _ in range(10):
            try:
                c = _Conn(broker.port)
                break
            except OSError:
                rep.connect_failures += 1
                time.sleep(0.5)
        else:
            raise TimeoutError(f"the broker accepted no connection in 10 tries: {rep.line()}")
        sel.register(c.sock, selectors.EVENT_READ, c)
        conns.append(c)
        rep.connections += 1
        return c

    def drop(c: _Conn) -> None:
        sel.unregister(c.sock)
        c.sock.close()
        conns.remove(c)

    def send(c: _Conn) -> None:
        data = fz.frame()
        try:
            c.sock.sendall(data)  # small frames: the socket buffer takes them whole
        except BlockingIOError:
            rep.silent += 1
            drop(c)
            return
        except OSError:
            rep.closed += 1
            drop(c)
            return
        finally:
            rep.frames += 1
            rep.bytes += len(data)
            if progress and rep.frames % every == 0:
                rep.seconds = time.perf_counter() - t0
                progress(rep)
        c.sent_at, c.waiting = time.monotonic(), True

    try:
        while rep.frames < frames or any(c.waiting for c in conns):
            while len(conns) < pool and rep.frames < frames:
                send(fresh())
            for key, _ in sel.select(0.05):
                c = key.data
                got = c.answered()
                if got is None:
                    rep.closed += c.waiting
                    c.waiting = False
                    drop(c)
                elif got:
                    rep.answered += 1
                    c.waiting = False
                    if rep.frames < frames:
                        send(c)
            now = time.monotonic()
            for c in [c for c in conns if c.waiting and now - c.sent_at > wait]:
                rep.silent += 1
                drop(c)
            for c in [c for c in conns if not c.waiting]:
                if rep.frames < frames:
                    send(c)
                else:
                    drop(c)
    finally:
        for c in list(conns):
            drop(c)
        sel.close()
        rep.seconds = time.perf_counter() - t0
    return rep


def prepare_topics(bootstrap: str) -> list[tuple[str, int]]:
    """A pre-existing topic with data (its segments are checksummed) and the steady client's."""
    create_topic(bootstrap, "fuzz-pre", partitions=3)
    create_topic(bootstrap, "fuzz-steady", partitions=1)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(3000):
        p.produce("fuzz-pre", b"pre-%06d" % i, partition=i % 3)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    return [("fuzz-pre", 3), ("fuzz-steady", 1)]
