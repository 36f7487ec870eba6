"""The seam between the producer and how batches reach the broker.

A :class:`Transport` takes whole v2 record batches for one partition and returns a
:class:`SendFuture`. Two implementations: :class:`TcpTransport` here (Kafka Produce requests)
and ``appliance.client.ipc.IpcTransport`` (shared memory to a broker on this host).

TcpTransport groups batches headed for the same broker into one Produce request
(:meth:`TcpTransport.send_batches`) and keeps several requests in flight per connection
(answers are matched in order by :class:`~appliance.client.pipeline.PipelinedConnection`).

Thread-safety: TcpTransport may be used from several threads at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from appliance.client.cluster import Cluster
from appliance.client.pipeline import ResponseFuture
from appliance.errors import KafkaError, error_for_code

__all__ = ["Transport", "SendFuture", "SendResult", "TcpTransport", "FailedFuture", "open_transport"]

PRODUCE = 0


class SendResult(NamedTuple):
    topic: str
    partition: int
    base_offset: int  # -1 with acks=0
    log_append_time: int  # -1 unless the topic uses LogAppendTime


class SendFuture(Protocol):
    def result(self, timeout: float | None = None) -> SendResult:
        """The acknowledgement; raises a KafkaError subclass on failure."""

    def done(self) -> bool: ...


class Transport(Protocol):
    def send_batch(self, topic: str, partition: int, batch: bytes, *, acks: int,
                   timeout_ms: int) -> SendFuture:
        """Hand one batch over without waiting; the future completes on acknowledgement."""

    def close(self) -> None: ...


class FailedFuture:
    """A send that failed before it left (no leader, no connection): ``result()`` raises."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> SendResult:
        raise self.error


class _TcpFuture:
    __slots__ = ("response", "topic", "partition")

    def __init__(self, response: ResponseFuture, topic: str, partition: int) -> None:
        self.response, self.topic, self.partition = response, topic, partition

    def done(self) -> bool:
        return self.response.done()

    def result(self, timeout: float | None = None) -> SendResult:
        body = self.response.result(timeout)
        if body is None:  # acks=0: the broker never answers
            return SendResult(self.topic, self.partition, -1, -1)
        for t in body.responses:
            if t.name != self.topic:
                continue
            for p in t.partition_responses:
                if p.index == self.partition:
                    if p.error_code:
                        raise error_for_code(p.error_code)(
                            f"producing to {self.topic}-{self.partition}: broker answered error {p.error_code}")
                    return SendResult(self.topic, self.partition, p.base_offset, p.log_append_time_ms)
        raise error_for_code(2)(f"the Produce answer has no entry for {self.topic}-{self.partition}")


class TcpTransport:
    """Produce requests over pooled pipelined connections (see the module docstring)."""

    def __init__(self, cluster: Cluster, *, transactional_id: str | None = None,
                 max_request_size: int = 1048576) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        # Kafka's max.request.size: the batches of one request add up to at most this (a batch
        # larger than it goes alone). All ready batches in one request reached 205 MB with
        # send_many to 1,000 partitions; the broker closes a connection over
        # socket.request.max.bytes (100 MiB), so none of them was acknowledged.
        self.max_request_size = max_request_size

    def send_batch(self, topic: str, partition: int, batch: bytes, *, acks: int = -1,
                   timeout_ms: int = 30000) -> SendFuture:
        return self.send_batches([(topic, partition, batch)], acks=acks, timeout_ms=timeout_ms)[0]

    def send_batches(self, items: Sequence[tuple[str, int, bytes]], *, acks: int = -1,
                     timeout_ms: int = 30000) -> list[SendFuture]:
        """Send several batches, one Produce request per leader broker; one future per item, in
        order. Never raises for a batch's own trouble: its future fails instead."""
        out: list[Any] = [None] * len(items)
        by_node: dict[int, list[int]] = {}
        for i, (topic, partition, _) in enumerate(items):
            try:
                by_node.setdefault(self.cluster.leader_of(topic, partition), []).append(i)
            except KafkaError as e:
                out[i] = FailedFuture(e)
        requests: list[tuple[int, list[int]]] = []
        for node, idxs in by_node.items():
            size = 0
            for i in idxs:
                n = len(items[i][2])
                if not requests or requests[-1][0] != node or size + n > self.max_request_size:
                    requests.append((node, []))
                    size = 0
                requests[-1][1].append(i)
                size += n
        for node, idxs in requests:
            topics: dict[str, list[dict]] = {}
            for i in idxs:
                topic, partition, batch = items[i]
                topics.setdefault(topic, []).append({"index": partition, "records": batch})
            body = {"transactional_id": self.transactional_id, "acks": acks, "timeout_ms": timeout_ms,
                    "topic_data": [{"name": t, "partition_data": d} for t, d in topics.items()]}
            try:
                if node < 0:
                    raise error_for_code(5)(f"no leader for {items[idxs[0]][0]}")
                conn = self.cluster.node_connection(node, "produce")
                # The broker may take timeout_ms to gather acks: allow for it on top of our own.
                fut = conn.send(PRODUCE, body, timeout=self.cluster.request_timeout + timeout_ms / 1000)
            except KafkaError as e:
                for i in idxs:
                    out[i] = FailedFuture(e)
                continue
            for i in idxs:
                out[i] = _TcpFuture(fut, items[i][0], items[i][1])
        return out

    def close(self) -> None:
        """Nothing of its own to close: the connections belong to the cluster."""


def open_transport(kind: str, cluster: Cluster, bootstrap_servers: str, config: dict[str, Any]) -> Any:
    """The transport for ``kind`` (tcp | ipc | auto). "ipc" raises KafkaError when no local
    broker is found; "auto" falls back to TCP."""
    if kind in ("ipc", "auto"):
        try:
            from appliance.client.ipc import (
                open_ipc_transport,  # written in parallel; may be absent
            )
        except ImportError as e:
            if kind == "ipc":
                raise KafkaError(f"transport=ipc: the IPC transport is not available ({e})") from e
            return TcpTransport(cluster, max_request_size=config.get("max.request.size", 1048576))
        t = open_ipc_transport(bootstrap_servers, config)
        if t is not None:
            return t
        if kind == "ipc":
            raise KafkaError(f"transport=ipc: no local broker found for {bootstrap_servers!r} "
                             "(set shm.name or log.dir, or use transport=auto/tcp)")
    return TcpTransport(cluster, max_request_size=config.get("max.request.size", 1048576))
