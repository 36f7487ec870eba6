"""KIP-101/279: the leader's OffsetsForLeaderEpoch answer and the follower's truncation point,
on real leader-epoch-checkpoint files, with the answer carried through the wire schema."""

import pytest

from appliance.cluster.truncation import answer_offsets_for_leader_epoch, follower_truncation_offset
from appliance.errors import ErrorCode
from appliance.protocol.messages.cluster import OffsetsForLeaderEpoch
from appliance.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


def cache(tmp_path, name, entries):
    c = LeaderEpochCache(str(tmp_path / name))
    for e, o in entries:
        c.assign(e, o)
    return c


def ask(leader, leo, epoch, version=3, current=-1):
    """The follower's request and the leader's answer, both through the wire."""
    req = OffsetsForLeaderEpoch.decode_request(version, OffsetsForLeaderEpoch.encode_request(version, {
        "replica_id": 1, "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}))
    body = answer_offsets_for_leader_epoch(req, lambda t, p: (leader.latest_epoch, leader, leo))
    resp = OffsetsForLeaderEpoch.decode_response(version, OffsetsForLeaderEpoch.encode_response(version, body))
    p = resp.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def test_follower_truncates_its_divergent_tail(tmp_path):
    leader = cache(tmp_path, "l", [(0, 0), (1, 10), (2, 12)])  # LEO 20
    follower = cache(tmp_path, "f", [(0, 0), (1, 10)])  # it wrote 10..14 in epoch 1, LEO 15
    err, epoch, end = ask(leader, 20, follower.latest_epoch)
    assert (err, epoch, end) == (0, 1, 12)
    assert follower_truncation_offset(follower, 15, 11, 1, epoch, end) == 12


def test_leader_never_had_the_followers_epoch_kip_279(tmp_path):
    leader = cache(tmp_path, "l", [(0, 0), (2, 8)])
    follower = cache(tmp_path, "f", [(0, 0), (1, 5)])  # LEO 9: 5..8 written in an epoch the leader lacks
    err, epoch, end = ask(leader, 20, 1)
    assert (err, epoch, end) == (0, 0, 8)
    assert follower_truncation_offset(follower, 9, 4, 1, epoch, end) == 5


def test_follower_behind_keeps_everything_and_no_epochs_falls_back_to_hw(tmp_path):
    leader = cache(tmp_path, "l", [(0, 0), (2, 8)])
    follower = cache(tmp_path, "f", [(0, 0), (2, 8)])
    err, epoch, end = ask(leader, 30, 2)
    assert follower_truncation_offset(follower, 25, 20, 2, epoch, end) == 25
    empty = cache(tmp_path, "e", [])
    err, epoch, end = ask(empty, 30, 2)
    assert (epoch, end) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert follower_truncation_offset(follower, 25, 20, 2, epoch, end) == 20


@pytest.mark.parametrize("current,code", [(1, ErrorCode.FENCED_LEADER_EPOCH), (3, ErrorCode.UNKNOWN_LEADER_EPOCH),
                                          (2, ErrorCode.NONE)])
def test_current_leader_epoch_fencing(tmp_path, current, code):
    leader = cache(tmp_path, "l", [(0, 0), (2, 8)])
    assert ask(leader, 20, 2, version=2, current=current)[0] == code


def test_not_the_leader(tmp_path):
    req = OffsetsForLeaderEpoch.decode_request(0, OffsetsForLeaderEpoch.encode_request(0, {
        "topics": [{"topic": "t", "partitions": [{"partition": 3, "leader_epoch": 0}]}]}))
    body = answer_offsets_for_leader_epoch(req, lambda t, p: None)
    assert body["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    OffsetsForLeaderEpoch.encode_response(0, body)  # a v0 answer is encodable too
