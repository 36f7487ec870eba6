"""Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/KIP-447), held per producer id
until the transaction's marker lands on the group's ``__consumer_offsets`` partition: COMMIT
makes them the group's committed offsets, ABORT drops them (Kafka's
pendingTransactionalOffsetCommits). Plain data, owned by the group coordinator's thread.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.coordinator.offsets_schema import OffsetValue

__all__ = ["PendingTxnOffsets"]

TopicPartition = tuple[str, int]


class PendingTxnOffsets:
    def __init__(self) -> None:
        # producer id -> group -> (topic, partition) -> the offset it committed
        self.by_producer: dict[int, dict[str, dict[TopicPartition, OffsetValue]]] = {}
        # producer id -> the newest epoch that committed offsets with it (an older one is fenced)
        self.epochs: dict[int, int] = {}

    def stale(self, producer_id: int, epoch: int) -> bool:
        """True when a newer epoch of ``producer_id`` committed offsets already."""
        return epoch < self.epochs.get(producer_id, -1)

    def add(self, producer_id: int, epoch: int, group: str, offsets: dict[TopicPartition, OffsetValue]) -> None:
        self.epochs[producer_id] = max(epoch, self.epochs.get(producer_id, -1))
        self.by_producer.setdefault(producer_id, {}).setdefault(group, {}).update(offsets)

    def complete(self, producer_id: int, here: Callable[[str], bool]) -> dict[str, dict[TopicPartition, OffsetValue]]:
        """Take the offsets ``producer_id`` holds for the groups ``here`` says are on the
        partition the marker landed on (a transaction may span several offsets partitions)."""
        groups = self.by_producer.get(producer_id)
        if not groups:
            return {}
        taken = {g: groups.pop(g) for g in [g for g in groups if here(g)]}
        if not groups:
            del self.by_producer[producer_id]
        return taken

    def drop(self, here: Callable[[str], bool]) -> None:
        """Forget the pending offsets of the groups ``here`` selects (their partition unloaded)."""
        for pid in list(self.by_producer):
            self.complete(pid, here)

    def pending(self, group: str) -> set[TopicPartition]:
        """The partitions of ``group`` with an offset waiting for a marker (OffsetFetch with
        require_stable answers UNSTABLE_OFFSET_COMMIT for them, KIP-447)."""
        out: set[TopicPartition] = set()
        for groups in self.by_producer.values():
            out.update(groups.get(group, ()))
        return out
