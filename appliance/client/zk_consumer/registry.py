"""What the brokers registered in ZooKeeper, as the ZooKeeper consumer and its tools read it:
the live brokers' addresses (``/brokers/ids``) and a topic's partition count
(``/brokers/topics/<topic>``)."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from appliance.client.zk_consumer.znodes import (
    BROKER_IDS,
    BROKER_TOPICS,
    decode_broker_address,
    decode_partition_count,
)
from appliance.errors import KafkaError

__all__ = ["read_brokers", "bootstrap_of", "partition_count"]

log = logging.getLogger("appliance.client.zk_consumer")


def read_brokers(zk: KazooClient) -> dict[int, tuple[str, int]]:
    """{broker id: (host, port)} of every registered broker (unreadable ones logged, skipped)."""
    out = {}
    try:
        ids = zk.get_children(BROKER_IDS)
    except NoNodeError:
        return {}
    for bid in sorted(ids, key=lambda b: int(b) if b.isdigit() else -1):
        try:
            data, _ = zk.get(f"{BROKER_IDS}/{bid}")
            out[int(bid)] = decode_broker_address(int(bid), data)
        except (NoNodeError, ValueError) as e:
            log.warning("broker %s: %s", bid, e)
    return out


def bootstrap_of(zk: KazooClient, where: str) -> str:
    """``host:port,...`` of the registered brokers. Raises KafkaError naming ``where`` (the
    zookeeper.connect) when none is registered."""
    brokers = read_brokers(zk)
    if not brokers:
        raise KafkaError(f"no broker is registered under {BROKER_IDS} in ZooKeeper at {where}")
    return ",".join(f"{h}:{p}" for h, p in brokers.values())


def partition_count(zk: KazooClient, topic: str) -> int | None:
    """The topic's number of partitions; None if the topic does not exist. Raises ValueError
    for a znode that is not a topic's JSON."""
    try:
        data, _ = zk.get(f"{BROKER_TOPICS}/{topic}")
    except NoNodeError:
        return None
    return decode_partition_count(topic, data)
