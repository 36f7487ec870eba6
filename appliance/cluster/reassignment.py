"""The library behind ``appliance reassign-partitions`` (Kafka's ReassignPartitionsCommand):
--generate, --execute, --cancel and --verify over Kafka's JSON files.

The tool starts and cancels reassignments with AlterPartitionReassignments (API 45); the
controller runs those and the ZooKeeper-era ``/admin/reassign_partitions`` znode (which
:func:`execute` writes, as Kafka's old tool did) through the same code.

- topics-to-move file: ``{"version":1,"topics":[{"topic":"foo"}]}``
- reassignment file: ``{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],
  "log_dirs":["any","any"]}]}`` (``log_dirs`` optional, only "any" is understood)

Bad input raises :class:`ReassignmentError` with a message naming the key or the value; nothing
is written to ZooKeeper unless the whole request is valid.
"""

from __future__ import annotations

import json
import random
from typing import Any

from appliance.cluster import replication_throttle as rt
from appliance.cluster.assignment import (
    DISABLED,
    ENFORCED,
    InvalidReplicationFactor,
    RackInformationMissing,
    assign_replicas,
)
from appliance.cluster.zk_paths import TopicPartition
from appliance.cluster.zk_store import ZkStore

__all__ = [
    "ReassignmentError", "parse_topics_to_move", "parse_reassignment", "format_reassignment",
    "current_assignment", "generate", "check_moves", "execute", "verify", "in_progress",
    "set_throttle", "remove_throttle",
    "COMPLETE", "IN_PROGRESS", "FAILED",
]

COMPLETE, IN_PROGRESS, FAILED = "complete", "in progress", "failed"


class ReassignmentError(ValueError):
    """A reassignment request that cannot be carried out, with the reason."""


def _json(text: str, what: str) -> dict:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ReassignmentError(f"{what} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ReassignmentError(f"{what} must be a JSON object")
    if obj.get("version", 1) != 1:
        raise ReassignmentError(f"{what}: unsupported version {obj.get('version')!r} (expected 1)")
    return obj


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def parse_topics_to_move(text: str) -> list[str]:
    entries = _json(text, "topics-to-move file").get("topics")
    if not isinstance(entries, list) or not entries:
        raise ReassignmentError("topics-to-move file: 'topics' must be a non-empty list")
    topics = []
    for e in entries:
        t = e.get("topic") if isinstance(e, dict) else None
        if not isinstance(t, str) or not t:
            raise ReassignmentError(f"topics-to-move file: entry {e!r} has no 'topic' name")
        topics.append(t)
    if len(set(topics)) != len(topics):
        raise ReassignmentError("topics-to-move file: a topic is listed twice")
    return topics


def parse_reassignment(text: str) -> dict[TopicPartition, tuple[int, ...]]:
    """Raises ReassignmentError: a malformed entry names the key; the checks Kafka's
    ``parseAndValidate`` makes give its messages (empty file, empty replica list, a partition
    listed twice, a broker listed twice in one replica list)."""
    entries = _json(text, "reassignment file").get("partitions")
    if not isinstance(entries, list):
        raise ReassignmentError("reassignment file: 'partitions' must be a list")
    if not entries:
        raise ReassignmentError("Partition reassignment data file is empty")
    parsed: list[tuple[TopicPartition, list[int]]] = []
    for e in entries:
        if not isinstance(e, dict):
            raise ReassignmentError(f"reassignment file: entry {e!r} is not an object")
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise ReassignmentError(f"reassignment file: entry {e!r} has no 'topic'")
        if not _is_int(partition) or partition < 0:
            raise ReassignmentError(f"reassignment file: 'partition' of {topic} must be an integer >= 0")
        tp = TopicPartition(topic, partition)
        if not isinstance(replicas, list) or not all(_is_int(r) and r >= 0 for r in replicas):
            raise ReassignmentError(f"reassignment file: 'replicas' of {tp} must be a list of broker ids")
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(replicas)
                                 or any(d != "any" for d in dirs)):
            raise ReassignmentError(f"reassignment file: 'log_dirs' of {tp} must be \"any\" per replica")
        parsed.append((tp, replicas))
    if any(not r for _, r in parsed):
        raise ReassignmentError("Partition replica list cannot be empty")
    twice = _duplicates(tp for tp, _ in parsed)
    if twice:
        raise ReassignmentError("Partition reassignment contains duplicate topic partitions: "
                                + ",".join(map(str, twice)))
    repeats = [(tp, _duplicates(r)) for tp, r in parsed if _duplicates(r)]
    if repeats:
        raise ReassignmentError("Partition replica lists may not contain duplicate entries: " + ". ".join(
            f"{tp} contains multiple entries for {','.join(map(str, d))}" for tp, d in repeats))
    return {tp: tuple(r) for tp, r in parsed}


