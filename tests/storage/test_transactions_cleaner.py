"""The log cleaner with transactions (KIP-98 "Log compaction", Kafka's CleanedTransactionMetadata),
and the last stable offset when the log start passes an open transaction: real segment files,
injected broker time.

The read_committed oracle below is the consumer's algorithm (Kafka's Fetcher): walk the batches
below the LSO in order with the aborted transactions of the ``.txnindex`` files; a producer
whose aborted transaction starts at or below a batch is skipped until its ABORT marker."""

from __future__ import annotations

import os

from appliance.broker.disk.partition import Partition
from appliance.records import batch_layout as L
from appliance.records.batch import build_batch, decode_batch, iter_batches
from appliance.records.control import marker_of_record
from appliance.storage import txn_index

from .conftest import Clock, all_records
from .test_cleaner import DAY, _open

A, B, C, D, OPEN = 101, 102, 103, 104, 105  # producer ids


class Txn:
    """One transactional producer writing to the log (sequences and epoch kept)."""

    def __init__(self, lg, pid: int, clock: Clock) -> None:
        self.lg, self.pid, self.clock, self.seq = lg, pid, clock, 0

    def send(self, pairs: list[tuple[bytes, bytes]]) -> int:
        info = self.lg.append(build_batch(pairs, base_timestamp=self.clock.now, producer_id=self.pid,
                                          producer_epoch=0, base_sequence=self.seq,
                                          is_transactional=True))
        self.seq += len(pairs)
        return info.first_offset

    def end(self, commit: bool) -> int:
        info, _ = self.lg.append_marker(self.pid, 0, commit, 0)
        return info.first_offset


def _plain(lg, clock, pairs) -> None:
    lg.append(build_batch(pairs, base_timestamp=clock.now))


def _batches(lg) -> list[tuple]:
    """(header, records) of every batch of the log, in order."""
    out = []
    for s in lg.segments():
        with open(s.segment.log_path, "rb") as f:
            data = f.read()
        for pos, _ in iter_batches(data):
            out.append(decode_batch(data, pos))
    return out


def _aborted(lg) -> list[txn_index.AbortedTxn]:
    return [e for s in lg.segments() for e in txn_index.read_entries(s.segment.txn_index_path)]


