"""The transaction coordinator's requests, over our wire client, for the exactly-once sink.

FindCoordinator (key_type 1), InitProducerId, AddPartitionsToTxn and EndTxn (KIP-98). The sink
needs what no Kafka client library offers: one process (a Spark task) opens a transaction and
another (the driver) ends it, knowing only its transactional id, producer id and epoch. The
coordinator checks exactly those three, so EndTxn from any connection is the transaction's own.

Retriable answers (coordinator moving or loading, CONCURRENT_TRANSACTIONS while markers of an
earlier decision are written) are asked again with back-off until ``timeout_ms``; anything else
raises the error's KafkaError subclass naming the transactional id. Not thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from appliance.client.cluster import RETRIABLE
from appliance.client.connection import (
    BrokerConnection,
    ConnectionFailed,
    connect_first,
    parse_bootstrap,
)
from appliance.errors import ErrorCode, InvalidConfigError, error_for_code

__all__ = ["TxnClient", "TXN_RETRIABLE"]

TXN_RETRIABLE = RETRIABLE | {ErrorCode.CONCURRENT_TRANSACTIONS}
_MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class TxnClient:
    """Talks to the transaction coordinator of each transactional id it is asked about."""

    def __init__(self, bootstrap_servers: str, timeout_ms: int = 30000,
                 client_id: str = "appliance-spark-eos") -> None:
        try:
            self._servers = parse_bootstrap(bootstrap_servers)
        except ValueError as e:
            raise InvalidConfigError(f"option kafka.bootstrap.servers: {e}") from None
        self.timeout_ms = timeout_ms
        self.client_id = client_id
        self._boot: BrokerConnection | None = None
        self._coords: dict[str, BrokerConnection] = {}  # "host:port" -> connection

    # -- connections ----------------------------------------------------------------------
    def bootstrap(self) -> BrokerConnection:
        if self._boot is None:
            self._boot = connect_first(self._servers, self.timeout_ms / 1000, self.client_id)
        return self._boot

    def _coordinator(self, tid: str) -> BrokerConnection:
        resp = self._retry(lambda: self.bootstrap().request(10, {"key": tid, "key_type": 1}),
                           f"FindCoordinator for transactional id {tid!r}")
        addr = f"{resp.host}:{resp.port}"
        conn = self._coords.get(addr)
        if conn is None:
            conn = self._coords[addr] = BrokerConnection(
                resp.host, resp.port, timeout=self.timeout_ms / 1000, client_id=self.client_id)
        return conn

    def _retry(self, send: Callable[[], Any], what: str, tid: str | None = None,
               ok: Callable[[Any], int] = lambda r: r.error_code) -> Any:
        """``send()`` until its answer's error code is 0; coordinator moves re-find it."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        delay = 0.02
        while True:
            try:
                resp = send()
                code = ok(resp)
            except ConnectionFailed:
                self._drop()
                if time.monotonic() + delay > deadline:
                    raise
                code = ErrorCode.NETWORK_EXCEPTION
            if not code:
                return resp
            if code not in TXN_RETRIABLE or time.monotonic() + delay > deadline:
                raise error_for_code(code)(f"{what}: {ErrorCode(code).name}")
            if code in _MOVED or code == ErrorCode.NETWORK_EXCEPTION:
                self._drop()
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _drop(self) -> None:
        for c in self._coords.values():
            c.close()
        self._coords.clear()
        if self._boot is not None:
            self._boot.close()
            self._boot = None

    def close(self) -> None:
        self._drop()

    # -- requests -------------------------------------------------------------------------
    def init_producer(self, tid: str, txn_timeout_ms: int) -> tuple[int, int]:
        """InitProducerId for ``tid``: (producer id, epoch). A transaction left open by an
        earlier holder of ``tid`` is aborted by the coordinator first (its epoch bumped, so
        that holder is fenced); CONCURRENT_TRANSACTIONS until its markers are written is
        retried."""
        body = {"transactional_id": tid, "transaction_timeout_ms": txn_timeout_ms}
        resp = self._retry(lambda: self._coordinator(tid).request(22, body),
                           f"InitProducerId for transactional id {tid!r}")
        return resp.producer_id, resp.producer_epoch

    def add_partitions(self, tid: str, pid: int, epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn. Adding partitions already in the ongoing transaction writes
        nothing and answers 0, so it also tells whether the transaction is still open with
        this epoch (PRODUCER_FENCED once the coordinator aborted it)."""
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        def first_error(resp) -> int:
            codes = [r.partition_error_code for t in resp.results_by_topic_v3_and_below
                     for r in t.results_by_partition]
            bad = [c for c in codes if c and c != ErrorCode.OPERATION_NOT_ATTEMPTED]
            return bad[0] if bad else 0

        self._retry(lambda: self._coordinator(tid).request(24, body),
                    f"AddPartitionsToTxn {sorted(topics)} for transactional id {tid!r}",
                    ok=first_error)

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> None:
        """EndTxn: commit or abort. Repeating a commit that completed answers 0."""
        body = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "committed": commit}
        what = "commit" if commit else "abort"
        self._retry(lambda: self._coordinator(tid).request(26, body),
                    f"EndTxn ({what}) for transactional id {tid!r} (producer id {pid}, "
                    f"epoch {epoch})")