def _duplicates(items: Any) -> list:
    seen: set = set()
    out: list = []
    for x in items:
        if x in seen and x not in out:
            out.append(x)
        seen.add(x)
    return out


def format_reassignment(moves: dict[TopicPartition, tuple[int, ...]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(moves.items())]}, separators=(",", ":"))


def current_assignment(store: ZkStore, topics: list[str]) -> dict[TopicPartition, tuple[int, ...]]:
    """Raises ReassignmentError naming a topic that does not exist."""
    out = {}
    for t in topics:
        a = store.assignment(t)
        if a is None:
            raise ReassignmentError(f"topic {t} does not exist")
        out.update({TopicPartition(t, p): r for p, r in a.partitions.items()})
    return out


def generate(store: ZkStore, topics: list[str], brokers: list[int], rng: random.Random | None = None,
             rack_aware: bool = True,
             ) -> tuple[dict[TopicPartition, tuple[int, ...]], dict[TopicPartition, tuple[int, ...]]]:
    """(current, proposed): each topic spread over ``brokers`` as topic creation would (across
    their racks unless ``rack_aware`` is off: --disable-rack-aware), keeping its partition count
    and replication factor."""
    if not brokers or len(set(brokers)) != len(brokers):
        raise ReassignmentError("--broker-list must name distinct brokers")
    registered = store.brokers()
    racks = {b: i.rack for b, i in registered.items()}
    unknown = sorted(set(brokers) - set(registered))
    if unknown:
        raise ReassignmentError(f"--broker-list names brokers that are not registered: {unknown}")
    current = current_assignment(store, topics)
    proposed: dict[TopicPartition, tuple[int, ...]] = {}
    for t in topics:
        parts = sorted(tp.partition for tp in current if tp.topic == t)
        rf = len(current[TopicPartition(t, parts[0])])
        try:
            new = assign_replicas(brokers, len(parts), rf, rng=rng, racks=racks,
                                  mode=ENFORCED if rack_aware else DISABLED)
        except (InvalidReplicationFactor, RackInformationMissing) as e:
            raise ReassignmentError(f"topic {t}: {e}") from None
        proposed.update({TopicPartition(t, p): new[i] for i, p in enumerate(parts)})
    return current, proposed


def check_moves(store: ZkStore, moves: dict[TopicPartition, tuple[int, ...]]) -> None:
    """Kafka's checks before a reassignment is asked for.

    Raises:
        ReassignmentError: a partition does not exist, or a broker is not registered.
    """
    topics = sorted({tp.topic for tp in moves})
    existing: dict[TopicPartition, tuple[int, ...]] = {}
    for t in topics:
        a = store.assignment(t)
        if a is not None:
            existing.update({TopicPartition(t, p): r for p, r in a.partitions.items()})
    missing = sorted(str(tp) for tp in moves if tp not in existing)
    if missing:
        raise ReassignmentError(f"The proposed assignment contains non-existent partitions: {', '.join(missing)}")
    unknown = sorted({b for r in moves.values() for b in r} - set(store.broker_ids()))
    if unknown:
        raise ReassignmentError("The proposed assignment contains non-existent brokerIDs: " + ",".join(map(str, unknown)))


