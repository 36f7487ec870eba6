"""Idempotent producer dedupe and sequence checks, also after reopen."""

from __future__ import annotations

import pytest

from appliance.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from appliance.storage.producer_state import UnknownProducerIdError

from .conftest import all_records, batch, cfg, open_log


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


def _state(lg) -> dict:
    return {pid: (e.epoch, list(e.batches)) for pid, e in lg.producers.producers.items()}


def test_unclean_open_replays_what_recovery_walked(log_path):
    """An unclean open takes each recovered segment's producer batches from its recovery walk
    (loader.producer_batches), a clean one walks the segments for them: over several segments,
    plain batches between the idempotent ones and a snapshot in the middle, both end with the
    same producer state, which dedupes and checks sequences."""
    import os
    c = cfg(segment_bytes=700)
    lg = open_log(log_path, c)
    big = (1 << 62) + 8  # a producer id whose first byte is not 0
    seqs, epochs = {7: 0, big: 0}, {7: 0, big: 0}

    def step(i: int) -> None:
        if i % 3 == 2:
            lg.append(batch(n=1))  # not idempotent
            return
        pid = 7 if i % 3 == 0 else big
        if pid == big and i == 19:  # a new epoch restarts the sequence
            epochs[big], seqs[big] = 1, 0
        lg.append(pb(seqs[pid], pid=pid, epoch=epochs[pid]))
        seqs[pid] += 2
    for i in range(15):
        step(i)
    lg.close()  # a snapshot in a middle segment
    mid = {n: open(os.path.join(log_path, n), "rb").read()
           for n in os.listdir(log_path) if n.endswith(".snapshot")}
    assert len(mid) == 1
    lg = open_log(log_path, c, clean_shutdown=True)
    for i in range(15, 24):
        step(i)
    lg.close()
    assert len([n for n in os.listdir(log_path) if n.endswith(".log")]) >= 4

    def only_mid_snapshot() -> None:
        for n in os.listdir(log_path):
            if n.endswith(".snapshot"):
                os.unlink(os.path.join(log_path, n))
        for n, data in mid.items():
            with open(os.path.join(log_path, n), "wb") as f:
                f.write(data)

    only_mid_snapshot()
    walked = open_log(log_path, c, clean_shutdown=True)
    expected = _state(walked)
    walked.close()
    only_mid_snapshot()
    lg = open_log(log_path, c, clean_shutdown=False, recovery_point=0)
    assert _state(lg) == expected
    assert sorted(expected) == [7, big] and expected[big][0] == 1
    last7 = expected[7][1][-1]
    dup = lg.append(pb(last7.first_seq, pid=7))
    assert dup.duplicate and dup.first_offset == last7.first_offset
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(last7.last_seq + 3, pid=7))
    lg.close()


@pytest.mark.parametrize("segment_bytes", [1 << 20, 700], ids=["one-segment", "across-segments"])
def test_truncating_every_retained_batch_keeps_the_producer_known(log_path, segment_bytes):
    """A follower's truncation that cuts all five batches the state retains of a producer (five
    acks=all requests in flight on a leader that died) leaves the producer's earlier batches in
    the log: its state is their last one's, as Kafka's truncateAndReload rebuilds it. Forgetting
    the producer made this replica, once leader, refuse the producer's next batch with
    UNKNOWN_PRODUCER_ID: librdkafka's fatal error for a retried batch, or an epoch bump that
    re-sends its possibly-written batches under the new epoch (duplicates)."""
    lg = open_log(log_path, cfg(segment_bytes=segment_bytes))
    other = 8
    for i in range(10):
        lg.append(pb(2 * i))
        lg.append(pb(2 * i, pid=other))  # interleaved: truncation cuts both
    lg.append(pb(0, pid=9))  # a producer that starts inside the truncated part
    lg.truncate_to(8)  # keeps two batches of each, sequences 0-1 and 2-3; cuts eight of each
    assert lg.log_end_offset == 8
    assert sorted(lg.producers.producers) == [7, other]
    assert lg.append(pb(2)).duplicate  # a retry of the last batch kept is still recognised
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(pb(6))
    assert lg.append(pb(4)).first_offset == 8
    assert lg.append(pb(4, pid=other)).first_offset == 10
    assert lg.append(pb(0, pid=9)).first_offset == 12  # pid 9 is new again
