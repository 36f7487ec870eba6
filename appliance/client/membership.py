"""A consumer's membership in its group: finding the coordinator, JoinGroup / SyncGroup (the
leader runs the assignor), heartbeats on a background thread, LeaveGroup, and the offset
commit/fetch requests that go to the same coordinator.

Rebalance signals (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID from a heartbeat
or a commit) set :attr:`GroupMembership.rejoin_needed`; the consumer rejoins on its next poll.
The heartbeat thread uses its own connection so a long JoinGroup or Fetch never delays it.

Thread-safety: ``join`` and commits are called from the consumer's thread; the heartbeat thread
only reads the generation and sets flags.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from appliance.client.assignors import Assignor
from appliance.client.cluster import RETRIABLE, Cluster, check_error
from appliance.client.errors import CommitFailedError, KafkaConnectionError
from appliance.client.fetching import TopicPartition
from appliance.client.subscription import Subscription, decode_subscription, encode_subscription
from appliance.coordinator.consumer_protocol import decode_assignment, encode_assignment
from appliance.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["GroupMembership"]

log = logging.getLogger("appliance.client.group")

FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC, OFFSET_COMMIT, OFFSET_FETCH = 10, 11, 12, 13, 14, 8, 9
REJOIN_CODES = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
COORDINATOR_CODES = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


class GroupMembership:
    def __init__(self, cluster: Cluster, group_id: str, assignors: list[Assignor], *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int, retry_backoff_ms: int) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.assignors = assignors
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.is_leader = False
        self.rejoin_needed = True
        # the leader's partition counts of the group's topics at its last assignment (Kafka's
        # metadata snapshot): partitions added later make it rebalance; None when not leader
        self.assigned_counts: dict[str, int] | None = None
        self._coordinator: tuple[str, int] | None = None
        self._stable = threading.Event()
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self.last_heartbeat_error: BaseException | None = None

    # coordinator --------------------------------------------------------------------------
    def coordinator(self, purpose: str = "group") -> Any:
        """Connection to the group's coordinator (found with FindCoordinator if unknown).
        Raises KafkaConnectionError, CoordinatorNotAvailable after repeated failures."""
        deadline = time.monotonic() + self.cluster.request_timeout
        while True:
            if self._coordinator is None:
                conn = self.cluster.any_connection()
                resp = conn.request(FIND_COORDINATOR, {"key": self.group_id, "key_type": 0})
                if resp.error_code in COORDINATOR_CODES and time.monotonic() < deadline:
                    time.sleep(self.backoff)
                    continue
                check_error(resp.error_code, f"finding the coordinator of group {self.group_id!r}",
                            getattr(resp, "error_message", None))
                self._coordinator = (resp.host, resp.port)
            return self.cluster.connection(*self._coordinator, purpose=purpose)

    def coordinator_lost(self) -> None:
        self._coordinator = None

    def _request(self, api_key: int, body: dict, purpose: str = "group", timeout: float | None = None) -> Any:
        try:
            return self.coordinator(purpose).request(api_key, body, timeout=timeout)
        except KafkaConnectionError:
            self.coordinator_lost()
            raise

    # join / sync ----------------------------------------------------------------------------
    def join(self, topics: list[str], owned: dict[str, list[int]],
             partitions_of: Callable[[list[str]], dict[str, int]]) -> dict[str, list[int]]:
        """Join (or rejoin) and return this member's assignment {topic: [partitions]}.
        Retries through rebalances and coordinator moves. Raises KafkaError for fatal errors."""
        self._stable.clear()
        while True:
            protocols = [{"name": a.name,
                          "metadata": encode_subscription(sorted(topics), a.user_data(owned, self.generation),
                                                          sorted(owned.items()))}
                         for a in self.assignors]
            body = {"group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                    "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                    "group_instance_id": None, "protocol_type": "consumer", "protocols": protocols}
            try:
                resp = self._request(JOIN, body, timeout=self.rebalance_timeout_ms / 1000 + 10)
            except KafkaConnectionError as e:
                log.info("JoinGroup of %s failed (%s); retrying", self.group_id, e)
                time.sleep(self.backoff)
                continue
            code = resp.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:  # JoinGroup v4+: rejoin with the id we were given
                self.member_id = resp.member_id
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code in COORDINATOR_CODES:
                self.coordinator_lost()
                time.sleep(self.backoff)
                continue
            if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                time.sleep(self.backoff)
                continue
            check_error(code, f"joining group {self.group_id!r}")
            self.member_id, self.generation = resp.member_id, resp.generation_id
            self.protocol = resp.protocol_name
            self.is_leader = resp.leader == resp.member_id
            self.assigned_counts = None
            assignments = []
            if self.is_leader:
                assignments = self._lead(resp, partitions_of)
            sync = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": None, "assignments": assignments}
            try:
                sresp = self._request(SYNC, sync, timeout=self.rebalance_timeout_ms / 1000 + 10)
            except KafkaConnectionError:
                time.sleep(self.backoff)
                continue
            if sresp.error_code in REJOIN_CODES or sresp.error_code in COORDINATOR_CODES:
                if sresp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                if sresp.error_code in COORDINATOR_CODES:
                    self.coordinator_lost()
                continue
            check_error(sresp.error_code, f"syncing group {self.group_id!r}")
            mine = decode_assignment(bytes(sresp.assignment)) if sresp.assignment else []
            self.rejoin_needed = False
            self._stable.set()
            self._ensure_heartbeat()
            out: dict[str, list[int]] = {}
            for t, ps in mine:
                out.setdefault(t, []).extend(ps)
            return out

    def _lead(self, resp: Any, partitions_of: Callable[[list[str]], dict[str, int]]) -> list[dict]:
        assignor = next(a for a in self.assignors if a.name == resp.protocol_name)
        members: dict[str, Subscription] = {}
        for m in resp.members:
            try:
                members[m.member_id] = decode_subscription(bytes(m.metadata))
            except ValueError as e:
                log.warning("member %s sent an unreadable subscription (%s); it gets nothing", m.member_id, e)
                members[m.member_id] = Subscription(0, [], None, [])
        topics = sorted({t for s in members.values() for t in s.topics})
        counts = partitions_of(topics)
        self.assigned_counts = dict(counts)  # the leader rebalances when these change
        result = assignor.assign(members, counts)
        return [{"member_id": m, "assignment": encode_assignment(sorted(result.get(m, {}).items()))}
                for m in members]

    # heartbeat ------------------------------------------------------------------------------
    def _ensure_heartbeat(self) -> None:
        if self._heartbeat_thread is None or not self._heartbeat_thread.is_alive():
            self._stop.clear()
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                      name=f"appliance-heartbeat-{self.group_id}")
            self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            if not self._stable.is_set() or self.rejoin_needed:
                continue
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id}
            try:
                resp = self._request(HEARTBEAT, body, purpose="heartbeat")
            except KafkaError as e:
                self.last_heartbeat_error = e
                continue
            code = resp.error_code
            if code in REJOIN_CODES:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.rejoin_needed = True
            elif code in COORDINATOR_CODES:
                self.coordinator_lost()

    def leave(self) -> None:
        """Stop heartbeating and leave the group (LeaveGroup) so the others rebalance at once."""
        self._stop.set()
        self._stable.clear()
        if self._heartbeat_thread is not None and self._heartbeat_thread is not threading.current_thread():
            self._heartbeat_thread.join(self.heartbeat_interval + 2)
        if self.member_id:
            try:
                # v0-2 name one member, v3+ (KIP-345) a list: the encoder sends the version's field
                self._request(LEAVE, {"group_id": self.group_id, "member_id": self.member_id,
                                      "members": [{"member_id": self.member_id, "group_instance_id": None}]})
            except KafkaError as e:
                log.info("LeaveGroup of %s failed: %s", self.group_id, e)
        self.member_id, self.generation, self.rejoin_needed = "", -1, True

    # offsets --------------------------------------------------------------------------------
    def commit_body(self, offsets: dict[TopicPartition, int], in_group: bool) -> dict:
        topics: dict[str, list[dict]] = {}
        for tp, off in offsets.items():
            topics.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": off,
                                                    "committed_metadata": ""})
        return {"group_id": self.group_id,
                "generation_id_or_member_epoch": self.generation if in_group else -1,
                "member_id": self.member_id if in_group else "", "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    def check_commit(self, resp: Any) -> None:
        """Raise for the first failed partition of an OffsetCommit answer (CommitFailedError when
        the group has moved on: the member must rejoin)."""
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code in REJOIN_CODES:
                    self.rejoin_needed = True
                    raise CommitFailedError(f"commit of {t.name}-{p.partition_index} failed: "
                                            f"{ErrorCode(p.error_code).name} (the group rebalanced)")
                if p.error_code in COORDINATOR_CODES:
                    self.coordinator_lost()
                check_error(p.error_code, f"committing {t.name}-{p.partition_index}")

    def commit(self, offsets: dict[TopicPartition, int], in_group: bool) -> None:
        """Commit synchronously, retrying coordinator moves. Raises CommitFailedError, KafkaError."""
        if not offsets:
            return
        deadline = time.monotonic() + self.cluster.request_timeout
        while True:
            try:
                resp = self._request(OFFSET_COMMIT, self.commit_body(offsets, in_group))
                self.check_commit(resp)
                return
            except KafkaError as e:
                retriable = isinstance(e, KafkaConnectionError) or getattr(e, "code", None) in RETRIABLE
                if not retriable or time.monotonic() > deadline:
                    raise
                time.sleep(self.backoff)

    def fetch_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Committed offsets (None where there is none). Raises KafkaError."""
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {"group_id": self.group_id,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
        deadline = time.monotonic() + self.cluster.request_timeout
        while True:
            resp = self._request(OFFSET_FETCH, body)
            code = getattr(resp, "error_code", 0)
            if code in COORDINATOR_CODES and time.monotonic() < deadline:
                self.coordinator_lost()
                time.sleep(self.backoff)
                continue
            check_error(code, f"fetching offsets of group {self.group_id!r}")
            out: dict[TopicPartition, int | None] = {}
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for_code(p.error_code)(f"committed offset of {t.name}-{p.partition_index}: "
                                                           f"{ErrorCode(p.error_code).name}")
                    out[TopicPartition(t.name, p.partition_index)] = p.committed_offset if p.committed_offset >= 0 else None
            return out

    def close(self) -> None:
        self.leave()
