"""Log cleaner: one test per compaction guarantee, on real files, with injected broker time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from appliance.config import BrokerConfig, TopicConfig
from appliance.errors import InvalidRecordError
from appliance.records import batch_layout as L
from appliance.records.batch import build_batch, decode_records, iter_batches, validate_batch
from appliance.records.record_types import Compression
from appliance.storage.checkpoint import read_checkpoint
from appliance.storage.cleaner_manager import CLEANER_OFFSET_CHECKPOINT
from appliance.storage.log_dir import LogDir

from .conftest import Clock, all_records

TOPIC = "compacted"
DAY = 86_400_000


def _broker(root, **kw) -> BrokerConfig:
    ov = {"log.dirs": str(root), "log.writeback.mode": "os", "log.cleaner.backoff.ms": "0"}
    ov.update({k: str(v) for k, v in kw.items()})
    return BrokerConfig.load(overrides=ov)


def _topic(bc: BrokerConfig, **kw) -> TopicConfig:
    ov = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
          "file.delete.delay.ms": "0", "segment.index.bytes": "4096", "index.interval.bytes": "256"}
    ov.update({k: str(v) for k, v in kw.items()})
    return TopicConfig.from_overrides(bc, ov)


def _open(root, clock, broker_kw=None, **topic_kw):
    bc = _broker(root, **(broker_kw or {}))
    d = LogDir.open(str(root), bc, now_ms=clock)
    if (TOPIC, 0) not in d.partitions:
        d.create_partition(TOPIC, 0, _topic(bc, **topic_kw))
    return d, d.partitions[(TOPIC, 0)]


def _produce(lg, clock, rounds: int, keys: int, *, value_size: int = 40, per_batch: int = 1,
             compression=Compression.NONE, tag: str = "") -> dict[bytes, tuple[int, bytes | None]]:
    """Write ``rounds`` values of each key; returns key -> (offset, value) of the latest."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    pending: list[tuple[bytes, bytes]] = []

    def flush() -> None:
        info = lg.append(build_batch(pending, base_timestamp=clock.now, compression=compression))
        for i, (k, v) in enumerate(pending):
            latest[k] = (info.first_offset + i, v)
        pending.clear()

    for r in range(rounds):
        for k in range(keys):
            key = b"key-%04d" % k
            pending.append((key, (b"%s-r%d-" % (tag.encode(), r) + key).ljust(value_size, b".")))
            if len(pending) == per_batch:
                flush()
    if pending:
        flush()
    return latest


def _state(lg) -> dict[bytes, tuple[int, bytes | None]]:
    return {r.key: (r.offset, r.value) for r in all_records(lg)}


def _segment_bytes(seg) -> bytes:
    with open(seg.log_path, "rb") as f:
        return f.read()


# -- guarantees -----------------------------------------------------------------------------

def test_latest_value_of_every_key_order_and_offsets(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock)
    latest = _produce(lg, clock, rounds=8, keys=30)
    latest.update(_produce(lg, clock, rounds=2, keys=10, per_batch=4, tag="b"))
    before = all_records(lg)
    size_before = lg.size_bytes
    active = lg.active_segment
    active_bytes = _segment_bytes(active)
    assert len(lg.segments()) > 5
    d.cleaner.clean_all(d.partitions, clock.now)
    after = all_records(lg)
    # exactly one record per key, the latest, at its original offset
    assert {r.key: (r.offset, r.value) for r in after} == {
        k: v for k, v in latest.items() if v[0] < active.base_offset} | {
        r.key: (r.offset, r.value) for r in before if r.offset >= active.base_offset}
    assert len({r.key for r in after if r.offset < active.base_offset}) == len(
        [r for r in after if r.offset < active.base_offset])
    offsets = [r.offset for r in after]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # every surviving record is byte-identical to what was written at that offset
    orig = {r.offset: r for r in before}
    assert all(orig[r.offset] == r for r in after)
    assert lg.size_bytes < size_before / 3
    # the active segment is untouched
    assert lg.active_segment is active and _segment_bytes(active) == active_bytes
    cp = read_checkpoint(os.path.join(str(tmp_path), CLEANER_OFFSET_CHECKPOINT))
    assert cp == {(TOPIC, 0): active.base_offset}
    # the result survives a reopen (indexes valid, nothing left over)
    d.close()
    d, lg = _open(tmp_path, clock)
    assert all_records(lg) == after
    assert not [n for n in os.listdir(lg.path) if n.endswith((".cleaned", ".swap", ".deleted"))]
    d.close()


