"""Kafka record formats: RecordBatch v2, legacy magic 0/1 message sets, codecs, conversion.

Pure Python, no I/O, stateless (thread-safe). Submodules:

- :mod:`.batch` — v2 batches: validate, decode, build, patch in place
- :mod:`.batch_layout` — the v2 header layout, declared once
- :mod:`.varint` — zigzag varints
- :mod:`.compression` — gzip, snappy (xerial + raw), lz4 frame, zstd, with a size cap
- :mod:`.legacy` — magic 0/1 message sets
- :mod:`.convert` — legacy <-> v2
"""

from appliance.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    build_batch,
    decode_batch,
    decode_records,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
    validate_records,
)
from appliance.records.compression import compress, decompress
from appliance.records.convert import legacy_to_v2, records_magic, v2_to_legacy
from appliance.records.legacy import (
    LegacyMessage,
    build_message_set,
    iter_message_set,
    validate_message_set,
)
from appliance.records.record_types import Compression, Record, TimestampType

__all__ = [
    "Compression", "TimestampType", "Record", "BatchHeader", "HEADER_SIZE", "read_header",
    "validate_batch", "validate_records", "decode_batch", "iter_batches", "decode_records",
    "build_batch", "set_base_offset", "set_log_append_time", "set_partition_leader_epoch",
    "compress", "decompress", "LegacyMessage", "build_message_set", "iter_message_set",
    "validate_message_set", "legacy_to_v2", "v2_to_legacy", "records_magic",
]
