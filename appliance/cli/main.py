"""`appliance` — the command line, with subcommands named after Kafka's tools.

Errors print as one line without a traceback (exit status 2 for usage/configuration errors, 1 for
runtime failures); ``--verbose`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

__all__ = ["main", "CliError"]

# subcommand -> module under appliance.cli that defines add_arguments(parser) and run(args) -> int
COMMANDS = {
    "serve": ("serve", "run a broker (standalone on its embedded defaults with no arguments)"),
    "topics": ("topics", "create, list, describe, alter and delete topics"),
    "console-producer": ("console_producer", "send lines from stdin as messages"),
    "console-consumer": ("console_consumer", "print messages of a topic"),
    "dump-log": ("dump_log", "decode segment (.log) and index (.index, .timeindex, .txnindex) files, with --verify-crc "
                 "and --verify-index-only"),
    "simple-consumer-shell": ("simple_consumer_shell", "print one partition's messages from an offset "
                              "(Kafka's SimpleConsumerShell)"),
    "consumer-offset-checker": ("consumer_offset_checker", "a ZooKeeper (0.8) consumer group's offsets, log "
                                "sizes, lag and owners (ConsumerOffsetChecker)"),
    "consumer-groups": ("consumer_groups", "list, describe, reset offsets of and delete consumer groups"),
    "install-service": ("install_service", "install the broker as a hardened systemd service"),
    "status": ("status", "one screen of broker health from its shared memory (--watch, --json)"),
    "alter-log-dirs": ("alter_log_dirs", "move a partition to another log dir, online (AlterReplicaLogDirs)"),
    "configs": ("configs", "describe and alter topic and broker configs (kafka-configs)"),
    "delete-records": ("delete_records", "move partitions' log start offsets (kafka-delete-records)"),
    "mirror-maker": ("mirror_maker", "copy topics from one cluster to another (Kafka's MirrorMaker)"),
    "reassign-partitions": ("reassign_partitions", "move partitions' replicas between brokers, online (cluster mode)"),
    "leader-election": ("leader_election", "elect preferred or unclean leaders (ElectLeaders)"),
    "preferred-replica-election": ("preferred_replica_election",
                                   "0.8's tool: move leadership back to each partition's first replica"),
    "acls": ("acls", "add, list and remove ACLs (kafka-acls)"),
    "log-dirs": ("log_dirs", "each log dir's state and partition sizes (--describe, as kafka-log-dirs)"),
    "transactions": ("transactions", "list transactional ids and describe their transactions "
                     "(kafka-transactions)"),
}


class CliError(Exception):
    """An error for the user: printed as one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser. Only the subcommand named in ``argv`` (all of them when none is) imports its
    module: some pull in numba, and `appliance topics --list` should not wait for it."""
    chosen = next((a for a in (argv or []) if a in COMMANDS), None)
    parser = argparse.ArgumentParser(prog="appliance", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging and tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                       help="debug logging and tracebacks")
        if chosen is None or name == chosen:
            mod = importlib.import_module(f"appliance.cli.{module}")
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the user sees one line; --verbose shows where
        if args.verbose:
            raise
        status = getattr(e, "status", 1)
        print(f"error: {e}", file=sys.stderr)
        return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
