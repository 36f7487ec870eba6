"""Follower fetching (KIP-392), the leader's side: which replica a consumer that says its rack
(Fetch v11+ ``rack_id``, the client's ``client.rack``) should read a partition from, with
``replica.selector.class`` set to Kafka's RackAwareReplicaSelector.

Kafka's rule: the leader itself when it is in the client's rack (or the client names none);
otherwise, of the followers in the client's rack that are in the ISR, have the fetch offset and
were caught up within ``replica.lag.time.max.ms``, the one with the largest log end offset;
none such: the leader. The followers' positions are the leadership area's (written by the
leader's disk worker from their fetches); their racks are ``broker-racks.json``'s.

A follower serves a v11+ consumer fetch up to its own high watermark (``handlers/fetch.py``)."""

from __future__ import annotations

import time
from typing import Any

from appliance.storage.broker_racks import BrokerRacks

__all__ = ["RACK_AWARE_SELECTOR", "LEADER_SELECTOR", "SELECTORS", "ReplicaSelector"]

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"  # Kafka's behaviour when unset
SELECTORS = ("", LEADER_SELECTOR, RACK_AWARE_SELECTOR)
NO_REPLICA = -1


class ReplicaSelector:
    def __init__(self, broker_id: int, rack: str, racks: BrokerRacks, lag_time_max_ms: int) -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.racks = racks
        self.lag_time_max_ms = lag_time_max_ms

    @classmethod
    def from_config(cls, config: Any, broker_id: int, first_log_dir: str) -> ReplicaSelector | None:
        """The selector ``replica.selector.class`` names, or None (read from the leader)."""
        if config["replica.selector.class"] != RACK_AWARE_SELECTOR:
            return None
        return cls(broker_id, config["broker.rack"], BrokerRacks(first_log_dir),
                   int(config["replica.lag.time.max.ms"]))

    def preferred(self, client_rack: str, lead: Any, positions: tuple[tuple[int, ...], tuple[int, ...]],
                  fetch_offset: int) -> int:
        """The broker id the consumer should read from instead of this leader, or NO_REPLICA."""
        if not client_rack or client_rack == self.rack:
            return NO_REPLICA
        ends, caught_up = positions
        now_ms = int(time.monotonic() * 1000)
        best, best_end = NO_REPLICA, -1
        for i, r in enumerate(lead.replicas):
            if r == self.broker_id or r not in lead.isr or self.racks.rack_of(r) != client_rack:
                continue
            end = ends[i]
            if end < fetch_offset or now_ms - caught_up[i] > self.lag_time_max_ms:
                continue
            if end > best_end:
                best, best_end = r, end
        return best
