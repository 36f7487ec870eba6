"""`appliance console-consumer`: print a topic's messages (kafka-console-consumer.sh)."""

from __future__ import annotations

import argparse
import sys
import time

from appliance.cli.common import add_bootstrap, check, connect, metadata, parse_properties_args
from appliance.cli.main import CliError
from appliance.records.batch import decode_batch, iter_batches

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", default="latest",
                   help="earliest, latest or an offset (needs --partition); default latest")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, help="exit after this long with no message")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.timestamp, print.offset, print.partition, key.separator")


def _start_offsets(conn, topic: str, partitions: list[int], where: str) -> dict[int, int]:
    if where not in ("earliest", "latest"):
        return {p: int(where) for p in partitions}
    ts = -2 if where == "earliest" else -1
    resp = conn.request(2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "timestamp": ts} for p in partitions]}]})
    out = {}
    for pr in resp.topics[0].partitions:
        check(pr.error_code, f"offsets of {topic}-{pr.partition_index}")
        out[pr.partition_index] = pr.offset
    return out


def run(args: argparse.Namespace) -> int:
    props = parse_properties_args(args.property)
    flag = {k: props.get(k, "false").lower() == "true"
            for k in ("print.key", "print.timestamp", "print.offset", "print.partition")}
    sep = props.get("key.separator", "\t")
    where = "earliest" if args.from_beginning else args.offset
    if where not in ("earliest", "latest"):
        if args.partition is None:
            raise CliError("--offset N needs --partition", 2)
        if not where.lstrip("-").isdigit() or int(where) < 0:
            raise CliError(f"--offset {where!r}: expected earliest, latest or a non-negative number", 2)
    out = sys.stdout.buffer
    with connect(args) as conn:
        md = metadata(conn, [args.topic]).topics[0]
        check(md.error_code, f"topic {args.topic}")
        partitions = sorted(p.partition_index for p in md.partitions)
        if args.partition is not None:
            if args.partition not in partitions:
                raise CliError(f"--partition {args.partition}: topic {args.topic} has partitions "
                               f"0..{len(partitions) - 1}", 2)
            partitions = [args.partition]
        positions = _start_offsets(conn, args.topic, partitions, where)
        printed = 0
        last_message = time.monotonic()
        while args.max_messages is None or printed < args.max_messages:
            resp = conn.request(1, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
                                    "max_bytes": 52428800, "isolation_level": 0, "session_id": 0,
                                    "session_epoch": -1, "topics": [{"topic": args.topic, "partitions": [
                                        {"partition": p, "fetch_offset": positions[p],
                                         "log_start_offset": -1, "partition_max_bytes": 1048576}
                                        for p in partitions]}], "forgotten_topics_data": [],
                                    "rack_id": ""})
            got = False
            for t in resp.responses:
                for pr in t.partitions:
                    check(pr.error_code, f"fetching {args.topic}-{pr.partition_index}")
                    data = bytes(pr.records or b"")
                    for pos, _ in iter_batches(data, allow_partial=True):
                        _, records = decode_batch(data, pos)
                        for r in records:
                            if r.offset < positions[pr.partition_index]:
                                continue
                            fields = []
                            if flag["print.timestamp"]:
                                fields.append(f"CreateTime:{r.timestamp}".encode())
                            if flag["print.partition"]:
                                fields.append(f"Partition:{pr.partition_index}".encode())
                            if flag["print.offset"]:
                                fields.append(f"Offset:{r.offset}".encode())
                            if flag["print.key"]:
                                fields.append(b"null" if r.key is None else r.key)
                            fields.append(b"null" if r.value is None else r.value)
                            out.write(sep.encode().join(fields) + b"\n")
                            positions[pr.partition_index] = r.offset + 1
                            printed += 1
                            got = True
                            if args.max_messages is not None and printed >= args.max_messages:
                                break
            out.flush()
            if got:
                last_message = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= args.timeout_ms:
                break
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
