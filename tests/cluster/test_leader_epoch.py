"""leader-epoch-checkpoint and the leader epoch cache rules (KIP-101), as Kafka's
LeaderEpochFileCacheTest states them."""

import os

import pytest

from appliance.errors import KafkaStorageError
from appliance.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    read_leader_epoch_checkpoint,
)

UNDEF = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "leader-epoch-checkpoint")


def test_file_format_is_kafkas_and_survives_reopen(path):
    c = LeaderEpochCache(path)
    c.assign(0, 0)
    c.assign(2, 10)
    c.assign(5, 42)
    assert open(path).read() == "0\n3\n0 0\n2 10\n5 42\n"
    assert not os.path.exists(path + ".tmp")
    assert LeaderEpochCache(path).entries == [(0, 0), (2, 10), (5, 42)]


def test_missing_file_is_empty_and_undefined(path):
    c = LeaderEpochCache(path)
    assert c.entries == [] and c.latest_epoch == UNDEFINED_EPOCH
    assert c.end_offset_for(0, 100) == UNDEF
    assert not os.path.exists(path)  # nothing written until something is assigned


def test_assign_same_epoch_again_is_a_no_op(path):
    c = LeaderEpochCache(path)
    assert c.assign(2, 6)
    assert not c.assign(2, 7)  # a later offset of the same epoch: the epoch already started at 6
    assert c.entries == [(2, 6)]


def test_assign_drops_non_monotonic_tail(path):
    c = LeaderEpochCache(path)
    c.assign(2, 6)
    c.assign(3, 8)
    c.assign(4, 11)
    # epoch 3 again at a lower offset: epochs >= 3 and offsets >= 7 are a diverged history
    c.assign(3, 7)
    assert c.entries == [(2, 6), (3, 7)]
    # a higher epoch but not a higher offset also replaces what it overlaps
    c.assign(5, 7)
    assert c.entries == [(2, 6), (5, 7)]
    assert LeaderEpochCache(path).entries == [(2, 6), (5, 7)]


def test_assign_rejects_negative(path):
    with pytest.raises(ValueError, match="must not be negative"):
        LeaderEpochCache(path).assign(-1, 0)
    with pytest.raises(ValueError):
        LeaderEpochCache(path).assign(0, -5)


def test_end_offset_for(path):
    c = LeaderEpochCache(path)
    for e, o in [(2, 6), (3, 8), (5, 11)]:
        c.assign(e, o)
    leo = 20
    assert c.end_offset_for(5, leo) == (5, leo)      # the latest epoch ends at the log end
    assert c.end_offset_for(3, leo) == (3, 11)       # an earlier one where the next begins
    assert c.end_offset_for(4, leo) == (3, 11)       # unknown epoch in between: the one below
    assert c.end_offset_for(1, leo) == (1, 6)        # before our history: where it begins
    assert c.end_offset_for(6, leo) == UNDEF         # newer than anything we know
    assert c.end_offset_for(UNDEFINED_EPOCH, leo) == UNDEF


def test_truncate_from_end(path):
    c = LeaderEpochCache(path)
    for e, o in [(2, 6), (3, 8), (4, 11)]:
        c.assign(e, o)
    c.truncate_from_end(12)  # beyond the last start: nothing to do
    assert c.entries == [(2, 6), (3, 8), (4, 11)]
    c.truncate_from_end(8)
    assert c.entries == [(2, 6)]
    assert LeaderEpochCache(path).entries == [(2, 6)]
    c.truncate_from_end(-1)  # undefined offset: ignored
    assert c.entries == [(2, 6)]


def test_truncate_from_start(path):
    c = LeaderEpochCache(path)
    for e, o in [(2, 6), (3, 8), (4, 11)]:
        c.assign(e, o)
    c.truncate_from_start(5)  # before the first entry: unchanged
    assert c.entries == [(2, 6), (3, 8), (4, 11)]
    c.truncate_from_start(9)
    assert c.entries == [(3, 9), (4, 11)]
    c.truncate_from_start(11)
    assert c.entries == [(4, 11)]
    c.truncate_from_start(30)
    assert c.entries == [(4, 30)]
    assert LeaderEpochCache(path).entries == [(4, 30)]


def test_divergent_follower_truncates_to_leaders_epoch_end(path, tmp_path):
    """KIP-101's scenario: the follower wrote offsets 0-9 in epoch 1 and 10-14 in epoch 2 as a
    leader nobody followed; the new leader's epoch 2 started at 10 and epoch 3 at 12. The
    follower asks for its latest epoch (2) and truncates to where the leader's epoch 2 ends."""
    leader = LeaderEpochCache(str(tmp_path / "leader"))
    for e, o in [(1, 0), (2, 10), (3, 12)]:
        leader.assign(e, o)
    follower = LeaderEpochCache(path)
    follower.assign(1, 0)
    follower.assign(2, 10)
    epoch, end = leader.end_offset_for(follower.latest_epoch, log_end_offset=20)
    assert (epoch, end) == (2, 12)
    follower.truncate_from_end(min(end, 15))
    assert follower.entries == [(1, 0), (2, 10)]


@pytest.mark.parametrize("text, why", [
    ("", "missing version"),
    ("1\n0\n", "unknown version"),
    ("0\nx\n", "not a number"),
    ("0\n2\n0 0\n", "count says 2"),
    ("0\n1\n0\n", "not '<epoch> <offset>'"),
    ("0\n2\n3 10\n2 20\n", "not ascending"),
    ("0\n1\n-1 0\n", "negative"),
])
def test_malformed_file_named(path, text, why):
    with open(path, "w") as f:
        f.write(text)
    with pytest.raises(KafkaStorageError, match=why):
        read_leader_epoch_checkpoint(path)
