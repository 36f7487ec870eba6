"""A ZooKeeper consumer's configuration: a 0.8 ``consumer.properties`` (a dict, or the path of a
properties file) checked against :data:`appliance.client.config.ZK_CONSUMER_KEYS`, and its
ZooKeeper session opened from it.

Raises InvalidConfigError naming the key and value for unknown keys and bad values.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from appliance.client import config as cfg
from appliance.client.zk_consumer.errors import ZooKeeperUnreachable
from appliance.errors import InvalidConfigError
from appliance.security.jaas_file import zookeeper_login

__all__ = ["load_config", "open_zookeeper", "split_chroot"]

log = logging.getLogger("appliance.client.zk_consumer")


def load_config(config: Mapping[str, Any] | str | Path, **overrides: Any) -> dict[str, Any]:
    """The resolved settings (every key of ZK_CONSUMER_KEYS present). ``overrides`` are keys
    with underscores for dots, applied over ``config``.

    Raises InvalidConfigError (unknown key, bad value, group.id or zookeeper.connect missing;
    a config with only bootstrap.servers is told it belongs to the new consumer)."""
    if isinstance(config, (str, Path)):
        try:
            given: dict[str, Any] = cfg.load_properties(str(config))
        except OSError as e:
            raise InvalidConfigError(f"consumer config {str(config)!r}: {e.strerror or e}") from None
    else:
        given = dict(config)
    given.update({k.replace("_", "."): v for k, v in overrides.items()})
    if given.get("bootstrap.servers") and not given.get("zookeeper.connect"):
        raise InvalidConfigError(f"config bootstrap.servers={given['bootstrap.servers']!r}: the ZooKeeper "
                                 "consumer needs zookeeper.connect (bootstrap.servers is the new consumer's, "
                                 "appliance.client.Consumer)")
    c = cfg.resolve(cfg.ZK_CONSUMER_KEYS, given, {})
    if c["bootstrap.servers"]:
        # the 0.8 documentation: the high-level consumer finds brokers through ZooKeeper
        log.warning("config has both zookeeper.connect and bootstrap.servers: zookeeper.connect takes "
                    "precedence for the ZooKeeper consumer; bootstrap.servers=%s is not used",
                    c["bootstrap.servers"])
    if c["client.id"] is None:
        c["client.id"] = c["group.id"]  # Kafka's default: the group id value
    c["auto.offset.reset"] = {"earliest": "smallest", "latest": "largest"}.get(c["auto.offset.reset"],
                                                                              c["auto.offset.reset"])
    return c


def split_chroot(connect: str) -> tuple[str, str]:
    """"h1:p1,h2:p2/chroot" -> ("h1:p1,h2:p2", "/chroot") (Kafka's rule: from the first '/')."""
    i = connect.find("/")
    return (connect, "") if i < 0 else (connect[:i], connect[i:].rstrip("/"))


def open_zookeeper(connect: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    """A started kazoo client rooted at ``connect``'s chroot.

    Raises ZooKeeperUnreachable naming the hosts when no server answers within
    ``connection_timeout_ms`` (the client is stopped first: no thread is left retrying)."""
    hosts, chroot = split_chroot(connect)
    if not hosts:
        raise InvalidConfigError(f"config zookeeper.connect={connect!r}: no host")
    login = zookeeper_login()  # KAFKA_OPTS' JAAS file, as the brokers and tools log in
    client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                         auth_data=None if login is None else [("digest", f"{login.username}:{login.password}")],
                         connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
                         command_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0,
                                                  deadline=session_timeout_ms / 1000))
    started = time.monotonic()
    event = client.start_async()
    event.wait(connection_timeout_ms / 1000)
    if not client.connected:
        client.stop()
        client.close()
        raise ZooKeeperUnreachable(f"ZooKeeper at {hosts} did not answer within {connection_timeout_ms} ms "
                                   f"(zookeeper.connection.timeout.ms); waited "
                                   f"{time.monotonic() - started:.1f} s")
    if chroot:
        client.ensure_path(chroot)
        client.chroot = chroot
    return client
