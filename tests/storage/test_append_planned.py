"""The planned append (one native call per request) against the general path: the same files,
the same AppendInfos, the same errors, on real segment files."""

from __future__ import annotations

import multiprocessing
import os
import random
import resource
import signal

import pytest

from appliance.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OutOfOrderSequenceError,
)
from appliance.records.batch import build_batch
from appliance.storage.log import PartitionLog, wall_ms

from .conftest import Clock, all_records, batch, cfg, open_log


def _requests(seed: int, idempotent: bool) -> list[bytes | bytearray]:
    rng = random.Random(seed)
    out, seq = [], 0
    for i in range(120):
        parts, base = [], 0
        for _ in range(rng.choice([1, 1, 2, 5, 70])):  # 70: the array (vector) index path
            n = rng.randint(1, 6)
            kw = dict(producer_id=9, producer_epoch=0, base_sequence=seq) if idempotent else {}
            seq += n
            b = bytearray(build_batch([(b"k", rng.randbytes(rng.randrange(1, 120))) for _ in range(n)],
                                      base_timestamp=1_700_000_000_000 + rng.randrange(-5000, 5000), **kw))
            b[:8] = base.to_bytes(8, "big")  # batches of one request: increasing offsets
            base += n
            parts.append(bytes(b))
        req = b"".join(parts)
        out.append(bytearray(req) if i % 2 else req)  # writable (ring) and read-only (bytes)
    return out


def _files(path: str) -> dict[str, bytes]:
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith((".log", ".index", ".timeindex")):
            with open(os.path.join(path, f), "rb") as fh:
                out[f] = fh.read()
    return out


@pytest.mark.parametrize("idempotent", [False, True])
def test_planned_and_general_paths_write_the_same_log(tmp_path, idempotent):
    config = cfg(segment_bytes=64 * 1024)  # rolls in the middle of the run
    infos, files = [], []
    for planned in (True, False):
        path = os.path.join(str(tmp_path), f"t{int(planned)}-0")
        lg = open_log(path, config, clock=Clock())
        lg._plannable = planned
        got = []
        for i, req in enumerate(_requests(3, idempotent)):
            got.append(lg.append(bytes(req) if isinstance(req, bytes) else bytearray(req)))
            if idempotent and i % 17 == 5 and got[-1].num_batches == 1:
                # a retried request (the broker keeps the last 5 batches): a duplicate
                got.append(lg.append(bytes(req)))
        assert len(lg.segments()) > 2
        lg.close()
        infos.append(got)
        files.append(_files(path))
    assert infos[0] == infos[1]
    assert files[0] == files[1]
    if idempotent:
        assert any(i.duplicate for i in infos[0])


def test_planned_path_refuses_what_the_general_path_refuses(log_path):
    lg = open_log(log_path)
    assert lg._plannable
    lg.append(build_batch([(b"k", b"v")] * 3, producer_id=4, producer_epoch=1, base_sequence=0))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(build_batch([(b"k", b"v")], producer_id=4, producer_epoch=1, base_sequence=7))
    with pytest.raises(InvalidProducerEpochError):
        lg.append(build_batch([(b"k", b"v")], producer_id=4, producer_epoch=0, base_sequence=3))
    assert lg.log_end_offset == 3
    buf = bytearray(build_batch([(b"k", b"v")] * 2))
    info = lg.append(buf)
    assert (info.first_offset, info.last_offset, info.duplicate) == (3, 4, False)
    assert int.from_bytes(buf[:8], "big") == 3  # rewritten in place, after the checks


def _many_batches(n: int) -> bytes:
    parts = []
    for i in range(n):
        b = bytearray(build_batch([(b"k", b"v%d" % i)], base_timestamp=1_700_000_000_000 + i))
        b[:8] = i.to_bytes(8, "big")
        parts.append(bytes(b))
    return b"".join(parts)


def test_read_only_request_of_more_batches_than_one_writev_takes(tmp_path):
    # 600 batches: two pieces each, more than IOV_MAX (1024) pieces, so two writev calls
    req = _many_batches(600)
    first = build_batch([(b"k", b"first")], base_timestamp=1_700_000_000_000)
    files = []
    for planned in (True, False):
        path = os.path.join(str(tmp_path), f"t{int(planned)}-0")
        lg = open_log(path, cfg(index_interval_bytes=1), clock=Clock())
        lg._plannable = planned
        lg.append(first)
        info = lg.append(req)
        assert (info.first_offset, info.last_offset, info.num_batches) == (1, 600, 600)
        lg.close()
        files.append(_files(path))
    assert files[0] == files[1]