def execute(store: ZkStore, moves: dict[TopicPartition, tuple[int, ...]]) -> None:
    """The ZooKeeper-era request: validate, then write ``/admin/reassign_partitions`` for the
    controller (as Kafka's old tool and ZooKeeper tooling do).

    Raises:
        ReassignmentError: another reassignment is running, a partition does not exist, or a
            broker is not registered.
    """
    if store.reassignment():
        raise ReassignmentError("There is an existing assignment running.")
    check_moves(store, moves)
    store.request_reassignment(moves)


def in_progress(store: ZkStore, tps: list[TopicPartition]) -> set[TopicPartition]:
    """Those of ``tps`` still moving: in /admin/reassign_partitions, or with replicas being
    added or removed in their topic znode (where the API's reassignments are kept)."""
    pending = store.reassignment()
    out = {tp for tp in tps if tp in pending}
    for t in sorted({tp.topic for tp in tps}):
        a = store.assignment(t)
        if a is not None:
            out |= {tp for tp in tps if tp.topic == t and (a.adding.get(tp.partition) or a.removing.get(tp.partition))}
    return out


def verify(store: ZkStore, moves: dict[TopicPartition, tuple[int, ...]]) -> dict[TopicPartition, str]:
    """Per partition: COMPLETE (its replicas are the target and nothing is pending),
    IN_PROGRESS (still moving, see :func:`in_progress`), or FAILED."""
    moving = in_progress(store, list(moves))
    out = {}
    for tp, target in sorted(moves.items()):
        if tp in moving:
            out[tp] = IN_PROGRESS
            continue
        a = store.assignment(tp.topic)
        out[tp] = COMPLETE if a is not None and a.partitions.get(tp.partition) == tuple(target) else FAILED
    return out


def set_throttle(store: ZkStore, moves: dict[TopicPartition, tuple[int, ...]],
                 current: dict[TopicPartition, tuple[int, ...]], rate: int) -> None:
    """Kafka's --throttle: both replication rates on every broker a moving partition is or will
    be on; per topic, the replicas each moving partition has (leader side) and the ones being
    added (follower side). Other configs of the topics and brokers are kept."""
    moving = {tp: r for tp, r in moves.items() if current.get(tp) != tuple(r)}
    for b in sorted({b for tp, r in moving.items() for b in (*r, *current.get(tp, ()))}):
        cfg = store.broker_config(b)
        cfg.update({rt.LEADER_RATE: str(rate), rt.FOLLOWER_RATE: str(rate)})
        store.set_broker_config(b, cfg)
    for t in sorted({tp.topic for tp in moving}):
        mine = {tp: r for tp, r in moving.items() if tp.topic == t}
        cfg = store.topic_config(t)
        cfg[rt.LEADER_REPLICAS] = rt.format_replicas(
            (tp.partition, b) for tp in mine for b in current.get(tp, ()))
        cfg[rt.FOLLOWER_REPLICAS] = rt.format_replicas(
            (tp.partition, b) for tp, r in mine.items() for b in r if b not in current.get(tp, ()))
        store.set_topic_config(t, cfg)


def remove_throttle(store: ZkStore, topics: list[str]) -> bool:
    """Take the throttle off every registered broker and ``topics``; True if any was set."""
    removed = False
    for b in store.broker_ids():
        cfg = store.broker_config(b)
        if rt.LEADER_RATE in cfg or rt.FOLLOWER_RATE in cfg:
            store.set_broker_config(b, {k: v for k, v in cfg.items()
                                        if k not in (rt.LEADER_RATE, rt.FOLLOWER_RATE)})
            removed = True
    for t in topics:
        cfg = store.topic_config(t)
        if rt.REPLICATION_KEYS & set(cfg):
            store.set_topic_config(t, {k: v for k, v in cfg.items() if k not in rt.REPLICATION_KEYS})
            removed = True
    return removed
