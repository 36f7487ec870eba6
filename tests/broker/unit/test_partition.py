"""The disk worker's Partition on a real log in a temporary directory, with no process: the
high watermark rule, truncation moving the log and its leader epochs together, and the held
acks=all produces and DeleteRecords released or timed out in order."""

from __future__ import annotations

import os

import pytest

from appliance.broker.disk.partition import ALONE, HeldDelete, HeldProduce, Partition, batch_epochs
from appliance.config import TopicConfig
from appliance.errors import InvalidTopicError
from appliance.records.batch import build_batch
from appliance.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from appliance.storage.log import PartitionLog

LEADER, F1, F2 = 1, 2, 3
ISR = (LEADER, F1, F2)


def _batch(n: int = 2) -> memoryview:
    return memoryview(bytearray(build_batch([(b"k", b"v%d" % i) for i in range(n)])))


@pytest.fixture
def part(tmp_path) -> Partition:
    path = os.path.join(tmp_path, "t-0")
    log = PartitionLog.open(path, TopicConfig.defaults(file_delete_delay_ms=0))
    p = Partition(0, log, broker_id=LEADER)
    yield p
    log.close()


def _held(needed: int, deadline: float, request_id: int) -> HeldProduce:
    return HeldProduce(needed, deadline, 0, request_id, needed - 1, -1)


# -- the high watermark ----------------------------------------------------------------------

def test_hw_advances_only_when_every_isr_member_has_the_offset(part):
    part.append_as_leader(_batch(5), epoch=1)  # offsets 0..4
    assert not part.maybe_increment_hw(ISR)  # no follower heard from: they count as 0
    assert part.high_watermark == 0
    part.update_follower(F1, 5, 0)
    assert not part.maybe_increment_hw(ISR)  # F2 still at 0
    part.update_follower(F2, 3, 0)
    assert part.maybe_increment_hw(ISR) and part.high_watermark == 3
    part.update_follower(F2, 5, 0)
    assert part.maybe_increment_hw(ISR) and part.high_watermark == 5


def test_hw_ignores_replicas_out_of_the_isr_and_never_moves_back(part):
    part.append_as_leader(_batch(4), epoch=1)
    part.update_follower(F1, 4, 0)
    part.update_follower(F2, 1, 0)
    assert part.maybe_increment_hw((LEADER, F1)) and part.high_watermark == 4  # F2 left the ISR
    assert not part.maybe_increment_hw(ISR)  # F2 back in, behind: the HW stays
    assert part.high_watermark == 4


def test_hw_is_bounded_by_the_leaders_own_log_end(part):
    part.append_as_leader(_batch(2), epoch=1)
    part.update_follower(F1, 10, 0)  # a follower claiming more than the leader has
    assert part.maybe_increment_hw((LEADER, F1)) and part.high_watermark == 2


def test_alone_the_hw_is_the_log_end(part):
    part.log.append(_batch(3))
    assert part.maybe_increment_hw(ALONE) and part.high_watermark == 3
    assert part.last_stable_offset == 3  # no transactions yet: the LSO is the HW


def test_follower_takes_min_of_leader_hw_and_own_log_end(part):
    leader = _batch(4)
    assert part.append_as_follower(leader, leader_hw=10, leader_start=0) == 0
    assert part.high_watermark == 4
    assert part.append_as_follower(memoryview(b""), leader_hw=2, leader_start=0) == 0
    assert part.high_watermark == 2  # a follower's HW is the leader's, even lower
    # the leader's log start is taken, bounded by the follower's own HW
    assert part.append_as_follower(memoryview(b""), leader_hw=4, leader_start=9) == 4


# -- leader epochs and truncation --------------------------------------------------------------

def test_leader_stamps_its_epoch_at_the_log_end_it_begins_with(part):
    part.become_leader(3)
    info = part.append_as_leader(_batch(2), epoch=3)
    assert info.first_offset == 0
    part.become_leader(5)
    part.append_as_leader(_batch(3), epoch=5)
    assert part.epochs.entries == [(3, 0), (5, 2)]
    stored = part.log.read_bytes(0, 1 << 20)
    assert [e for e, _ in batch_epochs(memoryview(stored))] == [3, 5]  # in every batch too
    assert part.end_offset_for(3) == (3, 2)
    assert part.end_offset_for(5) == (5, 5)
    assert part.end_offset_for(4) == (3, 2)


