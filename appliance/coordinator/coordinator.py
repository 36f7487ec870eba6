"""The group coordinator of every group whose ``__consumer_offsets`` partition this disk worker holds.

Driven by the disk worker's loop, single-threaded:

- ``handle(api_key, version, body, token, client_id, client_host)`` answers at once (returns a
  response dict) or later (returns None and calls ``respond(token, dict)`` when the rebalance it
  waits for completes);
- ``poll(now_ms)`` runs the timers — rebalance completion, session expiry, offset expiry — and
  returns when it next needs to run;
- ``load(partition, records)`` replays a partition of ``__consumer_offsets`` at start, so a
  restarted broker knows its groups and their committed offsets; in cluster mode the host
  loads in steps (``begin_load``, ``load_records``, ``finish_load``) when this broker becomes
  the partition's leader and unloads it (``unload``) when it stops leading.

Commits and group metadata are appended to the offsets partition (``append(partition, batch)``)
before they are acknowledged; a commit enters the cache through ``on_durable``, which the
cluster-mode host runs only once the append is replicated.

TxnOffsetCommit (KIP-98, KIP-447) appends its offsets as a transactional batch of the producer's
id and epoch; they wait in :class:`~.txn_offsets.PendingTxnOffsets` until the transaction's
marker lands on the partition (``on_txn_marker``: COMMIT makes them committed, ABORT drops
them). A partition being loaded replays the same from its batches (``load_txn_records`` and
``on_txn_marker`` in log order).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from appliance.coordinator import offsets_schema as schema
from appliance.coordinator.consumer_protocol import decode_assignment
from appliance.coordinator.group import Group, GroupState, Member
from appliance.coordinator.routing import offsets_partition_for
from appliance.coordinator.txn_offsets import PendingTxnOffsets
from appliance.errors import ErrorCode, KafkaError
from appliance.records.batch import build_batch

__all__ = ["GroupCoordinator"]

log = logging.getLogger("appliance.coordinator")

E = ErrorCode
S = GroupState
API_OFFSET_COMMIT, API_OFFSET_FETCH, API_JOIN, API_HEARTBEAT = 8, 9, 11, 12
API_LEAVE, API_SYNC, API_DESCRIBE, API_LIST, API_DELETE_GROUPS = 13, 14, 15, 16, 42
API_OFFSET_DELETE = 47
API_TXN_OFFSET_COMMIT = 28


def _every_partition(body: Any, code: int) -> dict:
    """An OffsetCommit / TxnOffsetCommit answer giving ``code`` for every partition asked."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in body.topics]}


