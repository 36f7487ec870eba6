"""The fetcher thread: reads the owned partitions from their leaders and queues the records, in
chunks, on the streams that own them.

Each round it sends one Fetch to every leader at once (partitions grouped by leader, from the
client's metadata) and waits for all the answers; a partition is skipped while its stream holds
queued.max.message.chunks unread chunks (so a slow reader holds back only its own partitions).
NOT_LEADER and broken connections make the partition wait refresh.leader.backoff.ms and then
look its leader up again; OFFSET_OUT_OF_RANGE moves it to the smallest or largest offset
(auto.offset.reset).

Thread-safety: :meth:`Fetcher.assign` may be called from any thread; the loop is its own thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from appliance.client.cluster import QUICK_CONNECT_S, RETRIABLE, Cluster, check_error
from appliance.client.errors import KafkaConnectionError
from appliance.client.fetching import (
    EARLIEST,
    FETCH,
    LATEST,
    LIST_OFFSETS,
    decode_records,
    fetch_body,
    list_offsets_body,
)
from appliance.client.zk_consumer.stream import Chunk, PartitionTopicInfo
from appliance.errors import ErrorCode, KafkaError

__all__ = ["Fetcher", "list_offset"]

log = logging.getLogger("appliance.client.zk_consumer")

_IDLE_S = 0.05  # nothing to fetch (no partitions, or every queue full): look again this often


def list_offset(cluster: Cluster, topic: str, partition: int, reset: str) -> int:
    """The partition's first (``smallest``) or next-to-be-written (``largest``) offset, from its
    leader. Raises KafkaError."""
    conn = cluster.leader_connection(topic, partition, connect_timeout=QUICK_CONNECT_S)
    ts = EARLIEST if reset == "smallest" else LATEST
    resp = conn.request(LIST_OFFSETS, list_offsets_body([(topic, partition, ts)]))
    for t in resp.topics:
        for p in t.partitions:
            if p.partition_index == partition:
                if p.error_code:
                    cluster.invalidate(topic)
                check_error(p.error_code, f"offsets of {topic}-{partition}")
                return p.offset
    raise KafkaError(f"no offset of {topic}-{partition} in the ListOffsets answer")


class Fetcher:
    def __init__(self, cluster: Cluster, c: dict[str, Any]) -> None:
        self.cluster = cluster
        self.max_bytes = c["fetch.message.max.bytes"]
        self.min_bytes = c["fetch.min.bytes"]
        self.wait_ms = c["fetch.wait.max.ms"]
        self.max_chunks = c["queued.max.message.chunks"]
        self.leader_backoff = c["refresh.leader.backoff.ms"] / 1000
        self.reset = c["auto.offset.reset"]
        self._infos: list[PartitionTopicInfo] = []
        self._not_before: dict[tuple[str, int], float] = {}  # leader lookups backing off
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="appliance-zk-fetcher")

    def start(self) -> None:
        self._thread.start()

    def assign(self, infos: list[PartitionTopicInfo]) -> None:
        """Fetch these partitions from now on (an empty list: none, during a rebalance)."""
        with self._lock:
            self._infos = list(infos)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.cluster.request_timeout + self.wait_ms / 1000 + 2)

    # the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._round() or self._stop.is_set():
                    self._stop.wait(_IDLE_S)
            except Exception:  # a bug must not silently end consumption: log and go on
                log.exception("fetcher round failed")
                self._stop.wait(self.leader_backoff)

    def _backoff(self, info: PartitionTopicInfo, why: object) -> None:
        log.info("fetching %s-%d: %s; looking its leader up again in %d ms", info.topic, info.partition,
                 why, self.leader_backoff * 1000)
        self.cluster.invalidate(info.topic)
        self._not_before[(info.topic, info.partition)] = time.monotonic() + self.leader_backoff

    def _round(self) -> bool:
        """One Fetch per leader; False when there was nothing to fetch."""
        with self._lock:
            infos = list(self._infos)
        now = time.monotonic()
        by_leader: dict[int, list[tuple[PartitionTopicInfo, int]]] = {}
        for info in infos:
            if info.revoked or info.queue.qsize() >= self.max_chunks:
                continue
            if self._not_before.get((info.topic, info.partition), 0) > now:
                continue
            if info.fetched_offset < 0:  # no committed offset: start per auto.offset.reset
                self._reset(info, info.fetched_offset)
                continue
            try:
                leader = self.cluster.leader_of(info.topic, info.partition)
                if leader < 0:
                    raise KafkaError("no leader")
            except KafkaError as e:
                self._backoff(info, e)
                continue
            by_leader.setdefault(leader, []).append((info, info.fetched_offset))
        if not by_leader:
            return False
        sent = []
        for leader, items in by_leader.items():
            body = fetch_body([(i.topic, i.partition, off) for i, off in items], max_wait_ms=self.wait_ms,
                              min_bytes=self.min_bytes, max_bytes=self.max_bytes * len(items),
                              partition_max_bytes=self.max_bytes)
            try:
                # a quick connect: a dead leader refuses, and the others' fetches wait behind it
                conn = self.cluster.node_connection(leader, "fetch", connect_timeout=QUICK_CONNECT_S)
                sent.append((items, conn.send(FETCH, body, timeout=self.cluster.request_timeout + self.wait_ms / 1000)))
            except KafkaError as e:
                for info, _ in items:
                    self._backoff(info, e)
        for items, fut in sent:
            try:
                resp = fut.result(self.cluster.request_timeout + self.wait_ms / 1000 + 1)
            except KafkaConnectionError as e:
                for info, _ in items:
                    self._backoff(info, e)
                continue
            self._take(items, resp)
        return True

    def _take(self, items: list[tuple[PartitionTopicInfo, int]], resp: Any) -> None:
        by_tp = {(i.topic, i.partition): (i, off) for i, off in items}
        for t in resp.responses:
            for p in t.partitions:
                entry = by_tp.get((t.topic, p.partition_index))
                if entry is None:
                    continue
                info, pos = entry
                code = p.error_code
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._reset(info, pos)
                    continue
                if code in RETRIABLE:
                    self._backoff(info, ErrorCode(code).name)
                    continue
                if code:
                    log.error("fetching %s-%d at %d failed: %s", info.topic, info.partition, pos,
                              ErrorCode(code).name if code in ErrorCode._value2member_map_ else code)
                    self._not_before[(info.topic, info.partition)] = time.monotonic() + self.leader_backoff
                    continue
                records, next_offset = decode_records(info.topic, info.partition, p.records, pos)
                with info.lock:
                    if info.revoked or info.fetched_offset != pos:
                        continue  # revoked or reset meanwhile
                    if records:
                        info.queue.put(Chunk(info, records))
                    if next_offset is not None and next_offset > pos:
                        info.fetched_offset = next_offset

    def _reset(self, info: PartitionTopicInfo, pos: int) -> None:
        try:
            offset = list_offset(self.cluster, info.topic, info.partition, self.reset)
        except KafkaError as e:
            self._backoff(info, e)
            return
        if pos < 0:
            log.info("%s-%d has no committed offset; auto.offset.reset=%s starts it at %d", info.topic,
                     info.partition, self.reset, offset)
        else:
            log.warning("%s-%d: offset %d is out of range; auto.offset.reset=%s moves it to %d", info.topic,
                        info.partition, pos, self.reset, offset)
        with info.lock:
            if not info.revoked and info.fetched_offset == pos:
                info.fetched_offset = info.consumed_offset = offset
