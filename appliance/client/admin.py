"""Admin operations: topics (create, delete, describe with configs, add partitions) and consumer
groups (list, describe, delete).

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
from appliance.client.cluster import Cluster, check_error
from appliance.client.membership import GroupMembership
from appliance.client.subscription import decode_subscription
from appliance.coordinator.consumer_protocol import decode_assignment
from appliance.errors import ErrorCode

__all__ = ["AdminClient", "NewTopic", "TopicDescription", "GroupDescription", "MemberDescription"]

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, DESCRIBE_CONFIGS = 19, 20, 37, 32
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 16, 15, 42
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

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



