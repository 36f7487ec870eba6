"""Transactions in a partition's log (KIP-98): open transactions in the producer state, markers,
the .txnindex, the first unstable offset, across reopen, recovery and truncation."""

from __future__ import annotations

import os

import pytest

from appliance.errors import InvalidProducerEpochError, InvalidRecordError
from appliance.records.control import build_marker, parse_marker
from appliance.storage import txn_index
from appliance.storage.txn_index import AbortedTxn

from .conftest import batch, cfg, open_log

PID = 42


def txb(seq: int, n: int = 2, pid: int = PID, epoch: int = 0) -> bytes:
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def _txn_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".txnindex"))


def test_marker_round_trip():
    m = parse_marker(build_marker(7, 3, True, 11, base_offset=5))
    assert (m.producer_id, m.producer_epoch, m.commit, m.coordinator_epoch) == (7, 3, True, 11)
    assert parse_marker(batch(1)) is None  # not a control batch


def test_open_commit_abort_and_the_index(log_path):
    lg = open_log(log_path)
    lg.append(batch(2))                                    # 0-1, not transactional
    lg.append(txb(0))                                      # 2-3 opens the transaction at 2
    assert lg.producers.first_unstable_offset(4) == 2
    assert lg.producers.producers[PID].current_txn_first_offset == 2
    lg.append(txb(2))                                      # 4-5 continues it
    info, aborted = lg.append_marker(PID, 0, False, 5)    # marker at 6
    assert info.first_offset == 6
    assert aborted == AbortedTxn(PID, 2, 6, 7)
    assert lg.producers.producers[PID].current_txn_first_offset == -1
    # ended, but undecided until the high watermark passes its marker
    assert lg.producers.first_unstable_offset(6) == 2
    assert lg.producers.first_unstable_offset(7) is None
    assert txn_index.read_entries(lg.active_segment.txn_index_path) == [aborted]
    lg.append(txb(4))                                      # 7-8: a new transaction
    _, committed = lg.append_marker(PID, 0, True, 5)
    assert committed is None                               # commits are not indexed
    assert len(txn_index.read_entries(lg.active_segment.txn_index_path)) == 1
    lg.close()