def test_truncation_moves_the_epoch_cache_and_the_log_together(part):
    for epoch in (1, 2, 3):
        part.become_leader(epoch)
        part.append_as_leader(_batch(2), epoch=epoch)  # epoch e starts at 2(e-1)
    assert part.epochs.entries == [(1, 0), (2, 2), (3, 4)]
    part.truncate_to(3)
    assert part.log.log_end_offset == 2  # a batch is cut whole: offset 3 is inside batch 2-3
    assert part.epochs.entries == [(1, 0)]
    # on disk too: a restart reads the same epochs
    on_disk = read_leader_epoch_checkpoint(os.path.join(part.log.path, LEADER_EPOCH_CHECKPOINT))
    assert on_disk == [(1, 0)]
    assert part.end_offset_for(1) == (1, 2)


def test_truncate_fully_empties_the_log_and_its_epochs(part):
    part.become_leader(1)
    part.append_as_leader(_batch(3), epoch=1)
    part.update_follower(F1, 3, 0)
    part.truncate_fully_and_start_at(50)
    assert (part.log.log_start_offset, part.log.log_end_offset) == (50, 50)
    assert part.epochs.entries == []
    assert part.follower_ends == {}


def test_follower_learns_epochs_from_the_batches_it_appends(tmp_path, part):
    leader_log = PartitionLog.open(os.path.join(tmp_path, "l-0"), TopicConfig.defaults())
    leader = Partition(0, leader_log, broker_id=F1)
    leader.become_leader(4)
    leader.append_as_leader(_batch(2), epoch=4)
    leader.become_leader(7)
    leader.append_as_leader(_batch(1), epoch=7)
    fetched = memoryview(leader_log.read_bytes(0, 1 << 20))
    part.append_as_follower(fetched, leader_hw=3, leader_start=0)
    assert part.epochs.entries == leader.epochs.entries == [(4, 0), (7, 2)]
    leader_log.close()


# -- held produces ---------------------------------------------------------------------------

def test_held_produces_are_released_in_order_as_the_hw_covers_them(part):
    part.append_as_leader(_batch(6), epoch=1)
    for rid, needed in enumerate((2, 4, 6)):
        part.hold_produce(_held(needed, 100.0, rid))
    assert part.covered_produces() == []
    part.update_follower(F1, 4, 0)
    part.maybe_increment_hw((LEADER, F1))
    assert [h.request_id for h in part.covered_produces()] == [0, 1]
    assert [h.request_id for h in part.held_produces] == [2]
    part.update_follower(F1, 6, 0)
    part.maybe_increment_hw((LEADER, F1))
    assert [h.request_id for h in part.covered_produces()] == [2]
    assert part.held_produces == []


def test_held_produces_time_out_in_order(part):
    part.hold_produce(_held(5, 10.0, 0))
    part.hold_produce(_held(6, 20.0, 1))
    part.hold_produce(_held(7, 15.0, 2))
    assert part.expired_produces(9.0) == []
    assert [h.request_id for h in part.expired_produces(16.0)] == [0, 2]
    assert [h.request_id for h in part.take_produces()] == [1]
    assert part.held_produces == []


# -- held DeleteRecords ----------------------------------------------------------------------

def test_held_deletes_wait_for_the_low_watermark_of_the_isr(part):
    part.append_as_leader(_batch(10), epoch=1)
    part.update_follower(F1, 10, 0)
    part.update_follower(F2, 10, 0)
    part.maybe_increment_hw(ISR)
    assert part.advance_log_start(6) == 0  # one segment: none wholly below
    assert part.log.log_start_offset == 6
    assert part.advance_log_start(4) is None  # never back
    part.hold_delete(HeldDelete(6, 100.0, 0, 7))
    assert part.reached_deletes(ISR) == (0, [])
    part.update_follower(F1, 10, 6)
    assert part.reached_deletes(ISR) == (0, [])  # F2 has not followed
    low, done = part.reached_deletes((LEADER, F1))  # F2 out of the ISR
    assert low == 6 and [h.request_id for h in done] == [7]
    part.hold_delete(HeldDelete(8, 1.0, 0, 8))
    assert [h.request_id for h in part.expired_deletes(2.0)] == [8]


def test_a_new_leadership_forgets_the_followers_log_starts(part):
    part.update_follower(F1, 0, 5)
    assert part.low_watermark((LEADER, F1)) == 0
    part.become_leader(2)
    assert part.low_watermark((LEADER, F1)) == -1  # not heard from since this leadership began


# -- where a follower truncates (KIP-101/279), the leader's answer taken as it would be ---------

