"""The client APIs a cluster-mode broker answers from the cluster's view, in the cluster worker:
Metadata (every live broker; each partition's leader, replicas and ISR, from UpdateMetadata),
FindCoordinator (the leader of the group's ``__consumer_offsets`` partition) and CreateTopics (Kafka's AdminZkClient: assign replicas over the live brokers, write
``/brokers/topics/<t>``; the controller elects and sends LeaderAndIsr).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

from kazoo.exceptions import KazooException

from appliance.cluster.assignment import (
    ENFORCED,
    SAFE,
    InvalidPartitions,
    InvalidReplicationFactor,
    RackInformationMissing,
    assign_replicas,
)
from appliance.cluster.broker_connection import NoEndpoint, endpoint_of
from appliance.cluster.leadership import LeadershipTable
from appliance.cluster.topic_ids import TopicIds
from appliance.cluster.zk_paths import BrokerInfo, TopicAssignment
from appliance.cluster.zk_store import TopicCollision, TopicExists, ZkStore
from appliance.config import ConfigError, TopicConfig, validate_topic_name
from appliance.coordinator.batched_lookup import FIRST_BATCHED_VERSION, batched_coordinators
from appliance.coordinator.routing import (
    OFFSETS_TOPIC,
    TXN_TOPIC,
    offsets_partition_for,
    offsets_topic_config,
    txn_partition_for,
    txn_topic_config,
)
from appliance.errors import ErrorCode, KafkaError, error_for_code
from appliance.protocol.replica_assignment import requested_assignment

FIRST_TOPIC_ID_METADATA = 10  # Metadata answers topic ids (KIP-516)

__all__ = ["metadata_body", "create_topics_body", "create_partitions_body", "coordinator_body", "describe_cluster_body"]

CLUSTER_ID = "appliance-cluster"


def _topic_entry(table: LeadershipTable, name: str, parts: dict[int, Any]) -> dict:
    out = []
    for p in sorted(parts):
        s = parts[p]
        live = s.leader in table.live_brokers
        # the leader epoch (v7+, KIP-320) lets a client drop an answer older than one it has
        # seen: brokers learn a leader change at different moments, and without it librdkafka
        # followed a lagging broker's answer back to the old leader and stayed there
        out.append({"error_code": 0 if live else int(ErrorCode.LEADER_NOT_AVAILABLE),
                    "partition_index": p, "leader_id": s.leader if live else -1,
                    "leader_epoch": s.leader_epoch,
                    "replica_nodes": list(s.replicas), "isr_nodes": list(s.isr),
                    "offline_replicas": [r for r in s.replicas if r not in table.live_brokers]})
    return {"error_code": 0, "name": name, "is_internal": name in (OFFSETS_TOPIC, TXN_TOPIC), "partitions": out}


def _by_topic(table: LeadershipTable) -> dict[str, dict[int, Any]]:
    topics: dict[str, dict[int, Any]] = {}
    for tp, s in table.metadata.items():
        topics.setdefault(tp.topic, {})[tp.partition] = s
    return topics


async def metadata_body(table: LeadershipTable, store: ZkStore, config: Any, request: Any,
                        version: int, topic_ids: TopicIds | None = None, listener: str = "") -> dict:
    topics = _by_topic(table)
    by_id: list[bytes] = []
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(topics)
    else:
        names = [t.name for t in request.topics if t.name is not None]
        asked_ids = [t.topic_id for t in request.topics if t.name is None]
        if asked_ids:  # v12+: topics asked by id alone (KIP-516)
            known = await topic_ids.ids(topics) if topic_ids is not None else {}
            name_of = {tid: n for n, tid in known.items()}
            names += [name_of[i] for i in asked_ids if i in name_of]
            by_id = [i for i in asked_ids if i not in name_of]
        auto = bool(config["auto.create.topics.enable"]) and (version < 4 or request.allow_auto_topic_creation)
        missing = [n for n in names if n not in topics and n not in (OFFSETS_TOPIC, TXN_TOPIC)]
        if auto and missing:
            rf = min(int(config["default.replication.factor"]), max(len(table.live_brokers), 1))
            for n in missing:
                await create_topic(table, store, config, n, -1, rf, {}, rack_mode=SAFE)
    entries = []
    for n in names:
        if n in topics:
            entries.append(_topic_entry(table, n, topics[n]))
            continue
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            validate_topic_name(n)
        except KafkaError:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
        entries.append({"error_code": int(code), "name": n, "is_internal": False, "partitions": []})
    if any(e["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for e in entries):
        # created but not yet elected: retriable, as Kafka answers while the controller works
        known = set(await asyncio.get_running_loop().run_in_executor(None, store.topics))
        for e in entries:
            if e["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and e["name"] in known:
                e["error_code"] = int(ErrorCode.LEADER_NOT_AVAILABLE)
    if topic_ids is not None and version >= FIRST_TOPIC_ID_METADATA:
        ids = await topic_ids.ids(e["name"] for e in entries if e["error_code"] == 0)
        for e in entries:
            e["topic_id"] = ids.get(e["name"], bytes(16))
    entries += [{"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "name": None if version >= 12 else "",
                 "topic_id": i, "is_internal": False, "partitions": []} for i in by_id]
    live, controller = await _brokers_and_controller(table, store, listener)
    return {"throttle_time_ms": 0,
            "brokers": [{"node_id": b, "host": h, "port": p, "rack": r}
                        for b, (h, p, r) in sorted(live.items())],
            "cluster_id": CLUSTER_ID,
            "controller_id": controller,
            "topics": entries}


async def describe_cluster_body(table: LeadershipTable, store: ZkStore, listener: str = "") -> dict:
    """DescribeCluster (KIP-700): the live brokers and the controller, as Metadata has them."""
    live, controller = await _brokers_and_controller(table, store, listener)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": CLUSTER_ID, "controller_id": controller,
            "brokers": [{"broker_id": b, "host": h, "port": p, "rack": r}
                        for b, (h, p, r) in sorted(live.items())]}


async def _brokers_and_controller(table: LeadershipTable, store: ZkStore,
                                  listener: str) -> tuple[dict[int, tuple[str, int, str | None]], int]:
    """The live brokers and the controller a client is told: the controller's view from
    UpdateMetadata; until the first one reaches this broker (it has just joined, or the
    controller's first try failed and waits to retry), ZooKeeper's registrations and
    /controller. A client must not learn "no controller" from a broker that merely has not heard
    yet: librdkafka's admin client then waits for a broker to change state before it asks again,
    and a CreateTopics sits until its timeout. Each broker at its address on ``listener`` (the
    client's), where it has one."""
    if table.live_brokers and table.fence.controller_id != -1:
        return table.brokers_on(listener), table.fence.controller_id
    try:
        brokers, controller = await asyncio.get_running_loop().run_in_executor(
            None, lambda: (store.brokers(), store.controller_id()))
    except KazooException:  # ZooKeeper unreachable right now: what we have, as before
        return table.brokers_on(listener), table.fence.controller_id
    return {b: (*_address_on(i, listener), i.rack) for b, i in brokers.items()}, controller


def _address_on(broker: BrokerInfo, listener: str) -> tuple[str, int]:
    """A registration's host and port on ``listener``, or its legacy ones."""
    try:
        ep = endpoint_of(broker, listener)
    except NoEndpoint:
        return broker.host, broker.port
    return ep.host, ep.port


async def create_topic(table: LeadershipTable, store: ZkStore, config: Any, name: str,
                       num_partitions: int, replication_factor: int, configs: dict[str, str],
                       assignments: Any = None, validate_only: bool = False,
                       rack_mode: str = ENFORCED) -> tuple[int, str | None]:
    """One topic of CreateTopics (``rack_mode`` SAFE for the ones the broker creates itself:
    auto-created topics and __consumer_offsets, as Kafka's RackAwareMode.Safe)."""
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return int(ErrorCode.INVALID_TOPIC_EXCEPTION), str(e)
    try:
        requested = requested_assignment(num_partitions, replication_factor, assignments)
    except KafkaError as e:
        return int(e.code), str(e)
    if num_partitions == -1:
        num_partitions = int(config["num.partitions"])
    if replication_factor == -1:
        replication_factor = int(config["default.replication.factor"])
    try:
        TopicConfig.from_overrides(config, configs)
    except ConfigError as e:
        return int(ErrorCode.INVALID_CONFIG), str(e)
    loop = asyncio.get_running_loop()
    registered = await loop.run_in_executor(None, store.brokers)
    live = sorted(registered)
    # bound the work before doing it: more replicas than every live broker's partition table
    # holds is refused at once, not planned one partition at a time
    room = int(config["appliance.max.partitions"]) * max(len(live), 1)
    replicas = (sum(len(ids) for ids in requested.values()) if requested is not None
                else num_partitions * max(replication_factor, 1))
    if replicas > room:
        return int(ErrorCode.INVALID_PARTITIONS), (
            f"{replicas} replicas exceed the partition tables of the {len(live)} live brokers "
            f"({room} slots, appliance.max.partitions)")
    if requested is not None:
        plan = requested
        unknown = {b for ids in plan.values() for b in ids} - set(live)
        if unknown:
            return int(ErrorCode.INVALID_REPLICA_ASSIGNMENT), f"unknown brokers {sorted(unknown)}"
    else:
        try:
            plan = assign_replicas(live, num_partitions, replication_factor,
                                   racks={b: i.rack for b, i in registered.items()}, mode=rack_mode)
        except InvalidReplicationFactor as e:
            return int(ErrorCode.INVALID_REPLICATION_FACTOR), str(e)
        except RackInformationMissing as e:  # Kafka: an AdminOperationException, answered so
            return int(ErrorCode.UNKNOWN_SERVER_ERROR), str(e)
        except InvalidPartitions as e:
            return int(ErrorCode.INVALID_PARTITIONS), str(e)
    if validate_only:
        return 0, None
    try:
        await loop.run_in_executor(None, store.create_topic, name, plan, configs)
    except TopicExists:
        return int(ErrorCode.TOPIC_ALREADY_EXISTS), f"Topic '{name}' already exists."
    except TopicCollision as e:
        return int(ErrorCode.INVALID_TOPIC_EXCEPTION), str(e)
    return 0, None


def _refused(code: ErrorCode, message: str) -> KafkaError:
    """The error a CreatePartitions topic is refused with (Kafka's code and message)."""
    return error_for_code(code)(message)


async def _wait_for_leaders(table: LeadershipTable, wanted: set[tuple[str, int]], timeout_ms: int) -> None:
    """Until every one of ``wanted`` (topic, partition) has a leader in this broker's metadata
    (the controller's UpdateMetadata), bounded by the request's timeout: a client that produces
    right after the answer finds them."""
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while wanted and time.monotonic() < deadline:
        topics = _by_topic(table)
        if all(p in topics.get(t, {}) and topics[t][p].leader >= 0 for t, p in wanted):
            return
        await asyncio.sleep(0.05)


def _new_partitions(live: list[int], current: TopicAssignment, count: int,
                    assignments: Any, racks: dict[int, str | None] | None = None) -> dict[int, tuple[int, ...]]:
    """The replicas of partitions len(current)..count-1 (Kafka's AdminZkClient.addPartitions):
    the request's assignment, checked, or AdminUtils' placement continued from partition 0's
    preferred replica, with the topic's replication factor.

    Raises:
        KafkaError: Kafka's INVALID_PARTITIONS / INVALID_REPLICA_ASSIGNMENT with its message.
    """
    have = len(current.partitions)
    if count < have:
        raise _refused(ErrorCode.INVALID_PARTITIONS,
                       f"Topic currently has {have} partitions, which is higher than the requested {count}.")
    if count == have:
        raise _refused(ErrorCode.INVALID_PARTITIONS, f"Topic already has {have} partitions.")
    rf = len(current.partitions.get(0, next(iter(current.partitions.values()), ())))
    adding = count - have
    if assignments is None:
        ids = sorted(live)
        first = current.partitions.get(0, (None,))[0]
        start = ids.index(first) if first in ids else None
        try:
            return assign_replicas(ids, adding, rf, start_index=start, start_partition=have, racks=racks)
        except (InvalidReplicationFactor, InvalidPartitions) as e:
            raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(e)) from e
        except RackInformationMissing as e:
            raise _refused(ErrorCode.UNKNOWN_SERVER_ERROR, str(e)) from e
    if len(assignments) != adding:
        raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Increasing the number of partitions by {adding} but {len(assignments)} "
                       f"assignments provided.")
    plan = {have + i: tuple(a.broker_ids or ()) for i, a in enumerate(assignments)}
    for p, ids in plan.items():
        if not ids:
            raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Replica assignment for partition {p} names no broker.")
        if len(set(ids)) != len(ids):
            raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"Duplicate brokers not allowed in replica assignment: "
                           f"{', '.join(map(str, ids))} for partition id {p}.")
    unknown = sorted({b for ids in plan.values() for b in ids} - set(live))
    if unknown:
        raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    odd = {p: len(ids) for p, ids in plan.items() if len(ids) != rf}
    if odd:
        raise _refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"Inconsistent replication factor between partitions, partition 0 has {rf} "
                       f"while partitions {sorted(odd)} have replication factors "
                       f"{[odd[p] for p in sorted(odd)]}, respectively.")
    return plan


