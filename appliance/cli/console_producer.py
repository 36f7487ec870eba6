"""`appliance console-producer`: each line of stdin becomes one message (kafka-console-producer.sh).

`--property parse.key=true --property key.separator=:` splits a key off each line. Keyed
messages go to murmur2(key) % partitions (Kafka's partitioner); unkeyed ones stick to one
partition per batch.
"""

from __future__ import annotations

import argparse
import sys
import time

from appliance.cli.common import add_bootstrap, check, connect, metadata, parse_properties_args
from appliance.cli.main import CliError
from appliance.client.partitioner import StickyPartitioner, partition_for
from appliance.records.batch import Compression, build_batch

__all__ = ["add_arguments", "run"]

CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=<sep> (default tab)")
    p.add_argument("--compression-codec", default="none", choices=sorted(CODECS))
    p.add_argument("--request-required-acks", type=int, default=-1, choices=(-1, 0, 1))
    p.add_argument("--batch-size", type=int, default=1000, help="messages per request (default 1000)")
    p.add_argument("--partition", type=int, help="send every message to this partition")


def _send(conn, topic: str, batches: dict[int, list], acks: int, codec: Compression) -> None:
    data = [{"index": p, "records": build_batch(recs, compression=codec)}
            for p, recs in batches.items() if recs]
    if not data:
        return
    resp = conn.request(0, {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                            "topic_data": [{"name": topic, "partition_data": data}]})
    if resp is None:
        return
    for t in resp.responses:
        for pr in t.partition_responses:
            check(pr.error_code, f"producing to {topic}-{pr.index}")


def run(args: argparse.Namespace) -> int:
    props = parse_properties_args(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    sep = props.get("key.separator", "\t").encode()
    if args.batch_size <= 0:
        raise CliError(f"--batch-size {args.batch_size}: must be positive", 2)
    with connect(args) as conn:
        md = None
        for _ in range(50):  # the topic may be auto-created by this very request
            md = metadata(conn, [args.topic], auto_create=True).topics[0]
            if md.error_code not in (5, 3) or md.partitions:
                break
            time.sleep(0.1)
        check(md.error_code, f"topic {args.topic}")
        n = len(md.partitions)
        if args.partition is not None and not 0 <= args.partition < n:
            raise CliError(f"--partition {args.partition}: topic {args.topic} has {n} partitions", 2)
        sticky = StickyPartitioner()
        pending: dict[int, list] = {}
        count = 0
        stdin = sys.stdin.buffer
        for raw in stdin:
            line = raw.rstrip(b"\r\n")
            key = None
            if parse_key:
                k, s, v = line.partition(sep)
                if not s:
                    raise CliError(f"line {count + 1}: no key separator {sep.decode()!r} in {line[:40]!r}")
                key, line = k, v
            if args.partition is not None:
                part = args.partition
            elif key is not None:
                part = partition_for(key, n)
            else:
                part = sticky.partition(args.topic, n)
            pending.setdefault(part, []).append((key, line))
            count += 1
            if count % args.batch_size == 0:
                _send(conn, args.topic, pending, args.request_required_acks, CODECS[args.compression_codec])
                pending = {}
                sticky.next(args.topic, n)
        _send(conn, args.topic, pending, args.request_required_acks, CODECS[args.compression_codec])
    return 0
