"""`appliance transactions`: list and describe transactions (kafka-transactions.sh, KIP-664).

``list`` (or ``--list``) asks every broker of the cluster for the transactional ids its
coordinators hold (ListTransactions) and prints one table: TransactionalId, Coordinator,
ProducerId, TransactionState, as Kafka's tool. ``describe --transactional-id X`` asks the id's
coordinator (DescribeTransactions) and prints Kafka's columns; the start time and duration are
"None" when no transaction is open. Columns are padded and tab-separated, as Kafka's
``ToolsUtils.prettyPrintTable``.

Not built: kafka-transactions.sh's ``abort``, ``describe-producers`` and ``find-hanging``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from appliance.cli.common import add_bootstrap, bootstrap_servers, command_config
from appliance.cli.main import CliError
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run", "table"]

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("action", nargs="?", choices=("list", "describe"),
                   help="list: every transactional id of the cluster; describe: one id's transaction")
    p.add_argument("--list", action="store_true", help="the same as the list action")
    p.add_argument("--transactional-id", metavar="ID", help="describe: the id")
    p.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="list: only ids in this state (Empty, Ongoing, PrepareCommit, PrepareAbort, "
                        "CompleteCommit, CompleteAbort, PrepareEpochFence); repeatable")
    p.add_argument("--producer-id", action="append", default=[], type=int, metavar="PID",
                   help="list: only ids with this producer id; repeatable")
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="list: only transactions open longer than this (KIP-994)")


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


def run(args: argparse.Namespace) -> int:
    if args.list and args.action not in (None, "list"):
        raise CliError("--list and describe: choose one", 2)
    action = "list" if args.list else args.action
    if action is None:
        raise CliError("an action is needed: list (or --list) or describe --transactional-id ID", 2)
    (_list if action == "list" else _describe)(args)
    return 0
