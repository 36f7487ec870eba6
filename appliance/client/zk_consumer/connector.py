"""The 0.8 high-level consumer: :class:`ConsumerConnector`, made by
:func:`create_java_consumer_connector` from a ``consumer.properties``.

Start-up follows the design documents' "Consumer registration algorithm": register
``/consumers/<group>/ids/<consumer_id>``, watch the group's members, the subscribed topics'
partition lists (and, for a filter, ``/brokers/topics`` for topics created later), then
rebalance. Watches only set a flag; one thread (``appliance-zk-rebalance``) runs the
rebalances, and a lock keeps a rebalance, a commit and the shutdown one at a time. Brokers are
found in ``/brokers/ids``; fetching, leaders and Kafka-stored offsets go through the client's
own :class:`~appliance.client.cluster.Cluster`.

A rebalance: revoke every owned partition (its stream stops handing out its records), commit
the consumed offsets, delete the owner nodes, compute the assignment, claim it; a claim that
meets another owner starts over after rebalance.backoff.ms, up to rebalance.max.retries times,
then ConsumerRebalanceFailed (raised by create_message_streams*, else by the streams).

Thread-safety: the public methods may be called from any thread; each stream is read by one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from appliance.client.cluster import Cluster
from appliance.client.fetching import TopicPartition
from appliance.client.serialization import as_decoder
from appliance.client.zk_consumer import rebalance as rb
from appliance.client.zk_consumer.assignment import assign, thread_id
from appliance.client.zk_consumer.errors import ConsumerRebalanceFailed
from appliance.client.zk_consumer.fetcher import Fetcher
from appliance.client.zk_consumer.filters import TopicFilter
from appliance.client.zk_consumer.offsets import OffsetStore
from appliance.client.zk_consumer.registry import bootstrap_of
from appliance.client.zk_consumer.settings import load_config, open_zookeeper
from appliance.client.zk_consumer.stream import SHUTDOWN, KafkaStream, PartitionTopicInfo
from appliance.client.zk_consumer.znodes import (
    BROKER_TOPICS,
    STATIC,
    Registration,
    default_consumer_id,
    encode_registration,
    ids_path,
)
from appliance.errors import KafkaError

__all__ = ["ConsumerConnector", "create_java_consumer_connector"]

log = logging.getLogger("appliance.client.zk_consumer")


def create_java_consumer_connector(config: Mapping[str, Any] | str | Path, **overrides: Any) -> ConsumerConnector:
    """Kafka's ``Consumer.createJavaConsumerConnector(new ConsumerConfig(props))``: ``config`` is
    a dict of consumer.properties keys or a properties file's path. Connects to ZooKeeper.

    Raises InvalidConfigError (naming key and value), ZooKeeperUnreachable after
    zookeeper.connection.timeout.ms, KafkaError when no broker is registered in ZooKeeper."""
    return ConsumerConnector(config, **overrides)


class ConsumerConnector:
    """See the module docstring."""

    def __init__(self, config: Mapping[str, Any] | str | Path, **overrides: Any) -> None:
        c = self.config = load_config(config, **overrides)
        self.group: str = c["group.id"]
        self.consumer_id: str = c["consumer.id"] or default_consumer_id(self.group)
        self.zk = open_zookeeper(c["zookeeper.connect"], c["zookeeper.session.timeout.ms"],
                                 c["zookeeper.connection.timeout.ms"])
        try:
            boot = bootstrap_of(self.zk, c["zookeeper.connect"])
        except BaseException:
            self.zk.stop()
            self.zk.close()
            raise
        rcvbuf = c["socket.receive.buffer.bytes"]
        self.cluster = Cluster(boot, client_id=c["client.id"], request_timeout_ms=c["socket.timeout.ms"],
                               allow_auto_create=False, socket_buffers=(None, rcvbuf if rcvbuf > 0 else None))
        # the offsets channel: its own connections and timeout (offsets.channel.socket.timeout.ms)
        self.offsets_cluster = Cluster(boot, client_id=c["client.id"],
                                       request_timeout_ms=c["offsets.channel.socket.timeout.ms"],
                                       allow_auto_create=False)
        self.offsets = OffsetStore(self.zk, self.offsets_cluster, self.group, c)
        self.fetcher = Fetcher(self.cluster, c)
        self._registration: Registration | None = None
        self._filter: TopicFilter | None = None
        self._queues: dict[tuple[str | None, str], queue.Queue] = {}  # (topic or None for a filter, thread)
        self._streams: list[KafkaStream] = []
        self._owned: dict[tuple[str, int], PartitionTopicInfo] = {}
        self._owned_threads: dict[tuple[str, int], str] = {}  # the claim that made _owned
        self._watched_topics: set[str] = set()
        self._known_topics: set[str] | None = None
        self._failure: BaseException | None = None
        self._lock = threading.RLock()  # rebalance, commit and shutdown, one at a time
        self._wake = threading.Event()  # a watch fired: rebalance
        self._session_lost = False
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []

    # streams --------------------------------------------------------------------------------
    def create_message_streams(self, topic_count: Mapping[str, int], key_decoder: Any = None,
                               value_decoder: Any = None) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> ``{topic: [n KafkaStream]}``; registers in the group and rebalances.
        Raises ValueError for a bad count or a second call, ConsumerRebalanceFailed."""
        counts = dict(topic_count)
        if not counts or any(not isinstance(n, int) or n < 1 for n in counts.values()):
            raise ValueError(f"topic counts must map topics to a positive number of streams, not {counts!r}")
        self._check_first()
        out: dict[str, list[KafkaStream]] = {}
        for topic, n in counts.items():
            out[topic] = [self._stream((topic, thread_id(self.consumer_id, i)), key_decoder, value_decoder)
                          for i in range(n)]
        self._start(Registration(counts, STATIC))
        return out

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1,
                                         key_decoder: Any = None, value_decoder: Any = None) -> list[KafkaStream]:
        """``num_streams`` streams over every topic ``topic_filter`` allows, including topics
        created later. Raises ValueError, ConsumerRebalanceFailed."""
        if not isinstance(topic_filter, TopicFilter):
            raise ValueError(f"expected a Whitelist or Blacklist, not {topic_filter!r}")
        if not isinstance(num_streams, int) or num_streams < 1:
            raise ValueError(f"num_streams must be a positive number, not {num_streams!r}")
        self._check_first()
        self._filter = topic_filter
        streams = [self._stream((None, thread_id(self.consumer_id, i)), key_decoder, value_decoder)
                   for i in range(num_streams)]
        self._start(Registration({topic_filter.regex: num_streams}, topic_filter.pattern_name))
        return streams

    def _check_first(self) -> None:
        if self._closed.is_set():
            raise ValueError("the connector is shut down")
        if self._registration is not None:
            raise ValueError("a connector creates its streams once (as Kafka's)")

    def _stream(self, key: tuple[str | None, str], key_decoder: Any, value_decoder: Any) -> KafkaStream:
        q: queue.Queue = queue.Queue()  # bounded by the fetcher (queued.max.message.chunks)
        self._queues[key] = q
        s = KafkaStream(q, self.config["consumer.timeout.ms"], lambda: self._failure,
                        as_decoder(key_decoder), as_decoder(value_decoder))
        self._streams.append(s)
        return s

    def _queue_for(self, topic: str, thread: str) -> queue.Queue:
        return self._queues.get((topic, thread)) or self._queues[(None, thread)]

    # start ----------------------------------------------------------------------------------
    def _start(self, reg: Registration) -> None:
        self._registration = reg
        self._register()
        self.zk.add_listener(self._on_state)
        first = [True]

        def members_changed(children: list[str]) -> bool | None:
            if first[0]:  # kazoo calls at once with the current members: the rebalance below covers it
                first[0] = False
                return None
            return self._on_change()

        ChildrenWatch(self.zk, ids_path(self.group), members_changed)
        if self._filter is not None:
            self.zk.ensure_path(BROKER_TOPICS)
            ChildrenWatch(self.zk, BROKER_TOPICS, self._on_topics)
            for t in sorted(self._known_topics or ()):
                self._watch_topic(t)
        else:
            for t in reg.subscription:
                self._watch_topic(t)
        self.fetcher.start()
        self._sync_rebalance()  # raises ConsumerRebalanceFailed to the caller
        self._spawn(self._rebalance_loop, "appliance-zk-rebalance")
        if self.config["auto.commit.enable"]:
            self._spawn(self._auto_commit_loop, "appliance-zk-autocommit")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, daemon=True, name=name)
        t.start()
        self._threads.append(t)

    def _register(self) -> None:
        """Create our ephemeral ids node; a node of the same id left by our previous session
        (after an expiry) is waited out for one session timeout."""
        path = f"{ids_path(self.group)}/{self.consumer_id}"
        data = encode_registration(self._registration)  # type: ignore[arg-type]
        deadline = time.monotonic() + self.config["zookeeper.session.timeout.ms"] / 1000 + 2
        while True:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
                log.info("consumer %s registered in group %s: %s", self.consumer_id, self.group, data.decode())
                return
            except NodeExistsError:
                if time.monotonic() > deadline:
                    raise KafkaError(f"consumer id {self.consumer_id} is already registered in group "
                                     f"{self.group} by another session") from None
                time.sleep(0.2)

    def _watch_topic(self, topic: str) -> None:
        if topic in self._watched_topics:
            return
        self._watched_topics.add(topic)
        first = [True]

        def changed(data: Any, stat: Any) -> bool | None:
            if first[0]:  # kazoo calls at once with the current data: not a change
                first[0] = False
                return None
            return self._on_change()

        DataWatch(self.zk, f"{BROKER_TOPICS}/{topic}", changed)

    # watches: they only set flags (run on kazoo's thread) -------------------------------------
    def _on_change(self, *_: Any) -> bool | None:
        if self._closed.is_set():
            return False  # stops the kazoo watch
        self._wake.set()
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._closed.is_set():
            return False
        f = self._filter
        allowed = {t for t in children if f is not None and f.allows(t, self.config["exclude.internal.topics"])}
        if self._known_topics is not None and allowed != self._known_topics:
            log.info("topics allowed by %r now: %s", f, sorted(allowed))
            self._wake.set()
        self._known_topics = allowed
        return None

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True  # our ephemeral nodes are gone: re-register, then rebalance
            self._wake.set()

    # rebalance ------------------------------------------------------------------------------
    def _rebalance_loop(self) -> None:
        while not self._closed.is_set():
            if not self._wake.wait(0.5) or self._closed.is_set():
                continue
            self._wake.clear()
            try:
                if self._session_lost and self.zk.connected:
                    log.warning("ZooKeeper session of consumer %s expired; registering again", self.consumer_id)
                    with self._lock:
                        self._revoke_all(commit=False)  # the owner nodes went with the session
                        self._register()
                    self._session_lost = False  # only now: a failed registration is tried again
                elif self._session_lost:
                    self._wake.set()
                    time.sleep(0.5)
                    continue
                if self._filter is not None:
                    for t in self._known_topics or ():
                        self._watch_topic(t)
                self._sync_rebalance()
            except ConsumerRebalanceFailed as e:
                log.error("%s", e)
            except Exception:  # the loop must survive a ZooKeeper hiccup: try again on the next change
                log.exception("rebalance of group %s failed", self.group)
                self._wake.set()
                self._closed.wait(self.config["rebalance.backoff.ms"] / 1000)

    def _sync_rebalance(self) -> None:
        c = self.config
        tries = c["rebalance.max.retries"]
        with self._lock:
            for attempt in range(1, tries + 1):
                if self._closed.is_set():
                    return
                try:
                    conflict = self._rebalance_once()
                    if conflict is None:
                        self._failure = None
                        return
                    why = conflict.describe()
                except KafkaError as e:  # e.g. the offsets could not be read: another attempt
                    why = str(e)
                log.info("rebalance of group %s, attempt %d of %d (rebalance.max.retries): %s; trying again in "
                         "%d ms (rebalance.backoff.ms)", self.group, attempt, tries, why, c["rebalance.backoff.ms"])
                self._closed.wait(c["rebalance.backoff.ms"] / 1000)
            err = ConsumerRebalanceFailed(
                f"consumer {self.consumer_id} of group {self.group} could not rebalance after {tries} attempts "
                f"(rebalance.max.retries): {why}")
            self._failure = err
            raise err

    def _rebalance_once(self) -> rb.Conflict | None:
        c = self.config
        state = rb.read_group(self.zk, self.group, c["exclude.internal.topics"])
        if self.consumer_id not in state.registrations:
            raise KafkaError(f"consumer {self.consumer_id} is not registered in group {self.group}")
        wanted = assign(self.consumer_id, state.registrations, state.topics, state.partition_counts,
                        c["partition.assignment.strategy"], c["exclude.internal.topics"])
        if self._owned and rb.still_owned(self.zk, self.group, wanted, self._owned_threads):
            # a change that moves none of our partitions (a watch firing again after a reconnect,
            # another topic's partitions): releasing and claiming the same ones would only pause
            log.debug("rebalance of group %s leaves consumer %s's partitions as they are", self.group,
                      self.consumer_id)
            return None
        self._revoke_all(commit=True)
        conflict = rb.claim(self.zk, self.group, self.consumer_id, wanted, set(state.registrations))
        if conflict is not None:
            return conflict
        tps = [TopicPartition(t, p) for t, p in sorted(wanted)]
        try:
            offsets = self.offsets.fetch(tps)
        except KafkaError:
            rb.release(self.zk, self.group, self.consumer_id, list(wanted))
            raise
        self._owned_threads = dict(wanted)
        for (t, p), tid in sorted(wanted.items()):
            off = offsets.get(TopicPartition(t, p))
            self._owned[(t, p)] = PartitionTopicInfo(t, p, self._queue_for(t, tid), -1 if off is None else off)
        self.fetcher.assign(list(self._owned.values()))
        log.info("consumer %s of group %s owns %s", self.consumer_id, self.group,
                 ", ".join(f"{t}-{p}@{'reset' if i.fetched_offset < 0 else i.fetched_offset}->{wanted[(t, p)]}"
                           for (t, p), i in sorted(self._owned.items())) or "nothing")
        return None

    def _revoke_all(self, commit: bool, retries: int = 0) -> None:
        """Stop handing out the owned partitions, commit where they got to, release them."""
        self.fetcher.assign([])
        consumed = {TopicPartition(t, p): info.revoke() for (t, p), info in self._owned.items()}
        for s in self._streams:
            s.clear()
        if commit and self.config["auto.commit.enable"]:
            try:
                self.offsets.commit({tp: o for tp, o in consumed.items() if o >= 0}, retries=retries)
            except KafkaError as e:
                log.warning("commit before releasing partitions failed: %s", e)
        rb.release(self.zk, self.group, self.consumer_id, list(self._owned))
        self._owned, self._owned_threads = {}, {}

    # commits --------------------------------------------------------------------------------
    def commit_offsets(self) -> None:
        """Commit the offsets after the last records the streams handed out (offsets.storage,
        dual.commit.enabled). Raises KafkaError when Kafka refuses the commit."""
        with self._lock:
            if self._session_lost:  # our owner nodes are gone: another member may be ahead of us now
                log.info("commit of group %s skipped: the ZooKeeper session was lost", self.group)
                return
            offs = {TopicPartition(t, p): i.consumed_offset for (t, p), i in self._owned.items()
                    if not i.revoked and i.consumed_offset >= 0}
            self.offsets.commit(offs)

    def _auto_commit_loop(self) -> None:
        interval = self.config["auto.commit.interval.ms"] / 1000
        while not self._closed.wait(interval):
            try:
                self.commit_offsets()
            except Exception as e:  # tried again next interval
                log.warning("auto-commit of group %s failed: %s", self.group, e)

    # shutdown -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Commit (with auto.commit.enable, retried offsets.commit.max.retries times), release the
        partitions, leave the group, end the streams, close the connections. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(10)
        try:
            with self._lock:
                if self._registration is not None and self.zk.connected:
                    # after a lost session our positions may be behind another member's: no commit
                    self._revoke_all(commit=not self._session_lost,
                                     retries=self.config["offsets.commit.max.retries"])
                    try:
                        self.zk.delete(f"{ids_path(self.group)}/{self.consumer_id}")
                    except NoNodeError:
                        pass
        finally:
            self.fetcher.stop()
            for q in self._queues.values():
                q.put(SHUTDOWN)
            self.zk.remove_listener(self._on_state)
            self.zk.stop()
            self.zk.close()
            self.cluster.close()
            self.offsets_cluster.close()

    def __enter__(self) -> ConsumerConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
