"""Fetch v0-3: the stored v2 batches down-converted to the message format the request version
understands (v0-1: magic 0, v2-3: magic 1), as Kafka does for clients older than 0.11.

Only old versions come here: current clients keep the zero-copy path (their records stay
FileSlices for sendfile), which is Kafka's rule too. Conversion keeps offsets, keys, values,
timestamps (magic 1) and each batch's codec (one wrapper message per compressed batch), in the
numba kernel (records/down_convert.py, native/down_convert.py); it drops
record headers and skips transaction markers, which the old formats cannot carry. A batch the
old format cannot carry (ZSTD) answers UNSUPPORTED_COMPRESSION_TYPE for its partition, as Kafka
does; whatever else goes wrong answers that partition's error code, never a broken message set.
Stored legacy entries (a topic in a pre-0.11 message format) go as they are when the
request's magic reads them, and magic 1 entries become magic 0 for v0-1 (never up-converted).
A topic with ``message.downconversion.enable=false`` answers UNSUPPORTED_VERSION instead (Kafka's
rule: old consumers of such a topic are refused rather than served at the broker's cost).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from appliance.config import TopicConfig
from appliance.errors import ErrorCode, KafkaError
from appliance.protocol.types import FileSlice
from appliance.records.down_convert import down_convert_stored

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext

__all__ = ["magic_for_version", "down_convert"]

FIRST_V2_FETCH_VERSION = 4  # Fetch v4 (Kafka 0.11) is the first that reads RecordBatch v2


def magic_for_version(version: int) -> int:
    """The message format a Fetch of ``version`` reads: 0 for v0-1, 1 for v2-3, 2 from v4."""
    return 2 if version >= FIRST_V2_FETCH_VERSION else (1 if version >= 2 else 0)


def _read(records: Any) -> bytes:
    if not isinstance(records, FileSlice):
        return bytes(records)
    src = records.fd_or_path
    if isinstance(src, int):
        return os.pread(src, records.length, records.position)
    with open(src, "rb") as f:
        f.seek(records.position)
        return f.read(records.length)


def _conversion_enabled(ctx: BrokerContext, topic: str) -> bool:
    parts = ctx.index.partitions(topic)
    if not parts:
        return True  # unknown topic: its partitions already carry their error
    overrides = ctx.readers.topic_overrides(parts[0].disk, topic)
    return bool(TopicConfig.from_overrides(ctx.config, overrides)["message.downconversion.enable"])


def down_convert(ctx: BrokerContext, response: Any, version: int) -> Any:
    """Convert every partition's records in a Fetch response body (the handler's data classes)
    to the magic of ``version`` (< 4), in place; returns the body."""
    magic = magic_for_version(version)
    for topic in response.responses:
        if not _conversion_enabled(ctx, topic.topic):
            for p in topic.partitions:
                if p.error_code == 0:
                    p.records, p.error_code = b"", ErrorCode.UNSUPPORTED_VERSION
            continue
        for p in topic.partitions:
            records = p.records
            size = records.length if isinstance(records, FileSlice) else len(records or b"")
            if size == 0:
                continue
            try:
                p.records = down_convert_stored(_read(records), magic=magic)
            except KafkaError as e:
                p.records, p.error_code = b"", e.code
            except OSError:
                p.records, p.error_code = b"", ErrorCode.KAFKA_STORAGE_ERROR
    return response
