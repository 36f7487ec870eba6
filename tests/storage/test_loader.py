"""loader: leftovers, recovery one segment at a time, all-or-nothing loading."""

from __future__ import annotations

import os

import pytest

from appliance.records.batch import build_batch
from appliance.storage.loader import load_segments, producer_batches, remove_leftovers
from appliance.storage.producer_state import NUM_BATCHES_TO_RETAIN, ProducerStateManager
from appliance.storage.segment import LogSegment, SegmentOpenError
from native.scan import scan_batches
from tests.storage.conftest import batch, cfg, open_log
from tests.storage.test_descriptors import fds_under


def _write_log(path: str, n_segments: int = 6) -> None:
    lg = open_log(path, cfg(segment_bytes=1024))
    while len(lg.segments()) < n_segments:
        lg.append(batch(n=5, value_size=100))
    lg.close()


def _new(path):
    return lambda base: LogSegment.open(path, base, cfg(), create=True)


def test_remove_leftovers(log_path):
    _write_log(log_path, 3)
    names = sorted(os.listdir(log_path))
    for extra in ("00000000000000000099.log.deleted", "00000000000000000099.index.cleaned",
                  "x.tmp", "00000000000000000777.index"):  # the last: an index without its log
        open(os.path.join(log_path, extra), "wb").close()
    bases = remove_leftovers(log_path)
    assert sorted(os.listdir(log_path)) == names
    assert bases == sorted(int(n[:20]) for n in names if n.endswith(".log"))


def test_unclean_load_cuts_at_corruption_and_deletes_later_segments(log_path):
    _write_log(log_path)
    logs = sorted(n for n in os.listdir(log_path) if n.endswith(".log"))
    victim = os.path.join(log_path, logs[2])
    size_before = os.path.getsize(victim)
    with open(victim, "r+b") as f:  # flip a byte inside the second batch's records
        f.seek(os.path.getsize(victim) - 20)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    segs = load_segments(log_path, cfg(segment_bytes=1024), 0, 0, False, _new(log_path))
    assert [s.base_offset for s in segs] == [int(n[:20]) for n in logs[:3]]
    assert not any(os.path.exists(os.path.join(log_path, n)) for n in logs[3:])
    assert segs[-1].size < size_before  # cut before the damaged batch
    assert os.path.getsize(victim) == segs[-1].size
    # only the last segment's files are open; the others' indexes are trimmed
    assert {os.path.basename(t) for t in fds_under(log_path)} <= {
        os.path.basename(p) for p in segs[-1].paths()}
    for s in segs[:-1]:
        assert not s.files_open
        assert os.path.getsize(os.path.join(log_path, f"{s.base_offset:020d}.index")) % 8 == 0
    for s in segs:
        s.close()


def test_a_segment_that_cannot_open_fails_the_load_with_nothing_left_open(log_path):
    _write_log(log_path, 3)
    os.mkdir(os.path.join(log_path, f"{10**6:020d}.log"))  # not openable as a file
    with pytest.raises(SegmentOpenError) as ei:
        load_segments(log_path, cfg(segment_bytes=1024), 0, 0, True, _new(log_path))
    assert ei.value.path.endswith(f"{10**6:020d}.log")
    assert fds_under(log_path) == []


def test_empty_directory_gets_a_first_segment(log_path):
    os.makedirs(log_path)
    segs = load_segments(log_path, cfg(), 0, 42, True, _new(log_path))
    assert [s.base_offset for s in segs] == [42]
    segs[0].close()


def test_producer_batches_keeps_each_producers_last_batches_in_log_order():
    """producer_batches over many batches, gathered a few at a time: only idempotent v2
    batches (not one with a producer id but no sequence), at most NUM_BATCHES_TO_RETAIN per
    producer, in log order; replaying them gives the state that replaying every batch gives
    (an epoch bump included)."""
    big = (1 << 62) + 3
    parts, expected, off = [], ProducerStateManager(), 0
    seqs, epochs = {5: 0, 6: 0, big: 0}, {5: 0, 6: 0, big: 2}
    for i in range(90):
        pid = (5, 6, big, -1)[i % 4]
        if pid == 6 and i == 49:
            epochs[6], seqs[6] = 1, 0  # a new epoch restarts the sequence
        kw = {} if pid < 0 else dict(producer_id=pid, producer_epoch=epochs[pid],
                                      base_sequence=seqs[pid])
        if i == 88:  # a producer's batch without a sequence (as a transaction marker has)
            kw["base_sequence"], pid = -1, -1
        parts.append(build_batch([(b"k", b"v%d" % j) for j in range(2)], base_offset=off,
                                 base_timestamp=1_000, **kw))
        if pid >= 0:
            expected.load_batch(pid, epochs[pid], seqs[pid], 1, off)
            seqs[pid] += 2
        off += 2
    buf = b"".join(parts)
    positions = scan_batches(buf).positions
    rows = producer_batches(buf, positions, chunk=7)
    assert len(rows) == 3 * NUM_BATCHES_TO_RETAIN
    assert list(rows["base_offset"]) == sorted(rows["base_offset"])
    assert set(rows["producer_id"].tolist()) == {5, 6, big}
    assert (rows == producer_batches(buf, positions)).all()
    got = ProducerStateManager()
    for r in rows.tolist():
        h = dict(zip(rows.dtype.names, r, strict=True))
        got.load_batch(h["producer_id"], h["producer_epoch"], h["base_sequence"],
                       h["last_offset_delta"], h["base_offset"])
    assert got.producers == expected.producers
    assert got.producers[6].epoch == 1 and len(got.producers[6].batches) == NUM_BATCHES_TO_RETAIN
    assert len(producer_batches(buf, positions[3::4])) == 0  # only plain batches there
