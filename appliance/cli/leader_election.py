"""`appliance leader-election`: Kafka's kafka-leader-election.sh, through ElectLeaders (API 43).

    appliance leader-election --bootstrap-server H:P --election-type preferred --all-topic-partitions
    appliance leader-election --bootstrap-server H:P --election-type unclean --topic T --partition 0
    appliance leader-election --bootstrap-server H:P --election-type preferred --path-to-json-file F

The JSON file is Kafka's: ``{"partitions":[{"topic":"t","partition":0}]}``. The request goes to
the controller named in Metadata (asked again while it answers NOT_CONTROLLER). Per partition
the answer is printed as Kafka's tool does; exit status 1 when any partition could not be
elected (a partition that already has the wanted leader is not a failure).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from appliance.cli.common import add_bootstrap, connect, metadata, tool_security
from appliance.cli.controller_request import ask_controller
from appliance.cli.main import CliError
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run", "parse_partitions_file", "elect"]

_TYPES = {"preferred": 0, "unclean": 1}
_ELECT_LEADERS = 43
_VERSION = 1  # the first with election_type (KIP-460)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--election-type", required=True, choices=sorted(_TYPES),
                   help="preferred: the first replica, if in sync; unclean: any live replica, "
                        "only for a partition without a leader")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    which.add_argument("--topic", help="one partition of this topic (with --partition)")
    which.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions":[{"topic":"t","partition":0}]}')
    p.add_argument("--partition", type=int, help="the partition of --topic")


def parse_partitions_file(text: str) -> list[tuple[str, int]]:
    """Raises CliError naming the key or the entry at fault."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise CliError(f"--path-to-json-file is not valid JSON: {e}", 2) from None
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError("--path-to-json-file: 'partitions' must be a non-empty list", 2)
    out = []
    for e in entries:
        topic = e.get("topic") if isinstance(e, dict) else None
        partition = e.get("partition") if isinstance(e, dict) else None
        if not isinstance(topic, str) or not topic:
            raise CliError(f"--path-to-json-file: entry {e!r} has no 'topic'", 2)
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise CliError(f"--path-to-json-file: 'partition' of {topic} must be an integer >= 0", 2)
        if (topic, partition) in out:
            raise CliError(f"--path-to-json-file: partition {topic}-{partition} is listed twice", 2)
        out.append((topic, partition))
    return out


def elect(args: argparse.Namespace, election_type: int,
          partitions: list[tuple[str, int]] | None) -> Any:
    """The controller's ElectLeaders answer. Raises CliError when no controller answers."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions or []:
        by_topic.setdefault(t, []).append(p)
    body = {"election_type": election_type, "timeout_ms": int(args.timeout * 1000),
            "topic_partitions": None if partitions is None else [
                {"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
    with connect(args) as conn:
        if _ELECT_LEADERS not in conn.versions:
            raise CliError(f"broker {conn.address} does not serve ElectLeaders")

        def locate() -> tuple[int, dict[int, tuple[str, int]]]:
            md = metadata(conn, [])
            return md.controller_id, {b.node_id: (b.host, b.port) for b in md.brokers}

        return ask_controller(locate, _ELECT_LEADERS, _VERSION, body, args.timeout, "leader election",
                              client_id="appliance-leader-election", security=tool_security(args))


def run(args: argparse.Namespace) -> int:
    if args.topic is not None and args.partition is None:
        raise CliError("--topic needs --partition", 2)
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", 2)
    if args.path_to_json_file:
        try:
            partitions = parse_partitions_file(Path(args.path_to_json_file).read_text())
        except OSError as e:
            raise CliError(f"--path-to-json-file {args.path_to_json_file}: {e.strerror or e}", 2) from e
    elif args.topic is not None:
        partitions = [(args.topic, args.partition)]
    else:
        partitions = None
    answer = elect(args, _TYPES[args.election_type], partitions)
    if answer.error_code:
        name = ErrorCode(answer.error_code).name if answer.error_code in ErrorCode._value2member_map_ else answer.error_code
        raise CliError(f"leader election failed: {name}")
    done, not_needed, failed = [], [], []
    for t in answer.replica_election_results:
        for r in t.partition_result:
            tp = f"{t.topic}-{r.partition_id}"
            if r.error_code == 0:
                done.append(tp)
            elif r.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                not_needed.append(tp)
            else:
                code = ErrorCode(r.error_code).name if r.error_code in ErrorCode._value2member_map_ else r.error_code
                failed.append(f"{tp}: {code}" + (f" ({r.error_message})" if r.error_message else ""))
    kind = args.election_type.upper()
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for f in failed:
        print(f"Error completing leader election ({kind}) for partition: {f}")
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0
