"""OutputPool hands an array out again only when nothing else holds it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from native.out_pool import OutputPool


def test_reuse_only_after_every_holder_let_go():
    pool = OutputPool(depth=2)
    a = pool.take("x", 100, np.int64)
    a[:] = 7
    arrow = pa.array(a[:50], pa.int64())  # zero-copy: holds the array
    del a
    b = pool.take("x", 100, np.int64)  # the first is inside an Arrow array: a second one
    assert not np.shares_memory(b, arrow.to_numpy())
    b_at = b.__array_interface__["data"][0]
    del b
    c = pool.take("x", 90, np.int64)  # the second is free again
    assert c.__array_interface__["data"][0] == b_at and c.shape == (90,)
    assert arrow.to_pylist() == [7] * 50  # never written over
    del arrow, c
    d = pool.take("x", 100, np.int64)
    assert pool.reused == 2 and pool.allocated == 2 and d.dtype == np.int64


def test_ring_full_gives_fresh_arrays_and_small_ones_are_replaced():
    pool = OutputPool(depth=2)
    held = [pool.take("x", 10, np.uint8) for _ in range(4)]  # more than the ring holds
    assert pool.allocated == 4
    for i, h in enumerate(held):
        h[:] = i
    assert [int(h[0]) for h in held] == [0, 1, 2, 3]
    del held
    big = pool.take("x", 1000, np.uint8)  # ring entries free but too small: replaced
    assert big.shape == (1000,) and pool.allocated == 5
    other = pool.take("y", 10, np.int32)  # names do not share
    assert not np.shares_memory(big, other)
    with pytest.raises(ValueError):
        OutputPool(depth=0)
