"""`appliance dump-log --files A.log[,B.log]`: decode segment files (kafka-dump-log.sh)."""

from __future__ import annotations

import argparse
import mmap
import os

from appliance.cli.main import CliError
from appliance.records.batch import decode_batch, read_header

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", required=True, help="comma-separated .log segment files")
    p.add_argument("--verify-crc", action="store_true", help="check every batch's CRC32C")
    p.add_argument("--print-data-log", action="store_true", help="print each record too")


def _dump(path: str, verify: bool, print_data: bool) -> int:
    from native.scan import SCAN_END, scan_batches
    print(f"Dumping {path}")
    size = os.path.getsize(path)
    if size == 0:
        print("Log starting offset: (empty segment)")
        return 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        scan = scan_batches(mm, 0, size, verify_crc=verify)
        print(f"Log starting offset: {int(scan.base_offsets[0]) if scan.count else '?'}")
        for i in range(scan.count):
            pos = int(scan.positions[i])
            h = read_header(mm, pos)
            codec = h.compression.name.lower()
            print(f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                  f"baseSequence: {h.base_sequence} producerId: {h.producer_id} "
                  f"producerEpoch: {h.producer_epoch} isTransactional: {str(h.is_transactional).lower()} "
                  f"position: {pos} {'LogAppendTime' if h.timestamp_type else 'CreateTime'}: "
                  f"{h.max_timestamp} size: {h.size} magic: {h.magic} compresscodec: {codec} "
                  f"crc: {h.crc} isvalid: {str(bool(scan.crc_ok[i])).lower()}")
            if print_data and scan.crc_ok[i]:
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


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in [p for p in args.files.split(",") if p]:
        if not os.path.isfile(path):
            raise CliError(f"--files: {path} is not a file", 2)
        status |= _dump(path, args.verify_crc, args.print_data_log)
    return status
