"""One consumer group: its members and its state machine.

The states and the only legal moves between them (Kafka's GroupState / GroupMetadata):

    Empty ───────────────▶ PreparingRebalance ◀──────────────┐
      ▲                     │        ▲                        │
      │                     ▼        │                        │
      └──── (no members) ── CompletingRebalance ──▶ Stable ───┘
    any state ──▶ Dead (group deleted, or its offsets expired)

- Empty: no members (offsets may remain).
- PreparingRebalance: waiting for every member to (re)join, up to the rebalance timeout (or the
  initial rebalance delay for a group that was empty).
- CompletingRebalance: generation chosen, waiting for the leader's SyncGroup with assignments.
- Stable: assignments handed out; members heartbeat.
- Dead: removed; its id may be reused by a new group.

A move not in :data:`TRANSITIONS` is a bug and raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GroupState", "TRANSITIONS", "Member", "Group", "IllegalTransition"]


class GroupState:
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# state -> the states it may move to
TRANSITIONS: dict[str, frozenset[str]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.DEAD}),
    _S.STABLE: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.DEAD: frozenset({_S.DEAD}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    join_token: Any = None   # a JoinGroup waiting for the rebalance to complete
    join_version: int = 0
    sync_token: Any = None   # a SyncGroup waiting for the leader's assignments

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class Group:
    group_id: str
    state: str = GroupState.EMPTY
    protocol_type: str = ""
    protocol: str | None = None
    generation: int = 0
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_member_ids: dict[str, int] = field(default_factory=dict)  # id -> expiry (JoinGroup v4+)
    rebalance_deadline_ms: int = 0
    initial_delay: bool = False        # in Kafka's InitialDelayedJoin phase
    initial_started_ms: int = 0
    state_timestamp_ms: int = 0
    offsets: dict[tuple[str, int], Any] = field(default_factory=dict)  # -> OffsetValue

    def transition(self, to: str, now_ms: int) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"group {self.group_id}: {self.state} -> {to}")
        self.state = to
        self.state_timestamp_ms = now_ms

    def is_(self, state: str) -> bool:
        return self.state == state

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        """Can a member with these protocols join? (same type, one protocol in common)."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        common = set(names)
        for m in self.members.values():
            common &= set(m.protocol_names())
        return bool(common)

    def select_protocol(self) -> str:
        """Kafka's vote: among protocols every member supports, each member votes for the first
        of those in its own preference order; the most votes wins (ties: first seen)."""
        candidates = None
        for m in self.members.values():
            names = set(m.protocol_names())
            candidates = names if candidates is None else candidates & names
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name in m.protocol_names():
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(votes, key=lambda n: votes[n])

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return all(m.join_token is not None for m in self.members.values())
