"""Admin operations: topics (create, delete, describe with configs, add partitions), consumer
groups (list, describe, delete) and transactions (list, describe: KIP-664).

Every method raises the KafkaError subclass of the broker's error code, with the broker's
message when it sent one, and KafkaConnectionError naming the address when nothing answers.
Thread-safety: methods may be called from several threads.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.client import config as cfg
from appliance.client.cluster import RETRIABLE, Cluster, check_error
from appliance.client.coordinator_lookup import find_txn_coordinator
from appliance.client.membership import GroupMembership
from appliance.client.subscription import decode_subscription
from appliance.coordinator.consumer_protocol import decode_assignment
from appliance.errors import ErrorCode

__all__ = ["AdminClient", "NewTopic", "TopicDescription", "GroupDescription", "MemberDescription",
           "TransactionListing", "TransactionDescription", "ProducerState"]

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS = 19, 20, 37, 32
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 16, 15, 42
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
RESOURCE_TOPIC = 2


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = 1
    replication_factor: int = 1
    config: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: dict[int, int]  # partition -> leader
    configs: dict[str, str | None]


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    subscription: list[str]
    assignment: list[tuple[str, list[int]]]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator_id: int  # the broker that answered for it
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    partitions: list[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition, as its leader keeps it (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open


class AdminClient:
    """``AdminClient("host:port")`` or a config dict (bootstrap.servers, client.id,
    request.timeout.ms, socket.connection.setup.timeout.ms). Raises InvalidConfigError."""

    def __init__(self, bootstrap_servers: str | None = None, config: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> None:
        merged = dict(config or {})
        if bootstrap_servers is not None:
            merged["bootstrap.servers"] = bootstrap_servers
        c = self.config = cfg.resolve(cfg.ADMIN_KEYS, merged, kwargs)
        self.cluster = Cluster(c["bootstrap.servers"], client_id=c["client.id"],
                               request_timeout_ms=c["request.timeout.ms"],
                               connect_timeout_ms=c["socket.connection.setup.timeout.ms"], allow_auto_create=False,
                               security=cfg.security_of(c))
        self.timeout_ms = c["request.timeout.ms"]

    def _request(self, api_key: int, body: dict) -> Any:
        return self.cluster.any_connection().request(api_key, body)

    # topics ---------------------------------------------------------------------------------
    def create_topics(self, topics: Iterable[NewTopic | str], validate_only: bool = False) -> None:
        """Create topics. Raises TopicAlreadyExistsError, InvalidConfigError, InvalidPartitionsError,
        ... for the first topic the broker refused (the others may have been created)."""
        topics = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        deadline = time.monotonic() + self.timeout_ms / 1000
        backoff = 0.1
        while topics:
            body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                                "replication_factor": t.replication_factor, "assignments": [],
                                "configs": [{"name": k, "value": v} for k, v in (t.config or {}).items()]}
                               for t in topics],
                    "timeout_ms": self.timeout_ms, "validate_only": validate_only}
            resp = self._request(CREATE_TOPICS, body)
            # NOT_CONTROLLER is retriable (Kafka's AdminClient retries it): a cluster broker that
            # has not joined yet, or a controller moving; those topics were not created
            retry = {t.name for t in resp.topics if t.error_code == ErrorCode.NOT_CONTROLLER}
            if retry and time.monotonic() + backoff < deadline:
                for t in resp.topics:
                    if t.name not in retry:
                        check_error(t.error_code, f"creating topic {t.name!r}", t.error_message)
                topics = [t for t in topics if t.name in retry]
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            for t in resp.topics:
                check_error(t.error_code, f"creating topic {t.name!r}", t.error_message)
            break
        self.cluster.invalidate()

    def delete_topics(self, names: Iterable[str]) -> None:
        """Raises UnknownTopicOrPartitionError for a topic that does not exist."""
        resp = self._request(DELETE_TOPICS, {"topic_names": list(names), "timeout_ms": self.timeout_ms})
        for t in resp.responses:
            check_error(t.error_code, f"deleting topic {t.name!r}")
        self.cluster.invalidate()

    def create_partitions(self, new_counts: Mapping[str, int], validate_only: bool = False) -> None:
        """Grow each topic to the given total partition count. Raises InvalidPartitionsError."""
        body = {"topics": [{"name": t, "count": n, "assignments": None} for t, n in new_counts.items()],
                "timeout_ms": self.timeout_ms, "validate_only": validate_only}
        resp = self._request(CREATE_PARTITIONS, body)
        for r in resp.results:
            check_error(r.error_code, f"adding partitions to {r.name!r}", r.error_message)
        self.cluster.invalidate()

    def list_topics(self) -> list[str]:
        resp = self.cluster.refresh(None, auto_create=False)
        return sorted(t.name for t in resp.topics if t.error_code == 0)

    def describe_configs(self, topic: str, keys: list[str] | None = None) -> dict[str, str | None]:
        """The topic's configuration (every key, or ``keys``). Raises UnknownTopicOrPartitionError."""
        resp = self._request(DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": RESOURCE_TOPIC, "resource_name": topic, "configuration_keys": keys}],
            "include_synonyms": False})
        out: dict[str, str | None] = {}
        for r in resp.results:
            check_error(r.error_code, f"describing the configs of {topic!r}", r.error_message)
            for e in r.configs:
                out[e.name] = e.value
        return out

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Partitions, leaders and configs of each topic. Raises UnknownTopicOrPartitionError."""
        out = {}
        for name in names:
            info = self.cluster.topic(name, auto_create=False, timeout=5)
            out[name] = TopicDescription(name, dict(info.leaders), self.describe_configs(name))
        return out

    # groups ---------------------------------------------------------------------------------
    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, protocol type) of every group the broker(s) coordinate."""
        resp = self._request(LIST_GROUPS, {})
        check_error(resp.error_code, "listing groups")
        return sorted((g.group_id, g.protocol_type) for g in resp.groups)

    def _group_connection(self, group_id: str) -> Any:
        return GroupMembership(self.cluster, group_id, [], session_timeout_ms=0, rebalance_timeout_ms=0,
                               heartbeat_interval_ms=1000, retry_backoff_ms=100).coordinator()

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """State, protocol and members (with decoded subscriptions and assignments when the group
        uses the consumer protocol). A group that does not exist has state "Dead"."""
        out = {}
        for gid in group_ids:
            resp = self._group_connection(gid).request(DESCRIBE_GROUPS, {"groups": [gid],
                                                                          "include_authorized_operations": False})
            for g in resp.groups:
                check_error(g.error_code, f"describing group {g.group_id!r}")
                members = []
                for m in g.members:
                    subs: list[str] = []
                    assignment: list[tuple[str, list[int]]] = []
                    if g.protocol_type == "consumer":
                        try:
                            subs = decode_subscription(bytes(m.member_metadata)).topics if m.member_metadata else []
                            assignment = decode_assignment(bytes(m.member_assignment)) if m.member_assignment else []
                        except ValueError:
                            pass
                    members.append(MemberDescription(m.member_id, m.client_id, m.client_host, subs, assignment))
                out[g.group_id] = GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members)
        return out

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Raises GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP errors for the first group refused."""
        for gid in group_ids:
            resp = self._group_connection(gid).request(DELETE_GROUPS, {"groups_names": [gid]})
            for r in resp.results:
                check_error(r.error_code, f"deleting group {r.group_id!r}")

    # transactions ---------------------------------------------------------------------------
    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id the cluster coordinates (as Kafka's admin: ListTransactions to
        each broker, which answers for the coordinators it hosts), filtered to ``states`` and
        ``producer_ids`` when given, and with ``duration_ms`` >= 0 to the transactions open
        longer than it. A state name Kafka does not know matches nothing. Raises the first
        broker's error."""
        self.cluster.refresh([])
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": duration_ms}
        out = []
        for node in self.cluster.node_ids():
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                resp = self.cluster.node_connection(node).request(LIST_TRANSACTIONS, body)
                if resp.error_code not in RETRIABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            check_error(resp.error_code, f"listing the transactions of broker {node}")
            out += [TransactionListing(t.transactional_id, node, t.producer_id, t.transaction_state)
                    for t in resp.transaction_states]
        return sorted(out, key=lambda t: t.transactional_id)

    def describe_producers(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], list[ProducerState]]:
        """Each partition's active producers, asked of its leader (KIP-664). Raises
        UnknownTopicOrPartitionError, the leader's error."""
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            by_leader.setdefault(self.cluster.leader_of(topic, partition), {}).setdefault(topic, []).append(partition)
        out: dict[tuple[str, int], list[ProducerState]] = {}
        for node, topics in by_leader.items():
            resp = self.cluster.node_connection(node).request(DESCRIBE_PRODUCERS, {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]})
            for t in resp.topics:
                for p in t.partitions:
                    check_error(p.error_code, f"describing the producers of {t.name}-{p.partition_index}",
                                p.error_message)
                    out[(t.name, p.partition_index)] = [
                        ProducerState(a.producer_id, a.producer_epoch, a.last_sequence, a.last_timestamp,
                                      a.coordinator_epoch, a.current_txn_start_offset) for a in p.active_producers]
        return out

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription]:
        """Each id's state as its coordinator holds it. Raises TransactionalIdNotFound (error
        105) for an id no coordinator knows, the authorization error for one the principal may
        not Describe."""
        out = {}
        for tid in transactional_ids:
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                node, host, port = find_txn_coordinator(self.cluster, tid, self.timeout_ms / 1000)
                resp = self.cluster.connection(host, port).request(DESCRIBE_TRANSACTIONS, {"transactional_ids": [tid]})
                s = resp.transaction_states[0]
                if s.error_code not in RETRIABLE or time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # the coordinator moved or is loading: find it again
            check_error(s.error_code, f"describing transactional id {tid!r}")
            out[tid] = TransactionDescription(node, tid, s.producer_id, s.producer_epoch, s.transaction_state,
                                              s.transaction_timeout_ms, s.transaction_start_time_ms,
                                              [(t.topic, p) for t in s.topics for p in t.partitions])
        return out

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



