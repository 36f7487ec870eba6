"""`appliance transactions`: list and describe transactions (kafka-transactions.sh, KIP-664).

``list`` (or ``--list``) asks every broker of the cluster for the transactional ids its
coordinators hold (ListTransactions) and prints one table: TransactionalId, Coordinator,
ProducerId, TransactionState, as Kafka's tool. ``describe --transactional-id X`` asks the id's
coordinator (DescribeTransactions) and prints Kafka's columns; the start time and duration are
"None" when no transaction is open. ``find-hanging`` (``--topic`` [``--partition``] or
``--broker-id``) lists the open transactions partitions hold that their coordinator will not end
(Kafka's algorithm: DescribeProducers for transactions open longer than
``--max-transaction-timeout`` minutes, their transactional ids from ListTransactions by producer
id, DescribeTransactions: hanging when no id is found, or the id's transaction does not hold that
partition). Departure: ``--broker-id`` searches the partitions that broker leads (our
DescribeProducers is answered by leaders only; Kafka's asks that broker's replicas too). Columns
are padded and tab-separated, as Kafka's ``ToolsUtils.prettyPrintTable``.

Not built: kafka-transactions.sh's ``abort`` and ``describe-producers``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from appliance.cli.common import add_bootstrap, bootstrap_servers, command_config
from appliance.cli.main import CliError
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run", "table"]

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("action", nargs="?", choices=("list", "describe", "find-hanging"),
                   help="list: every transactional id of the cluster; describe: one id's transaction; "
                        "find-hanging: open transactions no coordinator will end")
    p.add_argument("--list", action="store_true", help="the same as the list action")
    p.add_argument("--transactional-id", metavar="ID", help="describe: the id")
    p.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="list: only ids in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                        "CompleteCommit, CompleteAbort, PrepareEpochFence); repeatable")
    p.add_argument("--producer-id", action="append", default=[], type=int, metavar="PID",
                   help="list: only ids with this producer id; repeatable")
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="list: only transactions open longer than this (KIP-994)")
    p.add_argument("--topic", help="find-hanging: search this topic's partitions")
    p.add_argument("--partition", type=int, help="find-hanging: only this partition of --topic")
    p.add_argument("--broker-id", type=int, help="find-hanging: search the partitions this broker leads")
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="find-hanging: only transactions open longer than this (default 15)")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's prettyPrintTable: each column padded to its widest cell, a tab after each."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return "\n".join("".join(c.ljust(w) + "\t" for c, w in zip(row, widths, strict=True)) for row in [headers, *rows])


def _admin(args: argparse.Namespace):
    from appliance.client.admin import AdminClient
    bootstrap_servers(args)  # a malformed --bootstrap-server is a usage error naming it
    timeout_ms = int(args.timeout * 1000)
    return AdminClient(args.bootstrap_server, config={
        **command_config(args), "request.timeout.ms": timeout_ms, "socket.connection.setup.timeout.ms": timeout_ms,
        "client.id": "appliance-transactions"})


def _list(args: argparse.Namespace) -> None:
    from appliance.coordinator.txn_coordinator import STATE_NAMES
    unknown = [s for s in args.state if s not in STATE_NAMES]
    if unknown:  # the brokers answer them back as unknown (Kafka's rule): they match nothing
        print(f"warning: unknown transaction state(s) {', '.join(unknown)}: they match nothing "
              f"(known: {', '.join(sorted(STATE_NAMES))})", file=sys.stderr)
    with _admin(args) as admin:
        found = admin.list_transactions(args.state, args.producer_id, args.duration_filter)
    print(table(LIST_HEADERS, [(t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state)
                               for t in found]))


def _describe(args: argparse.Namespace) -> None:
    tid = args.transactional_id
    if tid is None:
        raise CliError("describe needs --transactional-id", 2)
    if not tid:
        raise CliError("--transactional-id: empty", 2)
    with _admin(args) as admin:
        try:
            d = admin.describe_transactions([tid])[tid]
        except KafkaError as e:
            raise CliError(f"Failed to describe transaction state of transactional-id `{tid}`: {e}") from e
    started, duration = "None", "None"
    if d.start_time_ms >= 0:
        started, duration = str(d.start_time_ms), str(int(time.time() * 1000) - d.start_time_ms)
    print(table(DESCRIBE_HEADERS, [(
        str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch), d.state, str(d.timeout_ms),
        started, duration, ",".join(f"{t}-{p}" for t, p in d.partitions))]))


def _partitions_to_search(admin, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.topic is None and args.broker_id is None:
        raise CliError("find-hanging needs --topic or --broker-id to limit the search", 2)
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", 2)
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    topics = [args.topic] if args.topic is not None else admin.list_topics()
    out = []
    for t in topics:
        leaders = admin.cluster.topic(t, auto_create=False, timeout=args.timeout).leaders
        out += [(t, p) for p, leader in sorted(leaders.items()) if args.broker_id in (None, leader)]
    return out


def _find_hanging(args: argparse.Namespace) -> None:
    now = int(time.time() * 1000)
    max_ms = args.max_transaction_timeout * 60_000
    rows = []
    with _admin(args) as admin:
        candidates = [(tp, s) for tp, states in admin.describe_producers(_partitions_to_search(admin, args)).items()
                      for s in states if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_ms]
        pids = sorted({s.producer_id for _, s in candidates})
        tids = {t.producer_id: t.transactional_id for t in admin.list_transactions(producer_ids=pids)} if pids else {}
        described = {}
        for tid in set(tids.values()):
            try:
                described[tid] = admin.describe_transactions([tid])[tid]
            except KafkaError:
                pass  # unknown (expired meanwhile): its open transactions hang
        for (topic, partition), s in candidates:
            d = described.get(tids.get(s.producer_id, ""))
            if d is None or (topic, partition) not in d.partitions:
                rows.append((topic, str(partition), str(s.producer_id), str(s.producer_epoch),
                             str(s.coordinator_epoch), str(s.current_txn_start_offset), str(s.last_timestamp),
                             str((now - s.last_timestamp) // 60_000)))
    print(table(HANGING_HEADERS, rows))


def run(args: argparse.Namespace) -> int:
    if args.list and args.action not in (None, "list"):
        raise CliError("--list and describe: choose one", 2)
    action = "list" if args.list else args.action
    if action is None:
        raise CliError("an action is needed: list (or --list), describe --transactional-id ID or find-hanging", 2)
    {"list": _list, "describe": _describe, "find-hanging": _find_hanging}[action](args)
    return 0
