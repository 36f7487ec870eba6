"""`appliance delete-records`: kafka-delete-records.sh. Moves the log start offset of each
partition in an offset JSON file (Kafka's format)::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}

Offset -1 means the partition's high watermark (delete everything written so far). Prints the
new low watermark (or the error) per partition; exit status 1 when any partition failed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from appliance.cli.common import Brokers, add_bootstrap, connect, tool_security
from appliance.cli.main import CliError
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run", "parse_offset_json"]

_API_KEY = 21  # DeleteRecords


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}')


def parse_offset_json(text: str, where: str = "--offset-json-file") -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} from Kafka's offset JSON; CliError naming the bad part."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{where}: not JSON: {e}", 2) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CliError(f'{where}: expected an object with a "partitions" list', 2)
    if doc.get("version", 1) != 1:
        raise CliError(f"{where}: unsupported version {doc.get('version')!r} (expected 1)", 2)
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(doc["partitions"]):
        if not isinstance(entry, dict):
            raise CliError(f"{where}: partitions[{i}] is not an object", 2)
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic:
            raise CliError(f'{where}: partitions[{i}]: "topic" must be a non-empty string, not {topic!r}', 2)
        for key, value in (("partition", partition), ("offset", offset)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise CliError(f'{where}: partitions[{i}]: "{key}" must be an integer, not {value!r}', 2)
        if partition < 0:
            raise CliError(f'{where}: partitions[{i}]: "partition" must be >= 0, not {partition}', 2)
        if offset < -1:
            raise CliError(f'{where}: partitions[{i}]: "offset" must be >= -1, not {offset}', 2)
        if (topic, partition) in out:
            raise CliError(f"{where}: duplicate partition {topic}-{partition}", 2)
        out[(topic, partition)] = offset
    if not out:
        raise CliError(f"{where}: no partitions given", 2)
    return out


def _error_name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


def run(args: argparse.Namespace) -> int:
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"--offset-json-file {args.offset_json_file}: {e.strerror or e}", 2) from e
    wanted = parse_offset_json(text)
    conn = connect(args)
    brokers = Brokers(conn, args.timeout, tool_security(args))
    try:
        # each partition's request goes to its leader, as kafka-delete-records.sh's admin client
        # does (another broker answers NOT_LEADER_OR_FOLLOWER); one request per leader
        leaders = brokers.leaders(sorted({t for t, _ in wanted}))
        by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for (topic, partition), offset in wanted.items():
            by_node.setdefault(leaders.get((topic, partition), -1), {}).setdefault(topic, []).append(
                {"partition_index": partition, "offset": offset})
        print("Executing records delete operation")
        answers = []
        for node, by_topic in by_node.items():
            c = brokers.to(node)
            # a cluster's leader holds the answer up to timeout_ms (until the ISR has followed):
            # wait past it, so its REQUEST_TIMED_OUT is what gets printed, not a socket timeout
            c.set_timeout(args.timeout + 5)
            answers.append(c.request(_API_KEY, {
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                "timeout_ms": int(args.timeout * 1000)}))
    finally:
        brokers.close()
        conn.close()
    print("Records delete operation completed:")
    failed = 0
    for resp in answers:
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    failed += 1
                    print(f"partition: {t.name}-{p.partition_index}\terror: {_error_name(p.error_code)}")
                else:
                    print(f"partition: {t.name}-{p.partition_index}\tlow_watermark: {p.low_watermark}")
    return 1 if failed else 0