def test_compacted_batches_keep_offsets_with_gaps(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock)
    _produce(lg, clock, rounds=4, keys=8, per_batch=8)  # each batch holds every key once
    # the same keys, half of them again, in batches mixing kept and superseded records
    lg.append(build_batch([(b"key-%04d" % k, b"new") for k in range(0, 8, 2)],
                          base_timestamp=clock.now))
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    data = lg.read_bytes(0, 1 << 20)
    kept = []
    for pos, h in iter_batches(data):
        validate_batch(data, pos, contiguous_offsets=False)
        kept.append(h)
    # the last 8-key batch lost its even keys but kept its base offset: an offset gap
    last8 = [h for h in kept if h.base_offset == 24][0]
    recs = [r for r in decode_records(data) if 24 <= r.offset < 32]
    assert [r.offset for r in recs] == [25, 27, 29, 31] and last8.records_count == 4
    d.close()


def test_tombstones_kept_before_delete_retention_and_removed_after(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"delete.retention.ms": DAY})
    _produce(lg, clock, rounds=3, keys=10)
    for k in (1, 2):
        lg.append(build_batch([(b"key-%04d" % k, None)], base_timestamp=clock.now))
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    state = _state(lg)
    assert state[b"key-0001"][1] is None and state[b"key-0002"][1] is None  # kept: young
    assert len(state) == 10
    clock.now += DAY + 1
    _produce(lg, clock, rounds=1, keys=1, tag="late")  # something dirty for the next pass
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    state = _state(lg)
    assert b"key-0001" not in state and b"key-0002" not in state
    assert len(state) == 8 and d.cleaner.stats.tombstones_removed == 2
    d.close()


def test_dirty_ratio_below_threshold_means_no_cleaning(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"min.cleanable.dirty.ratio": "0.5"})
    _produce(lg, clock, rounds=10, keys=20)
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    assert d.cleaner.stats.passes == 1
    clean_size = lg.size_bytes
    # a little dirty data: ratio well under 0.5
    _produce(lg, clock, rounds=1, keys=3, tag="x")
    lg.roll()
    c = d.cleaner.manager.cleanable((TOPIC, 0), lg, clock.now)
    assert 0 < c.dirty_ratio < 0.5
    files = sorted(os.listdir(lg.path))
    d.cleaner.clean_all(d.partitions, clock.now)
    assert d.cleaner.stats.passes == 1 and sorted(os.listdir(lg.path)) == files
    # enough dirty data to pass the ratio: cleaned
    _produce(lg, clock, rounds=4, keys=20, tag="y")
    lg.roll()
    assert d.cleaner.manager.cleanable((TOPIC, 0), lg, clock.now).dirty_ratio >= 0.5
    d.cleaner.clean_all(d.partitions, clock.now)
    assert d.cleaner.stats.passes == 2 and lg.size_bytes < clean_size * 2
    d.close()


def test_throttle_honoured(tmp_path):
    rate = 4 << 20

    def timed(sub: str, **broker_kw) -> tuple[float, int]:
        clock = Clock()
        d, lg = _open(tmp_path / sub, clock, broker_kw,
                      **{"segment.bytes": str(256 << 10), "segment.index.bytes": str(1 << 16)})
        _produce(lg, clock, rounds=2, keys=1000, value_size=1000, per_batch=20)  # ~2 MB
        lg.roll()
        t0 = time.monotonic()
        while d.cleaner.stats.passes == 0:
            d.run_periodic(clock.now)
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        io = d.cleaner.stats.io_bytes
        assert len(_state(lg)) == 1000
        d.close()
        return elapsed, io

    free, _ = timed("free")
    elapsed, io = timed("slow", **{"log.cleaner.io.max.bytes.per.second": rate})
    assert io > 2 << 20
    # at most one burst (0.25 s of tokens) and one step's overshoot (a 1-MiB chunk) ahead
    assert elapsed >= max(0.4, (io - rate * 0.25 - (2 << 20)) / rate)
    assert elapsed > free + 0.3


