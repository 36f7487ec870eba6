"""Group members spoken in raw protocol (appliance.client.connection) for the tests that need
to do what no client library does: stop heartbeating, send bad input, hold a stale generation."""

from __future__ import annotations

import struct
import time
from typing import Any

from appliance.client.connection import BrokerConnection
from appliance.coordinator.consumer_protocol import decode_assignment, encode_assignment

__all__ = ["connect", "find_coordinator", "subscription", "RawMember", "describe", "encode_assignment",
           "decode_assignment", "wait_for"]


def connect(port: int, timeout: float = 15.0) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", port, timeout=timeout, client_id="raw-member")


def find_coordinator(conn: BrokerConnection, group: str) -> Any:
    """FindCoordinator until it answers (the first one creates __consumer_offsets)."""
    deadline = time.monotonic() + 15
    while True:
        r = conn.request(10, {"key": group, "key_type": 0}, version=1)
        if r.error_code == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0: int16 version, [string topic], bytes user_data."""
    out = bytearray(struct.pack(">hi", 0, len(topics)))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    return bytes(out + struct.pack(">i", len(user_data)) + user_data)


def describe(conn: BrokerConnection, group: str) -> Any:
    return conn.request(15, {"groups": [group], "include_authorized_operations": False}).groups[0]


def wait_for(pred, timeout: float, what: str, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class RawMember:
    """One member of a 'consumer' group driven request by request."""

    def __init__(self, port: int, group: str, topics: list[str], session_timeout_ms: int = 1000,
                 rebalance_timeout_ms: int = 10000, protocol: str = "range") -> None:
        self.conn = connect(port)
        self.group = group
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol = protocol
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list[Any] = []
        self.assignment: list[tuple[str, list[int]]] = []
        find_coordinator(self.conn, group)

    def join_body(self, **over: Any) -> dict:
        body = {"group_id": self.group, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": self.protocol, "metadata": subscription(self.topics)}]}
        body.update(over)
        return body

    def join(self) -> Any:
        """JoinGroup v5 (answering MEMBER_ID_REQUIRED with the id it hands out). Raises
        AssertionError on any other error."""
        r = self.conn.request(11, self.join_body(), version=5)
        if r.error_code == 79:  # MEMBER_ID_REQUIRED
            self.member_id = r.member_id
            r = self.conn.request(11, self.join_body(), version=5)
        assert r.error_code == 0, f"join: error {r.error_code}"
        self.member_id, self.generation, self.leader = r.member_id, r.generation_id, r.leader
        self.members = list(r.members)
        return r

    def sync(self, assignments: dict[str, list[tuple[str, list[int]]]] | None = None) -> Any:
        """SyncGroup v3; as leader, ``assignments`` (member id -> [(topic, [partitions])])."""
        given = [{"member_id": mid, "assignment": encode_assignment(a)}
                 for mid, a in (assignments or {}).items()]
        r = self.conn.request(14, {"group_id": self.group, "generation_id": self.generation,
                                   "member_id": self.member_id, "group_instance_id": None,
                                   "assignments": given}, version=3)
        assert r.error_code == 0, f"sync: error {r.error_code}"
        self.assignment = decode_assignment(r.assignment) if r.assignment else []
        return r

    def heartbeat(self) -> int:
        return self.conn.request(12, {"group_id": self.group, "generation_id": self.generation,
                                      "member_id": self.member_id},
                                 version=1).error_code

    def leave(self) -> int:
        return self.conn.request(13, {"group_id": self.group, "member_id": self.member_id},
                                 version=1).error_code

    def commit(self, offsets: dict[tuple[str, int], int], metadata: str = "",
               generation: int | None = None, member_id: str | None = None) -> dict[tuple[str, int], int]:
        """OffsetCommit v3 -> {(topic, partition): error_code}."""
        by_topic: dict[str, list] = {}
        for (t, p), off in offsets.items():
            by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                               "committed_metadata": metadata})
        r = self.conn.request(8, {
            "group_id": self.group,
            "generation_id_or_member_epoch": self.generation if generation is None else generation,
            "member_id": self.member_id if member_id is None else member_id,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, version=3)
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

    def fetch(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for t, p in parts:
            by_topic.setdefault(t, []).append(p)
        r = self.conn.request(9, {"group_id": self.group, "topics": [
            {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}, version=3)
        assert r.error_code == 0
        return {(t.name, p.partition_index): p.committed_offset for t in r.topics for p in t.partitions}

    def close(self) -> None:
        """Drop the connection without LeaveGroup (the member stays until its session expires)."""
        self.conn.close()
