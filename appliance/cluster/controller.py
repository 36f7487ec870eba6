"""The controller: one broker of the cluster decides leaders and ISRs (Kafka's KafkaController,
ZooKeeper era).

Shape (STYLE.md, "The cluster"): kazoo watches, the session listener and timers only put events
on one queue (:mod:`appliance.cluster.event_manager`); one thread processes them in order, so no
state here needs a lock. Each event's requests to brokers are collected in a
:class:`~appliance.cluster.request_batch.RequestBatch` and sent together when it ends. Partition
and replica states follow the tables in :mod:`partition_state` / :mod:`replica_state`; every
transition is checked there, and its side effects are in ``partitions_to`` / ``replicas_to``.
Leaders are chosen by the rules of :mod:`election`.

Election: every broker runs a Controller; the one that creates the ephemeral ``/controller``
(and, in the same ZooKeeper transaction, increments ``/controller_epoch``) is active. The others
watch ``/controller`` and try again when it vanishes, i.e. when the active one's session ends,
within ``zookeeper.session.timeout.ms``. Every partition-state write of the active controller is
conditional on the epoch znode's version, so a controller that has been replaced cannot write.

Thread-safety: :meth:`start`, :meth:`stop`, :meth:`put`, :meth:`wait_idle` from any thread;
everything else runs on the event thread.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)

from appliance.cluster import election as rules
from appliance.cluster import events as ev
from appliance.cluster.context import ControllerContext, Reassignment
from appliance.cluster.event_manager import EventManager
from appliance.cluster.partition_reassignment import PartitionReassignment
from appliance.cluster.partition_state import PartitionState
from appliance.cluster.partition_state import check_transition as check_partition
from appliance.cluster.replica_state import ReplicaState
from appliance.cluster.replica_state import check_transition as check_replica
from appliance.cluster.request_batch import (
    NO_LEADER,
    BrokerChannel,
    RequestBatch,
)
from appliance.cluster.topic_deletion import TopicDeletion
from appliance.cluster.zk_paths import LeaderIsr, TopicPartition
from appliance.cluster.zk_store import ControllerMoved, ZkStore
from appliance.errors import ErrorCode
from appliance.storage.partition_metadata import new_topic_id, topic_id_text

__all__ = ["Controller", "PREFERRED", "UNCLEAN"]

log = logging.getLogger(__name__)

P, R = PartitionState, ReplicaState
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types (KIP-460)
# A ZooKeeper hiccup mid-event: wait a little and process the event again (it re-reads ZK).
_RETRY_AFTER_S = 0.5
_FIRST_REBALANCE_S = 5.0


def _truthy(v: str | None, default: bool) -> bool:
    return default if v is None else v.strip().lower() == "true"


class Controller:
    """Takes part in controller election on ``client`` and, while active, runs the cluster."""

    def __init__(self, client: KazooClient, broker_id: int, channel: BrokerChannel, *,
                 unclean_leader_election: bool = False, auto_leader_rebalance: bool = False,
                 imbalance_per_broker_pct: int = 10, imbalance_check_interval_s: float = 300.0,
                 rng: random.Random | None = None) -> None:
        self.client = client
        self.broker_id = broker_id
        self.channel = channel
        self.store = ZkStore(client)
        self.unclean_default = unclean_leader_election
        self.auto_rebalance = auto_leader_rebalance
        self.imbalance_pct = imbalance_per_broker_pct
        self.imbalance_interval_s = imbalance_check_interval_s
        self.rng = rng or random.Random()
        self.events = EventManager(self._process, name=f"controller-{broker_id}")
        self.ctx = ControllerContext()
        self.batch = RequestBatch(broker_id)
        self.active = False
        self.active_controller_id = -1
        self._lost = False
        self._stopped = threading.Event()
        self._rebalance_timer: threading.Thread | None = None
        self._rebalance_stop = threading.Event()
        self.deletion = TopicDeletion(self, self.events.put)
        self.reassignment = PartitionReassignment(self)

    # -- lifecycle (any thread) --------------------------------------------------------------

    def start(self) -> None:
        self.client.add_listener(self._on_session_state)
        self.events.start()
        self.events.put(ev.Startup())

    def stop(self, wait: bool = True) -> None:
        """Resign (if active) and end the event thread; ``wait`` False: do not wait for it (an
        event stuck on an unreachable ZooKeeper; the thread is a daemon)."""
        self._stopped.set()
        self.client.remove_listener(self._on_session_state)
        self.events.put(_Resign())
        self.events.close(timeout=30.0 if wait else 0.0)

    def put(self, event: ev.ControllerEvent) -> None:
        self.events.put(event)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """True once every event queued so far has been processed (for tests and tools)."""
        return self.events.barrier(timeout)

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    def _on_session_state(self, state: str) -> None:
        # kazoo's connection thread: enqueue only
        if state == KazooState.LOST:
            self._lost = True
            self.events.put(ev.SessionExpired())
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self.events.put(ev.Reelect())

    def _enqueue(self, make: Callable[[], ev.ControllerEvent]) -> Callable[[Any], None]:
        def watch(_event: Any) -> None:
            if not self._stopped.is_set():
                self.events.put(make())
        return watch

    # -- the event loop (event thread) ---------------------------------------------------------

    def _process(self, event: ev.ControllerEvent) -> None:
        handler = getattr(self, "process_" + type(event).__name__)
        try:
            handler(event)
            if self.active and not self.batch.empty():
                self.batch.send(self.channel, self.ctx.epoch, self.ctx.live, self.ctx.all_infos,
                                self.deletion.stop_replica_callback)
        except ControllerMoved:
            log.warning("broker %d: another controller took over; resigning", self.broker_id)
            self._resign()
            self.events.put(ev.Reelect())
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError) as e:
            self.batch = RequestBatch(self.broker_id)
            if self._stopped.is_set():
                return
            log.warning("controller event %s hit %s; retrying", type(event).__name__, type(e).__name__)
            time.sleep(_RETRY_AFTER_S)
            self.events.put(event)
        except Exception:
            self.batch = RequestBatch(self.broker_id)  # never send half an event's requests later
            raise

    def process__Resign(self, event: _Resign) -> None:
        self._resign()

    def process_Startup(self, event: ev.Startup) -> None:
        self._elect()

    def process_Reelect(self, event: ev.Reelect) -> None:
        current = self.store.controller_id(watch=self._enqueue(ev.Reelect))
        if self.active and current != self.broker_id:
            self._resign()
        if current == -1:
            self._elect()
        else:
            self.active_controller_id = current

    def process_SessionExpired(self, event: ev.SessionExpired) -> None:
        # our ephemeral /controller is gone with the session; a new one may already be elected
        if self.active:
            self._resign()

    def _elect(self) -> None:
        if self._stopped.is_set():
            return
        current = self.store.controller_id(watch=self._enqueue(ev.Reelect))
        if current != -1:
            self.active_controller_id = current
            if (current == self.broker_id and not self.active
                    and self.store.controller_owner() == self.client.client_id[0]):
                # Our election went through but its answer was lost (a connection loss, and the
                # event was retried). /controller and the epoch bump were one transaction and
                # nobody can have been elected since, so the current epoch is ours.
                self._on_become_controller(*self.store.controller_epoch())
            # (held by an older session of this broker id: wait for it to expire, as Kafka does)
            return
        won = self.store.try_become_controller(self.broker_id)
        if won is None:
            self.active_controller_id = self.store.controller_id()
            return
        self._on_become_controller(*won)

    def _resign(self) -> None:
        was = self.active
        self.active = False
        self._rebalance_stop.set()
        if was:
            for b in list(self.ctx.live):
                self.channel.remove_broker(b)
            try:
                self.store.resign_controller(self.broker_id)
            except Exception:  # the session may be gone already; then so is the znode
                pass
            log.info("broker %d resigned as controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.ctx = ControllerContext()
        self.batch = RequestBatch(self.broker_id)
        if self.active_controller_id == self.broker_id:
            self.active_controller_id = -1

    def _on_become_controller(self, epoch: int, epoch_zk_version: int) -> None:
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=epoch_zk_version)
        self.batch = RequestBatch(self.broker_id)
        self.active = True
        self.active_controller_id = self.broker_id
        ctx = self.ctx
        # watches are set while loading, so nothing that changes during the load is missed
        ctx.live = self.store.brokers(watch=self._enqueue(ev.BrokerChange))
        for b in ctx.live.values():
            self.channel.add_broker(b)
        for t in self.store.topics(watch=self._enqueue(ev.TopicChange)):
            self._load_topic(t)
        ctx.leader_isr.update(self.store.partition_states(list(ctx.replicas)))
        for tp, rs in ctx.replicas.items():
            for b in rs:
                # Kafka's starting point: a replica on a dead broker is Ineligible, then Offline below
                ctx.replica_states[(tp, b)] = R.ONLINE if b in ctx.live else R.DELETION_INELIGIBLE
            s = ctx.leader_isr.get(tp)
            ctx.partition_states[tp] = (P.NEW if s is None else
                                        P.ONLINE if s.leader in ctx.live else P.OFFLINE)
        # every broker learns the new epoch and the whole picture
        self.batch.add_update_metadata(ctx.live, None)
        for tp, s in ctx.leader_isr.items():
            if s.leader in ctx.live:
                self.batch.add_leader_and_isr(self.live_replicas(tp), tp, ctx.info(tp))
        self.partitions_to([tp for tp, st in ctx.partition_states.items() if st in (P.NEW, P.OFFLINE)],
                            P.ONLINE)
        # replicas on brokers that died while there was no controller leave the ISRs now
        self.replicas_to([p for p, st in ctx.replica_states.items() if st is R.DELETION_INELIGIBLE], R.OFFLINE)
        self.reassignment.retry_all()
        for e in (ev.ReassignPartitions(), ev.PreferredReplicaElection(), ev.TopicDeletion(),
                  ev.IsrChangeNotification()):
            self.events.put(e)
        if self.auto_rebalance:
            self._start_rebalance_timer()

    def _start_rebalance_timer(self) -> None:
        self._rebalance_stop = stop = threading.Event()

        def tick() -> None:
            # Kafka's first check comes 5 s after a controller takes over, not a whole interval
            # later: leadership moved by the failover comes back soon
            delay = min(_FIRST_REBALANCE_S, self.imbalance_interval_s)
            while not stop.wait(delay):
                self.events.put(ev.AutoLeaderRebalance())
                delay = self.imbalance_interval_s
        self._rebalance_timer = threading.Thread(target=tick, name="leader-rebalance", daemon=True)
        self._rebalance_timer.start()

    def _load_topic(self, topic: str) -> None:
        a = self.store.assignment(topic, watch=self._enqueue(lambda: ev.PartitionModifications(topic)))
        if a is None:
            return
        if a.topic_id is None:
            # a topic from before topic ids (KIP-516): the controller gives it one, as Kafka's
            # does, and every broker reads it from the znode
            a = dataclasses.replace(a, topic_id=new_topic_id())
            self.store.set_assignment(topic, a)
            log.info("controller: topic %s gets topic id %s", topic, topic_id_text(a.topic_id))
        self.ctx.topic_ids[topic] = a.topic_id
        for p, rs in a.partitions.items():
            tp = TopicPartition(topic, p)
            self.ctx.replicas[tp] = rs
            adding, removing = a.adding.get(p, ()), a.removing.get(p, ())
            if adding or removing:
                original = tuple(r for r in rs if r not in adding)
                target = tuple(r for r in rs if r not in removing)
                self.ctx.reassigning[tp] = Reassignment(original, target)
        self.ctx.topic_configs[topic] = self.store.topic_config(topic)

    # -- helpers -----------------------------------------------------------------------------

    def live_replicas(self, tp: TopicPartition) -> list[int]:
        return [b for b in self.ctx.replicas.get(tp, ()) if b in self.ctx.live]

    def _unclean_allowed(self, tp: TopicPartition) -> bool:
        cfg = self.ctx.topic_configs.get(tp.topic, {})
        return _truthy(cfg.get("unclean.leader.election.enable"), self.unclean_default)

    def update_state(self, tp: TopicPartition,
                      compute: Callable[[LeaderIsr], tuple[int, tuple[int, ...]] | None]) -> LeaderIsr | None:
        """Write a new leader/ISR for ``tp`` (leader epoch + 1), conditional on the zkVersion we
        hold; on a version conflict (the leader changed the ISR meanwhile) re-read and decide
        again. ``compute(current)`` returns (leader, isr) or None for "no change"."""
        for _ in range(5):
            cur = self.ctx.leader_isr.get(tp)
            if cur is None:
                return None
            decided = compute(cur)
            if decided is None:
                return None
            leader, isr = decided
            new = LeaderIsr(leader, cur.leader_epoch + 1, tuple(isr), self.ctx.epoch, cur.zk_version)
            written = self.store.update_partition_state(tp, new, self.ctx.epoch_zk_version)
            if written is not None:
                self.ctx.leader_isr[tp] = written
                return written
            fresh = self.store.partition_state(tp)
            if fresh is None:
                return None
            self.ctx.leader_isr[tp] = fresh
        log.error("partition %s: gave up writing its state after repeated version conflicts", tp)
        return None

    def _offline_chooser(self, unclean: bool | None = None) -> rules.Chooser:
        def choose(tp: TopicPartition, replicas: tuple[int, ...], s: LeaderIsr) -> rules.Election | None:
            allowed = self._unclean_allowed(tp) if unclean is None else unclean
            return rules.offline_partition_leader(replicas, s.isr, self.ctx.live_ids, allowed)
        return choose

    def _preferred_chooser(self, tp: TopicPartition, replicas: tuple[int, ...], s: LeaderIsr) -> rules.Election | None:
        return rules.preferred_replica_leader(replicas, s.isr, self.ctx.live_ids)

    def _shutdown_chooser(self, tp: TopicPartition, replicas: tuple[int, ...], s: LeaderIsr) -> rules.Election | None:
        return rules.controlled_shutdown_leader(replicas, s.isr, set(self.ctx.live), self.ctx.shutting_down)

    # -- the partition state machine: every transition and its side effects ----------------------

    def _set_partition(self, tp: TopicPartition, target: PartitionState) -> None:
        check_partition(tp, self.ctx.partition_states.get(tp, P.NON_EXISTENT), target)
        self.ctx.partition_states[tp] = target

    def partitions_to(self, tps: Iterable[TopicPartition], target: PartitionState,
                       chooser: rules.Chooser | None = None) -> set[TopicPartition]:
        """Move partitions to ``target``; returns those that got there. ONLINE elects a leader
        (``chooser``, default the offline-partition rule); a partition whose election fails
        stays where it was (NEW) or goes OFFLINE."""
        done: set[TopicPartition] = set()
        for tp in sorted(tps):
            cur = self.ctx.partition_states.get(tp, P.NON_EXISTENT)
            check_partition(tp, cur, target)
            if target is P.ONLINE:
                ok = self._init_leader(tp) if cur is P.NEW else self.elect_leader(tp, chooser or self._offline_chooser())
                held = self.ctx.leader_isr.get(tp)
                if ok:
                    self.ctx.partition_states[tp] = P.ONLINE
                    done.add(tp)
                elif cur is P.ONLINE and held is not None and held.leader in self.ctx.live:
                    pass  # e.g. the preferred replica cannot lead: the current leader goes on
                elif cur is not P.NEW:
                    self.ctx.partition_states[tp] = P.OFFLINE
                    log.error("partition %s has no eligible leader: offline", tp)
                continue
            self.ctx.partition_states[tp] = target
            if target is P.NON_EXISTENT:
                self.ctx.partition_states.pop(tp, None)
            done.add(tp)
        return done

    def _init_leader(self, tp: TopicPartition) -> bool:
        """A new partition: leader = first live replica, ISR = the live replicas."""
        live = [b for b in self.ctx.replicas[tp] if b in self.ctx.live_ids]
        if not live:
            log.error("new partition %s: none of its replicas %s is alive", tp, self.ctx.replicas[tp])
            return False
        state = LeaderIsr(live[0], 0, tuple(live), self.ctx.epoch)
        try:
            self.ctx.leader_isr[tp] = self.store.create_partition_state(tp, state, self.ctx.epoch_zk_version)
        except NodeExistsError:
            existing = self.store.partition_state(tp)
            if existing is None:
                return False
            self.ctx.leader_isr[tp] = existing
        self.batch.add_leader_and_isr(self.live_replicas(tp), tp, self.ctx.info(tp), is_new=True)
        return self.ctx.leader_isr[tp].leader in self.ctx.live

    def elect_leader(self, tp: TopicPartition, chooser: rules.Chooser) -> bool:
        replicas = self.ctx.replicas[tp]
        chosen: list[rules.Election] = []

        def compute(cur: LeaderIsr) -> tuple[int, tuple[int, ...]] | None:
            e = chooser(tp, replicas, cur)
            if e is None:
                return None
            chosen.append(e)
            return e.leader, e.isr

        written = self.update_state(tp, compute)
        if written is None:
            return False
        if chosen and chosen[-1].unclean:
            log.warning("partition %s: unclean election of %d; records may be lost", tp, written.leader)
        self.batch.add_leader_and_isr(self.live_replicas(tp), tp, self.ctx.info(tp))
        return True

    # -- the replica state machine -------------------------------------------------------------

    def replicas_to(self, pairs: Iterable[tuple[TopicPartition, int]], target: ReplicaState) -> None:
        pairs = sorted(pairs)
        for tp, b in pairs:
            check_replica((tp, b), self.ctx.replica_states.get((tp, b), R.NON_EXISTENT), target)
        live = self.ctx.live
        for tp, b in pairs:
            previous = self.ctx.replica_states.get((tp, b), R.NON_EXISTENT)
            self.ctx.replica_states[(tp, b)] = target
            # New -> Online sends nothing: the partition's own transition already told it (is_new)
            if target is R.ONLINE and previous is not R.NEW and tp in self.ctx.leader_isr and b in live:
                self.batch.add_leader_and_isr([b], tp, self.ctx.info(tp))
            elif target is R.OFFLINE and b in live:
                self.batch.add_stop_replica([b], tp, delete=False)
            elif target is R.DELETION_STARTED and b in live:
                self.batch.add_stop_replica([b], tp, delete=True)
            elif target is R.NON_EXISTENT:
                del self.ctx.replica_states[(tp, b)]
        if target is R.OFFLINE:
            by_tp: dict[TopicPartition, list[int]] = {}
            for tp, b in pairs:
                if tp.topic not in self.ctx.topics_deleting:  # Kafka skips ISR writes for those
                    by_tp.setdefault(tp, []).append(b)
            for tp, gone in by_tp.items():
                self._remove_from_isr(tp, gone)

    def _remove_from_isr(self, tp: TopicPartition, gone: list[int]) -> None:
        """Kafka's rule: a removed leader leaves leader = -1; the last ISR member is kept (it is
        the one clean election must wait for)."""
        def compute(cur: LeaderIsr) -> tuple[int, tuple[int, ...]] | None:
            leader, isr = cur.leader, list(cur.isr)
            for r in gone:
                if r == leader:
                    leader = NO_LEADER
                if r in isr and len(isr) > 1:
                    isr.remove(r)
            if leader == cur.leader and tuple(isr) == cur.isr:
                return None
            return leader, tuple(isr)

        if self.update_state(tp, compute) is not None:
            self.batch.add_leader_and_isr([b for b in self.live_replicas(tp) if b not in gone], tp,
                                          self.ctx.info(tp))

    # -- brokers -------------------------------------------------------------------------------

    def process_BrokerChange(self, event: ev.BrokerChange) -> None:
        if not self.active:
            return
        current = self.store.brokers(watch=self._enqueue(ev.BrokerChange))
        old = dict(self.ctx.live)
        new = set(current) - set(old)
        dead = set(old) - set(current)
        bounced = {b for b in set(current) & set(old) if current[b] != old[b]}
        self.ctx.live = {b: i for b, i in current.items() if b not in bounced}
        if dead | bounced:
            log.info("controller: brokers %s gone", sorted(dead | bounced))
            self._on_brokers_failure(dead | bounced)
        for b in dead | bounced:
            self.channel.remove_broker(b)
        self.ctx.live = current
        for b in sorted(new | bounced):
            self.channel.add_broker(current[b])
        if new | bounced:
            log.info("controller: brokers %s registered", sorted(new | bounced))
            self._on_brokers_startup(new | bounced)

    def _on_brokers_failure(self, dead: set[int]) -> None:
        ctx = self.ctx
        ctx.shutting_down -= dead
        led = [tp for tp, s in ctx.leader_isr.items()
               if s.leader in dead and tp.topic not in ctx.topics_deleting]
        self.partitions_to(led, P.OFFLINE)
        self.partitions_to(led, P.ONLINE)
        on_dead = [(tp, b) for tp, rs in ctx.replicas.items() for b in rs
                   if b in dead and ctx.replica_states.get((tp, b)) in (R.NEW, R.ONLINE)]
        self.replicas_to(on_dead, R.OFFLINE)
        deleting = [(tp, b) for (tp, b), st in ctx.replica_states.items()
                    if b in dead and st is R.DELETION_STARTED]
        self.replicas_to(deleting, R.DELETION_INELIGIBLE)
        self.batch.add_update_metadata(ctx.live, {})

    def _on_brokers_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        # the new brokers get the whole picture; everyone else learns they exist
        self.batch.add_update_metadata(new, None)
        self.batch.add_update_metadata(set(ctx.live) - new, {})
        on_new = [(tp, b) for tp, rs in ctx.replicas.items() for b in rs
                  if b in new and tp.topic not in ctx.topics_deleting]
        self.replicas_to(on_new, R.ONLINE)
        waiting = [tp for tp, st in ctx.partition_states.items()
                   if st in (P.NEW, P.OFFLINE) and tp.topic not in ctx.topics_deleting]
        self.partitions_to(waiting, P.ONLINE)
        # deletions that waited for these brokers go on
        retry = [(tp, b) for (tp, b), st in ctx.replica_states.items()
                 if b in new and st is R.DELETION_INELIGIBLE]
        self.replicas_to(retry, R.OFFLINE)
        self.replicas_to(retry, R.DELETION_STARTED)
        self.reassignment.retry_all()

    # -- topics --------------------------------------------------------------------------------

    def process_TopicChange(self, event: ev.TopicChange) -> None:
        if not self.active:
            return
        topics = set(self.store.topics(watch=self._enqueue(ev.TopicChange)))
        known = self.ctx.topics()
        for t in known - topics:
            self.ctx.remove_topic(t)
        new = sorted(topics - known)
        for t in new:
            self._load_topic(t)
        self._on_new_partitions([tp for t in new for tp in self.ctx.partitions_of(t)])

    def process_PartitionModifications(self, event: ev.PartitionModifications) -> None:
        t = event.topic
        if not self.active or t not in self.ctx.topics() or t in self.ctx.topics_deleting:
            return
        a = self.store.assignment(t, watch=self._enqueue(lambda: ev.PartitionModifications(t)))
        if a is None:
            return
        added = []
        for p, rs in a.partitions.items():
            tp = TopicPartition(t, p)
            if tp not in self.ctx.replicas:
                self.ctx.replicas[tp] = rs
                added.append(tp)
        self._on_new_partitions(added)

    def _on_new_partitions(self, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        self.partitions_to(tps, P.NEW)
        pairs = [(tp, b) for tp in tps for b in self.ctx.replicas[tp]]
        self.replicas_to(pairs, R.NEW)
        self.partitions_to(tps, P.ONLINE)
        self.replicas_to(pairs, R.ONLINE)

    def process_TopicDeletion(self, event: ev.TopicDeletion) -> None:
        if not self.active:
            return
        self.deletion.requested(set(self.store.topics_to_delete(watch=self._enqueue(ev.TopicDeletion))))

    def process_ReplicaDeletionResult(self, event: ev.ReplicaDeletionResult) -> None:
        if self.active:
            self.deletion.replicas_answered(event)

    # -- ISR changes and reassignment ----------------------------------------------------------

    def process_IsrChangeNotification(self, event: ev.IsrChangeNotification) -> None:
        if not self.active:
            return
        tps = {tp for tp in self.store.take_isr_changes(watch=self._enqueue(ev.IsrChangeNotification))
               if tp in self.ctx.replicas}
        if not tps:
            return
        self.ctx.leader_isr.update(self.store.partition_states(tps))
        self.batch.add_update_metadata(self.ctx.live, {tp: self.ctx.info(tp) for tp in tps})
        self.reassignment.isr_changed(tps)

    def process_ReassignPartitions(self, event: ev.ReassignPartitions) -> None:
        if self.active and self.store.watch_reassignment(self._enqueue(ev.ReassignPartitions)):
            self.reassignment.znode_changed()

    def process_AlterPartitionReassignments(self, event: ev.AlterPartitionReassignments) -> None:
        _reply(event, self.reassignment.alter(event.moves, event.same_replication_factor) if self.active else None)

    def process_ListPartitionReassignments(self, event: ev.ListPartitionReassignments) -> None:
        _reply(event, self.reassignment.listed(event.partitions) if self.active else None)

    # -- preferred leaders, rebalance, controlled shutdown, ElectLeaders -------------------------

    def process_PreferredReplicaElection(self, event: ev.PreferredReplicaElection) -> None:
        if not self.active or not self.store.watch_preferred_election(self._enqueue(ev.PreferredReplicaElection)):
            return
        tps = self.store.preferred_election()
        self._elect_preferred(tps)
        self.store.clear_preferred_election()

    def _elect_preferred(self, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        ctx = self.ctx
        todo = [tp for tp in tps if tp in ctx.leader_isr and tp not in ctx.reassigning
                and tp.topic not in ctx.topics_deleting and ctx.leader_isr[tp].leader != ctx.replicas[tp][0]]
        return self.partitions_to(todo, P.ONLINE, self._preferred_chooser)

    def process_AutoLeaderRebalance(self, event: ev.AutoLeaderRebalance) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per live preferred replica, if more than
        ``leader.imbalance.per.broker.percentage`` of the partitions it prefers are led
        elsewhere, elect it for them; nothing while a reassignment is running (it moves
        leaders itself)."""
        if not self.active or self.ctx.reassigning:
            return
        ctx = self.ctx
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp, rs in ctx.replicas.items():
            if rs and tp in ctx.leader_isr:
                by_preferred.setdefault(rs[0], []).append(tp)
        todo: list[TopicPartition] = []
        for b, tps in sorted(by_preferred.items()):
            if b not in ctx.live_ids:
                continue
            off = [tp for tp in tps if ctx.leader_isr[tp].leader != b]
            if len(off) * 100 > self.imbalance_pct * len(tps):
                todo += off
        if todo:
            log.info("controller: moving %d partitions back to their preferred leaders", len(todo))
            self._elect_preferred(todo)

    def process_ControlledShutdown(self, event: ev.ControlledShutdown) -> None:
        b = event.broker_id
        if not self.active:
            body = {"error_code": int(ErrorCode.NOT_CONTROLLER), "remaining_partitions": []}
        elif b not in self.ctx.live:
            body = {"error_code": int(ErrorCode.BROKER_NOT_AVAILABLE), "remaining_partitions": []}
        else:
            ctx = self.ctx
            ctx.shutting_down.add(b)
            led = [tp for tp in ctx.partitions_led_by(b)
                   if len(ctx.replicas[tp]) > 1 and tp.topic not in ctx.topics_deleting]
            self.partitions_to(led, P.ONLINE, self._shutdown_chooser)
            followers = [(tp, b) for tp in ctx.partitions_on(b)
                         if len(ctx.replicas[tp]) > 1 and ctx.leader_isr.get(tp) is not None
                         and ctx.leader_isr[tp].leader != b and tp.topic not in ctx.topics_deleting
                         and ctx.replica_states.get((tp, b)) in (R.NEW, R.ONLINE)]
            self.replicas_to(followers, R.OFFLINE)
            remaining = [tp for tp in ctx.partitions_led_by(b) if len(ctx.replicas[tp]) > 1]
            body = {"error_code": 0, "remaining_partitions": [
                {"topic_name": tp.topic, "partition_index": tp.partition} for tp in remaining]}
        if event.reply is not None:
            event.reply(body)

    def process_ElectLeaders(self, event: ev.ElectLeaders) -> None:
        results: dict[TopicPartition, tuple[int, str | None]] = {}
        if not self.active:
            if event.reply is not None:
                event.reply({"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_CONTROLLER),
                             "replica_election_results": []})
            return
        ctx = self.ctx
        tps = set(ctx.leader_isr) if event.partitions is None else event.partitions
        for tp in sorted(tps):
            if tp not in ctx.replicas or tp.topic in ctx.topics_deleting:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown partition")
                continue
            s = ctx.leader_isr.get(tp)
            if event.election_type == PREFERRED:
                if s is not None and s.leader == ctx.replicas[tp][0]:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "leader is already the preferred replica")
                elif self.partitions_to([tp], P.ONLINE, self._preferred_chooser):
                    results[tp] = (ErrorCode.NONE, None)
                else:
                    results[tp] = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                   "the preferred replica is not alive or not in sync")
            else:
                if s is not None and s.leader in ctx.live_ids:
                    results[tp] = (ErrorCode.ELECTION_NOT_NEEDED, "the partition has a live leader")
                elif self.partitions_to([tp], P.ONLINE, self._offline_chooser(unclean=True)):
                    results[tp] = (ErrorCode.NONE, None)
                else:
                    results[tp] = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica is alive")
        by_topic: dict[str, list] = {}
        for tp, (code, msg) in sorted(results.items()):
            by_topic.setdefault(tp.topic, []).append(
                {"partition_id": tp.partition, "error_code": int(code), "error_message": msg})
        if event.reply is not None:
            event.reply({"throttle_time_ms": 0, "error_code": 0, "replica_election_results": [
                {"topic": t, "partition_result": r} for t, r in by_topic.items()]})


def _reply(event: ev.AlterPartitionReassignments | ev.ListPartitionReassignments, body: Any) -> None:
    if event.reply is not None:
        event.reply(body)


class _Resign(ev.ControllerEvent):
    """Internal: stop() asks the event thread to resign."""
