"""`appliance console-producer`: each line of stdin becomes one message (kafka-console-producer.sh).

`--property parse.key=true --property key.separator=:` splits a key off each line. Keyed
messages go to murmur2(key) % partitions (Kafka's partitioner); unkeyed ones stick to one
partition per batch.
"""

from __future__ import annotations

import argparse
import sys

from appliance.cli.common import (
    add_bootstrap,
    bootstrap_servers,
    command_config,
    parse_properties_args,
    tool_security,
)
from appliance.cli.main import CliError
from appliance.client.producer import CODECS, Producer
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="parse.key=true, key.separator=<sep> (default tab)")
    p.add_argument("--compression-codec", default="none", choices=sorted(CODECS))
    p.add_argument("--request-required-acks", type=int, default=-1, choices=(-1, 0, 1))
    p.add_argument("--batch-size", type=int, default=1000, help="messages per request (default 1000)")
    p.add_argument("--partition", type=int, help="send every message to this partition")


def _client_config(args: argparse.Namespace) -> dict:
    """--command-config's security settings, as client keys (errors name the file and key)."""
    tool_security(args)  # checked now: a bad file is one line before anything is sent
    return command_config(args)


def run(args: argparse.Namespace) -> int:
    props = parse_properties_args(args.property)
    parse_key = props.get("parse.key", "false").lower() == "true"
    sep = props.get("key.separator", "\t").encode()
    if args.batch_size <= 0:
        raise CliError(f"--batch-size {args.batch_size}: must be positive", 2)
    bootstrap_servers(args)  # checked before anything is sent
    timeout_ms = int(args.timeout * 1000)
    # Every --batch-size lines are flushed together: one batch per partition per flush, and
    # unkeyed lines move to another partition after each (the sticky partitioner).
    producer = Producer(_client_config(args), bootstrap_servers=args.bootstrap_server, acks=args.request_required_acks,
                        compression_type=args.compression_codec, linger_ms=3600000, batch_size=1 << 30,
                        max_request_size=1 << 30, queue_buffering_max_messages=args.batch_size + 1,
                        request_timeout_ms=timeout_ms, socket_connection_setup_timeout_ms=timeout_ms,
                        client_id="appliance-console-producer")
    futures = []
    try:
        n = len(producer.partitions_for(args.topic))
        if args.partition is not None and not 0 <= args.partition < n:
            raise CliError(f"--partition {args.partition}: topic {args.topic} has {n} partitions", 2)
        count = 0
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key = None
            if parse_key:
                k, s, v = line.partition(sep)
                if not s:
                    raise CliError(f"line {count + 1}: no key separator {sep.decode()!r} in {line[:40]!r}")
                key, line = k, v
            futures.append(producer.send(args.topic, (key, line), partition=args.partition))
            count += 1
            if count % args.batch_size == 0:
                _flush(producer, futures, args.topic)
                futures = []
        _flush(producer, futures, args.topic)
    except KafkaError as e:
        raise CliError(f"producing to {args.topic}: {e}") from e
    finally:
        producer.close(timeout=1)
    return 0


def _flush(producer: Producer, futures: list, topic: str) -> None:
    producer.flush()
    for f in futures:
        f.result()  # raises the first delivery error
