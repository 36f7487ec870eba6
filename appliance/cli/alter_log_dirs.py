"""`appliance alter-log-dirs`: move a partition to another log dir of the broker, online
(AlterReplicaLogDirs; kafka-reassign-partitions' log_dirs in one command).

    appliance alter-log-dirs --bootstrap-server B --topic T --partition P --to-dir /data/disk1

Answers when the move is done: "Moved T-P to D." or the Kafka error (LOG_DIR_NOT_FOUND: not a
log dir of the broker; KAFKA_STORAGE_ERROR: that disk is offline or full, the partition stayed
where it was), exit status 1.
"""

from __future__ import annotations

import argparse

from appliance.cli.common import add_bootstrap, check, connect

__all__ = ["add_arguments", "run"]

_API_KEY = 34  # AlterReplicaLogDirs


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--to-dir", required=True, metavar="DIR", help="a log dir of the broker (as in log.dirs)")
    p.set_defaults(timeout=300.0)  # the answer comes when the copy is done


def run(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        resp = conn.request(_API_KEY, {"dirs": [{"path": args.to_dir, "topics": [
            {"name": args.topic, "partitions": [args.partition]}]}]})
    code = resp.results[0].partitions[0].error_code
    check(code, f"moving {args.topic}-{args.partition} to {args.to_dir}")
    print(f"Moved {args.topic}-{args.partition} to {args.to_dir}.")
    return 0
