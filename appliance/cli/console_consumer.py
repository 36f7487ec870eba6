"""`appliance console-consumer`: print a topic's messages (kafka-console-consumer.sh).

Without --group it reads the chosen partitions itself (assign); with --group it joins that
consumer group (subscribe), starts from the group's committed offsets, and commits as it goes.

With --zookeeper it is the 0.8 console consumer: it reads through the ZooKeeper consumer
(:mod:`appliance.client.zk_consumer`, see zk_console.py), with --topic, --whitelist or
--blacklist, --consumer.config and --group (default: a console-consumer-<n> group, deleted
from ZooKeeper at exit as Kafka does).
"""

from __future__ import annotations

import argparse
import sys
import time

from appliance.cli.common import (
    add_bootstrap,
    bootstrap_servers,
    command_config,
    parse_properties_args,
    tool_security,
)
from appliance.cli.main import CliError
from appliance.client.consumer import Consumer, TopicPartition
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                   help="read through the 0.8 ZooKeeper consumer (its zookeeper.connect)")
    p.add_argument("--topic")
    p.add_argument("--whitelist", metavar="REGEX", help="with --zookeeper: every topic matching REGEX")
    p.add_argument("--blacklist", metavar="REGEX", help="with --zookeeper: every topic not matching REGEX")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="with --zookeeper: a 0.8 consumer.properties")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", default="latest",
                   help="earliest, latest or an offset (needs --partition); default latest")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, help="exit after this long with no message")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key, print.timestamp, print.offset, print.partition, key.separator")
    p.add_argument("--group", help="consume as a member of this consumer group (commits offsets)")


def _format(r, flag: dict[str, bool], sep: bytes) -> bytes:
    """``r``: a ConsumerRecord, or the ZooKeeper consumer's MessageAndMetadata (0.8 messages have
    no timestamp: print.timestamp shows none)."""
    fields = []
    if flag["print.timestamp"] and hasattr(r, "timestamp"):
        kind = "LogAppendTime" if r.timestamp_type == 1 else "CreateTime"
        fields.append(f"{kind}:{r.timestamp}".encode())
    if flag["print.partition"]:
        fields.append(f"Partition:{r.partition}".encode())
    if flag["print.offset"]:
        fields.append(f"Offset:{r.offset}".encode())
    if flag["print.key"]:
        fields.append(b"null" if r.key is None else r.key)
    value = r.value if hasattr(r, "value") else r.message
    fields.append(b"null" if value is None else value)
    return sep.join(fields) + b"\n"


def _client_config(args: argparse.Namespace) -> dict:
    """--command-config's security settings, as client keys (errors name the file and key)."""
    tool_security(args)  # checked now: a bad file is one line before anything is sent
    return command_config(args)


def run(args: argparse.Namespace) -> int:
    props = parse_properties_args(args.property)
    flag = {k: props.get(k, "false").lower() == "true"
            for k in ("print.key", "print.timestamp", "print.offset", "print.partition")}
    sep = props.get("key.separator", "\t").encode()
    chosen = [n for n in ("topic", "whitelist", "blacklist") if getattr(args, n)]
    if len(chosen) != 1:
        raise CliError("exactly one of --topic, --whitelist, --blacklist is needed", 2)
    if args.zookeeper:
        from appliance.cli.zk_console import run_zookeeper  # the ZooKeeper consumer only when asked

        return run_zookeeper(args, lambda m: _format(m, flag, sep))
    if not args.topic:
        raise CliError("--whitelist / --blacklist need --zookeeper (or use --topic)", 2)
    if args.consumer_config:
        raise CliError("--consumer.config is the ZooKeeper consumer's (with --zookeeper)", 2)
    where = "earliest" if args.from_beginning else args.offset
    if where not in ("earliest", "latest"):
        if args.partition is None:
            raise CliError("--offset N needs --partition", 2)
        if not where.lstrip("-").isdigit() or int(where) < 0:
            raise CliError(f"--offset {where!r}: expected earliest, latest or a non-negative number", 2)
    if args.group and (args.partition is not None or where not in ("earliest", "latest")):
        raise CliError("--group cannot be combined with --partition / --offset N", 2)
    bootstrap_servers(args)  # checked before anything is sent
    timeout_ms = int(args.timeout * 1000)
    consumer = Consumer(_client_config(args), bootstrap_servers=args.bootstrap_server, group_id=args.group,
                        auto_offset_reset="earliest" if where == "earliest" else "latest",
                        request_timeout_ms=timeout_ms, socket_connection_setup_timeout_ms=timeout_ms,
                        fetch_max_wait_ms=500, client_id="appliance-console-consumer")
    out = sys.stdout.buffer
    printed = 0
    done: dict[TopicPartition, int] = {}  # the next offset after each printed record
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            partitions = consumer.cluster.topic(args.topic, auto_create=False, timeout=args.timeout).partitions
            if args.partition is not None:
                if args.partition not in partitions:
                    raise CliError(f"--partition {args.partition}: topic {args.topic} has partitions "
                                   f"0..{len(partitions) - 1}", 2)
                partitions = [args.partition]
            tps = [TopicPartition(args.topic, p) for p in partitions]
            consumer.assign(tps)
            if where == "earliest":
                consumer.seek_to_beginning(tps)
            elif where == "latest":
                consumer.seek_to_end(tps)
            else:
                consumer.seek(tps[0], int(where))
        last_message = time.monotonic()
        while args.max_messages is None or printed < args.max_messages:
            records = consumer.poll(0.5)
            for r in records:
                if args.max_messages is not None and printed >= args.max_messages:
                    break
                out.write(_format(r, flag, sep))
                printed += 1
                done[TopicPartition(r.topic, r.partition)] = r.offset + 1
            out.flush()
            if records:
                last_message = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_message) * 1000 >= args.timeout_ms:
                break
        if args.group and done:
            # what was printed, not whatever the last poll returned past --max-messages
            consumer.commit_sync(done)
    except KafkaError as e:
        raise CliError(f"consuming {args.topic}: {e}") from e
    finally:
        consumer.close(autocommit=False)
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
