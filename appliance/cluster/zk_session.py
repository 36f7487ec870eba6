"""Open a kazoo session from Kafka's settings: zookeeper.connect (with its chroot),
zookeeper.session.timeout.ms, zookeeper.connection.timeout.ms and zookeeper.set.acl, logged in
with the ZooKeeper login of KAFKA_OPTS' JAAS file when there is one (``security/jaas_file.py``,
ACLs: ``cluster/zk_acls.py``).

Raises :class:`ZooKeeperUnreachable` when no server answers within the connection timeout, after
logging each retry; the cluster worker turns it into exit code 3 (cannot boot, no restart loop).
The chroot is created when missing, as Kafka does, then every path of the session is under it.
"""

from __future__ import annotations

import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.retry import KazooRetry

from appliance.cluster.zk_acls import AclKazooClient, auth_data
from appliance.cluster.zk_paths import split_chroot
from appliance.security.jaas_file import ZkLogin, broker_zookeeper_login, zookeeper_login

__all__ = ["ZK_OUT_OF_REACH", "ZooKeeperUnreachable", "ZkSettings", "open_session"]

# what a ZooKeeper call raises while the ensemble is out of reach: expected in a cluster, so a
# task that retries logs it without a traceback
ZK_OUT_OF_REACH = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)

log = logging.getLogger(__name__)

# How often the start-up wait logs "still trying": often enough to be seen, rare enough not to flood.
_PROGRESS_EVERY_S = 2.0


class ZooKeeperUnreachable(Exception):
    """No ZooKeeper server answered within zookeeper.connection.timeout.ms."""


class ZkSettings:
    """The ZooKeeper settings of server.properties, checked, and the login to present.

    ``set_acl``: create znodes with Kafka's ACLs (a broker: zookeeper.set.acl; a tool: whenever
    it has a login, as Kafka's tools do). It needs a ``login``."""

    __slots__ = ("connect", "session_timeout_ms", "connection_timeout_ms", "login", "set_acl")

    def __init__(self, connect: str, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None, login: ZkLogin | None = None,
                 set_acl: bool = False) -> None:
        if not connect or not split_chroot(connect)[0]:
            raise ValueError(f"zookeeper.connect: no host in {connect!r}")
        if session_timeout_ms <= 0:
            raise ValueError(f"zookeeper.session.timeout.ms must be positive, got {session_timeout_ms}")
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = (connection_timeout_ms if connection_timeout_ms is not None
                                      else session_timeout_ms)
        if set_acl and login is None:
            raise ValueError("ZooKeeper ACLs need a ZooKeeper login")
        self.login = login
        self.set_acl = set_acl

    @classmethod
    def from_config(cls, config: object) -> ZkSettings:
        """From an :class:`appliance.config.Config` (``config["zookeeper.connect"]`` ...) and
        the environment's JAAS file. Raises ValueError (JaasError) naming what is wrong."""
        return cls(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],  # type: ignore[index]
                   config.zookeeper_connection_timeout_ms,  # type: ignore[attr-defined]
                   broker_zookeeper_login(bool(config["zookeeper.set.acl"])),  # type: ignore[index]
                   bool(config["zookeeper.set.acl"]))  # type: ignore[index]

    @classmethod
    def for_tool(cls, connect: str, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None) -> ZkSettings:
        """A tool's session: logged in when KAFKA_OPTS names a JAAS file, and then creating
        znodes with ACLs (Kafka's tools: JaasUtils.isZkSaslEnabled)."""
        login = zookeeper_login()
        return cls(connect, session_timeout_ms, connection_timeout_ms, login, login is not None)


def open_session(settings: ZkSettings) -> KazooClient:
    """A started kazoo client, rooted at the chroot of ``settings.connect`` (created if missing).

    kazoo reconnects by itself after a connection loss; the session survives as long as a server
    is reached again within the session timeout. Expiry is the caller's to handle (a listener).

    Raises:
        ZooKeeperUnreachable: nothing answered within ``settings.connection_timeout_ms``.
    """
    hosts, chroot = split_chroot(settings.connect)
    client = (AclKazooClient if settings.set_acl else KazooClient)(
        hosts=hosts, timeout=settings.session_timeout_ms / 1000.0, auth_data=auth_data(settings.login),
        # reconnect forever, at most one second apart: the session timeout decides when it is over
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0,
                                 deadline=settings.session_timeout_ms / 1000.0))
    event = client.start_async()
    deadline = time.monotonic() + settings.connection_timeout_ms / 1000.0
    while not event.wait(min(_PROGRESS_EVERY_S, max(0.0, deadline - time.monotonic()))):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        log.warning("ZooKeeper at %s not reachable yet; retrying for %.0f s more "
                    "(zookeeper.connection.timeout.ms)", hosts, left)
    if not client.connected:
        client.stop()
        client.close()
        raise ZooKeeperUnreachable(
            f"ZooKeeper at {hosts} did not answer within {settings.connection_timeout_ms} ms "
            "(zookeeper.connection.timeout.ms)")
    if chroot:
        client.ensure_path(chroot)
        client.chroot = chroot  # from here on every path is relative to the chroot
    return client