class GroupCoordinator:
    def __init__(self, config: Any, partitions: int,
                 append: Callable[[int, bytes], None],
                 respond: Callable[[Any, dict], None],
                 partition_exists: Callable[[str, int], bool],
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 on_durable: Callable[[Callable[[], None]], None] | None = None) -> None:
        self.num_partitions = partitions
        self.owned: set[int] = set()
        self.loading: set[int] = set()  # partitions being loaded (COORDINATOR_LOAD_IN_PROGRESS)
        self._loaded: dict[int, int] = {}  # records applied so far, per partition being loaded
        self.groups: dict[str, Group] = {}
        self._append = append
        self._respond = respond
        self._partition_exists = partition_exists
        # runs what must wait until the last append is durable (cluster mode: replicated to the
        # ISR; the host drops it if that fails); standalone, an append is durable at once
        self._on_durable = on_durable or (lambda fn: fn())
        self._now = now_ms
        self.initial_delay_ms = int(config["group.initial.rebalance.delay.ms"])
        self.min_session_ms = int(config["group.min.session.timeout.ms"])
        self.max_session_ms = int(config["group.max.session.timeout.ms"])
        self.offsets_retention_ms = int(config["offsets.retention.minutes"]) * 60_000
        self.max_metadata = int(config["offset.metadata.max.bytes"])
        # offsets.retention.check.interval.ms: how often expired offsets are looked for (a pass
        # walks every group, so not on every poll)
        self.expiry_check_ms = int(config["offsets.retention.check.interval.ms"])
        self._next_expiry_check = 0
        self.txn_offsets = PendingTxnOffsets()

    # -- ownership and loading ------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        return offsets_partition_for(group_id, self.num_partitions)

    def owns_group(self, group_id: str) -> bool:
        return self.partition_for(group_id) in self.owned

    def not_owned_error(self, group_id: str) -> int:
        """The answer for a group this coordinator does not serve now."""
        return E.COORDINATOR_LOAD_IN_PROGRESS if self.partition_for(group_id) in self.loading \
            else E.NOT_COORDINATOR

    def load(self, partition: int, records: Iterable[Any]) -> None:
        """Replay one offsets partition (records in offset order) into the cache, at once."""
        self.begin_load(partition)
        self.load_records(partition, records)
        self.finish_load(partition)

    def begin_load(self, partition: int) -> None:
        """Start loading a partition (cluster mode: this broker just became its leader); its
        groups answer COORDINATOR_LOAD_IN_PROGRESS until :meth:`finish_load`."""
        self.owned.discard(partition)
        self.loading.add(partition)
        self._loaded[partition] = 0

    def load_records(self, partition: int, records: Iterable[Any]) -> None:
        """Apply the next records of a partition being loaded (in offset order)."""
        now = self._now()
        loaded = 0
        for rec in records:
            if rec.key is None:
                continue
            try:
                key = schema.decode_key(rec.key)
                if isinstance(key, schema.OffsetKey):
                    group = self.groups.get(key.group)
                    if rec.value is None:
                        if group is not None:
                            group.offsets.pop((key.topic, key.partition), None)
                    else:
                        group = group or self._new_group(key.group)
                        group.offsets[(key.topic, key.partition)] = schema.decode_offset_value(rec.value)
                else:
                    if rec.value is None:
                        g = self.groups.get(key.group)
                        if g is not None:
                            g.members.clear()
                            g.state = S.EMPTY
                        loaded += 1
                        continue
                    self._restore_group(key.group, schema.decode_group_value(rec.value), now)
                loaded += 1
            except (schema.SchemaError, UnicodeDecodeError) as e:
                log.warning("skipping unreadable __consumer_offsets record at offset %s: %s",
                            getattr(rec, "offset", "?"), e)
        self._loaded[partition] = self._loaded.get(partition, 0) + loaded

    def finish_load(self, partition: int) -> None:
        """The partition is loaded: its groups are served from now on."""
        # a group with neither members nor offsets left is gone (deleted or expired)
        for gid in [gid for gid, g in self.groups.items()
                    if self.partition_for(gid) == partition and not g.members and not g.offsets]:
            del self.groups[gid]
        self.loading.discard(partition)
        self.owned.add(partition)
        loaded = self._loaded.pop(partition, 0)
        log.log(logging.INFO if loaded else logging.DEBUG,
                "loaded __consumer_offsets-%d: %d records, %d groups now cached", partition,
                 loaded, len(self.groups))

    def unload(self, partition: int) -> None:
        """Forget a partition's groups (cluster mode: this broker no longer leads it); requests
        held for them are answered NOT_COORDINATOR, so their clients look the coordinator up
        again (Kafka's removeGroupsForPartition)."""
        self.owned.discard(partition)
        self.loading.discard(partition)
        self._loaded.pop(partition, None)
        self.txn_offsets.drop(lambda gid: self.partition_for(gid) == partition)
        for gid in [gid for gid in self.groups if self.partition_for(gid) == partition]:
            group = self.groups.pop(gid)
            for m in group.members.values():
                if m.join_token is not None:
                    self._respond(m.join_token, self._join_error(E.NOT_COORDINATOR, m.member_id))
                    m.join_token = None
                if m.sync_token is not None:
                    self._respond(m.sync_token, {"throttle_time_ms": 0, "error_code": E.NOT_COORDINATOR,
                                                 "assignment": b""})
                    m.sync_token = None
        log.info("unloaded __consumer_offsets-%d: %d groups now cached", partition, len(self.groups))

    def _new_group(self, group_id: str) -> Group:
        g = Group(group_id, state_timestamp_ms=self._now())
        self.groups[group_id] = g
        return g

    def _restore_group(self, group_id: str, v: schema.GroupValue, now: int) -> None:
        g = self.groups.get(group_id) or self._new_group(group_id)
        g.protocol_type, g.generation, g.protocol, g.leader = v.protocol_type, v.generation, v.protocol, v.leader
        g.members = {}
        for m in v.members:
            g.members[m.member_id] = Member(
                m.member_id, m.client_id, m.client_host, m.session_timeout, m.rebalance_timeout,
                v.protocol_type, [(v.protocol or "", m.subscription)], m.group_instance_id,
                m.assignment, last_heartbeat_ms=now)
        # members restored from the log get one session timeout to heartbeat again
        g.state = S.STABLE if g.members else S.EMPTY

    # -- dispatch -------------------------------------------------------------------------
    def handle(self, api_key: int, version: int, body: Any, token: Any, client_id: str,
               client_host: str) -> dict | None:
        handler = {
            API_JOIN: self._join, API_SYNC: self._sync, API_HEARTBEAT: self._heartbeat,
            API_LEAVE: self._leave, API_OFFSET_COMMIT: self._commit, API_OFFSET_FETCH: self._fetch,
            API_DESCRIBE: self._describe, API_LIST: self._list, API_DELETE_GROUPS: self._delete,
            API_OFFSET_DELETE: self._offset_delete, API_TXN_OFFSET_COMMIT: self._txn_commit,
        }[api_key]
        return handler(body, version, token, client_id, client_host)

    # -- JoinGroup ------------------------------------------------------------------------
    def _join_error(self, code: int, member_id: str = "") -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_name": "",
                "leader": "", "member_id": member_id, "members": []}

    def _join(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict | None:
        gid = body.group_id
        if not gid:
            return self._join_error(E.INVALID_GROUP_ID)
        if not self.owns_group(gid):
            return self._join_error(self.not_owned_error(gid))
        if not self.min_session_ms <= body.session_timeout_ms <= self.max_session_ms:
            return self._join_error(E.INVALID_SESSION_TIMEOUT)
        names = [p.name for p in body.protocols]
        if not body.protocol_type or not names:
            return self._join_error(E.INCONSISTENT_GROUP_PROTOCOL)
        now = self._now()
        group = self.groups.get(gid)
        if group is None:
            if body.member_id:
                return self._join_error(E.UNKNOWN_MEMBER_ID)
            group = self._new_group(gid)
        if group.is_(S.DEAD):
            return self._join_error(E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports(body.protocol_type, names):
            return self._join_error(E.INCONSISTENT_GROUP_PROTOCOL)
        rebalance_timeout = body.rebalance_timeout_ms if body.rebalance_timeout_ms > 0 else body.session_timeout_ms
        protocols = [(p.name, bytes(p.metadata)) for p in body.protocols]
        member_id = body.member_id
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if version >= 4:  # KIP-394: hand out the id, the client joins again with it
                group.pending_member_ids[member_id] = now + body.session_timeout_ms
                return self._join_error(E.MEMBER_ID_REQUIRED, member_id)
        elif member_id in group.pending_member_ids:
            del group.pending_member_ids[member_id]
        elif member_id not in group.members:
            return self._join_error(E.UNKNOWN_MEMBER_ID, member_id)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, client_id, client_host, body.session_timeout_ms,
                            rebalance_timeout, body.protocol_type, protocols,
                            getattr(body, "group_instance_id", None))
            group.members[member_id] = member
            if group.protocol_type == "" or len(group.members) == 1:
                group.protocol_type = body.protocol_type
            changed = True
        else:
            changed = member.protocols != protocols
            member.protocols = protocols
            member.session_timeout_ms = body.session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout
        member.last_heartbeat_ms = now
        if group.is_(S.STABLE) and not changed and member_id != group.leader:
            return self._join_response(group, member, version)  # nothing to rebalance for
        if group.is_(S.COMPLETING_REBALANCE) and not changed:
            return self._join_response(group, member, version)
        if member.join_token is not None:  # a duplicate join replaces the old one
            self._respond(member.join_token, self._join_error(E.UNKNOWN_MEMBER_ID, member_id))
        member.join_token = token
        member.join_version = version
        self._prepare_rebalance(group, now, new_member=changed)
        self._maybe_complete_join(group, now)
        return None

    def _join_response(self, group: Group, member: Member, version: int) -> dict:
        is_leader = member.member_id == group.leader
        return {
            "throttle_time_ms": 0, "error_code": 0, "generation_id": group.generation,
            "protocol_type": group.protocol_type,  # v7+
            "protocol_name": group.protocol or "", "leader": group.leader or "",
            "member_id": member.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "metadata": m.metadata_for(group.protocol or "")}
                        for m in group.members.values()] if is_leader else [],
        }

    def _prepare_rebalance(self, group: Group, now: int, new_member: bool = False) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            for m in group.members.values():  # the assignment being synced is void now
                m.assignment = b""
                if m.sync_token is not None:
                    self._respond(m.sync_token, {"throttle_time_ms": 0,
                                                 "error_code": E.REBALANCE_IN_PROGRESS, "assignment": b""})
                    m.sync_token = None
        if group.is_(S.EMPTY):
            # Kafka's InitialDelayedJoin: wait a little for more members before the first generation
            group.initial_delay = self.initial_delay_ms > 0
            group.initial_started_ms = now
            group.rebalance_deadline_ms = now + self.initial_delay_ms
            group.transition(S.PREPARING_REBALANCE, now)
        elif group.is_(S.STABLE) or group.is_(S.COMPLETING_REBALANCE):
            group.initial_delay = False
            group.rebalance_deadline_ms = now + group.rebalance_timeout_ms()
            group.transition(S.PREPARING_REBALANCE, now)
        elif group.is_(S.PREPARING_REBALANCE) and group.initial_delay and new_member:
            # each new member during the initial delay extends it, up to the rebalance timeout
            group.rebalance_deadline_ms = min(now + self.initial_delay_ms,
                                              group.initial_started_ms + group.rebalance_timeout_ms())

    def _maybe_complete_join(self, group: Group, now: int) -> None:
        if not group.is_(S.PREPARING_REBALANCE):
            return
        if group.initial_delay:
            if now < group.rebalance_deadline_ms:
                return
        elif not group.all_joined() and now < group.rebalance_deadline_ms:
            return
        # members that did not rejoin in time leave the group
        for mid in [mid for mid, m in group.members.items() if m.join_token is None]:
            del group.members[mid]
        group.initial_delay = False
        if not group.members:
            group.generation += 1
            group.protocol = None
            group.leader = None
            group.transition(S.EMPTY, now)
            self._store_group(group)
            return
        group.generation += 1
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(S.COMPLETING_REBALANCE, now)
        for m in group.members.values():
            token, m.join_token = m.join_token, None
            m.last_heartbeat_ms = now
            self._respond(token, self._join_response(group, m, m.join_version))

    # -- SyncGroup ------------------------------------------------------------------------
    def _sync(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict | None:
        def err(code: int) -> dict:
            return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}
        if not body.group_id:
            return err(E.INVALID_GROUP_ID)
        if not self.owns_group(body.group_id):
            return err(self.not_owned_error(body.group_id))
        group = self.groups.get(body.group_id)
        if group is None or body.member_id not in group.members:
            return err(E.UNKNOWN_MEMBER_ID)
        if body.generation_id != group.generation:
            return err(E.ILLEGAL_GENERATION)
        # v5+ (KIP-559): the member names the protocol it synced for; Kafka checks it
        if ((body.protocol_type is not None and body.protocol_type != group.protocol_type)
                or (body.protocol_name is not None and body.protocol_name != group.protocol)):
            return err(E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[body.member_id]
        now = self._now()
        member.last_heartbeat_ms = now
        if group.is_(S.PREPARING_REBALANCE):
            return err(E.REBALANCE_IN_PROGRESS)
        if group.is_(S.STABLE):
            return {"throttle_time_ms": 0, "error_code": 0, "assignment": member.assignment,
                    "protocol_type": group.protocol_type, "protocol_name": group.protocol}
        if not group.is_(S.COMPLETING_REBALANCE):
            return err(E.UNKNOWN_MEMBER_ID)
        member.sync_token = token
        if body.member_id == group.leader:
            given = {a.member_id: bytes(a.assignment) for a in body.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            try:
                self._store_group(group)
            except KafkaError as e:
                log.error("storing group %s failed: %s", group.group_id, e)
                for m in group.members.values():
                    if m.sync_token is not None:
                        self._respond(m.sync_token, err(e.code))
                        m.sync_token = None
                return None
            group.transition(S.STABLE, now)
            for m in group.members.values():
                if m.sync_token is not None:
                    t, m.sync_token = m.sync_token, None
                    self._respond(t, {"throttle_time_ms": 0, "error_code": 0, "assignment": m.assignment,
                                      "protocol_type": group.protocol_type, "protocol_name": group.protocol})
        return None

    # -- Heartbeat / LeaveGroup -----------------------------------------------------------
    def _group_error(self, group_id: str) -> int:
        """The error of a membership request (Heartbeat, LeaveGroup) for a group this
        coordinator cannot answer for, or 0."""
        if not group_id:  # Kafka: only the offset APIs accept an empty group id
            return E.INVALID_GROUP_ID
        if not self.owns_group(group_id):
            return self.not_owned_error(group_id)
        return 0

    def _heartbeat(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        def r(code: int) -> dict:
            return {"throttle_time_ms": 0, "error_code": code}
        if code := self._group_error(body.group_id):
            return r(code)
        group = self.groups.get(body.group_id)
        if group is None or group.is_(S.DEAD) or body.member_id not in group.members:
            return r(E.UNKNOWN_MEMBER_ID)
        if body.generation_id != group.generation:
            return r(E.ILLEGAL_GENERATION)
        group.members[body.member_id].last_heartbeat_ms = self._now()
        if group.is_(S.PREPARING_REBALANCE):
            return r(E.REBALANCE_IN_PROGRESS)
        return r(0)

    def _leave(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        def r(code: int) -> dict:
            return {"throttle_time_ms": 0, "error_code": code}
        if code := self._group_error(body.group_id):
            return r(code)
        group = self.groups.get(body.group_id)
        if version >= 3:  # KIP-345: a batch of members, each answered with its own error
            members = []
            for m in body.members:
                code = 0
                if group is None or m.member_id not in group.members:
                    code = E.UNKNOWN_MEMBER_ID
                else:
                    self._remove_member(group, m.member_id, self._now())
                members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                                "error_code": code})
            return {"throttle_time_ms": 0, "error_code": 0, "members": members}
        if group is None or body.member_id not in group.members:
            return r(E.UNKNOWN_MEMBER_ID)
        self._remove_member(group, body.member_id, self._now())
        return r(0)

    def _remove_member(self, group: Group, member_id: str, now: int) -> None:
        member = group.members.pop(member_id)
        if member.join_token is not None:
            self._respond(member.join_token, self._join_error(E.UNKNOWN_MEMBER_ID, member_id))
        if member.sync_token is not None:
            self._respond(member.sync_token, {"throttle_time_ms": 0,
                                              "error_code": E.UNKNOWN_MEMBER_ID, "assignment": b""})
        if group.is_(S.STABLE) or group.is_(S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        self._maybe_complete_join(group, now)

    # -- offsets --------------------------------------------------------------------------
    def _commit(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        def all_with(code: int) -> dict:
            return _every_partition(body, code)
        gid = body.group_id
        if not gid:
            return all_with(E.INVALID_GROUP_ID)
        if not self.owns_group(gid):
            return all_with(self.not_owned_error(gid))
        gen = body.generation_id_or_member_epoch
        group = self.groups.get(gid)
        if group is None:
            if gen >= 0:
                return all_with(E.UNKNOWN_MEMBER_ID)
            group = self._new_group(gid)  # a consumer managing its own assignment
        if group.is_(S.DEAD):
            return all_with(E.COORDINATOR_NOT_AVAILABLE)
        if not (gen < 0 and group.is_(S.EMPTY)):
            if group.is_(S.COMPLETING_REBALANCE):
                return all_with(E.REBALANCE_IN_PROGRESS)
            if body.member_id not in group.members:
                return all_with(E.UNKNOWN_MEMBER_ID)
            if gen != group.generation:
                return all_with(E.ILLEGAL_GENERATION)
            group.members[body.member_id].last_heartbeat_ms = self._now()
        now = self._now()
        results, records, values = [], [], []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                meta = p.committed_metadata or ""
                code = self._offset_error(t.name, p.partition_index, meta)
                if not code:
                    key = schema.OffsetKey(gid, t.name, p.partition_index)
                    val = schema.OffsetValue(p.committed_offset, -1, meta, now)
                    records.append((schema.encode_offset_key(key), schema.encode_offset_value(val)))
                    values.append(((t.name, p.partition_index), val))
                parts.append({"partition_index": p.partition_index, "error_code": code})
            results.append({"name": t.name, "partitions": parts})
        if records:
            try:
                self._append(self.partition_for(gid), build_batch(records))
            except KafkaError as e:
                return all_with(e.code)

            def cache(group: Group = group, values: list = values) -> None:
                for k, v in values:
                    group.offsets[k] = v
            self._on_durable(cache)  # Kafka's pendingOffsetCommits: cached once replicated
        return {"throttle_time_ms": 0, "topics": results}

    def _offset_error(self, topic: str, partition: int, metadata: str) -> int:
        """Why one partition's offset of an OffsetCommit / TxnOffsetCommit is refused, or 0."""
        if len(metadata.encode()) > self.max_metadata:
            return E.OFFSET_METADATA_TOO_LARGE
        if not self._partition_exists(topic, partition):
            return E.UNKNOWN_TOPIC_OR_PARTITION
        return 0

    # -- transactional offsets (TxnOffsetCommit, KIP-98 / KIP-447) ------------------------
    def _txn_commit(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        def all_with(code: int) -> dict:
            return _every_partition(body, code)
        gid = body.group_id
        if not gid:
            return all_with(E.INVALID_GROUP_ID)
        if not self.owns_group(gid):
            return all_with(self.not_owned_error(gid))
        if self.txn_offsets.stale(body.producer_id, body.producer_epoch):
            return all_with(E.INVALID_PRODUCER_EPOCH)  # Kafka's log refuses the older epoch
        group = self.groups.get(gid)
        if group is not None and group.is_(S.DEAD):
            return all_with(E.COORDINATOR_NOT_AVAILABLE)
        # KIP-447: a producer committing for a consumer of the group is fenced by the group's
        # generation, as the consumer's own commit would be
        member_id, gen = getattr(body, "member_id", ""), getattr(body, "generation_id", -1)
        instance = getattr(body, "group_instance_id", None)
        members = group.members if group is not None else {}
        if instance is not None and any(m.group_instance_id == instance and m.member_id != member_id
                                        for m in members.values()):
            return all_with(E.FENCED_INSTANCE_ID)
        if member_id and member_id not in members:
            return all_with(E.UNKNOWN_MEMBER_ID)
        if gen >= 0 and (group is None or gen != group.generation):
            return all_with(E.ILLEGAL_GENERATION)
        now = self._now()
        results, records, values = [], [], {}
        for t in body.topics:
            parts = []
            for p in t.partitions:
                meta = p.committed_metadata or ""
                code = self._offset_error(t.name, p.partition_index, meta)
                if not code:
                    val = schema.OffsetValue(p.committed_offset, getattr(p, "committed_leader_epoch", -1), meta, now)
                    records.append((schema.encode_offset_key(schema.OffsetKey(gid, t.name, p.partition_index)),
                                    schema.encode_offset_value(val)))
                    values[(t.name, p.partition_index)] = val
                parts.append({"partition_index": p.partition_index, "error_code": code})
            results.append({"name": t.name, "partitions": parts})
        if records:
            try:
                self._append(self.partition_for(gid), build_batch(
                    records, producer_id=body.producer_id, producer_epoch=body.producer_epoch,
                    is_transactional=True))
            except KafkaError as e:
                return all_with(e.code)
            pid, epoch = body.producer_id, body.producer_epoch
            self._on_durable(lambda: self.txn_offsets.add(pid, epoch, gid, values))
        return {"throttle_time_ms": 0, "topics": results}

    def on_txn_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of ``producer_id`` is in offsets partition ``partition``: its
        offsets for the groups there become committed (COMMIT) or are dropped (ABORT)."""
        taken = self.txn_offsets.complete(producer_id, lambda gid: self.partition_for(gid) == partition)
        if not commit:
            return
        for gid, offsets in taken.items():
            group = self.groups.get(gid) or self._new_group(gid)
            group.offsets.update(offsets)

    def load_txn_records(self, partition: int, producer_id: int, epoch: int, records: Iterable[Any]) -> None:
        """Replay a transactional batch of a partition being loaded: its offsets wait for the
        marker that follows them in the log."""
        for rec in records:
            if rec.key is None or rec.value is None:
                continue
            try:
                key = schema.decode_key(rec.key)
                if isinstance(key, schema.OffsetKey):
                    self.txn_offsets.add(producer_id, epoch, key.group,
                                         {(key.topic, key.partition): schema.decode_offset_value(rec.value)})
            except (schema.SchemaError, UnicodeDecodeError) as e:
                log.warning("skipping unreadable transactional __consumer_offsets record: %s", e)

    def _fetch(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        gid = body.group_id
        if not self.owns_group(gid):
            return {"throttle_time_ms": 0, "topics": [], "error_code": self.not_owned_error(gid)}
        group = self.groups.get(gid)
        offsets = group.offsets if group is not None else {}
        if body.topics is None:
            wanted: dict[str, list[int]] = {}
            for (topic, part) in sorted(offsets):
                wanted.setdefault(topic, []).append(part)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}
        # KIP-447: with require_stable, a partition whose offset waits for a transaction's
        # marker is UNSTABLE_OFFSET_COMMIT (retriable), not the older committed offset
        unstable = self.txn_offsets.pending(gid) if getattr(body, "require_stable", False) else set()
        topics = []
        for name, parts in wanted.items():
            out = []
            for p in parts:
                v = offsets.get((name, p))
                code = E.UNSTABLE_OFFSET_COMMIT if (name, p) in unstable else 0
                out.append({"partition_index": p, "committed_offset": -1 if code else (v.offset if v else -1),
                            "metadata": "" if code or not v else v.metadata, "error_code": code})
            topics.append({"name": name, "partitions": out})
        return {"throttle_time_ms": 0, "topics": topics, "error_code": 0}

    # -- describe / list / delete ---------------------------------------------------------
    def _describe(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        out = []
        for gid in body.groups:
            if not self.owns_group(gid):
                out.append({"error_code": self.not_owned_error(gid), "group_id": gid, "group_state": "",
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            g = self.groups.get(gid)
            if g is None:
                out.append({"error_code": 0, "group_id": gid, "group_state": S.DEAD,
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            stable = g.is_(S.STABLE)
            out.append({"error_code": 0, "group_id": gid, "group_state": g.state,
                        "protocol_type": g.protocol_type, "protocol_data": g.protocol or "",
                        "members": [{"member_id": m.member_id, "client_id": m.client_id,
                                     "group_instance_id": m.group_instance_id,
                                     "client_host": m.client_host,
                                     "member_metadata": m.metadata_for(g.protocol or "") if stable else b"",
                                     "member_assignment": m.assignment if stable else b""}
                                    for m in g.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    def _list(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        # v4+ (KIP-518): only groups in the named states (any case); none named = all
        wanted = {s.lower() for s in body.states_filter}
        return {"throttle_time_ms": 0, "error_code": 0, "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
            for g in self.groups.values() if not g.is_(S.DEAD) and self.owns_group(g.group_id)
            and (not wanted or g.state.lower() in wanted)]}

    def _delete(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        results = []
        for gid in body.groups_names:
            code = 0
            g = self.groups.get(gid)
            if not self.owns_group(gid):
                code = self.not_owned_error(gid)
            elif g is None or g.is_(S.DEAD):
                code = E.GROUP_ID_NOT_FOUND
            elif g.members:
                code = E.NON_EMPTY_GROUP
            else:
                try:
                    self._tombstone(g, list(g.offsets), group_too=True)
                except KafkaError as e:
                    code = e.code
                else:
                    g.transition(S.DEAD, self._now())
                    del self.groups[gid]
            results.append({"group_id": gid, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

    def _offset_delete(self, body: Any, version: int, token: Any, client_id: str, client_host: str) -> dict:
        """OffsetDelete (KIP-496): drop committed offsets, except of topics the group still
        consumes (GROUP_SUBSCRIBED_TO_TOPIC). "Consumes" is read from the members' assignments;
        while a group with members is not Stable every topic counts, to be safe."""
        def answer(code: int, topics: list) -> dict:
            return {"error_code": code, "throttle_time_ms": 0, "topics": topics}
        gid = body.group_id
        if not self.owns_group(gid):
            return answer(self.not_owned_error(gid), [])
        g = self.groups.get(gid)
        if g is None or g.is_(S.DEAD):
            return answer(E.GROUP_ID_NOT_FOUND, [])
        consumed = self._consumed_topics(g)
        topics, doomed = [], []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                if not self._partition_exists(t.name, p.partition_index):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif consumed is None or t.name in consumed:
                    code = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    code = 0
                    if (t.name, p.partition_index) in g.offsets:
                        doomed.append((t.name, p.partition_index))
                parts.append({"partition_index": p.partition_index, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
        try:
            self._tombstone(g, doomed)
        except KafkaError as e:
            return answer(e.code, [])
        return answer(0, topics)

    @staticmethod
    def _consumed_topics(g: Group) -> set[str] | None:
        """Topics the members are assigned (empty for an empty group); None = cannot tell."""
        if not g.members:
            return set()
        if not g.is_(S.STABLE):
            return None
        out: set[str] = set()
        for m in g.members.values():
            try:
                out.update(t for t, _ in decode_assignment(m.assignment))
            except ValueError:
                return None
        return out

    # -- persistence ----------------------------------------------------------------------
    def _store_group(self, group: Group) -> None:
        value = schema.GroupValue(
            group.protocol_type, group.generation, group.protocol, group.leader, self._now(),
            tuple(schema.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                     m.rebalance_timeout_ms, m.session_timeout_ms,
                                     m.metadata_for(group.protocol or ""), m.assignment)
                  for m in group.members.values()))
        self._append(self.partition_for(group.group_id), build_batch(
            [(schema.encode_group_key(schema.GroupKey(group.group_id)), schema.encode_group_value(value))]))

    def _tombstone(self, group: Group, keys: list[tuple[str, int]], group_too: bool = False) -> None:
        records = [(schema.encode_offset_key(schema.OffsetKey(group.group_id, t, p)), None) for t, p in keys]
        if group_too:
            records.append((schema.encode_group_key(schema.GroupKey(group.group_id)), None))
        if records:
            self._append(self.partition_for(group.group_id), build_batch(records))
        for k in keys:
            group.offsets.pop(k, None)

    # -- timers ---------------------------------------------------------------------------
    def poll(self, now_ms: int | None = None) -> int:
        """Run what is due; return the time (ms) of the next deadline."""
        now = self._now() if now_ms is None else now_ms
        nxt = now + 1000
        for group in list(self.groups.values()):
            for mid, exp in list(group.pending_member_ids.items()):
                if exp <= now:
                    del group.pending_member_ids[mid]
            if group.is_(S.PREPARING_REBALANCE):
                self._maybe_complete_join(group, now)
                if group.is_(S.PREPARING_REBALANCE):
                    nxt = min(nxt, group.rebalance_deadline_ms)
            for m in list(group.members.values()):
                if m.join_token is not None:
                    continue  # a member waiting in JoinGroup is alive by definition
                due = m.last_heartbeat_ms + m.session_timeout_ms
                if due <= now:
                    log.info("group %s: member %s missed its session timeout; removing it",
                             group.group_id, m.member_id)
                    self._remove_member(group, m.member_id, now)
                else:
                    nxt = min(nxt, due)
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + self.expiry_check_ms
            self._expire_offsets(now)
        return min(nxt, self._next_expiry_check)

    def _expire_offsets(self, now: int) -> None:
        """offsets.retention.minutes: offsets of a group with no members expire (KIP-211)."""
        for group in list(self.groups.values()):
            if not group.is_(S.EMPTY):
                continue
            if group.state_timestamp_ms + self.offsets_retention_ms > now:
                continue
            expired = [k for k, v in group.offsets.items()
                       if v.commit_timestamp + self.offsets_retention_ms <= now]
            try:
                self._tombstone(group, expired, group_too=len(expired) == len(group.offsets))
            except KafkaError as e:
                log.error("expiring offsets of group %s failed: %s", group.group_id, e)
                continue
            if not group.offsets:
                group.transition(S.DEAD, now)
                del self.groups[group.group_id]
