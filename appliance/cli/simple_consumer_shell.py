"""`appliance simple-consumer-shell`: print one partition's messages from an offset, through the
0.8 low-level consumer (Kafka's kafka.tools.SimpleConsumerShell, same options).

Output as Kafka's: each message's value on a line (``--property print.key=true`` puts the key
and ``key.separator`` first), preceded by ``next offset = N`` with ``--print-offsets``; with
``--no-wait-at-logend`` a last line ``Terminating. Reached the end of partition (T, P) at offset
N`` once a fetch comes back empty, otherwise it keeps waiting for new messages (Ctrl-C stops).
"""

from __future__ import annotations

import argparse
import sys

from appliance.cli.common import parse_properties_args
from appliance.cli.main import CliError
from appliance.client.simple_consumer import SimpleConsumer
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run"]

EARLIEST, LATEST = -2, -1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--broker-list", "--bootstrap-server", dest="broker_list", required=True,
                   metavar="HOST:PORT[,HOST:PORT]", help="brokers to find the partition's leader from")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0, help="the partition (default 0)")
    p.add_argument("--replica", type=int, default=-1,
                   help="read from this replica: only -1, the leader, is served (the default)")
    p.add_argument("--offset", type=int, default=EARLIEST,
                   help="start offset: -2 the earliest (default), -1 the latest, or an offset")
    p.add_argument("--clientId", dest="client_id", default="SimpleConsumerShell")
    p.add_argument("--fetchsize", type=int, default=1024 * 1024, help="bytes per fetch (default 1 MiB)")
    p.add_argument("--max-messages", type=int, default=2**31 - 1, help="stop after this many messages")
    p.add_argument("--max-wait-ms", type=int, default=1000,
                   help="how long a fetch waits at the log end for new messages (default 1000)")
    p.add_argument("--print-offsets", action="store_true", help="print 'next offset = N' before each message")
    p.add_argument("--no-wait-at-logend", action="store_true", help="stop at the end of the partition")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="print.key=true, key.separator=<sep> (default tab), line.separator (default newline)")


def run(args: argparse.Namespace) -> int:
    if args.replica != -1:
        raise CliError(f"--replica {args.replica}: only the leader (-1) is read here", 2)
    if args.fetchsize <= 0 or args.max_wait_ms < 0 or args.max_messages < 0:
        raise CliError("--fetchsize must be positive, --max-wait-ms and --max-messages not negative", 2)
    props = parse_properties_args(args.property)
    print_key = props.get("print.key", "false").lower() == "true"
    key_sep = props.get("key.separator", "\t").encode()
    line_sep = props.get("line.separator", "\n").encode()
    out = sys.stdout.buffer
    try:
        with SimpleConsumer(args.broker_list, {"client.id": args.client_id}) as sc:
            offset = args.offset
            if offset in (EARLIEST, LATEST):
                found = sc.get_offsets_before(args.topic, args.partition, offset)
                offset = found[0] if found else 0
            printed = 0
            while printed < args.max_messages:
                records = sc.fetch(args.topic, args.partition, offset, max_bytes=args.fetchsize,
                                   max_wait_ms=0 if args.no_wait_at_logend else args.max_wait_ms)
                if not records and args.no_wait_at_logend:
                    out.write(f"Terminating. Reached the end of partition ({args.topic}, {args.partition}) "
                              f"at offset {offset}\n".encode())
                    break
                for r in records:
                    if r.offset < offset:  # a batch starts before the offset asked for
                        continue
                    offset = r.offset + 1
                    if args.print_offsets:
                        out.write(f"next offset = {offset}\n".encode())
                    if print_key:
                        out.write((b"null" if r.key is None else r.key) + key_sep)
                    out.write((b"null" if r.value is None else r.value) + line_sep)
                    printed += 1
                    if printed >= args.max_messages:
                        break
                out.flush()
    except (KafkaError, ValueError) as e:
        raise CliError(f"{args.topic}-{args.partition}: {e}") from e
    finally:
        out.flush()
    return 0
