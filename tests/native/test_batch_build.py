"""The bulk batch builder against its twin, appliance.records.build_batch (byte for byte)."""

import random

import numpy as np
import pytest

from appliance.records.batch import build_batch, decode_batch, validate_batch
from native.batch_build import _CRC_RUN, build_batch_columns, max_batch_size


def _columns(items):
    data = b"".join(items)
    off = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(x) for x in items], out=off[1:])
    return np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8), off


@pytest.mark.parametrize("n,with_keys", [(1, False), (7, True), (500, False), (300, True)])
def test_byte_identical_to_the_python_builder(n, with_keys):
    rng = random.Random(n)
    values = [rng.randbytes(rng.choice([0, 1, 63, 64, 100, 200, 5000])) for _ in range(n)]
    keys = [None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 70)) for _ in range(n)]
    ts = 1_790_000_000_000
    vbuf, voff = _columns(values)
    kw = {}
    if with_keys:
        kbuf, koff = _columns([k or b"" for k in keys])
        kw = {"keys": kbuf, "key_offsets": koff, "key_null": np.array([k is None for k in keys])}
    ours = build_batch_columns(vbuf, voff, timestamp=ts, **kw)
    twin = build_batch([((keys[i] if with_keys else None), values[i]) for i in range(n)], base_timestamp=ts)
    assert ours == twin
    validate_batch(ours)
    assert [r.value for r in decode_batch(ours)[1]] == values


def test_bad_offsets_are_refused():
    with pytest.raises(ValueError):
        build_batch_columns(np.zeros(4, np.uint8), np.array([0, 5], np.int64), timestamp=0)
    with pytest.raises(ValueError):
        build_batch_columns(np.zeros(4, np.uint8), np.array([0], np.int64), timestamp=0)


@pytest.mark.parametrize("voff", [[0, 3, 1, 4], [0, 1000, 10], [2, 4, 3, 4]])
def test_offsets_out_of_order_are_refused_before_writing_past_the_bound(voff):
    """The kernel checks each record's range (the wrapper only the ends): a value range that
    runs backwards or past the last offset is refused before its bytes are copied, so nothing
    lands beyond the size the caller reserved for ``voff[-1] - voff[0]`` value bytes."""
    values = np.arange(1000, dtype=np.uint8)
    off = np.array(voff, np.int64)
    need = max_batch_size(len(voff) - 1, 0, int(off[-1] - off[0]))
    out = np.full(need + 4096, 0xAB, np.uint8)
    with pytest.raises(ValueError, match="value_offsets"):
        build_batch_columns(values, off, timestamp=0, out=out)
    assert (out[need:] == 0xAB).all()


def test_key_offsets_out_of_order_are_refused():
    vbuf, voff = _columns([b"a", b"b", b"c"])
    keys = np.arange(100, dtype=np.uint8)
    koff = np.array([0, 90, 5, 10], np.int64)
    need = max_batch_size(3, 100, 3)
    out = np.full(need + 4096, 0xAB, np.uint8)
    with pytest.raises(ValueError, match="key_offsets"):
        build_batch_columns(vbuf, voff, timestamp=0, keys=keys, key_offsets=koff,
                            key_null=np.zeros(3, np.bool_), out=out)
    assert (out[need:] == 0xAB).all()


def test_a_batch_past_the_crc_run_is_byte_identical():
    """Over ``_CRC_RUN`` bytes the kernel CRCs in runs as it builds; the result must equal the
    twin's one CRC over the whole batch, at and around the run's boundary."""
    for total in (_CRC_RUN - 40, _CRC_RUN, _CRC_RUN + 1, 5 * _CRC_RUN + 17):
        values = [bytes([i % 251]) * 97 for i in range(total // 100 + 1)]
        vbuf, voff = _columns(values)
        ours = build_batch_columns(vbuf, voff, timestamp=7, producer_id=3, base_sequence=9,
                                   producer_epoch=1)
        assert ours == build_batch([(None, v) for v in values], base_timestamp=7, producer_id=3,
                                   producer_epoch=1, base_sequence=9)
        validate_batch(ours)


def test_building_into_a_reused_buffer():
    values = [b"a" * 10, b"", b"bcd"]
    vbuf, voff = _columns(values)
    out = np.zeros(max_batch_size(3, 0, 13), np.uint8)
    view = build_batch_columns(vbuf, voff, timestamp=5, out=out)
    assert bytes(view) == build_batch([(None, v) for v in values], base_timestamp=5)
    with pytest.raises(ValueError):
        build_batch_columns(vbuf, voff, timestamp=5, out=np.zeros(10, np.uint8))


@pytest.mark.parametrize("n", [1, 9, 400])
def test_per_record_timestamps_byte_identical_to_the_python_builder(n):
    from appliance.records import Record
    rng = random.Random(n + 1)
    values = [rng.randbytes(rng.choice([0, 5, 100, 300])) for _ in range(n)]
    keys = [None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 20)) for _ in range(n)]
    t0 = 1_790_000_000_000
    # mostly rising send times, some steps back (a clock change) and large jumps (varint widths)
    ts = [t0 + rng.choice([0, 1, 3, -2, 70, 20_000, -400_000]) * i for i in range(n)]
    vbuf, voff = _columns(values)
    kbuf, koff = _columns([k or b"" for k in keys])
    ours = build_batch_columns(vbuf, voff, timestamp=ts[0], keys=kbuf, key_offsets=koff,
                               key_null=np.array([k is None for k in keys]),
                               timestamp_deltas=np.array(ts, np.int64) - ts[0])
    twin = build_batch([Record(i, ts[i], keys[i], values[i]) for i in range(n)])
    assert ours == twin
    assert [r.timestamp for r in decode_batch(ours)[1]] == ts