def _append_past_file_size_limit(path: str, conn) -> None:
    """In a child process: appends that cross RLIMIT_FSIZE (write gives a short count, then
    EFBIG) must raise KafkaStorageError and leave the log as it was."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    out = []
    try:
        lg = open_log(path, cfg(index_interval_bytes=1))
        lg.append(batch(2, value_size=100))
        size = lg.active_segment.size
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 300, hard))
        one = batch(5, value_size=200)  # ~1.1 KB: 300 bytes fit, then EFBIG
        three = b"".join(k.to_bytes(8, "big") + one[8:] for k in (0, 5, 10))
        for req in (one, bytearray(one), three, bytearray(three)):
            try:
                lg.append(req)
                out.append("appended")
            except KafkaStorageError as e:
                out.append(str(e))
            seg = lg.active_segment
            out.append((lg.log_end_offset, seg.size, os.path.getsize(seg.log_path),
                        seg.offset_index.entries, seg.time_index.entries))
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        out.append(lg.append(one).first_offset)
        out.append([r.offset for r in all_records(lg)])
        lg.close()
    except BaseException as e:  # report, do not hang the parent
        out.append(repr(e))
    conn.send(out)
    conn.close()


def test_failed_write_raises_and_leaves_the_log_as_it_was(tmp_path):
    path = os.path.join(str(tmp_path), "t-0")
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_append_past_file_size_limit, args=(path, child))
    p.start()
    assert parent.poll(60)
    out = parent.recv()
    p.join(10)
    assert p.exitcode == 0
    first_state = None
    for i in range(4):
        msg, state = out[2 * i], out[2 * i + 1]
        assert msg.startswith("write to ") and "File too large" in msg, out
        if first_state is None:
            first_state = state
        assert state == first_state, out  # nothing moved: LEO, size, file cut back, indexes
        assert state[0] == 2 and state[1] == state[2]
    assert out[8] == 2
    assert out[9] == list(range(7)), out


def test_kernel_reads_the_wall_clock_like_wall_ms(log_path):
    # without an injected clock the append kernel reads clock_gettime itself: the roll clock
    # and the timestamp limit must see the same time Python's wall_ms would
    lg = PartitionLog.open(log_path, cfg(message_timestamp_difference_max_ms=60_000))
    assert lg._kernel_clock
    before = wall_ms()
    lg.append(batch(2, ts=before))
    after = wall_ms()
    assert before <= lg.active_segment.first_append_ms <= after
    with pytest.raises(InvalidTimestampError):
        lg.append(batch(2, ts=after - 120_000))
    with pytest.raises(InvalidTimestampError):
        lg.append(batch(2, ts=wall_ms() + 120_000))
    info = lg.append(batch(2, ts=wall_ms() - 30_000))
    assert (info.first_offset, lg.log_end_offset) == (2, 4)
    lg.close()


def test_follower_appends_keep_offsets_the_same_both_ways(tmp_path):
    # a follower appends what its leader stored, offsets kept (assign_offsets=False): the
    # leader's log read back in slices, appended planned and general, gives the same files
    leader = open_log(os.path.join(str(tmp_path), "leader-0"), cfg(), clock=Clock())
    for req in _requests(5, False)[:40]:
        leader.append(req)
    slices, off = [], 0
    while off < leader.log_end_offset:
        data = leader.read_bytes(off, 3000)
        slices.append(data)
        off = all_records_end(data)
    leader.close()
    files = []
    for planned in (True, False):
        path = os.path.join(str(tmp_path), f"f{int(planned)}-0")
        lg = open_log(path, cfg(segment_bytes=16 * 1024), clock=Clock())
        lg._plannable = planned
        for data in slices:
            lg.append(data, assign_offsets=False)
        with pytest.raises(InvalidRecordError):  # offsets below the log end: refused
            lg.append(slices[-1], assign_offsets=False)
        assert len(lg.segments()) > 1
        lg.close()
        files.append(_files(path))
    assert files[0] == files[1]


def all_records_end(data: bytes) -> int:
    """The offset after the last batch of ``data`` (whole v2 batches)."""
    pos, end = 0, 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        end = int.from_bytes(data[pos:pos + 8], "big") + int.from_bytes(
            data[pos + 23:pos + 27], "big") + 1
        pos += size
    return end