async def create_partitions_body(table: LeadershipTable, store: ZkStore, config: Any, request: Any) -> dict:
    """CreatePartitions in cluster mode, Kafka's ZooKeeper way: grow the topic znode (checked
    against the cluster, conditional on its zkVersion); the controller's watch creates and
    elects the new partitions, and the answer waits for their leaders as CreateTopics does."""
    loop = asyncio.get_running_loop()
    names = [t.name for t in request.topics]
    deleting = set(await loop.run_in_executor(None, store.topics_to_delete))
    registered = await loop.run_in_executor(None, store.brokers)
    live = sorted(registered)
    racks = {b: i.rack for b, i in registered.items()}
    results: list[dict] = []
    grown: set[tuple[str, int]] = set()
    for t in request.topics:
        try:
            if names.count(t.name) > 1:
                raise _refused(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            if t.name in deleting:
                raise _refused(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
            # bound the work before doing it (a fuzzed count of 2**31)
            room = int(config["appliance.max.partitions"]) * max(len(live), 1)
            if t.count > room:
                raise _refused(ErrorCode.INVALID_PARTITIONS,
                               f"{t.count} partitions exceed the partition tables of the {len(live)} "
                               f"live brokers ({room} slots, appliance.max.partitions)")
            for _ in range(5):  # the znode changed under us (a reassignment): decide again
                read = await loop.run_in_executor(None, store.assignment_with_version, t.name)
                if read is None:
                    raise _refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"The topic '{t.name}' does not exist.")
                current, version = read
                if current.adding or current.removing:
                    raise _refused(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                   f"A partition reassignment of topic '{t.name}' is in progress.")
                added = _new_partitions(live, current, t.count, t.assignments, racks)
                if request.validate_only:
                    break
                if await loop.run_in_executor(None, store.add_partitions, t.name, current, version, added):
                    grown |= {(t.name, p) for p in added}
                    break
            else:
                raise _refused(ErrorCode.REQUEST_TIMED_OUT,
                               "the topic kept changing; try again")
            results.append({"name": t.name, "error_code": 0, "error_message": None})
        except KafkaError as e:
            results.append({"name": t.name, "error_code": int(e.code), "error_message": str(e)})
    await _wait_for_leaders(table, grown, request.timeout_ms)
    return {"throttle_time_ms": 0, "results": results}


async def create_topics_body(table: LeadershipTable, store: ZkStore, config: Any, request: Any) -> dict:
    results = []
    for t in request.topics:
        code, msg = await create_topic(
            table, store, config, t.name, t.num_partitions, t.replication_factor,
            {c.name: c.value for c in t.configs if c.value is not None}, t.assignments,
            request.validate_only)
        results.append({"name": t.name, "error_code": code, "error_message": msg})
    created = {r["name"] for r in results if r["error_code"] == 0 and not request.validate_only}
    wanted: set[tuple[str, int]] = set()
    if created:
        plans = await asyncio.get_running_loop().run_in_executor(
            None, lambda: {n: store.assignment(n) for n in created})
        wanted = {(n, p) for n, a in plans.items() if a is not None for p in a.partitions}
    await _wait_for_leaders(table, wanted, request.timeout_ms)
    return {"throttle_time_ms": 0, "topics": results}


# below the network worker's wait on the cluster link (process/cluster_link.py, 60 s)
DELETE_WAIT_CAP_S = 50.0


async def delete_topics_body(store: ZkStore, config: Any, request: Any) -> dict:
    """DeleteTopics in cluster mode, Kafka's ZooKeeper way: mark each topic under
    ``/admin/delete_topics``; the controller stops and deletes every replica, then the topic's
    znodes. Answered once the topic znode is gone, or REQUEST_TIMED_OUT at the request's timeout
    (the deletion goes on)."""
    loop = asyncio.get_running_loop()
    results: list[dict] = []
    marked: list[str] = []
    known = set(await loop.run_in_executor(None, store.topics))
    for name in request.topic_names:
        if not bool(config["delete.topic.enable"]):
            results.append({"name": name, "error_code": int(ErrorCode.TOPIC_DELETION_DISABLED),
                            "error_message": "delete.topic.enable is false"})
        elif name not in known:
            results.append({"name": name, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            "error_message": f"Topic '{name}' does not exist."})
        else:
            await loop.run_in_executor(None, store.request_topic_deletion, name)
            results.append({"name": name, "error_code": 0, "error_message": None})
            marked.append(name)
    deadline = time.monotonic() + min(max(request.timeout_ms, 0) / 1000, DELETE_WAIT_CAP_S)
    while marked:
        left = set(await loop.run_in_executor(None, store.topics))
        marked = [n for n in marked if n in left]
        if not marked or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)
    for r in results:
        if r["name"] in marked:
            r["error_code"] = int(ErrorCode.REQUEST_TIMED_OUT)
            r["error_message"] = "the controller is still deleting the topic"
    return {"throttle_time_ms": 0, "responses": results}


