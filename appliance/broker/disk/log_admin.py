"""The disk worker's side of the admin APIs that act on its logs: DeleteRecords (advance a log
start offset) and the dynamic broker configs (re-derive every partition's config). The
partitions' single writer runs them between appends.

Thread-safety: none; the disk worker's one thread calls every handler.
"""

from __future__ import annotations

import logging

from appliance import dynamic_config
from appliance.broker.disk.partitions import Partitions
from appliance.broker.disk.requests import NOTHING, NotHere
from appliance.config import BrokerConfig, ConfigError, TopicConfig
from appliance.errors import InvalidRequestError, OffsetOutOfRangeError
from appliance.shm.layout import DELETE_RECORDS_BODY, PRODUCER_ENTRY
from appliance.storage.log_dir import read_topic_properties

__all__ = ["LogAdmin", "HIGH_WATERMARK"]

log = logging.getLogger("appliance.disk")

_BODY = DELETE_RECORDS_BODY.struct  # type: ignore[attr-defined]
_PRODUCER = PRODUCER_ENTRY.struct  # type: ignore[attr-defined]
HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


class LogAdmin:
    def __init__(self, parts: Partitions, static_config: BrokerConfig) -> None:
        self.parts = parts
        self.static_config = static_config  # server.properties and --override: no dynamic values

    def load_broker_config(self) -> None:
        """Run with the saved dynamic broker configs (at start, before the log dir opens, and
        on every ALTER_BROKER_CONFIG): the partitions' configs follow the new defaults, their
        own overrides still win. Raises ConfigError for an unreadable file."""
        cfg = dynamic_config.effective_config(self.static_config, dynamic_config.load(self.static_config))
        parts = self.parts
        parts.config = cfg
        if parts.log_dir is not None:
            parts.log_dir.broker_config = cfg
        for p in parts.partitions.values():
            p.log.config = TopicConfig.from_overrides(cfg, p.log.config.to_properties())

    def describe_producers(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """DescribeProducers (KIP-664): the partition's producer state, as PRODUCER_ENTRY
        records (the network worker reads each last batch's timestamp from the log)."""
        p = self.parts.partitions.get(slot)
        if p is None:
            raise NotHere()
        plog = p.log
        out = bytearray()
        for entry in plog.producers.producers.values():
            last = entry.batches[-1].last_offset if entry.batches else -1
            out += _PRODUCER.pack(entry.producer_id, last, entry.epoch, entry.last_seq,
                                  entry.current_txn_first_offset, entry.coordinator_epoch)
        return -1, -1, plog.log_start_offset, bytes(out)

    def reload_broker_config(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        self.load_broker_config()
        log.info("%s: dynamic broker configs reloaded", self.parts.path)
        return NOTHING

    def reload_files(self) -> list[str]:
        """SIGHUP: re-read the dynamic broker configs and every partition's ``topic.properties``
        (an operator may have edited either by hand). A file that does not parse is logged and
        the configs in force stay: a typo must not take the log dir down. Returns what was
        kept, one line per file naming it and the key (the supervisor logs them too)."""
        parts = self.parts
        try:
            self.load_broker_config()
        except ConfigError as e:
            log.error("%s: dynamic broker configs not reloaded: %s", parts.path, e)
            return [f"dynamic-broker-configs.json: {e}"]
        changed = 0
        errors: list[str] = []
        for plog in (p.log for p in parts.partitions.values()):
            try:
                cfg = TopicConfig.from_overrides(parts.config, read_topic_properties(plog.path))
            except (ConfigError, OSError) as e:
                log.error("%s: topic config not reloaded: %s", plog.path, e)
                errors.append(f"{plog.path}/topic.properties: {e}")
                continue
            changed += cfg.to_properties() != plog.config.to_properties()
            plog.config = cfg
        log.info("%s: reloaded on SIGHUP: dynamic broker configs and %d topic configs "
                 "(%d changed overrides)", parts.path, len(parts.partitions), changed)
        return errors

    def delete_records(self, n: int | None, request_id: int, slot: int, body: memoryview,
            acks: int, timeout_ms: int) -> tuple:
        """Standalone mode: move the log start offset of ``slot`` up to the requested offset;
        answer the new low watermark (this broker holds the only replica). Cluster mode holds
        the answer until the ISR has followed (``Replication.delete_records``)."""
        self.move_log_start(slot, body)
        return -1, -1, self.parts.partitions[slot].log.log_start_offset, b""

    def move_log_start(self, slot: int, body: memoryview) -> int:
        """Move the log start offset of ``slot`` up to the offset a DELETE_RECORDS body asks
        for (``Partitions.advance_log_start``: the segments below go, the checkpoint is written
        before the answer). Returns the offset asked for (-1 resolved to the high watermark)."""
        p = self.parts.partitions.get(slot)
        if p is None:
            raise NotHere()
        plog = p.log
        if len(body) < _BODY.size:
            raise InvalidRequestError(f"DeleteRecords body of {len(body)} bytes")
        (offset,) = _BODY.unpack_from(body, 0)
        if offset == HIGH_WATERMARK:
            offset = plog.high_watermark
        if offset < 0:
            raise OffsetOutOfRangeError(f"offset {offset} is negative")
        self.parts.advance_log_start(p, offset, "DeleteRecords")
        return offset