def read_committed(lg, lso: int) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) a read_committed consumer gets from the whole log."""
    pending = sorted(_aborted(lg), key=lambda t: t.first_offset)
    aborting: set[int] = set()
    out = []
    for h, recs in _batches(lg):
        if h.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= h.base_offset + h.last_offset_delta:
            aborting.add(pending.pop(0).producer_id)
        if h.attributes & L.CONTROL_BIT:
            if not marker_of_record(h, recs[0].key, recs[0].value).commit:
                aborting.discard(h.producer_id)
            continue
        if h.attributes & L.TRANSACTIONAL_BIT and h.producer_id in aborting:
            continue
        out.extend((r.offset, r.key, r.value) for r in recs if r.offset < lso)
    return out


def _latest(records) -> dict[bytes, tuple[int, bytes | None]]:
    return {k: (o, v) for o, k, v in records}


def _markers(lg) -> dict[int, int]:
    """offset -> producer id of every marker in the log."""
    return {h.base_offset: h.producer_id for h, _ in _batches(lg) if h.attributes & L.CONTROL_BIT}


def _lso(lg) -> int:
    lg.high_watermark = lg.log_end_offset  # a standalone leader: the HW is the log end
    first = lg.producers.first_unstable_offset(lg.high_watermark)
    return lg.high_watermark if first is None else max(first, lg.log_start_offset)


def _clean(d, lg, now: int) -> int:
    lso = _lso(lg)
    d.cleaner.clean_all(d.partitions, now)
    return lso


def test_committed_aborted_and_open_transactions_are_cleaned_by_kafka_rules(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"delete.retention.ms": DAY})
    a, b, c, dd, op = (Txn(lg, p, clock) for p in (A, B, C, D, OPEN))
    # A commits k0..k3, all overwritten later by plain writes: its batches go, then its marker
    a.send([(b"k%d" % i, b"a-committed") for i in range(4)])
    # B aborts k0..k5 interleaved with A, then commits k6 (so its last batch is committed)
    b.send([(b"k%d" % i, b"b-aborted") for i in range(6)])
    a_marker = a.end(True)
    b.send([(b"k9", b"b-aborted-2")])
    b_abort = b.end(False)
    b.send([(b"k6", b"b-committed")])
    b.end(True)
    # C commits k7, never overwritten: its batch and marker stay
    c.send([(b"k7", b"c-committed")])
    c_marker = c.end(True)
    lg.roll()
    _plain(lg, clock, [(b"k%d" % i, b"plain-1") for i in range(4)])
    a.send([(b"ka", b"a-committed-2")])  # A's last batch (kept whole for its sequence state)
    a.end(True)
    # D aborts as its last write: the cleaner keeps a producer's last batch (its sequence
    # state), so the batch, its marker and the marker's index entry all stay
    dd.send([(b"k8", b"d-aborted")])
    d_abort = dd.end(False)
    lg.roll()
    # OPEN opens a transaction and leaves it open, with plain data after it in later segments
    open_first = op.send([(b"k0", b"open"), (b"k7", b"open")])
    _plain(lg, clock, [(b"k1", b"after-open")])
    lg.roll()
    _plain(lg, clock, [(b"k2", b"after-open-2")])
    lg.roll()
    _plain(lg, clock, [(b"k3", b"active")])

    lso = _clean(d, lg, clock.now)
    assert lso == open_first
    recs = {r.offset: r for r in all_records(lg)}
    values = {r.value for r in recs.values()}
    # aborted records are gone, except D's last batch (kept for its producer state)
    assert b"b-aborted" not in values and b"b-aborted-2" not in values
    assert d.cleaner.stats.aborted_removed == 7
    assert b"d-aborted" in values
    # nothing at or above the LSO was touched
    for o in (open_first, open_first + 1, open_first + 2):
        assert o in recs
    assert recs[open_first].value == b"open" and recs[open_first + 2].value == b"after-open"
    # committed data follows compaction: A's records superseded by plain-1 are gone
    assert b"a-committed" not in values and b"c-committed" in values
    # markers stay (the delete horizon has not passed); every ABORT marker kept has its entry
    markers = _markers(lg)
    assert {a_marker, b_abort, c_marker, d_abort} <= set(markers)
    assert {(e.producer_id, e.last_offset) for e in _aborted(lg)} == {(B, b_abort), (D, d_abort)}
    # read_committed: the committed records, latest per key below the LSO
    got = _latest(read_committed(lg, lso))
    assert got[b"k6"] == (got[b"k6"][0], b"b-committed")
    assert got[b"k7"][1] == b"c-committed"
    assert b"k8" not in got and b"k9" not in got  # aborted, D's batch is still on disk
    assert {k: v for k, (_, v) in got.items()} == {
        b"k0": b"plain-1", b"k1": b"plain-1", b"k2": b"plain-1", b"k3": b"plain-1",
        b"k6": b"b-committed", b"k7": b"c-committed", b"ka": b"a-committed-2"}

    # The open transaction commits; a pass before the delete horizon keeps every marker
    op.end(True)
    _plain(lg, clock, [(b"k5", b"more")])
    lg.roll()
    lso = _clean(d, lg, clock.now)
    assert lso == lg.log_end_offset
    assert {a_marker, b_abort, c_marker, d_abort} <= set(_markers(lg))
    # Past delete.retention.ms: A's and B's markers go (no batch of theirs is left), C's and D's
    # stay (their batches are still there), and D's entry with its marker
    clock.now += DAY + 1
    _plain(lg, clock, [(b"k5", b"later")])
    lg.roll()
    lso = _clean(d, lg, clock.now)
    markers = _markers(lg)
    assert a_marker not in markers and b_abort not in markers
    assert c_marker in markers and d_abort in markers
    assert d.cleaner.stats.markers_removed >= 2
    assert [(e.producer_id, e.last_offset) for e in _aborted(lg)] == [(D, d_abort)]
    got = {k: v for k, (_, v) in _latest(read_committed(lg, lso)).items()}
    assert got[b"k0"] == b"open" and got[b"k7"] == b"open" and got[b"k6"] == b"b-committed"
    assert got[b"k5"] == b"later" and b"k8" not in got
    # the cleaned files survive a reopen: the index and the open/closed state are the same
    d.close()
    d, lg = _open(tmp_path, clock)
    assert [(e.producer_id, e.last_offset) for e in _aborted(lg)] == [(D, d_abort)]
    assert {k: v for k, (_, v) in _latest(read_committed(lg, _lso(lg))).items()} == got
    assert not [n for n in os.listdir(lg.path) if n.endswith((".cleaned", ".swap"))]
    d.close()


def test_cleaning_does_not_change_what_read_committed_reads(tmp_path):
    """The same log cleaned and not: the read_committed view (latest per key) is the same."""
    views = []
    for name, clean in (("raw", False), ("cleaned", True)):
        clock = Clock()
        d, lg = _open(tmp_path / name, clock, **{"delete.retention.ms": DAY})
        producers = [Txn(lg, 200 + i, clock) for i in range(3)]
        for r in range(12):
            for i, p in enumerate(producers):
                p.send([(b"key-%d" % ((r + i) % 5), b"r%d-p%d" % (r, i))])
            for i, p in enumerate(producers):
                p.end(commit=(r + i) % 3 != 0)
            if r % 2:
                _plain(lg, clock, [(b"key-%d" % (r % 5), b"plain-%d" % r)])
            if r % 3 == 2:
                lg.roll()
        producers[0].send([(b"key-9", b"last")])  # an open transaction at the end
        lg.roll()
        lso = _lso(lg)
        if clean:
            d.cleaner.clean_all(d.partitions, clock.now + 2 * DAY)
            assert d.cleaner.stats.aborted_removed > 0
        views.append((_latest(read_committed(lg, lso)), len(all_records(lg))))
        d.close()
    (raw, n_raw), (cleaned, n_cleaned) = views
    assert cleaned == raw and n_cleaned < n_raw
    assert b"key-9" not in raw


def test_lso_never_below_the_log_start_when_delete_records_passes_an_open_transaction(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"cleanup.policy": "delete"})
    t = Txn(lg, A, clock)
    _plain(lg, clock, [(b"x", b"0"), (b"x", b"1")])       # 0-1
    first = t.send([(b"t", b"open-1")])                   # 2: opens the transaction
    _plain(lg, clock, [(b"x", b"3")])                      # 3 (another producer)
    lg.roll()
    t.send([(b"t", b"open-2")])                            # 4
    lg.high_watermark = lg.log_end_offset
    p = Partition(0, lg, broker_id=0)
    assert first == 2 and p.last_stable_offset == 2
    # DeleteRecords past the transaction's first offset (Kafka allows up to the HW)
    lg.maybe_increment_log_start_offset(3)
    assert p.last_stable_offset == 3                       # max(first unstable, log start)
    lg.maybe_increment_log_start_offset(4)
    lg.delete_oldest_while(lambda s, nxt: nxt is not None and nxt.base_offset <= 4, "test")
    assert lg.log_start_offset == 4 and p.last_stable_offset == 4
    # aborting it: the entry keeps the transaction's real first offset, readers from the log
    # start skip what is left of it, and the LSO moves on to the HW
    t.end(False)
    lg.high_watermark = lg.log_end_offset
    assert p.last_stable_offset == lg.log_end_offset == 6
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in _aborted(lg)] == [(A, 2, 5)]
    assert read_committed(lg, p.last_stable_offset) == []
    # retention deletes the segment holding the ABORT marker: its entry goes with it
    _plain(lg, clock, [(b"x", b"6")])
    lg.roll()
    lg.high_watermark = lg.log_end_offset
    lg.delete_oldest_while(lambda s, nxt: nxt is not None and nxt.size == 0, "test")
    assert lg.log_start_offset == 7 and _aborted(lg) == []
    assert not [n for n in os.listdir(lg.path) if n.endswith(".txnindex")]
    assert p.last_stable_offset == 7
    d.close()
