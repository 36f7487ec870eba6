"""Kafka's znode layout and JSON formats (ZooKeeper era, 2.x), declared once.

The paths and the JSON written here are Kafka's own, so Kafka's tools (kafka-topics.sh
--zookeeper, zookeeper-shell, Burrow ...) read a cluster of appliances and we read theirs.
Pure functions: no kazoo, no I/O. Decoders raise :class:`ZnodeFormatError` naming the path.

Formats (Kafka: core/src/main/scala/kafka/zk/ZkData.scala):

- ``/brokers/ids/<id>`` (ephemeral): ``{"version":4,"host":..,"port":..,"jmx_port":-1,
  "timestamp":"<ms>","endpoints":["PLAINTEXT://h:p"],"listener_security_protocol_map":{..}}``
  (+ ``"rack"`` when set)
- ``/brokers/topics/<topic>``: ``{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{},
  "removing_replicas":{}}``; version 3 adds ``"topic_id"`` (KIP-516, Kafka's text form of the id)
- ``/brokers/topics/<topic>/partitions/<p>/state``: ``{"controller_epoch":..,"leader":..,
  "version":1,"leader_epoch":..,"isr":[..]}``
- ``/controller`` (ephemeral): ``{"version":1,"brokerid":..,"timestamp":"<ms>"}``;
  ``/controller_epoch``: the epoch as decimal text
- ``/config/topics/<topic>``: ``{"version":1,"config":{..}}``; a change is announced by a
  sequential ``/config/changes/config_change_`` holding ``{"version":2,"entity_path":"topics/<t>"}``
- ``/config/brokers/<id>`` and ``/config/brokers/<default>``: a broker's dynamic configs and the
  cluster-wide defaults, same shape (the reassignment throttle rates too), announced the same way
  (``"entity_path":"brokers/<id>"``; version 1's ``entity_type``/``entity_name`` is read too).
- ``/admin/delete_topics/<topic>`` (no data); ``/admin/reassign_partitions``:
  ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``;
  ``/admin/preferred_replica_election`` and ``/isr_change_notification/isr_change_<seq>``:
  ``{"version":1,"partitions":[{"topic":..,"partition":..}]}``
- ``/latest_producer_id_block``: ``{"version":1,"broker":..,"block_start":"<first>",
  "block_end":"<last>"}`` (empty until a broker takes the first block; the codec is
  :mod:`appliance.storage.producer_id_block`, shared with a standalone broker's file)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from appliance.config import PLAINTEXT
from appliance.storage.partition_metadata import parse_topic_id, topic_id_text

__all__ = [
    "BROKER_IDS", "BROKER_TOPICS", "CONTROLLER", "CONTROLLER_EPOCH", "CONFIG_TOPICS", "CONFIG_BROKERS",
    "CONFIG_CHANGES", "CONFIG_CHANGE_PREFIX", "DELETE_TOPICS", "REASSIGN_PARTITIONS",
    "PREFERRED_REPLICA_ELECTION", "ISR_CHANGE_NOTIFICATION", "ISR_CHANGE_PREFIX", "CLUSTER_ID",
    "PRODUCER_ID_BLOCK",
    "PERSISTENT_PATHS", "ZnodeFormatError", "BrokerInfo", "LeaderIsr", "TopicAssignment",
    "TopicPartition", "broker_path", "topic_path", "partitions_path", "partition_state_path",
    "topic_config_path", "broker_config_path", "decode_config", "delete_topic_path", "encode_broker", "decode_broker", "encode_topic",
    "decode_topic", "encode_partition_state", "decode_partition_state", "encode_controller",
    "decode_controller", "encode_controller_epoch", "decode_controller_epoch",
    "encode_topic_config", "decode_topic_config", "encode_config_change", "decode_config_change",
    "BROKER_DEFAULT", "encode_partitions",
    "decode_partitions", "encode_reassignment", "decode_reassignment", "encode_cluster_id",
    "decode_cluster_id", "split_chroot", "now_ms",
]

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = CONFIG_CHANGES + "/config_change_"
BROKER_DEFAULT = "<default>"  # /config/brokers/<default>: the cluster-wide dynamic broker configs
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = ISR_CHANGE_NOTIFICATION + "/isr_change_"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# What a Kafka broker creates at start (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    "/consumers", BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, CONFIG_TOPICS, "/config/clients",
    "/config/users", CONFIG_BROKERS, DELETE_TOPICS, "/brokers/seqid", ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK, "/log_dir_event_notification",
)


class ZnodeFormatError(ValueError):
    """A znode holds data that is not the JSON Kafka writes there (names the path)."""


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One registered broker: its id and listeners (``endpoints`` as "NAME://host:port")."""

    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...] = ()
    security_protocol_map: dict[str, str] = field(default_factory=lambda: {PLAINTEXT: PLAINTEXT})
    rack: str | None = None
    timestamp_ms: int = 0
    jmx_port: int = -1
    # KIP-380's broker epoch: the registration znode's czxid (-1: not read from ZooKeeper). A
    # broker whose session expired registers again with a new one, so the controller tells a
    # re-registration from the same broker staying, and its requests name the registration they
    # were meant for.
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """A partition's state znode: leader (-1 = none), leader epoch, ISR, and the epoch of the
    controller that wrote it. ``zk_version`` is the znode version it was read at (-1 = unknown),
    the condition for the next write."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic znode: partition -> replica list, plus KIP-455's reassignment in flight and the
    topic's id (None in a znode written before topic ids)."""

    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: bytes | None = None