def test_small_dedupe_buffer_cleans_the_prefix_then_the_rest(tmp_path):
    clock = Clock()
    # capacity = 2400 // 24 * 0.9 = 90 keys
    d, lg = _open(tmp_path, clock, {"log.cleaner.dedupe.buffer.size": 2400})
    latest = _produce(lg, clock, rounds=2, keys=200, per_batch=5)
    lg.roll()
    uncleanable = lg.active_segment.base_offset
    d.cleaner.run(d.partitions, clock.now, max_bytes=1 << 40, max_seconds=60)
    while d.cleaner.busy:
        d.cleaner.run(d.partitions, clock.now, max_bytes=1 << 40, max_seconds=60)
    cp = read_checkpoint(os.path.join(str(tmp_path), CLEANER_OFFSET_CHECKPOINT))[(TOPIC, 0)]
    assert 0 < cp < uncleanable  # only the prefix that fit in the map
    assert cp == 90  # the 91st distinct key stopped the map
    d.cleaner.clean_all(d.partitions, clock.now)
    cp = read_checkpoint(os.path.join(str(tmp_path), CLEANER_OFFSET_CHECKPOINT))[(TOPIC, 0)]
    assert cp == uncleanable and d.cleaner.stats.passes >= 3
    assert _state(lg) == latest
    assert len(all_records(lg)) == 200
    d.close()


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_cleaned_and_recompressed(tmp_path, codec):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"segment.bytes": "2048"})
    latest = _produce(lg, clock, rounds=5, keys=12, per_batch=5, compression=codec, value_size=200)
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    assert _state(lg) == latest and len(all_records(lg)) == 12
    data = lg.read_bytes(0, 1 << 20)
    heads = [h for _, h in iter_batches(data)]
    assert heads and all(h.attributes & L.COMPRESSION_MASK == codec for h in heads)
    assert d.cleaner.stats.records_removed > 0
    d.close()


def test_null_key_refused_in_compacted_topic(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock)
    leo = lg.log_end_offset
    with pytest.raises(InvalidRecordError, match="without key"):
        lg.append(build_batch([(b"k", b"v"), (None, b"v")], base_timestamp=clock.now))
    assert lg.log_end_offset == leo
    bc = _broker(tmp_path / "other")
    d2 = LogDir.open(str(tmp_path / "other"), bc, now_ms=clock)
    plain = d2.create_partition("plain", 0, TopicConfig.from_overrides(bc, {}))
    plain.append(build_batch([(None, b"v")], base_timestamp=clock.now))  # delete policy: fine
    d.close()
    d2.close()


def test_idempotent_producer_last_batch_survives(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock)
    for seq in range(6):
        lg.append(build_batch([(b"same", b"v%d" % seq)], base_timestamp=clock.now,
                              producer_id=7, producer_epoch=0, base_sequence=seq))
    _produce(lg, clock, rounds=3, keys=5)  # supersedes nothing of pid 7 but fills segments
    lg.append(build_batch([(b"same", b"other")], base_timestamp=clock.now))
    lg.roll()
    d.cleaner.clean_all(d.partitions, clock.now)
    recs = all_records(lg)
    # the producer's last batch (seq 5, offset 5) is kept although "same" was overwritten
    assert [r.offset for r in recs if r.key == b"same"] == [5, lg.log_end_offset - 1]
    d.close()
    d, lg = _open(tmp_path, clock)
    assert lg.producers.producers[7].last_seq == 5
    d.close()


def test_cleaning_aborts_when_the_log_changes_between_steps(tmp_path):
    clock = Clock()
    d, lg = _open(tmp_path, clock)
    latest = _produce(lg, clock, rounds=6, keys=30)
    lg.roll()
    d.cleaner.run(d.partitions, clock.now, max_bytes=1, max_seconds=60)  # one chunk
    assert d.cleaner.busy
    lg.truncate_to(lg.log_end_offset - 5)
    d.cleaner.run(d.partitions, clock.now)
    assert not d.cleaner.busy and d.cleaner.stats.aborted == 1
    assert not [n for n in os.listdir(lg.path) if n.endswith(".cleaned")]
    d.cleaner.clean_all(d.partitions, clock.now)
    state = _state(lg)
    assert len(state) == 30 and all(state[k] == latest[k] for k in state if latest[k][0] < lg.log_end_offset)
    d.close()


# -- crash in the middle of a cleaning ------------------------------------------------------

# The child process kills itself with SIGKILL when the cleaner reaches ``step`` (set through the
# cleaner's step observer, so the crash lands exactly in that window of the real code path).
_CHILD = r"""
import os, signal, sys
from appliance.config import BrokerConfig
from appliance.storage.log_dir import LogDir
root, now, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bc = BrokerConfig.load(overrides={"log.dirs": root, "log.writeback.mode": "os",
                                  "log.cleaner.backoff.ms": "0"})
d = LogDir.open(root, bc, now_ms=lambda: now)

def kill_at(name):
    if name == step:
        os.kill(os.getpid(), signal.SIGKILL)

d.cleaner.on_step = kill_at
d.cleaner.clean_all(d.partitions, now)
print("finished")
"""


