"""`appliance reassign-partitions`: Kafka's kafka-reassign-partitions.sh.

    appliance reassign-partitions --zookeeper ZK --generate --topics-to-move-json-file F --broker-list 0,1,2
    appliance reassign-partitions --zookeeper ZK --execute --reassignment-json-file F [--additional] [--throttle B]
    appliance reassign-partitions --zookeeper ZK --verify --reassignment-json-file F [--preserve-throttles]
    appliance reassign-partitions --zookeeper ZK --cancel --reassignment-json-file F

``--bootstrap-server H:P`` instead of ``--zookeeper`` asks that broker for its
``zookeeper.connect`` (DescribeConfigs) and goes on the same way. --execute and --cancel send
AlterPartitionReassignments (API 45) to the controller, the path admin clients take; the
controller adds the new replicas, waits until they are in the ISR, moves leadership to the
first of the new list, and stops and deletes the replicas no longer wanted. --cancel puts the
listed partitions back on their original replicas. ``--throttle`` writes Kafka's replication
throttle configs (:mod:`appliance.cluster.replication_throttle`); --verify removes them once
nothing of the file is still moving. Bad files and requests print Kafka's message
and exit 1 with nothing changed (:mod:`appliance.cluster.reassignment`).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from appliance.cli.common import check
from appliance.cli.controller_request import ask_controller
from appliance.cli.main import CliError
from appliance.client.connection import BrokerConnection, ConnectionFailed, parse_bootstrap
from appliance.errors import ErrorCode

__all__ = ["add_arguments", "run", "zookeeper_of"]

_BROKER_RESOURCE = 4
_ALTER, _LIST = 45, 46  # AlterPartitionReassignments v0, ListPartitionReassignments v0
_EXISTING = ("Cannot execute because there is an existing partition assignment.  Use --additional to "
             "override this and create a new partition assignment in addition to the existing one.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="the cluster's zookeeper.connect")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="a broker of the cluster (its zookeeper.connect is asked for)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true",
                        help="propose an assignment of --topics-to-move-json-file over --broker-list")
    action.add_argument("--execute", action="store_true", help="start the reassignment in --reassignment-json-file")
    action.add_argument("--verify", action="store_true", help="report the state of each partition of the file")
    action.add_argument("--cancel", action="store_true",
                        help="cancel the reassignments of the partitions in --reassignment-json-file")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"t"}]}')
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}')
    p.add_argument("--broker-list", metavar="0,1,2", help="brokers to spread over (--generate)")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="--generate: ignore the brokers' broker.rack (by default each partition's "
                        "replicas span the racks, and brokers with and without a rack are refused)")
    p.add_argument("--additional", action="store_true",
                   help="--execute even while other reassignments are in progress")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES/S",
                   help="--execute: cap the replication of the moving replicas at this rate "
                        "(--verify removes it once every partition has moved)")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify, --cancel: leave the throttle in place")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="ZooKeeper and broker connection timeout (default 30)")


def _read(path: str | None, flag: str) -> str:
    if not path:
        raise CliError(f"{flag} is required for this action", 2)
    try:
        return Path(path).read_text()
    except OSError as e:
        raise CliError(f"{flag} {path}: {e.strerror or e}", 2) from e


def _broker_list(text: str | None) -> list[int]:
    if not text:
        raise CliError("--broker-list is required with --generate", 2)
    try:
        return [int(b) for b in text.split(",")]
    except ValueError:
        raise CliError(f"--broker-list {text!r}: expected broker ids separated by commas", 2) from None


def zookeeper_of(bootstrap: str, timeout: float) -> str:
    """The ``zookeeper.connect`` of the broker at ``bootstrap`` (DescribeConfigs on its broker
    resource; the broker's id is found in Metadata by its address). Raises CliError."""
    try:
        servers = parse_bootstrap(bootstrap)
    except ValueError as e:
        raise CliError(f"--bootstrap-server: {e}", 2) from e
    errors = []
    for host, port in servers:
        try:
            with BrokerConnection(host, port, timeout=timeout) as conn:
                md = conn.request(3, {"topics": [], "allow_auto_topic_creation": False})
                ids = [b.node_id for b in md.brokers if (b.host, b.port) == (host, port)]
                ids += [b.node_id for b in md.brokers if b.node_id not in ids]
                for broker_id in ids:
                    res = conn.request(32, {"resources": [{
                        "resource_type": _BROKER_RESOURCE, "resource_name": str(broker_id),
                        "configuration_keys": ["zookeeper.connect"]}], "include_synonyms": False}).results[0]
                    value = next((c.value for c in res.configs if c.name == "zookeeper.connect"), None)
                    if res.error_code == 0 and value:
                        return value
                errors.append(f"{host}:{port} is not in a cluster (no zookeeper.connect)")
        except ConnectionFailed as e:
            errors.append(str(e))
    raise CliError("; ".join(errors))


def _alter(locate, moves: dict, timeout: float) -> dict:
    """AlterPartitionReassignments to the controller: partition name -> (error code, message)
    for each partition the controller refused."""
    by_topic: dict[str, list[dict]] = {}
    for tp, replicas in sorted(moves.items()):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "replicas": None if replicas is None else list(replicas)})
    body = {"timeout_ms": int(timeout * 1000),
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    answer = ask_controller(locate, _ALTER, 0, body, timeout, "reassignment")
    if answer.error_code:
        check(answer.error_code, "reassignment failed", answer.error_message)
    return {f"{t.name}-{p.partition_index}": (p.error_code, p.error_message)
            for t in answer.responses for p in t.partitions if p.error_code}


def _ongoing(locate, timeout: float) -> list[str]:
    """The partitions the controller is reassigning (ListPartitionReassignments)."""
    answer = ask_controller(locate, _LIST, 0, {"timeout_ms": int(timeout * 1000), "topics": None},
                            timeout, "listing reassignments")
    if answer.error_code:
        check(answer.error_code, "listing reassignments failed", answer.error_message)
    return sorted(f"{t.name}-{p.partition_index}" for t in answer.topics for p in t.partitions)


def _errors(title: str, refused: dict) -> str:
    lines = [f"{tp}: {ErrorCode(code).name if code in ErrorCode._value2member_map_ else code}"
             + (f" ({message})" if message else "") for tp, (code, message) in sorted(refused.items())]
    return title + "\n" + "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # kazoo and the cluster modules are imported only by the tools that need them
    from kazoo.exceptions import NoAuthError

    from appliance.cli.zookeeper_tool import NOT_AUTHORIZED
    from appliance.cluster import reassignment as lib
    from appliance.cluster.zk_session import ZkSettings, ZooKeeperUnreachable, open_session
    from appliance.cluster.zk_store import ZkStore

    # the files are checked before anything connects: bad input never reaches ZooKeeper
    try:
        if args.generate:
            topics = lib.parse_topics_to_move(_read(args.topics_to_move_json_file, "--topics-to-move-json-file"))
            brokers = _broker_list(args.broker_list)
        else:
            moves = lib.parse_reassignment(_read(args.reassignment_json_file, "--reassignment-json-file"))
    except lib.ReassignmentError as e:
        raise CliError(str(e)) from e
    connect = args.zookeeper or zookeeper_of(args.bootstrap_server, args.timeout)
    if not args.verbose:  # kazoo's connection chatter is not the tool's answer
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        logging.getLogger("appliance.cluster").setLevel(logging.ERROR)
    try:
        settings = ZkSettings.for_tool(connect, int(args.timeout * 1000), int(args.timeout * 1000))
    except ValueError as e:
        raise CliError(str(e), 2) from e
    try:
        client = open_session(settings)
    except ZooKeeperUnreachable as e:
        raise CliError(str(e)) from e
    try:
        store = ZkStore(client)

        def locate() -> tuple[int, dict[int, tuple[str, int]]]:
            return store.controller_id(), {b: (i.host, i.port) for b, i in store.brokers().items()}

        if args.generate:
            current, proposed = lib.generate(store, topics, brokers, rack_aware=not args.disable_rack_aware)
            print("Current partition replica assignment")
            print(lib.format_reassignment(current))
            print()
            print("Proposed partition reassignment configuration")
            print(lib.format_reassignment(proposed))
        elif args.execute:
            rollback = {}
            for t in sorted({tp.topic for tp in moves}):
                a = store.assignment(t)  # a missing topic: check_moves() names it below
                rollback.update({tp: r for tp in moves if tp.topic == t and a is not None
                                 and (r := a.partitions.get(tp.partition)) is not None})
            lib.check_moves(store, moves)
            if not args.additional and _ongoing(locate, args.timeout):
                raise CliError(_EXISTING)
            if args.throttle >= 0:
                # set before the move starts, so the new replicas never fetch unthrottled
                lib.set_throttle(store, moves, rollback, args.throttle)
            refused = _alter(locate, moves, args.timeout)
            if refused:
                raise CliError(_errors("Error reassigning partition(s):", refused))
            if args.throttle >= 0:
                print("Warning: You must run --verify periodically, until the reassignment completes, "
                      "to ensure the throttle is removed.")
                print(f"The inter-broker throttle limit was set to {args.throttle} B/s")
            print("Current partition replica assignment")
            print()
            print(lib.format_reassignment(rollback))
            print()
            print("Save this to use as the --reassignment-json-file option during rollback")
            print("Successfully started reassignment of partitions.")
        elif args.cancel:
            refused = _alter(locate, dict.fromkeys(moves), args.timeout)
            idle = sorted(tp for tp, (code, _) in refused.items() if code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            failed = {tp: e for tp, e in refused.items() if tp not in idle}
            cancelled = [str(tp) for tp in sorted(moves) if str(tp) not in refused]
            if cancelled:
                print(f"Successfully cancelled partition reassignment(s) for: {','.join(cancelled)}")
            if idle:
                print(f"No reassignment was in progress for: {','.join(idle)}")
            if failed:
                raise CliError(_errors("Error cancelling partition reassignment(s):", failed))
            if not args.preserve_throttles and lib.remove_throttle(store, sorted({tp.topic for tp in moves})):
                print("Throttle was removed.")
        else:
            status = lib.verify(store, moves)
            print("Status of partition reassignment:")
            for tp, state in status.items():
                said = {lib.COMPLETE: "completed successfully", lib.IN_PROGRESS: "is still in progress",
                        lib.FAILED: "failed"}[state]
                print(f"Reassignment of partition {tp} {said}")
            if lib.IN_PROGRESS not in status.values() and not args.preserve_throttles:
                if lib.remove_throttle(store, sorted({tp.topic for tp in moves})):
                    print("Throttle was removed.")
            if lib.FAILED in status.values():
                return 1
    except lib.ReassignmentError as e:
        raise CliError(str(e)) from e
    except NoAuthError as e:
        raise CliError(NOT_AUTHORIZED) from e
    finally:
        client.stop()
        client.close()
    return 0

