"""The ZooKeeper layout the 0.8 high-level consumer reads and writes, as the design documents give
it ("ZooKeeper paths", "Consumer registration"). Pure functions: no kazoo, no I/O.

- ``/consumers/<group>/ids/<consumer_id>`` (ephemeral): ``{"version":1,"subscription":{topic: n},
  "pattern":"static|white_list|black_list","timestamp":"<ms>"}``; for a filter the subscription's
  one key is the regex
- ``/consumers/<group>/owners/<topic>/<partition>`` (ephemeral): the owning thread id
- ``/consumers/<group>/offsets/<topic>/<partition>`` (persistent): the next offset to read, as
  decimal text
- read only: ``/brokers/ids/<id>`` and ``/brokers/topics/<topic>``, as the brokers write them.
  (``appliance.cluster.zk_paths`` declares those formats too, but the client layer sits below
  the cluster layer and may not import it; the consumer needs only host/port and the partition
  numbers, read here.)

Decoders raise :class:`ValueError` naming the path.
"""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import dataclass

__all__ = ["Registration", "ids_path", "owners_path", "offsets_path", "owner_path", "offset_path",
           "consumer_group_path", "encode_registration", "decode_registration", "default_consumer_id",
           "decode_broker_address", "decode_partition_count", "STATIC", "WHITE_LIST", "BLACK_LIST",
           "BROKER_IDS", "BROKER_TOPICS"]

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
STATIC, WHITE_LIST, BLACK_LIST = "static", "white_list", "black_list"


@dataclass(frozen=True, slots=True)
class Registration:
    """One consumer's subscription: topic (or, for a filter, the regex) -> number of streams."""

    subscription: dict[str, int]
    pattern: str = STATIC
    timestamp_ms: int = 0


def consumer_group_path(group: str) -> str:
    return f"/consumers/{group}"


def ids_path(group: str) -> str:
    return f"/consumers/{group}/ids"


def owners_path(group: str, topic: str | None = None) -> str:
    return f"/consumers/{group}/owners" + (f"/{topic}" if topic is not None else "")


def offsets_path(group: str, topic: str | None = None) -> str:
    return f"/consumers/{group}/offsets" + (f"/{topic}" if topic is not None else "")


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/owners/{topic}/{partition}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def default_consumer_id(group: str) -> str:
    """``<group>_<hostname>-<ms>-<8 hex digits>``, the shape Kafka 0.8.2 gives its consumer ids."""
    return f"{group}_{socket.gethostname()}-{int(time.time() * 1000)}-{random.getrandbits(32):08x}"


def encode_registration(r: Registration) -> bytes:
    return json.dumps({"version": 1, "subscription": r.subscription, "pattern": r.pattern,
                       "timestamp": str(r.timestamp_ms or int(time.time() * 1000))},
                      separators=(",", ":")).encode()


def _load(data: bytes, path: str) -> dict:
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return obj


def decode_registration(data: bytes, path: str) -> Registration:
    obj = _load(data, path)
    sub = obj.get("subscription")
    if not isinstance(sub, dict) or not all(isinstance(n, int) and n > 0 for n in sub.values()):
        raise ValueError(f"{path}: subscription is not a map of topic to stream count")
    pattern = obj.get("pattern", STATIC)
    if pattern not in (STATIC, WHITE_LIST, BLACK_LIST):
        raise ValueError(f"{path}: unknown pattern {pattern!r}")
    return Registration(dict(sub), pattern, int(obj.get("timestamp") or 0))


def decode_broker_address(broker_id: int, data: bytes) -> tuple[str, int]:
    """host and port of a broker registration's PLAINTEXT listener (this client speaks no TLS):
    ``host``/``port``, which Kafka fills from that listener, else the first endpoint whose
    listener maps to PLAINTEXT. Raises ValueError when it has none."""
    path = f"{BROKER_IDS}/{broker_id}"
    obj = _load(data, path)
    host, port = obj.get("host"), obj.get("port")
    if isinstance(host, str) and host and isinstance(port, int) and port > 0:
        return host, port
    protocols = obj.get("listener_security_protocol_map") or {}
    for ep in obj.get("endpoints") or []:
        name, _, address = str(ep).partition("://")
        h, _, p = address.rpartition(":")
        if protocols.get(name, name) == "PLAINTEXT" and p.isdigit():
            return h, int(p)
    raise ValueError(f"{path}: no PLAINTEXT listener")


def decode_partition_count(topic: str, data: bytes) -> int:
    """The number of partitions of a topic znode (``{"partitions":{"0":[..],..}}``)."""
    path = f"{BROKER_TOPICS}/{topic}"
    parts = _load(data, path).get("partitions")
    if not isinstance(parts, dict) or not all(str(k).isdigit() for k in parts):
        raise ValueError(f"{path}: partitions is not a map of partition to replicas")
    return len(parts)
