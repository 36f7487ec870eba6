"""The cluster's state in ZooKeeper, read and written through one kazoo client (Kafka's
KafkaZkClient): brokers, topics, partition states, controller election, admin requests.

Fencing: every write a controller makes to a partition state is a transaction that also checks
the ``/controller_epoch`` znode's version it got when elected. A controller that lost its
session (and whose successor has since bumped the epoch) can then change nothing, even if its
kazoo client still talks (Kafka 2.2+'s ``checkControllerAndUpdate``). Within that, each state
write is conditional on the state znode's own version (zkVersion), so a broker's ISR update and
the controller's leader change cannot overwrite each other.

Methods block on ZooKeeper; call them from the controller's thread (or a tool's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

from appliance.cluster import zk_paths as zp
from appliance.cluster.zk_paths import BrokerInfo, LeaderIsr, TopicAssignment, TopicPartition
from appliance.storage.partition_metadata import new_topic_id

__all__ = ["ZkStore", "ControllerMoved", "TopicExists", "TopicCollision"]


class ControllerMoved(Exception):
    """A conditional controller write found a newer controller epoch: this controller is stale."""


class TopicExists(Exception):
    """The topic znode already exists (TOPIC_ALREADY_EXISTS)."""


class TopicCollision(Exception):
    """The name equals an existing topic's once '.' and '_' are folded together (metric names
    cannot tell them apart); Kafka refuses it with INVALID_TOPIC_EXCEPTION."""


class ZkStore:
    """Typed reads and writes of Kafka's znodes through ``client`` (already rooted at the chroot)."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    # -- brokers -----------------------------------------------------------------------------

    def _children(self, path: str, watch=None) -> list[str]:
        """Children of ``path``; [] before any broker created it (then an exists-watch waits for it)."""
        try:
            return self.client.get_children(path, watch=watch)
        except NoNodeError:
            if watch is not None:
                self.client.exists(path, watch=watch)
            return []

    def broker_ids(self, watch=None) -> list[int]:
        return sorted(int(c) for c in self._children(zp.BROKER_IDS, watch) if c.isdigit())

    def brokers(self, watch=None) -> dict[int, BrokerInfo]:
        out = {}
        for b in self.broker_ids(watch):
            try:
                data, stat = self.client.get(zp.broker_path(b))
            except NoNodeError:
                continue  # went away between the listing and the read
            out[b] = replace(zp.decode_broker(b, data), epoch=stat.czxid)
        return out

    # -- topics ------------------------------------------------------------------------------

    def topics(self, watch=None) -> list[str]:
        return sorted(self._children(zp.BROKER_TOPICS, watch))

    def assignment(self, topic: str, watch=None) -> TopicAssignment | None:
        try:
            data, _ = self.client.get(zp.topic_path(topic), watch=watch)
        except NoNodeError:
            return None
        return zp.decode_topic(topic, data)

    def create_topic(self, topic: str, partitions: dict[int, tuple[int, ...]],
                     config: dict[str, str] | None = None) -> None:
        """Kafka's order: the config first, then the assignment (whose creation the controller
        watches), so the controller never sees a topic without its config.

        Raises:
            TopicExists: the topic znode is already there.
            TopicCollision: an existing topic differs only by '.' vs '_'.
        """
        if self.client.exists(zp.topic_path(topic)):
            raise TopicExists(topic)
        folded = topic.replace(".", "_")
        clash = [t for t in self.topics() if t.replace(".", "_") == folded]
        if clash:
            raise TopicCollision(f"topic '{topic}' collides with existing topics: {', '.join(clash)}")
        data = zp.encode_topic_config(config or {})
        try:
            self.client.create(zp.topic_config_path(topic), data, makepath=True)
        except NodeExistsError:
            self.client.set(zp.topic_config_path(topic), data)
        try:
            self.client.create(zp.topic_path(topic),
                               zp.encode_topic(TopicAssignment(dict(partitions), topic_id=new_topic_id())),
                               makepath=True)
        except NodeExistsError:
            raise TopicExists(topic) from None

    def add_partitions(self, topic: str, base: TopicAssignment, zk_version: int,
                       added: dict[int, tuple[int, ...]]) -> bool:
        """Kafka's AdminZkClient.addPartitions: the topic znode read at ``zk_version`` with
        ``added`` partitions, written only if nobody changed it since (the controller watches
        the znode and creates them). False when it changed: read and decide again."""
        grown = TopicAssignment({**base.partitions, **added}, dict(base.adding), dict(base.removing),
                                base.topic_id)
        try:
            self.client.set(zp.topic_path(topic), zp.encode_topic(grown), version=zk_version)
        except BadVersionError:
            return False
        return True

    def assignment_with_version(self, topic: str) -> tuple[TopicAssignment, int] | None:
        """The topic znode and its zkVersion (None: no such topic)."""
        try:
            data, stat = self.client.get(zp.topic_path(topic))
        except NoNodeError:
            return None
        return zp.decode_topic(topic, data), stat.version

    def set_assignment(self, topic: str, assignment: TopicAssignment) -> None:
        self.client.set(zp.topic_path(topic), zp.encode_topic(assignment))

    def topic_config(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.client.get(zp.topic_config_path(topic))
        except NoNodeError:
            return {}
        return zp.decode_topic_config(topic, data)

    def set_topic_config(self, topic: str, config: dict[str, str]) -> None:
        """Write the topic's overrides and announce them to every broker (Kafka's
        AdminZkClient.changeConfigs: the entity first, then the notification)."""
        self._set_config(zp.topic_config_path(topic), config)
        self.announce_config_change(f"topics/{topic}")

    def broker_config(self, broker_id: int | str) -> dict[str, str]:
        """A broker's dynamic configs, ``/config/brokers/<id>`` (or ``<default>``; {} when none)."""
        return self.broker_config_or_none(broker_id) or {}

    def broker_config_or_none(self, broker_id: int | str) -> dict[str, str] | None:
        """As :meth:`broker_config`, None when the znode does not exist."""
        path = zp.broker_config_path(broker_id)
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return None
        return zp.decode_config(path, data)

    def set_broker_config(self, broker_id: int | str, config: dict[str, str]) -> None:
        self._set_config(zp.broker_config_path(broker_id), config)
        self.announce_config_change(f"brokers/{broker_id}")

    def user_names(self) -> list[str]:
        return self._children("/config/users")

    def user_config(self, user: str) -> dict[str, str]:
        """A user's entity configs, ``/config/users/<user>`` (SCRAM credentials; {} when none)."""
        path = f"/config/users/{user}"
        try:
            data, _ = self.client.get(path)
        except NoNodeError:
            return {}
        return zp.decode_config(path, data)

    def set_user_config(self, user: str, config: dict[str, str]) -> None:
        self._set_config(f"/config/users/{user}", config)
        self.announce_config_change(f"users/{user}")

    # -- config change notifications (/config/changes) ------------------------------------------

    def announce_config_change(self, entity_path: str) -> None:
        self.client.create(zp.CONFIG_CHANGE_PREFIX, zp.encode_config_change(entity_path),
                           sequence=True, makepath=True)

    def config_changes(self, watch=None) -> list[str]:
        """The notification names (``config_change_<seq>``), oldest first."""
        return sorted(c for c in self._children(zp.CONFIG_CHANGES, watch) if c.startswith("config_change_"))

    def config_change(self, name: str) -> tuple[str, str, int] | None:
        """(entity type, entity name, creation time in ms) of one notification; None when it is
        gone (purged) or unreadable (logged by the caller's skip)."""
        path = f"{zp.CONFIG_CHANGES}/{name}"
        try:
            data, stat = self.client.get(path)
            kind, entity = zp.decode_config_change(data, path)
        except (NoNodeError, zp.ZnodeFormatError):
            return None
        return kind, entity, stat.ctime

    def delete_config_change(self, name: str) -> None:
        try:
            self.client.delete(f"{zp.CONFIG_CHANGES}/{name}")
        except NoNodeError:
            pass

    def _set_config(self, path: str, config: dict[str, str]) -> None:
        data = zp.encode_topic_config(config)
        try:
            self.client.set(path, data)
        except NoNodeError:
            try:
                self.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.client.set(path, data)

    def delete_topic_znodes(self, topic: str) -> None:
        """The last step of topic deletion: assignment, states, config, the delete request."""
        for path in (zp.topic_path(topic), zp.topic_config_path(topic), zp.delete_topic_path(topic)):
            try:
                self.client.delete(path, recursive=True)
            except NoNodeError:
                pass

    def request_topic_deletion(self, topic: str) -> None:
        try:
            self.client.create(zp.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass

    def drop_deletion_request(self, topic: str) -> None:
        try:
            self.client.delete(zp.delete_topic_path(topic))
        except NoNodeError:
            pass

    def topics_to_delete(self, watch=None) -> list[str]:
        return sorted(self._children(zp.DELETE_TOPICS, watch))

    # -- partition states --------------------------------------------------------------------

    def partition_state(self, tp: TopicPartition) -> LeaderIsr | None:
        try:
            data, stat = self.client.get(zp.partition_state_path(tp.topic, tp.partition))
        except NoNodeError:
            return None
        return zp.decode_partition_state(tp.topic, tp.partition, data, stat.version)

    def partition_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderIsr]:
        # one pipelined round of async reads instead of one round trip per partition
        asyncs = {tp: self.client.get_async(zp.partition_state_path(tp.topic, tp.partition)) for tp in tps}
        out = {}
        for tp, a in asyncs.items():
            try:
                data, stat = a.get()
            except NoNodeError:
                continue
            out[tp] = zp.decode_partition_state(tp.topic, tp.partition, data, stat.version)
        return out

    def create_partition_state(self, tp: TopicPartition, state: LeaderIsr, epoch_zk_version: int) -> LeaderIsr:
        """Create the state znode of a new partition, fenced by the controller epoch.

        Raises:
            ControllerMoved: the controller epoch changed since this controller was elected.
            NodeExistsError: the state exists (another controller got there first).
        """
        path = zp.partition_state_path(tp.topic, tp.partition)
        self.client.ensure_path(zp.partitions_path(tp.topic) + f"/{tp.partition}")
        tx = self.client.transaction()
        tx.check(zp.CONTROLLER_EPOCH, epoch_zk_version)
        tx.create(path, zp.encode_partition_state(state))
        results = tx.commit()
        self._raise_first(results)
        return LeaderIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, 0)

    def update_partition_state(self, tp: TopicPartition, state: LeaderIsr,
                               epoch_zk_version: int | None) -> LeaderIsr | None:
        """Write ``state`` if the znode is still at ``state.zk_version``; returns the state with
        its new zkVersion, or None when the version moved on (re-read and decide again).
        ``epoch_zk_version`` None = a broker's own ISR write (not fenced by the controller epoch).

        Raises:
            ControllerMoved: the controller epoch changed since this controller was elected.
        """
        path = zp.partition_state_path(tp.topic, tp.partition)
        data = zp.encode_partition_state(state)
        if epoch_zk_version is None:
            try:
                stat = self.client.set(path, data, version=state.zk_version)
            except BadVersionError:
                return None
            return LeaderIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version)
        tx = self.client.transaction()
        tx.check(zp.CONTROLLER_EPOCH, epoch_zk_version)
        tx.set_data(path, data, version=state.zk_version)
        results = tx.commit()
        if _epoch_check_failed(results):
            raise ControllerMoved("controller epoch changed: this controller is no longer active")
        if isinstance(results[1], BadVersionError):
            return None
        if isinstance(results[1], Exception):
            raise results[1]
        return LeaderIsr(state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                         results[1].version)

    @staticmethod
    def _raise_first(results: list) -> None:
        if _epoch_check_failed(results):
            raise ControllerMoved("controller epoch changed: this controller is no longer active")
        for r in results[1:]:
            if isinstance(r, Exception):
                raise r

    # -- controller election -----------------------------------------------------------------

    def controller_id(self, watch=None) -> int:
        """The active controller's broker id, or -1. ``watch`` fires when /controller is created,
        changed or deleted (an exists-watch, so it is set even while there is no controller)."""
        if watch is not None:
            self.client.exists(zp.CONTROLLER, watch=watch)
        try:
            data, _ = self.client.get(zp.CONTROLLER)
        except NoNodeError:
            return -1
        return zp.decode_controller(data)

    def controller_owner(self) -> int:
        """The ZooKeeper session id holding /controller, or 0 when there is none."""
        stat = self.client.exists(zp.CONTROLLER)
        return stat.ephemeralOwner if stat is not None else 0

    def controller_epoch(self) -> tuple[int, int]:
        """(epoch, zkVersion of /controller_epoch); (0, -1) before the first election."""
        try:
            data, stat = self.client.get(zp.CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, -1
        return zp.decode_controller_epoch(data), stat.version

    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Create /controller (ephemeral) and bump /controller_epoch in one transaction.
        Returns (new epoch, its zkVersion), or None if another broker is controller.
        Atomic, so two brokers can never both win with the same epoch."""
        while True:
            try:
                self.client.create(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            epoch, version = self.controller_epoch()
            tx = self.client.transaction()
            tx.create(zp.CONTROLLER, zp.encode_controller(broker_id), ephemeral=True)
            tx.set_data(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(epoch + 1), version=version)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return epoch + 1, results[1].version
            if isinstance(results[0], NodeExistsError):
                return None
            if isinstance(results[1], BadVersionError):
                continue  # someone bumped the epoch between our read and write: read again
            raise next(r for r in results if isinstance(r, Exception) and not _rolled_back(r))

    def resign_controller(self, broker_id: int) -> None:
        """Delete /controller if it is still ours."""
        try:
            if self.controller_id() == broker_id:
                self.client.delete(zp.CONTROLLER)
        except NoNodeError:
            pass

    # -- admin requests and notifications ------------------------------------------------------

    def reassignment(self, watch=None) -> dict[TopicPartition, tuple[int, ...]]:
        try:
            data, _ = self.client.get(zp.REASSIGN_PARTITIONS, watch=watch)
        except NoNodeError:
            return {}
        return zp.decode_reassignment(data)

    def watch_reassignment(self, watch) -> bool:
        """Set a watch on /admin/reassign_partitions; True if it exists now."""
        return self.client.exists(zp.REASSIGN_PARTITIONS, watch=watch) is not None

    def request_reassignment(self, moves: dict[TopicPartition, tuple[int, ...]]) -> None:
        self.client.create(zp.REASSIGN_PARTITIONS, zp.encode_reassignment(moves), makepath=True)

    def set_reassignment(self, moves: dict[TopicPartition, tuple[int, ...]]) -> None:
        if not moves:
            try:
                self.client.delete(zp.REASSIGN_PARTITIONS)
            except NoNodeError:
                pass
        else:
            self.client.set(zp.REASSIGN_PARTITIONS, zp.encode_reassignment(moves))

    def preferred_election(self) -> set[TopicPartition]:
        try:
            data, _ = self.client.get(zp.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return set()
        return zp.decode_partitions(data, zp.PREFERRED_REPLICA_ELECTION)

    def watch_preferred_election(self, watch) -> bool:
        return self.client.exists(zp.PREFERRED_REPLICA_ELECTION, watch=watch) is not None

    def request_preferred_election(self, tps: set[TopicPartition]) -> None:
        self.client.create(zp.PREFERRED_REPLICA_ELECTION, zp.encode_partitions(tps), makepath=True)

    def clear_preferred_election(self) -> None:
        try:
            self.client.delete(zp.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass

    def notify_isr_change(self, tps: set[TopicPartition]) -> None:
        """A leader changed ISRs: tell the controller (it updates every broker's metadata)."""
        self.client.create(zp.ISR_CHANGE_PREFIX, zp.encode_partitions(tps), sequence=True, makepath=True)

    def take_isr_changes(self, watch=None) -> set[TopicPartition]:
        """Read and delete every pending ISR change notification."""
        out: set[TopicPartition] = set()
        for child in sorted(self._children(zp.ISR_CHANGE_NOTIFICATION, watch)):
            path = f"{zp.ISR_CHANGE_NOTIFICATION}/{child}"
            try:
                data, _ = self.client.get(path)
                out |= zp.decode_partitions(data, path)
                self.client.delete(path)
            except NoNodeError:
                pass
        return out


def _rolled_back(e: Exception) -> bool:
    return type(e).__name__ == "RolledBackError"


def _epoch_check_failed(results: list) -> bool:
    """The controller-epoch check (a transaction's first op) failed. When a later op fails
    instead, ZooKeeper rolls the check back and kazoo reports it as RolledBackError: that is a
    conflict of that op (a leader's own ISR write moved the version), not a new controller."""
    return isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError)
