"""`appliance topics`: --create / --list / --describe / --alter / --delete, as kafka-topics.sh."""

from __future__ import annotations

import argparse
import time

from appliance.cli.common import add_bootstrap, check, connect, metadata, parse_properties_args
from appliance.cli.configs import DELETE, SET
from appliance.cli.main import CliError

__all__ = ["add_arguments", "run", "parse_replica_assignment"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p, zookeeper=True)
    action = p.add_mutually_exclusive_group(required=True)
    for name in ("create", "list", "describe", "alter", "delete"):
        action.add_argument(f"--{name}", action="store_true", help=f"{name} topics")
    p.add_argument("--topic", help="topic name")
    p.add_argument("--partitions", type=int, help="number of partitions (--create, --alter)")
    p.add_argument("--replication-factor", type=int, default=-1, help="replicas (--create)")
    p.add_argument("--replica-assignment", metavar="B:B,B:B",
                   help="--create: each partition's replicas, partitions separated by commas and "
                        "brokers by colons, the preferred leader first (as kafka-topics.sh)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override (repeatable); with --alter only the keys given change")
    p.add_argument("--delete-config", "--deleteConfig", action="append", default=[], metavar="KEY",
                   dest="delete_config", help="--alter: remove this override (repeatable; 0.8's --deleteConfig)")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="--create: place replicas ignoring the brokers' broker.rack (the tool picks "
                        "the assignment, as Kafka's round-robin placement; needs --partitions and "
                        "--replication-factor)")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="--describe only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="--describe only partitions without a live leader")
    p.add_argument("--if-exists", action="store_true")


def _need_topic(args: argparse.Namespace) -> str:
    if not args.topic:
        raise CliError("--topic is required for this action", 2)
    return args.topic


def parse_replica_assignment(text: str) -> list[list[int]]:
    """"0:1,1:2" -> [[0, 1], [1, 2]]. Raises CliError naming the entry at fault."""
    out = []
    for i, part in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in part.split(":")]
        except ValueError:
            raise CliError(f"--replica-assignment {text!r}: partition {i} ({part!r}) is not broker "
                           "ids separated by colons", 2) from None
        if len(set(brokers)) != len(brokers):
            raise CliError(f"--replica-assignment {text!r}: partition {i} lists a broker twice", 2)
        out.append(brokers)
    return out


def _rack_unaware(conn, args: argparse.Namespace) -> list[dict]:
    """--disable-rack-aware: an assignment over the live brokers that ignores their racks
    (sent as the request's replica assignment, so the broker's rack rule does not apply)."""
    from appliance.cluster.assignment import (
        DISABLED,
        InvalidPartitions,
        InvalidReplicationFactor,
        assign_replicas,
    )

    if not args.partitions or args.replication_factor == -1:
        raise CliError("--disable-rack-aware needs --partitions and --replication-factor", 2)
    brokers = [b.node_id for b in metadata(conn, []).brokers]
    try:
        plan = assign_replicas(brokers, args.partitions, args.replication_factor, mode=DISABLED)
    except (InvalidPartitions, InvalidReplicationFactor) as e:
        raise CliError(str(e)) from None
    return [{"partition_index": p, "broker_ids": list(r)} for p, r in sorted(plan.items())]