@pytest.mark.parametrize("step", ["cleaning", "cleaned", "swap", "deleted", "swapped", "checkpoint"])
def test_sigkill_mid_cleaning_leaves_a_valid_log(tmp_path, step):
    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"segment.bytes": "8192"})
    latest = _produce(lg, clock, rounds=6, keys=40, per_batch=3)
    lg.roll()
    before = all_records(lg)
    d.close()
    p = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(clock.now), step],
                       capture_output=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()[-2000:]
    names = os.listdir(os.path.join(str(tmp_path), f"{TOPIC}-0"))
    if step in ("cleaned", "swap"):
        assert any(".cleaned" in n or ".swap" in n for n in names)
    d, lg = _open(tmp_path, clock)
    recs = all_records(lg)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)  # no duplicates
    assert {r.key: (r.offset, r.value) for r in recs} == latest  # every key's latest value
    orig = {r.offset: r for r in before}
    assert all(orig[r.offset] == r for r in recs)  # nothing invented or altered
    assert not [n for n in os.listdir(lg.path) if n.endswith((".cleaned", ".swap"))]
    # and the next cleaning finishes the job
    d.cleaner.clean_all(d.partitions, clock.now)
    assert {r.key: (r.offset, r.value) for r in all_records(lg)} == latest
    assert len(all_records(lg)) == len(latest)
    d.close()


def test_reader_in_another_process_sees_the_cleaned_segment(tmp_path):
    from appliance.storage.reader import LogReader

    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"segment.bytes": "100000"})  # one group -> same base name
    latest = _produce(lg, clock, rounds=5, keys=20)
    lg.roll()
    reader = LogReader(lg.path)
    assert len(decode_records(reader.read_bytes(0, 1 << 20))) == 100  # opens segment 0
    d.cleaner.clean_all(d.partitions, clock.now)
    recs = decode_records(reader.read_bytes(0, 1 << 20))
    assert {r.key: (r.offset, r.value) for r in recs} == latest and len(recs) == 20
    reader.close()
    d.close()


# -- the real broker ------------------------------------------------------------------------

def test_broker_compacts_a_topic_end_to_end(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    from tests.broker.clients import create_topic
    from tests.broker_process import BrokerProcess

    with BrokerProcess(tmp_path, overrides={"log.cleaner.backoff.ms": "200"}) as b:
        create_topic(b.bootstrap, "cmp", 1, {"cleanup.policy": "compact", "segment.bytes": "4096",
                                            "min.cleanable.dirty.ratio": "0.01",
                                            "segment.ms": "500", "file.delete.delay.ms": "0"})
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        latest = {}
        for r in range(20):
            for k in range(25):
                v = b"r%02d-k%02d-" % (r, k) + b"x" * 60
                p.produce("cmp", v, b"key-%02d" % k, partition=0)
                latest[b"key-%02d" % k] = v
            p.flush(10)
        with pytest.raises(Exception, match="without key|INVALID_RECORD|Invalid"):
            errs = []
            p.produce("cmp", b"v", None, partition=0, on_delivery=lambda e, m: errs.append(e))
            p.flush(10)
            if errs and errs[0] is not None:
                raise RuntimeError(str(errs[0]))
        time.sleep(1.0)  # segment.ms passes: the next append rolls the active segment
        p.produce("cmp", latest[b"key-00"], b"key-00", partition=0)
        p.flush(10)

        def read_all() -> list:
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t", "enable.auto.commit": False,
                          "enable.partition.eof": True})
            c.assign([TopicPartition("cmp", 0, 0)])
            out = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        break
                    raise RuntimeError(m.error())
                out.append((m.offset(), m.key(), m.value()))
            c.close()
            return out

        deadline = time.monotonic() + 40
        recs = read_all()
        while time.monotonic() < deadline and len(recs) > 26:
            time.sleep(0.5)
            recs = read_all()
        keys = [k for _, k, _ in recs]
        assert len(recs) <= 26, f"not compacted: {len(recs)} records"
        assert {k: v for _, k, v in recs} == latest
        assert set(keys) == set(latest) and recs[0][0] > 0  # offsets kept (gaps from 0)
        assert [o for o, _, _ in recs] == sorted(o for o, _, _ in recs)


