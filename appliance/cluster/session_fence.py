"""This broker's own doubt about what it leads: the fence of its coordinators.

A broker cut off from ZooKeeper keeps its in-memory picture: which ``__consumer_offsets`` and
``__transaction_state`` partitions it leads, and the groups' offsets and transactions loaded from
them. Once its session expires the controller moves those leaderships elsewhere, and the new
coordinators accept commits the cut-off broker never sees. Until the controller's word reaches
it, that broker would answer OffsetFetch (and every group and transaction request) from a stale
memory — a committed offset read back lower than acknowledged, the "zombie coordinator" of a
network partition.

So the cluster worker fences its coordinators (the ``fenced`` word of the metadata cache, read
by the disk workers that host them, which answer NOT_COORDINATOR meanwhile):

- from the moment kazoo loses its connection (SUSPENDED), which kazoo notices within the session
  timeout of the last heartbeat — before the session can expire on the server and well before a
  new leader can be elected and loaded, so the answers stop first;
- a reconnection within the same session (CONNECTED, not LOST) lifts it: the registration never
  went away, so nothing was moved for want of this broker;
- after an expiry (LOST) it stays until a LeaderAndIsr carrying this broker's *new* broker
  epoch (KIP-380: the registration znode's czxid) has been applied — that is, until the
  controller has seen the new registration and told this broker what it leads now. A request
  sent for the old registration (a controller that has not yet seen the expiry) is refused as
  STALE_BROKER_EPOCH (:meth:`SessionFence.stale`), as Kafka does, and lifts nothing.

Kafka's ZooKeeper-mode brokers have no such fence (their coordinators answer from their cache
until the controller's LeaderAndIsr arrives); this is where we depart, because the network
tests (tests/network) showed a group offset read back below its acknowledged commit.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.client import KazooState

__all__ = ["SessionFence"]

log = logging.getLogger(__name__)


class SessionFence:
    """Follows the session of ``client`` for the registration ``registry`` (its ``epoch``) and
    sets ``cache``'s fenced word (an object with ``set_fenced(bool)``)."""

    def __init__(self, client: Any, registry: Any, cache: Any) -> None:
        self.client = client
        self.registry = registry
        self.cache = cache
        self._lock = threading.Lock()
        self._expired = False  # the session expired: only the controller's word lifts the fence
        self._expired_epoch = -1  # the registration that went with it
        self.fenced = False
        cache.set_fenced(False)
        client.add_listener(self._on_state)

    def close(self) -> None:
        self.client.remove_listener(self._on_state)

    # kazoo calls listeners on its connection thread: a flag and a store, nothing that blocks
    def _on_state(self, state: str) -> None:
        with self._lock:
            if state == KazooState.SUSPENDED:
                self._set(True, "the ZooKeeper connection is lost")
            elif state == KazooState.LOST:
                self._expired = True
                self._expired_epoch = self.registry.epoch
                self._set(True, "the ZooKeeper session expired")
            elif state == KazooState.CONNECTED and not self._expired:
                self._set(False, "the ZooKeeper session is back")

    def stale(self, broker_epoch: int) -> bool:
        """Whether a controller request names an older registration of this broker (KIP-380;
        -1: a sender that does not say)."""
        mine = self.registry.epoch
        return broker_epoch != -1 and mine != -1 and broker_epoch < mine

    def confirmed(self, broker_epoch: int) -> None:
        """A LeaderAndIsr for ``broker_epoch`` has been applied: if it is meant for a
        registration newer than the one that expired, what this broker leads is the
        controller's word again. (Newer, not equal to ``registry.epoch``: the controller can see
        the new znode and send before the create's answer has set that.)"""
        with self._lock:
            if not self.fenced or not self._expired:
                return
            if broker_epoch == -1 or broker_epoch <= self._expired_epoch:
                return
            self._expired = False
            self._set(False, f"the controller's LeaderAndIsr for broker epoch {broker_epoch} is applied")

    def _set(self, fenced: bool, why: str) -> None:
        if fenced != self.fenced:
            log.warning("coordinators %s: %s", "fenced" if fenced else "unfenced", why)
        self.fenced = fenced
        self.cache.set_fenced(fenced)
