"""send_many's value columns (producer._Columns): the same batch cuts as the value-by-value
loop, and values it cannot take as bytes go the general way."""

from __future__ import annotations

import array
import random

import pytest

from appliance.client.producer import BATCH_OVERHEAD, RECORD_OVERHEAD, _Columns


def _loop_cuts(values: list[bytes], limit: int) -> list[tuple[list[bytes], int]]:
    """send_many's general loop, as the reference."""
    out, chunk, size = [], [], BATCH_OVERHEAD
    for v in values:
        rs = RECORD_OVERHEAD + len(v)
        if chunk and size + rs > limit:
            out.append((chunk, size))
            chunk, size = [], BATCH_OVERHEAD
        chunk.append(v)
        size += rs
    if chunk:
        out.append((chunk, size))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_cuts_match_the_value_loop(seed):
    rng = random.Random(seed)
    values = [rng.randbytes(rng.choice([0, 1, 10, 100, 900, 5000])) for _ in range(rng.randint(1, 3000))]
    limit = rng.choice([200, 1000, 16384, 1 << 20])
    cols = _Columns.of(values)
    got = [(part.to_list(), size) for part, size in cols.chunks(limit - BATCH_OVERHEAD)]
    assert got == _loop_cuts(values, limit)


def test_bytes_like_values_are_taken_others_are_not():
    cols = _Columns.of([b"ab", bytearray(b"cd"), memoryview(b"efg"), b""])
    assert cols is not None and cols.to_list() == [b"ab", b"cd", b"efg", b""]
    assert _Columns.of([b"a", None]) is None
    assert _Columns.of([b"a", "text"]) is None
    assert _Columns.of([memoryview(array.array("i", [1, 2]))]) is None  # 2 items, 8 bytes
    assert _Columns.of([]) is None
