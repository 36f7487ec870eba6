"""Where a ZooKeeper consumer's offsets live (offsets.storage, dual.commit.enabled):

- ``zookeeper``: ``/consumers/<group>/offsets/<topic>/<partition>`` holds the next offset to read
  as decimal text (persistent znode);
- ``kafka``: OffsetCommit / OffsetFetch to the group's coordinator (found with FindCoordinator),
  through :class:`appliance.client.membership.GroupMembership` with no generation (the broker
  knows nothing of ZooKeeper groups: the commit is a "simple" one, generation -1);
- ``kafka`` + dual commit: every commit goes to both, and a fetch takes the larger of the two,
  which is how the 0.8.2 documentation migrates a group from ZooKeeper to Kafka without a
  re-read.

Thread-safety: commits come from the auto-commit thread, the rebalance and shutdown; a lock
keeps them one at a time (the last-written cache is shared).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from appliance.client.cluster import Cluster
from appliance.client.fetching import TopicPartition
from appliance.client.membership import GroupMembership
from appliance.client.zk_consumer.znodes import offset_path
from appliance.errors import KafkaError

__all__ = ["OffsetStore", "read_zk_offset"]

log = logging.getLogger("appliance.client.zk_consumer")


def read_zk_offset(zk: KazooClient, group: str, topic: str, partition: int) -> int | None:
    """The offset in ``/consumers/<group>/offsets/<topic>/<partition>``; None if none (or not a
    number: logged)."""
    path = offset_path(group, topic, partition)
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    text = data.decode(errors="replace").strip()
    if not text.lstrip("-").isdigit():
        log.warning("%s holds %r, not an offset; ignored", path, text)
        return None
    return int(text) if int(text) >= 0 else None  # -1: "none", as some 0.8 tools wrote it


class OffsetStore:
    """A group's committed offsets, where offsets.storage and dual.commit.enabled put them."""

    def __init__(self, zk: KazooClient, cluster: Cluster, group: str, c: dict[str, Any]) -> None:
        self.zk, self.group = zk, group
        self.storage = c["offsets.storage"]
        self.dual = self.storage == "kafka" and c["dual.commit.enabled"]
        self.backoff = c["offsets.channel.backoff.ms"] / 1000
        self._kafka = GroupMembership(cluster, group, [], session_timeout_ms=c["zookeeper.session.timeout.ms"],
                                      rebalance_timeout_ms=c["zookeeper.session.timeout.ms"],
                                      heartbeat_interval_ms=1000, retry_backoff_ms=c["offsets.channel.backoff.ms"])
        self._written: dict[TopicPartition, int] = {}  # what the last commit stored (skip unchanged)
        self._lock = threading.Lock()

    @property
    def to_zookeeper(self) -> bool:
        return self.storage == "zookeeper" or self.dual

    @property
    def to_kafka(self) -> bool:
        return self.storage == "kafka"

    # commit ---------------------------------------------------------------------------------
    def commit(self, offsets: dict[TopicPartition, int], retries: int = 0) -> None:
        """Store ``offsets`` (next offset to read) where the configuration says; unchanged
        offsets are not written again. ``retries``: extra attempts of a failed Kafka commit
        (shutdown uses offsets.commit.max.retries). Raises KafkaError when Kafka refuses."""
        with self._lock:
            changed = {tp: o for tp, o in offsets.items() if self._written.get(tp) != o}
            if not changed:
                return
            if self.to_kafka:
                for attempt in range(retries + 1):
                    try:
                        self._kafka.commit(changed, in_group=False)
                        break
                    except KafkaError as e:
                        if attempt == retries:
                            raise
                        log.info("offset commit to Kafka failed (%s); retrying", e)
                        time.sleep(self.backoff)
            if self.to_zookeeper:
                for tp, off in changed.items():
                    self._write_zk(tp, off)
            self._written.update(changed)

    def _write_zk(self, tp: TopicPartition, offset: int) -> None:
        path = offset_path(self.group, tp.topic, tp.partition)
        value = str(offset).encode()
        try:
            self.zk.set(path, value)
        except NoNodeError:
            try:
                self.zk.create(path, value, makepath=True)
            except NodeExistsError:  # another member wrote it meanwhile (after a rebalance)
                self.zk.set(path, value)

    # fetch ----------------------------------------------------------------------------------
    def fetch(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The committed offsets (None where there is none). With dual commit the larger of
        ZooKeeper's and Kafka's. Raises KafkaError when the coordinator cannot be asked."""
        if not tps:
            return {}
        out: dict[TopicPartition, int | None] = dict.fromkeys(tps)
        if self.storage == "zookeeper" or self.dual:
            out.update(self.fetch_zookeeper(tps))
        if self.to_kafka:
            for tp, off in self.fetch_kafka(tps).items():
                if tp in out and off is not None and (out[tp] is None or off > out[tp]):
                    out[tp] = off
        with self._lock:
            self._written.update({tp: o for tp, o in out.items() if o is not None and not self.dual})
        return out

    def fetch_zookeeper(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        return {tp: read_zk_offset(self.zk, self.group, tp.topic, tp.partition) for tp in tps}

    def fetch_kafka(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """OffsetFetch from the group's coordinator. Raises KafkaError."""
        return self._kafka.fetch_committed(tps) if tps else {}
