"""Raw transaction API calls for tests (our protocol module on a plain socket), and the check
that a producer id's epoch is what the coordinator says."""

from __future__ import annotations

import time
from typing import Any

from tests.broker.wire import RawConnection

__all__ = ["find_txn_coordinator", "init_pid", "add_partitions", "end_txn", "INIT_V"]

INIT_V = 4  # InitProducerId v4: KIP-360's id and epoch, PRODUCER_FENCED


def find_txn_coordinator(conn: RawConnection, tid: str, timeout: float = 20.0) -> Any:
    """FindCoordinator key_type=1, retried while COORDINATOR_NOT_AVAILABLE (as clients do)."""
    deadline = time.monotonic() + timeout
    while True:
        r = conn.request(10, 3, {"key": tid, "key_type": 1})
        if r.error_code != 15 or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def init_pid(conn: RawConnection, tid: str | None, timeout_ms: int = 60000, pid: int = -1, epoch: int = -1,
             version: int = INIT_V, retry_concurrent: bool = True) -> Any:
    """InitProducerId, retried while the coordinator answers CONCURRENT_TRANSACTIONS (51) or
    COORDINATOR_LOAD_IN_PROGRESS (14), as clients do."""
    body: dict = {"transactional_id": tid, "transaction_timeout_ms": timeout_ms}
    if version >= 3:
        body |= {"producer_id": pid, "producer_epoch": epoch}
    deadline = time.monotonic() + 20
    while True:
        r = conn.request(22, version, body)
        if not retry_concurrent or r.error_code not in (14, 51) or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def add_partitions(conn: RawConnection, tid: str, pid: int, epoch: int, topics: dict[str, list[int]],
                   version: int = 3) -> dict[tuple[str, int], int]:
    r = conn.request(24, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                   "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(conn: RawConnection, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return conn.request(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                      "committed": commit}).error_code
