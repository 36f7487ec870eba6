"""What a network worker's request handlers share: the ring client's context (config, table,
disks, wake-ups) and the network side's own: readers, the cluster view, connections, limits.

A plain bag of dependencies, built once per network worker; it knows no handler and routes
nothing (that is :mod:`appliance.broker.handlers`).
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Any, Protocol

from appliance.broker.cluster_view import ClusterView
from appliance.broker.door import ANONYMOUS, ConnectionContext, Door
from appliance.broker.readers import Readers
from appliance.broker.replica_selector import ReplicaSelector
from appliance.config import BrokerConfig
from appliance.process.disk_client import DiskClient
from appliance.process.ring_context import RingContext
from appliance.security.acl import Authorizer, authorizer_from_config
from appliance.security.credentials import CredentialFile, plain_users
from appliance.security.sasl import SaslAuthenticator
from appliance.security.tls import PrincipalRules
from appliance.shm.layout import Role
from appliance.shm.partition_table import PartitionTable

if TYPE_CHECKING:  # the network worker builds these and sets them; the handlers only use them
    from appliance.broker.acceptor import Acceptor
    from appliance.broker.connection_limits import ConnectionLimits
    from appliance.broker.leader_quota import LeaderQuota
    from appliance.broker.request_memory import RequestMemory
    from appliance.broker.request_queue import RequestQueue
    from appliance.metrics.recorder import Recorder
    from appliance.process.cluster_link import ClusterLink
    from appliance.process.producer_ids import FetchBlock
    from appliance.protocol.schema import ApiMessage
    from appliance.shm.leadership_area import LeadershipArea

__all__ = ["BrokerContext", "ProduceFastPath"]


class ProduceFastPath(Protocol):
    """handlers/produce_fast.py's FastProduce as a connection sees it (declared here: the
    handlers import this module, not the other way)."""

    def start(self, conn: Any, frame: memoryview, answer: asyncio.Future) -> bool: ...


def _named(host: str) -> str:
    """A wildcard or empty host is no address to give a client: this machine's name instead."""
    return socket.getfqdn() if host in ("", "0.0.0.0", "::") else host


class BrokerContext(RingContext):
    def __init__(self, net_index: int, config: BrokerConfig, table: PartitionTable,
                 disks: DiskClient, log_dirs: list[str]) -> None:
        super().__init__(net_index, config, table, disks, log_dirs)
        # what exists in the cluster (cluster mode: the shared metadata cache, set by the
        # network worker when it joins; standalone: the partition table)
        self.view = ClusterView(self.index)
        self.readers = Readers(log_dirs)
        self.connections: set[Any] = set()
        # one per listener, in the order given: what a connection accepted on it knows of
        # itself (its client address is filled in on accept) and the address Metadata gives
        self.listeners: list[ConnectionContext] = [
            ConnectionContext(ad.listener, ad.security_protocol, ANONYMOUS, "", (_named(ad.host), ad.port))
            for ad in config.advertised_endpoints]
        self.door = Door()  # the network worker gives it the metrics recorder
        # ssl.principal.mapping.rules: a client certificate's subject -> its principal
        self.principal_rules = PrincipalRules("DEFAULT")
        self._credentials: CredentialFile | None = None  # SCRAM users, read when a SASL client logs in
        # authorizer.class.name set: every request's principal is checked (broker/authorization.py)
        self.authorizer: Authorizer | None = authorizer_from_config(config, log_dirs[0])
        # KIP-392 (cluster mode): replica.selector.class may send a consumer to a follower in its rack
        self.replica_selector: ReplicaSelector | None = ReplicaSelector.from_config(
            config, self.broker_id, log_dirs[0])
        self.cluster_id = f"appliance-{self.broker_id}"
        self.fetch_max_bytes = int(config["fetch.max.bytes"])  # read once: every fetch asks
        self.metrics: Recorder | None = None  # when metrics are on (metrics.listener set)
        # the produce fast path (handlers/produce_fast.py), set by the network worker
        self.fast_produce: ProduceFastPath | None = None
        # set by the network worker: max.connections(.per.ip), its acceptors (one per
        # listener), and queued.max.request.bytes (None when -1: no bound)
        self.limits: ConnectionLimits | None = None
        self.acceptors: list[Acceptor] = []
        self.request_memory: RequestMemory | None = None
        self.request_queue: RequestQueue | None = None  # queued.max.requests
        # cluster mode (set by the network worker): the leadership area, the line to the cluster
        # worker (its presence picks the cluster column of handlers.ROUTES) and the inter-broker
        # APIs; None otherwise
        self.leaders: LeadershipArea | None = None
        self.leader_quota: LeaderQuota | None = None  # the leader side of the replication throttle
        self.cluster_link: ClusterLink | None = None
        self.extra_apis: dict[int, type[ApiMessage]] | None = None
        # where InitProducerId's blocks of ids come from (process/producer_ids.py), chosen once
        self.producer_id_blocks: FetchBlock | None = None

    def leads(self, slot: int) -> bool:
        """Whether this broker leads the partition in ``slot`` (standalone: every partition)."""
        return self.leaders is None or self.leaders.role(slot) == Role.LEADER

    def authenticator(self, listener: str) -> SaslAuthenticator:
        """A new SASL exchange for a connection accepted on ``listener``: its mechanisms, its
        PLAIN users (the listener's JAAS line) and the SCRAM credentials file."""
        cfg = self.config
        enabled = cfg.listener_value(listener, "sasl.enabled.mechanisms")
        if isinstance(enabled, str):
            enabled = [m.strip() for m in enabled.split(",") if m.strip()]
        if self._credentials is None:
            self._credentials = CredentialFile(self.log_dirs[0])
        users = plain_users(cfg.listener_value(listener, "plain.sasl.jaas.config"))
        return SaslAuthenticator(tuple(enabled), lambda: users, self._credentials.lookup,
                                 int(cfg["connections.max.reauth.ms"]))

    def close(self) -> None:
        self.readers.close()
        super().close()
