"""This broker's registration in ZooKeeper: the ephemeral ``/brokers/ids/<id>``.

The znode lives as long as the session; when the session expires the node is gone and the
controller treats the broker as dead. kazoo then opens a new session, and :class:`BrokerRegistry`
registers again (Kafka's ``KafkaZkClient.registerBroker`` after ``handleNewSession``).

Thread-safety: :meth:`register` runs on the caller's thread; re-registration runs on a kazoo
worker; both go through one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from appliance.cluster.zk_paths import (
    BROKER_IDS,
    PERSISTENT_PATHS,
    BrokerInfo,
    broker_path,
    encode_broker,
)

__all__ = ["BrokerIdInUse", "BrokerRegistry", "ensure_persistent_paths"]

log = logging.getLogger(__name__)


class BrokerIdInUse(Exception):
    """Another live broker holds ``/brokers/ids/<id>``: this one must not start (exit code 3)."""

    def __init__(self, broker_id: int) -> None:
        super().__init__(
            f"broker.id {broker_id} is already registered in ZooKeeper ({broker_path(broker_id)}) "
            f"by another running broker; give this broker a different broker.id")
        self.broker_id = broker_id


def ensure_persistent_paths(client: KazooClient) -> None:
    """Create Kafka's top-level znodes (idempotent; Kafka's brokers do the same at start)."""
    for path in PERSISTENT_PATHS:
        client.ensure_path(path)


class BrokerRegistry:
    """Registers ``info`` under /brokers/ids and keeps it registered across session expiries.

    ``on_fatal`` is called (from a kazoo thread) if re-registration finds the id taken by
    another broker meanwhile; the cluster worker then exits with code 3.
    """

    def __init__(self, client: KazooClient, info: BrokerInfo,
                 on_fatal: Callable[[Exception], None] | None = None) -> None:
        self.client = client
        self.info = info
        self.on_fatal = on_fatal
        self._lock = threading.Lock()
        self._expired = False
        self._registered = False
        # KIP-380: this registration's broker epoch (its znode's czxid); -1 before the first
        self.epoch = -1
        client.add_listener(self._on_state)

    @property
    def path(self) -> str:
        return broker_path(self.info.broker_id)

    def register(self) -> None:
        """Create the ephemeral znode.

        Raises:
            BrokerIdInUse: another session holds it.
        """
        with self._lock:
            ensure_persistent_paths(self.client)
            self._create()
            self._registered = True

    def _create(self) -> None:
        data = encode_broker(self.info)
        try:
            _, stat = self.client.create(self.path, data, ephemeral=True, makepath=True, include_data=True)
            self.epoch = stat.czxid
            return
        except NodeExistsError:
            pass
        # Ours from a connection kazoo retried after the create reached the server? Then keep it.
        try:
            _, stat = self.client.get(self.path)
        except NoNodeError:
            _, stat = self.client.create(self.path, data, ephemeral=True, makepath=True, include_data=True)
            self.epoch = stat.czxid
            return
        if stat.ephemeralOwner != self.client.client_id[0]:
            raise BrokerIdInUse(self.info.broker_id)
        self.epoch = stat.czxid

    def unregister(self) -> None:
        """Delete the znode (controlled shutdown's last step); the session may stay open."""
        with self._lock:
            self._registered = False
            try:
                self.client.delete(self.path)
            except NoNodeError:
                pass

    def registered_ids(self) -> list[int]:
        """Every broker id registered now (a convenience for tools and tests)."""
        return sorted(int(c) for c in self.client.get_children(BROKER_IDS) if c.isdigit())

    def _on_state(self, state: str) -> None:
        # kazoo calls listeners on its connection thread: never block here, hand the work off.
        if state == KazooState.LOST:
            self._expired = True
        elif state == KazooState.CONNECTED and self._expired:
            self._expired = False
            self.client.handler.spawn(self._reregister)

    def _reregister(self) -> None:
        with self._lock:
            if not self._registered:
                return
            try:
                self._create()
                log.info("re-registered broker %d after the ZooKeeper session expired", self.info.broker_id)
            except BrokerIdInUse as e:
                log.error("%s", e)
                if self.on_fatal is not None:
                    self.on_fatal(e)
            except Exception as e:  # the next expiry/reconnect retries; say why now
                log.exception("re-registering broker %d failed", self.info.broker_id)
                if self.on_fatal is not None:
                    self.on_fatal(e)
