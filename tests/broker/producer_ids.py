"""Raw InitProducerId for tests: many at once on a connection, and connections on each of a
broker's network workers."""

from __future__ import annotations

import time

import psutil

import appliance.protocol as proto
from tests.broker.wire import RawConnection
from tests.broker_process import BrokerProcess

__all__ = ["init_producer_ids", "ids_of", "serving_worker", "connections_on_every_worker",
           "ids_on_every_worker"]

INIT = {"transactional_id": None, "transaction_timeout_ms": 60000}
CHUNK = 100  # requests written at once on a connection: a few round trips per block


def init_producer_ids(conn: RawConnection, n: int) -> list[tuple[int, int]]:
    """(error code, producer id) of ``n`` InitProducerId, pipelined ``CHUNK`` at a time."""
    out: list[tuple[int, int]] = []
    while len(out) < n:
        k = min(CHUNK, n - len(out))
        conn.sock.sendall(b"".join(conn.conn.send_request(22, 1, INIT)[1] for _ in range(k)))
        got = 0
        while got < k:
            event = conn.conn.next_event()
            if isinstance(event, proto.Response):
                out.append((event.body.error_code, event.body.producer_id))
                got += 1
            elif event is proto.PEER_CLOSED:
                raise ConnectionResetError("broker closed the connection")
            else:
                data = conn.sock.recv(1 << 20)
                if not data:
                    raise ConnectionResetError("broker closed the connection")
                conn.conn.receive_data(data)
    return out


def ids_of(answers: list[tuple[int, int]]) -> list[int]:
    assert {code for code, _ in answers} == {0}, answers[:5]
    return [pid for _, pid in answers]


def serving_worker(broker: BrokerProcess, conn: RawConnection, timeout: float = 10.0) -> int:
    """The pid of the network worker that accepted ``conn`` (waiting for the accept: until
    then the connection sits in the listening socket's queue, held by no worker)."""
    port = conn.sock.getsockname()[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in broker.worker_pids("network worker"):
            for c in psutil.Process(pid).net_connections(kind="tcp"):
                if c.raddr and c.raddr.port == port:
                    return pid
        time.sleep(0.02)
    raise AssertionError(f"no network worker accepted the connection from port {port} in {timeout} s")


def connections_on_every_worker(broker: BrokerProcess, workers: int) -> list[RawConnection]:
    """Connections until each network worker has one (the kernel spreads them: SO_REUSEPORT)."""
    conns, seen = [], set()
    while len(seen) < workers:
        assert len(conns) < 40, "the kernel put 40 connections on the same worker"
        conns.append(RawConnection(broker.port))
        seen.add(serving_worker(broker, conns[-1]))
    return conns


def ids_on_every_worker(broker: BrokerProcess, workers: int, total: int) -> list[int]:
    """At least ``total`` producer ids taken at once on connections to each network worker
    (each connection in a thread of its own); every answer must be a success."""
    import threading

    conns = connections_on_every_worker(broker, workers)
    per_conn = -(-total // len(conns))
    answers: list[list[tuple[int, int]]] = [[] for _ in conns]
    threads = [threading.Thread(target=lambda i=i: answers[i].extend(init_producer_ids(conns[i], per_conn)))
               for i in range(len(conns))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for c in conns:
            c.close()
    ids = [pid for a in answers for pid in ids_of(a)]
    assert len(ids) == per_conn * len(conns), "a connection's thread did not finish"
    return ids