@pytest.mark.parametrize("version", ["0.8.2", "0.10.2"])
def test_legacy_format_topic_is_compacted_in_its_own_magic(tmp_path, version):
    """A compacted topic stored as magic 0/1 entries: the latest value per key survives at its
    offset, a wrapper that loses some messages is rewritten as a wrapper of the same magic and
    codec, a tombstone (null value) supersedes its key's value."""
    from appliance.records.legacy import iter_entries
    from native.scan import scan_batches

    clock = Clock()
    d, lg = _open(tmp_path, clock, **{"message.format.version": version, "delete.retention.ms": DAY})
    latest = _produce(lg, clock, rounds=4, keys=8, per_batch=8, compression=Compression.GZIP)
    latest.update(_produce(lg, clock, rounds=1, keys=4, tag="b"))  # plain messages, keys 0-3
    info = lg.append(build_batch([(b"key-0007", None)], base_timestamp=clock.now))
    latest[b"key-0007"] = (info.first_offset, None)
    lg.roll()
    clock.now += 1
    d.cleaner.clean_all(d.partitions, clock.now)
    data = lg.read_bytes(0, 1 << 20)
    r = scan_batches(data, legacy=True, verify_crc=True)
    assert {data[int(p) + 16] for p in r.positions} == {int(version == "0.10.2")}
    entries = list(iter_entries(data))
    got = {m.key: (m.offset, m.value) for e in entries for m in e.messages}
    assert got == latest
    # the last gzip wrapper (offsets 24-31) kept keys 4-6 only, with their offsets, still gzip
    wrapper = [e for e in entries if e.compression == Compression.GZIP][-1]
    assert [m.offset for m in wrapper.messages] == [28, 29, 30]
    d.close()
    d, lg = _open(tmp_path, clock, **{"message.format.version": version})
    assert {m.key: (m.offset, m.value) for e in iter_entries(lg.read_bytes(0, 1 << 20))
            for m in e.messages} == latest
    d.close()


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_cleaner_threads_bound_the_passes_under_way(tmp_path, threads):
    """log.cleaner.threads: 0 cleans nothing; N lets up to N partitions of the log dir be in a
    pass at once, their steps taking turns, each with 1/N of the dedupe buffer."""
    clock = Clock()
    d, lg = _open(tmp_path, clock, {"log.cleaner.threads": threads})
    bc = _broker(tmp_path, **{"log.cleaner.threads": threads})
    other = d.create_partition(TOPIC, 1, _topic(bc))
    for plog in (lg, other):
        _produce(plog, clock, rounds=30, keys=50, value_size=200)
        plog.roll()
    sizes = (lg.size_bytes, other.size_bytes)
    most = 0
    for _ in range(10_000):
        d.cleaner.run(d.partitions, clock.now, max_bytes=16 << 10)
        most = max(most, len(d.cleaner.passes))
        if d.cleaner.idle and not d.cleaner.busy or threads == 0:
            break
    assert most == min(threads, 2)
    assert d.cleaner.stats.passes == (2 if threads else 0)
    cleaned = (lg.size_bytes < sizes[0], other.size_bytes < sizes[1])
    assert cleaned == ((True, True) if threads else (False, False))
    if threads:
        assert d.cleaner.map_bytes == int(bc["log.cleaner.dedupe.buffer.size"]) // threads
    d.close()


def test_io_buffer_size_and_load_factor(tmp_path):
    """log.cleaner.io.buffer.size: bytes read at a time (split between the passes; here smaller
    than a batch, which is then read whole); log.cleaner.io.buffer.load.factor: how many keys
    the offset map holds."""
    clock = Clock()
    broker_kw = {"log.cleaner.io.buffer.size": 8192, "log.cleaner.threads": 2,
                 "log.cleaner.io.buffer.load.factor": 0.5, "log.cleaner.dedupe.buffer.size": 48_000}
    d, lg = _open(tmp_path, clock, broker_kw)
    assert d.cleaner.read_bytes == 4096 and d.cleaner.load_factor == 0.5
    latest = _produce(lg, clock, rounds=3, keys=200, value_size=100, per_batch=50)  # ~5 KB batches
    lg.roll()
    d.cleaner.run(d.partitions, clock.now, max_bytes=1)
    assert d.cleaner.current.map.capacity == 48_000 // 2 // 24 * 0.5 == 500
    d.cleaner.clean_all(d.partitions, clock.now)
    assert _state(lg) == latest
    d.close()