def split_chroot(connect: str) -> tuple[str, str]:
    """"h1:p1,h2:p2/chroot" -> ("h1:p1,h2:p2", "/chroot"); no chroot -> "" (Kafka's rule:
    the chroot is everything from the first '/')."""
    i = connect.find("/")
    if i < 0:
        return connect, ""
    return connect[:i], connect[i:].rstrip("/")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def broker_config_path(broker_id: int | str) -> str:
    """``broker_id`` may be :data:`BROKER_DEFAULT`."""
    return f"{CONFIG_BROKERS}/{broker_id}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def now_ms() -> int:
    return int(time.time() * 1000)


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes, path: str) -> Any:
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ZnodeFormatError(f"{path}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ZnodeFormatError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _get(obj: dict, key: str, kind: type, path: str) -> Any:
    v = obj.get(key)
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
        raise ZnodeFormatError(f"{path}: field {key!r} missing or not {kind.__name__}")
    return v


def _int_list(v: Any, what: str, path: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ZnodeFormatError(f"{path}: {what} is not a list of integers")
    return tuple(v)


# --- brokers ----------------------------------------------------------------------------------

def encode_broker(b: BrokerInfo) -> bytes:
    obj: dict[str, Any] = {
        "listener_security_protocol_map": dict(b.security_protocol_map),
        "endpoints": list(b.endpoints) or [f"{PLAINTEXT}://{b.host}:{b.port}"],
        "jmx_port": b.jmx_port,
        "host": b.host,
        "timestamp": str(b.timestamp_ms or now_ms()),
        "port": b.port,
        "version": 4,
    }
    if b.rack is not None:
        obj["rack"] = b.rack
    return _dump(obj)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    path = broker_path(broker_id)
    obj = _load(data, path)
    endpoints = obj.get("endpoints") or []
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise ZnodeFormatError(f"{path}: endpoints is not a list of strings")
    host, port = obj.get("host"), obj.get("port")
    if (host is None or port in (None, -1)) and endpoints:
        # Kafka writes host null / port -1 when its first listener is not PLAINTEXT
        host, _, p = endpoints[0].split("://", 1)[-1].rpartition(":")
        port = int(p) if p.isdigit() else None
    if not isinstance(host, str) or not isinstance(port, int):
        raise ZnodeFormatError(f"{path}: no host and port")
    return BrokerInfo(
        broker_id=broker_id, host=host, port=port, endpoints=tuple(endpoints),
        security_protocol_map=dict(obj.get("listener_security_protocol_map") or {PLAINTEXT: PLAINTEXT}),
        rack=obj.get("rack"), timestamp_ms=int(obj.get("timestamp") or 0),
        jmx_port=int(obj.get("jmx_port", -1)))


# --- topics and partitions -------------------------------------------------------------------

def _encode_assign(m: dict[int, tuple[int, ...]]) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in sorted(m.items())}


def encode_topic(a: TopicAssignment) -> bytes:
    obj: dict[str, Any] = {"version": 3 if a.topic_id else 2}
    if a.topic_id:
        obj["topic_id"] = topic_id_text(a.topic_id)
    obj.update({"partitions": _encode_assign(a.partitions),
                "adding_replicas": _encode_assign(a.adding),
                "removing_replicas": _encode_assign(a.removing)})
    return _dump(obj)


def _decode_assign(v: Any, what: str, path: str) -> dict[int, tuple[int, ...]]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ZnodeFormatError(f"{path}: {what} is not an object")
    out = {}
    for k, r in v.items():
        try:
            p = int(k)
        except ValueError:
            raise ZnodeFormatError(f"{path}: partition {k!r} is not a number") from None
        out[p] = _int_list(r, f"{what}[{k}]", path)
    return out


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    path = topic_path(topic)
    obj = _load(data, path)
    topic_id = None
    if obj.get("topic_id") is not None:
        try:
            topic_id = parse_topic_id(str(obj["topic_id"]))
        except ValueError as e:
            raise ZnodeFormatError(f"{path}: {e}") from e
    return TopicAssignment(
        partitions=_decode_assign(_get(obj, "partitions", dict, path), "partitions", path),
        adding=_decode_assign(obj.get("adding_replicas"), "adding_replicas", path),
        removing=_decode_assign(obj.get("removing_replicas"), "removing_replicas", path),
        topic_id=topic_id)


def encode_partition_state(s: LeaderIsr) -> bytes:
    return _dump({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                  "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def decode_partition_state(topic: str, partition: int, data: bytes, zk_version: int = -1) -> LeaderIsr:
    path = partition_state_path(topic, partition)
    obj = _load(data, path)
    return LeaderIsr(
        leader=_get(obj, "leader", int, path), leader_epoch=_get(obj, "leader_epoch", int, path),
        isr=_int_list(obj.get("isr"), "isr", path),
        controller_epoch=_get(obj, "controller_epoch", int, path), zk_version=zk_version)


# --- controller -------------------------------------------------------------------------------

def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(now_ms())})


def decode_controller(data: bytes) -> int:
    """The controller's broker id. Kafka 0.8 wrote a bare number; that is accepted too."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{CONTROLLER}: not JSON") from None
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    if not isinstance(obj, dict):
        raise ZnodeFormatError(f"{CONTROLLER}: expected an object")
    return _get(obj, "brokerid", int, CONTROLLER)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(f"{CONTROLLER_EPOCH}: not a number: {data[:40]!r}") from None


# --- configs and admin requests --------------------------------------------------------------

def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": {k: str(v) for k, v in config.items()}})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    return decode_config(topic_config_path(topic), data)


def decode_config(path: str, data: bytes) -> dict[str, str]:
    """The ``config`` object of a /config/topics or /config/brokers znode."""
    cfg = _load(data, path).get("config") or {}
    if not isinstance(cfg, dict):
        raise ZnodeFormatError(f"{path}: config is not an object")
    return {str(k): str(v) for k, v in cfg.items()}


def encode_config_change(entity_path: str) -> bytes:
    """``entity_path``: ``topics/<t>``, ``brokers/<id>`` or ``brokers/<default>``."""
    return _dump({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes, path: str) -> tuple[str, str]:
    """(entity type, entity name) of a config change notification, version 2 or 1."""
    obj = _load(data, path)
    if obj.get("version") == 1:
        kind, name = obj.get("entity_type"), obj.get("entity_name")
    else:
        kind, _, name = str(obj.get("entity_path") or "").partition("/")
    if not kind or not name:
        raise ZnodeFormatError(f"{path}: no entity in {obj}")
    return str(kind), str(name)


def encode_partitions(parts: set[TopicPartition] | list[TopicPartition]) -> bytes:
    """The data of /admin/preferred_replica_election and of isr_change_<seq>."""
    return _dump({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition} for tp in sorted(parts)]})


def _partition_entries(data: bytes, path: str) -> list[dict]:
    entries = _load(data, path).get("partitions")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ZnodeFormatError(f"{path}: partitions is not a list of objects")
    return entries


def decode_partitions(data: bytes, path: str) -> set[TopicPartition]:
    return {TopicPartition(_get(e, "topic", str, path), _get(e, "partition", int, path))
            for e in _partition_entries(data, path)}


def encode_reassignment(moves: dict[TopicPartition, tuple[int, ...]]) -> bytes:
    return _dump({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)}
        for tp, r in sorted(moves.items())]})


def decode_reassignment(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    path = REASSIGN_PARTITIONS
    out = {}
    for e in _partition_entries(data, path):
        tp = TopicPartition(_get(e, "topic", str, path), _get(e, "partition", int, path))
        out[tp] = _int_list(e.get("replicas"), f"replicas of {tp}", path)
    return out


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _get(_load(data, CLUSTER_ID), "id", str, CLUSTER_ID)
