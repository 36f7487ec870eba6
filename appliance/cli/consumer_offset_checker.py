"""`appliance consumer-offset-checker`: a ZooKeeper consumer group's position, log size, lag and
owner per partition, in the columns of Kafka 0.8's ConsumerOffsetChecker
(``Group Topic Pid Offset logSize Lag Owner``).

Offsets are read from both storages: ``/consumers/<group>/offsets`` in ZooKeeper and the group
coordinator's OffsetFetch. Offset shows the larger (a group migrating to Kafka commits to both);
where the two differ a note on stderr gives both, and ``--storage`` adds a Storage column saying
whose it is (``zookeeper``, ``kafka``, ``both`` when they agree, ``none``: Offset and Lag are then
``unknown``). Owners come from ``/consumers/<group>/owners``; log sizes from each partition's
leader (ListOffsets). Topics: --topic, else every topic the group has offsets, owners or a
static subscription for in ZooKeeper.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from appliance.cli.main import CliError
from appliance.cli.zk_logging import quiet_zookeeper_logs
from appliance.client.cluster import Cluster
from appliance.client.fetching import TopicPartition
from appliance.client.zk_consumer.fetcher import list_offset
from appliance.client.zk_consumer.offsets import OffsetStore
from appliance.client.zk_consumer.registry import partition_count, read_brokers
from appliance.client.zk_consumer.settings import load_config, open_zookeeper
from appliance.client.zk_consumer.znodes import (
    STATIC,
    decode_registration,
    ids_path,
    offsets_path,
    owner_path,
    owners_path,
)
from appliance.errors import KafkaError

__all__ = ["add_arguments", "run", "ROW"]

ROW = "%-15s %-30s %-3s %-15s %-15s %-15s %s"  # Kafka's columns
STORAGE_ROW = "%-15s %-30s %-3s %-15s %-15s %-15s %-30s %s"  # ... then Storage (--storage)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--zookeeper", "--zkconnect", dest="zookeeper", required=True, metavar="HOST:PORT[/CHROOT]",
                   help="the ZooKeeper the group and the brokers are registered in")
    p.add_argument("--group", required=True)
    p.add_argument("--topic", help="comma-separated topics (default: the group's topics in ZooKeeper)")
    p.add_argument("--broker-info", action="store_true", help="also list the brokers (id -> host:port)")
    p.add_argument("--storage", action="store_true",
                   help="add a Storage column: whose offset is shown (zookeeper, kafka, both, none)")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="ZooKeeper connection and request timeout (default 10)")


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return zk.get_children(path)
    except NoNodeError:
        return []


def _group_topics(zk: KazooClient, group: str) -> list[str]:
    topics = set(_children(zk, offsets_path(group))) | set(_children(zk, owners_path(group)))
    for cid in _children(zk, ids_path(group)):
        try:
            reg = decode_registration(zk.get(f"{ids_path(group)}/{cid}")[0], cid)
        except (NoNodeError, ValueError):
            continue
        if reg.pattern == STATIC:
            topics |= set(reg.subscription)
    return sorted(topics)


def _owner(zk: KazooClient, group: str, topic: str, p: int) -> str:
    try:
        return zk.get(owner_path(group, topic, p))[0].decode(errors="replace")
    except NoNodeError:
        return "none"


def run(args: argparse.Namespace) -> int:
    quiet_zookeeper_logs(args)
    timeout_ms = int(args.timeout * 1000)
    try:
        zk = open_zookeeper(args.zookeeper, 30000, timeout_ms)
    except KafkaError as e:
        raise CliError(str(e)) from e
    cluster = None
    try:
        brokers = read_brokers(zk)
        if not brokers:
            raise CliError(f"no broker is registered in ZooKeeper at {args.zookeeper}")
        topics = [t.strip() for t in args.topic.split(",") if t.strip()] if args.topic else \
            _group_topics(zk, args.group)
        if not topics:
            raise CliError(f"group {args.group} has no topics in ZooKeeper at {args.zookeeper} "
                           "(/consumers/<group>); name them with --topic")
        tps = []
        for t in topics:
            n = partition_count(zk, t)
            if n is None:
                raise CliError(f"topic {t} does not exist")
            tps += [TopicPartition(t, p) for p in range(n)]
        boot = ",".join(f"{h}:{p}" for h, p in brokers.values())
        cluster = Cluster(boot, client_id="consumer-offset-checker", request_timeout_ms=timeout_ms,
                          allow_auto_create=False)
        config = load_config({"zookeeper.connect": args.zookeeper, "group.id": args.group,
                              "offsets.storage": "kafka", "offsets.channel.socket.timeout.ms": timeout_ms})
        store = OffsetStore(zk, cluster, args.group, config)
        in_zk = store.fetch_zookeeper(tps)
        try:
            in_kafka: dict[TopicPartition, int | None] = store.fetch_kafka(tps)
        except KafkaError as e:
            print(f"warning: offsets in Kafka could not be read ({e}); showing ZooKeeper's", file=sys.stderr)
            in_kafka = {}
        header = ("Group", "Topic", "Pid", "Offset", "logSize", "Lag", "Owner")
        print(STORAGE_ROW % (*header, "Storage") if args.storage else ROW % header)
        for tp in tps:
            zk_off, kafka_off = in_zk.get(tp), in_kafka.get(tp)
            row = _row(args.group, tp, zk_off, kafka_off, cluster, zk)
            print(STORAGE_ROW % row if args.storage else ROW % row[:-1])
            if zk_off is not None and kafka_off is not None and zk_off != kafka_off:
                print(f"note: {tp.topic}-{tp.partition}: Kafka has offset {kafka_off}, ZooKeeper {zk_off}; "
                      "Offset shows the larger", file=sys.stderr)
        if args.broker_info:
            print("BROKER INFO")
            for bid, (h, p) in brokers.items():
                print(f"{bid} -> {h}:{p}")
    except KafkaError as e:
        raise CliError(f"checking group {args.group}: {e}") from e
    finally:
        if cluster is not None:
            cluster.close()
        zk.stop()
        zk.close()
    return 0


def _row(group: str, tp: TopicPartition, zk_off: int | None, kafka_off: int | None, cluster: Cluster,
         zk: KazooClient) -> tuple[Any, ...]:
    log_size = list_offset(cluster, tp.topic, tp.partition, "largest")
    if zk_off is None and kafka_off is None:
        offset, lag, storage = "unknown", "unknown", "none"
    else:
        offset = max(o for o in (zk_off, kafka_off) if o is not None)
        storage = ("both" if zk_off == kafka_off else "zookeeper" if offset == zk_off else "kafka")
        lag = log_size - offset
    return (group, tp.topic, tp.partition, offset, log_size, lag, _owner(zk, group, tp.topic, tp.partition), storage)
