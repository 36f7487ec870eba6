"""Idempotent producer dedupe and sequence checks, also after reopen."""

from __future__ import annotations

import pytest

from appliance.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from appliance.storage.producer_state import UnknownProducerIdError

from .conftest import all_records, batch, open_log


def pb(seq, n=2, pid=7, epoch=0):
    return batch(n=n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_duplicate_returns_original_offsets(log_path):
    lg = open_log(log_path)
    lg.append(batch(n=1))
    a = lg.append(pb(0))
    b = lg.append(pb(2))
    dup = lg.append(pb(0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (a.first_offset, a.last_offset)
    assert lg.append(pb(2)).first_offset == b.first_offset
    assert lg.log_end_offset == 5 and len(all_records(lg)) == 5


def test_out_of_order_and_epochs(log_path):
    lg = open_log(log_path)
    lg.append(pb(0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(5))
    with pytest.raises(UnknownProducerIdError):
        lg.append(pb(3, pid=99))
    lg.append(pb(0, epoch=1))  # new epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        lg.append(pb(2, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(1, epoch=2))
    assert lg.log_end_offset == 4


def test_sequence_wraps(log_path):
    lg = open_log(log_path)
    lg.append(pb(0))
    # not in sequence yet
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(2**31 - 2, n=2))


def test_dedupe_survives_reopen_clean_and_unclean(log_path):
    lg = open_log(log_path)
    first = lg.append(pb(0))
    lg.append(pb(2))
    lg.close()  # writes a snapshot
    lg = open_log(log_path, clean_shutdown=True)
    assert lg.append(pb(0)).duplicate
    lg.append(pb(4))
    lg.delete_snapshots()
    lg.close()
    import os
    for name in os.listdir(log_path):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log_path, name))
    lg = open_log(log_path, clean_shutdown=False)  # rebuilt from the log's headers
    dup = lg.append(pb(4))
    assert dup.duplicate and dup.first_offset == 4
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(7))
    assert lg.append(pb(6)).first_offset == 6
    assert first.first_offset == 0


def test_follower_append_records_without_validating(log_path):
    """A follower that starts mid-log (at its leader's log start) first sees a producer at a
    sequence other than 0: it records it (Kafka's REPLICATION origin); as leader it then
    checks the producer's next batches against it."""
    lg = open_log(log_path)
    lg.truncate_fully_and_start_at(70)
    with pytest.raises(UnknownProducerIdError):  # what a leader says to the same batch
        lg.append(pb(40, n=10))
    lg.append(batch(n=10, producer_id=7, producer_epoch=0, base_sequence=40, base_offset=70),
              assign_offsets=False)
    assert lg.log_end_offset == 80
    assert lg.append(pb(40, n=10)).duplicate  # now the leader: a retry is recognised
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(55))
    assert lg.append(pb(50)).first_offset == 80
