"""A network worker's cached view of which table slot holds which (topic, partition).

The shared table bumps a generation counter whenever a slot is allocated, released or changes
state; the index rebuilds itself only then, so lookups on the produce/fetch path are dict hits.
"""

from __future__ import annotations

from appliance.shm.layout import SlotState
from appliance.shm.partition_table import ZERO_TOPIC_ID, PartitionInfo, PartitionTable

__all__ = ["PartitionIndex"]


class PartitionIndex:
    def __init__(self, table: PartitionTable) -> None:
        self.table = table
        self._generation = -1
        self._topics: dict[str, list[PartitionInfo]] = {}
        self._names: dict[bytes, str] = {}  # topic id -> name (KIP-516)

    def refresh(self) -> None:
        gen = self.table.generation
        if gen == self._generation:
            return
        topics: dict[str, list[PartitionInfo]] = {}
        for info in self.table.slots():
            if info.state == SlotState.FREE:
                continue
            topics.setdefault(info.topic, []).append(info)
        names: dict[bytes, str] = {}
        for name, parts in topics.items():
            parts.sort(key=lambda i: i.partition)
            for info in parts:
                if info.topic_id != ZERO_TOPIC_ID:
                    names[info.topic_id] = name
        self._topics = topics
        self._names = names
        self._generation = gen

    def topics(self) -> dict[str, list[PartitionInfo]]:
        self.refresh()
        return self._topics

    def partitions(self, topic: str) -> list[PartitionInfo] | None:
        self.refresh()
        return self._topics.get(topic)

    def topic_id(self, topic: str) -> bytes:
        """The topic's id (the zero UUID while it has none, or when there is no such topic)."""
        for info in self.partitions(topic) or ():
            if info.topic_id != ZERO_TOPIC_ID:
                return info.topic_id
        return ZERO_TOPIC_ID

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with this id, or None."""
        self.refresh()
        return self._names.get(topic_id)

    def lookup(self, topic: str, partition: int) -> PartitionInfo | None:
        """The slot's static facts (slot, disk, state as of the last refresh), or None."""
        parts = self.partitions(topic)
        if not parts:
            return None
        if 0 <= partition < len(parts) and parts[partition].partition == partition:
            return parts[partition]
        for info in parts:
            if info.partition == partition:
                return info
        return None
