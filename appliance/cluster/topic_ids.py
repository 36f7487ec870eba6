"""A cluster-mode broker's view of the topic ids (KIP-516): the ``topic_id`` of each
``/brokers/topics/<t>`` znode, which the creator or the controller writes once. Every broker
reads the same znode, so every broker answers the same id.

Cached per topic until the znode changes or goes (a ZooKeeper watch drops the entry), so a topic
deleted and created again under its name is read afresh. The reads block: call :meth:`get` from
an executor, or :meth:`ids` from the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

from appliance.cluster import zk_paths as zp
from appliance.cluster.zk_store import ZkStore

__all__ = ["TopicIds"]


class TopicIds:
    def __init__(self, store: ZkStore) -> None:
        self.store = store
        self._ids: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, topic: str) -> bytes | None:
        """The topic's id, or None (no such topic, or the controller has not given it one)."""
        with self._lock:
            tid = self._ids.get(topic)
        if tid is not None:
            return tid
        a = self.store.assignment(topic, watch=self._changed)
        if a is None or a.topic_id is None:
            return None
        with self._lock:
            self._ids[topic] = a.topic_id
        return a.topic_id

    async def ids(self, topics: Iterable[str]) -> dict[str, bytes]:
        """topic -> id for those of ``topics`` that have one (ZooKeeper read for the misses)."""
        out = {}
        loop = asyncio.get_running_loop()
        for t in topics:
            with self._lock:
                tid = self._ids.get(t)
            if tid is None:
                tid = await loop.run_in_executor(None, self.get, t)
            if tid is not None:
                out[t] = tid
        return out

    def _changed(self, event: object) -> None:
        # one bound method for every watch: kazoo keeps a watcher once however often it is set
        path = getattr(event, "path", "") or ""
        prefix = zp.BROKER_TOPICS + "/"
        if path.startswith(prefix):
            with self._lock:
                self._ids.pop(path[len(prefix):], None)
