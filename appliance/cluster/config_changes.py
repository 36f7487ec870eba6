"""Dynamic configs in a cluster: ZooKeeper holds them, every broker applies them (Kafka's
DynamicConfigManager over ZkNodeChangeNotificationListener, ZooKeeper era).

A change is written as Kafka writes it (``AdminZkClient.changeConfigs``): the entity's znode
(``/config/topics/<t>``, ``/config/brokers/<id>`` or ``/config/brokers/<default>``), then a
sequential ``/config/changes/config_change_<seq>`` naming the entity. Every broker's cluster
worker watches ``/config/changes`` and, for each notification newer than the last it handled,
reads the entity and applies it here:

- a topic: its overrides (less the replication-throttle lists, which are the fetcher's and the
  leader's, not the log's) go to each disk worker holding a partition of it (``ALTER_CONFIG``),
  only when they differ from what that disk saved;
- this broker's id or ``<default>``: the dynamic broker keys of both levels are mirrored into the
  broker's ``dynamic-broker-configs.json`` (what DescribeConfigs and the disk workers read), and
  every disk worker reloads it (``ALTER_BROKER_CONFIG``). Other keys in those znodes (the
  throttle rates) are left to :mod:`replication_throttle`.

At start the listener applies every entity first (a broker that was down during a change reads
``/config`` then), and only then the notifications that come after. Notifications older than
15 minutes are deleted (Kafka's changeExpirationMs), by any broker.

Writes from this broker's clients (AlterConfigs, IncrementalAlterConfigs, validated by the network
worker) come through :meth:`ConfigChanges.write`, which writes ZooKeeper and applies the change
here before answering, so a DescribeConfigs right after it on the same broker sees it.

Thread-safety: one asyncio loop (the cluster worker's); ZooKeeper calls run in its executor, the
kazoo watch only wakes the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

from appliance import dynamic_config
from appliance.cluster.replication_throttle import REPLICATION_KEYS
from appliance.cluster.zk_paths import BROKER_DEFAULT, CONFIG_CHANGES
from appliance.cluster.zk_session import ZK_OUT_OF_REACH
from appliance.cluster.zk_store import ZkStore
from appliance.config import ConfigError, TopicConfig
from appliance.errors import ErrorCode
from appliance.security.credentials import SCRAM_MECHANISMS, CredentialFile
from appliance.shm.layout import MsgType
from appliance.storage.log import partition_dir_name
from appliance.storage.log_dir import read_topic_properties

__all__ = ["ConfigChanges", "CHANGE_EXPIRATION_MS", "TOPICS", "BROKERS"]

log = logging.getLogger("appliance.cluster.config")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: a notification this old has been seen by all
_PURGE_INTERVAL_MS = 60_000  # the expired notifications are looked for at most this often
TOPICS, BROKERS, USERS = "topics", "brokers", "users"


def _seq(name: str) -> int:
    tail = name.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else -1


class ConfigChanges:
    def __init__(self, ctx: Any, store: ZkStore, broker_id: int) -> None:
        self.ctx = ctx
        self.store = store
        self.broker_id = broker_id
        self.last_seq = -1
        self._wake = asyncio.Event()
        self._purged_ms = 0
        self.credentials = CredentialFile(ctx.log_dirs[0])  # what the network workers read

    async def _zk(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- the listener -------------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        await self._zk(self.store.client.ensure_path, CONFIG_CHANGES)
        names = await self._zk(self.store.config_changes)
        self.last_seq = max((_seq(n) for n in names), default=-1)
        await self.apply_all()  # what changed while this broker was down
        # a watch's set-up reads ZooKeeper (with kazoo's retries): not on the event loop
        await self._zk(self.store.client.ChildrenWatch, CONFIG_CHANGES,
                       lambda _c: loop.call_soon_threadsafe(self._wake.set))
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.process(await self._zk(self.store.config_changes))
            except asyncio.CancelledError:
                raise
            except ZK_OUT_OF_REACH as e:
                log.warning("applying config changes failed (%s); next change retries", type(e).__name__)
            except Exception:
                log.exception("applying config changes failed; next change retries")

    async def process(self, names: list[str]) -> None:
        """Apply the notifications newer than the last handled, oldest first; then, at most once
        a minute, delete the expired ones (reading each old one's creation time)."""
        for name in names:
            seq = _seq(name)
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            entry = await self._zk(self.store.config_change, name)
            if entry is None:
                log.warning("config change %s unreadable or gone: skipped", name)
            else:
                await self._apply_entity(entry[0], entry[1])
        now_ms = int(time.time() * 1000)
        if now_ms - self._purged_ms < _PURGE_INTERVAL_MS:
            return
        self._purged_ms = now_ms
        for name in names:
            entry = await self._zk(self.store.config_change, name)
            if entry is not None and now_ms - entry[2] > CHANGE_EXPIRATION_MS:
                await self._zk(self.store.delete_config_change, name)

    async def _apply_entity(self, kind: str, name: str) -> None:
        if kind == TOPICS:
            await self.apply_topic(name)
        elif kind == BROKERS and name in (str(self.broker_id), BROKER_DEFAULT):
            await self.apply_broker_configs()
        elif kind == USERS:
            await self.apply_user(name)

    async def apply_all(self) -> None:
        await self.apply_broker_configs()
        await self.apply_users()
        for topic in list(self.ctx.index.topics()):
            await self.apply_topic(topic)

    # -- applying -----------------------------------------------------------------------------
    async def apply_user(self, user: str) -> None:
        """A user's SCRAM credentials from ZooKeeper into the credentials file the network
        workers authenticate against."""
        config = await self._zk(self.store.user_config, user)
        creds = {m: c for m, c in config.items() if m in SCRAM_MECHANISMS}
        with self.credentials.locked() as users:
            users[user] = creds
        log.info("user %s: SCRAM credentials for %s", user, ", ".join(sorted(creds)) or "none")

    async def apply_users(self) -> None:
        """Every user of ZooKeeper into the credentials file, replacing what it held (a user
        deleted while this broker was away is gone here too)."""
        names = await self._zk(self.store.user_names)
        found = {}
        for name in names:
            config = await self._zk(self.store.user_config, name)
            creds = {m: c for m, c in config.items() if m in SCRAM_MECHANISMS}
            if creds:
                found[name] = creds
        self.credentials.replace(found)

    async def apply_topic(self, topic: str) -> None:
        """ZooKeeper's overrides of ``topic`` to every disk worker holding it here whose saved
        overrides differ. A value ZooKeeper holds that we cannot parse is logged and skipped."""
        parts = self.ctx.index.partitions(topic)
        if not parts:
            return
        wanted = {k: v for k, v in (await self._zk(self.store.topic_config, topic)).items()
                  if k not in REPLICATION_KEYS}
        try:
            props = TopicConfig.from_overrides(self.ctx.config, wanted).to_properties()
        except ConfigError as e:
            log.error("topic %s: the config in ZooKeeper is not applied: %s", topic, e)
            return
        by_disk = {}
        for info in parts:
            by_disk.setdefault(info.disk, info)
        for disk, info in by_disk.items():
            path = os.path.join(self.ctx.log_dirs[disk], partition_dir_name(topic, info.partition))
            if read_topic_properties(path) == props:
                continue
            comp = await self.ctx.disks.submit(disk, MsgType.ALTER_CONFIG, info.slot,
                                               json.dumps({"configs": wanted}).encode())
            if comp.error_code:
                log.error("topic %s: disk %d could not apply its config: %s", topic, disk,
                          ErrorCode(comp.error_code).name)
            else:
                log.info("topic %s: config %s applied", topic, wanted)

    async def apply_broker_configs(self) -> None:
        """Mirror the dynamic broker keys of ``/config/brokers/<id>`` and ``<default>`` into the
        broker's file (a level with no znode keeps what the file has) and have every disk worker
        reload it when it changed."""
        mine = await self._zk(self.store.broker_config_or_none, self.broker_id)
        default = await self._zk(self.store.broker_config_or_none, BROKER_DEFAULT)
        changed = await self._zk(self._mirror, mine, default)
        if changed:
            done = await asyncio.gather(*(self.ctx.disks.submit(d, MsgType.ALTER_BROKER_CONFIG, -1, b"")
                                          for d in range(len(self.ctx.log_dirs))))
            for c in done:
                if c.error_code:
                    log.error("a disk worker could not reload the broker configs: %s",
                              ErrorCode(c.error_code).name)

    def _mirror(self, mine: dict[str, str] | None, default: dict[str, str] | None) -> bool:
        config = self.ctx.config
        with dynamic_config.locked(config):
            try:
                dyn = dynamic_config.load(config)
            except ConfigError as e:
                log.error("%s", e)
                return False
            new = dynamic_config.DynamicConfigs(dict(dyn.broker), dict(dyn.default))
            for level, values in (("broker", mine), ("default", default)):
                if values is None:
                    continue
                values = {k: v for k, v in values.items() if k in dynamic_config.DYNAMIC_BROKER_KEYS}
                try:
                    dynamic_config.validate(values)
                except ConfigError as e:
                    log.error("dynamic broker configs (%s) in ZooKeeper not applied: %s", level, e)
                    continue
                setattr(new, level, values)
            if new == dyn:
                return False
            dynamic_config.save(config, new)
            log.info("dynamic broker configs now %s (broker) %s (default)", new.broker, new.default)
            return True

    # -- this broker's DescribeConfigs / AlterConfigs / IncrementalAlterConfigs --------------
    async def read_topic(self, topic: str) -> dict[str, str] | None:
        """The topic's log overrides in ZooKeeper (None: no such topic), so a broker holding no
        replica of it answers too."""
        if await self._zk(self.store.assignment, topic) is None:
            return None
        return {k: v for k, v in (await self._zk(self.store.topic_config, topic)).items()
                if k not in REPLICATION_KEYS}

    async def write(self, kind: str, name: str, config: dict[str, str]) -> tuple[int, str | None]:
        """Make ``config`` the entity's set (validated by the caller): the keys that are not
        the caller's to set (throttle lists of a topic; throttle rates and other keys of a
        broker) are kept from ZooKeeper. Written, announced, applied here, then answered."""
        try:
            if kind == TOPICS:
                if await self._zk(self.store.assignment, name) is None:
                    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
                current = await self._zk(self.store.topic_config, name)
                kept = {k: v for k, v in current.items() if k in REPLICATION_KEYS}
                await self._zk(self.store.set_topic_config, name, {**kept, **config})
                await self.apply_topic(name)
            elif kind == BROKERS:
                current = await self._zk(self.store.broker_config, name)
                kept = {k: v for k, v in current.items() if k not in dynamic_config.DYNAMIC_BROKER_KEYS}
                await self._zk(self.store.set_broker_config, name, {**kept, **config})
                await self.apply_broker_configs()
            else:
                return ErrorCode.INVALID_REQUEST, f"Unsupported config entity {kind}"
        except Exception as e:  # ZooKeeper away: nothing was announced, the client may retry
            log.warning("writing the config of %s/%s: %s", kind, name, e)
            return ErrorCode.UNKNOWN_SERVER_ERROR, f"could not write the config to ZooKeeper: {e}"
        return ErrorCode.NONE, None
