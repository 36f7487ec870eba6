"""`appliance mirror-maker --consumer.config F --producer.config F --whitelist REGEX [--num.streams N]
[--metrics.listener HOST:PORT]`.

Kafka's MirrorMaker: copies the topics matching ``--whitelist`` from the cluster of the consumer
config (consumed as the group of its ``group.id``) to the cluster of the producer config, into
topics of the same name, keeping keys, values, timestamps and headers, so a key's records stay in
order on one partition. Offsets are committed only after the target acknowledged the records
(see appliance/cli/mirror_stream.py): nothing is lost on a crash; records acknowledged after the
last commit are mirrored again after a restart. New topics matching the whitelist are picked up
every ``--topic.refresh.ms``. Throughput and lag are printed every ``--report.interval.ms``
and, with ``--metrics.listener HOST:PORT``, served to Prometheus (appliance/cli/mirror_metrics.py).

The config files are Java ``.properties`` with Kafka's client key names (librdkafka understands
them, and the 0.8 producer's ``metadata.broker.list``, ``request.required.acks``, ...); Java-only
keys such as serializers are dropped with a note.

As 0.8's MirrorMaker, ``--consumer.config`` may be given several times, one per source cluster
(each mirrored by its own ``--num.streams`` streams into the one target), and ``--blacklist``
may stand for ``--whitelist``. A 0.8 consumer config (``zookeeper.connect`` and no
``bootstrap.servers``) is read as 0.8 meant it: the source's brokers are the ones registered in
that ZooKeeper, ``auto.offset.reset=smallest|largest`` are earliest and latest, and the keys of
the ZooKeeper consumer alone (rebalance.*, offsets.storage, zookeeper.*, ...) are dropped with a
note. Departure: the mirror's group keeps its positions in Kafka (``offsets.storage=kafka``),
since a position is committed only after the target acknowledged the records, which the
confluent-kafka consumer does and the ZooKeeper consumer's auto-commit does not.
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
# the 0.8 ZooKeeper consumer's own keys: its group lives in ZooKeeper, which a Kafka group does not use
ZK_CONSUMER_ONLY = ("zookeeper.connect", "zookeeper.session.timeout.ms", "zookeeper.connection.timeout.ms",
                    "zookeeper.sync.time.ms", "consumer.id", "queued.max.message.chunks",
                    "rebalance.max.retries", "rebalance.backoff.ms", "refresh.leader.backoff.ms",
                    "offsets.storage", "dual.commit.enabled", "offsets.channel.backoff.ms",
                    "offsets.channel.socket.timeout.ms", "offsets.commit.max.retries",
                    "exclude.internal.topics", "auto.commit.enable")
OLD_OFFSET_RESET = {"smallest": "earliest", "largest": "latest"}
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
                   action="append", help="a source cluster: bootstrap.servers (or 0.8's zookeeper.connect), "
                                         "group.id, ...; repeat for several source clusters")
    p.add_argument("--producer.config", dest="producer_config", required=True, metavar="FILE",
                   help="target cluster: bootstrap.servers, ...")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--whitelist", metavar="REGEX",
                       help="topics to mirror (a regex; ',' separates alternatives; '*' = all)")
    which.add_argument("--blacklist", metavar="REGEX",
                       help="mirror every topic except these (written as --whitelist)")
    p.add_argument("--num.streams", dest="num_streams", type=int, default=1, metavar="N",
                   help="consumer streams (threads), each with its own producer (default 1)")
    p.add_argument("--offset.commit.interval.ms", dest="commit_ms", type=int, default=5000, metavar="MS",
                   help="how often acknowledged positions are committed (default 5000)")
    p.add_argument("--topic.refresh.ms", dest="refresh_ms", type=int, default=5000, metavar="MS",
                   help="how often new topics matching the whitelist are looked for (default 5000)")
    p.add_argument("--report.interval.ms", dest="report_ms", type=int, default=10000, metavar="MS",
                   help="how often throughput and lag are printed (default 10000)")
    p.add_argument("--metrics.listener", dest="metrics_listener", default="", metavar="HOST:PORT",
                   help="serve Prometheus metrics (records/bytes mirrored per topic, offset "
                        "commits, consumer lag per partition) at http://HOST:PORT/metrics")


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
    zookeeper = conf.get("zookeeper.connect")
    if "bootstrap.servers" not in conf and "metadata.broker.list" not in conf:
        if not zookeeper:
            raise CliError(f"{flag} {path}: bootstrap.servers is not set", 2)
        from appliance.cli.zookeeper_tool import brokers_in_zookeeper
        timeout_ms = conf.get("zookeeper.connection.timeout.ms", "6000")
        try:
            timeout = int(timeout_ms) / 1000
        except ValueError:
            raise CliError(f"{flag} {path}: zookeeper.connection.timeout.ms={timeout_ms!r}: "
                           "expected an integer", 2) from None
        brokers = brokers_in_zookeeper(zookeeper, timeout)
        conf["bootstrap.servers"] = ",".join(f"{h}:{p}" for h, p in brokers)
    elif zookeeper:
        print(f"mirror-maker: {flag} {path}: both zookeeper.connect and bootstrap.servers are set; "
              "bootstrap.servers is used", file=sys.stderr)
    reset = conf.get("auto.offset.reset")
    if reset in OLD_OFFSET_RESET:
        conf["auto.offset.reset"] = OLD_OFFSET_RESET[reset]
    dropped = [k for k in conf if k in ZK_CONSUMER_ONLY]
    for key in dropped:
        del conf[key]
    if dropped:
        print(f"mirror-maker: {flag} {path}: {', '.join(dropped)}: the ZooKeeper consumer's settings; "
              "ignored (the mirror consumes as a Kafka group)", file=sys.stderr)
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


def _serve_metrics(value: str) -> Any:
    """The MirrorMetrics served at ``--metrics.listener`` (None when not given). Raises CliError
    naming the listener: a bad value (exit 2) or a port that cannot be bound (exit 1)."""
    from appliance.metrics.listener import parse_listener

    try:
        listener = parse_listener(value)
    except ValueError as e:
        raise CliError(f"--{e}", 2) from e
    if listener is None:
        return None
    from appliance.cli.mirror_metrics import MirrorMetrics

    metrics = MirrorMetrics()
    try:
        metrics.serve(listener)
    except OSError as e:
        raise CliError(f"--metrics.listener {listener}: cannot listen: {e.strerror}", 1) from e
    return metrics


def run(args: argparse.Namespace) -> int:
    from appliance.cli.mirror_stream import (
        MirrorStream,
        StreamFailed,
        compile_blacklist,
        compile_whitelist,
    )

    try:
        whitelist = (compile_whitelist(args.whitelist) if args.whitelist is not None
                     else compile_blacklist(args.blacklist))
    except ValueError as e:
        raise CliError(str(e), 2) from e
    for name, v in (("--num.streams", args.num_streams), ("--offset.commit.interval.ms", args.commit_ms),
                    ("--topic.refresh.ms", args.refresh_ms), ("--report.interval.ms", args.report_ms)):
        if v <= 0:
            raise CliError(f"{name} {v}: must be positive", 2)
    sources = []
    for path in args.consumer_config:
        cconf = {**CONSUMER_DEFAULTS, **load_client_config(path, "--consumer.config"), **CONSUMER_FORCED}
        if "group.id" not in cconf:
            raise CliError(f"--consumer.config {path}: group.id is not set "
                           "(the mirror maker consumes as a group)", 2)
        sources.append(cconf)
    pconf = {**PRODUCER_DEFAULTS, **load_client_config(args.producer_config, "--producer.config")}
    metrics = _serve_metrics(args.metrics_listener)  # before any client: its logs would muddle the error
    _check(pconf, args.producer_config, "--producer.config", "producer")

    lock = threading.Lock()

    def say(msg: str) -> None:
        with lock:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} mirror-maker: {msg}", file=sys.stderr, flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failures: list[str] = []

    def stream_main(i: int, cconf: dict[str, Any]) -> None:
        try:
            MirrorStream(i, {**cconf, "client.id": f"{cconf.get('client.id', 'mirror-maker')}-{i}"},
                         pconf, whitelist, args.commit_ms / 1000, args.refresh_ms / 1000,
                         args.report_ms / 1000, stop, say, metrics).run()
        except StreamFailed as e:
            failures.append(str(e))
        except Exception as e:  # one line for the operator; the other streams stop too
            failures.append(f"stream {i}: {type(e).__name__}: {e}")
        finally:
            stop.set()

    target = pconf.get('bootstrap.servers') or pconf.get('metadata.broker.list')
    threads = []
    for cconf in sources:
        first = len(threads)
        say(f"mirroring topics matching {whitelist.pattern!r} from "
            f"{cconf.get('bootstrap.servers') or cconf.get('metadata.broker.list')} to {target} as group "
            f"{cconf['group.id']!r}, streams {first}..{first + args.num_streams - 1}")
        threads += [threading.Thread(target=stream_main, args=(i, cconf), name=f"stream-{i}")
                    for i in range(first, first + args.num_streams)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    if failures:
        raise CliError("; ".join(failures), 1)
    say("stopped; acknowledged positions committed")
    return 0
