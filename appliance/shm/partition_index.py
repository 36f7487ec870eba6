"""A network worker's cached view of which table slot holds which (topic, partition).

The shared table bumps a generation counter whenever a slot is allocated, released or changes
state; the index rebuilds itself only then, so lookups on the produce/fetch path are dict hits.
"""

from __future__ import annotations

from appliance.shm.layout import SlotState
from appliance.shm.partition_table import PartitionInfo, PartitionTable

__all__ = ["PartitionIndex"]


class PartitionIndex:
    def __init__(self, table: PartitionTable) -> None:
        self.table = table
        self._generation = -1
        self._topics: dict[str, list[PartitionInfo]] = {}

    def refresh(self) -> None:
        gen = self.table.generation
        if gen == self._generation:
            return
        topics: dict[str, list[PartitionInfo]] = {}
        for info in self.table.slots():
            if info.state == SlotState.FREE:
                continue
            topics.setdefault(info.topic, []).append(info)
        for parts in topics.values():
            parts.sort(key=lambda i: i.partition)
        self._topics = topics
        self._generation = gen

    def topics(self) -> dict[str, list[PartitionInfo]]:
        self.refresh()
        return self._topics

    def partitions(self, topic: str) -> list[PartitionInfo] | None:
        self.refresh()
        return self._topics.get(topic)

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
