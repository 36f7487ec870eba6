"""`appliance consumer-groups`: --list, --describe, --reset-offsets, --delete (kafka-consumer-groups.sh)."""

from __future__ import annotations

import argparse
import datetime as dt

from appliance.cli.common import Brokers, add_bootstrap, check, connect, metadata, tool_security
from appliance.cli.main import CliError
from appliance.client.connection import BrokerConnection
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the groups")
    action.add_argument("--describe", action="store_true", help="offsets, lag and members of --group")
    action.add_argument("--reset-offsets", action="store_true", help="move --group's committed offsets")
    action.add_argument("--delete", action="store_true", help="delete --group (it must be empty)")
    p.add_argument("--group", help="group id")
    p.add_argument("--topic", help="limit --reset-offsets to this topic (topic or topic:p1,p2)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group has offsets for")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--to-earliest", action="store_true")
    where.add_argument("--to-latest", action="store_true")
    where.add_argument("--to-offset", type=int, metavar="N")
    where.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                       help="the first offset at or after this time (UTC unless a zone is given)")
    p.add_argument("--execute", action="store_true", help="apply the reset (default: only show it)")


def _need_group(args: argparse.Namespace) -> str:
    if not args.group:
        raise CliError("--group is required for this action", 2)
    return args.group


def _committed(conn, group: str) -> dict[tuple[str, int], int]:
    resp = conn.request(9, {"group_id": group, "topics": None})
    check(resp.error_code, f"fetching offsets of group {group}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, f"offset of {t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def _list_offsets(brokers: Brokers, parts: list[tuple[str, int]], ts: int) -> dict[tuple[str, int], int]:
    leaders = brokers.leaders(sorted({t for t, _ in parts}))
    by_node: dict[int, dict[str, list[int]]] = {}
    for t, p in parts:
        by_node.setdefault(leaders.get((t, p), -1), {}).setdefault(t, []).append(p)
    out = {}
    for node, by_topic in by_node.items():
        resp = brokers.to(node).request(2, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "timestamp": ts} for p in ps]}
            for t, ps in by_topic.items()]})
        for t in resp.topics:
            for p in t.partitions:
                check(p.error_code, f"offsets of {t.name}-{p.partition_index}")
                out[(t.name, p.partition_index)] = p.offset
    return out


def _describe_group(conn, group: str):
    g = conn.request(15, {"groups": [group], "include_authorized_operations": False}).groups[0]
    check(g.error_code, f"describing group {group}")
    return g


def _assignments(g) -> dict[tuple[str, int], str]:
    """(topic, partition) -> member id, from the consumer protocol's assignment bytes."""
    from appliance.coordinator.consumer_protocol import decode_assignment
    owner = {}
    for m in g.members:
        if g.protocol_type == "consumer" and m.member_assignment:
            try:
                for topic, parts in decode_assignment(m.member_assignment):
                    for p in parts:
                        owner[(topic, p)] = f"{m.member_id} {m.client_host} {m.client_id}"
            except ValueError:
                continue
    return owner


def _parse_datetime(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as e:
        raise CliError(f"--to-datetime {text!r}: expected ISO 8601 like 2026-01-31T12:00:00.000", 2) from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    with connect(args) as boot:
        if args.list:  # in a cluster each broker lists the groups it coordinates
            brokers = Brokers(boot, args.timeout, tool_security(args))
            try:
                names = set()
                for node in sorted(brokers.addresses) or [-1]:
                    resp = brokers.to(node).request(16, {})
                    check(resp.error_code, "listing groups")
                    names.update(g.group_id for g in resp.groups)
            finally:
                brokers.close()
            for name in sorted(names):
                print(name)
            return 0
        group = _need_group(args)
        brokers = Brokers(boot, args.timeout, tool_security(args))
        try:
            return _run_group(args, brokers, brokers.coordinator(group), group)
        finally:
            brokers.close()


def _run_group(args: argparse.Namespace, brokers: Brokers, conn: BrokerConnection, group: str) -> int:
    """--delete, --describe, --reset-offsets of one group; ``conn`` is its coordinator."""
    if args.delete:
        r = conn.request(42, {"groups_names": [group]}).results[0]
        if r.error_code == ErrorCode.NON_EMPTY_GROUP:
            raise CliError(f"group {group} is not empty (it has active members); stop them first")
        check(r.error_code, f"deleting group {group}")
        print(f"Deletion of requested consumer groups ('{group}') was successful.")
        return 0
    if args.describe:
        g = _describe_group(conn, group)
        committed = _committed(conn, group)
        owner = _assignments(g)
        parts = sorted(set(committed) | set(owner))
        ends = _list_offsets(brokers, parts, -1) if parts else {}
        if not parts:
            print(f"Consumer group '{group}' has no active members and no committed offsets.")
            return 0
        print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'CURRENT-OFFSET':>14} "
              f"{'LOG-END-OFFSET':>14} {'LAG':>6}  CONSUMER-ID HOST CLIENT-ID")
        for key in parts:
            cur = committed.get(key)
            end = ends.get(key, -1)
            lag = end - cur if cur is not None and end >= 0 else None
            print(f"{group:<20} {key[0]:<20} {key[1]:>9} {'-' if cur is None else cur:>14} "
                  f"{end:>14} {'-' if lag is None else lag:>6}  {owner.get(key, '- - -')}")
        print(f"\nGroup state: {g.group_state}, {len(g.members)} member(s)")
        return 0
    # --reset-offsets
    if not (args.to_earliest or args.to_latest or args.to_offset is not None or args.to_datetime):
        raise CliError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --to-datetime", 2)
    g = _describe_group(conn, group)
    if g.group_state not in ("Empty", "Dead"):
        raise CliError(f"group {group} is {g.group_state}: offsets can only be reset while it "
                       f"has no active members")
    committed = _committed(conn, group)
    if args.topic:
        topic, _, plist = args.topic.partition(":")
        md = metadata(conn, [topic]).topics[0]
        check(md.error_code, f"topic {topic}")
        wanted = [int(x) for x in plist.split(",")] if plist else [p.partition_index for p in md.partitions]
        parts = [(topic, p) for p in sorted(wanted)]
    elif args.all_topics:
        parts = sorted(committed)
    else:
        raise CliError("--reset-offsets needs --topic or --all-topics", 2)
    if args.to_earliest:
        target = _list_offsets(brokers, parts, -2)
    elif args.to_latest:
        target = _list_offsets(brokers, parts, -1)
    elif args.to_offset is not None:
        if args.to_offset < 0:
            raise CliError(f"--to-offset {args.to_offset}: must not be negative", 2)
        low, high = _list_offsets(brokers, parts, -2), _list_offsets(brokers, parts, -1)
        target = {k: min(max(args.to_offset, low[k]), high[k]) for k in parts}
    else:
        ts = _parse_datetime(args.to_datetime)
        found = _list_offsets(brokers, parts, ts)
        latest = _list_offsets(brokers, parts, -1)
        target = {k: (v if v >= 0 else latest[k]) for k, v in found.items()}
    print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':>9} {'NEW-OFFSET':>10}")
    for (t, p) in parts:
        print(f"{group:<20} {t:<20} {p:>9} {target[(t, p)]:>10}")
    if not args.execute:
        print("(dry run: add --execute to apply)")
        return 0
    by_topic: dict[str, list] = {}
    for (t, p), off in target.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                           "committed_metadata": ""})
    resp = conn.request(8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                            "retention_time_ms": -1,
                            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    for t in resp.topics:
        for p in t.partitions:
            check(p.error_code, f"committing {t.name}-{p.partition_index}")
    return 0
