"""`appliance log-dirs --describe`: the broker's log dirs, each with its error and the size of
every partition in it, as JSON in the shape of Kafka's kafka-log-dirs.sh (DescribeLogDirs)."""

from __future__ import annotations

import argparse
import json

from appliance.cli.common import add_bootstrap, connect
from appliance.cli.main import CliError
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run", "describe"]

# Kafka's exception names for the per-dir error, as kafka-log-dirs prints them
_ERROR_NAMES = {ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true",
                        help="print each log dir, its error and its partitions' sizes (JSON)")
    p.add_argument("--topic-list", default="", metavar="T1,T2",
                   help="only these topics (default: every topic)")


def describe(conn, topics: list[str]) -> dict:
    """The kafka-log-dirs JSON for the broker ``conn`` talks to."""
    wanted = None
    if topics:  # DescribeLogDirs takes explicit partitions: ask Metadata which exist
        md = conn.request(3, {"topics": [{"name": t} for t in topics],
                              "allow_auto_topic_creation": False})
        wanted = [{"topic": t.name, "partitions": [p.partition_index for p in t.partitions]}
                  for t in md.topics if not t.error_code]
    resp = conn.request(35, {"topics": wanted})
    dirs = []
    for r in resp.results:
        error = None
        if r.error_code:
            error = _ERROR_NAMES.get(r.error_code) or (
                ErrorCode(r.error_code).name if r.error_code in ErrorCode._value2member_map_
                else str(r.error_code))
        parts = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                  "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                 for t in r.topics for p in t.partitions]
        dirs.append({"logDir": r.log_dir, "error": error, "partitions": parts})
    broker = conn.request(3, {"topics": [], "allow_auto_topic_creation": False}).brokers
    broker_id = broker[0].node_id if broker else -1
    return {"version": 1, "brokers": [{"broker": broker_id, "logDirs": dirs}]}


def run(args: argparse.Namespace) -> int:
    if not args.describe:
        raise CliError("nothing to do: give --describe", 2)
    topics = [t.strip() for t in args.topic_list.split(",") if t.strip()]
    conn = connect(args)
    try:
        out = describe(conn, topics)
    finally:
        conn.close()
    print("Querying brokers for log directories information")
    print(f"Received log directory information from brokers {out['brokers'][0]['broker']}")
    print(json.dumps(out, separators=(",", ":")))
    return 0
