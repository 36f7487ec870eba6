"""KIP-101 / KIP-279 in two pure functions: the leader's answer to OffsetsForLeaderEpoch, and
where a follower truncates its log from that answer, so that replicas never diverge (instead of
truncating to the high watermark, which loses acknowledged records or keeps divergent ones).

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.errors import ErrorCode
from appliance.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache

__all__ = ["answer_offsets_for_leader_epoch", "follower_truncation_offset"]

# (topic, partition) -> (current leader epoch, LeaderEpochCache, log end offset), or None when
# this broker does not lead the partition.
LeaderLookup = Callable[[str, int], "tuple[int, LeaderEpochCache, int] | None"]


def answer_offsets_for_leader_epoch(request: Any, lookup: LeaderLookup) -> dict[str, Any]:
    """The OffsetsForLeaderEpoch response body (any version 0-3) for a decoded request.

    Per partition: NOT_LEADER_OR_FOLLOWER off the leader; with v2+'s current_leader_epoch,
    FENCED_LEADER_EPOCH when the asker's is older than ours and UNKNOWN_LEADER_EPOCH when newer;
    else the largest epoch <= the requested one and where it ends here."""
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            entry = {"partition": p.partition, "error_code": 0, "leader_epoch": UNDEFINED_EPOCH,
                     "end_offset": UNDEFINED_EPOCH_OFFSET}
            found = lookup(t.topic, p.partition)
            current = getattr(p, "current_leader_epoch", -1)
            if found is None:
                entry["error_code"] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif current != -1 and current < found[0]:
                entry["error_code"] = int(ErrorCode.FENCED_LEADER_EPOCH)
            elif current != -1 and current > found[0]:
                entry["error_code"] = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
            else:
                _, cache, leo = found
                entry["leader_epoch"], entry["end_offset"] = cache.end_offset_for(p.leader_epoch, leo)
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def follower_truncation_offset(local: LeaderEpochCache, local_leo: int, local_hw: int,
                               asked_epoch: int, leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower truncates after asking the leader about ``asked_epoch`` (its latest).

    - leader knows no such epoch (UNDEFINED): fall back to the high watermark (Kafka's rule for
      a leader without epochs);
    - leader answered the epoch we asked: truncate to min(its end offset, our log end);
    - leader answered an older epoch (it never had ours; KIP-279): truncate to where *that*
      epoch ends on both sides, the smaller of the two.
    """
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(local_hw, local_leo)
    if leader_epoch == asked_epoch:
        return min(leader_end_offset, local_leo)
    _, ours = local.end_offset_for(leader_epoch, local_leo)
    if ours == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end_offset, local_leo)
    return min(leader_end_offset, ours, local_leo)
