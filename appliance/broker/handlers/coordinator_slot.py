"""Where a coordinator key (a group id, a transactional id) is served: its partition of the
coordinators' topic (``__consumer_offsets``, ``__transaction_state``) and whether this broker may
forward the request there now. One rule for both coordinators, as Kafka's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from appliance.errors import ErrorCode
from appliance.shm.layout import SlotState

if TYPE_CHECKING:
    from appliance.broker.broker_context import BrokerContext

__all__ = ["coordinator_slot"]


def coordinator_slot(ctx: BrokerContext, topic: str, partition_for: Callable[[str, int], int],
                     key: str) -> tuple[Any, int]:
    """(PartitionInfo of ``key``'s partition of ``topic``, error code): NOT_COORDINATOR where
    another broker leads it, COORDINATOR_NOT_AVAILABLE while it is not online (or, standalone,
    the topic not made yet)."""
    parts = ctx.index.partitions(topic)
    if ctx.leaders is not None:
        # cluster mode: this broker holds some replicas of the topic (its partition count is
        # the topic's); the coordinator is the partition's leader, which the disk worker checks
        # again (and loads the partition) before it answers
        if not parts:
            return None, ErrorCode.NOT_COORDINATOR
        info = ctx.index.lookup(topic, partition_for(key, ctx.view.partition_count(topic, parts[0].num_partitions)))
        if info is None or not ctx.leads(info.slot):
            return None, ErrorCode.NOT_COORDINATOR
        if ctx.table.state(info.slot) != SlotState.ONLINE:
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        return info, 0
    if not parts:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    info = ctx.index.lookup(topic, partition_for(key, len(parts)))
    if info is None or ctx.table.state(info.slot) != SlotState.ONLINE:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return info, 0