def run(args: argparse.Namespace) -> int:
    configs = parse_properties_args(args.config, "--config")
    with connect(args) as conn:
        if args.list:
            for t in sorted(metadata(conn, None).topics, key=lambda t: t.name):
                print(t.name)
        elif args.create:
            name = _need_topic(args)
            assignments = []
            if args.replica_assignment:
                if args.partitions or args.replication_factor != -1:
                    raise CliError("--replica-assignment replaces --partitions and --replication-factor", 2)
                assignments = [{"partition_index": i, "broker_ids": b} for i, b in
                               enumerate(parse_replica_assignment(args.replica_assignment))]
            elif args.disable_rack_aware:
                assignments = _rack_unaware(conn, args)
            body = {"topics": [{  # an assignment replaces both counts (-1), as Kafka requires
                "name": name, "num_partitions": args.partitions if args.partitions and not assignments else -1,
                "replication_factor": -1 if assignments else args.replication_factor, "assignments": assignments,
                "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": int(args.timeout * 1000), "validate_only": False}
            deadline = time.monotonic() + args.timeout
            while True:
                r = conn.request(19, body).topics[0]
                # NOT_CONTROLLER is retriable: a cluster broker still joining, a controller moving
                if r.error_code != 41 or time.monotonic() + 0.2 > deadline:
                    break
                time.sleep(0.2)
            if r.error_code == 36 and args.if_not_exists:
                return 0
            check(r.error_code, f"creating topic {name}", r.error_message)
            print(f"Created topic {name}.")
        elif args.delete:
            name = _need_topic(args)
            resp = conn.request(20, {"topic_names": [name], "timeout_ms": int(args.timeout * 1000)})
            r = resp.responses[0]
            if r.error_code == 3 and args.if_exists:
                return 0
            check(r.error_code, f"deleting topic {name}")
            print(f"Deleted topic {name}.")
        elif args.alter:
            name = _need_topic(args)
            deleted = [k.strip() for k in args.delete_config if k.strip()]
            if args.partitions is None and not configs and not deleted:
                raise CliError("--alter needs --partitions, --config and/or --delete-config", 2)
            both = sorted(set(configs) & set(deleted))
            if both:
                raise CliError(f"{', '.join(both)}: both in --config and --delete-config", 2)
            if args.partitions is not None:
                r = conn.request(37, {"topics": [{"name": name, "count": args.partitions,
                                                  "assignments": None}],
                                      "timeout_ms": int(args.timeout * 1000),
                                      "validate_only": False}).results[0]
                check(r.error_code, f"adding partitions to {name}", r.error_message)
            if configs or deleted:
                # IncrementalAlterConfigs: only the keys given change (AlterConfigs replaced the
                # whole set, and the topic's other overrides were lost)
                ops = [{"name": k, "config_operation": SET, "value": v} for k, v in configs.items()]
                ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deleted]
                r = conn.request(44, {"resources": [{"resource_type": 2, "resource_name": name,
                                                     "configs": ops}],
                                      "validate_only": False}).responses[0]
                check(r.error_code, f"altering configs of {name}", r.error_message)
            print(f"Altered topic {name}.")
        elif args.describe:
            names = [args.topic] if args.topic else None
            md = metadata(conn, names)
            for t in sorted(md.topics, key=lambda t: t.name):
                check(t.error_code, f"describing topic {t.name}")
                overrides = ""
                try:
                    res = conn.request(32, {"resources": [{
                        "resource_type": 2, "resource_name": t.name,
                        "configuration_keys": None}], "include_synonyms": False}).results[0]
                    overrides = ",".join(f"{c.name}={c.value}" for c in res.configs
                                         if not c.is_default and c.config_source in (-1, 1))
                except Exception:  # configs are extra information; the topic is still described
                    pass
                rf = len(t.partitions[0].replica_nodes) if t.partitions else 0
                filtered = args.under_replicated_partitions or args.unavailable_partitions
                if not filtered:  # as kafka-topics.sh: the filters print partition lines only
                    print(f"Topic: {t.name}\tPartitionCount: {len(t.partitions)}\t"
                          f"ReplicationFactor: {rf}\tConfigs: {overrides}")
                for p in sorted(t.partitions, key=lambda p: p.partition_index):
                    if args.under_replicated_partitions and len(p.isr_nodes) >= len(p.replica_nodes):
                        continue
                    if args.unavailable_partitions and p.leader_id >= 0:
                        continue
                    print(f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                          f"Replicas: {','.join(map(str, p.replica_nodes))}\t"
                          f"Isr: {','.join(map(str, p.isr_nodes))}")
    return 0
