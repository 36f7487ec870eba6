"""`appliance dump-log --files A.log[,B.index,C.timeindex,D.txnindex]`: decode segment and index
files (kafka-dump-log.sh; offset and time index files: :mod:`appliance.cli.dump_index`).

A transaction marker (a control batch) prints its record as Kafka's DumpLogSegments does,
``endTxnMarker: COMMIT coordinatorEpoch: N``, with or without --print-data-log (it holds no
data); a ``.txnindex`` prints its aborted transactions, one a line.

Segments of a topic stored in a pre-0.11 message format hold legacy magic 0/1 entries (mixed
with v2 batches after a format change): each prints as Kafka prints a legacy entry, its offset
(a wrapper's: its last inner message's), magic, CRC32, codec and timestamp, and with
--print-data-log each message it holds.
"""

from __future__ import annotations

import argparse
import mmap
import os

from appliance.cli.dump_index import INDEX_SUFFIXES, dump_index
from appliance.cli.main import CliError
from appliance.errors import KafkaError
from appliance.records.batch import decode_batch, read_header
from appliance.records.control import marker_of_record
from appliance.records.legacy import HEADER_V0, HEADER_V1, iter_entries
from appliance.storage.txn_index import ENTRY, TXN_INDEX_SUFFIX, read_entries
from native.legacy_layout import MAGIC_OFFSET

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", required=True,
                   help="comma-separated .log, .index, .timeindex and .txnindex files")
    p.add_argument("--verify-crc", action="store_true", help="check every batch's CRC32C")
    p.add_argument("--print-data-log", action="store_true", help="print each record too")
    p.add_argument("--verify-index-only", action="store_true",
                   help="index files: check each entry against the log, print only the mismatches")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="index files: only the checks the broker runs when it opens an index")


def _dump(path: str, verify: bool, print_data: bool) -> int:
    from native.scan import SCAN_END, scan_batches
    print(f"Dumping {path}")
    size = os.path.getsize(path)
    if size == 0:
        print("Log starting offset: (empty segment)")
        return 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        scan = scan_batches(mm, 0, size, verify_crc=verify, legacy=True)
        print(f"Log starting offset: {int(scan.base_offsets[0]) if scan.count else '?'}")
        for i in range(scan.count):
            pos = int(scan.positions[i])
            if mm[pos + MAGIC_OFFSET] < 2:
                _legacy_entry(mm, pos, int(scan.sizes[i]), bool(scan.crc_ok[i]), print_data)
                continue
            h = read_header(mm, pos)
            codec = h.compression.name.lower()
            print(f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                  f"baseSequence: {h.base_sequence} producerId: {h.producer_id} "
                  f"producerEpoch: {h.producer_epoch} isTransactional: {str(h.is_transactional).lower()} "
                  f"isControl: {str(h.is_control).lower()} position: {pos} {'LogAppendTime' if h.timestamp_type else 'CreateTime'}: "
                  f"{h.max_timestamp} size: {h.size} magic: {h.magic} compresscodec: {codec} "
                  f"crc: {h.crc} isvalid: {str(bool(scan.crc_ok[i])).lower()}")
            if h.is_control and scan.crc_ok[i]:
                _control_records(mm, pos)
            elif print_data and scan.crc_ok[i]:
                for r in decode_batch(mm, pos)[1]:
                    key = "null" if r.key is None else r.key.decode(errors="replace")
                    val = "null" if r.value is None else r.value.decode(errors="replace")
                    hdrs = ",".join(f"{k}:{'null' if v is None else v.decode(errors='replace')}"
                                    for k, v in r.headers)
                    print(f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: "
                          f"{-1 if r.key is None else len(r.key)} valueSize: "
                          f"{-1 if r.value is None else len(r.value)} headerKeys: [{hdrs}] "
                          f"key: {key} payload: {val}")
        if scan.stop_reason != SCAN_END:
            print(f"Found {size - scan.stop_position} invalid bytes at position "
                  f"{scan.stop_position} of {path} (scan stop reason {scan.stop_reason})")
            return 1
    return 0


def _control_records(mm: mmap.mmap, pos: int) -> None:
    """The records of a control batch: an end-transaction marker's type and coordinator epoch."""
    h, records = decode_batch(mm, pos)
    for r in records:
        try:
            marker = marker_of_record(h, r.key, r.value)
        except KafkaError as e:
            print(f"| offset: {r.offset} unreadable control record: {e}")
            continue
        what = ("unknown control type" if marker is None else
                f"endTxnMarker: {'COMMIT' if marker.commit else 'ABORT'} "
                f"coordinatorEpoch: {marker.coordinator_epoch}")
        print(f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: "
              f"{-1 if r.key is None else len(r.key)} valueSize: "
              f"{-1 if r.value is None else len(r.value)} sequence: -1 headerKeys: [] {what}")


def _dump_txn_index(path: str) -> int:
    """Every aborted transaction of a ``.txnindex`` (Kafka's dumpTxnIndex); a torn tail is
    reported."""
    print(f"Dumping {path}")
    for e in read_entries(path):
        print(f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
              f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}")
    extra = os.path.getsize(path) % ENTRY.size
    if extra:
        print(f"Found {extra} bytes of a partial entry at the end of {path}")
        return 1
    return 0


def _legacy_entry(mm: mmap.mmap, pos: int, size: int, crc_ok: bool, print_data: bool) -> None:
    """One magic 0/1 entry, as Kafka's DumpLogSegments prints a legacy record."""
    magic = mm[pos + MAGIC_OFFSET]
    fields = (HEADER_V1 if magic else HEADER_V0).unpack_from(mm, pos)
    offset, _, crc, _, attributes = fields[:5]
    ts_name = ("NoTimestampType" if magic == 0 else
               "LogAppendTime" if attributes & 0x08 else "CreateTime")
    ts = fields[5] if magic else -1
    codec = ("none", "gzip", "snappy", "lz4")[attributes & 0x07] if attributes & 0x07 < 4 \
        else str(attributes & 0x07)
    print(f"offset: {offset} position: {pos} {ts_name}: {ts} size: {size} magic: {magic} "
          f"compresscodec: {codec} crc: {crc} isvalid: {str(crc_ok).lower()}")
    if not (print_data and crc_ok):
        return
    for entry in iter_entries(mm[pos:pos + size]):
        for m in entry.messages:
            key = "null" if m.key is None else m.key.decode(errors="replace")
            val = "null" if m.value is None else m.value.decode(errors="replace")
            print(f"| offset: {m.offset} {ts_name}: {m.timestamp} keySize: "
                  f"{-1 if m.key is None else len(m.key)} valueSize: "
                  f"{-1 if m.value is None else len(m.value)} magic: {magic} "
                  f"key: {key} payload: {val}")


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in [p for p in args.files.split(",") if p]:
        if not os.path.isfile(path):
            raise CliError(f"--files: {path} is not a file", 2)
        if path.endswith(TXN_INDEX_SUFFIX):
            status |= _dump_txn_index(path)
        elif path.endswith(INDEX_SUFFIXES):
            print(f"Dumping {path}")
            status |= dump_index(path, args.verify_index_only, args.index_sanity_check)
        else:
            status |= _dump(path, args.verify_crc, args.print_data_log)
    return status
