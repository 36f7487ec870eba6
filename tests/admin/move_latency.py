"""What a replica move between log dirs costs the other partitions of the destination disk: a
large partition is moved onto a disk worker while a probe produces to another partition of
that disk, one request at a time, and records how long each produce waits. Shared by
``test_replica_move_latency.py`` (a generous bound) and ``perf/bench_replica_move.py`` (the
figures)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer

from appliance.errors import ErrorCode
from appliance.records.batch import build_batch
from tests.broker.clients import create_topic
from tests.broker.wire import RawConnection, produce_body

__all__ = ["MoveSetup", "place", "fill", "evict", "future_bytes", "LatencyProbe", "alter"]

FILL_VALUE = 64 << 10  # bytes per record of the large partition


@dataclass
class MoveSetup:
    big: str  # topic whose partition 0 is moved
    src: str
    dst: str
    hot: str  # topic whose partition ``hot_partition`` lives on ``dst``
    hot_partition: int


def _holder(log_dirs: list[str], topic: str, partition: int) -> str:
    (d,) = [d for d in log_dirs if os.path.isdir(os.path.join(d, f"{topic}-{partition}"))]
    return d


def place(bootstrap: str, log_dirs: list[str], segment_bytes: int = 64 << 20) -> MoveSetup:
    """A one-partition topic ``big`` on one disk, and a topic ``hot`` with a partition on the
    other (created with two partitions; the broker spreads them over both dirs)."""
    create_topic(bootstrap, "big", 1, {"segment.bytes": str(segment_bytes)})
    src = _holder(log_dirs, "big", 0)
    dst = next(d for d in log_dirs if d != src)
    create_topic(bootstrap, "hot", len(log_dirs))
    hp = next(p for p in range(len(log_dirs)) if _holder(log_dirs, "hot", p) == dst)
    return MoveSetup("big", src, dst, "hot", hp)


def fill(bootstrap: str, topic: str, nbytes: int) -> None:
    """``nbytes`` of records in partition 0 of ``topic``."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "message.max.bytes": 2 << 20, "queue.buffering.max.kbytes": 256 << 10})
    value = b"x" * FILL_VALUE
    for i in range(nbytes // FILL_VALUE):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.1)
        if i % 256 == 0:
            p.poll(0)
    assert p.flush(300) == 0


def future_bytes(log_dir: str) -> int:
    """Bytes of the files in the future replicas under ``log_dir`` (0 when there is none)."""
    total = 0
    for name in os.listdir(log_dir):
        if name.endswith("-future"):
            d = os.path.join(log_dir, name)
            try:
                for f in os.listdir(d):
                    total += os.stat(os.path.join(d, f)).st_size
            except FileNotFoundError:  # renamed or removed meanwhile
                pass
    return total


def evict(path: str) -> None:
    """Drop the files under ``path`` from the page cache (after writing them back), so that a
    copy reads them from the disk as it would a partition written long ago."""
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@dataclass
class LatencyProbe:
    """Produces one small record (acks=1) to ``topic``-``partition`` after another, over one
    raw connection, and records each request's (start, end) and error code; ``watch`` (if
    given) is called after each answer and its value kept in ``seen``."""

    port: int
    topic: str
    partition: int
    watch: Callable[[], int] | None = None
    spans: list[tuple[float, float]] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    seen: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with RawConnection(self.port, timeout=120) as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                r = c.request(0, 7, produce_body(self.topic, self.partition, build_batch([(None, b"p" * 100)])))
                self.spans.append((t0, time.monotonic()))
                if self.watch is not None:
                    self.seen.append(self.watch())
                code = r.responses[0].partition_responses[0].error_code
                if code:
                    self.errors.append(code)
                time.sleep(0.002)

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        # past the first requests (a connection's and a partition's first produce load code)
        deadline = time.monotonic() + 60
        while len(self.spans) < 20 and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def waits_between(self, t0: float, t1: float) -> list[float]:
        """How long each request answered after ``t0`` and sent before ``t1`` waited."""
        return [end - start for start, end in list(self.spans) if end > t0 and start < t1]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(150)


def alter(port: int, path: str, topic: str, partition: int) -> int:
    """AlterReplicaLogDirs v1 for one partition; its error code (answered when the move ends)."""
    with RawConnection(port, timeout=300) as conn:
        r = conn.request(34, 1, {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]})
    return ErrorCode(r.results[0].partitions[0].error_code)