def test_stale_epoch_and_markers_without_a_transaction(log_path):
    lg = open_log(log_path)
    lg.append(txb(0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        lg.append_marker(PID, 2, False, 0)
    assert lg.log_end_offset == 2                          # nothing written
    lg.append_marker(PID, 3, True, 0)
    end = lg.log_end_offset
    info, aborted = lg.append_marker(PID, 3, False, 0)    # no open transaction: written anyway
    assert info.first_offset == end and aborted is None
    info, aborted = lg.append_marker(99, 0, False, 0)     # unknown producer: written anyway
    assert aborted is None and lg.producers.first_unstable_offset(lg.log_end_offset) is None
    lg.close()


def test_bad_transactional_input(log_path):
    lg = open_log(log_path)
    with pytest.raises(InvalidRecordError):                # a transactional batch with no producer
        lg.append(batch(1, is_transactional=True))
    with pytest.raises(InvalidRecordError):                # a client may not write markers
        lg.append(build_marker(PID, 0, True, 0))
    assert lg.log_end_offset == 0
    # the group coordinator's transactional offsets carry no sequence: they open a transaction
    lg.append(batch(1, producer_id=PID, producer_epoch=0, is_transactional=True))
    assert lg.producers.first_unstable_offset(1) == 0
    lg.close()
    lg = open_log(log_path, clean_shutdown=False)             # and so does the replay
    assert lg.producers.first_unstable_offset(1) == 0
    lg.close()


@pytest.mark.parametrize("clean", [True, False])
def test_open_transaction_survives_reopen(log_path, clean):
    lg = open_log(log_path)
    lg.append(batch(3))
    lg.append(txb(0))                                      # 3-4 opens at 3
    for i in range(4):                                     # more than the 5 batches retained
        lg.append(txb(2 + 2 * i))
    lg.append(txb(0, pid=PID + 1))                         # another producer at 13
    lg.append_marker(PID + 1, 0, False, 0)                 # aborted at 15
    if clean:
        lg.close()
    else:
        lg.flush()
        lg.abandon()
        for n in os.listdir(log_path):
            if n.endswith(".snapshot"):
                os.unlink(os.path.join(log_path, n))
    lg = open_log(log_path, clean_shutdown=clean)
    assert lg.producers.producers[PID].current_txn_first_offset == 3
    assert lg.producers.first_unstable_offset(lg.log_end_offset) == 3
    assert PID + 1 not in lg.producers.ongoing.values()
    _, aborted = lg.append_marker(PID, 0, False, 0)
    assert aborted.first_offset == 3
    entries = txn_index.read_entries(lg.active_segment.txn_index_path)
    assert [(e.producer_id, e.first_offset) for e in entries] == [(PID + 1, 13), (PID, 3)]
    lg.close()


def test_recovery_writes_back_a_lost_index_entry(log_path):
    lg = open_log(log_path)
    lg.append(txb(0))
    lg.append_marker(PID, 0, False, 0)
    path = lg.active_segment.txn_index_path
    lg.flush()
    lg.abandon()
    os.unlink(path)                                        # the index did not reach the disk
    lg = open_log(log_path, clean_shutdown=False)
    assert txn_index.read_entries(path) == [AbortedTxn(PID, 0, 2, 3)]
    lg.close()


def test_truncating_a_marker_reopens_its_transaction(log_path):
    lg = open_log(log_path, cfg(segment_bytes=300))
    lg.append(txb(0))                                      # 0-1
    lg.append(batch(2))                                    # 2-3
    lg.append_marker(PID, 0, False, 0)                     # 4
    assert _txn_files(log_path)
    lg.truncate_to(4)
    assert lg.producers.producers[PID].current_txn_first_offset == 0
    assert lg.producers.first_unstable_offset(4) == 0
    assert all(not txn_index.read_entries(os.path.join(log_path, n)) for n in _txn_files(log_path))
    lg.close()


def test_follower_append_takes_markers(log_path, tmp_path):
    leader = open_log(log_path)
    leader.append(txb(0))
    leader.append_marker(PID, 0, False, 0)
    data = leader.read_bytes(0, 1 << 20)
    leader.close()
    follower = open_log(os.path.join(str(tmp_path), "f", "topic-0"))
    follower.append(memoryview(bytearray(data)), assign_offsets=False, validate=False)
    assert txn_index.read_entries(follower.active_segment.txn_index_path) == [AbortedTxn(PID, 0, 2, 3)]
    assert not follower.producers.ongoing
    follower.close()


def test_collect_aborted(tmp_path):
    a, b = str(tmp_path / "a.txnindex"), str(tmp_path / "b.txnindex")
    txn_index.append_entry(a, AbortedTxn(1, 0, 5, 6))
    txn_index.append_entry(a, AbortedTxn(2, 3, 9, 10))
    assert not txn_index.append_entry(a, AbortedTxn(2, 3, 9, 10))  # already there
    txn_index.append_entry(b, AbortedTxn(3, 12, 20, 21))
    assert txn_index.collect_aborted([a, b], 6, 12) == [AbortedTxn(2, 3, 9, 10)]
    assert [t.producer_id for t in txn_index.collect_aborted([a, b], 0, 100)] == [1, 2, 3]
    # complete once an entry's last stable offset reaches the bound: b is not read
    assert txn_index.collect_aborted([a, b], 0, 6) == [AbortedTxn(1, 0, 5, 6)]
    txn_index.truncate_to(a, 9)
    assert txn_index.read_entries(a) == [AbortedTxn(1, 0, 5, 6)]
    txn_index.truncate_to(a, 0)
    assert not os.path.exists(a)
    with open(b, "ab") as f:
        f.write(b"\x00" * 7)                               # a torn entry: ignored, then cut
    assert len(txn_index.read_entries(b)) == 1
    txn_index.append_entry(b, AbortedTxn(4, 22, 30, 31))
    assert os.path.getsize(b) == 2 * txn_index.ENTRY.size


def test_index_goes_with_its_segment(log_path):
    lg = open_log(log_path, cfg(segment_bytes=200))
    lg.append(txb(0))
    lg.append_marker(PID, 0, False, 0)
    seg = lg.active_segment
    lg.roll()
    seg.rename_to_deleted()
    assert os.path.exists(seg.txn_index_path) and seg.txn_index_path.endswith(".txnindex.deleted")
    seg.delete_files()
    assert not os.path.exists(seg.txn_index_path)
    lg.close()


def test_dump_log_prints_markers_and_the_txn_index(log_path, capsys):
    import argparse

    from appliance.cli import dump_log
    lg = open_log(log_path)
    lg.append(txb(0))
    lg.append_marker(PID, 0, False, 7)
    lg.append(txb(2))
    lg.append_marker(PID, 0, True, 8)
    seg = lg.active_segment
    lg.close()
    args = argparse.Namespace(files=f"{seg.log_path},{seg.txn_index_path}", verify_crc=True,
                              print_data_log=False, verify_index_only=False,
                              index_sanity_check=False)
    assert dump_log.run(args) == 0
    out = capsys.readouterr().out
    assert "isTransactional: true isControl: true" in out
    assert "| offset: 2 " in out and "endTxnMarker: ABORT coordinatorEpoch: 7" in out
    assert "| offset: 5 " in out and "endTxnMarker: COMMIT coordinatorEpoch: 8" in out
    assert f"version: 0 producerId: {PID} firstOffset: 0 lastOffset: 2 lastStableOffset: 3" in out


def test_a_plain_batch_inside_an_open_transaction_is_refused(log_path):
    from appliance.storage.producer_state import InvalidTxnStateError
    lg = open_log(log_path)
    lg.append(txb(0))
    with pytest.raises(InvalidTxnStateError):
        lg.append(batch(1, producer_id=PID, producer_epoch=0, base_sequence=2))
    lg.append_marker(PID, 0, True, 0)
    assert lg.append(batch(1, producer_id=PID, producer_epoch=0, base_sequence=2)).first_offset == 3
    lg.close()
