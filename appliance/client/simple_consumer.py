"""The low-level ("simple") consumer of the 0.8 design: stateless, the caller passes the offset
on every call. Finds each partition's leader from metadata; no group, no commits.

Thread-safety: methods may be called from several threads at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appliance.client import config as cfg
from appliance.client.cluster import Cluster, check_error
from appliance.client.fetching import (
    FETCH,
    LIST_OFFSETS,
    ConsumerRecord,
    decode_records,
    fetch_body,
    list_offsets_body,
)
from appliance.client.serialization import as_decoder

__all__ = ["SimpleConsumer", "ConsumerRecord"]


class SimpleConsumer:
    """``SimpleConsumer("host:port")`` or with a config dict (Kafka's consumer key names:
    client.id, request.timeout.ms, socket.connection.setup.timeout.ms, key/value.deserializer).
    Raises InvalidConfigError for bad settings."""

    def __init__(self, bootstrap_servers: str | None = None, config: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        merged = dict(config or {})
        if bootstrap_servers is not None:
            merged["bootstrap.servers"] = bootstrap_servers
        c = self.config = cfg.resolve(cfg.CONSUMER_KEYS, merged, kwargs)
        self.cluster = Cluster.for_consumer(c)
        self.key_decoder = as_decoder(c["key.deserializer"])
        self.value_decoder = as_decoder(c["value.deserializer"])

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1048576,
              max_wait_ms: int = 0) -> list[ConsumerRecord]:
        """Records of topic-partition from ``offset`` on, at most about ``max_bytes`` of them
        (at least one whole batch if there is one). Empty at the end of the log.

        Raises OffsetOutOfRangeError, UnknownTopicOrPartitionError (no such topic or partition),
        KafkaConnectionError (naming the broker), CorruptRecordError."""
        conn = self.cluster.leader_connection(topic, partition, "fetch")
        body = fetch_body([(topic, partition, offset)], max_wait_ms=max_wait_ms, min_bytes=0,
                          max_bytes=max_bytes, partition_max_bytes=max_bytes)
        resp = conn.request(FETCH, body, timeout=self.cluster.request_timeout + max_wait_ms / 1000)
        check_error(getattr(resp, "error_code", 0), f"fetching {topic}-{partition}")
        for t in resp.responses:
            for p in t.partitions:
                if p.partition_index == partition:
                    if p.error_code:
                        self.cluster.invalidate(topic)
                    check_error(p.error_code, f"fetching {topic}-{partition} at offset {offset}")
                    recs, _ = decode_records(topic, partition, p.records, offset, self.key_decoder,
                                             self.value_decoder)
                    return recs
        return []

    def get_offsets_before(self, topic: str, partition: int, time: int, max_num_offsets: int = 1) -> list[int]:
        """Offsets before ``time`` (ms), newest first: -1 = the log end (latest), -2 = the log
        start (earliest), else the first offset whose timestamp is >= ``time`` (ListOffsets v1+
        answers one offset, so the list has at most one element; empty if none qualifies).
        Raises UnknownTopicOrPartitionError, ValueError for max_num_offsets < 1."""
        if max_num_offsets < 1:
            raise ValueError(f"max_num_offsets must be at least 1, not {max_num_offsets}")
        conn = self.cluster.leader_connection(topic, partition)
        resp = conn.request(LIST_OFFSETS, list_offsets_body([(topic, partition, time)]))
        for t in resp.topics:
            for p in t.partitions:
                if p.partition_index == partition:
                    check_error(p.error_code, f"offsets of {topic}-{partition}")
                    return [] if p.offset < 0 else [p.offset]
        return []

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions. Raises UnknownTopicOrPartitionError."""
        return self.cluster.topic(topic, auto_create=False).partitions

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
