"""What the tools that take 0.8's ``--zookeeper HOST:PORT[/CHROOT]`` share: a short kazoo
session, and the brokers registered under ``/brokers/ids`` as the address a tool connects to.

Kafka's 0.8 tools wrote their requests straight into ZooKeeper. Ours find the cluster's brokers
there and send the same request through a broker (CreateTopics, IncrementalAlterConfigs, ...),
so a topic created with ``--zookeeper`` is checked and placed exactly as one created with
``--bootstrap-server``. Where the 0.8 tool's znode still means something to our controller
(``/admin/preferred_replica_election``) the tool writes it, as 0.8 did.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.exceptions import NoAuthError

from appliance.cli.main import CliError
from appliance.cluster.broker_connection import registered_endpoints
from appliance.cluster.zk_session import ZkSettings, ZooKeeperUnreachable, open_session
from appliance.cluster.zk_store import ZkStore
from appliance.config import PLAINTEXT
from appliance.security.jaas_file import JaasError

__all__ = ["zookeeper_store", "brokers_in_zookeeper"]


# ZooKeeper's answer to a write on a znode whose ACL does not name this session's login
NOT_AUTHORIZED = ("ZooKeeper refused: not authorized (the znodes carry ACLs, zookeeper.set.acl=true); "
                  "log in as the brokers do: KAFKA_OPTS=-Djava.security.auth.login.config=<JAAS file "
                  "with a Client section>")


@contextmanager
def zookeeper_store(connect: str, timeout: float, verbose: bool = False) -> Iterator[ZkStore]:
    """A ZkStore on a session to ``connect``, closed on exit. Raises CliError (status 2 for a
    malformed string, 1 when no server answers within ``timeout``)."""
    if not verbose:  # kazoo's connection chatter is not the tool's answer
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        logging.getLogger("appliance.cluster").setLevel(logging.ERROR)
    try:
        settings = ZkSettings.for_tool(connect, int(timeout * 1000), int(timeout * 1000))
    except JaasError as e:
        raise CliError(str(e), 2) from e
    except ValueError as e:
        raise CliError(f"--zookeeper: {e}", 2) from e
    try:
        client = open_session(settings)
    except ZooKeeperUnreachable as e:
        raise CliError(str(e)) from e
    try:
        yield ZkStore(client)
    except NoAuthError as e:
        raise CliError(NOT_AUTHORIZED) from e
    finally:
        client.stop()
        client.close()


def brokers_in_zookeeper(connect: str, timeout: float, verbose: bool = False) -> list[tuple[str, int]]:
    """(host, port) of each registered broker's first PLAINTEXT endpoint, by broker id (the
    tools speak plaintext). Raises CliError when no broker is registered there."""
    with zookeeper_store(connect, timeout, verbose) as store:
        brokers = store.brokers()
    out = []
    for _, info in sorted(brokers.items()):
        ep = next((e for e in registered_endpoints(info) if e.security_protocol == PLAINTEXT), None)
        if ep is not None:
            out.append((ep.host or "127.0.0.1", ep.port))
    if not out:
        raise CliError(f"no broker with a PLAINTEXT listener is registered in ZooKeeper at {connect}")
    return out
