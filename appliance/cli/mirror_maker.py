"""`appliance mirror-maker --consumer.config F --producer.config F --whitelist REGEX [--num.streams N]`.

Kafka's MirrorMaker: copies the topics matching ``--whitelist`` from the cluster of the consumer
config (consumed as the group of its ``group.id``) to the cluster of the producer config, into
topics of the same name, keeping keys, values, timestamps and headers, so a key's records stay in
order on one partition. Offsets are committed only after the target acknowledged the records
(see appliance/cli/mirror_stream.py): nothing is lost on a crash; records acknowledged after the
last commit are mirrored again after a restart. New topics matching the whitelist are picked up
every ``--topic.refresh.ms``. Throughput and lag are printed every ``--report.interval.ms``.

The config files are Java ``.properties`` with Kafka's client key names (librdkafka understands
them, and the 0.8 producer's ``metadata.broker.list``, ``request.required.acks``, ...); Java-only
keys such as serializers are dropped with a note.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from appliance.cli.main import CliError

__all__ = ["add_arguments", "run", "load_client_config"]

# Java client keys with no meaning to librdkafka: dropped, with a note, rather than refused
JAVA_ONLY = ("key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
             "serializer.class", "key.serializer.class", "partitioner.class", "producer.type",
             "interceptor.classes", "consumer.timeout.ms")
CONSUMER_DEFAULTS = {"auto.offset.reset": "earliest"}  # a new topic is mirrored from its start
CONSUMER_FORCED = {"enable.auto.commit": False, "enable.auto.offset.store": False}
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,  # retries keep the order of a partition
    "message.timeout.ms": 0,  # retry without a time limit: an unreachable target stalls, loses nothing
    "partitioner": "murmur2_random",  # the Java clients' partitioner: keys land where Kafka puts them
    "linger.ms": 5,
    "queue.buffering.max.messages": 500_000,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--consumer.config", dest="consumer_config", required=True, metavar="FILE",
                   help="source cluster: bootstrap.servers, group.id, ...")
    p.add_argument("--producer.config", dest="producer_config", required=True, metavar="FILE",
                   help="target cluster: bootstrap.servers, ...")
    p.add_argument("--whitelist", required=True, metavar="REGEX",
                   help="topics to mirror (a regex; ',' separates alternatives; '*' = all)")
    p.add_argument("--num.streams", dest="num_streams", type=int, default=1, metavar="N",
                   help="consumer streams (threads), each with its own producer (default 1)")
    p.add_argument("--offset.commit.interval.ms", dest="commit_ms", type=int, default=5000, metavar="MS",
                   help="how often acknowledged positions are committed (default 5000)")
    p.add_argument("--topic.refresh.ms", dest="refresh_ms", type=int, default=5000, metavar="MS",
                   help="how often new topics matching the whitelist are looked for (default 5000)")
    p.add_argument("--report.interval.ms", dest="report_ms", type=int, default=10000, metavar="MS",
                   help="how often throughput and lag are printed (default 10000)")


def load_client_config(path: str, flag: str) -> dict[str, Any]:
    """A client .properties file as a librdkafka config dict. Raises CliError naming the file."""
    from appliance.config import parse_properties

    try:
        with open(path, encoding="latin-1") as f:
            conf: dict[str, Any] = parse_properties(f.read())
    except OSError as e:
        raise CliError(f"{flag} {path}: {e.strerror}", 2) from e
    for key in [k for k in conf if k in JAVA_ONLY]:
        print(f"mirror-maker: {flag} {path}: {key} is a Java client setting; ignored", file=sys.stderr)
        del conf[key]
    if "bootstrap.servers" not in conf and "metadata.broker.list" not in conf:
        hint = (" (zookeeper.connect is the 0.8 consumer's; this consumer needs the brokers)"
                if "zookeeper.connect" in conf else "")
        raise CliError(f"{flag} {path}: bootstrap.servers is not set{hint}", 2)
    conf.pop("zookeeper.connect", None)
    return conf


def _check(conf: dict[str, Any], path: str, flag: str, kind: str) -> None:
    """Let librdkafka judge every key now, so a typo is one clear line before anything starts."""
    from confluent_kafka import Consumer, KafkaException, Producer

    try:
        client = Consumer(conf) if kind == "consumer" else Producer(conf)
    except KafkaException as e:
        raise CliError(f"{flag} {path}: {e.args[0].str()}", 2) from e
    if kind == "consumer":
        client.close()


def run(args: argparse.Namespace) -> int:
    from appliance.cli.mirror_stream import MirrorStream, StreamFailed, compile_whitelist

    try:
        whitelist = compile_whitelist(args.whitelist)
    except ValueError as e:
        raise CliError(str(e), 2) from e
    for name, v in (("--num.streams", args.num_streams), ("--offset.commit.interval.ms", args.commit_ms),
                    ("--topic.refresh.ms", args.refresh_ms), ("--report.interval.ms", args.report_ms)):
        if v <= 0:
            raise CliError(f"{name} {v}: must be positive", 2)
    cconf = {**CONSUMER_DEFAULTS, **load_client_config(args.consumer_config, "--consumer.config"),
             **CONSUMER_FORCED}
    if "group.id" not in cconf:
        raise CliError(f"--consumer.config {args.consumer_config}: group.id is not set "
                       "(the mirror maker consumes as a group)", 2)
    pconf = {**PRODUCER_DEFAULTS, **load_client_config(args.producer_config, "--producer.config")}
    _check(pconf, args.producer_config, "--producer.config", "producer")

    lock = threading.Lock()

    def say(msg: str) -> None:
        with lock:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} mirror-maker: {msg}", file=sys.stderr, flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failures: list[str] = []

    def stream_main(i: int) -> None:
        try:
            MirrorStream(i, {**cconf, "client.id": f"{cconf.get('client.id', 'mirror-maker')}-{i}"},
                         pconf, whitelist, args.commit_ms / 1000, args.refresh_ms / 1000,
                         args.report_ms / 1000, stop, say).run()
        except StreamFailed as e:
            failures.append(str(e))
        except Exception as e:  # one line for the operator; the other streams stop too
            failures.append(f"stream {i}: {type(e).__name__}: {e}")
        finally:
            stop.set()

    say(f"mirroring topics matching {whitelist.pattern!r} from {cconf.get('bootstrap.servers') or cconf.get('metadata.broker.list')} "
        f"to {pconf.get('bootstrap.servers') or pconf.get('metadata.broker.list')} as group {cconf['group.id']!r}, "
        f"{args.num_streams} stream(s)")
    threads = [threading.Thread(target=stream_main, args=(i,), name=f"stream-{i}") for i in range(args.num_streams)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    if failures:
        raise CliError("; ".join(failures), 1)
    say("stopped; acknowledged positions committed")
    return 0
