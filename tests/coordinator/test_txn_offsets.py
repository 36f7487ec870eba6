"""TxnOffsetCommit in the group coordinator, driven directly: offsets written as a transactional
batch of the producer, pending until the marker (COMMIT: committed, ABORT: dropped), KIP-447
fencing, require_stable, and a reload that replays batches and markers from the log."""

from __future__ import annotations

import pytest

from appliance.broker.disk.coordinator_host import replay
from appliance.coordinator.coordinator import GroupCoordinator
from appliance.errors import ErrorCode
from appliance.records.batch import build_batch, iter_batches
from tests.groups.test_units import Harness, _join_two

E = ErrorCode
PID, EPOCH = 4000, 3


def _commit(h: Harness, offsets: dict[tuple[str, int], int], version: int = 3, pid: int = PID,
            epoch: int = EPOCH, group: str = "g", member: str = "", gen: int = -1,
            instance: str | None = None) -> dict[tuple[str, int], int]:
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o,
                                         "committed_leader_epoch": -1, "committed_metadata": "m"})
    r = h.call(28, version, {"transactional_id": "tx", "group_id": group, "producer_id": pid,
                             "producer_epoch": epoch, "generation_id": gen, "member_id": member,
                             "group_instance_id": instance,
                             "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}


def _fetch(h: Harness, stable: bool = False, group: str = "g") -> dict[tuple[str, int], tuple[int, int]]:
    r = h.call(9, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1]}],
                      "require_stable": stable})
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in r["topics"] for p in t["partitions"]}


def test_pending_until_commit_marker():
    h = Harness()
    assert _commit(h, {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    part = h.coord.partition_for("g")
    (batch,) = h.log[part]
    (_, head), = iter_batches(batch)
    assert head.is_transactional and (head.producer_id, head.producer_epoch) == (PID, EPOCH)
    assert _fetch(h) == {("t", 0): (-1, 0), ("t", 1): (-1, 0)}  # not committed yet
    assert _fetch(h, stable=True) == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT),
                                      ("t", 1): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    h.coord.on_txn_marker(part + 1 if part + 1 < 4 else 0, PID, commit=True)  # another partition's
    assert _fetch(h)[("t", 0)] == (-1, 0)
    h.coord.on_txn_marker(part, PID, commit=True)
    assert _fetch(h, stable=True) == {("t", 0): (10, 0), ("t", 1): (20, 0)}


def test_abort_marker_drops_them():
    h = Harness()
    assert _commit(h, {("t", 0): 5}) == {("t", 0): 0}
    h.coord.on_txn_marker(h.coord.partition_for("g"), PID, commit=False)
    assert _fetch(h, stable=True) == {("t", 0): (-1, 0), ("t", 1): (-1, 0)}


def test_stale_producer_epoch_is_refused():
    h = Harness()
    assert _commit(h, {("t", 0): 5}, epoch=4) == {("t", 0): 0}
    assert _commit(h, {("t", 0): 6}, epoch=3) == {("t", 0): E.INVALID_PRODUCER_EPOCH}


def test_kip447_generation_fencing():
    h = Harness()
    a, _ = _join_two(h)
    gen = h.coord.groups["g"].generation
    assert _commit(h, {("t", 0): 1}, member=a, gen=gen) == {("t", 0): 0}
    assert _commit(h, {("t", 0): 1}, member=a, gen=gen - 1) == {("t", 0): E.ILLEGAL_GENERATION}
    assert _commit(h, {("t", 0): 1}, member="gone", gen=gen) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    h.coord.groups["g"].members[a].group_instance_id = "inst-1"
    assert _commit(h, {("t", 0): 1}, member="other", gen=gen, instance="inst-1") == {("t", 0): E.FENCED_INSTANCE_ID}
    # a plain producer (no group membership given) is not fenced by the generation
    assert _commit(h, {("t", 1): 2}) == {("t", 1): 0}


def test_unknown_partitions_and_wrong_coordinator():
    h = Harness()
    assert _commit(h, {("t", 0): 1, ("nope", 0): 1}) == {("t", 0): 0, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    h.coord.unload(h.coord.partition_for("g"))
    assert _commit(h, {("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    assert _commit(h, {("t", 0): 1}, group="") == {("t", 0): E.INVALID_GROUP_ID}


@pytest.mark.parametrize("commit", [True, False])
def test_reload_replays_batches_and_markers(commit):
    h = Harness()
    _commit(h, {("t", 0): 10})
    _commit(h, {("t", 1): 30}, pid=PID + 1)  # a second producer, still open
    part = h.coord.partition_for("g")
    h.log[part].append(build_batch([(b"\x00\x00\x00" + (b"\x01" if commit else b"\x00"), b"\x00\x00\x00\x00\x00\x00")],
                                   producer_id=PID, producer_epoch=EPOCH, is_transactional=True,
                                   is_control=True))
    fresh = GroupCoordinator(_config(), 4, h._append,
                             h._respond, lambda t, p: t == "t", now_ms=lambda: h.now)
    fresh.begin_load(part)
    for b in h.log[part]:
        replay(fresh, part, b)
    fresh.finish_load(part)
    for p in range(4):
        if p != part:
            fresh.load(p, ())
    h.coord = fresh
    assert _fetch(h) == {("t", 0): (10 if commit else -1, 0), ("t", 1): (-1, 0)}
    assert _fetch(h, stable=True)[("t", 1)] == (-1, E.UNSTABLE_OFFSET_COMMIT)


def _config() -> dict:
    return {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100,
            "group.max.session.timeout.ms": 100_000, "offsets.retention.minutes": 10080,
            "offset.metadata.max.bytes": 4096, "offsets.retention.check.interval.ms": 600_000}