OFFSETS_TOPIC_ELECTION_WAIT_S = 5.0  # a first FindCoordinator waits this long for the new topic's leaders
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


class _CoordinatorTopic(NamedTuple):
    """What FindCoordinator looks up for one key type: the topic whose partition leader
    coordinates the key, how it is created, and which partition a key maps to."""

    topic: str
    partitions_key: str
    replication_key: str
    topic_config: Callable[[Any, int], dict[str, str]]  # (broker config, replication factor)
    partition_for: Callable[[str, int], int]
    empty_key_error: int


_COORDINATOR_TOPICS = {
    KEY_TYPE_GROUP: _CoordinatorTopic(OFFSETS_TOPIC, "offsets.topic.num.partitions",
                                      "offsets.topic.replication.factor",
                                      lambda config, rf: offsets_topic_config(config),
                                      offsets_partition_for, ErrorCode.INVALID_GROUP_ID),
    KEY_TYPE_TRANSACTION: _CoordinatorTopic(TXN_TOPIC, "transaction.state.log.num.partitions",
                                            "transaction.state.log.replication.factor", txn_topic_config,
                                            txn_partition_for, ErrorCode.INVALID_REQUEST),
}


async def coordinator_body(table: LeadershipTable, store: ZkStore, config: Any, request: Any,
                           version: int, listener: str = "") -> dict:
    """FindCoordinator, Kafka's rule: the leader of the group's ``__consumer_offsets``
    partition (key type 1: the transactional id's ``__transaction_state`` partition;
    COORDINATOR_NOT_AVAILABLE while it has none). The first one creates the topic through
    ZooKeeper, with ``offsets.topic.num.partitions`` (``transaction.state.log.num.partitions``)
    partitions and a replication factor of min(``offsets.topic.replication.factor``
    (``transaction.state.log.replication.factor``), live brokers). v4+: several keys at once."""
    if version >= FIRST_BATCHED_VERSION:
        return await batched_coordinators(
            lambda key: coordinator_body(table, store, config,
                                         SimpleNamespace(key=key, key_type=request.key_type), 3, listener),
            request, version)

    def answer(code: int, msg: str | None = None, node: int = -1) -> dict:
        host, port = (table.brokers_on(listener)[node][:2]) if node >= 0 else ("", -1)
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": msg,
                "node_id": node, "host": host, "port": port}

    kind = _COORDINATOR_TOPICS.get(request.key_type if version >= 1 else KEY_TYPE_GROUP)
    if kind is None:
        return answer(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {request.key_type}")
    if not request.key:
        return answer(kind.empty_key_error, "empty key")
    parts = _by_topic(table).get(kind.topic)
    if not parts:
        live = max(len(table.live_brokers), 1)
        rf = min(int(config[kind.replication_key]), live)
        code, msg = await create_topic(table, store, config, kind.topic,
                                       int(config[kind.partitions_key]), rf,
                                       kind.topic_config(config, rf), rack_mode=SAFE)
        if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, msg)
        deadline = time.monotonic() + OFFSETS_TOPIC_ELECTION_WAIT_S
        while not parts and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            parts = _by_topic(table).get(kind.topic)
        if not parts:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{kind.topic} is being created")
    count = len(parts)
    if count != int(config[kind.partitions_key]):
        # created with another count, or the metadata is not complete yet: ZooKeeper knows
        assignment = await asyncio.get_running_loop().run_in_executor(None, store.assignment, kind.topic)
        count = len(assignment.partitions) if assignment is not None else count
    state = parts.get(kind.partition_for(request.key, count))
    if state is None or state.leader not in table.live_brokers:
        return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the key's {kind.topic} partition has no leader")
    return answer(0, None, state.leader)
