"""`appliance console-consumer --zookeeper`: the 0.8 console consumer, through the ZooKeeper
consumer. One stream; --from-beginning sets auto.offset.reset=smallest; --timeout-ms is
consumer.timeout.ms. Without --group it uses a console-consumer-<n> group and, as Kafka's did,
deletes that group's znodes at exit (nobody will resume it)."""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from typing import Any

from appliance.cli.main import CliError
from appliance.cli.zk_logging import quiet_zookeeper_logs
from appliance.client.zk_consumer import (
    Blacklist,
    ConsumerTimeout,
    Whitelist,
    create_java_consumer_connector,
)
from appliance.client.zk_consumer.settings import open_zookeeper
from appliance.client.zk_consumer.znodes import consumer_group_path
from appliance.config import parse_properties
from appliance.errors import InvalidConfigError, KafkaError

__all__ = ["run_zookeeper"]


def _config(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """The consumer.properties for this run and whether its group was made up here."""
    config: dict[str, Any] = {}
    if args.consumer_config:
        try:
            with open(args.consumer_config) as f:
                config = dict(parse_properties(f.read()))
        except OSError as e:
            raise CliError(f"--consumer.config {args.consumer_config}: {e.strerror or e}", 2) from e
    config["zookeeper.connect"] = args.zookeeper
    made_up = not (args.group or config.get("group.id"))
    config["group.id"] = args.group or config.get("group.id") or f"console-consumer-{random.randrange(100000)}"
    if args.from_beginning:
        config["auto.offset.reset"] = "smallest"
    if args.timeout_ms is not None:
        config["consumer.timeout.ms"] = args.timeout_ms
    config.setdefault("zookeeper.connection.timeout.ms", int(args.timeout * 1000))
    return config, made_up


def run_zookeeper(args: argparse.Namespace, fmt: Callable[[Any], bytes]) -> int:
    quiet_zookeeper_logs(args)
    config, made_up = _config(args)
    try:
        connector = create_java_consumer_connector(config)
    except InvalidConfigError as e:
        raise CliError(str(e), 2) from e
    except KafkaError as e:
        raise CliError(str(e)) from e
    out = sys.stdout.buffer
    printed = 0
    try:
        if args.topic:
            stream = connector.create_message_streams({args.topic: 1})[args.topic][0]
        else:
            try:
                f = Whitelist(args.whitelist) if args.whitelist else Blacklist(args.blacklist)
            except ValueError as e:
                raise CliError(str(e), 2) from e
            stream = connector.create_message_streams_by_filter(f, 1)[0]
        try:
            for m in stream:
                out.write(fmt(m))
                out.flush()
                printed += 1
                if args.max_messages is not None and printed >= args.max_messages:
                    break
        except ConsumerTimeout:
            pass
    except KafkaError as e:
        raise CliError(f"consuming through ZooKeeper at {args.zookeeper}: {e}") from e
    finally:
        connector.shutdown()
        if made_up:
            _delete_group(config)
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _delete_group(config: dict[str, Any]) -> None:
    try:
        zk = open_zookeeper(config["zookeeper.connect"], 6000, int(config["zookeeper.connection.timeout.ms"]))
    except KafkaError:
        return
    try:
        zk.delete(consumer_group_path(config["group.id"]), recursive=True)
    except Exception:  # already gone, or ZooKeeper went away: nothing to clean
        pass
    finally:
        zk.stop()
        zk.close()
