"""The machine's physical limits, measured in the same run as the systems (all in bytes/s):
sequential write through the page cache, memcpy (numpy), loopback TCP (Python sockets, 4 MiB
sends), CRC32C (the crc32c package). Each is the median of 3 repetitions."""

from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path

import numpy as np

__all__ = ["measure_limits", "LIMIT_NAMES"]

LIMIT_NAMES = {
    "seq_write": "sequential write (page cache)",
    "memcpy": "memcpy (numpy)",
    "loopback_tcp": "loopback TCP (Python sockets)",
    "crc32c": "CRC32C (crc32c package)",
}
CHUNK = 4 << 20


def _median_rate(fn, size: int, reps: int = 3) -> float:
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        rates.append(size / (time.perf_counter() - t0))
    return statistics.median(rates)


def seq_write(dirpath: Path, size: int) -> float:
    """Write ``size`` bytes in 4 MiB writes to a new file (no fsync: the page cache), delete it."""
    buf = os.urandom(CHUNK)
    path = dirpath / "limit-seq-write.bin"

    def once() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(size // CHUNK):
                os.write(fd, buf)
        finally:
            os.close(fd)
            os.unlink(path)

    return _median_rate(once, size)


def memcpy(size: int) -> float:
    a = np.ones(size, np.uint8)
    b = np.empty_like(a)
    np.copyto(b, a)  # fault the pages in first
    return _median_rate(lambda: np.copyto(b, a), size)


def loopback_tcp(size: int) -> float:
    """A forked reader drains a loopback connection; this process sends 4 MiB buffers."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    buf = os.urandom(CHUNK)
    rates = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                conn, _ = lsock.accept()
                rbuf = bytearray(CHUNK)
                while conn.recv_into(rbuf):
                    pass
            finally:
                os._exit(0)
        with socket.create_connection(("127.0.0.1", port)) as s:
            t0 = time.perf_counter()
            for _ in range(size // CHUNK):
                s.sendall(buf)
            s.shutdown(socket.SHUT_WR)
            os.waitpid(pid, 0)
            rates.append(size / (time.perf_counter() - t0))
    lsock.close()
    return statistics.median(rates)


def crc32c_rate(size: int) -> float:
    import crc32c
    buf = os.urandom(64 << 20)
    reps = max(1, size // len(buf))

    def once() -> None:
        for _ in range(reps):
            crc32c.crc32c(buf)

    return _median_rate(once, reps * len(buf))


def measure_limits(dirpath: Path, write_bytes: int) -> dict[str, float]:
    """Bytes/s for each limit in LIMIT_NAMES; ``write_bytes`` sizes the write, TCP and CRC tests."""
    return {
        "seq_write": seq_write(dirpath, write_bytes),
        "memcpy": memcpy(256 << 20),
        "loopback_tcp": loopback_tcp(write_bytes),
        "crc32c": crc32c_rate(write_bytes),
    }
