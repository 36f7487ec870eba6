"""Fetch and ListOffsets requests and their answers, shared by SimpleConsumer and Consumer.

Turns a Fetch response's record bytes (v2 batches, possibly ending in a partial batch) into
:class:`ConsumerRecord` values, skipping control batches and records before the requested offset
(a compressed batch is returned whole, so it may start earlier). A read_committed consumer also
passes the response's aborted transactions: their batches are skipped, as Kafka's consumer does
(a producer's batches from the aborted transaction's first offset up to its ABORT marker). A topic stored in a pre-0.11
message format answers with magic 0/1 entries (possibly mixed with v2 batches), which are read
too, as every Kafka client reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from appliance.errors import CorruptRecordError
from appliance.records import TimestampType, decode_batch, iter_batches
from appliance.records.legacy import iter_entries
from native.batch_layout import CURRENT_MAGIC, MAGIC_OFFSET
from native.scan import ScanStop, scan_batches

__all__ = ["ConsumerRecord", "TopicPartition", "decode_records", "fetch_body", "list_offsets_body",
           "EARLIEST", "LATEST"]

EARLIEST, LATEST = -2, -1
FETCH, LIST_OFFSETS = 1, 2


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    headers: tuple
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime (appliance.records.TimestampType)


def decode_records(topic: str, partition: int, data: Any, from_offset: int,
                   key_decoder: Any = None, value_decoder: Any = None,
                   aborted: Iterable[Any] | None = None) -> tuple[list[ConsumerRecord], int | None]:
    """Records at or after ``from_offset`` in fetched bytes, and the offset after the last whole
    batch (None if there was none). ``aborted``: the Fetch answer's aborted transactions
    (``producer_id``, ``first_offset``), for read_committed. Raises CorruptRecordError for a
    damaged batch."""
    buf = bytes(data or b"")
    scan = scan_batches(buf, verify_crc=False, legacy=True)
    if any(buf[p + MAGIC_OFFSET] != CURRENT_MAGIC for p in scan.positions.tolist()):
        return _decode_mixed(topic, partition, buf, scan, from_offset, key_decoder, value_decoder)
    out: list[ConsumerRecord] = []
    next_offset = None
    pending = sorted(((a.producer_id, a.first_offset) for a in aborted or ()), key=lambda a: a[1])
    aborting: set[int] = set()  # producers whose batches here belong to an aborted transaction
    for pos, h in iter_batches(buf, allow_partial=True):
        next_offset = h.last_offset + 1
        while pending and pending[0][1] <= h.last_offset:
            aborting.add(pending.pop(0)[0])
        if h.is_control:
            # the marker ends the producer's transaction; an ABORT marker's key type is 0, but
            # either marker closes what the aborted list opened
            aborting.discard(h.producer_id)
            continue
        if h.last_offset < from_offset or (h.is_transactional and h.producer_id in aborting):
            continue
        _, recs = decode_batch(buf, pos)
        tt = int(TimestampType(h.timestamp_type))
        for r in recs:
            if r.offset < from_offset:
                continue
            key = key_decoder.from_bytes(r.key) if key_decoder is not None else r.key
            value = value_decoder.from_bytes(r.value) if value_decoder is not None else r.value
            out.append(ConsumerRecord(topic, partition, r.offset, key, value, r.headers, r.timestamp, tt))
    return out, next_offset


def _decode_mixed(topic: str, partition: int, buf: bytes, scan: Any, from_offset: int,
                  key_decoder: Any, value_decoder: Any) -> tuple[list[ConsumerRecord], int | None]:
    """:func:`decode_records` for bytes holding legacy (magic 0/1) entries, entry by entry."""
    if scan.stop_reason not in (ScanStop.END, ScanStop.PARTIAL):
        raise CorruptRecordError(f"fetched records are damaged at byte {scan.stop_position}")
    out: list[ConsumerRecord] = []
    next_offset = None
    for pos, size, last in zip(scan.positions.tolist(), scan.sizes.tolist(),
                               scan.last_offsets.tolist(), strict=True):
        next_offset = last + 1
        if last < from_offset:
            continue
        if buf[pos + MAGIC_OFFSET] == CURRENT_MAGIC:
            recs, _ = decode_records(topic, partition, buf[pos:pos + size], from_offset,
                                     key_decoder, value_decoder)
            out += recs
            continue
        for entry in iter_entries(buf[pos:pos + size]):
            tt = int(entry.timestamp_type)
            for m in entry.messages:
                if m.offset < from_offset:
                    continue
                key = key_decoder.from_bytes(m.key) if key_decoder is not None else m.key
                value = value_decoder.from_bytes(m.value) if value_decoder is not None else m.value
                out.append(ConsumerRecord(topic, partition, m.offset, key, value, (), m.timestamp, tt))
    return out, next_offset


def fetch_body(positions: Iterable[tuple[str, int, int]], *, max_wait_ms: int, min_bytes: int,
               max_bytes: int, partition_max_bytes: int, rack_id: str = "",
               isolation_level: int = 0) -> dict:
    """A sessionless Fetch request for (topic, partition, offset) triples; ``rack_id``: the
    consumer's rack (v11+, KIP-392: the leader may name a replica in it to fetch from);
    ``isolation_level`` 1: read_committed (v4+, KIP-98)."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, offset in positions:
        topics.setdefault(topic, []).append({"partition": partition, "fetch_offset": offset,
                                             "log_start_offset": -1, "partition_max_bytes": partition_max_bytes,
                                             "current_leader_epoch": -1})
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": rack_id}


def list_offsets_body(requests: Iterable[tuple[str, int, int]], isolation_level: int = 0) -> dict:
    """A ListOffsets request for (topic, partition, timestamp) triples (-1 latest, -2 earliest);
    ``isolation_level`` 1: read_committed, where latest is the last stable offset (v2+)."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, ts in requests:
        topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": ts})
    return {"replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