def _with_epochs(tmp_path, name: str, runs: list[tuple[int, int]]) -> Partition:
    """A partition whose log holds ``n`` records in each (epoch, n) run, led in that epoch, one
    record a batch (a log is cut at batch boundaries)."""
    p = Partition(0, PartitionLog.open(os.path.join(tmp_path, name), TopicConfig.defaults()), LEADER)
    for epoch, n in runs:
        p.become_leader(epoch)
        for _ in range(n):
            p.append_as_leader(_batch(1), epoch)
    return p


def test_follower_truncates_its_divergent_tail(tmp_path):
    leader = _with_epochs(tmp_path, "l-0", [(0, 10), (1, 2), (2, 8)])  # LEO 20
    follower = _with_epochs(tmp_path, "f-0", [(0, 10), (1, 5)])  # wrote 10..14 in epoch 1
    asked = follower.latest_epoch()[0]
    epoch, end = leader.end_offset_for(asked)
    assert (asked, epoch, end) == (1, 1, 12)
    assert follower.truncate_by_epoch(asked, epoch, end) == 12
    assert follower.epochs.entries == [(0, 0), (1, 10)]


def test_leader_never_had_the_followers_epoch_kip_279(tmp_path):
    leader = _with_epochs(tmp_path, "l-0", [(0, 8), (2, 12)])
    follower = _with_epochs(tmp_path, "f-0", [(0, 5), (1, 4)])  # 5..8 in an epoch the leader lacks
    epoch, end = leader.end_offset_for(1)
    assert (epoch, end) == (0, 8)
    assert follower.truncate_by_epoch(1, epoch, end) == 5  # where epoch 0 ends on our side
    assert follower.epochs.entries == [(0, 0)]


def test_follower_behind_keeps_everything_and_no_epochs_fall_back_to_the_hw(tmp_path):
    leader = _with_epochs(tmp_path, "l-0", [(0, 8), (2, 22)])  # LEO 30
    follower = _with_epochs(tmp_path, "f-0", [(0, 8), (2, 17)])  # LEO 25
    follower.log.high_watermark = 20
    assert follower.truncation_offset(2, *leader.end_offset_for(2)) == 25
    # a leader that knows no epochs: the follower's high watermark
    assert follower.truncate_by_epoch(2, -1, -1) == 20
    fresh = Partition(0, PartitionLog.open(os.path.join(tmp_path, "e-0"), TopicConfig.defaults()), F1)
    assert fresh.latest_epoch() == (-1, -1)


def test_advance_alone_is_the_rule_with_no_followers(part):
    part.log.append(_batch(4))
    assert part.advance_alone() == 4 == part.high_watermark
    part.log.append(_batch(2))
    other = Partition(0, part.log, broker_id=LEADER)
    assert other.maybe_increment_hw(ALONE) and other.high_watermark == 6 == part.advance_alone()


def test_a_clients_produce_to_an_internal_topic_is_refused(tmp_path, part):
    part.check_client_produce()  # an ordinary topic
    offsets = Partition(1, PartitionLog.open(os.path.join(tmp_path, "__consumer_offsets-0"),
                                             TopicConfig.defaults()), LEADER)
    with pytest.raises(InvalidTopicError):
        offsets.check_client_produce()
    offsets.log.close()


def _txn_batch(seq: int, pid: int = 5) -> memoryview:
    return memoryview(bytearray(build_batch([(b"k", b"v")] * 2, producer_id=pid, producer_epoch=0,
                                            base_sequence=seq, is_transactional=True)))


def test_last_stable_offset_follows_open_transactions_and_the_hw(part):
    """LSO = min(first offset of the earliest undecided transaction, HW); a transaction ended
    stays undecided until the HW passes its marker."""
    part.append_as_leader(_batch(), 1)                    # 0-1
    part.append_as_leader(_txn_batch(0), 1)               # 2-3 opens at 2
    part.append_as_leader(_batch(), 1)                    # 4-5
    assert part.last_stable_offset == 0                   # HW still 0
    part.maybe_increment_hw((LEADER, F1))
    assert part.high_watermark == 0                       # F1 has nothing yet
    part.update_follower(F1, 6, 0)
    part.maybe_increment_hw((LEADER, F1))
    assert (part.high_watermark, part.last_stable_offset) == (6, 2)
    info = part.write_marker(5, 0, False, 0, 1)           # marker at 6
    assert info.first_offset == 6 and part.last_stable_offset == 2  # not replicated yet
    part.update_follower(F1, 7, 0)
    part.maybe_increment_hw((LEADER, F1))
    assert (part.high_watermark, part.last_stable_offset) == (7, 7)
