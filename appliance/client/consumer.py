"""The consumer (Kafka's poll API): subscribe to topics as a group member, or assign partitions
yourself; ``poll`` returns records and keeps the position of each partition.

Group use (``group.id`` + :meth:`Consumer.subscribe`): the member joins through the group
coordinator, the leader assigns partitions with the first strategy every member supports
(``partition.assignment.strategy``: range, roundrobin, sticky), a background thread heartbeats
every ``heartbeat.interval.ms``, and the next ``poll`` after a rebalance signal rejoins (eager
protocol: all partitions are revoked, then the new ones assigned; the listener hears both).
Positions start at the committed offset, else per ``auto.offset.reset``. With
``enable.auto.commit`` positions are committed every ``auto.commit.interval.ms`` from ``poll``,
before a rebalance and on close.

Thread-safety: like Kafka's KafkaConsumer, one thread uses a consumer (the heartbeat thread is
internal). ``commit_async`` callbacks run on the connection's reader thread.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from appliance.client import config as cfg
from appliance.client.assignors import make_assignor
from appliance.client.cluster import RETRIABLE, Cluster, check_error
from appliance.client.errors import (
    ClientClosedError,
    KafkaConnectionError,
    NoOffsetForPartitionError,
)
from appliance.client.fetching import (
    EARLIEST,
    FETCH,
    LATEST,
    LIST_OFFSETS,
    ConsumerRecord,
    TopicPartition,
    decode_records,
    fetch_body,
    list_offsets_body,
)
from appliance.client.membership import OFFSET_COMMIT, GroupMembership
from appliance.client.serialization import as_decoder
from appliance.client.transactions import ConsumerGroupMetadata
from appliance.errors import ErrorCode, InvalidConfigError, KafkaError, OffsetOutOfRangeError

__all__ = ["Consumer", "ConsumerRecord", "TopicPartition", "ConsumerRebalanceListener"]

log = logging.getLogger("appliance.client.consumer")


class ConsumerRebalanceListener:
    """Override either hook; both get a list of TopicPartition and run inside ``poll``."""

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        pass


class Consumer:
    """See the module docstring. Config keys: :data:`appliance.client.config.CONSUMER_KEYS`.
    Raises InvalidConfigError naming key and value."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        c = self.config = cfg.resolve(cfg.CONSUMER_KEYS, config, kwargs)
        if c["heartbeat.interval.ms"] >= c["session.timeout.ms"]:
            raise InvalidConfigError(f"config heartbeat.interval.ms={c['heartbeat.interval.ms']}: must be "
                                     f"below session.timeout.ms={c['session.timeout.ms']}")
        self.assignors = [make_assignor(n) for n in c["partition.assignment.strategy"]]
        self.cluster = Cluster.for_consumer(c)
        # 1: read_committed (Fetch and ListOffsets stop at the last stable offset; records of
        # aborted transactions are dropped)
        self._isolation = 1 if c["isolation.level"] == "read_committed" else 0
        self.key_decoder = as_decoder(c["key.deserializer"])
        self.value_decoder = as_decoder(c["value.deserializer"])
        self.group: GroupMembership | None = None
        if c["group.id"]:
            self.group = GroupMembership(self.cluster, c["group.id"], self.assignors,
                                         session_timeout_ms=c["session.timeout.ms"],
                                         rebalance_timeout_ms=c["max.poll.interval.ms"],
                                         heartbeat_interval_ms=c["heartbeat.interval.ms"],
                                         retry_backoff_ms=c["retry.backoff.ms"])
        self._topics: list[str] = []
        self._pattern: re.Pattern | None = None
        self._listener: Any = None
        self._subscribed = False  # subscribe() (group-managed) vs assign() (manual)
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int | None] = {}
        self._buffer: dict[TopicPartition, list[ConsumerRecord]] = {}
        self._paused: set[TopicPartition] = set()
        self._last_commit = time.monotonic()
        self._last_pattern_check = 0.0
        self._last_count_check = time.monotonic()
        self._closed = False

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] | re.Pattern | str, listener: Any = None) -> None:
        """Subscribe (as a member of ``group.id``) to topics, or to every topic matching a
        compiled regex. ``listener`` has on_partitions_revoked / on_partitions_assigned.
        Raises InvalidConfigError without group.id, ValueError for an empty list."""
        self._check_open()
        if self.group is None:
            raise InvalidConfigError("config group.id=None: subscribe() needs a group.id (or use assign())")
        if isinstance(topics, re.Pattern):
            self._pattern, self._topics = topics, []
        else:
            topics = [topics] if isinstance(topics, str) else list(topics)
            if not topics:
                raise ValueError("subscribe() needs at least one topic (use unsubscribe() to stop)")
            self._pattern, self._topics = None, sorted(set(topics))
        self._listener = listener
        self._subscribed = True
        self.group.rejoin_needed = True

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Consume exactly these partitions, outside any group membership (commits still go to
        group.id if set). Raises UnknownTopicOrPartitionError for a partition that does not exist."""
        self._check_open()
        tps = [TopicPartition(*tp) for tp in partitions]
        for tp in tps:
            self.cluster.leader_of(tp.topic, tp.partition)
        if self._subscribed and self.group is not None:
            self.group.leave()
        self._subscribed = False
        self._set_assignment(tps)

    def unsubscribe(self) -> None:
        if self._subscribed and self.group is not None:
            self._revoke()
            self.group.leave()
        self._subscribed = False
        self._topics, self._pattern = [], None
        self._set_assignment([])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def subscription(self) -> list[str]:
        return list(self._topics)

    def _set_assignment(self, tps: list[TopicPartition]) -> None:
        self._assignment = sorted(set(tps))
        self._positions = {tp: self._positions.get(tp) for tp in self._assignment}
        self._buffer = {tp: b for tp, b in self._buffer.items() if tp in self._positions}
        self._paused &= set(self._assignment)

    # ------------------------------------------------------------------ positions
    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next. Raises ValueError for an unassigned partition."""
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        self._positions[tp] = offset
        self._buffer.pop(tp, None)

    def seek_to_beginning(self, tps: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(tps, EARLIEST)

    def seek_to_end(self, tps: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(tps, LATEST)

    def _seek_to(self, tps: Iterable[TopicPartition] | None, ts: int) -> None:
        tps = list(self._assignment if tps is None else (TopicPartition(*tp) for tp in tps))
        for tp, off in self._list_offsets(tps, ts).items():
            self.seek(tp, off)

    def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record ``poll`` will return for ``tp`` (resolving it from the
        committed offset / auto.offset.reset if not known yet)."""
        tp = TopicPartition(*tp)
        if tp not in self._positions:
            raise ValueError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        if self._positions[tp] is None:
            self._resolve_positions()
        return self._positions[tp]  # type: ignore[return-value]

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member id, for a transactional producer's
        send_offsets_to_transaction (KIP-447: offsets of a member the group has moved past are
        refused). Needs group.id."""
        if self.group is None:
            raise InvalidConfigError("config group.id=None: group_metadata() needs a group.id")
        return ConsumerGroupMetadata(self.group.group_id, self.group.generation, self.group.member_id, None)

    def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        """The group's committed offset for ``tp`` (None if none). Needs group.id."""
        if self.group is None:
            raise InvalidConfigError("config group.id=None: committed() needs a group.id")
        return self.group.fetch_committed([TopicPartition(*tp)]).get(TopicPartition(*tp))

    def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets([TopicPartition(*tp) for tp in tps], LATEST)

    def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets([TopicPartition(*tp) for tp in tps], EARLIEST)

    def _list_offsets(self, tps: list[TopicPartition], ts: int) -> dict[TopicPartition, int]:
        """Asked of each leader; a retriable answer (a leader moving, a new leader whose high
        watermark is still catching up: OFFSET_NOT_AVAILABLE) is asked again, with fresh
        metadata, until the request timeout."""
        deadline = time.monotonic() + self.cluster.request_timeout
        out: dict[TopicPartition, int] = {}
        todo = list(tps)
        while todo:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in todo:
                by_leader.setdefault(self.cluster.leader_of(tp.topic, tp.partition), []).append(tp)
            todo = []
            for node, group in by_leader.items():
                resp = self.cluster.node_connection(node).request(
                    LIST_OFFSETS, list_offsets_body([(tp.topic, tp.partition, ts) for tp in group], self._isolation))
                for t in resp.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code in RETRIABLE and time.monotonic() < deadline:
                            todo.append(tp)
                            continue
                        check_error(p.error_code, f"offsets of {t.name}-{p.partition_index}")
                        out[tp] = p.offset
            if todo:
                self.cluster.invalidate()
                time.sleep(self.config["retry.backoff.ms"] / 1000)
        return out

    def _resolve_positions(self) -> None:
        missing = [tp for tp, off in self._positions.items() if off is None]
        if not missing:
            return
        if self.group is not None:
            for tp, off in self.group.fetch_committed(missing).items():
                if off is not None and tp in self._positions:
                    self._positions[tp] = off
        self._reset([tp for tp in missing if self._positions.get(tp) is None])

    def _reset(self, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        policy = self.config["auto.offset.reset"]
        if policy == "none":
            raise NoOffsetForPartitionError("no committed offset for " + ", ".join(
                f"{tp.topic}-{tp.partition}" for tp in tps) + " and auto.offset.reset=none")
        for tp, off in self._list_offsets(tps, EARLIEST if policy == "earliest" else LATEST).items():
            self._positions[tp] = off
            self._buffer.pop(tp, None)

    # ------------------------------------------------------------------ group
    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    def _matching_topics(self) -> list[str]:
        if self._pattern is None:
            return self._topics
        resp = self.cluster.refresh(None, auto_create=False)
        return sorted(t.name for t in resp.topics if not t.is_internal and t.error_code == 0
                      and self._pattern.fullmatch(t.name))

    def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        out = {}
        for t in topics:
            try:
                out[t] = len(self.cluster.topic(t, auto_create=False, timeout=5).leaders)
            except KafkaError as e:
                log.warning("subscribed topic %s has no metadata (%s); not assigned", t, e)
        return out

    def _revoke(self) -> None:
        if self.config["enable.auto.commit"]:
            try:
                self.commit_sync()
            except KafkaError as e:
                log.info("commit before rebalance failed: %s", e)
        if self._listener is not None and self._assignment:
            self._listener.on_partitions_revoked(list(self._assignment))

    def _ensure_group(self) -> None:
        g = self.group
        if not self._subscribed or g is None:
            return
        if self._pattern is not None and time.monotonic() - self._last_pattern_check > 3.0:
            self._last_pattern_check = time.monotonic()
            topics = self._matching_topics()
            if topics != self._topics:
                self._topics = topics
                g.rejoin_needed = True
        if (g.assigned_counts is not None and not g.rejoin_needed
                and time.monotonic() - self._last_count_check >= self.cluster.metadata_max_age):
            # the leader looks again as often as metadata ages: partitions added to a topic of
            # the group are assigned by a rebalance (Kafka's leader compares metadata snapshots)
            self._last_count_check = time.monotonic()
            if self._partition_counts(sorted(g.assigned_counts)) != g.assigned_counts:
                log.info("group %s: partition counts changed; rebalancing", g.group_id)
                g.rejoin_needed = True
        if not g.rejoin_needed:
            return
        if self._pattern is not None and not self._topics:
            self._topics = self._matching_topics()
        owned: dict[str, list[int]] = {}
        for tp in self._assignment:
            owned.setdefault(tp.topic, []).append(tp.partition)
        if g.generation >= 0:
            self._revoke()
        assigned = g.join(self._topics, owned, self._partition_counts)
        tps = [TopicPartition(t, p) for t, ps in assigned.items() for p in ps]
        self._positions = {}
        self._buffer = {}
        self._set_assignment(tps)
        if self._listener is not None:
            self._listener.on_partitions_assigned(list(self._assignment))

    # ------------------------------------------------------------------ poll
    def poll(self, timeout: float = 0.0) -> list[ConsumerRecord]:
        """Up to max.poll.records records, waiting up to ``timeout`` s for some. Joins or
        rejoins the group as needed (calling the listener). Raises OffsetOutOfRangeError /
        NoOffsetForPartitionError with auto.offset.reset=none, KafkaConnectionError when the
        cluster stays unreachable, ClientClosedError."""
        self._check_open()
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            self._ensure_group()
            self._maybe_auto_commit()
            self._resolve_positions()
            out = self._drain()
            if out:
                return out
            left = deadline - time.monotonic()
            self._fetch(max(0.0, left))
            out = self._drain()
            if out or time.monotonic() >= deadline:
                return out

    def _drain(self) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        room = self.config["max.poll.records"]
        for tp in list(self._buffer):
            if tp in self._paused:
                continue
            recs = self._buffer[tp]
            take, rest = recs[:room - len(out)], recs[room - len(out):]
            if take:
                out.extend(take)
                self._positions[tp] = take[-1].offset + 1
            if rest:
                self._buffer[tp] = rest
            else:
                del self._buffer[tp]
            if len(out) >= room:
                break
        return out

    def _fetch(self, wait: float) -> None:
        c = self.config
        targets = [tp for tp in self._assignment
                   if tp not in self._buffer and tp not in self._paused and self._positions.get(tp) is not None]
        if not targets:
            if wait > 0:
                time.sleep(min(wait, 0.1))
            return
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in targets:
            try:
                by_leader.setdefault(self.cluster.leader_of(tp.topic, tp.partition), []).append(tp)
            except KafkaError as e:
                log.info("no leader for %s-%d: %s", tp.topic, tp.partition, e)
                self.cluster.invalidate(tp.topic)
        max_wait = int(min(wait * 1000, c["fetch.max.wait.ms"]))
        futures = []
        for node, tps in by_leader.items():
            body = fetch_body([(tp.topic, tp.partition, self._positions[tp]) for tp in tps],
                              max_wait_ms=max_wait, min_bytes=c["fetch.min.bytes"], max_bytes=c["fetch.max.bytes"],
                              partition_max_bytes=c["max.partition.fetch.bytes"], isolation_level=self._isolation)
            try:
                conn = self.cluster.node_connection(node, "fetch")
                futures.append(conn.send(FETCH, body, timeout=self.cluster.request_timeout + max_wait / 1000))
            except KafkaConnectionError as e:
                log.info("fetch from broker %d failed: %s", node, e)
                self.cluster.invalidate()
        if not futures and wait > 0:
            time.sleep(min(wait, self.config["retry.backoff.ms"] / 1000))
        for fut in futures:
            try:
                resp = fut.result(self.cluster.request_timeout + max_wait / 1000 + 1)
            except KafkaConnectionError as e:
                log.info("fetch failed: %s", e)
                self.cluster.invalidate()
                time.sleep(min(wait, self.config["retry.backoff.ms"] / 1000))
                continue
            self._handle_fetch(resp)

    def _handle_fetch(self, resp: Any) -> None:
        reset: list[TopicPartition] = []
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                pos = self._positions.get(tp)
                if pos is None or tp in self._buffer:
                    continue  # reassigned or sought meanwhile
                code = p.error_code
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.config["auto.offset.reset"] == "none":
                        raise OffsetOutOfRangeError(f"{tp.topic}-{tp.partition}: offset {pos} is out of range "
                                                    "and auto.offset.reset=none")
                    reset.append(tp)
                    continue
                if code in RETRIABLE:
                    self.cluster.invalidate(tp.topic)
                    continue
                check_error(code, f"fetching {tp.topic}-{tp.partition}")
                recs, after = decode_records(tp.topic, tp.partition, p.records, pos, self.key_decoder,
                                             self.value_decoder, p.aborted_transactions if self._isolation else None)
                if recs:
                    self._buffer[tp] = recs
                elif after is not None and after > pos:
                    # only control batches or aborted records: past them, as Kafka's consumer
                    self._positions[tp] = after
        if reset:
            for tp in reset:
                self._positions[tp] = None
            self._reset(reset)

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        self._paused |= {TopicPartition(*tp) for tp in tps} & set(self._assignment)

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        self._paused -= {TopicPartition(*tp) for tp in tps}

    # ------------------------------------------------------------------ commits
    def _current_offsets(self) -> dict[TopicPartition, int]:
        return {tp: off for tp, off in self._positions.items() if off is not None}

    def _maybe_auto_commit(self) -> None:
        if not self.config["enable.auto.commit"] or self.group is None:
            return
        if (time.monotonic() - self._last_commit) * 1000 < self.config["auto.commit.interval.ms"]:
            return
        self._last_commit = time.monotonic()
        try:
            self.commit_sync()
        except KafkaError as e:
            log.info("auto-commit failed: %s", e)

    def commit_sync(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the current positions — the next offset to read) and wait.
        Raises CommitFailedError if the group rebalanced meanwhile, InvalidConfigError without
        group.id, KafkaError for other failures."""
        if self.group is None:
            raise InvalidConfigError("config group.id=None: commits need a group.id")
        offs = dict(self._current_offsets() if offsets is None else
                    {TopicPartition(*tp): o for tp, o in offsets.items()})
        self.group.commit(offs, self._subscribed)
        self._last_commit = time.monotonic()

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None,
                     callback: Callable[[dict, BaseException | None], None] | None = None) -> None:
        """Send the commit without waiting; ``callback(offsets, error_or_None)`` runs when the
        answer comes (on the connection's reader thread). Not retried (a later commit supersedes it)."""
        if self.group is None:
            raise InvalidConfigError("config group.id=None: commits need a group.id")
        g = self.group
        offs = dict(self._current_offsets() if offsets is None else
                    {TopicPartition(*tp): o for tp, o in offsets.items()})
        try:
            fut = g.coordinator().send(OFFSET_COMMIT, g.commit_body(offs, self._subscribed))
        except KafkaError as e:
            if callback is not None:
                callback(offs, e)
            return

        def done(f: Any) -> None:
            err = f.exception()
            if err is None:
                try:
                    g.check_commit(f.result(0))
                except KafkaError as e:
                    err = e
            if callback is not None:
                try:
                    callback(offs, err)
                except Exception:
                    log.exception("commit_async callback failed")

        fut.add_done_callback(done)

    # ------------------------------------------------------------------ close
    def close(self, autocommit: bool = True) -> None:
        """Commit (if auto-commit is on), leave the group, close connections. Idempotent."""
        if self._closed:
            return
        try:
            if self.group is not None and self._subscribed:
                if autocommit and self.config["enable.auto.commit"] and self.group.generation >= 0:
                    try:
                        self.commit_sync()
                    except KafkaError as e:
                        log.info("final commit failed: %s", e)
                self.group.leave()
        finally:
            self._closed = True
            self.cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Any:
        while not self._closed:
            yield from self.poll(1.0)
